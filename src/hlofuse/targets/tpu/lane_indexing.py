"""Indexing ops of a whole-loop kernel's step at a position (lane_values.py): dynamic
slices and updates at uniform starts, gathers and scatters with per-lane indices, as index
arithmetic and select chains over the positions an index may take."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
from jax import lax

from hlofuse.ir.hlo import Instruction
from hlofuse.targets.tpu.lane_values import (
    MAX_SELECT_POSITIONS,
    OP_RULE,
    SIZE_RULE,
    Index,
    LaneValues,
    Position,
    Unlowerable,
    as_int32,
    compare,
    difference,
    is_static,
    same_shape,
    select_where,
)
from hlofuse.targets.tpu.lax_ops import Value


def dynamic_slice(values: LaneValues, inst: Instruction, position: Position) -> Value:
    operand = inst.operands[0]
    sizes = inst.ints("dynamic_slice_sizes")
    starts = [values.clamped(values.scalar(s) if s.shape.rank == 0 else _unlowerable(inst), d - n)
              for s, d, n in zip(inst.operands[1:], operand.shape.dims, sizes)]
    return values.value(operand, tuple(values.add(i, s) for i, s in zip(position, starts)))


def dynamic_update_slice(values: LaneValues, inst: Instruction, position: Position) -> Value:
    """The update where the position falls in its window, else the operand."""
    operand, update = inst.operands[0], inst.operands[1]
    starts = [values.clamped(values.scalar(s) if s.shape.rank == 0 else _unlowerable(inst), d - n)
              for s, d, n in zip(inst.operands[2:], operand.shape.dims, update.shape.dims)]
    inside: Value = True
    shifted: list[Index] = []
    for i, s, n in zip(position, starts, update.shape.dims):
        local = difference(i, s)
        if is_static(local):
            if not 0 <= int(local) < n:
                return values.value(operand, position)
            shifted.append(int(local))
            continue
        clamped = lax.clamp(np.int32(0), as_int32(local), np.int32(n - 1))
        shifted.append(clamped)
        hit = lax.bitwise_and(compare(lax.ge, local, 0), compare(lax.lt, local, n))
        inside = hit if inside is True else lax.bitwise_and(*same_shape(inside, hit))
    new = values.value(update, tuple(shifted))
    if inside is True:
        return new
    old = values.value(operand, position)
    return select_where(inside, new, old)


def _unlowerable(inst: Instruction) -> Value:
    raise Unlowerable(OP_RULE, f"%{inst.name} ({inst.op.text}) has a non-scalar start")


def _index_vector(values: LaneValues, indices: Instruction, ivd: int,
                  batch: Sequence[Index], count: int) -> list[Value]:
    """The start indices at a batch position of the index array (dims but `ivd`)."""
    out = []
    for k in range(count):
        at = list(batch)
        if ivd < indices.shape.rank:
            at.insert(ivd, k)
        out.append(values.value(indices, tuple(at)))
    return out


def gather(values: LaneValues, inst: Instruction, position: Position) -> Value:
    """HLO's gather at an output position: the start indices read at the batch position
    (batching dimensions index themselves), the operand at start + offset, starts clamped
    so the slice stays inside, as XLA does."""
    operand, indices = inst.operands
    offset_dims = inst.ints("offset_dims")
    start_map = inst.ints("start_index_map")
    operand_batching = inst.ints("operand_batching_dims")
    indices_batching = inst.ints("start_indices_batching_dims")
    dropped = set(inst.ints("collapsed_slice_dims")) | set(operand_batching)
    sizes = inst.ints("slice_sizes")
    ivd = inst.attrs["index_vector_dim"]
    assert isinstance(ivd, int)
    batch = [i for k, i in enumerate(position) if k not in offset_dims]
    batch_dims = [d for d in range(indices.shape.rank) if d != ivd]
    vector = _index_vector(values, indices, ivd, batch, len(start_map))
    operand_dims = operand.shape.dims
    starts: list[Index] = [0] * len(operand_dims)
    for raw, dim in zip(vector, start_map):
        starts[dim] = values.clamped(raw, operand_dims[dim] - sizes[dim])
    for operand_dim, indices_dim in zip(operand_batching, indices_batching):
        starts[operand_dim] = batch[batch_dims.index(indices_dim)]
    offsets = iter(position[k] for k in offset_dims)
    return values.value(operand, tuple(
        starts[d] if d in dropped else values.add(starts[d], next(offsets))
        for d in range(len(operand_dims))))


def scatter(values: LaneValues, inst: Instruction, position: Position) -> Value:
    """HLO's scatter at an operand position, as selects: every update that may land there
    (its scatter positions enumerated, batching ones set by the position) combined in order
    where its window covers the position; an update whose window leaves the operand is
    skipped, as XLA does."""
    if len(inst.operands) != 3:
        raise Unlowerable(OP_RULE, f"%{inst.name} (scatter) of several arrays")
    operand, indices, updates = inst.operands
    window_dims = inst.ints("update_window_dims")
    inserted = set(inst.ints("inserted_window_dims"))
    operand_batching = inst.ints("input_batching_dims")
    indices_batching = inst.ints("scatter_indices_batching_dims")
    start_map = inst.ints("scatter_dims_to_operand_dims")
    ivd = inst.attrs["index_vector_dim"]
    assert isinstance(ivd, int)
    operand_dims = operand.shape.dims
    rank = len(operand_dims)
    operand_window = [d for d in range(rank) if d not in inserted and d not in operand_batching]
    window_of = dict(zip(operand_window, window_dims))
    window_size = [1] * rank
    for d, u in window_of.items():
        window_size[d] = updates.shape.dims[u]
    scatter_dims = [d for d in range(updates.shape.rank) if d not in window_dims]
    batch_dims = [d for d in range(indices.shape.rank) if d != ivd]
    tied = {batch_dims.index(i): o for o, i in zip(operand_batching, indices_batching)}
    free = [j for j in range(len(scatter_dims)) if j not in tied]
    count = int(np.prod([updates.shape.dims[scatter_dims[j]] for j in free]))
    if count > MAX_SELECT_POSITIONS:
        raise Unlowerable(SIZE_RULE, f"%{inst.name} scatters {count} updates per lane")
    result = values.value(operand, position)
    for choice in itertools.product(*(range(updates.shape.dims[scatter_dims[j]])
                                      for j in free)):
        batch: list[Index] = [0] * len(scatter_dims)
        for j, c in zip(free, choice):
            batch[j] = c
        for j, o in tied.items():
            batch[j] = position[o]
        starts: list[Index] = [0] * rank
        for raw, dim in zip(_index_vector(values, indices, ivd, batch, len(start_map)),
                            start_map):
            starts[dim] = as_int32(raw)
        mask: Value = True
        update_at: list[Index] = [0] * updates.shape.rank
        for j, d in enumerate(scatter_dims):
            update_at[d] = batch[j]
        for d in range(rank):
            if d in operand_batching:
                continue
            start = starts[d]
            if not is_static(start):  # the whole window inside the operand, or skipped
                mask = _and(mask, lax.bitwise_and(
                    compare(lax.ge, start, 0),
                    compare(lax.le, start, operand_dims[d] - window_size[d])))
            unshifted = is_static(start) and start == 0
            offset = position[d] if unshifted else difference(position[d], start)
            if d in window_of:
                if unshifted:
                    update_at[window_of[d]] = offset
                    continue
                update_at[window_of[d]] = _clamp_index(offset, window_size[d])
                mask = _and(mask, 0 <= int(offset) < window_size[d] if is_static(offset)
                            else lax.bitwise_and(
                    compare(lax.ge, offset, 0), compare(lax.lt, offset, window_size[d])))
            else:
                mask = _and(mask, offset == 0 if is_static(offset)
                            else compare(lax.eq, offset, 0))
        if mask is False:
            continue
        update = values.value(updates, tuple(update_at))
        from hlofuse.targets.tpu.lane_ops import run_elementwise

        combined = run_elementwise(inst.calls[0], [result, update])
        result = combined if mask is True else select_where(mask, combined, result)
    return result


def _and(mask: Value, other: Value) -> Value:
    if mask is True or other is True:
        return other if mask is True else mask
    if mask is False or other is False:
        return False
    return lax.bitwise_and(*same_shape(mask, other))


def _clamp_index(index: Index, size: int) -> Index:
    """An index kept in range where a mask already discards the out-of-range ones."""
    if is_static(index):
        return min(max(int(index), 0), size - 1)
    return lax.clamp(np.int32(0), as_int32(index), np.int32(size - 1))


