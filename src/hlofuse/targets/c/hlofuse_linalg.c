/* hlofuse's linear-algebra routines for small batched matrices (part of the runtime library).
 *
 * Every routine takes a batch of row-major matrices (the logical HLO arrays, whatever layout
 * JAX's text declares) and runs one matrix per iteration of an OpenMP loop over the batch:
 * the common case in simulation is thousands of matrices of size 2 to 64. The algorithms are
 * the unblocked ones of LAPACK's reference routines, in the order hlofuse's NumPy reference
 * (linalg_reference.py) computes them: potf2 (Cholesky), substitution (trsm), getf2 (LU with
 * partial pivoting), geqr2/org2r (Householder QR). The symmetric eigen-decomposition is cyclic
 * Jacobi and the SVD one-sided Jacobi, both in double precision, with eigen- and singular
 * vectors normalised so that their entry of largest magnitude is positive. Bad numbers never
 * crash: they give infinities, NaNs and LAPACK's `info`.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef HLOFUSE_EXPORT
#define HLOFUSE_EXPORT __attribute__((visibility("default")))
#endif
#ifndef HLOFUSE_FTZ_BEGIN
#define HLOFUSE_FTZ_BEGIN
#define HLOFUSE_FTZ_END
#endif

/* Below this many multiply-adds per call the batch runs on one thread. */
#define HLOFUSE_LINALG_PARALLEL_WORK 32768

#define HLOFUSE_BATCH_LOOP(batch, work, ...)                                                  \
  const int hlofuse_parallel_ = (batch) > 1 && (work) >= HLOFUSE_LINALG_PARALLEL_WORK;        \
  _Pragma("omp parallel if(hlofuse_parallel_)")                                               \
  {                                                                                           \
    HLOFUSE_FTZ_BEGIN                                                                         \
    _Pragma("omp for schedule(static)")                                                       \
    for (int64_t bi = 0; bi < (batch); ++bi) { __VA_ARGS__ }                                  \
    HLOFUSE_FTZ_END                                                                           \
  }

/* ---- double-precision Jacobi kernels, shared by f32 and f64 ------------------------------ */

/* Flip column j of q (rows x cols, row-major) and row j of w (when given) so that q's entry of
 * largest magnitude (the first of equals) is positive. */
static void hlofuse_sign_normalise(double *q, int64_t rows, int64_t cols, int64_t j, double *other,
                                   int64_t other_stride, int64_t other_step, int64_t other_len) {
  double best = -1.0, lead = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    double v = fabs(q[i * cols + j]);
    if (v > best) { best = v; lead = q[i * cols + j]; }
  }
  if (lead >= 0.0) return;
  for (int64_t i = 0; i < rows; ++i) q[i * cols + j] = -q[i * cols + j];
  if (other)
    for (int64_t i = 0; i < other_len; ++i) other[j * other_stride + i * other_step] *= -1.0;
}

/* Symmetric a (n x n, destroyed) -> eigenvalues w ascending, eigenvectors in v's columns. */
static void hlofuse_jacobi_eigen(double *a, double *v, double *w, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) v[i * n + j] = i == j ? 1.0 : 0.0;
  /* Sweeps until none rotates: an entry is left alone once it is below double rounding of
   * its diagonal pair (Demmel and Veselic's criterion, which keeps eigenvalues accurate). */
  for (int sweep = 0; sweep < 100; ++sweep) {
    int rotated = 0;
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t q = p + 1; q < n; ++q) {
        double apq = a[p * n + q];
        if (fabs(apq) <= 1e-16 * sqrt(fabs(a[p * n + p] * a[q * n + q]))) continue;
        double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
        double t = (theta >= 0.0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
        if (t == 0.0) { a[p * n + q] = a[q * n + p] = 0.0; continue; }  /* negligible */
        rotated = 1;
        double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
        for (int64_t k = 0; k < n; ++k) {
          double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) {
          double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
        for (int64_t k = 0; k < n; ++k) {
          double vkp = v[k * n + p], vkq = v[k * n + q];
          v[k * n + p] = c * vkp - s * vkq;
          v[k * n + q] = s * vkp + c * vkq;
        }
      }
    }
    if (!rotated) break;
  }
  for (int64_t i = 0; i < n; ++i) w[i] = a[i * n + i];
  /* Selection sort, ascending, moving the vectors along. */
  for (int64_t i = 0; i < n; ++i) {
    int64_t m = i;
    for (int64_t j = i + 1; j < n; ++j) if (w[j] < w[m]) m = j;
    if (m == i) continue;
    double t = w[i]; w[i] = w[m]; w[m] = t;
    for (int64_t k = 0; k < n; ++k) { t = v[k * n + i]; v[k * n + i] = v[k * n + m]; v[k * n + m] = t; }
  }
  for (int64_t j = 0; j < n; ++j) hlofuse_sign_normalise(v, n, n, j, 0, 0, 0, 0);
}

