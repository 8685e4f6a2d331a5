"""The numerics of hlofuse's linear-algebra routines in NumPy, batched over a leading axis.

Written as the textbook unblocked algorithms LAPACK's reference routines use (potf2, getf2
with partial pivoting, geqr2/org2r with dlarfg's reflectors, forward and back substitution),
vectorised across the batch, so the interpreter and the C routines (runtime/hlofuse_linalg.c)
compute the same thing in the same order. Eigen- and singular vectors are only defined up to
sign; both sides normalise each vector so that its entry of largest magnitude is positive.
Every function takes arrays of shape (batch, m, n) and never raises on bad numbers:
singular or indefinite matrices give infinities, NaNs and the `info` LAPACK defines.
"""

from __future__ import annotations

import numpy as np


def _cholesky_lower(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Column by column (potf2): the lower factor (zeros above), LAPACK's info, and whether
    any pivot's square root was NaN (XLA's test)."""
    batch, n, _ = a.shape
    factor = np.zeros_like(a)
    info = np.zeros(batch, np.int32)
    nan_root = np.zeros(batch, bool)
    with np.errstate(all="ignore"):
        for j in range(n):
            row = factor[:, j, :j]
            d = a[:, j, j] - np.einsum("bk,bk->b", row, row)
            info[(info == 0) & ~(d > 0)] = j + 1
            root = np.sqrt(d)
            nan_root |= np.isnan(root)
            factor[:, j, j] = root
            below = a[:, j + 1:, j] - np.einsum("bik,bk->bi", factor[:, j + 1:, :j], row)
            factor[:, j + 1:, j] = below / root[:, None]
    return factor, info, nan_root


def potrf(a: np.ndarray, lower: bool) -> tuple[np.ndarray, np.ndarray]:
    """LAPACK potrf: the factor in the `lower` (or upper) triangle, the other triangle as in
    `a`; info[b] = j + 1 for the first column j whose pivot is not positive (what the factor
    holds then is unspecified: LAPACK stops part-way, JAX replaces it by NaN)."""
    work = a if lower else np.swapaxes(a, -1, -2)
    factor, info, _ = _cholesky_lower(work)
    n = a.shape[-1]
    out = np.where(np.tril(np.ones((n, n), bool)), factor, work)
    return (out if lower else np.swapaxes(out, -1, -2)).astype(a.dtype), info


def cholesky(a: np.ndarray, lower: bool) -> np.ndarray:
    """XLA's cholesky: the factor with the other triangle zero; a matrix with a NaN pivot
    square root (a negative or NaN pivot) becomes all NaN, as XLA's expander makes it."""
    work = a if lower else np.swapaxes(a, -1, -2)
    factor, _, failed = _cholesky_lower(work)
    factor[failed] = np.nan
    factor = factor.astype(a.dtype)
    return factor if lower else np.swapaxes(factor, -1, -2)


def trsm(a: np.ndarray, b: np.ndarray, left_side: bool, lower: bool, transpose: bool,
         unit_diagonal: bool) -> np.ndarray:
    """x with op(A) x = b (left) or x op(A) = b (right), A the `lower` (or upper) triangle of
    `a` (with ones on the diagonal if `unit_diagonal`), op(A) = A^T if `transpose`."""
    n = a.shape[-1]
    tri = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        tri = tri.copy()
        tri[:, np.arange(n), np.arange(n)] = 1
    if transpose:
        tri = np.swapaxes(tri, -1, -2)
        lower = not lower
    # x op(A) = b is op(A)^T x^T = b^T: one left-side solve.
    if not left_side:
        tri = np.swapaxes(tri, -1, -2)
        lower = not lower
        b = np.swapaxes(b, -1, -2)
    x = np.array(b, copy=True)
    order = range(n) if lower else range(n - 1, -1, -1)
    with np.errstate(all="ignore"):
        for i in order:
            known = slice(0, i) if lower else slice(i + 1, n)
            s = x[:, i, :] - np.einsum("bk,bkr->br", tri[:, i, known], x[:, known, :])
            x[:, i, :] = s if unit_diagonal else s / tri[:, i, i][:, None]
    return (x if left_side else np.swapaxes(x, -1, -2)).astype(b.dtype)


