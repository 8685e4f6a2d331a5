/* hlofuse_math.h: vectorisable elementary functions for generated kernels.
 *
 * Every function is `static inline`, calls nothing and has no branches: special
 * cases are computed alongside the main path and picked with selects, so that
 * `for (i...) y[i] = hlofuse_sinf(x[i]);` vectorises with gcc -O3 -march=native
 * without -ffast-math.
 *
 * float32 functions compute in double and round once at the end, so they are
 * within ~0.5 ulp (the measured bounds are in hlofuse/codegen/mathlib/__init__.py).
 * Their range reduction for sin/cos/tan is exact over the whole float range: the
 * float input has 24 significant bits, so its product with each 29-bit piece of
 * 2/pi is exact in double, and each product is reduced modulo 4 exactly.
 * hlofuse_sinf_small and hlofuse_cosf_small are the exception: they compute in float
 * (twice the vector width of double) and are valid only up to |x| = 2^18, with a
 * Cody-Waite reduction kept as a float pair and minimax polynomials, within 0.9 ulp.
 *
 * float64 functions keep double throughout. hlofuse_sin/cos/tan reduce with a
 * three-piece pi/2 (Cody-Waite, fma) and are accurate for |x| < 2^50 (about
 * 1.1e15, where adjacent doubles are already 0.25 apart); beyond that they return
 * NaN rather than a silently wrong value. The float64 functions use fma; on a
 * target without hardware fma they stay correct but do not vectorise.
 *
 * Nothing here depends on the FTZ/DAZ bits: with DAZ a subnormal float input
 * reads as a signed zero, with FTZ a subnormal result is flushed, as the hardware
 * would do for the same operation. pow is the exception: it reads its operands
 * exactly whatever DAZ says (as a C library's pow does), and hlofuse_pow_cpuf
 * reads them as XLA's CPU code does (see there).
 *
 * Error-free steps rely only on exact products, Sterbenz subtractions and TwoSum,
 * so they hold whether or not the compiler contracts a*b+c into fma.
 */
#ifndef HLOFUSE_MATH_H
#define HLOFUSE_MATH_H

#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define HLOFUSE_MATH_FN static inline __attribute__((always_inline, unused))
#define HLOFUSE__RINT(x) __builtin_rint(x)
#define HLOFUSE__RINTF(x) __builtin_rintf(x)
#define HLOFUSE__FMA(a, b, c) __builtin_fma((a), (b), (c))
#define HLOFUSE__FMAF(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#include <math.h>
#define HLOFUSE_MATH_FN static inline
#define HLOFUSE__RINT(x) rint(x)
#define HLOFUSE__RINTF(x) rintf(x)
#define HLOFUSE__FMA(a, b, c) fma((a), (b), (c))
#define HLOFUSE__FMAF(a, b, c) fmaf((a), (b), (c))
#endif

/* Polynomial steps use fma where the target has it, whatever -ffp-contract says:
 * one rounding instead of two, and half the instructions. */
#if defined(__FMA__) || defined(__FP_FAST_FMA)
#define HLOFUSE__MADD(a, b, c) HLOFUSE__FMA((a), (b), (c))
#else
#define HLOFUSE__MADD(a, b, c) ((a) * (b) + (c))
#endif

/* float sin and cos compute in float where fmaf is an instruction (their range reduction
 * needs its exact products), in double elsewhere. */
#if defined(__FMA__) || defined(__FP_FAST_FMAF)
#define HLOFUSE__HAS_FMAF 1
#define HLOFUSE__MADDF(a, b, c) HLOFUSE__FMAF((a), (b), (c))
#else
#define HLOFUSE__HAS_FMAF 0
#define HLOFUSE__MADDF(a, b, c) ((a) * (b) + (c))
#endif

/* ---------------------------------------------------------------- bit access */

HLOFUSE_MATH_FN uint64_t hlofuse__bits64(double x) {
    union { double d; uint64_t u; } v;
    v.d = x;
    return v.u;
}

HLOFUSE_MATH_FN double hlofuse__from_bits64(uint64_t u) {
    union { double d; uint64_t u; } v;
    v.u = u;
    return v.d;
}

HLOFUSE_MATH_FN uint32_t hlofuse__bits32(float x) {
    union { float f; uint32_t u; } v;
    v.f = x;
    return v.u;
}

HLOFUSE_MATH_FN float hlofuse__from_bits32(uint32_t u) {
    union { float f; uint32_t u; } v;
    v.u = u;
    return v.f;
}

/* Branch-free selects. gcc (without -ffast-math) sinks work used by only one arm
 * of `c ? a : b` into a conditional block and then refuses to if-convert it,
 * because floating-point operations may trap; blending the bit patterns uses
 * both arms on every path, so the loop stays vectorisable. For the same reason
 * conditions are combined with & and |, never && and || (an ordered comparison
 * may trap, so gcc will not evaluate it speculatively). */
HLOFUSE_MATH_FN double hlofuse__sel(int c, double a, double b) {
    uint64_t m = (uint64_t)0 - (uint64_t)(c != 0);
    return hlofuse__from_bits64((hlofuse__bits64(a) & m) | (hlofuse__bits64(b) & ~m));
}

HLOFUSE_MATH_FN float hlofuse__self(int c, float a, float b) {
    uint32_t m = (uint32_t)0 - (uint32_t)(c != 0);
    return hlofuse__from_bits32((hlofuse__bits32(a) & m) | (hlofuse__bits32(b) & ~m));
}

/* Gives y the sign bit of x (for odd functions evaluated on |x|). */
HLOFUSE_MATH_FN float hlofuse__with_sign_of_f(float y, float x) {
    return hlofuse__from_bits32(hlofuse__bits32(y) ^ (hlofuse__bits32(x) & 0x80000000u));
}

HLOFUSE_MATH_FN double hlofuse__with_sign_of(double y, double x) {
    return hlofuse__from_bits64(hlofuse__bits64(y) ^ (hlofuse__bits64(x) & 0x8000000000000000ull));
}

HLOFUSE_MATH_FN double hlofuse__abs(double x) {
    return hlofuse__from_bits64(hlofuse__bits64(x) & 0x7fffffffffffffffull);
}

/* 1.5 * 2^52: adding it rounds a double of magnitude < 2^51 to an integer held in
 * the low mantissa bits (two's complement), without a double -> int conversion
 * (which AVX2 lacks for 64-bit lanes). */
#define HLOFUSE__SHIFT52 0x1.8p52

/* 2^j for an integer-valued double j in [-1022, 1023]. */
HLOFUSE_MATH_FN double hlofuse__pow2(double j) {
    uint64_t k = hlofuse__bits64(j + HLOFUSE__SHIFT52);
    return hlofuse__from_bits64((k + 1023u) << 52);
}

/* --------------------------------------------------------------- constants */

#define HLOFUSE__INV_LN2 0x1.71547652b82fep+0
/* ln2 = LN2_HI + LN2_LO (fdlibm's split); LN2_HI has 32 significant bits, so k * LN2_HI
 * is exact for |k| < 2^21 and x - k * LN2_HI is exact (Sterbenz) when k = rint(x / ln2). */
#define HLOFUSE__LN2_HI 0x1.62e42fee00000p-1
#define HLOFUSE__LN2_LO 0x1.a39ef35793c76p-33
#define HLOFUSE__LN2 0x1.62e42fefa39efp-1
#define HLOFUSE__PIO2 0x1.921fb54442d18p+0
#define HLOFUSE__PI 0x1.921fb54442d18p+1
#define HLOFUSE__PIO4 0x1.921fb54442d18p-1
#define HLOFUSE__2_OVER_PI 0x1.45f306dc9c883p-1

/* ------------------------------------------- double cores at float accuracy */

/* exp(x) for x in [-160, 90]; relative error below 2^-36. Taylor to degree 9 on
 * |r| <= ln2/2: the dropped term is r^10/10! < 7e-12. */
HLOFUSE_MATH_FN double hlofuse__exp_fcore(double x) {
    double kd = HLOFUSE__RINT(x * HLOFUSE__INV_LN2);
    double r = (x - kd * HLOFUSE__LN2_HI) - kd * HLOFUSE__LN2_LO;
    double p = 1.0 / 362880.0;
    p = HLOFUSE__MADD(p, r, 1.0 / 40320.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 5040.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 720.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 120.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 24.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 6.0);
    p = HLOFUSE__MADD(p, r, 0.5);
    p = 1.0 + (r + r * r * p);
    return p * hlofuse__pow2(kd);
}

/* expm1(x) for x in [-40, 90]; relative error below 2^-38. With k = 0 the result
 * is the polynomial itself, so it stays accurate for tiny x. */
HLOFUSE_MATH_FN double hlofuse__expm1_fcore(double x) {
    double kd = HLOFUSE__RINT(x * HLOFUSE__INV_LN2);
    double r = (x - kd * HLOFUSE__LN2_HI) - kd * HLOFUSE__LN2_LO;
    double p = 1.0 / 39916800.0;
    p = HLOFUSE__MADD(p, r, 1.0 / 3628800.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 362880.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 40320.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 5040.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 720.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 120.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 24.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 6.0);
    p = HLOFUSE__MADD(p, r, 0.5);
    p = r + r * r * p;
    /* 2^k * p + (2^k - 1), scaled by 1/2 so that 2^(k-1) stays finite at k = 128. */
    double s = hlofuse__pow2(kd - 1.0);
    return (s * p + (s - 0.5)) * 2.0;
}

/* Splits a positive finite normal double into x = 2^k * z, z in [sqrt(1/2), sqrt(2)).
 * Uses only 64-bit logical shifts, masks and adds (all available on AVX2). */
