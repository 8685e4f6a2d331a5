"""The values of a whole-loop kernel's step, position by position, on tiles of lanes.

Inside the TPU's whole-loop kernel (`whole_loop.py`) a block holds B = rows x 128 lanes of a
parallel loop (analysis/parallel_loop.py). Every value of the loop's body is computed at a
position: one index per dimension of its HLO shape, each index a Python int (the same for
every lane) or an int32 (rows, 128) tile (one per lane). The index along a value's lane
dimension is the tile of global lane numbers, so a per-lane value at a position is one
(rows, 128) tile and a uniform value (the step counter, an RNG key) is a scalar. This is
XLA's elemental emitter applied to tiles of lanes, and what the C target's lane code does
per lane: a lane's small arrays are written out position by position, so Mosaic sees only
element-wise work on (rows, 128) tiles and scalar work on the scalar unit.

What each op becomes: element-wise ops (and hlofuse's Threefry call) on their operands at
the same position; broadcasts, reshapes, transposes, slices, reverses, concatenates and
dynamic slices map the position to their operand's; an iota is its index; a reduce over a
lane's own dimensions and a dot are written out over their reduced positions (an argmax's
variadic reduce becomes compare-select chains); a read at a per-lane position (a gather over
a small table, a concatenate or dynamic slice at a per-lane index) is a chain of selects
over the positions. What has no such form raises `Unlowerable` with a named rule, and the
kernel falls back (`whole_loop.py`).

Per-lane indices carry bounds (the lane tile's are [0, N)), so an index whose bounds fall in
one operand of a concatenate, one row of a reshape or a window that needs no clamp stays
static work: JAX's random bits of shape [k, N], made as one Threefry over k x N counters
split in halves and concatenated, cost each position one Threefry, not one per half. The
ops themselves are lane_ops.py and lane_indexing.py.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from hlofuse.analysis.lane_classification import alias, element_read
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op
from hlofuse.reference.rnglib import THREEFRY_TARGET
from hlofuse.targets.tpu.lane_wide import is_small_int, is_wide, narrow_dtype, wrapped
from hlofuse.targets.tpu.lax_ops import ELEMENTWISE, Value, elementwise, threefry

if TYPE_CHECKING:
    from hlofuse.analysis.parallel_loop import LoopPlan
    from hlofuse.targets.tpu.product_plan import Product
    from hlofuse.targets.tpu.whole_loop_uniform import StepRecorder

Index = int | Value  # a static index, or an int32 (rows, 128) tile of per-lane indices
Position = tuple[Index, ...]

# Rule ids of what the whole-loop kernel cannot lower (the listing and explain's words).
OP_RULE = "tpu-whole-loop-op"
SIZE_RULE = "tpu-whole-loop-too-much-work"
# Positions a select chain or a written-out reduction may cover, and values a step may
# compute, before the kernel is refused as too large to write out (Mosaic compiles every
# value of the step: code size and compile time grow with them).
MAX_SELECT_POSITIONS = 256
MAX_REDUCED_POSITIONS = 4096
MAX_STEP_VALUES = 60000


class Unlowerable(Exception):
    """A value the whole-loop kernel cannot compute on tiles: the rule and the reason."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule


def strides(dims: Sequence[int]) -> list[int]:
    out = [1] * len(dims)
    for k in range(len(dims) - 2, -1, -1):
        out[k] = out[k + 1] * dims[k + 1]
    return out


def static_positions(dims: Sequence[int]) -> list[tuple[int, ...]]:
    return list(itertools.product(*(range(d) for d in dims)))


def is_static(index: Index) -> bool:
    return isinstance(index, int)


def is_uniform_index(index: Index) -> bool:
    """A traced index that is the same for every lane (a position loop's), not a tile."""
    return not is_static(index) and jnp.ndim(index) == 0


