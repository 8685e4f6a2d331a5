/* CUDA emulated on the CPU: the same generated kernels, built by a C++ compiler. Device memory
 * is host memory; a launch runs its blocks one after another.
 *
 * Inside a block the threads are cooperative fibers (ucontext), so exchanges are exact:
 * `__syncthreads()` suspends a thread until every live thread of its block has reached a
 * barrier, and a warp shuffle publishes the caller's value, waits for the live threads of its
 * warp (32 consecutive threads), reads its partner's and waits again. Threads that exited
 * count as arrived, as on a GPU; a barrier that can never be released (one warp split between
 * `__syncthreads` and a shuffle) is reported as a launch failure. The mask argument of the
 * `_sync` intrinsics is not checked: every live thread of the warp takes part.
 *
 * Fast path: each block's thread 0 starts as a fiber. If it finishes without synchronising,
 * the other threads of the block run straight on the host stack, one after another (a kernel
 * without exchanges needs nothing else). A thread run that way which does synchronise makes
 * the launch fail with a message instead of returning a wrong result.
 *
 * `__shared__` variables are static: one instance, which every thread of the running block
 * sees; blocks run one at a time, so it is one instance per block, left as the previous block
 * wrote it (CUDA leaves shared memory uninitialised). Atomics are plain read-modify-writes
 * (fibers switch only at barriers and shuffles). Events read a host clock. */
#ifndef HLOFUSE_CUDA_EMULATION_H
#define HLOFUSE_CUDA_EMULATION_H
#define HLOFUSE_CUDA_EMULATION 1

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>

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
static const int warpSize = 32;

typedef int cudaError_t;
enum {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorLaunchFailure = 719
};

/* --- threads of a block as fibers ------------------------------------------------------- */

enum { HLOFUSE_EMU_RUNNABLE, HLOFUSE_EMU_AT_BARRIER, HLOFUSE_EMU_AT_WARP, HLOFUSE_EMU_DONE };
enum { HLOFUSE_EMU_MAX_THREADS = 1024 };
/* Thread 0 runs every kernel as a fiber, so its stack is as large as a host thread's usual
   one, above a guard page; the others (only kernels that synchronise) share one mapping above
   another, a canary word at the bottom of each stack checked when the block ends. Few mappings
   per loaded module: the process's map count is limited. */
static const size_t HLOFUSE_EMU_STACK0 = (size_t)8 << 20;
static const size_t HLOFUSE_EMU_STACK = (size_t)512 << 10;
static const uint64_t HLOFUSE_EMU_CANARY = 0x686c6f6675736521ull;

struct hlofuse_emu_fiber {
  ucontext_t context;
  int state;
};

static struct {
  hlofuse_emu_fiber fiber[HLOFUSE_EMU_MAX_THREADS];
  uint64_t exchange[HLOFUSE_EMU_MAX_THREADS]; /* each thread's published shuffle value */
  char *stack0;                               /* thread 0's stack, on first use */
  char *stacks;                               /* threads 1 .. stacks_for - 1 */
  unsigned stacks_for;
  ucontext_t scheduler;
  int as_fibers;      /* the running thread is a fiber (it may wait) */
  void (*call)(void *);
  void *closure;
  cudaError_t error;  /* the first failure since the last cudaGetLastError */
  char message[256];
} hlofuse_emu;

static void hlofuse_emu_fail(cudaError_t code, const char *text) {
  if (hlofuse_emu.error != cudaSuccess) return;
  hlofuse_emu.error = code;
  snprintf(hlofuse_emu.message, sizeof hlofuse_emu.message, "%s (thread %u of block %u)",
           text, threadIdx.x, blockIdx.x);
}

/* The running fiber stops in `state` until the scheduler releases it. */
static void hlofuse_emu_wait(int state) {
  if (!hlofuse_emu.as_fibers) {
    hlofuse_emu_fail(cudaErrorLaunchFailure,
                     "emulation: a thread synchronised although thread 0 of its block finished "
                     "without doing so (a barrier or shuffle not reached by every thread)");
    return;
  }
  hlofuse_emu_fiber *self = &hlofuse_emu.fiber[threadIdx.x];
  self->state = state;
  swapcontext(&self->context, &hlofuse_emu.scheduler);
}

static void hlofuse_emu_entry(void) {
  hlofuse_emu.call(hlofuse_emu.closure);
  hlofuse_emu.fiber[threadIdx.x].state = HLOFUSE_EMU_DONE;
  /* uc_link returns to the scheduler */
}

