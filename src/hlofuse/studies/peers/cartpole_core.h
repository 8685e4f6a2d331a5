/* The CartPole step both hand-written kernels run (cartpole_kernel.c, cartpole_kernel.cu), so
 * that they compute it operation for operation alike: the constants, Threefry-2x32-20 and the
 * draws of jax.random built on it, the step keys, the inline sincos and the dynamics.
 *
 * The includer defines HF_FN, the qualifiers of the per-element functions (the C kernel forces
 * them inline; the CUDA kernel makes them __host__ __device__). hf_step_keys runs on the host.
 * The peers' Python loaders paste this file in place of its #include (peers/sources.py), so
 * the compile cache's key covers it.
 */
#ifndef HF_FN
#error "define HF_FN before including cartpole_core.h"
#endif
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define HF_GRAVITY 9.8f
#define HF_MASSPOLE 0.1f
#define HF_TOTAL_MASS 1.1f
#define HF_LENGTH 0.5f
#define HF_POLEMASS_LENGTH 0.05f
#define HF_FORCE_MAG 10.0f
#define HF_TAU 0.02f
#define HF_THETA_THRESHOLD 0.20943951023931953f
#define HF_X_THRESHOLD 2.4f
#define HF_POLICY_GAIN 0.5f
#define HF_SINCOS_LIMIT 8192.0f
#define HF_RESET_LOW -0.05f
#define HF_RESET_SPAN 0.1f /* float(0.05f - -0.05f), as jax.random.uniform computes it */

#define HF_ROTL(x, r) (((x) << (r)) | ((x) >> (32 - (r))))
#define HF_ROUND(x0, x1, r) \
    do { (x0) += (x1); (x1) = HF_ROTL((x1), r); (x1) ^= (x0); } while (0)
#define HF_FOUR(x0, x1, ra, rb, rc, rd) \
    do { HF_ROUND(x0, x1, ra); HF_ROUND(x0, x1, rb); \
         HF_ROUND(x0, x1, rc); HF_ROUND(x0, x1, rd); } while (0)

/* Threefry-2x32-20 (Random123): key (k0, k1), counter (c0, c1) -> (*o0, *o1). */
HF_FN void
hf_threefry(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1, uint32_t *o0, uint32_t *o1)
{
    uint32_t k2 = k0 ^ k1 ^ 0x1BD11BDAu;
    uint32_t x0 = c0 + k0, x1 = c1 + k1;
    HF_FOUR(x0, x1, 13, 15, 26, 6);
    x0 += k1; x1 += k2 + 1u;
    HF_FOUR(x0, x1, 17, 29, 16, 24);
    x0 += k2; x1 += k0 + 2u;
    HF_FOUR(x0, x1, 13, 15, 26, 6);
    x0 += k0; x1 += k1 + 3u;
    HF_FOUR(x0, x1, 17, 29, 16, 24);
    x0 += k1; x1 += k2 + 4u;
    HF_FOUR(x0, x1, 13, 15, 26, 6);
    x0 += k2; x1 += k0 + 5u;
    *o0 = x0;
    *o1 = x1;
}

/* jax.random.bits at one counter: the xor of the two words of Threefry((0, counter)). */
HF_FN uint32_t
hf_bits(uint32_t k0, uint32_t k1, uint32_t counter)
{
    uint32_t y0, y1;
    hf_threefry(k0, k1, 0u, counter, &y0, &y1);
    return y0 ^ y1;
}

/* jax.random.uniform(-0.05, 0.05) from one word: mantissa bits under 1.0's exponent. */
HF_FN float hf_uniform_reset(uint32_t bits)
{
    union { uint32_t u; float f; } one_to_two = { (bits >> 9) | 0x3F800000u };
    float v = (one_to_two.f - 1.0f) * HF_RESET_SPAN + HF_RESET_LOW;
    return v < HF_RESET_LOW ? HF_RESET_LOW : v;
}

/* Step keys: keys[4t..4t+3] = (ka0, ka1, kr0, kr1) of step t, or NULL without memory. */
static uint32_t *hf_step_keys(uint32_t seed, int64_t steps)
{
    uint32_t *keys = (uint32_t *)malloc(sizeof(uint32_t) * 4 * (size_t)(steps > 0 ? steps : 1));
    if (!keys)
        return NULL;
    uint32_t s0, s1, f0, f1;
    hf_threefry(0u, seed, 0u, 1u, &s0, &s1); /* steps_key = split(key(seed))[1] */
    for (int64_t t = 0; t < steps; ++t) {
        hf_threefry(s0, s1, 0u, (uint32_t)t, &f0, &f1); /* fold_in(steps_key, t) */
        hf_threefry(f0, f1, 0u, 0u, &keys[4 * t], &keys[4 * t + 1]);
        hf_threefry(f0, f1, 0u, 1u, &keys[4 * t + 2], &keys[4 * t + 3]);
    }
    return keys;
}

/* sin and cos of x for |x| <= HF_SINCOS_LIMIT; vectorisable (no calls, no branches). */
HF_FN void hf_sincosf(float x, float *s, float *c)
{
    /* Adding and subtracting 1.5 * 2^23 rounds to the nearest integer for |v| < 2^22. */
    float k = (x * 0.63661977236758134f + 12582912.0f) - 12582912.0f;
    int q = (int)k;
    float r = x - k * 1.5703125f;
    r = r - k * 4.837512969970703125e-4f;
    r = r - k * 7.54978995489188216e-8f;
    float z = r * r;
    float sp = r + r * z * (-1.6666654611e-1f + z * (8.3321608736e-3f + z * -1.9515295891e-4f));
    float cp = 1.0f - 0.5f * z
             + z * z * (4.166664568298827e-2f + z * (-1.388731625493765e-3f
                                                    + z * 2.443315711809948e-5f));
    float ss = (q & 1) ? cp : sp;
    float cc = (q & 1) ? sp : cp;
    *s = (q & 2) ? -ss : ss;
    *c = ((q + 1) & 2) ? -cc : cc;
}

HF_FN void
hf_dynamics(float s, float c, int action, float *x, float *x_dot, float *theta,
            float *theta_dot)
{
    float force = action ? HF_FORCE_MAG : -HF_FORCE_MAG;
    float td = *theta_dot;
    float temp = (force + HF_POLEMASS_LENGTH * td * td * s) / HF_TOTAL_MASS;
    float thetaacc = (HF_GRAVITY * s - c * temp)
                   / (HF_LENGTH * (4.0f / 3.0f - HF_MASSPOLE * c * c / HF_TOTAL_MASS));
    float xacc = temp - HF_POLEMASS_LENGTH * thetaacc * c / HF_TOTAL_MASS;
    float xn = *x + HF_TAU * *x_dot;
    *x_dot = *x_dot + HF_TAU * xacc;
    *x = xn;
    float thn = *theta + HF_TAU * td;
    *theta_dot = td + HF_TAU * thetaacc;
    *theta = thn;
}

HF_FN int hf_done(float x, float theta)
{
    return (fabsf(x) > HF_X_THRESHOLD) | (fabsf(theta) > HF_THETA_THRESHOLD);
}
