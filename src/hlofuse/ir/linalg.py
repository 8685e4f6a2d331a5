"""Linear algebra in HLO: the `cholesky` and `triangular-solve` shape rules and the table of
library custom calls (LAPACK on the CPU, cuSOLVER on the GPU) that JAX's lowering emits.

Every layer reads this one table: the verifier checks a call's operands, results and
`backend_config` against it, the interpreter and the code generator pick their routine from
it. The conventions are JAX's lowering rules (jax/_src/lax/linalg.py): matrices are the two
minor dimensions, every leading dimension is a batch dimension (`num_batch_dims`), and the
matrix operands carry a column-major layout `{n-2, n-1, ...}`. Layouts are physical only in
hlofuse (HLO semantics are logical), so every routine here reads the *logical* matrix
`a[..., i, j]` as LAPACK reads element (i, j) of its column-major buffer.

Results (all batched over the leading dimensions; `info` is s32 per matrix, 0 on success):

- potrf: `(a, info)`, the Cholesky factor in the `uplo` triangle, the other triangle as it
  was; info = j > 0 when the leading minor of order j is not positive definite.
- trsm: `x` with op(A) x = b (side L) or x op(A) = b (side R), A triangular (`uplo`, `diag`),
  op = `trans_x` (N, T or C).
- getrf: `(lu, ipiv, info)`: partial pivoting, 1-based pivot rows (LAPACK's ipiv), info = j > 0
  when U[j-1, j-1] is exactly zero (the factorisation still completes).
- geqrf: `(a, tau)`: R above the diagonal, the Householder vectors below it.
- orgqr: `q` from the Householder vectors and `tau`.
- syevd: `(v, w, info)`: eigenvectors in the columns of v, eigenvalues ascending (`mode` V or
  N, the `uplo` triangle read).
- gesdd (and gesvd, which JAX calls with the same conventions): `(a, s, u, vt, info)`:
  `mode` A (full), S (reduced) or N (values only).
- cuSOLVER: potrf (`lower`), getrf, geqrf, orgqr, syevd (`lower`), gesvdj (returns V, not its
  transpose; `full_matrices`, `compute_uv`), gesvd (u and v^T, swapped for the wide matrices
  JAX passes `transposed`) and `cu_lu_pivots_to_permutation`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hlofuse.ir.dtypes import DType
from hlofuse.ir.shape_inference.checks import ShapeError
from hlofuse.ir.shapes import Shape

if TYPE_CHECKING:
    from hlofuse.ir.hlo import Computation, Instruction

Attrs = Mapping[str, object]

TRANSPOSE_CHOICES = ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT")
LINALG_DTYPES = (DType.F16, DType.BF16, DType.F32, DType.F64)


# --- the opcodes ---------------------------------------------------------------------------


def _matrices(shape: Shape, what: str, op: str) -> Shape:
    if not shape.is_array or shape.rank < 2:
        raise ShapeError(f"{op} {what} must be an array of rank >= 2, got {shape.text(False)}")
    if shape.dtype not in LINALG_DTYPES:
        raise ShapeError(f"{op} {what} must be floating point, got {shape.dtype.text}")
    return shape


def cholesky(operands: Sequence[Shape], attrs: Attrs, calls: Sequence[Computation],
             declared: Shape | None, op: str = "cholesky") -> Shape:
    """XLA's InferCholeskyShape: batched square matrices in, the same shape out."""
    a = _matrices(operands[0], "operand", op)
    if a.dims[-1] != a.dims[-2]:
        raise ShapeError(f"cholesky operand must be batched square matrices, got "
                         f"{a.text(False)}")
    return Shape.array(a.dtype, a.dims)


def triangular_solve(operands: Sequence[Shape], attrs: Attrs, calls: Sequence[Computation],
                     declared: Shape | None, op: str = "triangular-solve") -> Shape:
    """XLA's InferTriangularSolveShape: the result has b's shape."""
    a = _matrices(operands[0], "a", op)
    b = _matrices(operands[1], "b", op)
    if a.dtype is not b.dtype:
        raise ShapeError(f"triangular-solve a and b differ in element type: {a.dtype.text} "
                         f"and {b.dtype.text}")
    if a.rank != b.rank:
        raise ShapeError(f"triangular-solve a {a.text(False)} and b {b.text(False)} differ in "
                         "rank")
    if a.dims[-1] != a.dims[-2]:
        raise ShapeError(f"triangular-solve a must be batched square matrices, got "
                         f"{a.text(False)}")
    if a.dims[:-2] != b.dims[:-2]:
        raise ShapeError(f"triangular-solve a {a.text(False)} and b {b.text(False)} differ in "
                         "their batch dimensions")
    left = attrs.get("left_side", False) is True
    solved = b.dims[-2] if left else b.dims[-1]
    if solved != a.dims[-1]:
        side = "rows" if left else "columns"
        raise ShapeError(f"triangular-solve with left_side={str(left).lower()}: b "
                         f"{b.text(False)} must have {a.dims[-1]} {side} to match a "
                         f"{a.text(False)}")
    return Shape.array(b.dtype, b.dims)