static char *hlofuse_emu_map(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? (char *)0 : (char *)p;
}

/* Stacks for a block of `threads`: thread 0's always, the others' when it synchronises. */
static int hlofuse_emu_stacks(unsigned threads) {
  if (!hlofuse_emu.stack0) {
    hlofuse_emu.stack0 = hlofuse_emu_map(HLOFUSE_EMU_STACK0 + 4096);
    if (!hlofuse_emu.stack0) return 0;
    mprotect(hlofuse_emu.stack0, 4096, PROT_NONE);
  }
  if (threads > 1 && threads > hlofuse_emu.stacks_for) {
    if (hlofuse_emu.stacks)
      munmap(hlofuse_emu.stacks - 4096,
             (size_t)(hlofuse_emu.stacks_for - 1) * HLOFUSE_EMU_STACK + 4096);
    hlofuse_emu.stacks_for = 0;
    char *mapped = hlofuse_emu_map((size_t)(threads - 1) * HLOFUSE_EMU_STACK + 4096);
    if (!mapped) return 0;
    mprotect(mapped, 4096, PROT_NONE);
    hlofuse_emu.stacks = mapped + 4096;
    hlofuse_emu.stacks_for = threads;
  }
  return 1;
}

static char *hlofuse_emu_stack_of(unsigned t, size_t *size) {
  if (t == 0) {
    *size = HLOFUSE_EMU_STACK0;
    return hlofuse_emu.stack0 + 4096;
  }
  *size = HLOFUSE_EMU_STACK;
  return hlofuse_emu.stacks + (size_t)(t - 1) * HLOFUSE_EMU_STACK;
}

static void hlofuse_emu_start(unsigned t) {
  hlofuse_emu_fiber *f = &hlofuse_emu.fiber[t];
  size_t size;
  char *stack = hlofuse_emu_stack_of(t, &size);
  if (t) memcpy(stack, &HLOFUSE_EMU_CANARY, sizeof HLOFUSE_EMU_CANARY);
  getcontext(&f->context);
  f->context.uc_stack.ss_sp = stack;
  f->context.uc_stack.ss_size = size;
  f->context.uc_link = &hlofuse_emu.scheduler;
  makecontext(&f->context, hlofuse_emu_entry, 0);
  f->state = HLOFUSE_EMU_RUNNABLE;
}

static void hlofuse_emu_resume(unsigned t) {
  threadIdx.x = t;
  swapcontext(&hlofuse_emu.scheduler, &hlofuse_emu.fiber[t].context);
}

/* Runs every fiber of the block until all are done: in rounds, each runnable fiber runs to
   its next wait; then a warp whose live threads all wait at a shuffle is released, or else,
   when every live thread waits at __syncthreads, the block is. */
static void hlofuse_emu_schedule(unsigned threads) {
  for (;;) {
    for (unsigned t = 0; t < threads; ++t)
      if (hlofuse_emu.fiber[t].state == HLOFUSE_EMU_RUNNABLE) hlofuse_emu_resume(t);
    unsigned live = 0, at_barrier = 0, released = 0;
    for (unsigned w = 0; w < threads; w += 32) {
      unsigned end = w + 32 < threads ? w + 32 : threads, warp_live = 0, warp_waiting = 0;
      for (unsigned t = w; t < end; ++t) {
        int s = hlofuse_emu.fiber[t].state;
        warp_live += s != HLOFUSE_EMU_DONE;
        warp_waiting += s == HLOFUSE_EMU_AT_WARP;
        at_barrier += s == HLOFUSE_EMU_AT_BARRIER;
      }
      live += warp_live;
      if (warp_live && warp_waiting == warp_live) {
        for (unsigned t = w; t < end; ++t) hlofuse_emu.fiber[t].state = HLOFUSE_EMU_RUNNABLE;
        released = 1;
      }
    }
    if (!live) return;
    if (released) continue;
    if (at_barrier == live) {
      for (unsigned t = 0; t < threads; ++t)
        if (hlofuse_emu.fiber[t].state == HLOFUSE_EMU_AT_BARRIER)
          hlofuse_emu.fiber[t].state = HLOFUSE_EMU_RUNNABLE;
      continue;
    }
    threadIdx.x = 0;
    hlofuse_emu_fail(cudaErrorLaunchFailure,
                     "emulation: deadlock, a warp is split between __syncthreads and a shuffle");
    return; /* the waiting fibers are abandoned; their stacks are reused */
  }
}