/* Fill the columns of q (rows x cols) not marked in `valid` with unit vectors orthogonal to
 * every valid column (Gram-Schmidt, twice, over the standard basis). */
static void hlofuse_complete_basis(double *q, int64_t rows, int64_t cols, unsigned char *valid) {
  int64_t candidate = 0;
  for (int64_t j = 0; j < cols; ++j) {
    if (valid[j]) continue;
    for (; candidate < rows; ++candidate) {
      for (int64_t i = 0; i < rows; ++i) q[i * cols + j] = i == candidate ? 1.0 : 0.0;
      for (int pass = 0; pass < 2; ++pass)
        for (int64_t c = 0; c < cols; ++c) {
          if (!valid[c]) continue;
          double d = 0.0;
          for (int64_t i = 0; i < rows; ++i) d += q[i * cols + c] * q[i * cols + j];
          for (int64_t i = 0; i < rows; ++i) q[i * cols + j] -= d * q[i * cols + c];
        }
      double norm = 0.0;
      for (int64_t i = 0; i < rows; ++i) norm += q[i * cols + j] * q[i * cols + j];
      norm = sqrt(norm);
      if (norm > 0.5) {
        for (int64_t i = 0; i < rows; ++i) q[i * cols + j] /= norm;
        valid[j] = 1;
        ++candidate;
        break;
      }
    }
  }
}

/* One-sided Jacobi SVD of a (m x n, m >= n) given as u (m x n, destroyed into the left singular
 * vectors padded to ucols columns): s descending (n values), u (m x ucols), v (n x n). */
static void hlofuse_jacobi_svd(double *work, int64_t m, int64_t n, double *s, double *u,
                               int64_t ucols, double *v, unsigned char *valid) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) v[i * n + j] = i == j ? 1.0 : 0.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    int rotated = 0;
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t q = p + 1; q < n; ++q) {
        double alpha = 0.0, beta = 0.0, gamma = 0.0;
        for (int64_t i = 0; i < m; ++i) {
          double x = work[i * n + p], y = work[i * n + q];
          alpha += x * x; beta += y * y; gamma += x * y;
        }
        if (gamma == 0.0 || fabs(gamma) <= 1e-15 * sqrt(alpha * beta)) continue;
        rotated = 1;
        double zeta = (beta - alpha) / (2.0 * gamma);
        double t = (zeta >= 0.0 ? 1.0 : -1.0) / (fabs(zeta) + sqrt(1.0 + zeta * zeta));
        double c = 1.0 / sqrt(1.0 + t * t), sn = c * t;
        for (int64_t i = 0; i < m; ++i) {
          double x = work[i * n + p], y = work[i * n + q];
          work[i * n + p] = c * x - sn * y;
          work[i * n + q] = sn * x + c * y;
        }
        for (int64_t i = 0; i < n; ++i) {
          double x = v[i * n + p], y = v[i * n + q];
          v[i * n + p] = c * x - sn * y;
          v[i * n + q] = sn * x + c * y;
        }
      }
    }
    if (!rotated) break;
  }
  for (int64_t j = 0; j < n; ++j) {
    double norm = 0.0;
    for (int64_t i = 0; i < m; ++i) norm += work[i * n + j] * work[i * n + j];
    s[j] = sqrt(norm);
  }
  /* Descending order, columns of work and v moved along. */
  for (int64_t i = 0; i < n; ++i) {
    int64_t best = i;
    for (int64_t j = i + 1; j < n; ++j) if (s[j] > s[best]) best = j;
    if (best == i) continue;
    double t = s[i]; s[i] = s[best]; s[best] = t;
    for (int64_t k = 0; k < m; ++k) { t = work[k * n + i]; work[k * n + i] = work[k * n + best]; work[k * n + best] = t; }
    for (int64_t k = 0; k < n; ++k) { t = v[k * n + i]; v[k * n + i] = v[k * n + best]; v[k * n + best] = t; }
  }
  for (int64_t j = 0; j < ucols; ++j) {
    valid[j] = 0;
    for (int64_t i = 0; i < m; ++i) u[i * ucols + j] = 0.0;
    if (j < n && s[j] > 0.0) {
      for (int64_t i = 0; i < m; ++i) u[i * ucols + j] = work[i * n + j] / s[j];
      valid[j] = 1;
    }
  }
  hlofuse_complete_basis(u, m, ucols, valid);
}