def getrf(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LAPACK getrf (getf2): LU with partial pivoting; 1-based pivots; info[b] = j + 1 for the
    first exactly zero pivot (the factorisation goes on, leaving that column unscaled)."""
    lu = np.array(a, copy=True)
    batch, m, n = lu.shape
    k = min(m, n)
    pivots = np.zeros((batch, k), np.int32)
    info = np.zeros(batch, np.int32)
    rows = np.arange(batch)
    with np.errstate(all="ignore"):
        for j in range(k):
            # LAPACK's i?amax: the first row of largest magnitude, comparing with `>` from the
            # diagonal on, so a NaN on the diagonal stays and a NaN below it never wins.
            column = np.abs(lu[:, j:, j])
            p = j + np.argmax(np.where(np.isnan(column), -1, column), axis=1)
            p = np.where(np.isnan(column[:, 0]), j, p)
            pivots[:, j] = p + 1
            pivot = lu[rows, p, j]
            nonzero = pivot != 0
            info[(info == 0) & ~nonzero] = j + 1
            swap = lu[rows, p, :].copy()
            lu[rows, p, :] = lu[:, j, :]
            lu[:, j, :] = swap
            scale = np.where(nonzero, pivot, 1)
            lu[:, j + 1:, j] = np.where(nonzero[:, None], lu[:, j + 1:, j] / scale[:, None],
                                        lu[:, j + 1:, j])
            lu[:, j + 1:, j + 1:] -= lu[:, j + 1:, j, None] * lu[:, j, None, j + 1:]
    return lu.astype(a.dtype), pivots, info


def geqrf(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LAPACK geqrf (geqr2): Householder QR; R on and above the diagonal, the reflectors'
    vectors (with an implicit leading 1) below it, their scalars in tau."""
    r = np.array(a, copy=True)
    batch, m, n = r.shape
    k = min(m, n)
    tau = np.zeros((batch, k), a.dtype)
    with np.errstate(all="ignore"):
        for j in range(k):
            alpha = r[:, j, j].copy()
            norm = np.sqrt(np.einsum("bi,bi->b", r[:, j + 1:, j], r[:, j + 1:, j]))
            identity = norm == 0  # dlarfg: H = I, tau = 0
            beta = -np.copysign(np.hypot(alpha, norm), alpha)
            safe_beta = np.where(identity, 1, beta)
            t = np.where(identity, 0, (beta - alpha) / safe_beta)
            scale = np.where(identity, 0, 1 / np.where(identity, 1, alpha - beta))
            r[:, j + 1:, j] *= scale[:, None]
            r[:, j, j] = np.where(identity, alpha, beta)
            tau[:, j] = t
            # Apply H = I - tau v v^T to the columns right of j.
            v = np.concatenate([np.ones((batch, 1), a.dtype), r[:, j + 1:, j]], axis=1)
            w = np.einsum("bi,bic->bc", v, r[:, j:, j + 1:])
            r[:, j:, j + 1:] -= t[:, None, None] * v[:, :, None] * w[:, None, :]
    return r.astype(a.dtype), tau


def orgqr(a: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """LAPACK orgqr (org2r): the first n columns of H_0 H_1 ... H_{k-1}."""
    batch, m, n = a.shape
    k = tau.shape[-1]
    q = np.zeros_like(a)
    q[:, np.arange(n), np.arange(n)] = 1
    with np.errstate(all="ignore"):
        for j in range(k - 1, -1, -1):
            v = np.concatenate([np.ones((batch, 1), a.dtype), a[:, j + 1:, j]], axis=1)
            w = np.einsum("bi,bic->bc", v, q[:, j:, j:])
            q[:, j:, j:] -= tau[:, j, None, None] * v[:, :, None] * w[:, None, :]
    return q.astype(a.dtype)


def _sign_normalised(vectors: np.ndarray) -> np.ndarray:
    """Flip each column so that its entry of largest magnitude (the first of equals) is
    positive; returns the signs (batch, columns)."""
    rows = np.argmax(np.abs(vectors), axis=-2)
    lead = np.take_along_axis(vectors, rows[:, None, :], axis=-2)[:, 0, :]
    return np.where(lead < 0, -1, 1).astype(vectors.dtype)


def syevd(a: np.ndarray, lower: bool, vectors: bool) -> tuple[np.ndarray, np.ndarray,
                                                                np.ndarray]:
    """Eigenvalues ascending and eigenvectors (columns) of the symmetric matrix whose `lower`
    (or upper) triangle `a` holds; info[b] = 1 where the input is not finite."""
    batch, n, _ = a.shape
    tri = np.tril(a) if lower else np.triu(a)
    sym = tri + np.swapaxes(np.tril(tri, -1) if lower else np.triu(tri, 1), -1, -2)
    finite = np.isfinite(sym).all(axis=(-1, -2))
    info = np.where(finite, 0, 1).astype(np.int32)
    safe = np.where(finite[:, None, None], sym, 0).astype(np.float64)
    w, v = np.linalg.eigh(safe)
    v = v * _sign_normalised(v)[:, None, :]
    w = np.where(finite[:, None], w, np.nan).astype(a.dtype)
    v = np.where(finite[:, None, None], v, np.nan).astype(a.dtype)
    return (v if vectors else np.array(a, copy=True)), w, info


def svd(a: np.ndarray, full: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Singular values (descending), u and v^T (full or reduced), info[b] = 1 where the input
    is not finite. Each column of u is sign-normalised and v^T's row flipped with it."""
    finite = np.isfinite(a).all(axis=(-1, -2))
    info = np.where(finite, 0, 1).astype(np.int32)
    safe = np.where(finite[:, None, None], a, 0).astype(np.float64)
    u, s, vt = np.linalg.svd(safe, full_matrices=full)
    k = s.shape[-1]
    signs = _sign_normalised(u[:, :, :k])
    u = u.copy()
    u[:, :, :k] *= signs[:, None, :]
    vt = vt.copy()
    vt[:, :k, :] *= signs[:, :, None]
    bad = ~finite
    return (np.where(bad[:, None], np.nan, s).astype(a.dtype),
            np.where(bad[:, None, None], np.nan, u).astype(a.dtype),
            np.where(bad[:, None, None], np.nan, vt).astype(a.dtype), info)


def pivots_to_permutation(pivots: np.ndarray, size: int) -> np.ndarray:
    """The row permutation of 0-based sequential pivots (row i swapped with pivots[i])."""
    batch, k = pivots.shape
    perm = np.tile(np.arange(size, dtype=np.int32), (batch, 1))
    rows = np.arange(batch)
    for i in range(k):
        p = np.clip(pivots[:, i], 0, size - 1)
        here = perm[:, i].copy()
        perm[:, i] = perm[rows, p]
        perm[rows, p] = here
    return perm