static void hlofuse_emu_block(unsigned threads) {
  hlofuse_emu.as_fibers = 1;
  if (!hlofuse_emu_stacks(1)) {
    hlofuse_emu_fail(cudaErrorMemoryAllocation, "emulation: no memory for thread stacks");
    return;
  }
  hlofuse_emu_start(0);
  hlofuse_emu_resume(0);
  if (hlofuse_emu.fiber[0].state == HLOFUSE_EMU_DONE) {
    /* thread 0 never synchronised: the rest of the block runs straight */
    hlofuse_emu.as_fibers = 0;
    for (unsigned t = 1; t < threads; ++t) {
      threadIdx.x = t;
      hlofuse_emu.call(hlofuse_emu.closure);
    }
    return;
  }
  if (!hlofuse_emu_stacks(threads)) {
    hlofuse_emu_fail(cudaErrorMemoryAllocation, "emulation: no memory for thread stacks");
    return;
  }
  for (unsigned t = 1; t < threads; ++t) hlofuse_emu_start(t);
  hlofuse_emu_schedule(threads);
  for (unsigned t = 1; t < threads; ++t) {
    size_t size;
    if (memcmp(hlofuse_emu_stack_of(t, &size), &HLOFUSE_EMU_CANARY, sizeof(uint64_t)) != 0) {
      threadIdx.x = t;
      /* into its neighbour's stack (or the guard page below them all) */
      hlofuse_emu_fail(cudaErrorLaunchFailure, "emulation: a thread's stack overflowed");
      return;
    }
  }
}

template <typename F> static void hlofuse_emu_call(void *closure) { (*(F *)closure)(); }

template <typename F> static void hlofuse_emu_launch(unsigned blocks, unsigned threads, F &body) {
  if (threads == 0 || threads > HLOFUSE_EMU_MAX_THREADS || blocks == 0) {
    hlofuse_emu_fail(cudaErrorInvalidConfiguration, "emulation: invalid launch configuration");
    return;
  }
  hlofuse_emu.call = &hlofuse_emu_call<F>;
  hlofuse_emu.closure = &body;
  gridDim.x = blocks;
  gridDim.y = gridDim.z = 1;
  blockDim.x = threads;
  blockDim.y = blockDim.z = 1;
  threadIdx.y = threadIdx.z = blockIdx.y = blockIdx.z = 0;
  for (unsigned b = 0; b < blocks; ++b) {
    blockIdx.x = b;
    hlofuse_emu_block(threads);
  }
  hlofuse_emu.as_fibers = 0;
}

/* Every block in turn, its threads as above. */
#define HLOFUSE_LAUNCH(KERNEL, BLOCKS, THREADS, ...) do { \
  auto hlofuse_body_ = [&]() { KERNEL(__VA_ARGS__); }; \
  hlofuse_emu_launch((unsigned)(BLOCKS), (unsigned)(THREADS), hlofuse_body_); } while (0)

static inline void __syncthreads(void) { hlofuse_emu_wait(HLOFUSE_EMU_AT_BARRIER); }
static inline void __syncwarp(unsigned = 0xffffffffu) { hlofuse_emu_wait(HLOFUSE_EMU_AT_WARP); }
static inline void __threadfence(void) {}
static inline void __threadfence_block(void) {}
static inline unsigned __activemask(void) { return 0xffffffffu; }

/* The value `v` of thread `source` of the block (the caller's own when `source` is outside
   the block or has exited): publish, wait for the warp, read, wait again so no thread
   publishes its next value before every partner has read this one. */
template <typename T> static T hlofuse_emu_exchange(T v, unsigned source) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "shuffles move at most 8 bytes");
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  const unsigned self = threadIdx.x;
  hlofuse_emu.exchange[self] = bits;
  hlofuse_emu_wait(HLOFUSE_EMU_AT_WARP);
  uint64_t got = bits;
  if (hlofuse_emu.as_fibers && source < blockDim.x &&
      hlofuse_emu.fiber[source].state != HLOFUSE_EMU_DONE)
    got = hlofuse_emu.exchange[source];
  hlofuse_emu_wait(HLOFUSE_EMU_AT_WARP);
  T out;
  memcpy(&out, &got, sizeof(T));
  return out;
}

