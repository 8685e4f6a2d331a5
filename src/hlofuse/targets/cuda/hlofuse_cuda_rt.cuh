/* hlofuse's CUDA support: the grid as OpenMP's thread team, the library routines (dot,
 * Threefry) as device functions, device memory and error reporting for the host driver.
 * Included after the C header by every generated CUDA file; under HLOFUSE_CUDA_EMULATION the
 * runtime calls come from cuda_emulation.h instead of the CUDA runtime. */

#undef HLOFUSE_THREAD
#undef HLOFUSE_THREADS
/* The global thread index and the grid's size: a parallel part's share is one element. */
#define HLOFUSE_THREAD ((int64_t)blockIdx.x * (int64_t)blockDim.x + (int64_t)threadIdx.x)
#define HLOFUSE_THREADS ((int64_t)gridDim.x * (int64_t)blockDim.x)
/* Reduction kernels (codegen/cuda_reductions.py): lanes, warps and blocks. */
#define HLOFUSE_LANE ((int64_t)(threadIdx.x % 32u))
#define HLOFUSE_WARP_IN_BLOCK ((int64_t)(threadIdx.x / 32u))
#define HLOFUSE_WARP (HLOFUSE_THREAD / 32)
#define HLOFUSE_WARPS (HLOFUSE_THREADS / 32)
#define HLOFUSE_BLOCK ((int64_t)blockIdx.x)
#define HLOFUSE_BLOCKS ((int64_t)gridDim.x)
#define HLOFUSE_BLOCK_THREAD ((int64_t)threadIdx.x)

/* __shfl_down_sync of any value of up to 8 bytes (integers narrower than 32 bits and pred
   included, which CUDA's overloads do not take): its bits move as a 32- or 64-bit word. */
template <typename T> static __device__ inline T hlofuse_shfl_down(T v, int offset, int width) {
  if (sizeof(T) <= 4) {
    unsigned int bits = 0;
    memcpy(&bits, &v, sizeof(T));
    bits = __shfl_down_sync(0xffffffffu, bits, (unsigned)offset, width);
    memcpy(&v, &bits, sizeof(T));
  } else {
    unsigned long long bits = 0;
    memcpy(&bits, &v, sizeof(T));
    bits = __shfl_down_sync(0xffffffffu, bits, (unsigned)offset, width);
    memcpy(&v, &bits, sizeof(T));
  }
  return v;
}

/* Whether the calling thread is the grid's last to get here: every thread's stores are made
   visible before it takes its ticket; the last resets the counter for the next launch. */
static __device__ int hlofuse_last_thread(unsigned long long *done) {
  __threadfence();
  const unsigned long long total = (unsigned long long)HLOFUSE_THREADS;
  if (atomicAdd(done, 1ull) != total - 1) return 0;
  __threadfence();
  *done = 0;
  return 1;
}

/* --- library routines: grid-stride loops (a kernel of one such call is launched over its
   rows or elements; inside a one-thread kernel the same loop runs them all) -------------- */

#define HLOFUSE_CUDA_DOT(TAG, T, ZERO, ACC)                                                     \
static __device__ void hlofuse_rt_dot_##TAG(const void *av, const void *bv, void *cv,          \
    int64_t batch, int64_t m, int64_t n, int64_t k, int64_t asb, int64_t asm_, int64_t ask,     \
    int64_t bsb, int64_t bsk, int64_t bsn) {                                                    \
  const T *a = (const T *)av, *b = (const T *)bv; T *c = (T *)cv;                               \
  for (int64_t r = HLOFUSE_THREAD; r < batch * m; r += HLOFUSE_THREADS) {                       \
    const int64_t bi = r / (m > 0 ? m : 1), mi = r % (m > 0 ? m : 1);                           \
    const T *arow = a + bi * asb + mi * asm_, *bmat = b + bi * bsb;                             \
    for (int64_t j = 0; j < n; ++j) {                                                           \
      T s = ZERO;                                                                               \
      for (int64_t kk = 0; kk < k; ++kk) s = ACC(s, arow[kk * ask], bmat[kk * bsk + j * bsn]);  \
      c[r * n + j] = s;                                                                         \
    }                                                                                           \
  }                                                                                             \
}
/* One fused multiply-add per product in ascending k, from +0: XLA's CPU dot loops and the
   CPU runtime's order (an explicit fma is fused whatever --fmad says). */
