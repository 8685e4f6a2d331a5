/* Hand-written CartPole rollout: the practical limit the peers are measured against.
 *
 * Work and random scheme as in workload.py (jax.random's partitionable Threefry-2x32-20:
 * per step, keys ka and kr from fold_in and split; the action of environment e is
 * bernoulli(ka) at counter e, its reset state uniform(kr) at counters j * N + e). Two entry
 * points, each returning 0, or -1 when memory for the step keys cannot be had:
 *
 *   hf_cartpole_rollout         environments in blocks of HF_BLOCK lanes; blocks split across
 *                               threads (OpenMP); the time loop runs inside a block, its state
 *                               in block-local arrays the compiler keeps in vector registers or
 *                               L1; each step is two `omp simd` loops over the lanes (the
 *                               dynamics, then the reset draws and selects).
 *   hf_cartpole_rollout_scalar  one environment at a time, one thread, no SIMD: for small N,
 *                               where a thread team and padded lanes cost more than they save.
 *
 * The keys of every step (three Threefry hashes per step, the same for all environments) are
 * computed once per call into a table before the environment loop.
 *
 * sin/cos: without -ffast-math gcc does not vectorise loops that call sinf/cosf (glibc only
 * declares its SIMD variants under __FAST_MATH__), so the step uses an inline sincos instead:
 * Cody-Waite reduction by pi/2 in three parts and Cephes' minimax polynomials on
 * [-pi/4, pi/4]. Measured against float64 (tests/studies/test_peers.py): at most 1.5 ulp for
 * |x| <= 1 (CartPole's theta stays within 0.21) and wherever |result| > 1e-3 up to
 * |x| = 8192; absolute error under 1e-7 everywhere up to 8192 (near the zeros of sin and cos
 * far from 0 the three-part pi/2 leaves a relative error of many ulp). theta entering a step
 * is always either a reset value or a state that was not done, so |theta| <= 12 degrees after
 * the first step, except where a finished environment returns to its own initial state
 * (deterministic variant). So a block whose initial states have any |theta| > 8192 (or NaN)
 * runs with libm's sinf/cosf instead; no other input ever needs it.
 *
 * Resets: four of the five Threefry hashes of an environment-step are for the reset state,
 * needed only by environments that just finished. The scalar kernel draws them only then.
 * The vector kernel runs a second lane loop per step that draws them for every lane and
 * selects. Measured here (one core, N = 16384): guarding that loop with "did any lane of the
 * block finish" (true on about half of the steps for 16 lanes) was 8 % slower, the branch
 * being unpredictable; fusing both loops into one was 25 % slower (register pressure).
 *
 * Built with hlofuse's own flags (toolchain.DEFAULT_FLAGS: no -ffast-math, no FMA
 * contraction, hidden visibility), so the entry points are marked for export.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#ifndef HF_BLOCK
#define HF_BLOCK 16
#endif

#define HF_EXPORT __attribute__((visibility("default")))

#define HF_FN static inline __attribute__((always_inline))
#include "cartpole_core.h"

/* One block of HF_BLOCK lanes (the first `lanes` real, the rest padding) for all steps.
 * `deterministic` and `exact_trig` are literals at every call, so each combination compiles
 * to its own loop without run-time branches inside. */