/* Source lanes as the CUDA programming guide defines them for a `width`-lane segment. */
template <typename T>
static T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  const unsigned lane = threadIdx.x % 32, w = (unsigned)width;
  const unsigned source = lane % w + delta < w ? threadIdx.x + delta : threadIdx.x;
  return hlofuse_emu_exchange(v, source);
}
template <typename T>
static T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
  const unsigned lane = threadIdx.x % 32, w = (unsigned)width;
  const unsigned source = lane % w >= delta ? threadIdx.x - delta : threadIdx.x;
  return hlofuse_emu_exchange(v, source);
}
template <typename T>
static T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
  const unsigned lane = threadIdx.x % 32, w = (unsigned)width;
  const unsigned partner = lane ^ (unsigned)mask;
  /* a later segment is out of reach: the caller keeps its value */
  const unsigned source = partner < (lane / w + 1) * w ? threadIdx.x - lane + partner
                                                       : threadIdx.x;
  return hlofuse_emu_exchange(v, source);
}
template <typename T>
static T __shfl_sync(unsigned, T v, int source_lane, int width = 32) {
  const unsigned lane = threadIdx.x % 32, w = (unsigned)width;
  const unsigned partner = lane / w * w + (unsigned)source_lane % w;
  return hlofuse_emu_exchange(v, threadIdx.x - lane + partner);
}
static unsigned __ballot_sync(unsigned, int predicate) {
  unsigned bits = 0;
  const unsigned first = threadIdx.x - threadIdx.x % 32;
  for (unsigned lane = 0; lane < 32; ++lane) {
    const int p = hlofuse_emu_exchange(predicate != 0, first + lane) ? 1 : 0;
    if (first + lane < blockDim.x && p) bits |= 1u << lane;
  }
  return bits;
}
static int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
static int __all_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, !predicate) == 0;
}

template <typename T> static inline T atomicAdd(T *p, T v) { T old = *p; *p = old + v; return old; }
template <typename T> static inline T atomicMax(T *p, T v) { T old = *p; if (v > old) *p = v; return old; }
template <typename T> static inline T atomicMin(T *p, T v) { T old = *p; if (v < old) *p = v; return old; }

/* --- the runtime API: memory, errors, events ------------------------------------------------ */

enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum { cudaLimitMallocHeapSize = 2 };

static inline const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    default: return "cudaErrorLaunchFailure";
  }
}
static inline const char *cudaGetErrorString(cudaError_t e) {
  if (e == cudaSuccess) return "no error";
  if (e == cudaErrorMemoryAllocation && hlofuse_emu.message[0] == 0)
    return "out of memory (emulated device)";
  return hlofuse_emu.message[0] ? hlofuse_emu.message : "emulated launch failed";
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
static inline cudaError_t cudaMemset(void *d, int v, size_t n) {
  if (n) memset(d, v, n);
  return cudaSuccess;
}
/* Like CUDA's: the last error, cleared by reading it (its message stays for the report). */
static inline cudaError_t cudaGetLastError(void) {
  cudaError_t e = hlofuse_emu.error;
  hlofuse_emu.error = cudaSuccess;
  return e;
}
static inline cudaError_t cudaPeekAtLastError(void) { return hlofuse_emu.error; }
static inline cudaError_t cudaDeviceSynchronize(void) { return hlofuse_emu.error; }
static inline cudaError_t cudaDeviceSetLimit(int, size_t) { return cudaSuccess; }
static inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
static inline cudaError_t cudaGetDeviceCount(int *count) { *count = 1; return cudaSuccess; }

/* Events: a launch has finished when HLOFUSE_LAUNCH returns, so recording reads the clock. */
struct hlofuse_emu_event {
  double seconds;
  int recorded;
};
typedef hlofuse_emu_event *cudaEvent_t;
typedef void *cudaStream_t;

static inline double hlofuse_emu_clock(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static inline cudaError_t cudaEventCreate(cudaEvent_t *e) {
  *e = (cudaEvent_t)calloc(1, sizeof(hlofuse_emu_event));
  return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) { free(e); return cudaSuccess; }
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = 0) {
  if (!e) return cudaErrorInvalidValue;
  e->seconds = hlofuse_emu_clock();
  e->recorded = 1;
  return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  return e && e->recorded ? cudaSuccess : cudaErrorInvalidValue;
}
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start || !end || !start->recorded || !end->recorded) return cudaErrorInvalidValue;
  *ms = (float)((end->seconds - start->seconds) * 1e3);
  return cudaSuccess;
}

#endif