class LaneValues:
    """The values of one evaluation of a loop computation (the body or the condition).

    `held(element, position)`: a per-lane element's value at a position (its lane index
    the lane tile); `uniform(element)`: a uniform element's scalars, flattened.
    """

    def __init__(self, lanes: Value, size: int, lane_dims: Mapping[int, int],
                 held: Callable[[int, Position], Value],
                 uniform: Callable[[int], Sequence[Value]]) -> None:
        self.lanes = lanes
        self.lane_dims = lane_dims
        self.held = held
        self.uniform = uniform
        self._memo: dict[tuple[object, tuple[object, ...]], Value] = {}
        self._alive: list[Value] = []
        # Known bounds of per-lane indices, by id(); lanes past N (padding) may break the
        # lane tile's, and compute values nobody reads.
        self._bounds: dict[int, tuple[int, int]] = {}
        self._affine: dict[int, tuple[Value, int]] = {}  # id(tile) -> (base tile, offset)
        self._shifts: dict[tuple[int, int], Value] = {}
        self._bounded(lanes, 0, size - 1)
        # The plans of the nested loops this computation runs (lane_nested.py), by id().
        self.nested: Mapping[int, LoopPlan] = {}
        # Uniform values of the step read from a table computed before the kernel, by memo
        # key, and what records the step's values to find them (whole_loop_uniform.py).
        self.precomputed: Mapping[Any, Callable[[], Value]] = {}
        self.recorder: StepRecorder | None = None
        # Held elements whose tiles sit in VMEM (lane_loops.py), read at a uniform index
        # that is not static (a position loop's): element -> read(flat index).
        self.stored: Mapping[int, Callable[[Value], Value]] = {}
        # The step's lane-uniform dots (lane_products.py), by id(), and for those on the MXU
        # the read of their (M, K) weights in VMEM.
        self.products: Mapping[int, Product] = {}
        self.weights: Mapping[int, Callable[[], Value]] = {}

    def on_lanes(self, lanes: Value, size: int) -> LaneValues:
        """The same step's values at other lane numbers (`lanes`: a tile of any rows, a
        compaction's slots: lane_compaction.py), for values that read no per-lane element.
        Uniform values already computed are shared; the MXU products are written out."""

        def no_held(element: int, position: Position) -> Value:
            raise Unlowerable(OP_RULE, f"element {element} read at gathered lanes")

        other = LaneValues(lanes, size, self.lane_dims, no_held, self.uniform)
        other._memo = {key: v for key, v in self._memo.items()
                       if isinstance(key[0], int) and getattr(v, "ndim", None) == 0
                       and not any(isinstance(k, tuple) for k in key[1])}
        other.precomputed = self.precomputed
        other.recorder = self.recorder
        return other

    @contextlib.contextmanager
    def branch(self) -> Iterator[None]:
        """Values computed inside a branch of `lax.cond` stay there: what the branch adds to
        the memo (and the index records) is forgotten when it ends."""
        saved = (dict(self._memo), dict(self._bounds), dict(self._affine), dict(self._shifts))
        try:
            yield
        finally:
            self._memo, self._bounds, self._affine, self._shifts = saved

    # --- index arithmetic with bounds -------------------------------------------------------

    def _bounded(self, index: Value, low: int, high: int) -> Value:
        self._bounds[id(index)] = (low, high)
        self._alive.append(index)
        return index

    def uniform_index(self, index: Value, low: int, high: int) -> Value:
        """A uniform int32 index that is not static (a loop's), within [low, high]."""
        if index.dtype != np.int32:
            index = lax.convert_element_type(index, np.int32)
        return self._bounded(index, low, high)

    def bounds(self, index: Index) -> tuple[int, int] | None:
        if is_static(index):
            return int(index), int(index)
        return self._bounds.get(id(index))

    def add(self, index: Index, offset: Index) -> Index:
        if is_static(index) and is_static(offset):
            return int(index) + int(offset)
        if is_static(index) and index == 0:
            return offset
        if is_static(offset) and offset == 0:
            return index
        if is_static(index):
            index, offset = offset, index
        if is_static(offset):
            return self._shifted(index, int(offset))
        a, b = self.bounds(index), self.bounds(offset)
        total = index + offset
        if a is None or b is None:
            return total
        return self._bounded(total, a[0] + b[0], a[1] + b[1])

    def _shifted(self, index: Value, offset: int) -> Index:
        """index + offset, one tile per (base, offset): an index shifted back and forth (a
        concatenate's part, then a slice of it) is the same tile, so the values read at it
        are found again rather than computed twice."""
        base, base_offset = self._affine.get(id(index), (index, 0))
        total = base_offset + offset
        if total == 0:
            return base
        key = (id(base), total)
        found = self._shifts.get(key)
        if found is not None:
            return found
        shifted = base + np.int32(total)
        bounds = self.bounds(base)
        if bounds is not None:
            self._bounded(shifted, bounds[0] + total, bounds[1] + total)
        self._affine[id(shifted)] = (base, total)
        self._shifts[key] = shifted
        self._alive.append(shifted)
        return shifted

    def scaled(self, index: Index, factor: int) -> Index:
        """index x factor (the lane tile itself where the factor is 1: it is recognised by
        identity)."""
        if factor == 1:
            return index
        if is_static(index):
            return int(index) * factor
        bounds = self.bounds(index)
        product = index * np.int32(factor)
        if bounds is None:
            return product
        low, high = sorted((bounds[0] * factor, bounds[1] * factor))
        return self._bounded(product, low, high)

    def div(self, index: Index, divisor: int) -> Index:
        """index // divisor for a non-negative index: static where its bounds allow."""
        if divisor == 1:
            return index
        if is_static(index):
            return int(index) // divisor
        bounds = self.bounds(index)
        if bounds is not None and bounds[0] >= 0 and bounds[0] // divisor == bounds[1] // divisor:
            return bounds[0] // divisor
        quotient = lax.div(index, np.int32(divisor))
        if bounds is None:
            return quotient
        return self._bounded(quotient, bounds[0] // divisor, bounds[1] // divisor)

    def rem(self, index: Index, divisor: int) -> Index:
        """index % divisor for a non-negative index: the index itself (or shifted) where its
        bounds stay in one period."""
        if is_static(index):
            return int(index) % divisor
        bounds = self.bounds(index)
        if bounds is not None and bounds[0] >= 0 and bounds[0] // divisor == bounds[1] // divisor:
            return self.add(index, -(bounds[0] // divisor) * divisor)
        return self._bounded(lax.rem(index, np.int32(divisor)), 0, divisor - 1)

    def clamped(self, start: Value, limit: int) -> Index:
        """A start index clamped into [0, limit], as XLA clamps a dynamic slice's start;
        unchanged where its bounds are inside."""
        if is_static(start):
            return min(max(int(start), 0), limit)
        bounds = self.bounds(start)
        if bounds is not None and 0 <= bounds[0] and bounds[1] <= limit:
            return start
        low, high = (0, limit) if bounds is None else \
            (min(max(bounds[0], 0), limit), min(max(bounds[1], 0), limit))
        return self._bounded(lax.clamp(np.int32(0), as_int32(start), np.int32(limit)),
                             low, high)

    # --- positions -----------------------------------------------------------------------

    def lane_position(self, dims: Sequence[int], lane_dim: int,
                      others: Sequence[int]) -> Position:
        """The position with the lane tile at `lane_dim` and `others` elsewhere."""
        it = iter(others)
        return tuple(self.lanes if k == lane_dim else next(it) for k in range(len(dims)))

    def _key(self, position: Position) -> tuple[object, ...]:
        key: list[object] = []
        for index in position:
            if is_static(index):
                key.append(index)
            else:
                key.append(("tile", id(index)))
                self._alive.append(index)
        return tuple(key)

    # --- values --------------------------------------------------------------------------

    def value(self, inst: Instruction, position: Position) -> Value:
        inst = alias(inst)
        key = (id(inst), self._key(position))
        found = self._memo.get(key)
        if found is None:
            if len(self._memo) >= MAX_STEP_VALUES:
                raise Unlowerable(SIZE_RULE, f"one step computes over {MAX_STEP_VALUES} "
                                  "values written out per position")
            read = self.precomputed.get(key)
            if read is not None:  # a uniform value of this step, computed before the kernel
                found = self._memo[key] = read()
            elif self.recorder is not None:
                found = self._memo[key] = self.recorder.computing(
                    key, inst, position, lambda: self._compute(inst, position))
            else:
                found = self._memo[key] = self._compute(inst, position)
        if self.recorder is not None:
            self.recorder.used(key, found)
        return found

    def cached(self, tag: tuple[object, ...], position: Position,
               compute: Callable[[], Any]) -> Any:
        """What `compute` gives for `tag` at a position, computed once per step (a batch
        position's factorisation)."""
        key = (tag, self._key(position))
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = compute()
        return found

    def scalar(self, inst: Instruction) -> Value:
        return self.value(inst, ())

    def _compute(self, inst: Instruction, position: Position) -> Value:
        op = inst.op
        element = element_read(inst)
        if element is not None:
            return self._element(inst, element, position)
        if is_wide(inst):
            narrowed = self._narrowed(inst, position)
            if narrowed is not None:
                return narrowed
        if is_small_int(inst):
            return self._small(inst, position)
        if op in ELEMENTWISE:
            return elementwise(inst, [self.value(o, position) for o in inst.operands])
        if op is Op.CUSTOM_CALL and inst.attrs.get("custom_call_target") == THREEFRY_TARGET:
            return threefry(inst, [self.value(o, position) for o in inst.operands])
        from hlofuse.targets.tpu.lane_linalg import is_tile_linalg, linalg_leaf

        if is_tile_linalg(inst) and inst.shape.is_array:
            return linalg_leaf(self, inst, 0, position, inst.shape.dims)
        from hlofuse.targets.tpu.lane_ops import MOVES

        handler = MOVES.get(op)
        if handler is not None:
            return handler(self, inst, position)
        raise Unlowerable(OP_RULE, f"%{inst.name} ({op.text}) has no per-lane form in the "
                          "whole-loop kernel")

    def _narrowed(self, inst: Instruction, position: Position) -> Value | None:
        """A 64-bit position value computed in 32 bits (lane_wide.py): the ops whose 32-bit
        form differs; the others (sums, masks, moves) work on the narrowed operands."""
        narrow = narrow_dtype(inst)
        op = inst.op
        if op is Op.IOTA:
            dim = inst.attrs["iota_dimension"]
            assert isinstance(dim, int)
            index = position[dim]
            if is_static(index):
                return jnp.asarray(np.asarray(index, narrow))
            return lax.convert_element_type(index, narrow)
        if op is Op.CONSTANT:
            literal = np.asarray(inst.attrs["literal"]).astype(narrow)
            if literal.ndim == 0:
                return jnp.asarray(literal)
            return self.select_over(literal.shape, position, lambda p: jnp.asarray(literal[p]))
        if op is Op.CONVERT:
            return lax.convert_element_type(self.value(inst.operands[0], position), narrow)
        if op is Op.SHIFT_RIGHT_LOGICAL:
            x, shift = (self.value(o, position) for o in inst.operands)
            x, shift = same_shape(x, shift)
            shifted = lax.shift_right_logical(x, lax.min(shift, jnp.full_like(shift, 31)))
            return select_where(shift >= 32, jnp.zeros_like(x), shifted)
        return None

    def _small(self, inst: Instruction, position: Position) -> Value:
        """An 8- or 16-bit integer in an int32 word (lane_wide.py): computed as the wider
        value, then wrapped into its type's range; moves keep the word as it is."""
        from hlofuse.targets.tpu.lane_ops import MOVES

        dtype = np.dtype(inst.dtype.numpy)
        op = inst.op
        if op is Op.CONSTANT:
            literal = np.asarray(inst.attrs["literal"], dtype).astype(np.int32)
            if literal.ndim == 0:
                return jnp.asarray(literal)
            return self.select_over(literal.shape, position, lambda p: jnp.asarray(literal[p]))
        if op is Op.IOTA:
            dim = inst.attrs["iota_dimension"]
            assert isinstance(dim, int)
            index = position[dim]
            return wrapped(jnp.asarray(index, np.int32) if is_static(index) else index, dtype)
        if op is Op.CONVERT:
            x = self.value(inst.operands[0], position)
            if jnp.issubdtype(x.dtype, jnp.floating):
                info = np.iinfo(dtype)
                x = lax.clamp(np.float32(info.min), x.astype(np.float32), np.float32(info.max))
            return wrapped(x, dtype)
        if op in ELEMENTWISE and op is not Op.BITCAST_CONVERT:
            operands = [self.value(o, position) for o in inst.operands]
            if op is Op.SHIFT_RIGHT_LOGICAL:  # on the type's own bits
                bits = dtype.itemsize * 8
                operands[0] = lax.bitwise_and(operands[0], np.int32((1 << bits) - 1))
            return wrapped(elementwise(inst, operands), dtype)
        handler = MOVES.get(op)
        if handler is None or op is Op.BITCAST:
            raise Unlowerable(OP_RULE, f"%{inst.name} ({op.text}) on {inst.dtype.text} has "
                              "no per-lane form in the kernel")
        result = handler(self, inst, position)
        if op in (Op.REDUCE, Op.REDUCE_WINDOW, Op.DOT, Op.SCATTER):  # sums wrap at the end
            return tuple(wrapped(r, dtype) for r in result) if isinstance(result, tuple) \
                else wrapped(result, dtype)
        return result

    def _element(self, inst: Instruction, element: int, position: Position) -> Value:
        dims = inst.shape.dims
        lane_dim = self.lane_dims.get(element)
        if lane_dim is None:
            scalars = self.uniform(element)
            return self.select_over(dims, position, lambda p: scalars[flat_position(p, dims)])
        if position[lane_dim] is not self.lanes:
            raise Unlowerable(OP_RULE, f"%{inst.name} reads element {element} at another "
                              "lane's position")
        others = [i for k, i in enumerate(position) if k != lane_dim]
        other_dims = [d for k, d in enumerate(dims) if k != lane_dim]
        read = self.stored.get(element)
        loop_indices = [k for k, i in enumerate(others) if is_uniform_index(i)]
        if read is None or not loop_indices:
            return self.select_over(other_dims, others,
                                     lambda p: self.held(element, tuple(p)))
        # Uniform indices index the stored tiles; per-lane ones pick by selects.
        picked = [k for k in range(len(others)) if k not in loop_indices]

        def at(choice: tuple[int, ...]) -> Value:
            full = list(others)
            for k, c in zip(picked, choice):
                full[k] = c
            return read(flat_index(full, other_dims))

        return self.select_over([other_dims[k] for k in picked], [others[k] for k in picked],
                                at)

    def select_over(self, dims: Sequence[int], position: Sequence[Index],
                    at: Callable[[tuple[int, ...]], Value]) -> Value:
        """The value at a position whose per-lane indices pick among the static positions
        (within their bounds): a chain of selects (a gather over a small table). Indices
        are in range."""
        ranges: list[range] = []
        for i, dim in zip(position, dims):
            bounds = self.bounds(i)
            low, high = (0, dim - 1) if bounds is None else \
                (max(bounds[0], 0), min(bounds[1], dim - 1))
            ranges.append(range(low, max(low, high) + 1))
        dynamic = [k for k, i in enumerate(position) if len(ranges[k]) > 1]
        fixed = [r[0] for r in ranges]
        if not dynamic:
            return at(tuple(fixed))
        count = int(np.prod([len(ranges[k]) for k in dynamic]))
        if count > MAX_SELECT_POSITIONS:
            raise Unlowerable(SIZE_RULE, f"a per-lane read picks among {count} positions "
                              f"(over {MAX_SELECT_POSITIONS} written out as selects)")
        result: Value = None
        for choice in itertools.product(*(ranges[k] for k in dynamic)):
            p = list(fixed)
            for k, c in zip(dynamic, choice):
                p[k] = c
            candidate = at(tuple(p))
            if result is None:
                result = candidate
                continue
            mask = None
            for k, c in zip(dynamic, choice):
                hit = compare(lax.eq, position[k], c)
                mask = hit if mask is None else lax.bitwise_and(mask, hit)
            result = select_where(mask, candidate, result)
        return result


def compare(direction: Callable[[Value, Value], Value], x: Value, constant: int) -> Value:
    """`direction` (lax.eq, lax.ge, ...) of a tile and a constant of its type. lax, not the
    operators: jnp's `==` and `>=` trace a jitted function on every call, and a step's select
    chains over a board's positions call them thousands of times while the kernel is
    traced."""
    return direction(x, np.asarray(constant, x.dtype))


def difference(a: Index, b: Index) -> Index:
    """a - b for static indices and tiles, a tile's subtraction by lax where both sides have
    one type (see `compare`)."""
    if isinstance(a, int):
        return a - b if isinstance(b, int) else lax.sub(np.asarray(a, b.dtype), b)
    if isinstance(b, int):
        return lax.sub(a, np.asarray(b, a.dtype))
    return lax.sub(a, b) if a.dtype == b.dtype else a - b


def select_where(mask: Value, on_true: Value, on_false: Value) -> Value:
    """lax.select with scalars broadcast to the tiles among its operands."""
    values = [jnp.asarray(v) for v in (mask, on_true, on_false)]
    shape = max((v.shape for v in values), key=len)
    mask, on_true, on_false = (v if v.shape == shape else jnp.broadcast_to(v, shape)
                               for v in values)
    return lax.select(mask, on_true, on_false)


def same_shape(a: Value, b: Value) -> tuple[Value, Value]:
    a, b = jnp.asarray(a), jnp.asarray(b)
    if a.shape == b.shape:
        return a, b
    shape = a.shape if a.ndim > b.ndim else b.shape
    return jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape)


def flat_position(position: Sequence[int], dims: Sequence[int]) -> int:
    """The row-major index of a static position in an array of `dims`."""
    return sum(int(i) * s for i, s in zip(position, strides(dims)))


def flat_index(position: Sequence[Index], dims: Sequence[int]) -> Index:
    """The row-major index of a position of static ints and uniform int32 scalars."""
    flat: Index = 0
    for index, stride in zip(position, strides(dims)):
        if is_static(index):
            term: Index = int(index) * stride
        else:
            term = lax.mul(lax.convert_element_type(index, np.int32), np.int32(stride))
        if is_static(flat) and is_static(term):
            flat = int(flat) + int(term)
        elif is_static(flat) and flat == 0:
            flat = term
        else:
            flat = lax.add(np.int32(flat) if is_static(flat) else flat,
                           np.int32(term) if is_static(term) else term)
    return flat


def as_int32(x: Value) -> Value:
    return lax.convert_element_type(x, np.int32)
