"""The ops of a whole-loop kernel's step at a position (lane_values.py): data movement,
written-out reductions and dots; indexing ops (dynamic slices, gathers, scatters) are
lane_indexing.py. Each maps an output position to its operands' positions."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import jax.numpy as jnp
import numpy as np
from jax import lax

from hlofuse.analysis.reducers import reducer_op
from hlofuse.ir.attrs import PaddingDim, SliceDim, Window
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op
from hlofuse.reference.rnglib import THREEFRY_TARGET
from hlofuse.targets.tpu.lane_indexing import (
    dynamic_slice,
    dynamic_update_slice,
    gather,
    scatter,
)
from hlofuse.targets.tpu.lane_linalg import is_tile_linalg, linalg_leaf
from hlofuse.targets.tpu.lane_nested import nested_loop
from hlofuse.targets.tpu.lane_products import mxu_dot
from hlofuse.targets.tpu.lane_values import (
    MAX_REDUCED_POSITIONS,
    OP_RULE,
    SIZE_RULE,
    Index,
    LaneValues,
    Position,
    Unlowerable,
    compare,
    is_static,
    same_shape,
    select_where,
    strides,
)
from hlofuse.targets.tpu.lax_ops import BINARY, ELEMENTWISE, Value, elementwise

# --- data movement ----------------------------------------------------------------------

def _constant(values: LaneValues, inst: Instruction, position: Position) -> Value:
    literal = np.asarray(inst.attrs["literal"], np.dtype(inst.dtype.numpy))
    if literal.ndim == 0:
        return jnp.asarray(literal)
    return values.select_over(literal.shape, position,
                               lambda p: jnp.asarray(literal[p]))


def _iota(values: LaneValues, inst: Instruction, position: Position) -> Value:
    dim = inst.attrs["iota_dimension"]
    assert isinstance(dim, int)
    wanted = np.dtype(inst.dtype.numpy)
    index = position[dim]
    if is_static(index):
        return jnp.asarray(np.asarray(index, wanted))
    return lax.convert_element_type(index, wanted)


def _broadcast(values: LaneValues, inst: Instruction, position: Position) -> Value:
    dims = inst.ints("dimensions")
    return values.value(inst.operands[0], tuple(position[d] for d in dims))


def _reshape(values: LaneValues, inst: Instruction, position: Position) -> Value:
    """The operand at the same row-major element. Dimensions are matched in groups of equal
    size products, each group delinearised on its own, so a dimension kept whole (the lanes)
    keeps its index as it is."""
    operand = inst.operands[0]
    if operand.dtype != inst.dtype:
        raise Unlowerable(OP_RULE, f"%{inst.name} ({inst.op.text}) changes the element type")
    out_dims = [d for d in inst.shape.dims]
    in_dims = [d for d in operand.shape.dims]
    operand_position: list[Index] = []
    for out_group, in_group in _reshape_groups(out_dims, in_dims):
        indices = [position[k] for k in out_group if out_dims[k] != 1]
        sizes = [out_dims[k] for k in out_group if out_dims[k] != 1]
        targets = [in_dims[k] for k in in_group]
        kept = [d for d in targets if d != 1]
        if len(indices) == 1 and len(kept) == 1:
            operand_position.extend(indices[0] if d != 1 else 0 for d in targets)
            continue
        linear: Index = 0
        for index, stride in zip(indices, strides(sizes)):
            linear = values.add(linear, values.scaled(index, stride))
        for j, (dim, stride) in enumerate(zip(targets, strides(targets))):
            if dim == 1:
                operand_position.append(0)
            elif is_static(linear):
                operand_position.append((int(linear) // stride) % dim)
            else:
                index = values.div(linear, stride)
                operand_position.append(index if j == 0 else values.rem(index, dim))
    return values.value(operand, tuple(operand_position))


def _reshape_groups(out_dims: Sequence[int], in_dims: Sequence[int]
                    ) -> list[tuple[list[int], list[int]]]:
    """Consecutive dimensions of the two shapes in groups of equal products (unit
    dimensions join the group before them, or the first)."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(out_dims) or j < len(in_dims):
        out_group: list[int] = []
        in_group: list[int] = []
        out_size = in_size = 1
        while True:
            if i < len(out_dims) and (out_size < in_size or not out_group or
                                      (out_size == in_size and out_dims[i] == 1)):
                out_size *= out_dims[i]
                out_group.append(i)
                i += 1
            elif j < len(in_dims) and (in_size < out_size or not in_group or
                                       (in_size == out_size and in_dims[j] == 1)):
                in_size *= in_dims[j]
                in_group.append(j)
                j += 1
            else:
                break
        groups.append((out_group, in_group))
    return groups