/* ---- the exported routines, per element type ------------------------------------------- */

#define HLOFUSE_LINALG(TAG, T, SQRT, FABS)                                                     \
/* potrf (xla = 0: LAPACK, the other triangle kept, info) or XLA's cholesky (xla = 1: the     \
 * other triangle zero, all NaN when a pivot's square root is NaN). */                         \
HLOFUSE_EXPORT void hlofuse_rt_potrf_##TAG(const T *a, T *out, int32_t *info, int64_t batch,   \
                                           int64_t n, int32_t lower, int32_t xla) {            \
  HLOFUSE_BATCH_LOOP(batch, batch * n * n * n, {                                               \
    const T *src = a + bi * n * n;                                                             \
    T *dst = out + bi * n * n;                                                                 \
    int32_t status = 0, nan_root = 0;                                                          \
    /* Work on the lower factor L of the (transposed, for upper) matrix: L[i][j] at            \
     * dst[i * n + j] for lower, dst[j * n + i] for upper. */                                  \
    const int64_t rs = lower ? n : 1, cs = lower ? 1 : n;                                      \
    for (int64_t i = 0; i < n * n; ++i) dst[i] = xla ? (T)0 : src[i];                          \
    for (int64_t j = 0; j < n; ++j) {                                                          \
      T d = src[j * rs + j * cs];                                                              \
      for (int64_t k = 0; k < j; ++k) d -= dst[j * rs + k * cs] * dst[j * rs + k * cs];        \
      if (!(d > (T)0) && status == 0) status = (int32_t)(j + 1);                               \
      T root = SQRT(d);                                                                        \
      if (root != root) nan_root = 1;                                                          \
      dst[j * rs + j * cs] = root;                                                             \
      for (int64_t i = j + 1; i < n; ++i) {                                                    \
        T x = src[i * rs + j * cs];                                                            \
        for (int64_t k = 0; k < j; ++k) x -= dst[i * rs + k * cs] * dst[j * rs + k * cs];      \
        dst[i * rs + j * cs] = x / root;                                                       \
      }                                                                                        \
    }                                                                                          \
    if (xla && nan_root)                                                                       \
      for (int64_t i = 0; i < n * n; ++i) dst[i] = (T)NAN;                                     \
    if (info) info[bi] = status;                                                               \
  })                                                                                           \
}                                                                                              \
                                                                                               \
/* x with op(A) x = b (left) or x op(A) = b (right); b and x are m x r. */                     \
HLOFUSE_EXPORT void hlofuse_rt_trsm_##TAG(const T *a, const T *b, T *x, int64_t batch,         \
                                          int64_t n, int64_t m, int64_t r, int32_t left,       \
                                          int32_t lower, int32_t trans, int32_t unit) {        \
  HLOFUSE_BATCH_LOOP(batch, batch * n * n * (left ? r : m), {                                  \
    const T *A = a + bi * n * n;                                                               \
    const T *B = b + bi * m * r;                                                               \
    T *X = x + bi * m * r;                                                                     \
    /* op(A)(i, k) is A[i][k], or A[k][i] when transposed; lower-triangular when lower != trans.\
     * The right-side solve is the left-side one of op(A)^T on every row of b. */              \
    const int64_t ri = trans ? 1 : n, ci = trans ? n : 1;                                      \
    const int eff_lower = left ? (lower != trans) : !(lower != trans);                         \
    const int64_t si = left ? ri : ci, sk = left ? ci : ri;                                    \
    const int64_t systems = left ? r : m;                                                      \
    const int64_t xs = left ? r : 1, xv = left ? 1 : r;                                        \
    for (int64_t c = 0; c < systems; ++c) {                                                    \
      for (int64_t step = 0; step < n; ++step) {                                               \
        const int64_t i = eff_lower ? step : n - 1 - step;                                     \
        T s = B[i * xs + c * xv];                                                              \
        const int64_t k0 = eff_lower ? 0 : i + 1, k1 = eff_lower ? i : n;                      \
        for (int64_t k = k0; k < k1; ++k) s -= A[i * si + k * sk] * X[k * xs + c * xv];        \
        X[i * xs + c * xv] = unit ? s : s / A[i * si + i * sk];                                \
      }                                                                                        \
    }                                                                                          \
  })                                                                                           \
}                                                                                              \
                                                                                               \