# --- the custom calls ----------------------------------------------------------------------


class Routine(enum.Enum):
    """What a library call computes; the interpreter and code generator key on this."""

    POTRF = "potrf"
    TRSM = "trsm"
    GETRF = "getrf"
    GEQRF = "geqrf"
    ORGQR = "orgqr"
    SYEVD = "syevd"
    GESDD = "gesdd"
    GESVDJ = "gesvdj"  # cuSOLVER's Jacobi SVD: returns V where gesdd returns V^T
    GESVD = "gesvd"  # cuSOLVER's QR SVD: u and v^T, in swapped places when `transposed`
    PIVOTS_TO_PERMUTATION = "lu-pivots-to-permutation"


@dataclass(frozen=True, slots=True)
class LinalgCall:
    """One recognised custom-call target."""

    target: str
    routine: Routine
    library: str  # "lapack" or "cusolver"
    dtype: DType | None  # LAPACK names carry their type; cuSOLVER's take the operand's


def _table() -> dict[str, LinalgCall]:
    table: dict[str, LinalgCall] = {}
    lapack = (Routine.POTRF, Routine.TRSM, Routine.GETRF, Routine.GEQRF, Routine.ORGQR,
              Routine.SYEVD, Routine.GESDD)
    for letter, dtype in (("s", DType.F32), ("d", DType.F64)):
        for routine in lapack:
            name = f"lapack_{letter}{routine.value}_ffi"
            table[name] = LinalgCall(name, routine, "lapack", dtype)
        # gesvd (SvdAlgorithm.QR) has gesdd's operands, results and mode: the same result.
        name = f"lapack_{letter}gesvd_ffi"
        table[name] = LinalgCall(name, Routine.GESDD, "lapack", dtype)
    for routine in (Routine.POTRF, Routine.GETRF, Routine.GEQRF, Routine.ORGQR,
                    Routine.SYEVD, Routine.GESVDJ, Routine.GESVD):
        name = f"cusolver_{routine.value}_ffi"
        table[name] = LinalgCall(name, routine, "cusolver", None)
    name = "cu_lu_pivots_to_permutation"
    table[name] = LinalgCall(name, Routine.PIVOTS_TO_PERMUTATION, "cusolver", None)
    return table


LINALG_CALLS: dict[str, LinalgCall] = _table()

# backend_config keys each routine reads, with the values JAX writes (characters as ui8).
_CHAR_KEYS: dict[tuple[str, Routine], dict[str, str]] = {
    ("lapack", Routine.POTRF): {"uplo": "LU"},
    ("lapack", Routine.TRSM): {"side": "LR", "uplo": "LU", "trans_x": "NTC", "diag": "NU"},
    ("lapack", Routine.SYEVD): {"mode": "VN", "uplo": "LU"},
    ("lapack", Routine.GESDD): {"mode": "ASN"},
}
_BOOL_KEYS: dict[tuple[str, Routine], tuple[str, ...]] = {
    ("cusolver", Routine.POTRF): ("lower",),
    ("cusolver", Routine.SYEVD): ("lower",),
    ("cusolver", Routine.GESVDJ): ("full_matrices", "compute_uv"),
    ("cusolver", Routine.GESVD): ("full_matrices", "compute_uv", "transposed"),
}
_ENTRY = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(true|false|-?\d+)\s*(?::\s*[a-z]+\d*)?"
                    r"\s*(?:,|$)")


def parse_backend_config(text: str) -> dict[str, int | bool]:
    """`{uplo = 76 : ui8, lower = true}` as {"uplo": 76, "lower": True}; ValueError if the
    text is not of that form."""
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise ValueError(f"backend_config {text!r} is not a {{key = value, ...}} dictionary")
    body = body[1:-1].strip()
    values: dict[str, int | bool] = {}
    position = 0
    while position < len(body):
        m = _ENTRY.match(body, position)
        if m is None:
            raise ValueError(f"backend_config {text!r}: cannot read an entry at "
                             f"{body[position:position + 20]!r}")
        raw = m.group(2)
        values[m.group(1)] = raw == "true" if raw in ("true", "false") else int(raw)
        position = m.end()
    return values


@dataclass(frozen=True, slots=True)
class CallOptions:
    """A call's backend_config in the words of the routines."""

    lower: bool = True
    left_side: bool = True
    transpose: str = "N"  # N, T or C
    unit_diagonal: bool = False
    vectors: bool = True  # syevd/gesdd/gesvdj: compute eigen- or singular vectors
    full_matrices: bool = True
    transposed: bool = False  # cuSOLVER gesvd of a wide matrix: results 2 and 3 are v^T, u


