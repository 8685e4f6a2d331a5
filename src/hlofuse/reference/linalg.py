"""Reference evaluation of linear algebra: the `cholesky` and `triangular-solve` opcodes and
the LAPACK/cuSOLVER custom calls of `ir/linalg.py`, on `linalg_numerics.py`'s NumPy
routines."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from hlofuse.ir.hlo import Instruction
from hlofuse.ir.linalg import LINALG_CALLS, Routine, linalg_call, options_of
from hlofuse.ir.ops import Op
from hlofuse.reference import linalg_numerics as ref
from hlofuse.reference.common import CustomCallFn, Handler, Runner, Value, as_array


def _batched(x: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """(batch, m, n) view of a batch of matrices, with the leading dimensions to restore;
    f16 and bf16 are computed in f32."""
    compute = np.float32 if x.dtype.itemsize < 4 else x.dtype
    batch = x.shape[:-2]
    return x.reshape((math.prod(batch), *x.shape[-2:])).astype(compute), batch


def _cholesky(self: Runner, inst: Instruction, ops: list[Value]) -> Value:
    a, batch = _batched(as_array(ops[0]))
    lower = inst.attrs.get("lower", False) is True
    return ref.cholesky(a, lower).reshape(inst.shape.dims).astype(inst.dtype.numpy)


def _triangular_solve(self: Runner, inst: Instruction, ops: list[Value]) -> Value:
    a, _ = _batched(as_array(ops[0]))
    b, _ = _batched(as_array(ops[1]))
    x = ref.trsm(a, b, left_side=inst.attrs.get("left_side", False) is True,
                 lower=inst.attrs.get("lower", False) is True,
                 transpose=inst.attrs.get("transpose_a", "NO_TRANSPOSE") != "NO_TRANSPOSE",
                 unit_diagonal=inst.attrs.get("unit_diagonal", False) is True)
    return x.reshape(inst.shape.dims).astype(inst.dtype.numpy)


HANDLERS: dict[Op, Handler] = {
    Op.CHOLESKY: _cholesky,
    Op.TRIANGULAR_SOLVE: _triangular_solve,
}


def _leaf_dims(inst: Instruction) -> list[tuple[int, ...]]:
    return [leaf.dims for leaf in inst.shape.leaves()]


def evaluate_call(inst: Instruction, operands: Sequence[Value]) -> Value:
    """The results of a recognised library custom call, as LAPACK (or cuSOLVER) gives them."""
    call = linalg_call(inst)
    assert call is not None
    options = options_of(inst)
    dims = _leaf_dims(inst)
    if call.routine is Routine.PIVOTS_TO_PERMUTATION:
        pivots = as_array(operands[0])
        flat = pivots.reshape((math.prod(pivots.shape[:-1]), pivots.shape[-1]))
        return ref.pivots_to_permutation(flat, dims[0][-1]).reshape(dims[0])
    a, batch = _batched(as_array(operands[0]))
    routine = call.routine
    if routine is Routine.POTRF:
        out, info = ref.potrf(a, options.lower)
        return out.reshape(dims[0]), info.reshape(batch)
    if routine is Routine.TRSM:
        b, _ = _batched(as_array(operands[1]))
        x = ref.trsm(a, b, options.left_side, options.lower, options.transpose != "N",
                     options.unit_diagonal)
        return x.reshape(dims[0])
    if routine is Routine.GETRF:
        lu, pivots, info = ref.getrf(a)
        return lu.reshape(dims[0]), pivots.reshape(dims[1]), info.reshape(batch)
    if routine is Routine.GEQRF:
        r, tau = ref.geqrf(a)
        return r.reshape(dims[0]), tau.reshape(dims[1])
    if routine is Routine.ORGQR:
        tau = as_array(operands[1])
        taus = tau.reshape((math.prod(tau.shape[:-1]), tau.shape[-1]))
        return ref.orgqr(a, taus).reshape(dims[0])
    if routine is Routine.SYEVD:
        v, w, info = ref.syevd(a, options.lower, options.vectors)
        return v.reshape(dims[0]), w.reshape(dims[1]), info.reshape(batch)
    return _svd(inst, a, batch, dims, routine)


def _svd(inst: Instruction, a: np.ndarray, batch: tuple[int, ...],
         dims: list[tuple[int, ...]], routine: Routine) -> Value:
    options = options_of(inst)
    # Full u and v^T, cut to the declared shapes (reduced ones are their leading vectors).
    s, u, vt, info = ref.svd(a, True)
    u_at, v_at = (3, 2) if options.transposed else (2, 3)
    u = u[..., :dims[u_at][-1]]
    if routine is Routine.GESVDJ:
        v = np.swapaxes(vt, -1, -2)[..., :dims[v_at][-1]]
    else:
        v = vt[..., :dims[v_at][-2], :]
    if not options.vectors:
        u, v = np.zeros_like(u), np.zeros_like(v)  # not computed: LAPACK leaves them unset
    results: list[np.ndarray] = [a.reshape(dims[0]), s.reshape(dims[1]), u, v,
                                 info.reshape(batch)]
    results[u_at] = np.ascontiguousarray(u).reshape(dims[u_at])
    results[v_at] = np.ascontiguousarray(v).reshape(dims[v_at])
    return tuple(results)


CUSTOM_CALLS: dict[str, CustomCallFn] = {target: evaluate_call for target in LINALG_CALLS}
