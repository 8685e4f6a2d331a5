/* Hand-written CUDA CartPole rollout: the GPU counterpart of cartpole_kernel.c.
 *
 * One thread per environment, the whole rollout in one launch: the state lives in registers,
 * the time loop runs inside the thread, and the episode count and return sum of each thread
 * are added into two device counters at the end (one atomic each per thread). The random
 * scheme is workload.py's, as in the C kernel: the step keys (three Threefry hashes per step,
 * the same for every environment) are computed once per call on the host into a table the
 * kernel reads; an environment's action is bernoulli(ka) at counter e, its reset state
 * uniform(kr) at counters j * N + e, drawn only when it finished (as the C scalar kernel).
 *
 * The arithmetic is the C kernel's, operation for operation (both include cartpole_core.h):
 * its inline sincos (libm's sinf/cosf, here CUDA's, only when an initial |theta| exceeds
 * 8192), the same dynamics, and nvcc's --fmad=false as the C build's -ffp-contract=off, so
 * with the same inputs the final states are the C kernel's bit for bit. Built either by nvcc or, for tests on a machine
 * without a GPU, by the C++ compiler after runtime/cuda_emulation.h.
 *
 * Entry point: hf_cuda_cartpole_rollout(n, steps, seed, deterministic, init, out, episodes,
 * return_sum) returns 0, -1 without host memory for the keys, -2 when the CUDA runtime fails
 * (hf_cuda_error() says how). */
#ifndef HLOFUSE_CUDA_EMULATION
#include <cuda_runtime.h>
#define HF_LAUNCH(KERNEL, BLOCKS, THREADS, ...) \
  KERNEL<<<(unsigned)(BLOCKS), (THREADS)>>>(__VA_ARGS__)
#else
#define HF_LAUNCH HLOFUSE_LAUNCH
#endif
#include <stdio.h>

#define HF_EXPORT extern "C" __attribute__((visibility("default")))
#define HF_BLOCK_THREADS 256

#define HF_FN static inline __host__ __device__
#include "cartpole_core.h"

/* One environment per thread, every step; its counts added to the totals at the end. */
__global__ void hf_rollout_kernel(int64_t n, int64_t steps, const uint32_t *keys,
                                  int deterministic, const float *init, float *out,
                                  unsigned long long *episodes, unsigned long long *returns) {
  const int64_t env = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (env >= n) return;
  const float *p = init + 4 * env;
  float x = p[0], xd = p[1], th = p[2], thd = p[3];
  const int exact_trig = !(fabsf(th) <= HF_SINCOS_LIMIT);
  long long count = 0, ret = 0, length = 0;
  const uint32_t e = (uint32_t)env, stride = (uint32_t)n;
  for (int64_t t = 0; t < steps; ++t) {
    int action;
    if (deterministic)
      action = thd + HF_POLICY_GAIN * th > 0.0f;
    else /* bernoulli(0.5): uniform < 0.5 exactly when the top bit is clear */
      action = (hf_bits(keys[4 * t], keys[4 * t + 1], e) >> 31) == 0u;
    float s, c;
    if (exact_trig) {
      s = sinf(th);
      c = cosf(th);
    } else {
      hf_sincosf(th, &s, &c);
    }
    hf_dynamics(s, c, action, &x, &xd, &th, &thd);
    length += 1;
    if (!hf_done(x, th)) continue;
    count += 1;
    ret += length;
    length = 0;
    if (deterministic) {
      x = p[0]; xd = p[1]; th = p[2]; thd = p[3];
      continue;
    }
    const uint32_t kr0 = keys[4 * t + 2], kr1 = keys[4 * t + 3];
    x = hf_uniform_reset(hf_bits(kr0, kr1, e));
    xd = hf_uniform_reset(hf_bits(kr0, kr1, stride + e));
    th = hf_uniform_reset(hf_bits(kr0, kr1, 2u * stride + e));
    thd = hf_uniform_reset(hf_bits(kr0, kr1, 3u * stride + e));
  }
  float *q = out + 4 * env;
  q[0] = x; q[1] = xd; q[2] = th; q[3] = thd;
  atomicAdd(episodes, (unsigned long long)count);
  atomicAdd(returns, (unsigned long long)ret);
}

