/* Hand-written CartPole rollout: the practical limit the peers are measured against.
 *
 * Work and random scheme as in workload.py (Threefry-2x32-20 keyed by (seed, j), counter
 * (env, step)). Two entry points:
 *
 *   hf_cartpole_rollout         environments in blocks of HF_BLOCK lanes; blocks split across
 *                               threads (OpenMP); the time loop runs inside a block, its state
 *                               in block-local arrays the compiler keeps in vector registers or
 *                               L1; the per-step work is one `omp simd` loop over the lanes.
 *   hf_cartpole_rollout_scalar  one environment at a time, one thread, no SIMD: for small N,
 *                               where a thread team and padded lanes cost more than they save.
 *
 * sin/cos: without -ffast-math gcc does not vectorise loops that call sinf/cosf (glibc only
 * declares its SIMD variants under __FAST_MATH__), so the step uses an inline sincos instead:
 * Cody-Waite reduction by pi/2 in three parts and Cephes' minimax polynomials on
 * [-pi/4, pi/4], about 1 ulp (tests measure it). The reduction is accurate for |x| <= 8192.
 * theta entering a step is always either a reset value or a state that was not done, so
 * |theta| <= 12 degrees after the first step, except where a finished environment returns to
 * its own initial state (deterministic variant). So a block whose initial states have any
 * |theta| > 8192 (or NaN) runs with libm's sinf/cosf instead; no other input ever needs it.
 *
 * Resets: the three Threefry blocks of a step cost more than the dynamics. Block 0 (action
 * and reset x) is needed every step; blocks 1 and 2 (the rest of the reset state) only by
 * environments that just finished, so the vector kernel draws them in a second lane loop that
 * runs only when some lane of the block finished (about half of the steps for 16 lanes under
 * the random policy). The bits drawn are the same as an unconditional draw would give.
 *
 * No -ffast-math: IEEE semantics throughout (gcc contracts a*b+c into FMA by default, which
 * only changes rounding in the last bit).
 */
#include <math.h>
#include <stdint.h>

#ifndef HF_BLOCK
#define HF_BLOCK 16
#endif

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

#define HF_ROTL(x, r) (((x) << (r)) | ((x) >> (32 - (r))))
#define HF_ROUND(x0, x1, r) \
    do { (x0) += (x1); (x1) = HF_ROTL((x1), r); (x1) ^= (x0); } while (0)
#define HF_FOUR(x0, x1, ra, rb, rc, rd) \
    do { HF_ROUND(x0, x1, ra); HF_ROUND(x0, x1, rb); \
         HF_ROUND(x0, x1, rc); HF_ROUND(x0, x1, rd); } while (0)

/* Threefry-2x32-20 (Random123): key (k0, k1), counter (c0, c1) -> (*o0, *o1). */
static inline __attribute__((always_inline)) void
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

static inline __attribute__((always_inline)) float hf_uniform_reset(uint32_t w)
{
    return (float)(w >> 8) * 5.9604644775390625e-08f * 0.1f + -0.05f;
}

/* sin and cos of x for |x| <= HF_SINCOS_LIMIT; vectorisable (no calls, no branches). */
static inline __attribute__((always_inline)) void hf_sincosf(float x, float *s, float *c)
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

static inline __attribute__((always_inline)) void
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

static inline __attribute__((always_inline)) int hf_done(float x, float theta)
{
    return (fabsf(x) > HF_X_THRESHOLD) | (fabsf(theta) > HF_THETA_THRESHOLD);
}

/* One block of HF_BLOCK lanes (the first `lanes` real, the rest padding) for all steps.
 * `deterministic` and `exact_trig` are literals at every call, so each combination compiles
 * to its own loop without run-time branches inside. */