HLOFUSE_EXPORT void hlofuse_rt_getrf_##TAG(const T *a, T *lu, int32_t *piv, int32_t *info,     \
                                           int64_t batch, int64_t m, int64_t n) {              \
  const int64_t k = m < n ? m : n;                                                             \
  HLOFUSE_BATCH_LOOP(batch, batch * m * n * k, {                                               \
    T *L = lu + bi * m * n;                                                                    \
    int32_t *P = piv + bi * k;                                                                 \
    int32_t status = 0;                                                                        \
    memcpy(L, a + bi * m * n, (size_t)(m * n) * sizeof(T));                                    \
    for (int64_t j = 0; j < k; ++j) {                                                          \
      /* LAPACK's i?amax: `>` from the diagonal on (a NaN on it stays, one below never wins). */\
      int64_t p = j;                                                                           \
      T best = FABS(L[j * n + j]);                                                             \
      for (int64_t i = j + 1; i < m; ++i)                                                      \
        if (FABS(L[i * n + j]) > best) { best = FABS(L[i * n + j]); p = i; }                   \
      P[j] = (int32_t)(p + 1);                                                                 \
      const T pivot = L[p * n + j];                                                            \
      if (pivot == (T)0 && status == 0) status = (int32_t)(j + 1);                             \
      if (p != j)                                                                              \
        for (int64_t c = 0; c < n; ++c) { T t = L[p * n + c]; L[p * n + c] = L[j * n + c]; L[j * n + c] = t; } \
      if (pivot != (T)0)                                                                       \
        for (int64_t i = j + 1; i < m; ++i) L[i * n + j] /= pivot;                             \
      for (int64_t i = j + 1; i < m; ++i) {                                                    \
        const T l = L[i * n + j];                                                              \
        for (int64_t c = j + 1; c < n; ++c) L[i * n + c] -= l * L[j * n + c];                  \
      }                                                                                        \
    }                                                                                          \
    info[bi] = status;                                                                         \
  })                                                                                           \
}                                                                                              \
                                                                                               \
HLOFUSE_EXPORT void hlofuse_rt_geqrf_##TAG(const T *a, T *r, T *tau, int64_t batch, int64_t m, \
                                           int64_t n) {                                        \
  const int64_t k = m < n ? m : n;                                                             \
  HLOFUSE_BATCH_LOOP(batch, batch * m * n * k, {                                               \
    T *R = r + bi * m * n;                                                                     \
    T *TAU = tau + bi * k;                                                                     \
    memcpy(R, a + bi * m * n, (size_t)(m * n) * sizeof(T));                                    \
    for (int64_t j = 0; j < k; ++j) {                                                          \
      const T alpha = R[j * n + j];                                                            \
      T sq = (T)0;                                                                             \
      for (int64_t i = j + 1; i < m; ++i) sq += R[i * n + j] * R[i * n + j];                   \
      const T norm = SQRT(sq);                                                                 \
      T t = (T)0;                                                                              \
      if (norm != (T)0) {                                                                      \
        const T h = (T)hypot((double)alpha, (double)norm);                                     \
        const T beta = alpha >= (T)0 || alpha != alpha ? -h : h;                               \
        t = (beta - alpha) / beta;                                                             \
        const T scale = (T)1 / (alpha - beta);                                                 \
        for (int64_t i = j + 1; i < m; ++i) R[i * n + j] *= scale;                             \
        R[j * n + j] = beta;                                                                   \
      }                                                                                        \
      TAU[j] = t;                                                                              \
      for (int64_t c = j + 1; c < n; ++c) {                                                    \
        T w = R[j * n + c];                                                                    \
        for (int64_t i = j + 1; i < m; ++i) w += R[i * n + j] * R[i * n + c];                  \
        R[j * n + c] -= t * w;                                                                 \
        for (int64_t i = j + 1; i < m; ++i) R[i * n + c] -= t * R[i * n + j] * w;              \
      }                                                                                        \
    }                                                                                          \
  })                                                                                           \
}                                                                                              \
                                                                                               \