static inline __attribute__((always_inline)) void
hf_run_block(int64_t n, int64_t base, int lanes, int64_t steps, const uint32_t *keys,
             int deterministic, int exact_trig, const float *init, float *out,
             int64_t *episodes, int64_t *returns)
{
    float x[HF_BLOCK], xd[HF_BLOCK], th[HF_BLOCK], thd[HF_BLOCK];
    float ix[HF_BLOCK], ixd[HF_BLOCK], ith[HF_BLOCK], ithd[HF_BLOCK];
    int32_t done[HF_BLOCK], length[HF_BLOCK], count[HF_BLOCK], ret[HF_BLOCK];
    for (int l = 0; l < HF_BLOCK; ++l) {
        const float *p = init + 4 * (base + (l < lanes ? l : 0));
        ix[l] = p[0]; ixd[l] = p[1]; ith[l] = p[2]; ithd[l] = p[3];
        x[l] = ix[l]; xd[l] = ixd[l]; th[l] = ith[l]; thd[l] = ithd[l];
        length[l] = 0;
        count[l] = 0;
        ret[l] = 0;
    }
    for (int64_t t = 0; t < steps; ++t) {
        const uint32_t ka0 = keys[4 * t], ka1 = keys[4 * t + 1];
        const uint32_t kr0 = keys[4 * t + 2], kr1 = keys[4 * t + 3];
#pragma omp simd
        for (int l = 0; l < HF_BLOCK; ++l) {
            int action;
            if (deterministic)
                action = thd[l] + HF_POLICY_GAIN * th[l] > 0.0f;
            else /* bernoulli(0.5): uniform < 0.5 exactly when the top bit is clear */
                action = (hf_bits(ka0, ka1, (uint32_t)(base + l)) >> 31) == 0u;
            float s, c;
            if (exact_trig) {
                s = sinf(th[l]);
                c = cosf(th[l]);
            } else {
                hf_sincosf(th[l], &s, &c);
            }
            hf_dynamics(s, c, action, &x[l], &xd[l], &th[l], &thd[l]);
            int d = hf_done(x[l], th[l]);
            int len = length[l] + 1;
            done[l] = d;
            count[l] += d;
            ret[l] += d ? len : 0;
            length[l] = d ? 0 : len;
        }
#pragma omp simd
        for (int l = 0; l < HF_BLOCK; ++l) {
            float rx, rxd, rth, rthd;
            if (deterministic) {
                rx = ix[l]; rxd = ixd[l]; rth = ith[l]; rthd = ithd[l];
            } else {
                uint32_t e = (uint32_t)(base + l), stride = (uint32_t)n;
                rx = hf_uniform_reset(hf_bits(kr0, kr1, e));
                rxd = hf_uniform_reset(hf_bits(kr0, kr1, stride + e));
                rth = hf_uniform_reset(hf_bits(kr0, kr1, 2u * stride + e));
                rthd = hf_uniform_reset(hf_bits(kr0, kr1, 3u * stride + e));
            }
            x[l] = done[l] ? rx : x[l];
            xd[l] = done[l] ? rxd : xd[l];
            th[l] = done[l] ? rth : th[l];
            thd[l] = done[l] ? rthd : thd[l];
        }
    }
    int64_t block_episodes = 0, block_returns = 0;
    for (int l = 0; l < lanes; ++l) {
        float *p = out + 4 * (base + l);
        p[0] = x[l]; p[1] = xd[l]; p[2] = th[l]; p[3] = thd[l];
        block_episodes += count[l];
        block_returns += ret[l];
    }
    *episodes += block_episodes;
    *returns += block_returns;
}

static int hf_needs_exact_trig(const float *init, int64_t base, int lanes)
{
    int big = 0;
    for (int l = 0; l < lanes; ++l) {
        float theta = init[4 * (base + l) + 2];
        big |= !(fabsf(theta) <= HF_SINCOS_LIMIT);
    }
    return big;
}

static void hf_dispatch_block(int64_t n, int64_t base, int lanes, int64_t steps,
                              const uint32_t *keys, int deterministic, const float *init,
                              float *out, int64_t *episodes, int64_t *returns)
{
    int exact = hf_needs_exact_trig(init, base, lanes);
    if (deterministic && exact)
        hf_run_block(n, base, lanes, steps, keys, 1, 1, init, out, episodes, returns);
    else if (deterministic)
        hf_run_block(n, base, lanes, steps, keys, 1, 0, init, out, episodes, returns);
    else if (exact)
        hf_run_block(n, base, lanes, steps, keys, 0, 1, init, out, episodes, returns);
    else
        hf_run_block(n, base, lanes, steps, keys, 0, 0, init, out, episodes, returns);
}

