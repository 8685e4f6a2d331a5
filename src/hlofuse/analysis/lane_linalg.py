"""Which dots, factorisations and solves a whole-loop kernel's lane code computes itself,
written out (codegen/dot_elemental.py; codegen/linalg_elemental.py, one small matrix per batch
position) instead of calling the library: what the parallel-loop analysis accepts, and how
much work it unrolls."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.linalg import Routine, linalg_call, options_of
from hlofuse.ir.ops import Op

# Dots lane code computes element by element (codegen/dot_elemental.py writes the
# contracting positions out): float, at most this many contracting positions.
SMALL_DOT_CONTRACTION = 64


def contraction_size(inst: Instruction) -> int:
    """The number of contracting positions summed for one element of a dot."""
    lhs = inst.operands[0].shape.dims
    return math.prod(lhs[d] for d in inst.ints("lhs_contracting_dims"))


def is_small_dot(inst: Instruction) -> bool:
    """A float dot (32 bits or more) lane code writes out: few contracting positions."""
    return (inst.dtype.is_float and inst.dtype.bits >= 32
            and contraction_size(inst) <= SMALL_DOT_CONTRACTION)


# Factorisations and solves lane code computes with the matrix written out
# (codegen/linalg_elemental.py): f32 or f64, at most this many multiply-adds per matrix.
LANE_LINALG_MAX_WORK = 2048


def lane_linalg_routine(inst: Instruction) -> Routine | None:
    """The routine of a factorisation or solve lane code can compute, one matrix per batch
    position (the `cholesky` and `triangular-solve` opcodes, the potrf, trsm and getrf calls
    and the pivots-to-permutation call); None for the others."""
    if inst.op is Op.CHOLESKY:
        return Routine.POTRF
    if inst.op is Op.TRIANGULAR_SOLVE:
        return Routine.TRSM
    call = linalg_call(inst) if inst.op is Op.CUSTOM_CALL else None
    if call is not None and call.routine in _LANE_ROUTINES:
        return call.routine
    return None


_LANE_ROUTINES = (Routine.POTRF, Routine.TRSM, Routine.GETRF, Routine.PIVOTS_TO_PERMUTATION)


def batch_rank(inst: Instruction) -> int:
    """The leading (batch) dimensions of a linear-algebra instruction's first operand: all but
    the matrix's two (the pivots' one, for the permutation)."""
    minor = 1 if lane_linalg_routine(inst) is Routine.PIVOTS_TO_PERMUTATION else 2
    return inst.operands[0].shape.rank - minor


def lane_linalg_work(inst: Instruction) -> int | None:
    """The multiply-adds (or selects) of one matrix of a factorisation or solve that lane code
    can compute (None for any other instruction)."""
    routine = lane_linalg_routine(inst)
    if routine is None:
        return None
    a = inst.operands[0].shape
    if routine is Routine.PIVOTS_TO_PERMUTATION:
        return a.dims[-1] * inst.shape.dims[-1]
    if a.dtype not in (DType.F32, DType.F64):
        return None
    m, n = a.dims[-2:]
    if routine is Routine.POTRF:
        return n * n * n // 6 + n * n
    if routine is Routine.GETRF:
        return m * n * min(m, n)
    b = inst.operands[1].shape.dims
    return n * b[-1] * b[-2]


def is_lane_linalg(inst: Instruction) -> bool:
    work = lane_linalg_work(inst)
    return work is not None and work <= LANE_LINALG_MAX_WORK


@dataclass(frozen=True, slots=True)
class TriangularSolve:
    """A triangular solve in the runtime's terms: op(A) x = b (left) or x op(A) = b."""

    left: bool
    lower: bool
    transpose: bool
    unit: bool


def triangular_solve_of(inst: Instruction) -> TriangularSolve:
    """The solve of a triangular-solve instruction or of a library call of one."""
    if inst.op is Op.TRIANGULAR_SOLVE:
        attrs = inst.attrs
        return TriangularSolve(
            attrs.get("left_side", False) is True, attrs.get("lower", False) is True,
            attrs.get("transpose_a", "NO_TRANSPOSE") != "NO_TRANSPOSE",
            attrs.get("unit_diagonal", False) is True)
    options = options_of(inst)
    return TriangularSolve(options.left_side, options.lower, options.transpose != "N",
                           options.unit_diagonal)