def _copy(values: LaneValues, inst: Instruction, position: Position) -> Value:
    return values.value(inst.operands[0], position)


def _tuple_element(values: LaneValues, inst: Instruction, position: Position) -> Value:
    """One result of a multi-output instruction (a variadic reduce) at the position."""
    index = inst.attrs["index"]
    assert isinstance(index, int)
    operand = inst.operands[0]
    if is_tile_linalg(operand):  # potrf's factor and info: each leaf its own shape
        return linalg_leaf(values, operand, index, position, inst.shape.dims)
    return values.value(operand, position)[index]


def _transpose(values: LaneValues, inst: Instruction, position: Position) -> Value:
    permutation = inst.ints("dimensions")
    operand_position: list[Index] = [0] * len(permutation)
    for out_dim, in_dim in enumerate(permutation):
        operand_position[in_dim] = position[out_dim]
    return values.value(inst.operands[0], tuple(operand_position))


def _slice(values: LaneValues, inst: Instruction, position: Position) -> Value:
    attr = inst.attrs["slice"]
    assert isinstance(attr, tuple)
    spec = [s for s in attr if isinstance(s, SliceDim)]
    return values.value(inst.operands[0], tuple(
        values.add(values.scaled(i, s.stride), s.start) for i, s in zip(position, spec)))


def _reverse(values: LaneValues, inst: Instruction, position: Position) -> Value:
    reversed_dims = set(inst.ints("dimensions"))
    dims = inst.shape.dims
    return values.value(inst.operands[0], tuple(
        (dims[k] - 1 - i if is_static(i) else np.int32(dims[k] - 1) - i)
        if k in reversed_dims else i for k, i in enumerate(position)))


def _concatenate(values: LaneValues, inst: Instruction, position: Position) -> Value:
    dim = inst.ints("dimensions")[0]
    offsets = list(itertools.accumulate((o.shape.dims[dim] for o in inst.operands),
                                        initial=0))
    index = position[dim]

    def part(k: int, at: Index) -> Value:
        return values.value(inst.operands[k],
                            tuple(at if j == dim else i for j, i in enumerate(position)))

    if is_static(index):
        k = max(j for j in range(len(inst.operands)) if offsets[j] <= int(index))
        return part(k, int(index) - offsets[k])
    # A per-lane index: each operand at the index shifted into it, picked by range.
    result: Value = None
    for k, operand in enumerate(inst.operands):
        size = operand.shape.dims[dim]
        local = lax.clamp(np.int32(0), index - np.int32(offsets[k]), np.int32(size - 1))
        candidate = part(k, local)
        if result is None:
            result = candidate
            continue
        result = select_where(compare(lax.ge, index, offsets[k]), candidate, result)
    return result


