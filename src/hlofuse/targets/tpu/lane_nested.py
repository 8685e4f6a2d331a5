"""Nested loops inside the TPU's whole-loop kernel: a `lax.while_loop` in the kernel.

The analysis plans a nested while for the same lanes as the loop around it (`LoopPlan.nested`:
the elements the lanes hold, the uniform ones, its trip count uniform, or per lane in
jax.vmap's masked form), as the C target's lane code runs it (codegen/whole_loop_nested.py).
Here the block runs it where the step first reads its result: the held elements' tiles (one
(rows, 128) tile per position of a lane's part) and the uniform elements' scalars are the
carry of a `lax.while_loop`, each iteration the nested body evaluated position by position on
tiles (lane_values.py) from the carry. A masked loop's condition is its per-lane predicate
reduced over the block's valid lanes, so a block stops when its own lanes are done. The code
is traced once, whatever the trip count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from hlofuse.analysis.parallel_loop import LoopPlan
from hlofuse.ir.hlo import Instruction
from hlofuse.targets.tpu.lane_values import (
    OP_RULE,
    LaneValues,
    Position,
    Unlowerable,
    flat_position,
    is_static,
    static_positions,
)
from hlofuse.targets.tpu.lax_ops import Value


class NestedResult:
    """A nested loop's result at one position: `[k]` is element k there."""

    def __init__(self, run: _NestedRun, position: Position) -> None:
        self.run = run
        self.position = position

    def __getitem__(self, element: int) -> Value:
        return self.run.at(element, self.position)


def nested_loop(values: LaneValues, loop: Instruction, position: Position) -> NestedResult:
    """The loop's result at `position` (of the element a get-tuple-element reads); the loop
    runs once per step of the enclosing loop."""
    plan = values.nested.get(id(loop))
    if plan is None:
        raise Unlowerable(OP_RULE, f"%{loop.name}: a nested loop without a plan")
    run = values.cached(("nested", id(loop)), (), lambda: _NestedRun(values, loop, plan))
    return NestedResult(run, position)


def on_lane_layout(value: Value, lanes: Value) -> Value:
    """`value` as a tile laid out as the lane tile is, to start a loop's carry. A splat
    constant or a scalar broadcast to a tile may be laid out replicated, and a loop whose
    carry starts replicated but comes back laid out per element cannot be relaid: the chip's
    compiler refused implicit_pendulum's Newton loop, whose carries start from broadcast
    constants (its step count from 0, its last change from inf), with "Invalid relayout:
    Non-singleton logical dimension is replicated in destination but not in source for
    'vector<32x128xi32>'". A select on the lane tile's (always true) test, against the
    lane numbers so that it cannot fold back into the constant, takes the lane tile's
    layout. Lowering without a TPU does not check layouts (docs/tpu.md)."""
    tile = jnp.broadcast_to(value, lanes.shape)
    return lax.select(lax.ge(lanes, np.int32(0)), tile,
                      lax.convert_element_type(lanes, tile.dtype))


def lane_picks(mask: Value) -> Value:
    """A lane tile's mask as int32 ones and zeros, to reduce over the block."""
    return jnp.where(mask, np.int32(1), np.int32(0))


def _other_dims(dims: Sequence[int], lane_dim: int) -> list[int]:
    return [d for k, d in enumerate(dims) if k != lane_dim]