HLOFUSE_MATH_FN double hlofuse__log_split(double x, double *k) {
    const uint64_t off = 0x3fe6a09e667f3bcdull; /* bits of sqrt(1/2) */
    uint64_t ix = hlofuse__bits64(x);
    uint64_t tmp = ix - off;
    uint64_t top = tmp >> 52; /* k mod 4096 */
    double kd = hlofuse__from_bits64(0x4330000000000000ull | top) - 0x1p52;
    *k = hlofuse__sel(kd >= 2048.0, kd - 4096.0, kd);
    return hlofuse__from_bits64(ix - (tmp & 0xfff0000000000000ull));
}

/* log(x) for positive finite normal double x; relative error below 2^-40.
 * log(1+f) = f - f^2/2 + s*(f^2/2 + R(s^2)), s = f/(2+f) (as in fdlibm), with R the
 * atanh series truncated after s^14: the dropped term is below 2^-44 relative. */
HLOFUSE_MATH_FN double hlofuse__log_fcore(double x) {
    double kd;
    double z = hlofuse__log_split(x, &kd);
    double f = z - 1.0;
    double s = f / (2.0 + f);
    double s2 = s * s;
    double hfsq = 0.5 * f * f;
    double r = 2.0 / 15.0;
    r = HLOFUSE__MADD(r, s2, 2.0 / 13.0);
    r = HLOFUSE__MADD(r, s2, 2.0 / 11.0);
    r = HLOFUSE__MADD(r, s2, 2.0 / 9.0);
    r = HLOFUSE__MADD(r, s2, 2.0 / 7.0);
    r = HLOFUSE__MADD(r, s2, 2.0 / 5.0);
    r = HLOFUSE__MADD(r, s2, 2.0 / 3.0);
    r = r * s2;
    return kd * HLOFUSE__LN2 + (f - (hfsq - s * (hfsq + r)));
}

/* log(x * 2^kextra) for positive finite normal double x, to double accuracy. */
HLOFUSE_MATH_FN double hlofuse__log_dcore(double x, double kextra) {
    double kd;
    double z = hlofuse__log_split(x, &kd);
    kd += kextra;
    double f = z - 1.0;
    double s = f / (2.0 + f);
    double s2 = s * s;
    double hfsq = 0.5 * f * f;
    double r = 2.0 / 25.0;
    r = HLOFUSE__MADD(r, s2, 2.0 / 23.0);
    r = HLOFUSE__MADD(r, s2, 2.0 / 21.0);
    r = HLOFUSE__MADD(r, s2, 2.0 / 19.0);
    r = HLOFUSE__MADD(r, s2, 2.0 / 17.0);
    r = HLOFUSE__MADD(r, s2, 2.0 / 15.0);
    r = HLOFUSE__MADD(r, s2, 2.0 / 13.0);
    r = HLOFUSE__MADD(r, s2, 2.0 / 11.0);
    r = HLOFUSE__MADD(r, s2, 2.0 / 9.0);
    r = HLOFUSE__MADD(r, s2, 2.0 / 7.0);
    r = HLOFUSE__MADD(r, s2, 2.0 / 5.0);
    r = HLOFUSE__MADD(r, s2, 2.0 / 3.0);
    r = r * s2;
    return kd * HLOFUSE__LN2_HI - ((hfsq - (s * (hfsq + r) + kd * HLOFUSE__LN2_LO)) - f);
}

/* 1/sqrt(x) for positive finite normal double x: a bit-pattern seed (relative error
 * below 3.5e-2) and `steps` Newton steps, each squaring the error (3 steps: 2^-35). */
HLOFUSE_MATH_FN double hlofuse__rsqrt_newton(double x, int steps) {
    double r = hlofuse__from_bits64(0x5fe6eb50c7b537a9ull - (hlofuse__bits64(x) >> 1));
    double hx = 0.5 * x;
    for (int i = 0; i < steps; i++) {
        r = r * (1.5 - hx * r * r);
    }
    return r;
}

/* cbrt(x) for positive finite normal double x: x = 2^(3q) * v, v in [0.5, 4), a
 * quadratic seed (relative error below 3.7e-2) and `steps` Halley steps, each
 * cubing the error (2 steps: below 1e-12; 3 steps: rounding level). */
