/* Hand-written kernels that exchange values between threads: each result is wrong unless
 * barriers and warp shuffles are exact (under the old emulation __syncthreads did nothing and
 * a shuffle returned the caller's own value). Built by nvcc (compile only, no GPU here) and by
 * the C++ compiler after cuda_emulation.h (tests/cuda/test_emulation_exchange.py). */
#ifndef HLOFUSE_CUDA_EMULATION
#include <cuda_runtime.h>
#define HLOFUSE_LAUNCH(KERNEL, BLOCKS, THREADS, ...) \
  KERNEL<<<(unsigned)(BLOCKS), (THREADS)>>>(__VA_ARGS__)
#endif
#include <stdint.h>

#define EXPORT extern "C" __attribute__((visibility("default")))

/* One sum per block: a tree through shared memory, a barrier between levels. */
__global__ void block_sum(const float *x, float *out, int n) {
  __shared__ float partial[256];
  const int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  partial[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

/* One sum per warp: a shuffle-down tree, lane 0 writes. */
__global__ void warp_sum(const int *x, int *out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = i < n ? x[i] : 0;
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) out[i / 32] = v;
}

/* A butterfly: every lane ends with its warp's maximum; then each lane reads lane 0's value
   (__shfl_sync) and its left neighbour's (__shfl_up_sync). */
__global__ void warp_butterfly(const double *x, double *max_out, double *left_out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  double v = x[i];
  for (int mask = 16; mask > 0; mask /= 2) {
    const double other = __shfl_xor_sync(0xffffffffu, v, mask);
    v = other > v ? other : v;
  }
  const double first = __shfl_sync(0xffffffffu, x[i], 0);
  max_out[i] = v + 0.0 * first;
  left_out[i] = __shfl_up_sync(0xffffffffu, x[i], 1) - first;
}

/* Block sum through both: shuffles within each warp, warp totals in shared memory, warp 0
   combines them (the shape of XLA's row-reduction emitter). */
__global__ void two_level_sum(const float *x, float *out, int n) {
  __shared__ float warps[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    v += x[i];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (lane == 0) warps[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)(blockDim.x + 31) / 32 ? warps[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) out[blockIdx.x] = v;
  }
}

/* Wrong CUDA: thread 0 leaves before the barrier the others wait at. */
__global__ void thread0_skips_barrier(int *out) {
  if (threadIdx.x == 0) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

template <typename T> static int roundtrip(T **device, const T *host, int n) {
  if (cudaMalloc((void **)device, sizeof(T) * (n > 0 ? n : 1)) != cudaSuccess) return 0;
  return host == 0 || cudaMemcpy(*device, host, sizeof(T) * n, cudaMemcpyHostToDevice)
      == cudaSuccess;
}

template <typename T> static int finish(T *host, T *device, int n) {
  int ok = cudaGetLastError() == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
  ok = ok && cudaMemcpy(host, device, sizeof(T) * n, cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(device);
  return ok ? 0 : 1;
}

EXPORT int run_block_sum(const float *x, float *out, int n, int threads) {
  float *dx, *dout;
  const int blocks = (n + threads - 1) / threads;
  if (!roundtrip(&dx, x, n) || !roundtrip(&dout, (const float *)0, blocks)) return 2;
  HLOFUSE_LAUNCH(block_sum, blocks, threads, dx, dout, n);
  cudaFree(dx);
  return finish(out, dout, blocks);
}

EXPORT int run_warp_sum(const int *x, int *out, int n, int threads) {
  int *dx, *dout;
  const int blocks = (n + threads - 1) / threads;
  if (!roundtrip(&dx, x, n) || !roundtrip(&dout, (const int *)0, (n + 31) / 32)) return 2;
  HLOFUSE_LAUNCH(warp_sum, blocks, threads, dx, dout, n);
  cudaFree(dx);
  return finish(out, dout, (n + 31) / 32);
}

EXPORT int run_warp_butterfly(const double *x, double *max_out, double *left_out, int n) {
  double *dx, *dmax, *dleft;
  if (!roundtrip(&dx, x, n) || !roundtrip(&dmax, (const double *)0, n)
      || !roundtrip(&dleft, (const double *)0, n)) return 2;
  HLOFUSE_LAUNCH(warp_butterfly, n / 64, 64, dx, dmax, dleft);
  cudaFree(dx);
  return finish(max_out, dmax, n) | finish(left_out, dleft, n);
}

EXPORT int run_two_level_sum(const float *x, float *out, int n, int blocks, int threads) {
  float *dx, *dout;
  if (!roundtrip(&dx, x, n) || !roundtrip(&dout, (const float *)0, blocks)) return 2;
  HLOFUSE_LAUNCH(two_level_sum, blocks, threads, dx, dout, n);
  cudaFree(dx);
  return finish(out, dout, blocks);
}

EXPORT int run_thread0_skips_barrier(int *out, int threads) {
  int *dout;
  if (!roundtrip(&dout, (const int *)0, threads)) return 2;
  HLOFUSE_LAUNCH(thread0_skips_barrier, 1, threads, dout);
  return finish(out, dout, threads);
}

#ifdef HLOFUSE_CUDA_EMULATION
/* The emulation's message for the last failure (kept after cudaGetLastError clears it). */
EXPORT const char *last_error(void) { return hlofuse_emu.message; }
#endif