class _NestedRun:
    """One run of a nested loop for the block: its final carry."""

    def __init__(self, values: LaneValues, loop: Instruction, plan: LoopPlan) -> None:
        self.values = values
        self.plan = plan
        self.held = list(plan.per_lane)
        self.shared = [*plan.uniform, *plan.read_only]
        self.tile = values.lanes.shape
        init = loop.operands[0].operands
        carry0 = (
            tuple(tuple(on_lane_layout(values.value(init[e], p), values.lanes)
                        for p in self._held_positions(values, e)) for e in self.held),
            tuple(tuple(jnp.asarray(values.value(init[e], p))
                        for p in static_positions(self._dims(e))) for e in self.shared),
        )
        if any(jnp.ndim(v) for part in carry0[1] for v in part):
            raise Unlowerable(OP_RULE, f"%{loop.name}: a nested loop's uniform element starts "
                              "from per-lane values")
        self.final = lax.while_loop(self._condition, self._iteration, carry0)

    def _dims(self, element: int) -> tuple[int, ...]:
        return self.plan.loop.shape.elements[element].dims

    def _tile(self, value: Value) -> Value:
        return jnp.broadcast_to(value, self.tile)

    def _held_positions(self, values: LaneValues, element: int) -> list[Position]:
        dims = self._dims(element)
        lane_dim = self.plan.lane_dims[element]
        return [values.lane_position(dims, lane_dim, p)
                for p in static_positions(_other_dims(dims, lane_dim))]

    def _values_of(self, carry: Any) -> LaneValues:
        tiles, scalars = carry

        def read_held(element: int, position: Position) -> Value:
            dims = _other_dims(self._dims(element), self.plan.lane_dims[element])
            return tiles[self.held.index(element)][flat_position(position, dims)]

        def read_shared(element: int) -> Sequence[Value]:
            return list(scalars[self.shared.index(element)])

        lane_dims = {e: self.plan.lane_dims[e] for e in self.held}
        inner = LaneValues(self.values.lanes, self.plan.size, lane_dims, read_held,
                           read_shared)
        inner.nested = self.plan.nested
        return inner

    def _condition(self, carry: Any) -> Value:
        values = self._values_of(carry)
        predicate = self.plan.lane_condition
        if predicate is None:
            return values.scalar(self.plan.condition.root)
        # Lanes past N (the last block's padding) ask for nothing.
        valid = values.lanes < np.int32(self.plan.size)
        lane_dim = self.plan.value_lane_dims.get(id(predicate), 0)
        dims = predicate.shape.dims
        wanted = jnp.zeros((), jnp.bool_)
        for p in static_positions(_other_dims(dims, lane_dim)):
            tile = self._tile(values.value(predicate, values.lane_position(dims, lane_dim, p)))
            # No Python ints: under x64 they make int64 values (a bool compared with 0 is
            # converted to int64 first), which Mosaic refuses on the chip.
            nonzero = tile if tile.dtype == jnp.bool_ else tile != jnp.zeros((), tile.dtype)
            wanted = wanted | (jnp.max(lane_picks(valid & nonzero)) > 0)
        return wanted

    def _iteration(self, carry: Any) -> Any:
        values = self._values_of(carry)
        root = self.plan.body.root
        tiles = tuple(
            tuple(self._tile(values.value(root.operands[e], p)).astype(old.dtype)
                  for p, old in zip(self._held_positions(values, e), carry[0][k]))
            for k, e in enumerate(self.held))
        scalars = tuple(
            tuple(jnp.asarray(values.value(root.operands[e], p)).astype(old.dtype)
                  for p, old in zip(static_positions(self._dims(e)), carry[1][k]))
            for k, e in enumerate(self.shared))
        return tiles, scalars

    def at(self, element: int, position: Position) -> Value:
        dims = self._dims(element)
        if element in self.held:
            lane_dim = self.plan.lane_dims[element]
            if position[lane_dim] is not self.values.lanes:
                raise Unlowerable(OP_RULE, "a nested loop's result read at another lane's "
                                  "position")
            others = [i for k, i in enumerate(position) if k != lane_dim]
            if not all(is_static(i) for i in others):
                raise Unlowerable(OP_RULE, "a nested loop's result read at a per-lane position")
            k = self.held.index(element)
            return self.final[0][k][flat_position(others, _other_dims(dims, lane_dim))]
        if not all(is_static(i) for i in position):
            raise Unlowerable(OP_RULE, "a nested loop's result read at a per-lane position")
        return self.final[1][self.shared.index(element)][flat_position(position, dims)]