static inline __attribute__((always_inline)) void
hf_run_block(int64_t base, int lanes, int64_t steps, uint32_t seed, int deterministic,
             int exact_trig, const float *init, float *out, int64_t *episodes, double *reward)
{
    float x[HF_BLOCK], xd[HF_BLOCK], th[HF_BLOCK], thd[HF_BLOCK];
    float ix[HF_BLOCK], ixd[HF_BLOCK], ith[HF_BLOCK], ithd[HF_BLOCK];
    uint32_t reset_x[HF_BLOCK];
    int32_t done[HF_BLOCK], count[HF_BLOCK];
    float rew[HF_BLOCK];
    for (int l = 0; l < HF_BLOCK; ++l) {
        const float *p = init + 4 * (base + (l < lanes ? l : 0));
        ix[l] = p[0]; ixd[l] = p[1]; ith[l] = p[2]; ithd[l] = p[3];
        x[l] = ix[l]; xd[l] = ixd[l]; th[l] = ith[l]; thd[l] = ithd[l];
        count[l] = 0;
        rew[l] = 0.0f;
    }
    for (int64_t t = 0; t < steps; ++t) {
        uint32_t step = (uint32_t)t;
        int any_done = 0;
#pragma omp simd reduction(| : any_done)
        for (int l = 0; l < HF_BLOCK; ++l) {
            int action;
            if (deterministic) {
                action = thd[l] + HF_POLICY_GAIN * th[l] > 0.0f;
            } else {
                uint32_t a0, a1;
                hf_threefry(seed, 0u, (uint32_t)(base + l), step, &a0, &a1);
                action = (int)(a0 >> 31);
                reset_x[l] = a1;
            }
            float s, c;
            if (exact_trig) {
                s = sinf(th[l]);
                c = cosf(th[l]);
            } else {
                hf_sincosf(th[l], &s, &c);
            }
            hf_dynamics(s, c, action, &x[l], &xd[l], &th[l], &thd[l]);
            done[l] = hf_done(x[l], th[l]);
            count[l] += done[l];
            rew[l] += 1.0f;
            any_done |= done[l];
        }
        if (!any_done)
            continue;
#pragma omp simd
        for (int l = 0; l < HF_BLOCK; ++l) {
            float rx, rxd, rth, rthd;
            if (deterministic) {
                rx = ix[l]; rxd = ixd[l]; rth = ith[l]; rthd = ithd[l];
            } else {
                uint32_t b0, b1, c0, c1;
                hf_threefry(seed, 1u, (uint32_t)(base + l), step, &b0, &b1);
                hf_threefry(seed, 2u, (uint32_t)(base + l), step, &c0, &c1);
                rx = hf_uniform_reset(reset_x[l]);
                rxd = hf_uniform_reset(b0);
                rth = hf_uniform_reset(b1);
                rthd = hf_uniform_reset(c0);
            }
            x[l] = done[l] ? rx : x[l];
            xd[l] = done[l] ? rxd : xd[l];
            th[l] = done[l] ? rth : th[l];
            thd[l] = done[l] ? rthd : thd[l];
        }
    }
    int64_t block_episodes = 0;
    double block_reward = 0.0;
    for (int l = 0; l < lanes; ++l) {
        float *p = out + 4 * (base + l);
        p[0] = x[l]; p[1] = xd[l]; p[2] = th[l]; p[3] = thd[l];
        block_episodes += count[l];
        block_reward += rew[l];
    }
    *episodes += block_episodes;
    *reward += block_reward;
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

static void hf_dispatch_block(int64_t base, int lanes, int64_t steps, uint32_t seed,
                              int deterministic, const float *init, float *out,
                              int64_t *episodes, double *reward)
{
    int exact = hf_needs_exact_trig(init, base, lanes);
    if (deterministic && exact)
        hf_run_block(base, lanes, steps, seed, 1, 1, init, out, episodes, reward);
    else if (deterministic)
        hf_run_block(base, lanes, steps, seed, 1, 0, init, out, episodes, reward);
    else if (exact)
        hf_run_block(base, lanes, steps, seed, 0, 1, init, out, episodes, reward);
    else
        hf_run_block(base, lanes, steps, seed, 0, 0, init, out, episodes, reward);
}

void hf_cartpole_rollout(int64_t n, int64_t steps, uint32_t seed, int deterministic,
                         const float *init, float *out, int64_t *episodes, double *reward)
{
    int64_t n_blocks = (n + HF_BLOCK - 1) / HF_BLOCK;
    int64_t total_episodes = 0;
    double total_reward = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total_episodes, total_reward)
    for (int64_t b = 0; b < n_blocks; ++b) {
        int64_t base = b * HF_BLOCK;
        int lanes = (int)(n - base < HF_BLOCK ? n - base : HF_BLOCK);
        int64_t block_episodes = 0;
        double block_reward = 0.0;
        hf_dispatch_block(base, lanes, steps, seed, deterministic, init, out,
                          &block_episodes, &block_reward);
        total_episodes += block_episodes;
        total_reward += block_reward;
    }
    *episodes = total_episodes;
    *reward = total_reward;
}