def call_options(call: LinalgCall, config: Mapping[str, int | bool]) -> CallOptions:
    """Read the backend_config entries of `call`; ValueError names a bad or missing one."""
    key = (call.library, call.routine)
    chars: dict[str, str] = {}
    for name, allowed in _CHAR_KEYS.get(key, {}).items():
        value = config.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 128 \
                or chr(value) not in allowed:
            expected = " or ".join(f"{ord(c)} ('{c}')" for c in allowed)
            raise ValueError(f"{call.target} needs backend_config {name} = {expected}, got "
                             f"{value!r}")
        chars[name] = chr(value)
    flags: dict[str, bool] = {}
    for name in _BOOL_KEYS.get(key, ()):
        value = config.get(name)
        if not isinstance(value, bool):
            raise ValueError(f"{call.target} needs backend_config {name} = true or false, got "
                             f"{value!r}")
        flags[name] = value
    if call.routine is Routine.GESDD:
        mode = chars["mode"]
        return CallOptions(vectors=mode != "N", full_matrices=mode == "A")
    if call.routine in (Routine.GESVDJ, Routine.GESVD):
        return CallOptions(vectors=flags["compute_uv"], full_matrices=flags["full_matrices"],
                           transposed=flags.get("transposed", False))
    return CallOptions(lower=flags.get("lower", chars.get("uplo", "L") == "L"),
                       left_side=chars.get("side", "L") == "L",
                       transpose=chars.get("trans_x", "N"),
                       unit_diagonal=chars.get("diag", "N") == "U",
                       vectors=chars.get("mode", "V") != "N")


def backend_config_of(inst: Instruction) -> dict[str, int | bool]:
    for key, raw in inst.extra:
        if key == "backend_config":
            return parse_backend_config(raw.text)
    return {}


def linalg_call(inst: Instruction) -> LinalgCall | None:
    target = inst.attrs.get("custom_call_target")
    return LINALG_CALLS.get(target) if isinstance(target, str) else None


def options_of(inst: Instruction) -> CallOptions:
    """The options of a recognised call (checked by the verifier, so no error here)."""
    call = linalg_call(inst)
    assert call is not None
    return call_options(call, backend_config_of(inst))


def check_call(inst: Instruction) -> None:
    """Raise ValueError naming the problem if a recognised call's backend_config is bad."""
    call = linalg_call(inst)
    if call is None:
        return
    options = call_options(call, backend_config_of(inst))
    if call.routine is Routine.GESVD:
        m, n = inst.operands[0].shape.dims[-2:]
        if options.transposed != (m < n):
            raise ValueError(f"{call.target}: backend_config transposed must be "
                             f"{str(m < n).lower()} for {m}x{n} matrices (JAX transposes "
                             "exactly the wide ones)")
    if call.routine is Routine.TRSM:
        a, b = (o.shape for o in inst.operands)
        side = -2 if options.left_side else -1
        if b.dims[side] != a.dims[-1]:
            raise ValueError(f"{call.target} with side={'L' if options.left_side else 'R'}: b "
                             f"{b.text(False)} must have {a.dims[-1]} "
                             f"{'rows' if options.left_side else 'columns'}")


# --- shapes of the custom calls ------------------------------------------------------------


def _leaves(declared: Shape, count: int, target: str) -> list[Shape]:
    leaves = list(declared.elements) if declared.is_tuple else [declared]
    if len(leaves) != count or any(not s.is_array for s in leaves):
        raise ShapeError(f"{target} returns {count} array(s), declared {declared.text(False)}")
    return leaves


def _expect(shape: Shape, dtype: DType, dims: tuple[int, ...], what: str, target: str) -> None:
    if shape.dtype is not dtype or shape.dims != dims:
        raise ShapeError(f"{target} {what} must be {Shape.array(dtype, dims).text(False)}, got "
                         f"{shape.text(False)}")


def _operands(operands: Sequence[Shape], count: int, target: str) -> None:
    if len(operands) != count:
        raise ShapeError(f"{target} takes {count} operand(s), got {len(operands)}")


def custom_call_shape(operands: Sequence[Shape], attrs: Attrs, calls: Sequence[Computation],
                      declared: Shape | None, op: str = "custom-call") -> Shape:
    """The declared result shape, checked against the conventions of recognised targets."""
    if declared is None:
        raise ShapeError(f"{op} needs its result shape written out")
    target = attrs.get("custom_call_target")
    call = LINALG_CALLS.get(target) if isinstance(target, str) else None
    if call is None:
        return declared
    _check_shapes(call, operands, declared)
    return declared