#define HLOFUSE_CUDA_ACC_F32(c, a, b) fmaf((a), (b), (c))
#define HLOFUSE_CUDA_ACC_F64(c, a, b) fma((a), (b), (c))
#define HLOFUSE_CUDA_ACC_WRAP32(c, a, b) ((c) + (uint32_t)((uint32_t)(a) * (uint32_t)(b)))
#define HLOFUSE_CUDA_ACC_WRAP64(c, a, b) ((c) + (a) * (b))
#define HLOFUSE_CUDA_ACC_PRED(c, a, b) ((uint8_t)((c) | ((a) & (b))))
HLOFUSE_CUDA_DOT(f32, float, 0.0f, HLOFUSE_CUDA_ACC_F32)
HLOFUSE_CUDA_DOT(f64, double, 0.0, HLOFUSE_CUDA_ACC_F64)
HLOFUSE_CUDA_DOT(u8, uint8_t, 0, HLOFUSE_CUDA_ACC_WRAP32)
HLOFUSE_CUDA_DOT(u16, uint16_t, 0, HLOFUSE_CUDA_ACC_WRAP32)
HLOFUSE_CUDA_DOT(u32, uint32_t, 0, HLOFUSE_CUDA_ACC_WRAP32)
HLOFUSE_CUDA_DOT(u64, uint64_t, 0, HLOFUSE_CUDA_ACC_WRAP64)
HLOFUSE_CUDA_DOT(pred, uint8_t, 0, HLOFUSE_CUDA_ACC_PRED)

/* Threefry-2x32, 20 rounds (Random123, as jax.random uses it): one block per element. */
static __host__ __device__ inline uint32_t hlofuse_cuda_rotl(uint32_t v, int r) {
  return (v << r) | (v >> (32 - r));
}
static __host__ __device__ inline void hlofuse_threefry_block(uint32_t ks0, uint32_t ks1,
    uint32_t x0, uint32_t x1, uint32_t *o0, uint32_t *o1) {
  const uint32_t ks2 = ks0 ^ ks1 ^ 0x1BD11BDAu;
  const uint32_t ks[3] = {ks0, ks1, ks2};
  const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  uint32_t y0 = x0 + ks0, y1 = x1 + ks1;
  for (int g = 0; g < 5; ++g) {
    for (int q = 0; q < 4; ++q) { y0 += y1; y1 = hlofuse_cuda_rotl(y1, rot[g & 1][q]); y1 ^= y0; }
    y0 += ks[(g + 1) % 3];
    y1 += ks[(g + 2) % 3] + (uint32_t)(g + 1);
  }
  *o0 = y0;
  *o1 = y1;
}
static __device__ void hlofuse_rt_threefry2x32(const void *k0, const void *k1, const void *x0,
    const void *x1, void *out0, void *out1, int64_t count) {
  for (int64_t i = HLOFUSE_THREAD; i < count; i += HLOFUSE_THREADS)
    hlofuse_threefry_block(((const uint32_t *)k0)[i], ((const uint32_t *)k1)[i],
                           ((const uint32_t *)x0)[i], ((const uint32_t *)x1)[i],
                           (uint32_t *)out0 + i, (uint32_t *)out1 + i);
}

/* --- the host side: errors, copies, launches ----------------------------------------------- */

static char hlofuse_error_text[2048];
static int hlofuse_failed;

static void hlofuse_fail(const char *what, const char *where, cudaError_t e) {
  if (hlofuse_failed) return;
  hlofuse_failed = 1;
  snprintf(hlofuse_error_text, sizeof hlofuse_error_text, "%s (%s): %s: %s", what, where,
           cudaGetErrorName(e), cudaGetErrorString(e));
}