/* One environment, all steps, scalar code; `exact_trig` as in hf_run_block. */
static inline __attribute__((always_inline)) void
hf_run_env(int64_t env, int64_t steps, uint32_t seed, int deterministic, int exact_trig,
           const float *init, float *out, int64_t *episodes, double *reward)
{
    const float *p = init + 4 * env;
    float x = p[0], xd = p[1], th = p[2], thd = p[3];
    int64_t count = 0;
    double rew = 0.0;
    for (int64_t t = 0; t < steps; ++t) {
        uint32_t step = (uint32_t)t;
        uint32_t a0 = 0, a1 = 0;
        int action;
        if (deterministic) {
            action = thd + HF_POLICY_GAIN * th > 0.0f;
        } else {
            hf_threefry(seed, 0u, (uint32_t)env, step, &a0, &a1);
            action = (int)(a0 >> 31);
        }
        float s, c;
        if (exact_trig) {
            s = sinf(th);
            c = cosf(th);
        } else {
            hf_sincosf(th, &s, &c);
        }
        hf_dynamics(s, c, action, &x, &xd, &th, &thd);
        rew += 1.0;
        if (!hf_done(x, th))
            continue;
        count += 1;
        if (deterministic) {
            x = p[0]; xd = p[1]; th = p[2]; thd = p[3];
            continue;
        }
        uint32_t b0, b1, c0, c1;
        hf_threefry(seed, 1u, (uint32_t)env, step, &b0, &b1);
        hf_threefry(seed, 2u, (uint32_t)env, step, &c0, &c1);
        x = hf_uniform_reset(a1);
        xd = hf_uniform_reset(b0);
        th = hf_uniform_reset(b1);
        thd = hf_uniform_reset(c0);
    }
    float *q = out + 4 * env;
    q[0] = x; q[1] = xd; q[2] = th; q[3] = thd;
    *episodes += count;
    *reward += rew;
}

void hf_cartpole_rollout_scalar(int64_t n, int64_t steps, uint32_t seed, int deterministic,
                                const float *init, float *out, int64_t *episodes,
                                double *reward)
{
    int64_t total_episodes = 0;
    double total_reward = 0.0;
    for (int64_t env = 0; env < n; ++env) {
        int exact = hf_needs_exact_trig(init, env, 1);
        if (deterministic && exact)
            hf_run_env(env, steps, seed, 1, 1, init, out, &total_episodes, &total_reward);
        else if (deterministic)
            hf_run_env(env, steps, seed, 1, 0, init, out, &total_episodes, &total_reward);
        else if (exact)
            hf_run_env(env, steps, seed, 0, 1, init, out, &total_episodes, &total_reward);
        else
            hf_run_env(env, steps, seed, 0, 0, init, out, &total_episodes, &total_reward);
    }
    *episodes = total_episodes;
    *reward = total_reward;
}

/* The inline sincos over an array, so tests can measure its error against a reference. */
void hf_sincosf_array(int64_t n, const float *x, float *s, float *c)
{
    for (int64_t i = 0; i < n; ++i)
        hf_sincosf(x[i], &s[i], &c[i]);
}
