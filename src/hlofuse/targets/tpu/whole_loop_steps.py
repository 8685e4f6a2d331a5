"""Per-step reductions across the lanes in the TPU's whole-loop kernel (whole_loop.py): a
uniform element written a slice per step from reductions over all lanes
(analysis/step_reductions.py: a scan's [T] output of the reward summed over the lanes, or a
[T, k] one of a vector statistic such as the mean position).

Each block reduces its own lanes (lanes past N count as the identity) at every step into a
table of its own in SMEM, one entry per component of each reduction (a reduction that keeps
a lane's own dimensions gives several) per position of the element the step's slice starts
at, with a flag per such position written. After the kernel the blocks' tables are combined
in block order, the ops between the reductions and the written slice applied to every
start position at once (a leading dimension of start positions), each slice placed at its
start, and positions no step wrote keep the element's initial value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from hlofuse.analysis.step_reductions import SliceWrite, StepReduction
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op
from hlofuse.targets.tpu.evaluate import LaxEvaluator
from hlofuse.targets.tpu.lane_values import LaneValues, static_positions, strides
from hlofuse.targets.tpu.lax_ops import (
    BINARY,
    BLOCK_ZERO,
    REDUCTIONS,
    Value,
    constant,
    elementwise,
    exact_int_sum,
)


def reduce_tables(steps: Sequence[StepReduction]) -> list[tuple[StepReduction, int]]:
    """(step reduction, its reduce's index) of every table: one per lane reduction."""
    return [(s, k) for s in steps for k in range(len(s.reduces))]


def table_words(steps: Sequence[StepReduction]) -> int:
    """SMEM words one block's tables and flags take."""
    return sum(_positions(s) * s.reduces[k].components for s, k in reduce_tables(steps)) + \
        sum(_positions(s) for s in steps)


def table_outputs(steps: Sequence[StepReduction], grid: int
                  ) -> tuple[list[jax.ShapeDtypeStruct], list[pl.BlockSpec]]:
    """Each table's (grid, 1, positions x components) partials, then each element's (grid, 1,
    positions) written flags, in SMEM, a row per block: a block's last two dimensions must
    equal the array's unless they are multiples of 8 and 128, so the grid dimension is a
    third, squeezed one."""
    shapes, specs = [], []
    for s, k in reduce_tables(steps):
        dtype = _word(s.reduces[k].reduce.dtype.numpy)
        shapes.append(jax.ShapeDtypeStruct(
            (grid, 1, _positions(s) * s.reduces[k].components), dtype))
    for s in steps:
        shapes.append(jax.ShapeDtypeStruct((grid, 1, _positions(s)), np.int32))
    for shape in shapes:
        specs.append(pl.BlockSpec((None, 1, shape.shape[2]), lambda i: (i, BLOCK_ZERO, BLOCK_ZERO),
                                  memory_space=pltpu.SMEM))
    return shapes, specs


def _positions(step: StepReduction) -> int:
    return step.update.operands[0].shape.num_elements


def _word(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.int32) if dtype == np.bool_ else np.dtype(dtype)


def start_tables(steps: Sequence[StepReduction], refs: Sequence[Any]) -> None:
    """Every entry the identity, every position unwritten, before the loop."""
    tables = reduce_tables(steps)
    for (s, k), ref in zip(tables, refs):
        identity = _word_value(constant(s.reduces[k].identity))
        for p in range(_positions(s) * s.reduces[k].components):
            ref[0, p] = identity
    for ref in refs[len(tables):]:
        for p in range(ref.shape[1]):
            ref[0, p] = np.int32(0)


def _word_value(x: Value) -> Value:
    return lax.convert_element_type(x, np.int32) if x.dtype == jnp.bool_ else x


def write_step(values: LaneValues, steps: Sequence[StepReduction], refs: Sequence[Any],
               lanes: Value, size: int, lane_dim_of: Any) -> None:
    """This step's block reduction of each table's per-lane value, each component at the
    position the body's slice starts at, and the position marked written."""
    tables = reduce_tables(steps)
    valid = lanes < np.int32(size)
    for (s, k), ref in zip(tables, refs):
        reduce = s.reduces[k]
        x = reduce.operand
        lane_dim = lane_dim_of(x)
        identity = _word_value(constant(reduce.identity))
        op = BINARY[reduce.op]
        reduced = set(reduce.reduce.ints("dimensions"))
        kept = [j for j in range(x.shape.rank) if j not in reduced]
        summed = [j for j in range(x.shape.rank) if j in reduced and j != lane_dim]
        slot = _written_position(values, s) * np.int32(reduce.components)
        # One component per position of the kept dimensions, in the reduce's output order.
        for c, kept_at in enumerate(static_positions([x.shape.dims[j] for j in kept])):
            total: Value = None
            for summed_at in static_positions([x.shape.dims[j] for j in summed]):
                index = dict(zip(kept, kept_at)) | dict(zip(summed, summed_at))
                others = [index[j] for j in range(x.shape.rank) if j != lane_dim]
                tile = _word_value(values.value(
                    x, values.lane_position(x.shape.dims, lane_dim, others)))
                tile = jnp.broadcast_to(tile, lanes.shape)
                tile = lax.select(valid, tile, jnp.full(lanes.shape, identity, tile.dtype))
                total = tile if total is None else op(total, tile)
            assert total is not None
            # Pallas lowers an int32 sum through a 64-bit one under x64 (lax_ops).
            block = (exact_int_sum(total, (0, 1)) if reduce.op is Op.ADD
                     and total.dtype == jnp.int32 else REDUCTIONS[reduce.op](total, (0, 1)))
            at = slot + np.int32(c)
            ref[BLOCK_ZERO, at] = op(ref[BLOCK_ZERO, at], block)
    for s, ref in zip(steps, refs[len(tables):]):
        ref[BLOCK_ZERO, _written_position(values, s)] = np.int32(1)


def clamped_starts(values: LaneValues, write: SliceWrite) -> list[Value]:
    """Where the step writes its slice: each start index clamped as HLO clamps it."""
    dims, sizes = write.update.shape.dims, write.value.shape.dims
    return [lax.clamp(np.int32(0), lax.convert_element_type(values.scalar(start), np.int32),
                      np.int32(dim - size))
            for start, dim, size in zip(write.starts, dims, sizes)]


def _written_position(values: LaneValues, step: StepReduction) -> Value:
    flat: Value = np.int32(0)
    for start, stride in zip(clamped_starts(values, step), strides(step.update.shape.dims)):
        flat = flat + start * np.int32(stride)
    return flat


def finish(steps: Sequence[StepReduction], outputs: Sequence[Value],
           inits: dict[int, Value]) -> dict[int, Value]:
    """Each element's final value: the blocks' partials combined per start position and
    component, the ops to the written slice applied, each written slice placed at its start,
    unwritten positions the initial value."""
    tables = reduce_tables(steps)
    combined: dict[int, Value] = {}
    outputs = [jnp.reshape(x, (x.shape[0], -1)) for x in outputs]  # (grid, entries)
    for (s, k), partials in zip(tables, outputs):
        reduce = s.reduces[k]
        total = REDUCTIONS[reduce.op](partials, (0,))  # (positions x components,)
        combined[id(reduce.reduce)] = jnp.reshape(total, (_positions(s), *reduce.reduce.shape.dims))
    result = {}
    for s, written in zip(steps, outputs[len(tables):]):
        value = _evaluate_path(s.value, combined, _positions(s))  # (starts, *slice dims)
        init = jnp.asarray(inits[s.element]).reshape(-1)
        element_dims = s.update.operands[0].shape.dims
        # Where each start's slice goes in the flattened element: start + the slice's offsets.
        offsets = np.zeros((), np.int32)
        for size, stride in zip(s.value.shape.dims, strides(element_dims)):
            offsets = np.add.outer(offsets, np.arange(size, dtype=np.int32) * stride)
        starts = np.arange(_positions(s), dtype=np.int32)
        marked = jnp.max(written, axis=0) > 0
        places = jnp.where(marked[:, None], starts[:, None] + np.reshape(offsets, (1, -1)),
                           init.size)  # unwritten starts past the end: dropped
        slices = jnp.reshape(value, (_positions(s), -1)).astype(init.dtype)
        result[s.element] = init.at[places.reshape(-1)].set(
            slices.reshape(-1), mode="drop").reshape(element_dims)
    return result


def _evaluate_path(inst: Instruction, combined: dict[int, Value], starts: int) -> Value:
    """The written slice for every start position at once, (starts, *its dims): the
    reductions' combined values (starts, *reduce dims) through the ops between them and the
    slice; other operands are loop-invariant, evaluated on their own and broadcast over the
    start positions."""
    memo: dict[int, Value] = {}
    evaluator = LaxEvaluator()

    def at(x: Instruction) -> Value:
        if id(x) in combined:
            return combined[id(x)]
        if id(x) in memo:
            return memo[id(x)]
        operands = [at(o) for o in x.operands]
        if any(id(o) in combined or _on_path(o, combined) for o in x.operands):
            batched = (starts, *x.shape.dims)
            if x.op in (Op.RESHAPE, Op.BITCAST, Op.COPY):
                value = jnp.reshape(operands[0], batched)
            elif x.op is Op.BROADCAST:
                mapped = (0, *(d + 1 for d in x.ints("dimensions")))
                value = lax.broadcast_in_dim(operands[0], batched, mapped)
            else:
                value = elementwise(x, [
                    v if id(o) in combined or _on_path(o, combined)
                    else jnp.broadcast_to(jnp.reshape(v, o.shape.dims), batched)
                    for o, v in zip(x.operands, operands)])
        else:
            value = evaluator.instruction(x, operands)
        memo[id(x)] = value
        return value

    return at(inst)
def _on_path(inst: Instruction, combined: dict[int, Value]) -> bool:
    stack, seen = [inst], set()
    while stack:
        x = stack.pop()
        if id(x) in combined:
            return True
        if id(x) in seen:
            continue
        seen.add(id(x))
        stack.extend(x.operands)
    return False