static char hf_error_text[512];

static int hf_check(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  if (!hf_error_text[0])
    snprintf(hf_error_text, sizeof hf_error_text, "%s: %s: %s", what, cudaGetErrorName(e),
             cudaGetErrorString(e));
  return 1;
}

HF_EXPORT const char *hf_cuda_error(void) { return hf_error_text; }

/* Device memory kept between calls of the same size (a benchmark repeats one workload). */
static struct {
  int64_t n, steps;
  uint32_t *keys;
  float *init, *out;
  unsigned long long *counters;
} hf_device;

static void hf_release(void) {
  cudaFree(hf_device.keys);
  cudaFree(hf_device.init);
  cudaFree(hf_device.out);
  cudaFree(hf_device.counters);
  hf_device.keys = 0;
  hf_device.init = hf_device.out = 0;
  hf_device.counters = 0;
  hf_device.n = hf_device.steps = -1;
}

static int hf_reserve(int64_t n, int64_t steps) {
  if (hf_device.counters && hf_device.n == n && hf_device.steps == steps) return 0;
  hf_release();
  size_t states = sizeof(float) * 4 * (size_t)(n > 0 ? n : 1);
  if (hf_check(cudaMalloc((void **)&hf_device.keys,
                          sizeof(uint32_t) * 4 * (size_t)(steps > 0 ? steps : 1)), "keys") ||
      hf_check(cudaMalloc((void **)&hf_device.init, states), "initial states") ||
      hf_check(cudaMalloc((void **)&hf_device.out, states), "final states") ||
      hf_check(cudaMalloc((void **)&hf_device.counters, 2 * sizeof(unsigned long long)),
               "counters")) {
    hf_release();
    return 1;
  }
  hf_device.n = n;
  hf_device.steps = steps;
  return 0;
}

HF_EXPORT int hf_cuda_cartpole_rollout(int64_t n, int64_t steps, uint32_t seed,
                                       int deterministic, const float *init, float *out,
                                       int64_t *episodes, double *return_sum) {
  uint32_t *keys = hf_step_keys(seed, steps);
  if (!keys) return -1;
  hf_error_text[0] = 0;
  unsigned long long counts[2] = {0, 0};
  const size_t states = sizeof(float) * 4 * (size_t)n;
  int failed = hf_reserve(n, steps);
  failed = failed || hf_check(cudaMemcpy(hf_device.keys, keys, sizeof(uint32_t) * 4 *
                                         (size_t)steps, cudaMemcpyHostToDevice), "keys");
  free(keys);
  failed = failed || hf_check(cudaMemcpy(hf_device.init, init, states, cudaMemcpyHostToDevice),
                              "initial states");
  failed = failed || hf_check(cudaMemcpy(hf_device.counters, counts, sizeof counts,
                                         cudaMemcpyHostToDevice), "counters");
  if (!failed && n > 0) {
    const int64_t blocks = (n + HF_BLOCK_THREADS - 1) / HF_BLOCK_THREADS;
    HF_LAUNCH(hf_rollout_kernel, blocks, HF_BLOCK_THREADS, n, steps,
              (const uint32_t *)hf_device.keys, deterministic, (const float *)hf_device.init,
              hf_device.out, hf_device.counters, hf_device.counters + 1);
    failed = hf_check(cudaGetLastError(), "launch") ||
             hf_check(cudaDeviceSynchronize(), "rollout kernel");
  }
  failed = failed || hf_check(cudaMemcpy(out, hf_device.out, states, cudaMemcpyDeviceToHost),
                              "final states");
  failed = failed || hf_check(cudaMemcpy(counts, hf_device.counters, sizeof counts,
                                         cudaMemcpyDeviceToHost), "counters");
  if (failed) return -2;
  *episodes = (int64_t)counts[0];
  *return_sum = (double)counts[1];
  return 0;
}

/* How many GPUs the CUDA runtime sees (0 with hf_cuda_error() set when it cannot). */
HF_EXPORT int hf_cuda_devices(void) {
  int count = 0;
  hf_error_text[0] = 0;
  if (hf_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount")) return 0;
  return count;
}