HF_EXPORT int hf_cartpole_rollout(int64_t n, int64_t steps, uint32_t seed, int deterministic,
                                  const float *init, float *out, int64_t *episodes,
                                  double *return_sum)
{
    uint32_t *keys = hf_step_keys(seed, steps);
    if (!keys)
        return -1;
    int64_t n_blocks = (n + HF_BLOCK - 1) / HF_BLOCK;
    int64_t total_episodes = 0, total_returns = 0;
    /* One block needs no thread team; waking one would cost more than the block's work. */
#pragma omp parallel for schedule(static) reduction(+ : total_episodes, total_returns) \
    if (n_blocks > 1)
    for (int64_t b = 0; b < n_blocks; ++b) {
        int64_t base = b * HF_BLOCK;
        int lanes = (int)(n - base < HF_BLOCK ? n - base : HF_BLOCK);
        int64_t block_episodes = 0, block_returns = 0;
        hf_dispatch_block(n, base, lanes, steps, keys, deterministic, init, out,
                          &block_episodes, &block_returns);
        total_episodes += block_episodes;
        total_returns += block_returns;
    }
    free(keys);
    *episodes = total_episodes;
    *return_sum = (double)total_returns;
    return 0;
}

/* One environment, all steps, scalar code; `exact_trig` as in hf_run_block. */
static inline __attribute__((always_inline)) void
hf_run_env(int64_t n, int64_t env, int64_t steps, const uint32_t *keys, int deterministic,
           int exact_trig, const float *init, float *out, int64_t *episodes,
           int64_t *returns)
{
    const float *p = init + 4 * env;
    float x = p[0], xd = p[1], th = p[2], thd = p[3];
    int64_t count = 0, ret = 0, length = 0;
    for (int64_t t = 0; t < steps; ++t) {
        int action;
        if (deterministic)
            action = thd + HF_POLICY_GAIN * th > 0.0f;
        else
            action = (hf_bits(keys[4 * t], keys[4 * t + 1], (uint32_t)env) >> 31) == 0u;
        float s, c;
        if (exact_trig) {
            s = sinf(th);
            c = cosf(th);
        } else {
            hf_sincosf(th, &s, &c);
        }
        hf_dynamics(s, c, action, &x, &xd, &th, &thd);
        length += 1;
        if (!hf_done(x, th))
            continue;
        count += 1;
        ret += length;
        length = 0;
        if (deterministic) {
            x = p[0]; xd = p[1]; th = p[2]; thd = p[3];
            continue;
        }
        uint32_t kr0 = keys[4 * t + 2], kr1 = keys[4 * t + 3];
        uint32_t e = (uint32_t)env, stride = (uint32_t)n;
        x = hf_uniform_reset(hf_bits(kr0, kr1, e));
        xd = hf_uniform_reset(hf_bits(kr0, kr1, stride + e));
        th = hf_uniform_reset(hf_bits(kr0, kr1, 2u * stride + e));
        thd = hf_uniform_reset(hf_bits(kr0, kr1, 3u * stride + e));
    }
    float *q = out + 4 * env;
    q[0] = x; q[1] = xd; q[2] = th; q[3] = thd;
    *episodes += count;
    *returns += ret;
}

HF_EXPORT int hf_cartpole_rollout_scalar(int64_t n, int64_t steps, uint32_t seed,
                                         int deterministic, const float *init, float *out,
                                         int64_t *episodes, double *return_sum)
{
    uint32_t *keys = hf_step_keys(seed, steps);
    if (!keys)
        return -1;
    int64_t total_episodes = 0, total_returns = 0;
    for (int64_t env = 0; env < n; ++env) {
        int exact = hf_needs_exact_trig(init, env, 1);
        if (deterministic && exact)
            hf_run_env(n, env, steps, keys, 1, 1, init, out, &total_episodes, &total_returns);
        else if (deterministic)
            hf_run_env(n, env, steps, keys, 1, 0, init, out, &total_episodes, &total_returns);
        else if (exact)
            hf_run_env(n, env, steps, keys, 0, 1, init, out, &total_episodes, &total_returns);
        else
            hf_run_env(n, env, steps, keys, 0, 0, init, out, &total_episodes, &total_returns);
    }
    free(keys);
    *episodes = total_episodes;
    *return_sum = (double)total_returns;
    return 0;
}

/* The inline sincos over an array, so tests can measure its error against a reference. */
HF_EXPORT void hf_sincosf_array(int64_t n, const float *x, float *s, float *c)
{
    for (int64_t i = 0; i < n; ++i)
        hf_sincosf(x[i], &s[i], &c[i]);
}
