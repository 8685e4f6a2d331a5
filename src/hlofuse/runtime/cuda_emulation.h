/* CUDA emulated on the CPU: the same generated kernels, built by a C++ compiler and run in
 * order. A launch runs the kernel once per (block, thread), one after another; device memory
 * is host memory. Generated kernels never wait for each other inside a launch (no barrier,
 * no shuffle) except through what is emulated here in order: __syncthreads is a no-op, which
 * is exact only for kernels without shared-memory exchanges, and warp shuffles read the
 * calling thread's own value (a one-lane warp). Atomics are plain read-modify-writes. */
#ifndef HLOFUSE_CUDA_EMULATION_H
#define HLOFUSE_CUDA_EMULATION_H
#define HLOFUSE_CUDA_EMULATION 1

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __noinline__ __attribute__((noinline))
#define __forceinline__ inline

struct dim3 {
  unsigned int x, y, z;
};
static dim3 blockIdx, threadIdx, blockDim, gridDim;

static inline void __syncthreads(void) {}
static inline void __threadfence(void) {}
static inline float __shfl_down_sync(unsigned, float v, int, int = 32) { return v; }
static inline double __shfl_down_sync(unsigned, double v, int, int = 32) { return v; }
template <typename T> static inline T atomicAdd(T *p, T v) { T old = *p; *p = old + v; return old; }
template <typename T> static inline T atomicMax(T *p, T v) { T old = *p; if (v > old) *p = v; return old; }
template <typename T> static inline T atomicMin(T *p, T v) { T old = *p; if (v < old) *p = v; return old; }

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum { cudaLimitMallocHeapSize = 2 };

static inline const char *cudaGetErrorName(cudaError_t e) {
  return e == cudaSuccess ? "cudaSuccess" : "cudaErrorMemoryAllocation";
}
static inline const char *cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : "out of memory (emulated device)";
}
static inline cudaError_t cudaMalloc(void **p, size_t n) {
  *p = malloc(n ? n : 1);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
static inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) {
  if (n) memmove(d, s, n);
  return cudaSuccess;
}
static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
static inline cudaError_t cudaDeviceSetLimit(int, size_t) { return cudaSuccess; }
static inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }

/* Every thread of every block, in order. */
#define HLOFUSE_LAUNCH(KERNEL, BLOCKS, THREADS, ...) do { \
  gridDim.x = (unsigned)(BLOCKS); gridDim.y = gridDim.z = 1; \
  blockDim.x = (unsigned)(THREADS); blockDim.y = blockDim.z = 1; \
  for (unsigned hlofuse_b_ = 0; hlofuse_b_ < gridDim.x; ++hlofuse_b_) \
    for (unsigned hlofuse_t_ = 0; hlofuse_t_ < blockDim.x; ++hlofuse_t_) { \
      blockIdx.x = hlofuse_b_; threadIdx.x = hlofuse_t_; \
      KERNEL(__VA_ARGS__); } } while (0)

#endif
