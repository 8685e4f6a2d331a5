"""Code for linear algebra: `cholesky`, `triangular-solve` and the LAPACK/cuSOLVER custom calls
of `ir/linalg.py` become calls into the runtime library's batched routines (the C target's
hlofuse_linalg.c, declared in its hlofuse_rt.h), as XLA calls a library for them: one call per
instruction, an OpenMP loop over the batch of matrices inside. Matrices are the logical
row-major arrays.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from hlofuse.codegen import cir
from hlofuse.codegen.cir import Expr
from hlofuse.codegen.emitter_types import UnsupportedInstruction
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.linalg import LinalgCall, Routine, linalg_call, options_of
from hlofuse.ir.ops import Op

if TYPE_CHECKING:
    from hlofuse.codegen.kernel import KernelEmitter

_TAGS = {DType.F32: "f32", DType.F64: "f64"}
LINALG_OPS = (Op.CHOLESKY, Op.TRIANGULAR_SOLVE)


def is_linalg(inst: Instruction) -> bool:
    """Whether `emit_linalg` computes `inst`."""
    return inst.op in LINALG_OPS or (inst.op is Op.CUSTOM_CALL and linalg_call(inst) is not None)


def _what(inst: Instruction) -> str:
    target = inst.attrs.get("custom_call_target")
    return f"custom-call {target}" if isinstance(target, str) else inst.op.text


def _tag(inst: Instruction, dtype: DType) -> str:
    tag = _TAGS.get(dtype)
    if tag is None:
        raise UnsupportedInstruction(
            f"%{inst.name}: {inst.op.text} of {dtype.text} has no C routine (f32 and f64 only)")
    return tag


def _matrices(shape_dims: tuple[int, ...]) -> tuple[int, int, int]:
    """(batch, rows, columns) of a batch of matrices."""
    return math.prod(shape_dims[:-2]), shape_dims[-2], shape_dims[-1]


def _flag(value: bool) -> Expr:
    return cir.Int(1 if value else 0)


def emit_linalg(k: KernelEmitter, inst: Instruction, targets: list[str]) -> None:
    """One library call computing every result of `inst` into `targets` (one per leaf)."""
    if not k.lang.has_linalg_library:
        raise UnsupportedInstruction(f"%{inst.name}: {_what(inst)} has no {k.lang.name} "
                                     "routine in hlofuse (CPU only)")
    operands: list[Expr] = [cir.Var(k.operand_pointer(o)) for o in inst.operands]
    outs: list[Expr] = [cir.Var(t) for t in targets]
    if inst.op is Op.CHOLESKY:
        batch, n, _ = _matrices(inst.shape.dims)
        lower = inst.attrs.get("lower", False) is True
        k.body.call(f"hlofuse_rt_potrf_{_tag(inst, inst.dtype)}", operands[0], outs[0],
                    cir.Int(0), cir.Int(batch), cir.Int(n), _flag(lower), cir.Int(1))
        return
    if inst.op is Op.TRIANGULAR_SOLVE:
        batch, m, r = _matrices(inst.shape.dims)
        n = inst.operands[0].shape.dims[-1]
        attrs = inst.attrs
        k.body.call(f"hlofuse_rt_trsm_{_tag(inst, inst.dtype)}", *operands, outs[0],
                    cir.Int(batch), cir.Int(n), cir.Int(m), cir.Int(r),
                    _flag(attrs.get("left_side", False) is True),
                    _flag(attrs.get("lower", False) is True),
                    _flag(attrs.get("transpose_a", "NO_TRANSPOSE") != "NO_TRANSPOSE"),
                    _flag(attrs.get("unit_diagonal", False) is True))
        return
    call = linalg_call(inst)
    if call is None:
        raise UnsupportedInstruction(f"%{inst.name}: not a linear-algebra instruction")
    _emit_call(k, inst, call, operands, outs)


def _emit_call(k: KernelEmitter, inst: Instruction, call: LinalgCall, operands: list[Expr],
               outs: list[Expr]) -> None:
    routine = call.routine
    leaves = inst.shape.leaves()
    if routine is Routine.PIVOTS_TO_PERMUTATION:
        pivots = inst.operands[0].shape.dims
        m = leaves[0].dims[-1]
        k.body.call("hlofuse_rt_lu_permutation", operands[0], outs[0],
                    cir.Int(math.prod(pivots[:-1])), cir.Int(pivots[-1]), cir.Int(m))
        return
    a = inst.operands[0].shape
    tag = _tag(inst, a.dtype)
    batch, m, n = _matrices(a.dims)
    options = options_of(inst)
    if routine is Routine.POTRF:
        k.body.call(f"hlofuse_rt_potrf_{tag}", operands[0], outs[0], outs[1], cir.Int(batch),
                    cir.Int(n), _flag(options.lower), cir.Int(0))
    elif routine is Routine.TRSM:
        _, rows, columns = _matrices(leaves[0].dims)
        k.body.call(f"hlofuse_rt_trsm_{tag}", *operands, outs[0], cir.Int(batch), cir.Int(n),
                    cir.Int(rows), cir.Int(columns), _flag(options.left_side),
                    _flag(options.lower), _flag(options.transpose != "N"),
                    _flag(options.unit_diagonal))
    elif routine is Routine.GETRF:
        k.body.call(f"hlofuse_rt_getrf_{tag}", operands[0], *outs, cir.Int(batch), cir.Int(m),
                    cir.Int(n))
    elif routine is Routine.GEQRF:
        k.body.call(f"hlofuse_rt_geqrf_{tag}", operands[0], *outs, cir.Int(batch), cir.Int(m),
                    cir.Int(n))
    elif routine is Routine.ORGQR:
        count = inst.operands[1].shape.dims[-1]
        k.body.call(f"hlofuse_rt_orgqr_{tag}", *operands, outs[0], cir.Int(batch), cir.Int(m),
                    cir.Int(n), cir.Int(count))
    elif routine is Routine.SYEVD:
        k.body.call(f"hlofuse_rt_syevd_{tag}", operands[0], *outs, cir.Int(batch), cir.Int(n),
                    _flag(options.lower), _flag(options.vectors))
    else:  # GESDD and GESVD return v^T (rows: the vectors), GESVDJ v (columns: the vectors)
        v_transposed = routine is not Routine.GESVDJ
        u_at, v_at = (3, 2) if options.transposed else (2, 3)
        u_columns = leaves[u_at].dims[-1]
        v_count = leaves[v_at].dims[-2] if v_transposed else leaves[v_at].dims[-1]
        k.body.call(f"hlofuse_rt_svd_{tag}", operands[0], outs[0], outs[1], outs[u_at],
                    outs[v_at], outs[4], cir.Int(batch), cir.Int(m), cir.Int(n),
                    cir.Int(u_columns), cir.Int(v_count), _flag(v_transposed),
                    _flag(options.vectors))