def _pad(values: LaneValues, inst: Instruction, position: Position) -> Value:
    attr = inst.attrs["padding"]
    assert isinstance(attr, tuple)
    config = [p for p in attr if isinstance(p, PaddingDim)]
    operand_position = []
    for i, p, size in zip(position, config, inst.operands[0].shape.dims):
        if not is_static(i):
            raise Unlowerable(OP_RULE, f"%{inst.name} (pad) read at a per-lane position")
        shifted = int(i) - p.low
        if shifted < 0 or shifted % (p.interior + 1) or shifted // (p.interior + 1) >= size:
            return values.scalar(inst.operands[1])
        operand_position.append(shifted // (p.interior + 1))
    return values.value(inst.operands[0], tuple(operand_position))


# --- written-out reductions -------------------------------------------------------------

def _reduce(values: LaneValues, inst: Instruction, position: Position) -> Value:
    dims = inst.ints("dimensions")
    half = len(inst.operands) // 2
    inputs, inits = inst.operands[:half], inst.operands[half:]
    operand_dims = inputs[0].shape.dims
    reduced = [operand_dims[d] for d in dims]
    count = int(np.prod(reduced))
    if count > MAX_REDUCED_POSITIONS:
        raise Unlowerable(SIZE_RULE, f"%{inst.name} reduces {count} positions per lane")
    kept = [d for d in range(len(operand_dims)) if d not in dims]
    reducer = inst.calls[0]
    op = reducer_op(reducer)
    result: list[Value] = [values.scalar(i) for i in inits]
    for choice in itertools.product(*(range(n) for n in reduced)):
        at: list[Index] = [0] * len(operand_dims)
        for d, i in zip(kept, position):
            at[d] = i
        for d, c in zip(dims, choice):
            at[d] = c
        items = [values.value(x, tuple(at)) for x in inputs]
        if half == 1 and op in BINARY:
            result = [BINARY[op](*same_shape(result[0], items[0]))]
        else:
            combined = run_elementwise(reducer, [*result, *items])
            result = list(combined) if half > 1 else [combined]
    return tuple(result) if half > 1 else result[0]


def _reduce_window(values: LaneValues, inst: Instruction, position: Position) -> Value:
    """A reduce-window at an output position, its window written out: each window position
    read from the operand, or the initial value where it falls in padding or between
    dilated elements. A per-lane index (the lanes) passes through a dimension the window
    leaves alone."""
    window = inst.attrs["window"]
    assert isinstance(window, Window)
    half = len(inst.operands) // 2
    inputs, inits = inst.operands[:half], inst.operands[half:]
    dims = inputs[0].shape.dims
    count = int(np.prod(window.size))
    if count > MAX_REDUCED_POSITIONS:
        raise Unlowerable(SIZE_RULE, f"%{inst.name} reduces {count} positions per window")
    result: list[Value] = [values.scalar(i) for i in inits]
    for offset in itertools.product(*(range(n) for n in window.size)):
        at: list[Index] = []
        padding = False
        for a, (index, o) in enumerate(zip(position, offset)):
            plain = (window.size[a], window.stride[a], window.pad_low[a], window.lhs_dilate[a],
                     window.rhs_dilate[a]) == (1, 1, 0, 1, 1)
            if plain:
                at.append(index)
                continue
            if not is_static(index):
                raise Unlowerable(OP_RULE, f"%{inst.name} (reduce-window) windows a "
                                  "dimension read at a per-lane position")
            q = int(index) * window.stride[a] + o * window.rhs_dilate[a] - window.pad_low[a]
            if q % window.lhs_dilate[a] or not 0 <= q // window.lhs_dilate[a] < dims[a]:
                padding = True
                break
            at.append(q // window.lhs_dilate[a])
        if padding:
            items = [values.scalar(i) for i in inits]
        else:
            items = [values.value(x, tuple(at)) for x in inputs]
        combined = run_elementwise(inst.calls[0], [*result, *items])
        result = list(combined) if half > 1 else [combined]
    return tuple(result) if half > 1 else result[0]


def run_elementwise(comp: Computation, arguments: Sequence[Value]) -> Value:
    """A small computation (a reducer) evaluated on tiles and scalars."""
    env: dict[int, Value] = {}
    for inst in comp.instructions:
        if inst.op is Op.PARAMETER:
            env[id(inst)] = arguments[inst.parameter_number]
            continue
        ops = [env[id(o)] for o in inst.operands]
        if inst.op in ELEMENTWISE:
            env[id(inst)] = elementwise(inst, ops)
        elif inst.op is Op.CONSTANT:
            env[id(inst)] = jnp.asarray(np.asarray(inst.attrs["literal"],
                                                   np.dtype(inst.dtype.numpy)))
        elif inst.op is Op.TUPLE:
            env[id(inst)] = tuple(ops)
        elif inst.op is Op.GET_TUPLE_ELEMENT:
            env[id(inst)] = ops[0][inst.attrs["index"]]
        else:
            raise Unlowerable(OP_RULE, f"%{inst.name} ({inst.op.text}) in a reducer")
    return env[id(comp.root)]


def _dot(values: LaneValues, inst: Instruction, position: Position) -> Value:
    """A dot written out per position: the sum over the contracted positions of products;
    a lane-uniform product large enough on the MXU (lane_products.py)."""
    weights = values.weights.get(id(inst))
    if weights is not None:
        found = mxu_dot(values, inst, position, weights)
        if found is not None:
            return found
    lhs, rhs = inst.operands
    lhs_c, rhs_c = inst.ints("lhs_contracting_dims"), inst.ints("rhs_contracting_dims")
    lhs_b, rhs_b = inst.ints("lhs_batch_dims"), inst.ints("rhs_batch_dims")
    lhs_free = [d for d in range(lhs.shape.rank) if d not in lhs_c and d not in lhs_b]
    rhs_free = [d for d in range(rhs.shape.rank) if d not in rhs_c and d not in rhs_b]
    nb = len(lhs_b)
    contracted = [lhs.shape.dims[d] for d in lhs_c]
    if int(np.prod(contracted)) > MAX_REDUCED_POSITIONS:
        raise Unlowerable(SIZE_RULE, f"%{inst.name} contracts too many positions per lane")
    wanted = np.dtype(inst.dtype.numpy)
    total: Value = None
    for choice in itertools.product(*(range(n) for n in contracted)):
        at_lhs: list[Index] = [0] * lhs.shape.rank
        at_rhs: list[Index] = [0] * rhs.shape.rank
        for j in range(nb):
            at_lhs[lhs_b[j]] = position[j]
            at_rhs[rhs_b[j]] = position[j]
        for j, d in enumerate(lhs_free):
            at_lhs[d] = position[nb + j]
        for j, d in enumerate(rhs_free):
            at_rhs[d] = position[nb + len(lhs_free) + j]
        for dl, dr, c in zip(lhs_c, rhs_c, choice):
            at_lhs[dl] = at_rhs[dr] = c
        a = lax.convert_element_type(values.value(lhs, tuple(at_lhs)), wanted)
        b = lax.convert_element_type(values.value(rhs, tuple(at_rhs)), wanted)
        term = lax.mul(*same_shape(a, b))
        total = term if total is None else lax.add(*same_shape(total, term))
    if total is None:
        return jnp.zeros((), wanted)
    return total


MOVES: dict[Op, Callable[[LaneValues, Instruction, Position], Value]] = {
    Op.GET_TUPLE_ELEMENT: _tuple_element, Op.CONSTANT: _constant, Op.IOTA: _iota,
    Op.BROADCAST: _broadcast, Op.RESHAPE: _reshape,
    Op.BITCAST: _reshape, Op.COPY: _copy, Op.OPT_BARRIER: _copy, Op.TRANSPOSE: _transpose,
    Op.SLICE: _slice, Op.REVERSE: _reverse, Op.CONCATENATE: _concatenate, Op.PAD: _pad,
    Op.DYNAMIC_SLICE: dynamic_slice, Op.DYNAMIC_UPDATE_SLICE: dynamic_update_slice,
    Op.GATHER: gather, Op.SCATTER: scatter, Op.REDUCE: _reduce, Op.DOT: _dot,
    Op.REDUCE_WINDOW: _reduce_window, Op.WHILE: nested_loop,
}

# Ops the whole-loop kernel computes on tiles (the static check before the kernel is built).
LOWERED_OPS = frozenset(ELEMENTWISE) | frozenset(MOVES) | {
    Op.PARAMETER, Op.GET_TUPLE_ELEMENT, Op.TUPLE, Op.CUSTOM_CALL}


def first_unlowered(instructions: Sequence[Instruction]) -> Instruction | None:
    """The first instruction whose op has no per-lane form here (hlofuse's Threefry call is
    the one custom call that has)."""
    for inst in instructions:
        if is_tile_linalg(inst):
            continue
        if inst.op not in LOWERED_OPS:
            return inst
        if inst.op is Op.WHILE:  # a nested loop: what it runs
            inner = first_unlowered([i for c in inst.calls for i in c.instructions])
            if inner is not None:
                return inner
        if inst.op is Op.CUSTOM_CALL and \
                inst.attrs.get("custom_call_target") != THREEFRY_TARGET:
            return inst
    return None