HLOFUSE_MATH_FN double hlofuse__cbrt_halley(double x, int steps) {
    uint64_t ix = hlofuse__bits64(x);
    double e = hlofuse__from_bits64(0x4330000000000000ull | (ix >> 52)) - 0x1p52 - 1023.0;
    double q = HLOFUSE__RINT(e * (1.0 / 3.0));
    double m = hlofuse__from_bits64((ix & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
    double v = m * hlofuse__pow2(e - 3.0 * q);
    double y = HLOFUSE__MADD(HLOFUSE__MADD(-0.04035, v, 0.39331), v, 0.63631);
    for (int i = 0; i < steps; i++) {
        double y3 = y * y * y;
        y = y * (y3 + 2.0 * v) / (2.0 * y3 + v);
    }
    return y * hlofuse__pow2(q);
}

/* atan(t) for |t| <= tan(pi/8) as t + t^3 P(t^2); P is a weighted least-squares fit,
 * relative error below 2^-40. */
HLOFUSE_MATH_FN double hlofuse__atan_fpoly(double t) {
    double z = t * t;
    double p = -0x1.360ecc6310e1fp-5;
    p = HLOFUSE__MADD(p, z, 0x1.1e2c3b804c57fp-4);
    p = HLOFUSE__MADD(p, z, -0x1.7077410b2d020p-4);
    p = HLOFUSE__MADD(p, z, 0x1.c6d090341ebd5p-4);
    p = HLOFUSE__MADD(p, z, -0x1.2490b87a303fdp-3);
    p = HLOFUSE__MADD(p, z, 0x1.999991aeedd5fp-3);
    p = HLOFUSE__MADD(p, z, -0x1.5555554e7c900p-2);
    return t + t * z * p;
}

/* ------------------------------------------------ float sin/cos/tan support */

/* A reduced argument: x = r + q * pi/2 (mod 2 pi), q in {0, 1, 2, 3}. */
typedef struct {
    double r;
    double q;
} hlofuse__reduced;

/* One 29-bit piece c of 2/pi: p = ax * c is exact (24 + 29 bits), and so is
 * a = p mod 4 (in [-2, 2]). a is split into hi, a multiple of 2^-24 (so that all the
 * hi parts add up exactly), and the exact remainder lo, |lo| <= 2^-25. */
#define HLOFUSE__REDUCE_PIECE(c)                                    \
    do {                                                            \
        double p_ = ax * (c);                                       \
        double a_ = p_ - 4.0 * HLOFUSE__RINT(p_ * 0.25);            \
        double hi_ = (a_ + 0x1.8p28) - 0x1.8p28;                    \
        hi += hi_;                                                  \
        lo += a_ - hi_;                                             \
    } while (0)

/* Reduces ax = |x| (x a float, exact in double) modulo pi/2 over the whole float
 * range. The seven pieces cover 2/pi down to 2^-203, so for ax < 2^128 the
 * neglected tail is below 2^-75. The fifth product is below 2^12, so it needs no
 * reduction modulo 4 before its split, and the last two are below 2^-19 and go
 * straight into lo; lo's rounding errors stay below 2^-68, while no float above pi/4
 * lies closer than 2^-29.86 (in units of pi/2) to a multiple of pi/2 (found by
 * scanning every float: x = 0x1.f37c8ap+95). */
HLOFUSE_MATH_FN hlofuse__reduced hlofuse__reduce_pio2_f(double ax) {
    double hi = 0.0, lo = 0.0;
    HLOFUSE__REDUCE_PIECE(341782637.0 * 0x1p-29);
    HLOFUSE__REDUCE_PIECE(423170132.0 * 0x1p-58);
    HLOFUSE__REDUCE_PIECE(352195499.0 * 0x1p-87);
    HLOFUSE__REDUCE_PIECE(488592205.0 * 0x1p-116);
    double p4 = ax * (461485765.0 * 0x1p-145);
    double p4_hi = (p4 + 0x1.8p28) - 0x1.8p28;
    hi += p4_hi;
    lo += (p4 - p4_hi) + (ax * (90590992.0 * 0x1p-174) + ax * (478285810.0 * 0x1p-203));
    double n = HLOFUSE__RINT(hi);
    double frac = (hi - n) + lo;
    double q = n - 4.0 * HLOFUSE__RINT(n * 0.25);
    hlofuse__reduced out;
    out.r = frac * HLOFUSE__PIO2;
    out.q = hlofuse__sel(q < 0.0, q + 4.0, q);
    return out;
}

#undef HLOFUSE__REDUCE_PIECE

/* sin(r), |r| <= pi/4 (1 + 2^-20); Taylor to r^11, dropped term < 1e-11 relative. */
HLOFUSE_MATH_FN double hlofuse__sin_fpoly(double r) {
    double z = r * r;
    double p = -1.0 / 39916800.0;
    p = HLOFUSE__MADD(p, z, 1.0 / 362880.0);
    p = HLOFUSE__MADD(p, z, -1.0 / 5040.0);
    p = HLOFUSE__MADD(p, z, 1.0 / 120.0);
    p = HLOFUSE__MADD(p, z, -1.0 / 6.0);
    return r + r * z * p;
}

/* cos(r), |r| <= pi/4 (1 + 2^-20); Taylor to r^12, dropped term < 5e-13. */
HLOFUSE_MATH_FN double hlofuse__cos_fpoly(double r) {
    double z = r * r;
    double p = 1.0 / 479001600.0;
    p = HLOFUSE__MADD(p, z, -1.0 / 3628800.0);
    p = HLOFUSE__MADD(p, z, 1.0 / 40320.0);
    p = HLOFUSE__MADD(p, z, -1.0 / 720.0);
    p = HLOFUSE__MADD(p, z, 1.0 / 24.0);
    p = HLOFUSE__MADD(p, z, -0.5);
    return 1.0 + z * p;
}

/* ------------------------------------------------------ double-accuracy cores */

/* exp(x) for x in [-746, 710]. r + c = x - k ln2 carries the rounding error of the
 * reduction; Taylor to degree 13 on |r| <= ln2/2 (dropped term below 2^-57); the
 * scale 2^k is applied in two halves so that subnormal results round only once. */
HLOFUSE_MATH_FN double hlofuse__exp_dcore(double x) {
    double kd = HLOFUSE__RINT(x * HLOFUSE__INV_LN2);
    double hi = x - kd * HLOFUSE__LN2_HI;
    double lo = kd * HLOFUSE__LN2_LO;
    double r = hi - lo;
    double c = (hi - r) - lo;
    double p = 1.0 / 6227020800.0;
    p = HLOFUSE__MADD(p, r, 1.0 / 479001600.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 39916800.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 3628800.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 362880.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 40320.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 5040.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 720.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 120.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 24.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 6.0);
    p = HLOFUSE__MADD(p, r, 0.5);
    double y = 1.0 + (r + (r * r * p + (c + c * r)));
    double k1 = HLOFUSE__RINT(0.5 * kd);
    return (y * hlofuse__pow2(k1)) * hlofuse__pow2(kd - k1);
}

/* expm1(x) for x in [-45, 710]: 2^k (1 + p) - 1 with p = expm1(r + c), Taylor to
 * degree 14; with k = 0 the result is p itself, accurate for tiny x. */
HLOFUSE_MATH_FN double hlofuse__expm1_dcore(double x) {
    double kd = HLOFUSE__RINT(x * HLOFUSE__INV_LN2);
    double hi = x - kd * HLOFUSE__LN2_HI;
    double lo = kd * HLOFUSE__LN2_LO;
    double r = hi - lo;
    double c = (hi - r) - lo;
    double p = 1.0 / 87178291200.0;
    p = HLOFUSE__MADD(p, r, 1.0 / 6227020800.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 479001600.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 39916800.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 3628800.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 362880.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 40320.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 5040.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 720.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 120.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 24.0);
    p = HLOFUSE__MADD(p, r, 1.0 / 6.0);
    p = HLOFUSE__MADD(p, r, 0.5);
    p = r + (r * r * p + c * (1.0 + r));
    double s = hlofuse__pow2(kd - 1.0);
    return (s * p + (s - 0.5)) * 2.0;
}

/* Reduces ax = |x| modulo pi/2 for ax < 2^50: r = hi + lo with about 2^-100 relative
 * accuracy. pi/2 = P1 + P2 + P3 + P4 (53-bit pieces); ax - n P1 is exact (Sterbenz),
 * n P2 is split exactly with fma, and the sum is kept double-double. */
HLOFUSE_MATH_FN double hlofuse__reduce_pio2_d(double ax, double *lo_out, double *q_out) {
    const double p1 = 0x1.921fb54442d18p+0, p2 = 0x1.1a62633145c07p-54;
    const double p3 = -0x1.f1976b7ed8fbcp-110, p4 = 0x1.4cf98e804177dp-164;
    double n = HLOFUSE__RINT(ax * HLOFUSE__2_OVER_PI);
    double r1 = HLOFUSE__FMA(-n, p1, ax);
    double t2 = n * p2;
    double t2_err = HLOFUSE__FMA(n, p2, -t2);
    double s = r1 - t2;
    double b = s - r1;
    double s_err = (r1 - (s - b)) - (t2 + b);
    double lo = s_err - (t2_err + HLOFUSE__FMA(n, p3, n * p4));
    double hi = s + lo;
    *lo_out = lo - (hi - s);
    double q = n - 4.0 * HLOFUSE__RINT(n * 0.25);
    *q_out = hlofuse__sel(q < 0.0, q + 4.0, q);
    return hi;
}

/* sin(hi + lo), |hi| <= pi/4 (1 + 2^-40), |lo| < 2^-52 |hi|; Taylor to degree 17. */
HLOFUSE_MATH_FN double hlofuse__sin_dpoly(double hi, double lo) {
    double z = hi * hi;
    double p = 1.0 / 355687428096000.0;
    p = HLOFUSE__MADD(p, z, -1.0 / 1307674368000.0);
    p = HLOFUSE__MADD(p, z, 1.0 / 6227020800.0);
    p = HLOFUSE__MADD(p, z, -1.0 / 39916800.0);
    p = HLOFUSE__MADD(p, z, 1.0 / 362880.0);
    p = HLOFUSE__MADD(p, z, -1.0 / 5040.0);
    p = HLOFUSE__MADD(p, z, 1.0 / 120.0);
    p = HLOFUSE__MADD(p, z, -1.0 / 6.0);
    return hi + (hi * z * p + lo * (1.0 - 0.5 * z));
}

/* cos(hi + lo) likewise; Taylor to degree 16, 1 - z/2 summed in two parts (as in
 * fdlibm's __kernel_cos) so that the result is good to about half an ulp. */
HLOFUSE_MATH_FN double hlofuse__cos_dpoly(double hi, double lo) {
    double z = hi * hi;
    double p = 1.0 / 20922789888000.0;
    p = HLOFUSE__MADD(p, z, -1.0 / 87178291200.0);
    p = HLOFUSE__MADD(p, z, 1.0 / 479001600.0);
    p = HLOFUSE__MADD(p, z, -1.0 / 3628800.0);
    p = HLOFUSE__MADD(p, z, 1.0 / 40320.0);
    p = HLOFUSE__MADD(p, z, -1.0 / 720.0);
    p = HLOFUSE__MADD(p, z, 1.0 / 24.0);
    double hz = 0.5 * z;
    double w = 1.0 - hz;
    return w + (((1.0 - w) - hz) + (z * z * p - hi * lo));
}

/* ------------------------------------------------ float sin and cos, in float */

/* |x| up to this limit takes the float path of hlofuse_sinf and hlofuse_cosf, and is
 * where hlofuse_sinf_small and hlofuse_cosf_small are accurate. */
#define HLOFUSE_TRIGF_SMALL_LIMIT 0x1p18f

/* A reduced argument: |x| = k pi/2 + hi + lo, |lo| < 2^-24, q = k mod 4 in its two low
 * bits. */
typedef struct {
    float hi;
    float lo;
    uint32_t q;
} hlofuse__reducedf;

#if HLOFUSE__HAS_FMAF
/* Cody-Waite reduction of ax = |x| <= HLOFUSE_TRIGF_SMALL_LIMIT in float, pi/2 = P1 + P2 + P3
 * (float pieces, 2^-76 left over). k = rint(ax 2/pi) comes out of adding 1.5 * 2^23 (exact
 * for k < 2^22; q is then its low bits). With fma, ax - k P1 is exact: k P1 and ax are
 * multiples of 2^-24 and the difference is below 1. k |P2| = ph + pl exactly (fma), and
 * hi + err = (ax - k P1) + ph exactly (TwoSum); pl and k P3 are below 2^-30 |ph| and join
 * lo. k can round the wrong way where ax 2/pi is within its float rounding of a half: an
 * exhaustive check found |hi| <= pi/4 + 2^-6.5. */
HLOFUSE_MATH_FN hlofuse__reducedf hlofuse__reduce_pio2_small(float ax) {
    float t = HLOFUSE__FMAF(ax, 0x1.45f306p-1f, 0x1.8p23f);
    float k = t - 0x1.8p23f;
    float r1 = HLOFUSE__FMAF(-k, 0x1.921fb6p+0f, ax);
    float ph = k * 0x1.777a5cp-25f;
    float pl = HLOFUSE__FMAF(k, 0x1.777a5cp-25f, -ph);
    float hi = r1 + ph;
    float bb = hi - r1;
    float err = (r1 - (hi - bb)) + (ph - bb);
    hlofuse__reducedf out;
    out.hi = hi;
    out.lo = err + HLOFUSE__FMAF(k, 0x1.ee59dap-50f, pl);
    out.q = hlofuse__bits32(t);
    return out;
}
#endif

/* sin(hi + lo) for |hi| <= pi/4 (1 + 2^-6), |lo| < 2^-24: hi + hi^3 P(hi^2) + lo, P a
 * minimax fit on that interval (relative error 2^-27.7). */
HLOFUSE_MATH_FN float hlofuse__sin_kernelf(float hi, float lo) {
    float z = hi * hi;
    float p = -0x1.98fd4ap-13f;
    p = HLOFUSE__MADDF(p, z, 0x1.11066ap-7f);
    p = HLOFUSE__MADDF(p, z, -0x1.555544p-3f);
    return hi + HLOFUSE__MADDF(hi * z, p, lo);
}

/* cos(hi + lo) likewise: 1 - z/2 + z^2 Q(z) - hi lo (Q a minimax fit, relative error
 * 2^-32.7), with w = 1 - z/2 rounded and its rounding error (1 - w) - z/2, exact, added back
 * (fdlibm's way), so that only the last addition rounds at the result's scale. */
HLOFUSE_MATH_FN float hlofuse__cos_kernelf(float hi, float lo) {
    float z = hi * hi;
    float p = 0x1.99ab10p-16f;
    p = HLOFUSE__MADDF(p, z, -0x1.6c0b52p-10f);
    p = HLOFUSE__MADDF(p, z, 0x1.555548p-5f);
    float hz = 0.5f * z;
    float w = 1.0f - hz;
    return w + (((1.0f - w) - hz) + HLOFUSE__MADDF(p, z * z, -(hi * lo)));
}

/* sin at quadrant q of the reduced argument (s = sin r, c = cos r): s, c, -s, -c; the
 * sign bit `sign` then flips it (sin is odd). cos is the sine one quadrant on. */
HLOFUSE_MATH_FN float hlofuse__quadrantf(float s, float c, uint32_t q, uint32_t sign) {
    float y = hlofuse__self((int)(q & 1u), c, s);
    return hlofuse__from_bits32(hlofuse__bits32(y) ^ ((q & 2u) << 30) ^ sign);
}

/* ------------------------------------------------------- float32 functions */

#define HLOFUSE__INFF __builtin_inff()
#define HLOFUSE__NANF __builtin_nanf("")

#if HLOFUSE__HAS_FMAF
/* exp and expm1 in float arithmetic (8 lanes to a vector where double gives 4; a recurrent
 * policy's sigmoid gates and elu spend most of their time in them), one path for every
 * argument. n = rint(x / ln2) is the shift constant's rounding (its low bits hold n), r =
 * x - n ln2 with ln2 in two pieces (n times the first, of 16 bits, is exact and so is its
 * difference with x), exp(r) = 1 + r + r^2 Q(r) and expm1(r) = r + r^2 Q(r), Q minimax
 * fits on |r| <= ln2/2 (relative error below 2^-27 and 2^-27.8 with float coefficients).
 * exp scales by 2^n in two steps of 2^(n/2), so the result overflows to inf and underflows
 * through subnormals with one rounding; the clamps let a NaN through (comparisons are
 * false). expm1 = 2 (2^(n-1) p + (2^(n-1) - 1/2)), finite up to n = 128 (p itself where
 * n = 0), and its clamp
 * at -18 (where it is -1 in float) keeps 2^(n-1) normal. Within 1.05 ulp (exp) and 1.43 ulp
 * (expm1) over every float. */
HLOFUSE_MATH_FN float hlofuse__exp_reduce_f(float x, int32_t *n) {
    float kf = HLOFUSE__MADDF(x, 0x1.715476p+0f, 0x1.8p23f);
    float nf = kf - 0x1.8p23f;
    *n = (int32_t)(hlofuse__bits32(kf) - 0x4b400000u);
    float r = HLOFUSE__MADDF(nf, -0x1.62e4p-1f, x);
    return HLOFUSE__MADDF(nf, -0x1.7f7d1cp-20f, r);
}

HLOFUSE_MATH_FN float hlofuse_expf(float x) {
    float xc = x > 89.0f ? 89.0f : x;
    xc = xc < -104.0f ? -104.0f : xc;
    int32_t n;
    float r = hlofuse__exp_reduce_f(xc, &n);
    float q = 0x1.6dc4d0p-10f;
    q = HLOFUSE__MADDF(q, r, 0x1.124758p-7f);
    q = HLOFUSE__MADDF(q, r, 0x1.55544ap-5f);
    q = HLOFUSE__MADDF(q, r, 0x1.55547ep-3f);
    q = HLOFUSE__MADDF(q, r, 0x1p-1f);
    float y = 1.0f + HLOFUSE__MADDF(q, r * r, r);
    int32_t half = n >> 1;
    return y * hlofuse__from_bits32((uint32_t)(half + 127) << 23)
             * hlofuse__from_bits32((uint32_t)(n - half + 127) << 23);
}

HLOFUSE_MATH_FN float hlofuse_expm1f(float x) {
    float xc = x > 89.0f ? 89.0f : x;
    xc = xc < -18.0f ? -18.0f : xc;
    int32_t n;
    float r = hlofuse__exp_reduce_f(xc, &n);
    float q = 0x1.a1c8aep-13f;
    q = HLOFUSE__MADDF(q, r, 0x1.6da5f2p-10f);
    q = HLOFUSE__MADDF(q, r, 0x1.111070p-7f);
    q = HLOFUSE__MADDF(q, r, 0x1.55546ep-5f);
    q = HLOFUSE__MADDF(q, r, 0x1.555556p-3f);
    q = HLOFUSE__MADDF(q, r, 0x1p-1f);
    float p = HLOFUSE__MADDF(q, r * r, r);
    float h = hlofuse__from_bits32((uint32_t)(n + 126) << 23);
    float y = 2.0f * HLOFUSE__MADDF(h, p, h - 0.5f);
    /* With n = 0 the result is p itself: halved, a tiny one would flush under FTZ. */
    y = hlofuse__self(n == 0, p, y);
    return hlofuse__self(x == 0.0f, hlofuse__with_sign_of_f(0.0f, x), y);
}
#else
/* exp; overflows to inf above 88.72, underflows through subnormals to 0. The
 * clamps keep the core in range and let a NaN through (comparisons are false). */
HLOFUSE_MATH_FN float hlofuse_expf(float x) {
    double xd = x;
    double xc = hlofuse__sel(xd > 90.0, 90.0, xd);
    xc = hlofuse__sel(xc < -110.0, -110.0, xc);
    return (float)hlofuse__exp_fcore(xc);
}

HLOFUSE_MATH_FN float hlofuse_expm1f(float x) {
    double xd = x;
    double xc = hlofuse__sel(xd > 90.0, 90.0, xd);
    xc = hlofuse__sel(xc < -40.0, -40.0, xc);
    float y = (float)hlofuse__expm1_fcore(xc);
    return hlofuse__self(x == 0.0f, hlofuse__with_sign_of_f(0.0f, x), y);
}
#endif

/* log in float, fdlibm's logf written branch-free: x = 2^k (1 + f) with 1 + f in
 * [sqrt(1/2), sqrt(2)), log(1 + f) = f - (f^2/2 - s (f^2/2 + R)) with s = f / (2 + f) and R
 * fdlibm's degree-4 fit in s^2 (Lg1-Lg4), k ln2 in two parts (ln2_hi has trailing zeros, so
 * k ln2_hi is exact); a subnormal argument is scaled by 2^23 first. Within 0.835 ulp over
 * every positive float (measured exhaustively), about twice as fast as the double form it
 * replaces: two Gumbel logs a lane and action make categorical sampling log-bound. */
HLOFUSE_MATH_FN float hlofuse_logf(float x) {
    int tiny = x < 0x1p-126f;
    float xs = hlofuse__self(tiny, x * 0x1p23f, x);
    int32_t ix = (int32_t)hlofuse__bits32(xs) - 0x3f3504f3;
    int32_t k = (ix >> 23) - (tiny & 1) * 23;
    float f = hlofuse__from_bits32((uint32_t)((ix & 0x007fffff) + 0x3f3504f3)) - 1.0f;
    float s = f / (2.0f + f);
    float z = s * s;
    float w = z * z;
    float r = z * (0xaaaaaa.0p-24f + w * 0x91e9ee.0p-25f)
              + w * (0xccce13.0p-25f + w * 0xf89e26.0p-26f);
    float hfsq = 0.5f * f * f;
    float dk = (float)k;
    float y = dk * 0x1.62e3p-1f - ((hfsq - (s * (hfsq + r) + dk * 0x1.2fefa2p-17f)) - f);
    int is_regular = (x > 0.0f) & (x < HLOFUSE__INFF);
    float special = hlofuse__self(x == 0.0f, -HLOFUSE__INFF, HLOFUSE__NANF);
    special = hlofuse__self((x == HLOFUSE__INFF) | (x != x), x + x, special);
    return hlofuse__self(is_regular, y, special);
}

/* log1p(x) = log(u) + c/u with u = fl(1 + x) and c = (1 + x) - u exactly (Fast2Sum,
 * ordering the operands by magnitude). */
HLOFUSE_MATH_FN float hlofuse_log1pf(float x) {
    double xd = x;
    double u = 1.0 + xd;
    double c = hlofuse__sel(hlofuse__abs(xd) < 1.0, (1.0 - u) + xd, (xd - u) + 1.0);
    int is_regular = (x > -1.0f) & (x < HLOFUSE__INFF);
    double safe_u = hlofuse__sel(is_regular, u, 1.0);
    float y = (float)(hlofuse__log_fcore(safe_u) + c / safe_u);
    float special = hlofuse__self(x == -1.0f, -HLOFUSE__INFF, HLOFUSE__NANF);
    special = hlofuse__self((x == HLOFUSE__INFF) | (x != x), x + x, special);
    y = hlofuse__self(is_regular, y, special);
    return hlofuse__self(x == 0.0f, hlofuse__with_sign_of_f(0.0f, x), y);
}

#if HLOFUSE__HAS_FMAF
/* tanh in float arithmetic (8 lanes to a vector where double gives 4; tanh layers dominate
 * policy networks), one path for every argument: t = e / (e + 2) with e = expm1(2|x|),
 * sign restored from x (so -0 stays -0). The argument is clamped at 9.5, where tanh rounds
 * to 1. expm1(y) = 2^n (1 + p) - 1 with n = floor(y / ln2), so r = y - n ln2 lies in
 * [0, ln2) and nothing cancels: p = r + r^2 Q(r), Q a minimax fit on [0, ln2), and e one
 * fused multiply-add of positive terms (n ln2 in one product: its error, below 3e-8 at
 * n = 27, is damped by 2 / (e + 2)). Below e = 1 the quotient's rounding and e + 2's are
 * not damped: there t = h - h t0 with h = e / 2 and t0 the quotient, whose error is h times
 * t0's. The floor is the shift constant's rounding after subtracting just under 1/2 (never
 * a tie: the constant is odd), and the constant's low bits hold the exponent bias, so kf's
 * bits shifted are 2^n; where the floor comes out one high, r is a little below 0, inside
 * Q's fit. Within 1.72 ulp (every float), about half the instructions of a two-branch
 * form. */
HLOFUSE_MATH_FN float hlofuse_tanhf(float x) {
    float a = hlofuse__from_bits32(hlofuse__bits32(x) & 0x7fffffffu);
    a = a > 9.5f ? 9.5f : a;
    /* In halves: r/2 = a - n ln2/2, Q's coefficients times 2^(k+1) so its Horner steps give
     * 2 Q(r) exactly, h = e/2 = 2^n (p/2) + (2^n - 1)/2: the same roundings as with
     * r, p and e, two multiplications fewer. */
    float kf = HLOFUSE__MADDF(a, 0x1.715476p+1f, -0x1.fffffep-2f) + 0x1.8000fep23f;
    float scale = hlofuse__from_bits32(hlofuse__bits32(kf) << 23);
    float n = kf - 0x1.8000fep23f;
    float r = HLOFUSE__MADDF(n, -0x1.62e43p-2f, a);
    float q = 0x1.191312p-6f;
    q = HLOFUSE__MADDF(q, r, 0x1.5a4ea0p-5f);
    q = HLOFUSE__MADDF(q, r, 0x1.1218aap-3f);
    q = HLOFUSE__MADDF(q, r, 0x1.55463ap-2f);
    q = HLOFUSE__MADDF(q, r, 0x1.5555b8p-1f);
    q = HLOFUSE__MADDF(q, r, 0x1.fffffep-1f);
    float p = HLOFUSE__MADDF(q, r * r, r);
    float h = HLOFUSE__MADDF(scale, p, HLOFUSE__MADDF(scale, 0.5f, -0.5f));
    float t0 = h / (h + 1.0f);
    float t1 = HLOFUSE__MADDF(-h, t0, h);
    return hlofuse__with_sign_of_f(h < 0.5f ? t1 : t0, x);
}
#else
/* tanh(x) = e / (e + 2) with e = expm1(2|x|), sign restored from x. */
HLOFUSE_MATH_FN float hlofuse_tanhf(float x) {
    double a2 = 2.0 * hlofuse__abs((double)x);
    a2 = hlofuse__sel(a2 > 40.0, 40.0, a2); /* tanh(20) rounds to 1 in double */
    double e = hlofuse__expm1_fcore(a2);
    float y = (float)(e / (e + 2.0));
    return hlofuse__with_sign_of_f(y, x);
}
#endif

/* logistic(x) = 1 / (1 + exp(-x)), evaluated with exp(-|x|) so nothing overflows. */
HLOFUSE_MATH_FN float hlofuse_logisticf(float x) {
    double a = hlofuse__abs((double)x);
    a = hlofuse__sel(a > 150.0, 150.0, a);
    double e = hlofuse__exp_fcore(-a);
    return (float)(hlofuse__sel(x < 0.0f, e, 1.0) / (1.0 + e));
}

/* sin and cos over the whole float range: the exact reduction and the polynomials in double
 * (within 0.51 ulp, so they agree with NumPy nearly everywhere). Lanes of one vector never
 * take different paths, which keeps every loop that calls them vectorisable; the float
 * forms below are faster but valid only up to HLOFUSE_TRIGF_SMALL_LIMIT, so only code that
 * handles the rare large argument elsewhere (whole-loop kernels) uses them. */
HLOFUSE_MATH_FN float hlofuse_sinf(float x) {
    hlofuse__reduced red = hlofuse__reduce_pio2_f(hlofuse__abs((double)x));
    double s = hlofuse__sin_fpoly(red.r);
    double c = hlofuse__cos_fpoly(red.r);
    double y = hlofuse__sel((red.q == 1.0) | (red.q == 3.0), c, s);
    y = hlofuse__sel(red.q >= 2.0, -y, y);
    return hlofuse__with_sign_of_f((float)y, x);
}

HLOFUSE_MATH_FN float hlofuse_cosf(float x) {
    hlofuse__reduced red = hlofuse__reduce_pio2_f(hlofuse__abs((double)x));
    double s = hlofuse__sin_fpoly(red.r);
    double c = hlofuse__cos_fpoly(red.r);
    double y = hlofuse__sel((red.q == 1.0) | (red.q == 3.0), s, c);
    y = hlofuse__sel((red.q == 1.0) | (red.q == 2.0), -y, y);
    /* a NaN operand comes back quieted with its sign and payload, as XLA's CPU code does */
    return hlofuse__self(x != x, x + x, (float)y);
}

/* Whether hlofuse_sinf_small and hlofuse_cosf_small are accurate at x (false for NaN). */
HLOFUSE_MATH_FN int hlofuse_trigf_is_small(float x) {
#if HLOFUSE__HAS_FMAF
    return hlofuse__from_bits32(hlofuse__bits32(x) & 0x7fffffffu) <= HLOFUSE_TRIGF_SMALL_LIMIT;
#else
    (void)x;
    return 1;
#endif
}

/* sin and cos for |x| <= HLOFUSE_TRIGF_SMALL_LIMIT only (anything beyond, NaN included,
 * gives an unspecified value): the float path alone, for code that takes the rare large
 * argument elsewhere (whole-loop kernels: codegen/whole_loop.py). */
HLOFUSE_MATH_FN float hlofuse_sinf_small(float x) {
#if HLOFUSE__HAS_FMAF
    hlofuse__reducedf red = hlofuse__reduce_pio2_small(
        hlofuse__from_bits32(hlofuse__bits32(x) & 0x7fffffffu));
    return hlofuse__quadrantf(hlofuse__sin_kernelf(red.hi, red.lo),
                              hlofuse__cos_kernelf(red.hi, red.lo), red.q,
                              hlofuse__bits32(x) & 0x80000000u);
#else
    return hlofuse_sinf(x);
#endif
}

HLOFUSE_MATH_FN float hlofuse_cosf_small(float x) {
#if HLOFUSE__HAS_FMAF
    hlofuse__reducedf red = hlofuse__reduce_pio2_small(
        hlofuse__from_bits32(hlofuse__bits32(x) & 0x7fffffffu));
    return hlofuse__quadrantf(hlofuse__sin_kernelf(red.hi, red.lo),
                              hlofuse__cos_kernelf(red.hi, red.lo), red.q + 1u, 0u);
#else
    return hlofuse_cosf(x);
#endif
}

HLOFUSE_MATH_FN float hlofuse_tanf(float x) {
    hlofuse__reduced red = hlofuse__reduce_pio2_f(hlofuse__abs((double)x));
    double s = hlofuse__sin_fpoly(red.r);
    double c = hlofuse__cos_fpoly(red.r);
    int is_odd = (red.q == 1.0) | (red.q == 3.0);
    double num = hlofuse__sel(is_odd, -c, s);
    double den = hlofuse__sel(is_odd, s, c);
    return hlofuse__with_sign_of_f((float)(num / den), x);
}

/* Correctly rounded sqrt (it vectorises, unlike sqrtf under the default
 * -fmath-errno). A double estimate within 2^-35 rounds to the right float or a
 * neighbour; the neighbour is fixed by comparing x with the squares of the two
 * midpoints, which are exact in double (25-bit midpoints, 50-bit squares). */
HLOFUSE_MATH_FN float hlofuse_sqrtf(float x) {
    double xd = x;
    int is_regular = (x > 0.0f) & (x < HLOFUSE__INFF);
    double safe = hlofuse__sel(is_regular, xd, 1.0);
    float y = (float)(safe * hlofuse__rsqrt_newton(safe, 3));
    float up = hlofuse__from_bits32(hlofuse__bits32(y) + 1u);
    float down = hlofuse__from_bits32(hlofuse__bits32(y) - 1u);
    double mid_up = 0.5 * ((double)y + (double)up);
    double mid_down = 0.5 * ((double)y + (double)down);
    y = hlofuse__self(mid_up * mid_up < safe, up, y);
    y = hlofuse__self(mid_down * mid_down > safe, down, y);
    float special = hlofuse__self((x == HLOFUSE__INFF) | (x != x), x, HLOFUSE__NANF);
    special = hlofuse__self(x == 0.0f, hlofuse__with_sign_of_f(0.0f, x), special);
    return hlofuse__self(is_regular, y, special);
}

/* 1/sqrt(x); rsqrt(+-0) = +-inf, rsqrt(inf) = 0. */
HLOFUSE_MATH_FN float hlofuse_rsqrtf(float x) {
    double xd = x;
    int is_regular = (x > 0.0f) & (x < HLOFUSE__INFF);
    float y = (float)hlofuse__rsqrt_newton(hlofuse__sel(is_regular, xd, 1.0), 4);
    float special = hlofuse__with_sign_of_f(HLOFUSE__INFF, x);
    special = hlofuse__self(x == 0.0f, special, HLOFUSE__NANF);
    special = hlofuse__self(x == HLOFUSE__INFF, 0.0f, special);
    special = hlofuse__self(x != x, x, special);
    return hlofuse__self(is_regular, y, special);
}

HLOFUSE_MATH_FN float hlofuse_cbrtf(float x) {
    double a = hlofuse__abs((double)x);
    int is_regular = (a > 0.0) & (a < 0x1p128);
    float y = (float)hlofuse__cbrt_halley(hlofuse__sel(is_regular, a, 1.0), 2);
    return hlofuse__self(is_regular, hlofuse__with_sign_of_f(y, x), x + x);
}

/* log(a) for a >= 0 or NaN, with log(0) = -inf and log(inf) = inf (double accuracy). */
HLOFUSE_MATH_FN double hlofuse__log_nonneg(double a) {
    int is_regular = (a > 0.0) & (a < __builtin_inf());
    double y = hlofuse__log_dcore(hlofuse__sel(is_regular, a, 1.0), 0.0);
    double special = hlofuse__sel(a == 0.0, -__builtin_inf(), a + a);
    return hlofuse__sel(is_regular, y, special);
}

/* x widened to double exactly whatever DAZ says: under DAZ the conversion instruction
 * reads a subnormal as zero, so a subnormal's significand goes through an integer. */
HLOFUSE_MATH_FN double hlofuse__widen_exactf(float x) {
    uint32_t b = hlofuse__bits32(x);
    double subnormal = (double)(int32_t)(b & 0x7fffffu) * 0x1p-149;
    double r = hlofuse__sel((b & 0x7f800000u) == 0u, subnormal, (double)x);
    return hlofuse__from_bits64(hlofuse__bits64(r) | ((uint64_t)(b >> 31) << 63));
}

/* pow of two doubles holding float values, rounded to float, with the C99 special cases
 * (Annex F.9.4.4). |x|^y = exp(y log|x|) with the logarithm to double accuracy:
 * |y log|x|| < 110 wherever the float result is neither 0 nor inf, so its absolute error
 * stays below 2^-44. Every test reads the doubles, never the floats (DAZ would flush). */
HLOFUSE_MATH_FN float hlofuse__powf_of(double xd, double yd) {
    double ax = hlofuse__abs(xd);
    double t = yd * hlofuse__log_nonneg(ax);
    t = hlofuse__sel(t > 90.0, 90.0, t);
    double m = hlofuse__exp_fcore(hlofuse__sel(t < -160.0, -160.0, t));
    int y_is_int = HLOFUSE__RINT(yd) == yd;
    int y_is_odd = y_is_int & (HLOFUSE__RINT(0.5 * yd) != 0.5 * yd);
    int x_is_neg = (hlofuse__bits64(xd) >> 63) != 0;
    double r = hlofuse__sel(x_is_neg & y_is_odd, -m, m);
    /* a negative finite base with a finite non-integer exponent has no real power: the
     * invalid operation's NaN, negative as x86 makes it (and the C library's pow returns) */
    r = hlofuse__sel((xd < 0.0) & (ax < 0x1p128) & !y_is_int & (hlofuse__abs(yd) < 0x1p128),
                     -__builtin_nan(""), r);
    r = hlofuse__sel((ax == 1.0) & (hlofuse__abs(yd) == __builtin_inf()), 1.0, r);
    r = hlofuse__sel((xd != xd) | (yd != yd), xd + yd, r); /* the NaN operand, x's first */
    r = hlofuse__sel((xd == 1.0) | (yd == 0.0), 1.0, r);
    return (float)r;
}

/* pow with the C99 special cases, reading both operands exactly (DAZ or not). */
HLOFUSE_MATH_FN float hlofuse_powf(float x, float y) {
    return hlofuse__powf_of(hlofuse__widen_exactf(x), hlofuse__widen_exactf(y));
}

/* pow as XLA's CPU code computes it: it calls the C library's powf under DAZ, and glibc's
 * powf normalises a subnormal base by multiplying it by 2^23, which DAZ flushes to zero, so
 * every subnormal base reads as +-2^-150 (its sign still decides the special cases). The
 * exponent is read exactly: its bits decide the special cases, and a subnormal exponent
 * contributes nothing to the magnitude either way. The result is not flushed here. */
HLOFUSE_MATH_FN float hlofuse_pow_cpuf(float x, float y) {
    uint32_t b = hlofuse__bits32(x);
    int subnormal = ((b & 0x7f800000u) == 0u) & ((b & 0x7fffffu) != 0u);
    double read_as = hlofuse__from_bits64(((uint64_t)(b >> 31) << 63) | 0x3690000000000000ull);
    double xd = hlofuse__sel(subnormal, read_as, hlofuse__widen_exactf(x)); /* +-2^-150 */
    return hlofuse__powf_of(xd, hlofuse__widen_exactf(y));
}

/* The float64 counterpart for a caller with the C library's pow: glibc's pow multiplies a
 * subnormal base by 2^52 likewise, so it reads as +-2^-1075, which no double holds;
 * pow(+-2^-1075, y) = pow(+-2^-1000, y) * pow(2^-75, y), and the first factor overflows or
 * underflows only where the whole does. hlofuse_is_subnormal picks that form,
 * hlofuse_pow_cpu_base gives +-2^-1000 for a subnormal and x otherwise. */
HLOFUSE_MATH_FN int hlofuse_is_subnormal(double x) {
    uint64_t b = hlofuse__bits64(x);
    return ((b & 0x7ff0000000000000ull) == 0u) & ((b & 0x000fffffffffffffull) != 0u);
}

HLOFUSE_MATH_FN double hlofuse_pow_cpu_base(double x) {
    uint64_t b = hlofuse__bits64(x);
    uint64_t base = (b & 0x8000000000000000ull) | 0x0170000000000000ull; /* +-2^-1000 */
    return hlofuse__from_bits64(hlofuse_is_subnormal(x) ? base : b);
}

/* atan2 with the C99 special cases: with a = min(|x|,|y|) / max(|x|,|y|) in [0, 1],
 * atan(a) = pi/4 + atan((a-1)/(a+1)) above tan(pi/8), then the octant is restored. */
HLOFUSE_MATH_FN float hlofuse_atan2f(float y, float x) {
    double yd = y, xd = x;
    double ay = hlofuse__abs(yd), ax = hlofuse__abs(xd);
    int swap = ay > ax;
    double num = hlofuse__sel(swap, ax, ay);
    double den = hlofuse__sel(swap, ay, ax);
    double t = hlofuse__sel(den == 0.0, 0.0, num / hlofuse__sel(den == 0.0, 1.0, den));
    t = hlofuse__sel((ax == __builtin_inf()) & (ay == __builtin_inf()), 1.0, t);
    int is_big = t > 0x1.a827999fcef32p-2; /* tan(pi/8) */
    double tr = hlofuse__sel(is_big, (t - 1.0) / (t + 1.0), t);
    double angle = hlofuse__sel(is_big, HLOFUSE__PIO4, 0.0) + hlofuse__atan_fpoly(tr);
    angle = hlofuse__sel(swap, HLOFUSE__PIO2 - angle, angle);
    angle = hlofuse__sel((hlofuse__bits32(x) >> 31) != 0, HLOFUSE__PI - angle, angle);
    float r = hlofuse__with_sign_of_f((float)angle, y);
    return hlofuse__self((x != x) | (y != y), x + y, r);
}

/* erf with erf(+-inf) = +-1: for |x| < 0.84375, x P(x^2) (P a least-squares fit,
 * relative error below 2^-38); above, 1 - exp(-x^2) g(x) with g = erfc(x) exp(x^2)
 * as a degree-16 Chebyshev series on [0.84375, 4], summed by Clenshaw's recurrence
 * (absolute error below 2^-38); from 3.92 on erf rounds to 1 in float. */
HLOFUSE_MATH_FN float hlofuse_erff(float x) {
    double a = hlofuse__abs((double)x);
    double z = a * a;
    double p = -0x1.6f399e065a84fp-17;
    p = HLOFUSE__MADD(p, z, 0x1.e764f2e22b02cp-14);
    p = HLOFUSE__MADD(p, z, -0x1.bed80ba9ae333p-11);
    p = HLOFUSE__MADD(p, z, 0x1.564dcb2507299p-8);
    p = HLOFUSE__MADD(p, z, -0x1.b82c42796e901p-6);
    p = HLOFUSE__MADD(p, z, 0x1.ce2f1e150f843p-4);
    p = HLOFUSE__MADD(p, z, -0x1.812746a893533p-2);
    p = HLOFUSE__MADD(p, z, 0x1.20dd75042701ap+0);
    double small = a * p;
    double ac = hlofuse__sel(a > 4.0, 4.0, a);
    double t2 = 2.0 * ((ac - 2.421875) * (1.0 / 1.578125));
    double b1 = 0x1.7ff89105b4704p-36, b2 = 0.0, b0;
    b0 = HLOFUSE__MADD(t2, b1, -0x1.051a4d604e836p-33 - b2);
    b2 = b1;
    b1 = b0;
    b0 = HLOFUSE__MADD(t2, b1, 0x1.5c43db0e1af0fp-31 - b2);
    b2 = b1;
    b1 = b0;
    b0 = HLOFUSE__MADD(t2, b1, -0x1.c72493b18d625p-29 - b2);
    b2 = b1;
    b1 = b0;
    b0 = HLOFUSE__MADD(t2, b1, 0x1.23182cd4a9c16p-26 - b2);
    b2 = b1;
    b1 = b0;
    b0 = HLOFUSE__MADD(t2, b1, -0x1.6c02abf1b9c17p-24 - b2);
    b2 = b1;
    b1 = b0;
    b0 = HLOFUSE__MADD(t2, b1, 0x1.bc67db533025ap-22 - b2);
    b2 = b1;
    b1 = b0;
    b0 = HLOFUSE__MADD(t2, b1, -0x1.0873bc86e9ce8p-19 - b2);
    b2 = b1;
    b1 = b0;
    b0 = HLOFUSE__MADD(t2, b1, 0x1.32498c276e8cfp-17 - b2);
    b2 = b1;
    b1 = b0;
    b0 = HLOFUSE__MADD(t2, b1, -0x1.588910c53fa6cp-15 - b2);
    b2 = b1;
    b1 = b0;
    b0 = HLOFUSE__MADD(t2, b1, 0x1.778a3a35c0a8ep-13 - b2);
    b2 = b1;
    b1 = b0;
    b0 = HLOFUSE__MADD(t2, b1, -0x1.8b8deb96a20d3p-11 - b2);
    b2 = b1;
    b1 = b0;
    b0 = HLOFUSE__MADD(t2, b1, 0x1.91490f42a56e0p-9 - b2);
    b2 = b1;
    b1 = b0;
    b0 = HLOFUSE__MADD(t2, b1, -0x1.8684f6f2afa52p-7 - b2);
    b2 = b1;
    b1 = b0;
    b0 = HLOFUSE__MADD(t2, b1, 0x1.6ab784d359e19p-5 - b2);
    b2 = b1;
    b1 = b0;
    b0 = HLOFUSE__MADD(t2, b1, -0x1.3f6cae4094e67p-3 - b2);
    b2 = b1;
    b1 = b0;
    double g = HLOFUSE__MADD(0.5 * t2, b1, 0x1.085a34ab37589p-2 - b2);
    double large = 1.0 - hlofuse__exp_fcore(-(ac * ac)) * g;
    float y = (float)hlofuse__sel(a < 0.84375, small, large);
    return hlofuse__self(x != x, x + x, hlofuse__with_sign_of_f(y, x));
}

/* ------------------------------------------------------- float64 functions */

#define HLOFUSE__INF __builtin_inf()
#define HLOFUSE__NAN __builtin_nan("")

HLOFUSE_MATH_FN double hlofuse_exp(double x) {
    double xc = hlofuse__sel(x > 710.0, 710.0, x);
    return hlofuse__exp_dcore(hlofuse__sel(xc < -746.0, -746.0, xc));
}

HLOFUSE_MATH_FN double hlofuse_expm1(double x) {
    double xc = hlofuse__sel(x > 710.0, 710.0, x);
    double y = hlofuse__expm1_dcore(hlofuse__sel(xc < -45.0, -45.0, xc));
    return hlofuse__sel(x == 0.0, hlofuse__with_sign_of(0.0, x), y);
}

/* log; a subnormal input is scaled by 2^54 first (with DAZ it reads as zero). */
HLOFUSE_MATH_FN double hlofuse_log(double x) {
    int is_regular = (x > 0.0) & (x < HLOFUSE__INF);
    int is_subnormal = x < 0x1p-1022;
    double xs = hlofuse__sel(is_subnormal, x * 0x1p54, x);
    double y = hlofuse__log_dcore(hlofuse__sel(is_regular, xs, 1.0),
                                  hlofuse__sel(is_subnormal, -54.0, 0.0));
    double special = hlofuse__sel(x == 0.0, -HLOFUSE__INF, HLOFUSE__NAN);
    special = hlofuse__sel((x == HLOFUSE__INF) | (x != x), x + x, special);
    return hlofuse__sel(is_regular, y, special);
}

HLOFUSE_MATH_FN double hlofuse_log1p(double x) {
    double u = 1.0 + x;
    double c = hlofuse__sel(hlofuse__abs(x) < 1.0, (1.0 - u) + x, (x - u) + 1.0);
    int is_regular = (x > -1.0) & (x < HLOFUSE__INF);
    double safe_u = hlofuse__sel(is_regular, u, 1.0);
    double y = hlofuse__log_dcore(safe_u, 0.0) + c / safe_u;
    double special = hlofuse__sel(x == -1.0, -HLOFUSE__INF, HLOFUSE__NAN);
    special = hlofuse__sel((x == HLOFUSE__INF) | (x != x), x + x, special);
    y = hlofuse__sel(is_regular, y, special);
    return hlofuse__sel(x == 0.0, hlofuse__with_sign_of(0.0, x), y);
}

HLOFUSE_MATH_FN double hlofuse_tanh(double x) {
    double a2 = 2.0 * hlofuse__abs(x);
    a2 = hlofuse__sel(a2 > 40.0, 40.0, a2); /* tanh(20) rounds to 1 */
    double e = hlofuse__expm1_dcore(a2);
    /* e / (e + 2) near 0, 1 - 2 / (e + 2) where the result nears 1: each keeps the
     * rounding of e + 2 from reaching more than a fraction of an ulp */
    double y = hlofuse__sel(a2 < 1.1, e / (e + 2.0), 1.0 - 2.0 / (e + 2.0));
    return hlofuse__with_sign_of(y, x);
}

HLOFUSE_MATH_FN double hlofuse_logistic(double x) {
    double a = hlofuse__abs(x);
    a = hlofuse__sel(a > 746.0, 746.0, a);
    double e = hlofuse__exp_dcore(-a);
    /* 1 + e = s + s_err exactly (Fast2Sum, e <= 1); the quotient is corrected by
     * -s_err/s, which takes the rounding of 1 + e out of the error budget */
    double s = 1.0 + e;
    double s_err = (1.0 - s) + e;
    double y = hlofuse__sel(x < 0.0, e, 1.0) / s;
    return y - y * (s_err / s);
}

/* Correctly rounded sqrt: Newton estimate, one fma-based refinement, then
 * Tuckerman's test (y is RN(sqrt x) iff y*pred(y) < x <= y*succ(y)), whose
 * products the fma evaluates with a correctly signed result. Inputs below 2^-800
 * are scaled by 2^200 first so that the test's residual stays a normal number. */
HLOFUSE_MATH_FN double hlofuse_sqrt(double x) {
    int is_regular = (x > 0.0) & (x < HLOFUSE__INF);
    int is_small = x < 0x1p-800;
    double xs = hlofuse__sel(is_regular, hlofuse__sel(is_small, x * 0x1p200, x), 1.0);
    double r = hlofuse__rsqrt_newton(xs, 3);
    double y = xs * r;
    y = HLOFUSE__FMA(HLOFUSE__FMA(-y, y, xs), 0.5 * r, y);
    double up = hlofuse__from_bits64(hlofuse__bits64(y) + 1u);
    double down = hlofuse__from_bits64(hlofuse__bits64(y) - 1u);
    y = hlofuse__sel(HLOFUSE__FMA(y, up, -xs) < 0.0, up, y);
    y = hlofuse__sel(HLOFUSE__FMA(y, down, -xs) >= 0.0, down, y);
    y = y * hlofuse__sel(is_small, 0x1p-100, 1.0);
    double special = hlofuse__sel((x == HLOFUSE__INF) | (x != x), x, HLOFUSE__NAN);
    special = hlofuse__sel(x == 0.0, hlofuse__with_sign_of(0.0, x), special);
    return hlofuse__sel(is_regular, y, special);
}

/* 1/sqrt(x): a Newton estimate refined once with the residual 1 - x r^2 evaluated
 * with fma (x r split exactly), so that only the last rounding is left. */
HLOFUSE_MATH_FN double hlofuse_rsqrt(double x) {
    int is_regular = (x > 0.0) & (x < HLOFUSE__INF);
    int is_small = x < 0x1p-800;
    double xs = hlofuse__sel(is_regular, hlofuse__sel(is_small, x * 0x1p200, x), 1.0);
    double r = hlofuse__rsqrt_newton(xs, 3);
    double xr = xs * r;
    double xr_err = HLOFUSE__FMA(xs, r, -xr);
    double e = HLOFUSE__FMA(-xr, r, 1.0) - xr_err * r;
    r = HLOFUSE__FMA(r, 0.5 * e, r);
    r = r * hlofuse__sel(is_small, 0x1p100, 1.0);
    double special = hlofuse__sel(x == 0.0, hlofuse__with_sign_of(HLOFUSE__INF, x), HLOFUSE__NAN);
    special = hlofuse__sel(x == HLOFUSE__INF, 0.0, special);
    special = hlofuse__sel(x != x, x, special);
    return hlofuse__sel(is_regular, r, special);
}

HLOFUSE_MATH_FN double hlofuse_cbrt(double x) {
    double a = hlofuse__abs(x);
    int is_regular = (a > 0.0) & (a < HLOFUSE__INF);
    /* small inputs are scaled by 2^300 so that the residual below stays normal */
    int is_small = a < 0x1p-900;
    double v = hlofuse__sel(is_regular, hlofuse__sel(is_small, a * 0x1p300, a), 1.0);
    double y = hlofuse__cbrt_halley(v, 3);
    /* one Newton step on y^3 - v, with y^2 kept double-double so the residual is exact
     * to well below an ulp */
    double y2 = y * y;
    double y2_err = HLOFUSE__FMA(y, y, -y2);
    double residual = HLOFUSE__FMA(y2, y, -v) + y2_err * y;
    y = y - residual / (3.0 * y2);
    y = y * hlofuse__sel(is_small, 0x1p-100, 1.0);
    return hlofuse__sel(is_regular, hlofuse__with_sign_of(y, x), x + x);
}

/* Trigonometric functions are accurate for |x| < 2^50 and return NaN beyond. */
#define HLOFUSE__TRIG_LIMIT 0x1p50

HLOFUSE_MATH_FN double hlofuse_sin(double x) {
    double ax = hlofuse__abs(x);
    double lo, q;
    double hi = hlofuse__reduce_pio2_d(hlofuse__sel(ax < HLOFUSE__TRIG_LIMIT, ax, 0.0), &lo, &q);
    double s = hlofuse__sin_dpoly(hi, lo);
    double c = hlofuse__cos_dpoly(hi, lo);
    double y = hlofuse__sel((q == 1.0) | (q == 3.0), c, s);
    y = hlofuse__sel(q >= 2.0, -y, y);
    return hlofuse__sel(ax < HLOFUSE__TRIG_LIMIT, hlofuse__with_sign_of(y, x), HLOFUSE__NAN);
}

HLOFUSE_MATH_FN double hlofuse_cos(double x) {
    double ax = hlofuse__abs(x);
    double lo, q;
    double hi = hlofuse__reduce_pio2_d(hlofuse__sel(ax < HLOFUSE__TRIG_LIMIT, ax, 0.0), &lo, &q);
    double s = hlofuse__sin_dpoly(hi, lo);
    double c = hlofuse__cos_dpoly(hi, lo);
    double y = hlofuse__sel((q == 1.0) | (q == 3.0), s, c);
    y = hlofuse__sel((q == 1.0) | (q == 2.0), -y, y);
    return hlofuse__sel(ax < HLOFUSE__TRIG_LIMIT, y, HLOFUSE__NAN);
}

HLOFUSE_MATH_FN double hlofuse_tan(double x) {
    double ax = hlofuse__abs(x);
    double lo, q;
    double hi = hlofuse__reduce_pio2_d(hlofuse__sel(ax < HLOFUSE__TRIG_LIMIT, ax, 0.0), &lo, &q);
    double s = hlofuse__sin_dpoly(hi, lo);
    double c = hlofuse__cos_dpoly(hi, lo);
    int is_odd = (q == 1.0) | (q == 3.0);
    double y = hlofuse__sel(is_odd, -c, s) / hlofuse__sel(is_odd, s, c);
    return hlofuse__sel(ax < HLOFUSE__TRIG_LIMIT, hlofuse__with_sign_of(y, x), HLOFUSE__NAN);
}

/* fmodf(x, y), exact, without a branch or a loop (libm's fmodf is a call in every simd
 * loop). The remainder of x modulo b * 2^(28k) is a float-precision value for every k, and
 * one step of long division from k + 1 to k has a quotient below 2^28, so in double the
 * product q * b * 2^(28k) and the difference are exact. The quotient is the nearest integer
 * to a * (1/b) 2^-28k, whose error is below 2^-22: the floor or one more, never one less, and
 * one more only where the remainder is at least about half the divisor, so one add (exact:
 * Sterbenz) corrects it. Ten steps cover
 * every pair of floats (|x| / |y| < 2^277). NaN, y = 0 and infinite x give NaN as fmodf
 * does; infinite y gives x. Like the C library's fmodf (integer work), it reads its operands
 * and writes its result exactly whatever DAZ and FTZ say: XLA's CPU remainder is that fmodf,
 * and a denormal dividend or remainder comes back unflushed there. */
/* One step of the long division: a = a mod (b * 2^k), from a < b * 2^(k + 28). The
 * steps are written out: gcc vectorises no loop that holds an inner loop. */
#define HLOFUSE__FMOD_STEP(k)                                                           \
    do {                                                                                \
        double bk_ = b * 0x1p##k;                                                       \
        double q_ = HLOFUSE__RINT(a * (inverse * 0x1p-##k)); /* gcc 12 vectorises rint */ \
        double r_ = a - q_ * bk_;                                                       \
        a = hlofuse__sel(r_ < 0.0, r_ + bk_, r_);                                       \
    } while (0)

/* A non-negative double holding a float value, narrowed exactly whatever FTZ says: a float
 * denormal's significand goes through an integer. */
HLOFUSE_MATH_FN float hlofuse__narrow_exactf(double a) {
    int denormal = a < 0x1p-126;
    uint32_t significand = (uint32_t)(int32_t)(hlofuse__sel(denormal, a, 0.0) * 0x1p149);
    return hlofuse__self(denormal, hlofuse__from_bits32(significand), (float)a);
}

/* fmodf's result from the remainder `a` of |x| modulo b = |y| (exact, below b), or its special
 * cases: NaN for a NaN operand, y = 0 or an infinite x; x for an infinite y. */
HLOFUSE_MATH_FN float hlofuse__fmodf_result(double a, double b, float x, float y) {
    float result = hlofuse__with_sign_of_f(hlofuse__narrow_exactf(a), x);
    int finite_x = hlofuse__abs(hlofuse__widen_exactf(x)) < HLOFUSE__INF;
    float special = hlofuse__self((b == HLOFUSE__INF) & finite_x, x, (x * y) / (x * y));
    special = hlofuse__self(y != y, y + y, special);
    special = hlofuse__self(x != x, x + x, special);
    return hlofuse__self((b > 0.0) & (b < HLOFUSE__INF) & finite_x, result, special);
}

HLOFUSE_MATH_FN float hlofuse_fmodf(float x, float y) {
    double a = hlofuse__abs(hlofuse__widen_exactf(x));
    double b = hlofuse__abs(hlofuse__widen_exactf(y));
    double inverse = 1.0 / b;
    HLOFUSE__FMOD_STEP(252);
    HLOFUSE__FMOD_STEP(224);
    HLOFUSE__FMOD_STEP(196);
    HLOFUSE__FMOD_STEP(168);
    HLOFUSE__FMOD_STEP(140);
    HLOFUSE__FMOD_STEP(112);
    HLOFUSE__FMOD_STEP(84);
    HLOFUSE__FMOD_STEP(56);
    HLOFUSE__FMOD_STEP(28);
    HLOFUSE__FMOD_STEP(0);
    return hlofuse__fmodf_result(a, b, x, y);
}

/* Whether hlofuse_fmodf_small(x, y) is hlofuse_fmodf(x, y): true wherever |x| < |y| 2^28 (the
 * long division's last step alone does it) and wherever an operand is NaN or y is infinite
 * and x finite (special cases, which both take alike); false otherwise (y = 0 included). */
HLOFUSE_MATH_FN int hlofuse_fmodf_is_small(float x, float y) {
    double a = hlofuse__abs(hlofuse__widen_exactf(x));
    double b = hlofuse__abs(hlofuse__widen_exactf(y));
    return !(a >= b * 0x1p28);
}

/* fmodf(x, y) for |x| < |y| 2^28 (hlofuse_fmodf_is_small): the last step of the long
 * division, the special cases as hlofuse_fmodf has them. */
HLOFUSE_MATH_FN float hlofuse_fmodf_small(float x, float y) {
    double a = hlofuse__abs(hlofuse__widen_exactf(x));
    double b = hlofuse__abs(hlofuse__widen_exactf(y));
    double inverse = 1.0 / b;
    HLOFUSE__FMOD_STEP(0);
    return hlofuse__fmodf_result(a, b, x, y);
}

/* floor, ceil and round (halfway cases away from zero), exact. gcc keeps the C library's
 * floorf, ceilf and roundf scalar unless -fno-trapping-math (its vector rounding needs it),
 * and a loop calling them with them; rint, in the default rounding mode, vectorises, and
 * the others follow from it: floor(x) = rint(x) - 1 where rint(x) > x (then |x| < 2^23,
 * so the step is exact). The result takes x's sign (floor(-0.3) = -1, ceil(-0.7) = -0.0);
 * NaN and infinities pass through. */
HLOFUSE_MATH_FN float hlofuse__copysignf(float y, float x) {
    return hlofuse__from_bits32((hlofuse__bits32(y) & 0x7fffffffu) |
                                (hlofuse__bits32(x) & 0x80000000u));
}

HLOFUSE_MATH_FN double hlofuse__copysign(double y, double x) {
    return hlofuse__from_bits64((hlofuse__bits64(y) & 0x7fffffffffffffffull) |
                                (hlofuse__bits64(x) & 0x8000000000000000ull));
}

HLOFUSE_MATH_FN float hlofuse_floorf(float x) {
    float r = HLOFUSE__RINTF(x);
    return hlofuse__copysignf(hlofuse__self(r > x, r - 1.0f, r), x);
}

HLOFUSE_MATH_FN float hlofuse_ceilf(float x) {
    float r = HLOFUSE__RINTF(x);
    return hlofuse__copysignf(hlofuse__self(r < x, r + 1.0f, r), x);
}

HLOFUSE_MATH_FN float hlofuse_roundf(float x) {
    float a = hlofuse__from_bits32(hlofuse__bits32(x) & 0x7fffffffu);
    float f = HLOFUSE__RINTF(a);
    f = hlofuse__self(f > a, f - 1.0f, f);
    /* a - f is exact (Sterbenz, or f = 0); it is NaN for infinities, which stay. */
    return hlofuse__copysignf(hlofuse__self(a - f >= 0.5f, f + 1.0f, f), x);
}

HLOFUSE_MATH_FN double hlofuse_floor(double x) {
    double r = HLOFUSE__RINT(x);
    return hlofuse__copysign(hlofuse__sel(r > x, r - 1.0, r), x);
}

HLOFUSE_MATH_FN double hlofuse_ceil(double x) {
    double r = HLOFUSE__RINT(x);
    return hlofuse__copysign(hlofuse__sel(r < x, r + 1.0, r), x);
}

HLOFUSE_MATH_FN double hlofuse_round(double x) {
    double a = hlofuse__abs(x);
    double f = HLOFUSE__RINT(a);
    f = hlofuse__sel(f > a, f - 1.0, f);
    return hlofuse__copysign(hlofuse__sel(a - f >= 0.5, f + 1.0, f), x);
}

#undef HLOFUSE__FMOD_STEP

#endif /* HLOFUSE_MATH_H */
