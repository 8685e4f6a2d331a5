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
 * f32 and f64 dots call OpenBLAS's GEMM (GEMV for a matrix and a vector) where the runtime
 * library is built with it (HLOFUSE_BLAS: build.py, from the scipy-openblas32 wheel), the
 * strides map to a GEMM (each operand's rows or columns contiguous, the other stride at least
 * the contiguous extent, every size within BLAS's 32-bit integers) and each product has at
 * least HLOFUSE_BLAS_MIN_WORK multiply-adds: below that the loop is as fast
 * (benchmarks/dot_bench.py with HLOFUSE_BLAS=0: 0.4-0.65x NumPy's time up to 16,384, where
 * OpenBLAS's call costs as much as the work) and keeps the reference's order bit for bit. XLA's
 * CPU backend calls Eigen for large dots in the same way. OpenBLAS's kernels sum in their own
 * order (blocks of the contracting dimension, partial sums per register), so their last bits
 * differ from the loop's, as XLA's Eigen calls differ from its loops. OpenBLAS runs
 * single-threaded here: the runtime's OpenMP threads (the program's thread count) share the
 * GEMM by blocks of rows or columns, each with denormals flushed as everywhere else, so results
 * do not depend on the thread count. Other layouts and dtypes, and a runtime library built
 * without BLAS, use the loop.
 *
 * threefry2x32: Threefry-2x32 with 20 rounds (Random123, as jax.random uses it), one
 * independent block per element: (y0, y1) = threefry2x32((k0, k1), (x0, x1)).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef HLOFUSE_BLAS
#include <cblas.h>
#endif

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

#ifdef HLOFUSE_BLAS
/* How one operand of a dot is laid out for GEMM: transposed or not, and its leading
 * dimension. rows x cols is the operand's logical shape; (rs, cs) its element strides. */
typedef struct { int ok; enum CBLAS_TRANSPOSE trans; int64_t ld; } hlofuse_gemm_operand;

static hlofuse_gemm_operand hlofuse_gemm_layout(int64_t rows, int64_t cols, int64_t rs,
                                                int64_t cs) {
  hlofuse_gemm_operand o = {0, CblasNoTrans, 0};
  const int64_t min_row = cols > 1 ? cols : 1, min_col = rows > 1 ? rows : 1;
  /* A single row or column is contiguous whatever its unused stride says. */
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= min_row)) {
    o.ok = 1; o.trans = CblasNoTrans; o.ld = rows == 1 ? min_row : rs;
  } else if ((rows == 1 || rs == 1) && (cols == 1 || cs >= min_col)) {
    o.ok = 1; o.trans = CblasTrans; o.ld = cols == 1 ? min_col : cs;
  }
  o.ok = o.ok && o.ld <= INT32_MAX;
  return o;
}

/* The share [lo, hi) of `extent` for thread t of nt, in blocks of `align`. */
static void hlofuse_share(int64_t extent, int t, int nt, int64_t align, int64_t *lo,
                          int64_t *hi) {
  int64_t chunk = (extent + nt - 1) / nt;
  chunk = (chunk + align - 1) / align * align;
  *lo = t * chunk < extent ? t * chunk : extent;
  *hi = *lo + chunk < extent ? *lo + chunk : extent;
}

/* OpenBLAS's own threads stay off: the runtime's OpenMP threads share each GEMM. */
__attribute__((constructor)) static void hlofuse_blas_single_threaded(void) {
  scipy_openblas_set_num_threads(1);
}

#ifdef _OPENMP
#define HLOFUSE_THREAD_IDS(t, nt) do { t = omp_get_thread_num(); nt = omp_get_num_threads(); } \
  while (0)
#else
#define HLOFUSE_THREAD_IDS(t, nt) do { } while (0)
#endif

#define HLOFUSE_BLAS_MIN_WORK 16384

/* One product C[m, n] = A[m, k] B[k, n] (C's rows contiguous, n apart). A matrix times one
 * column or one row times a matrix is a GEMV: OpenBLAS's GEMM with n or m = 1 runs about
 * half as fast as its GEMV there (NumPy's matmul makes the same switch), so a value head's
 * [N, 64] x [64, 1] takes the GEMV. ask and bsk are the vector's element strides, ldc C's
 * row stride. */
