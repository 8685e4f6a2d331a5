"""A small dot computed element by element, where no library call can run (inside a
whole-loop kernel's lane code: a particle's force matrix times its state, per lane).

Element (batch, lhs free, rhs free) of the result is the sum over the contracting positions
of lhs * rhs, accumulated from +0 in ascending order of the contracting index with one fused
multiply-add per position, as XLA's CPU dot loops and the runtime's dot routine
(hlofuse_rt_dot) do (the reference: reference/dot.py); the positions are written out, so
the lane loop holds no inner loop and stays a simd loop.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from hlofuse.analysis.lane_linalg import contraction_size, is_small_dot
from hlofuse.codegen import cir
from hlofuse.codegen.cir import Expr
from hlofuse.codegen.emitter_types import Index, UnsupportedInstruction, Value
from hlofuse.ir.hlo import Instruction

if TYPE_CHECKING:
    from hlofuse.codegen.elemental import ElementalEmitter

def operand_index(dims: tuple[int, ...], batch: tuple[int, ...], contracting: tuple[int, ...],
                  batch_parts: tuple[Expr, ...], free_parts: tuple[Expr, ...],
                  position: tuple[int | Expr, ...]) -> Index:
    """The index into a dot operand for the result's batch and free components and the
    contracting position (literals, or a loop's variable)."""
    free = iter(free_parts)
    multi: list[Expr] = []
    for d in range(len(dims)):
        if d in batch:
            multi.append(batch_parts[batch.index(d)])
        elif d in contracting:
            at = position[contracting.index(d)]
            multi.append(cir.Int(at) if isinstance(at, int) else at)
        else:
            multi.append(next(free))
    return Index(dims, None, tuple(multi), None)


def dot_elemental(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    if not is_small_dot(inst):
        raise UnsupportedInstruction(
            f"%{inst.name}: a dot of {contraction_size(inst)} contracting positions of "
            f"{inst.dtype.value} is computed by the library, not element by element")
    lhs, rhs = inst.operands
    lhs_batch, lhs_contracting = inst.ints("lhs_batch_dims"), inst.ints("lhs_contracting_dims")
    rhs_batch, rhs_contracting = inst.ints("rhs_batch_dims"), inst.ints("rhs_contracting_dims")
    multi = em.multi_of(index)
    n_batch = len(lhs_batch)
    n_lhs_free = lhs.shape.rank - n_batch - len(lhs_contracting)
    batch_parts = tuple(multi[:n_batch])
    lhs_free = tuple(multi[n_batch:n_batch + n_lhs_free])
    rhs_free = tuple(multi[n_batch + n_lhs_free:])
    register = em.lang.register_type(inst.dtype)
    sizes = [lhs.shape.dims[d] for d in lhs_contracting]
    total: Expr = em.lang.literal(inst.dtype, 0)
    for position in itertools.product(*(range(s) for s in sizes)):
        a = em.array_value(lhs, operand_index(lhs.shape.dims, lhs_batch, lhs_contracting,
                                              batch_parts, lhs_free, position))
        b = em.array_value(rhs, operand_index(rhs.shape.dims, rhs_batch, rhs_contracting,
                                              batch_parts, rhs_free, position))
        fma = em.lang.math("fma", inst.dtype)
        total = em.body.let(register, cir.call(fma, a, b, total))
    return total