def _check_shapes(call: LinalgCall, operands: Sequence[Shape], declared: Shape) -> None:
    t = call.target
    routine = call.routine
    if routine is Routine.PIVOTS_TO_PERMUTATION:
        _operands(operands, 1, t)
        pivots = operands[0]
        if not pivots.is_array or pivots.dtype is not DType.S32 or pivots.rank < 1:
            raise ShapeError(f"{t} operand must be s32 pivots of rank >= 1, got "
                             f"{pivots.text(False)}")
        (perm,) = _leaves(declared, 1, t)
        if perm.dtype is not DType.S32 or perm.dims[:-1] != pivots.dims[:-1] or perm.rank < 1 \
                or perm.dims[-1] < pivots.dims[-1]:
            raise ShapeError(f"{t} result must be s32[..., m >= {pivots.dims[-1]}] with the "
                             f"pivots' batch dimensions, got {perm.text(False)}")
        return
    _operands(operands, 2 if routine in (Routine.TRSM, Routine.ORGQR) else 1, t)
    a = operands[0]
    if not a.is_array or a.rank < 2:
        raise ShapeError(f"{t} operand must be batched matrices of rank >= 2, got "
                         f"{a.text(False)}")
    dtype = call.dtype or a.dtype
    if a.dtype is not dtype or dtype not in (DType.F32, DType.F64):
        raise ShapeError(f"{t} operand must be {(call.dtype or DType.F32).text}"
                         f"{'' if call.dtype else ' or f64'}, got {a.text(False)}")
    batch, (m, n) = a.dims[:-2], a.dims[-2:]
    k = min(m, n)
    info = (DType.S32, batch)
    if routine in (Routine.POTRF, Routine.SYEVD) and m != n:
        raise ShapeError(f"{t} operand must be batched square matrices, got {a.text(False)}")
    if routine is Routine.POTRF:
        out, status = _leaves(declared, 2, t)
        _expect(out, dtype, a.dims, "result 0", t)
        _expect(status, *info, "info (result 1)", t)
    elif routine is Routine.TRSM:
        b = operands[1]
        if m != n:
            raise ShapeError(f"{t} a must be batched square matrices, got {a.text(False)}")
        if not b.is_array or b.rank != a.rank or b.dtype is not dtype or b.dims[:-2] != batch \
                or n not in b.dims[-2:]:
            raise ShapeError(f"{t} b {b.text(False)} does not fit a {a.text(False)}")
        (x,) = _leaves(declared, 1, t)
        _expect(x, dtype, b.dims, "result", t)
    elif routine is Routine.GETRF:
        lu, pivots, status = _leaves(declared, 3, t)
        _expect(lu, dtype, a.dims, "result 0", t)
        _expect(pivots, DType.S32, (*batch, k), "pivots (result 1)", t)
        _expect(status, *info, "info (result 2)", t)
    elif routine is Routine.GEQRF:
        out, tau = _leaves(declared, 2, t)
        _expect(out, dtype, a.dims, "result 0", t)
        _expect(tau, dtype, (*batch, k), "tau (result 1)", t)
    elif routine is Routine.ORGQR:
        tau = operands[1]
        if not tau.is_array or tau.dtype is not dtype or tau.dims[:-1] != batch \
                or tau.rank != a.rank - 1 or tau.dims[-1] > n or n > m:
            raise ShapeError(f"{t} tau {tau.text(False)} does not fit a {a.text(False)} (needs "
                             "m >= n >= k)")
        (q,) = _leaves(declared, 1, t)
        _expect(q, dtype, a.dims, "result", t)
    elif routine is Routine.SYEVD:
        v, w, status = _leaves(declared, 3, t)
        _expect(v, dtype, a.dims, "eigenvectors (result 0)", t)
        _expect(w, dtype, (*batch, n), "eigenvalues (result 1)", t)
        _expect(status, *info, "info (result 2)", t)
    else:  # GESDD, GESVDJ, GESVD
        out, s, u, v, status = _leaves(declared, 5, t)
        if routine is Routine.GESVD and m < n:  # JAX calls it `transposed`: v^T, then u
            u, v = v, u
        _expect(out, dtype, a.dims, "result 0", t)
        _expect(s, dtype, (*batch, k), "singular values (result 1)", t)
        _expect(status, *info, "info (result 4)", t)
        u_choices = ((*batch, m, m), (*batch, m, k))
        v_choices = (((*batch, n, n), (*batch, k, n)) if routine is not Routine.GESVDJ
                     else ((*batch, n, n), (*batch, n, k)))
        for shape, choices, what in ((u, u_choices, "u (result 2)"),
                                     (v, v_choices, "v (result 3)")):
            if shape.dtype is not dtype or shape.dims not in choices:
                raise ShapeError(f"{t} {what} must be one of "
                                 f"{', '.join(Shape.array(dtype, c).text(False) for c in choices)}"
                                 f", got {shape.text(False)}")