#define HLOFUSE_CUDA_CHECK(CALL, WHERE) do { cudaError_t hlofuse_e_ = (CALL); \
  if (hlofuse_e_ != cudaSuccess) hlofuse_fail(#CALL, (WHERE), hlofuse_e_); } while (0)

/* After every launch: the launch itself (configuration, missing device) always; its execution
   too when built with HLOFUSE_CUDA_DEBUG, which names the HLO instruction of a kernel that
   faults instead of the next synchronising call. */
#ifdef HLOFUSE_CUDA_DEBUG
#define HLOFUSE_AFTER_LAUNCH(HLO) do { HLOFUSE_CUDA_CHECK(cudaGetLastError(), HLO); \
  HLOFUSE_CUDA_CHECK(cudaDeviceSynchronize(), HLO); } while (0)
#else
#define HLOFUSE_AFTER_LAUNCH(HLO) HLOFUSE_CUDA_CHECK(cudaGetLastError(), HLO)
#endif

/* `threads` in blocks of at most `most` (a kernel that exchanges values through a block or a
   warp declares a grid that is a multiple of its block, or of 32, so every warp is whole). */
static void hlofuse_grid(int64_t threads, int most, int64_t *blocks, int *block) {
  *block = threads < most ? (int)(threads > 0 ? threads : 1) : most;
  int64_t b = (threads + *block - 1) / *block;
  *blocks = b < 1 ? 1 : (b > 2147483647 ? 2147483647 : b);
}

static void hlofuse_copy(void *target, const void *source, int64_t bytes) {
  if (hlofuse_failed) return;
  HLOFUSE_CUDA_CHECK(cudaMemcpy(target, source, (size_t)bytes, cudaMemcpyDeviceToDevice),
                     "copy");
}

/* A loop's predicate or a conditional's selector, read back to the host (XLA's GPU backend
   also runs loops from the host); after a failure, the loop stops. */
static int64_t hlofuse_read_u8(const void *p) {
  uint8_t v = 0;
  if (hlofuse_failed) return 0;
  HLOFUSE_CUDA_CHECK(cudaMemcpy(&v, p, 1, cudaMemcpyDeviceToHost), "loop predicate");
  return hlofuse_failed ? 0 : v;
}

static int64_t hlofuse_read_s32(const void *p) {
  int32_t v = 0;
  if (hlofuse_failed) return 0;
  HLOFUSE_CUDA_CHECK(cudaMemcpy(&v, p, 4, cudaMemcpyDeviceToHost), "branch index");
  return v;
}

typedef struct {
  int64_t *counts;
  double *totals;
  double *samples;
  int64_t capacity;
  double started;  /* unused here: CUDA events time the kernels */
} hlofuse_profile;

/* A profiled run times every kernel and copy with a pair of CUDA events recorded around it on
   the default stream (device time, without the host's launch overhead), and waits for the
   second one, so each is timed alone. */
static cudaEvent_t hlofuse_profile_events[2];

static void hlofuse_start(hlofuse_profile *p) {
  (void)p;
  if (hlofuse_failed) return;
  if (!hlofuse_profile_events[0]) {
    HLOFUSE_CUDA_CHECK(cudaEventCreate(&hlofuse_profile_events[0]), "profile");
    HLOFUSE_CUDA_CHECK(cudaEventCreate(&hlofuse_profile_events[1]), "profile");
    if (hlofuse_failed) return;
  }
  HLOFUSE_CUDA_CHECK(cudaEventRecord(hlofuse_profile_events[0], 0), "profile");
}

static void hlofuse_stop(hlofuse_profile *p, int64_t id) {
  float ms = 0.0f;
  if (hlofuse_failed) return;
  HLOFUSE_CUDA_CHECK(cudaEventRecord(hlofuse_profile_events[1], 0), "profile");
  HLOFUSE_CUDA_CHECK(cudaEventSynchronize(hlofuse_profile_events[1]), "profile");
  HLOFUSE_CUDA_CHECK(cudaEventElapsedTime(&ms, hlofuse_profile_events[0],
                                          hlofuse_profile_events[1]), "profile");
  if (hlofuse_failed) return;
  const double seconds = 1e-3 * (double)ms;
  int64_t n = p->counts[id]++;
  p->totals[id] += seconds;
  p->samples[id * p->capacity + n % p->capacity] = seconds;
}

#define HLOFUSE_TIMED(ID, CALL) do { \
  if (prof) hlofuse_start(prof); \
  CALL; \
  if (prof) hlofuse_stop(prof, (ID)); } while (0)