HLOFUSE_EXPORT void hlofuse_rt_orgqr_##TAG(const T *a, const T *tau, T *q, int64_t batch,      \
                                           int64_t m, int64_t n, int64_t k) {                  \
  HLOFUSE_BATCH_LOOP(batch, batch * m * n * k, {                                               \
    const T *V = a + bi * m * n;                                                               \
    const T *TAU = tau + bi * k;                                                               \
    T *Q = q + bi * m * n;                                                                     \
    for (int64_t i = 0; i < m; ++i)                                                            \
      for (int64_t c = 0; c < n; ++c) Q[i * n + c] = i == c ? (T)1 : (T)0;                     \
    for (int64_t j = k - 1; j >= 0; --j) {                                                     \
      const T t = TAU[j];                                                                      \
      for (int64_t c = j; c < n; ++c) {                                                        \
        T w = Q[j * n + c];                                                                    \
        for (int64_t i = j + 1; i < m; ++i) w += V[i * n + j] * Q[i * n + c];                  \
        Q[j * n + c] -= t * w;                                                                 \
        for (int64_t i = j + 1; i < m; ++i) Q[i * n + c] -= t * V[i * n + j] * w;              \
      }                                                                                        \
    }                                                                                          \
  })                                                                                           \
}                                                                                              \
                                                                                               \
/* Eigenvalues ascending (w) and eigenvectors (v's columns) of the symmetric matrix in a's     \
 * lower (or upper) triangle; vectors = 0 leaves v a copy of a (as LAPACK's jobz = N leaves a).\
 * info = 1 (and NaN results) where a is not finite. */                                        \
HLOFUSE_EXPORT void hlofuse_rt_syevd_##TAG(const T *a, T *v, T *w, int32_t *info, int64_t batch,\
                                           int64_t n, int32_t lower, int32_t vectors) {        \
  HLOFUSE_BATCH_LOOP(batch, batch * n * n * n * 8, {                                           \
    const T *A = a + bi * n * n;                                                               \
    T *V = v + bi * n * n, *W = w + bi * n;                                                    \
    double *s = (double *)malloc((size_t)(2 * n * n + n + 1) * sizeof(double));                \
    double *vecs = s + n * n, *vals = vecs + n * n;                                            \
    int finite = 1;                                                                            \
    for (int64_t i = 0; i < n; ++i)                                                            \
      for (int64_t j = 0; j < n; ++j) {                                                        \
        const int inside = lower ? j <= i : j >= i;                                            \
        const double x = (double)(inside ? A[i * n + j] : A[j * n + i]);                       \
        if (!isfinite(x)) finite = 0;                                                          \
        s[i * n + j] = x;                                                                      \
      }                                                                                        \
    if (finite) hlofuse_jacobi_eigen(s, vecs, vals, n);                                        \
    for (int64_t i = 0; i < n; ++i) W[i] = finite ? (T)vals[i] : (T)NAN;                       \
    for (int64_t i = 0; i < n * n; ++i)                                                        \
      V[i] = !vectors ? A[i] : finite ? (T)vecs[i] : (T)NAN;                                   \
    info[bi] = finite ? 0 : 1;                                                                 \
    free(s);                                                                                   \
  })                                                                                           \
}                                                                                              \
                                                                                               \
/* SVD: s descending; u (m x ucols), and vcols vectors of v: v^T (vcols x n) when            \
 * v_transposed, else v (n x vcols). vectors = 0 writes zeros into u and v; a_out gets a. */ \
