"""Index maps of the ops that move data: the operand element each result element reads.

One handler per op that is not element-wise (`STRUCTURAL`): broadcast drops dimensions,
transpose permutes them, slice offsets them, pad and concatenate pick an operand by a branch
(or statically, where the index's range lies inside one operand), reductions accumulate
(codegen/reductions_elemental.py). Handlers only ask the emitter for operand values at new
indices; nothing is stored.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from hlofuse.analysis.lane_linalg import lane_linalg_routine
from hlofuse.codegen import cir
from hlofuse.codegen.cir import Binary, Expr
from hlofuse.codegen.dot_elemental import dot_elemental
from hlofuse.codegen.emitter_types import (
    SCALAR,
    UNROLL_ELEMENTS,
    Binding,
    Index,
    NeedsLoopNest,
    UnsupportedInstruction,
    Value,
    conjunction,
    expr_of,
)
from hlofuse.codegen.gather_scatter import gather, map_, scatter
from hlofuse.codegen.linalg_elemental import linalg_elemental, linalg_leaf_elemental
from hlofuse.codegen.op_expressions import bits_of, convert_expression, from_bits
from hlofuse.codegen.reductions_elemental import materialized, reduce, reduce_window
from hlofuse.ir.attrs import PaddingDim, SliceDim
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op

if TYPE_CHECKING:
    from hlofuse.codegen.elemental import ElementalEmitter

Structural = Callable[["ElementalEmitter", Instruction, Index], Value]

# A loop nest shares its outermost loop among the threads: a broadcast along the trailing
# dimensions is read through a nest only when that loop has at least this many rows to share.
NEST_MIN_ROWS = 64


def _parameter(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    raise UnsupportedInstruction(f"%{inst.name}: parameter without an argument")


def _constant(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    literal = inst.attrs["literal"]
    if inst.shape.dims:
        raise UnsupportedInstruction(f"%{inst.name}: array constant without an argument")
    assert isinstance(literal, np.ndarray)
    return em.lang.literal(inst.dtype, literal.reshape(()).item())


def _same_index(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    return em.value(inst.operands[0], index)


def _reshape(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand = inst.operands[0]
    source, target = operand.shape.dims, inst.shape.dims
    if index.multi is not None and [d for d in source if d != 1] == [d for d in target if d != 1]:
        kept = iter(m for m, d in zip(index.multi, target) if d != 1)
        multi = tuple(cir.Int(0) if d == 1 else next(kept) for d in source)
        value = em.value(operand, Index(source, None, multi, None))
    elif index.multi is not None and (prefix := _common_prefix(source, target)):
        # Leading dimensions the reshape keeps (a lane dimension) keep their indices: folded
        # into the linear index, a lane's position would be divided and taken modulo the
        # inner sizes, which hides that it is the lane's own row (gcc then gathers).
        inner = em.linear_of(Index(target[prefix:], None, index.multi[prefix:], None))
        rest = em.multi_of(Index(source[prefix:], inner, None, None))
        value = em.value(operand, Index(source, None, (*index.multi[:prefix], *rest), None))
    else:
        value = em.value(operand, Index(source, em.linear_of(index), None, index.flat_group))
    if inst.dtype is operand.dtype:
        return value
    # XLA's bitcast may change the element type at the same width: the bits reinterpreted.
    bits = bits_of(em.lang, operand.dtype, expr_of(value))
    return em.body.let(em.lang.register_type(inst.dtype), from_bits(em.lang, inst.dtype, bits),
                       hlo_name=inst.name)


def _common_prefix(source: tuple[int, ...], target: tuple[int, ...]) -> int:
    """How many leading dimensions of more than one element two shapes share (0 where the
    reshape leaves nothing after them)."""
    kept = 0
    while kept < min(len(source), len(target)) - 1 and source[kept] == target[kept] > 1:
        kept += 1
    return kept


def _broadcast(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand = inst.operands[0]
    dims = inst.ints("dimensions")
    source, target = operand.shape.dims, inst.shape.dims
    if not source:
        return em.value(operand, SCALAR)
    if source == target and dims == tuple(range(len(target))):
        return em.value(operand, index)
    if index.multi is None and index.linear is not None:
        count = math.prod(source)
        rank = len(target)
        if dims == tuple(range(rank - len(source), rank)) and source == target[rank - len(dims):]:
            # A trailing block of dimensions: the operand repeats with period `count`.
            if index.flat_group is not None and math.prod(target) // count >= NEST_MIN_ROWS:
                # Read at the linear index modulo the period, a gather, which keeps gcc from
                # vectorising the loop when its body is dear (a layer's bias added before
                # its tanh ran 16x slower than the same loop without the bias); a nest
                # reads the operand contiguously along the inner dimensions.
                raise NeedsLoopNest(index.flat_group)
            linear = em.index_let(cir.mod(index.linear, count))
            return em.value(operand, Index(source, linear, None, index.flat_group))
        if dims == tuple(range(len(source))) and source == target[:len(source)]:
            inner = math.prod(target[len(source):])
            if index.flat_group is not None and len(target) == len(source) + 1 and \
                    inner <= UNROLL_ELEMENTS:
                # Each element repeated a few times along one more dimension: read at the
                # linear index divided by the count, a gather, which gcc does not emit on every
                # CPU (on Zen 2 a counter-based generator's loop over [N, 3] keys stayed
                # scalar); a nest writes that dimension out and reads the element once a row.
                raise NeedsLoopNest(index.flat_group)
            linear = em.index_let(cir.div(index.linear, inner))
            return em.value(operand, Index(source, linear, None, index.flat_group))
    multi = em.multi_of(index)
    operand_multi = tuple(cir.Int(0) if size == 1 else multi[d] for d, size in zip(dims, source))
    return em.value(operand, Index(source, None, operand_multi, None))


def _transpose(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand = inst.operands[0]
    perm = inst.ints("dimensions")
    if perm == tuple(range(len(perm))):
        return em.value(operand, index)
    multi = em.multi_of(index)
    operand_multi: list[Expr] = [cir.Int(0)] * len(perm)
    for i, p in enumerate(perm):
        operand_multi[p] = multi[i]
    return em.value(operand, Index(operand.shape.dims, None, tuple(operand_multi), None))


def _slice(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand = inst.operands[0]
    spec = inst.attrs["slice"]
    assert isinstance(spec, tuple)
    if all(isinstance(s, SliceDim) and s.start == 0 and s.stride == 1 for s in spec) and \
            inst.shape.dims == operand.shape.dims:
        return em.value(operand, index)
    multi = em.multi_of(index)
    out = []
    for m, s in zip(multi, spec):
        assert isinstance(s, SliceDim)
        out.append(em.index_let(cir.add(cir.mul(m, s.stride), s.start)))
    return em.value(operand, Index(operand.shape.dims, None, tuple(out), None))


def _reverse(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand = inst.operands[0]
    reversed_dims = set(inst.ints("dimensions"))
    if not any(operand.shape.dims[d] > 1 for d in reversed_dims):
        return em.value(operand, index)
    multi = em.multi_of(index)
    out = tuple(em.index_let(cir.sub(cir.Int(size - 1), m))
                if d in reversed_dims and size > 1 else m
                for d, (m, size) in enumerate(zip(multi, operand.shape.dims)))
    return em.value(operand, Index(operand.shape.dims, None, out, None))


def _iota(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    dim = inst.attrs["iota_dimension"]
    assert isinstance(dim, int)
    position = em.multi_of(index)[dim]
    # A position of a dimension under 2^31 converts from 32 bits: the same value, and a vector
    # conversion AVX2 has (an int64 to float conversion keeps a lane loop scalar there).
    via = DType.S32 if inst.shape.dims[dim] < 2**31 else DType.S64
    expr = convert_expression(em.lang, via, inst.dtype, cir.Cast(via, position))
    return em.body.let(em.lang.register_type(inst.dtype), expr)


def _pad(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand, padding_value = inst.operands
    config = inst.attrs["padding"]
    assert isinstance(config, tuple)
    multi = em.multi_of(index)
    conditions: list[Expr] = []
    operand_multi: list[Expr] = []
    zero = cir.Int(0)
    for m, p, size in zip(multi, config, operand.shape.dims):
        assert isinstance(p, PaddingDim)
        shifted = em.index_let(cir.sub(m, p.low) if p.low else m)
        if p.interior:
            step = p.interior + 1
            conditions += [Binary(">=", shifted, zero),
                           Binary("==", cir.mod(shifted, step), zero),
                           Binary("<", cir.div(shifted, step), cir.Int(size))]
            operand_multi.append(em.index_let(cir.div(shifted, step)))
            continue
        if p.low > 0:
            conditions.append(Binary(">=", shifted, zero))
        if p.high > 0:
            conditions.append(Binary("<", shifted, cir.Int(size)))
        operand_multi.append(shifted)
    operand_index = Index(operand.shape.dims, None, tuple(operand_multi), None)
    if not conditions:
        return em.value(operand, operand_index)
    return em.branch(inst.dtype, conjunction(conditions),
                     lambda: em.array_value(operand, operand_index),
                     lambda: em.scalar(padding_value))


def _concatenate(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    axis = inst.ints("dimensions")[0]
    multi = em.multi_of(index)
    pieces: list[tuple[Instruction, int]] = []
    offset = 0
    for operand in inst.operands:
        if operand.shape.dims[axis]:
            pieces.append((operand, offset))
        offset += operand.shape.dims[axis]

    known = em.known_range(multi[axis])
    if known is not None:
        for operand, start in pieces:
            if start <= known[0] and known[1] <= start + operand.shape.dims[axis]:
                return _piece_value(em, operand, start, multi, axis)

    def chain(k: int) -> Expr:
        operand, start = pieces[k]
        if k == len(pieces) - 1:
            return _piece_value(em, operand, start, multi, axis)
        end = start + operand.shape.dims[axis]
        return em.branch(inst.dtype, Binary("<", multi[axis], cir.Int(end)),
                         lambda: _piece_value(em, operand, start, multi, axis),
                         lambda: chain(k + 1))

    return chain(0)


def _piece_value(em: ElementalEmitter, operand: Instruction, start: int,
                 multi: tuple[Expr, ...], axis: int) -> Expr:
    position = em.index_let(cir.sub(multi[axis], start) if start else multi[axis])
    operand_multi = tuple(position if d == axis else m for d, m in enumerate(multi))
    return em.array_value(operand, Index(operand.shape.dims, None, operand_multi, None))


def _dynamic_slice(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand = inst.operands[0]
    starts = em.clamped_starts(inst, inst.operands[1:], operand.shape.dims, inst.shape.dims)
    multi = em.multi_of(index) if inst.shape.dims else ()
    out = tuple(em.index_let(cir.add(m, s)) for m, s in zip(multi, starts))
    return em.value(operand, Index(operand.shape.dims, None, out, None))


def _dynamic_update_slice(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand, update = inst.operands[:2]
    starts = em.clamped_starts(inst, inst.operands[2:], operand.shape.dims, update.shape.dims)
    multi = em.multi_of(index)
    conditions: list[Expr] = []
    update_multi = []
    for m, s, size, full in zip(multi, starts, update.shape.dims, operand.shape.dims):
        if size == full:
            update_multi.append(m)
            continue
        conditions += [Binary(">=", m, s), Binary("<", m, cir.add(s, size))]
        update_multi.append(em.index_let(cir.sub(m, s) if not cir.is_zero(s) else m))
    update_index = Index(update.shape.dims, None, tuple(update_multi), None)
    if not conditions:
        return em.value(update, update_index)
    return em.branch(inst.dtype, conjunction(conditions),
                     lambda: em.array_value(update, update_index),
                     lambda: em.array_value(operand, index))


def _get_tuple_element(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    source = inst.operands[0]
    position = inst.attrs["index"]
    assert isinstance(position, int)
    if source.op is Op.TUPLE:
        return em.value(source.operands[position], index)
    if em.materialize is None and lane_linalg_routine(source) is not None:
        return linalg_leaf_elemental(em, source, position, index)
    binding = em.bindings.get(id(source))
    if isinstance(binding, tuple):
        return em.apply_binding(binding[position], index)
    whole = em.value(source, index)
    assert isinstance(whole, tuple)
    return whole[position]


def _tuple(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    return tuple(em.value(o, index) for o in inst.operands)


def _call(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    callee = inst.calls[0]
    depth = em._no_hoist

    def outer(operand: Instruction) -> Binding:
        def evaluate(operand_index: Index) -> Value:
            saved = em._no_hoist
            em._no_hoist = depth
            try:
                return em.value(operand, operand_index)
            finally:
                em._no_hoist = saved
        return evaluate

    for param, operand in zip(callee.parameters, inst.operands):
        em.bindings[id(param)] = outer(operand)
    em._no_hoist += 1
    try:
        with em.body.cache_scope():
            return em.value(callee.root, index)
    finally:
        em._no_hoist -= 1
        for param in callee.parameters:
            del em.bindings[id(param)]


def _dot(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    """The library computes a dot whole where a kernel can materialise it; lane code
    (whole-loop kernels, which cannot) computes a small one element by element."""
    if em.materialize is None:
        return dot_elemental(em, inst, index)
    return materialized(em, inst, index)


def _linalg(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    """The library computes a factorisation or solve whole where a kernel can materialise
    it; lane code computes a small one per batch position."""
    if em.materialize is None and lane_linalg_routine(inst) is not None:
        return linalg_elemental(em, inst, index)
    return materialized(em, inst, index)


STRUCTURAL: dict[Op, Structural] = {
    Op.BITCAST: _reshape,
    Op.BROADCAST: _broadcast,
    Op.CALL: _call,
    Op.CONCATENATE: _concatenate,
    Op.CONSTANT: _constant,
    Op.COPY: _same_index,
    Op.CHOLESKY: _linalg,
    Op.CUSTOM_CALL: _linalg,
    Op.DOT: _dot,
    Op.DYNAMIC_SLICE: _dynamic_slice,
    Op.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice,
    Op.GATHER: gather,
    Op.GET_TUPLE_ELEMENT: _get_tuple_element,
    Op.IOTA: _iota,
    Op.MAP: map_,
    Op.OPT_BARRIER: _same_index,
    Op.PAD: _pad,
    Op.PARAMETER: _parameter,
    Op.REDUCE: reduce,
    Op.REDUCE_WINDOW: reduce_window,
    Op.RESHAPE: _reshape,
    Op.REVERSE: _reverse,
    Op.SCATTER: scatter,
    Op.SLICE: _slice,
    Op.SORT: materialized,
    Op.TOPK: materialized,
    Op.TRANSPOSE: _transpose,
    Op.TRIANGULAR_SOLVE: _linalg,
    Op.TUPLE: _tuple,
}

# Ops a kernel never computes element by element, with the reason (the completeness test reads
# this): control flow runs in the driver, and these have no element-wise meaning.
NOT_ELEMENTAL: dict[Op, str] = {
    Op.AFTER_ALL: "a token, no data",
    Op.CONDITIONAL: "control flow: run by the driver, never fused",
    Op.FUSION: "a kernel of its own",
    Op.RNG_BIT_GENERATOR: "no reference semantics (the interpreter refuses it too)",
    Op.CONVOLUTION: "no C code yet: the reference interpreter evaluates it",
    Op.SELECT_AND_SCATTER: "no C code yet: the reference interpreter evaluates it",
    Op.WHILE: "control flow: run by the driver, never fused",
}

__all__ = ["NOT_ELEMENTAL", "STRUCTURAL", "expr_of"]
