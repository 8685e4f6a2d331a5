/* hlofuse's runtime library: the routines generated kernels call like XLA calls a library.
 *
 * Compiled once into its own shared object, separately from every module, so a call is an
 * opaque barrier with its own launch and memory traffic, as in XLA.
 *
 * dot: C[b, m, n] = sum_k A[b, m, k] * B[b, k, n] with strided A and B and a contiguous C.
 * Each element accumulates from +0 in ascending k with one fused multiply-add per step, as
 * XLA's CPU dot loops do (their multiply and add are contractable, and LLVM fuses them): the
 * single rounding decides inf and NaN (-inf + a finite product too large for the type stays
 * -inf). Results do not depend on the thread count. Integer dots wrap (unsigned arithmetic of
 * the type's width).
 *
 * threefry2x32: Threefry-2x32 with 20 rounds (Random123, as jax.random uses it), one
 * independent block per element: (y0, y1) = threefry2x32((k0, k1), (x0, x1)).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define HLOFUSE_FTZ_BEGIN unsigned int hlofuse_csr_ = _mm_getcsr(); _mm_setcsr(hlofuse_csr_ | 0x8040u);
#define HLOFUSE_FTZ_END _mm_setcsr(hlofuse_csr_);
#elif defined(__aarch64__)
#define HLOFUSE_FTZ_BEGIN uint64_t hlofuse_fpcr_; __asm__ volatile("mrs %0, fpcr" : "=r"(hlofuse_fpcr_)); __asm__ volatile("msr fpcr, %0" :: "r"(hlofuse_fpcr_ | (1ull << 24)));
#define HLOFUSE_FTZ_END __asm__ volatile("msr fpcr, %0" :: "r"(hlofuse_fpcr_));
#else
#define HLOFUSE_FTZ_BEGIN
#define HLOFUSE_FTZ_END
#endif

#define HLOFUSE_EXPORT __attribute__((visibility("default")))
#define HLOFUSE_PARALLEL_WORK (1 << 18)

/* One output row: C[row, :] for A's row and B's matrix. ACC(c, a, b) updates c by a * b. */
#define HLOFUSE_DOT(TAG, T, WIDE, ZERO, ACC)                                                  \
static void hlofuse_dot_row_##TAG(const T *arow, const T *bmat, T *restrict crow,             \
                                  int64_t n, int64_t k, int64_t ask, int64_t bsk,             \
                                  int64_t bsn) {                                              \
  for (int64_t j = 0; j < n; ++j) crow[j] = ZERO;                                             \
  if (bsn == 1) {                                                                             \
    for (int64_t kk = 0; kk < k; ++kk) {                                                      \
      const T av = arow[kk * ask];                                                            \
      const T *restrict brow = bmat + kk * bsk;                                               \
      for (int64_t j = 0; j < n; ++j) crow[j] = ACC(crow[j], av, brow[j]);                    \
    }                                                                                         \
    return;                                                                                   \
  }                                                                                           \
  for (int64_t j = 0; j < n; ++j) {                                                           \
    T s = ZERO;                                                                               \
    for (int64_t kk = 0; kk < k; ++kk) s = ACC(s, arow[kk * ask], bmat[kk * bsk + j * bsn]);  \
    crow[j] = s;                                                                              \
  }                                                                                           \
}                                                                                             \
HLOFUSE_EXPORT void hlofuse_rt_dot_##TAG(const T *a, const T *b, T *c, int64_t batch,         \
                                         int64_t m, int64_t n, int64_t k, int64_t asb,        \
                                         int64_t asm_, int64_t ask, int64_t bsb, int64_t bsk, \
                                         int64_t bsn) {                                       \
  const int64_t rows = batch * m;                                                             \
  const int parallel = rows > 1 && rows * n * (k > 0 ? k : 1) >= HLOFUSE_PARALLEL_WORK;       \
  _Pragma("omp parallel if(parallel)")                                                        \
  {                                                                                           \
    HLOFUSE_FTZ_BEGIN                                                                         \
    _Pragma("omp for schedule(static)")                                                       \
    for (int64_t r = 0; r < rows; ++r) {                                                      \
      const int64_t bi = r / (m > 0 ? m : 1), mi = r % (m > 0 ? m : 1);                        \
      hlofuse_dot_row_##TAG(a + bi * asb + mi * asm_, b + bi * bsb, c + r * n, n, k, ask, bsk, \
                            bsn);                                                             \
    }                                                                                         \
    HLOFUSE_FTZ_END                                                                           \
  }                                                                                           \
}

#define HLOFUSE_ACC_F32(c, a, b) fmaf((a), (b), (c))
#define HLOFUSE_ACC_F64(c, a, b) fma((a), (b), (c))
#define HLOFUSE_ACC_WRAP32(c, a, b) (c + (uint32_t)((uint32_t)(a) * (uint32_t)(b)))
#define HLOFUSE_ACC_WRAP64(c, a, b) ((c) + (a) * (b))
#define HLOFUSE_ACC_PRED(c, a, b) ((uint8_t)((c) | ((a) & (b))))

HLOFUSE_DOT(f32, float, float, 0.0f, HLOFUSE_ACC_F32)
HLOFUSE_DOT(f64, double, double, 0.0, HLOFUSE_ACC_F64)
HLOFUSE_DOT(u8, uint8_t, uint32_t, 0, HLOFUSE_ACC_WRAP32)
HLOFUSE_DOT(u16, uint16_t, uint32_t, 0, HLOFUSE_ACC_WRAP32)
HLOFUSE_DOT(u32, uint32_t, uint32_t, 0, HLOFUSE_ACC_WRAP32)
HLOFUSE_DOT(u64, uint64_t, uint64_t, 0, HLOFUSE_ACC_WRAP64)
HLOFUSE_DOT(pred, uint8_t, uint8_t, 0, HLOFUSE_ACC_PRED)

static inline uint32_t hlofuse_rotl(uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }

#define HLOFUSE_ROUND(r) do { y0 += y1; y1 = hlofuse_rotl(y1, r); y1 ^= y0; } while (0)
#define HLOFUSE_ROUNDS_A() do { HLOFUSE_ROUND(13); HLOFUSE_ROUND(15); HLOFUSE_ROUND(26); \
                                HLOFUSE_ROUND(6); } while (0)
#define HLOFUSE_ROUNDS_B() do { HLOFUSE_ROUND(17); HLOFUSE_ROUND(29); HLOFUSE_ROUND(16); \
                                HLOFUSE_ROUND(24); } while (0)

HLOFUSE_EXPORT void hlofuse_rt_threefry2x32(const uint32_t *k0, const uint32_t *k1,
                                            const uint32_t *x0, const uint32_t *x1,
                                            uint32_t *out0, uint32_t *out1, int64_t count) {
  _Pragma("omp parallel for schedule(static) if(count >= 65536)")
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t ks0 = k0[i], ks1 = k1[i], ks2 = ks0 ^ ks1 ^ 0x1BD11BDAu;
    uint32_t y0 = x0[i] + ks0, y1 = x1[i] + ks1;
    HLOFUSE_ROUNDS_A(); y0 += ks1; y1 += ks2 + 1u;
    HLOFUSE_ROUNDS_B(); y0 += ks2; y1 += ks0 + 2u;
    HLOFUSE_ROUNDS_A(); y0 += ks0; y1 += ks1 + 3u;
    HLOFUSE_ROUNDS_B(); y0 += ks1; y1 += ks2 + 4u;
    HLOFUSE_ROUNDS_A(); y0 += ks2; y1 += ks0 + 5u;
    out0[i] = y0;
    out1[i] = y1;
  }
}