HLOFUSE_EXPORT void hlofuse_rt_svd_##TAG(const T *a, T *a_out, T *s, T *u, T *vo,             \
                                         int32_t *info, int64_t batch, int64_t m, int64_t n,   \
                                         int64_t ucols, int64_t vcols, int32_t v_transposed,   \
                                         int32_t vectors) {                                    \
  const int64_t k = m < n ? m : n, big = m > n ? m : n;                                        \
  HLOFUSE_BATCH_LOOP(batch, batch * big * k * k * 8, {                                         \
    const T *A = a + bi * m * n;                                                               \
    T *S = s + bi * k, *U = u + bi * m * ucols, *VO = vo + bi * n * vcols;                     \
    if (a_out) memcpy(a_out + bi * m * n, A, (size_t)(m * n) * sizeof(T));                     \
    /* Work on a (tall, rows x k) matrix: a itself, or a^T when wide; then a = P S Q^T with    \
     * P the tall side's vectors (rows x pcols) and Q (k x qcols). */                          \
    const int wide = m < n;                                                                    \
    const int64_t rows = wide ? n : m;                                                         \
    const int64_t pcols = wide ? vcols : ucols, qcols = wide ? ucols : vcols;                  \
    double *mem = (double *)malloc((size_t)(rows * k + rows * pcols + k * k + k + qcols + pcols + 2) * sizeof(double)); \
    double *work = mem, *P = work + rows * k, *Q = P + rows * pcols, *sv = Q + k * k;          \
    unsigned char *valid = (unsigned char *)(sv + k);                                          \
    int finite = 1;                                                                            \
    for (int64_t i = 0; i < rows; ++i)                                                         \
      for (int64_t j = 0; j < k; ++j) {                                                        \
        const double x = (double)(wide ? A[j * n + i] : A[i * n + j]);                         \
        if (!isfinite(x)) finite = 0;                                                          \
        work[i * k + j] = x;                                                                   \
      }                                                                                        \
    if (finite) {                                                                              \
      hlofuse_jacobi_svd(work, rows, k, sv, P, pcols, Q, valid);                               \
      /* Signs: u's columns normalised, v's flipped with them. */                              \
      for (int64_t j = 0; j < k; ++j) {                                                        \
        double best = -1.0, lead = 0.0;                                                        \
        for (int64_t i = 0; i < (wide ? k : rows); ++i) {                                      \
          const double x = wide ? Q[i * k + j] : P[i * pcols + j];                             \
          if (fabs(x) > best) { best = fabs(x); lead = x; }                                    \
        }                                                                                      \
        if (lead >= 0.0) continue;                                                             \
        for (int64_t i = 0; i < rows; ++i) P[i * pcols + j] = -P[i * pcols + j];               \
        for (int64_t i = 0; i < k; ++i) Q[i * k + j] = -Q[i * k + j];                          \
      }                                                                                        \
    }                                                                                          \
    for (int64_t j = 0; j < k; ++j) S[j] = finite ? (T)sv[j] : (T)NAN;                         \
    /* u = P (tall) or Q completed to ucols (wide: Q is k x k, ucols is m = k). */             \
    for (int64_t i = 0; i < m; ++i)                                                            \
      for (int64_t j = 0; j < ucols; ++j) {                                                    \
        const double x = wide ? (j < k ? Q[i * k + j] : 0.0) : P[i * pcols + j];               \
        U[i * ucols + j] = !vectors ? (T)0 : finite ? (T)x : (T)NAN;                           \
      }                                                                                        \
    /* v (n x vcols) = Q (tall: n = k) or P (wide: rows = n). */                                  \
    for (int64_t i = 0; i < n; ++i)                                                            \
      for (int64_t j = 0; j < vcols; ++j) {                                                    \
        const double x = wide ? P[i * pcols + j] : (j < k ? Q[i * k + j] : 0.0);               \
        const T value = !vectors ? (T)0 : finite ? (T)x : (T)NAN;                              \
        if (v_transposed) VO[j * n + i] = value; else VO[i * vcols + j] = value;               \
      }                                                                                        \
    info[bi] = finite ? 0 : 1;                                                                 \
    free(mem);                                                                                 \
  })                                                                                           \
}

HLOFUSE_LINALG(f32, float, sqrtf, fabsf)
HLOFUSE_LINALG(f64, double, sqrt, fabs)

/* The permutation of sequential 0-based row swaps (LAPACK-style pivots after JAX's -1). */
HLOFUSE_EXPORT void hlofuse_rt_lu_permutation(const int32_t *piv, int32_t *perm, int64_t batch,
                                              int64_t k, int64_t m) {
  for (int64_t bi = 0; bi < batch; ++bi) {
    int32_t *P = perm + bi * m;
    for (int64_t i = 0; i < m; ++i) P[i] = (int32_t)i;
    for (int64_t i = 0; i < k; ++i) {
      int64_t p = piv[bi * k + i];
      p = p < 0 ? 0 : p >= m ? m - 1 : p;
      const int32_t t = P[i]; P[i] = P[p]; P[p] = t;
    }
  }
}