#define HLOFUSE_PRODUCT(TAG, T, GEMM, GEMV)                                                   \
static void hlofuse_product_##TAG(hlofuse_gemm_operand la, hlofuse_gemm_operand lb, int m,    \
                                  int n, int k, const T *a, int64_t ask, const T *b,          \
                                  int64_t bsk, T *c, int ldc) {                               \
  const int64_t inc_b = k == 1 ? 1 : bsk, inc_a = k == 1 ? 1 : ask;                           \
  if (n == 1 && inc_b >= 1 && inc_b <= INT32_MAX) {                                           \
    if (la.trans == CblasNoTrans)                                                             \
      GEMV(CblasRowMajor, CblasNoTrans, m, k, 1, a, (int)la.ld, b, (int)inc_b, 0, c, ldc);    \
    else                                                                                      \
      GEMV(CblasRowMajor, CblasTrans, k, m, 1, a, (int)la.ld, b, (int)inc_b, 0, c, ldc);      \
  } else if (m == 1 && inc_a >= 1 && inc_a <= INT32_MAX) {                                    \
    if (lb.trans == CblasNoTrans)                                                             \
      GEMV(CblasRowMajor, CblasTrans, k, n, 1, b, (int)lb.ld, a, (int)inc_a, 0, c, 1);        \
    else                                                                                      \
      GEMV(CblasRowMajor, CblasNoTrans, n, k, 1, b, (int)lb.ld, a, (int)inc_a, 0, c, 1);      \
  } else {                                                                                    \
    GEMM(CblasRowMajor, la.trans, lb.trans, m, n, k, 1, a, (int)la.ld, b, (int)lb.ld, 0, c,   \
         ldc);                                                                                \
  }                                                                                           \
}

#define HLOFUSE_GEMM(TAG, T)                                                                  \
static int hlofuse_gemm_##TAG(const T *a, const T *b, T *c, int64_t batch, int64_t m,         \
                              int64_t n, int64_t k, int64_t asb, int64_t asm_, int64_t ask,   \
                              int64_t bsb, int64_t bsk, int64_t bsn) {                        \
  if (m <= 0 || n <= 0 || k <= 0 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX ||        \
      m * n * k < HLOFUSE_BLAS_MIN_WORK)                                                      \
    return 0;                                                                                 \
  const hlofuse_gemm_operand la = hlofuse_gemm_layout(m, k, asm_, ask);                       \
  const hlofuse_gemm_operand lb = hlofuse_gemm_layout(k, n, bsk, bsn);                        \
  if (!la.ok || !lb.ok) return 0;                                                             \
  const int parallel = batch * m * n * k >= HLOFUSE_PARALLEL_WORK && (batch > 1 || m > 1 ||   \
                                                                      n > 1);                 \
  _Pragma("omp parallel if(parallel)")                                                        \
  {                                                                                           \
    HLOFUSE_FTZ_BEGIN                                                                         \
    int t = 0, nt = 1;                                                                        \
    HLOFUSE_THREAD_IDS(t, nt);                                                                \
    if (batch >= nt) {                                                                        \
      int64_t lo, hi;                                                                         \
      hlofuse_share(batch, t, nt, 1, &lo, &hi);                                               \
      for (int64_t bi = lo; bi < hi; ++bi)                                                    \
        hlofuse_product_##TAG(la, lb, (int)m, (int)n, (int)k, a + bi * asb, ask, b + bi * bsb, \
                              bsk, c + bi * m * n, (int)n);                                   \
    } else {                                                                                  \
      const int by_rows = m >= n;                                                             \
      int64_t lo, hi;                                                                         \
      hlofuse_share(by_rows ? m : n, t, nt, by_rows ? 4 : 16, &lo, &hi);                      \
      for (int64_t bi = 0; bi < batch && lo < hi; ++bi) {                                     \
        const T *ab = a + bi * asb, *bb = b + bi * bsb;                                       \
        T *cb = c + bi * m * n;                                                               \
        if (by_rows)                                                                          \
          hlofuse_product_##TAG(la, lb, (int)(hi - lo), (int)n, (int)k, ab + lo * asm_, ask,  \
                                bb, bsk, cb + lo * n, (int)n);                                \
        else                                                                                  \
          hlofuse_product_##TAG(la, lb, (int)m, (int)(hi - lo), (int)k, ab, ask,              \
                                bb + lo * bsn, bsk, cb + lo, (int)n);                         \
      }                                                                                       \
    }                                                                                         \
    HLOFUSE_FTZ_END                                                                           \
  }                                                                                           \
  return 1;                                                                                   \
}

HLOFUSE_PRODUCT(f32, float, scipy_cblas_sgemm, scipy_cblas_sgemv)
HLOFUSE_PRODUCT(f64, double, scipy_cblas_dgemm, scipy_cblas_dgemv)
HLOFUSE_GEMM(f32, float)
HLOFUSE_GEMM(f64, double)
#define HLOFUSE_TRY_GEMM_f32(...) if (hlofuse_gemm_f32(__VA_ARGS__)) return;
#define HLOFUSE_TRY_GEMM_f64(...) if (hlofuse_gemm_f64(__VA_ARGS__)) return;
#else
#define HLOFUSE_TRY_GEMM_f32(...)
#define HLOFUSE_TRY_GEMM_f64(...)
#endif
#define HLOFUSE_TRY_GEMM_u8(...)
#define HLOFUSE_TRY_GEMM_u16(...)
#define HLOFUSE_TRY_GEMM_u32(...)
#define HLOFUSE_TRY_GEMM_u64(...)
#define HLOFUSE_TRY_GEMM_pred(...)

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
  HLOFUSE_TRY_GEMM_##TAG(a, b, c, batch, m, n, k, asb, asm_, ask, bsb, bsk, bsn)              \
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
