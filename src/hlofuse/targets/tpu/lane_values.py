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
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence

import jax.numpy as jnp
import numpy as np
from jax import lax

from hlofuse.analysis.lane_classification import alias, element_read
from hlofuse.analysis.reducers import reducer_op
from hlofuse.ir.attrs import PaddingDim, SliceDim
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op
from hlofuse.reference.rnglib import THREEFRY_TARGET
from hlofuse.targets.tpu.lax_ops import BINARY, ELEMENTWISE, Value, elementwise, threefry

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


def _is_static(index: Index) -> bool:
    return isinstance(index, int)


class LaneValues:
    """The values of one evaluation of a loop computation (the body or the condition).

    `held(element, position)`: a per-lane element's value at a position (its lane index
    the lane tile); `uniform(element)`: a uniform element's scalars, flattened.
    """

    def __init__(self, lanes: Value, lane_dims: Mapping[int, int],
                 held: Callable[[int, Position], Value],
                 uniform: Callable[[int], Sequence[Value]]) -> None:
        self.lanes = lanes
        self.lane_dims = lane_dims
        self.held = held
        self.uniform = uniform
        self._memo: dict[tuple[int, tuple[object, ...]], Value] = {}
        self._alive: list[Value] = []

    # --- positions -----------------------------------------------------------------------

    def lane_position(self, dims: Sequence[int], lane_dim: int,
                      others: Sequence[int]) -> Position:
        """The position with the lane tile at `lane_dim` and `others` elsewhere."""
        it = iter(others)
        return tuple(self.lanes if k == lane_dim else next(it) for k in range(len(dims)))

    def _key(self, position: Position) -> tuple[object, ...]:
        key: list[object] = []
        for index in position:
            if _is_static(index):
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
            found = self._memo[key] = self._compute(inst, position)
        return found

    def scalar(self, inst: Instruction) -> Value:
        return self.value(inst, ())

    def _compute(self, inst: Instruction, position: Position) -> Value:
        op = inst.op
        element = element_read(inst)
        if element is not None:
            return self._element(inst, element, position)
        if op in ELEMENTWISE:
            return elementwise(inst, [self.value(o, position) for o in inst.operands])
        if op is Op.CUSTOM_CALL and inst.attrs.get("custom_call_target") == THREEFRY_TARGET:
            return threefry(inst, [self.value(o, position) for o in inst.operands])
        handler = _MOVES.get(op)
        if handler is not None:
            return handler(self, inst, position)
        raise Unlowerable(OP_RULE, f"%{inst.name} ({op.text}) has no per-lane form in the "
                          "whole-loop kernel")

    def _element(self, inst: Instruction, element: int, position: Position) -> Value:
        dims = inst.shape.dims
        lane_dim = self.lane_dims.get(element)
        if lane_dim is None:
            scalars = self.uniform(element)
            return self._select_over(dims, position, lambda p: scalars[_flat(p, dims)])
        if position[lane_dim] is not self.lanes:
            raise Unlowerable(OP_RULE, f"%{inst.name} reads element {element} at another "
                              "lane's position")
        others = [i for k, i in enumerate(position) if k != lane_dim]
        other_dims = [d for k, d in enumerate(dims) if k != lane_dim]
        return self._select_over(other_dims, others,
                                 lambda p: self.held(element, tuple(p)))

    def _select_over(self, dims: Sequence[int], position: Sequence[Index],
                     at: Callable[[tuple[int, ...]], Value]) -> Value:
        """The value at a position whose per-lane indices pick among the static positions:
        a chain of selects (a gather over a small table). Indices are in range."""
        dynamic = [k for k, i in enumerate(position) if not _is_static(i)]
        if not dynamic:
            return at(tuple(int(i) for i in position))
        count = int(np.prod([dims[k] for k in dynamic]))
        if count > MAX_SELECT_POSITIONS:
            raise Unlowerable(SIZE_RULE, f"a per-lane read picks among {count} positions "
                              f"(over {MAX_SELECT_POSITIONS} written out as selects)")
        result: Value = None
        for choice in itertools.product(*(range(dims[k]) for k in dynamic)):
            p = [int(i) if _is_static(i) else 0 for i in position]
            for k, c in zip(dynamic, choice):
                p[k] = c
            candidate = at(tuple(p))
            if result is None:
                result = candidate
                continue
            mask = None
            for k, c in zip(dynamic, choice):
                hit = position[k] == np.int32(c)
                mask = hit if mask is None else lax.bitwise_and(mask, hit)
            result = _select(mask, candidate, result)
        return result


def _select(mask: Value, on_true: Value, on_false: Value) -> Value:
    """lax.select with scalars broadcast to the tiles among its operands."""
    values = [jnp.asarray(v) for v in (mask, on_true, on_false)]
    shape = max((v.shape for v in values), key=len)
    mask, on_true, on_false = (v if v.shape == shape else jnp.broadcast_to(v, shape)
                               for v in values)
    return lax.select(mask, on_true, on_false)


def _same_shape(a: Value, b: Value) -> tuple[Value, Value]:
    a, b = jnp.asarray(a), jnp.asarray(b)
    if a.shape == b.shape:
        return a, b
    shape = a.shape if a.ndim > b.ndim else b.shape
    return jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape)


def _flat(position: Sequence[int], dims: Sequence[int]) -> int:
    return sum(i * s for i, s in zip(position, strides(dims)))


def _int32(x: Value) -> Value:
    return lax.convert_element_type(x, np.int32)


def _clamped(start: Value, limit: int) -> Index:
    """A start index clamped into [0, limit], as XLA clamps a dynamic slice's start."""
    if jnp.ndim(start) == 0 and not isinstance(start, jnp.ndarray | np.ndarray):
        return min(max(int(start), 0), limit)
    return lax.clamp(np.int32(0), _int32(start), np.int32(limit))


def _add(index: Index, offset: Index) -> Index:
    if _is_static(index) and _is_static(offset):
        return int(index) + int(offset)
    if _is_static(index) and index == 0:
        return offset
    if _is_static(offset) and offset == 0:
        return index
    return index + offset


# --- data movement ----------------------------------------------------------------------

def _constant(values: LaneValues, inst: Instruction, position: Position) -> Value:
    literal = np.asarray(inst.attrs["literal"], np.dtype(inst.dtype.numpy))
    if literal.ndim == 0:
        return jnp.asarray(literal)
    return values._select_over(literal.shape, position,
                               lambda p: jnp.asarray(literal[p]))


def _iota(values: LaneValues, inst: Instruction, position: Position) -> Value:
    dim = inst.attrs["iota_dimension"]
    assert isinstance(dim, int)
    wanted = np.dtype(inst.dtype.numpy)
    index = position[dim]
    if _is_static(index):
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
            linear = _add(linear, _scaled(index, stride))
        for j, (dim, stride) in enumerate(zip(targets, strides(targets))):
            if dim == 1:
                operand_position.append(0)
            elif _is_static(linear):
                operand_position.append((int(linear) // stride) % dim)
            else:
                index = linear if stride == 1 else lax.div(linear, np.int32(stride))
                operand_position.append(index if j == 0 else lax.rem(index, np.int32(dim)))
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
    return values.value(inst.operands[0], position)[index]


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
        _add(_scaled(i, s.stride), s.start) for i, s in zip(position, spec)))


def _scaled(index: Index, factor: int) -> Index:
    """index x factor, keeping the lane tile itself where the factor is 1 (the lane tile is
    recognised by identity)."""
    if factor == 1:
        return index
    return int(index) * factor if _is_static(index) else index * np.int32(factor)


def _reverse(values: LaneValues, inst: Instruction, position: Position) -> Value:
    reversed_dims = set(inst.ints("dimensions"))
    dims = inst.shape.dims
    return values.value(inst.operands[0], tuple(
        (dims[k] - 1 - i if _is_static(i) else np.int32(dims[k] - 1) - i)
        if k in reversed_dims else i for k, i in enumerate(position)))


def _concatenate(values: LaneValues, inst: Instruction, position: Position) -> Value:
    dim = inst.ints("dimensions")[0]
    offsets = list(itertools.accumulate((o.shape.dims[dim] for o in inst.operands),
                                        initial=0))
    index = position[dim]

    def part(k: int, at: Index) -> Value:
        return values.value(inst.operands[k],
                            tuple(at if j == dim else i for j, i in enumerate(position)))

    if _is_static(index):
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
        result = _select(index >= np.int32(offsets[k]), candidate, result)
    return result


def _pad(values: LaneValues, inst: Instruction, position: Position) -> Value:
    attr = inst.attrs["padding"]
    assert isinstance(attr, tuple)
    config = [p for p in attr if isinstance(p, PaddingDim)]
    operand_position = []
    for i, p, size in zip(position, config, inst.operands[0].shape.dims):
        if not _is_static(i):
            raise Unlowerable(OP_RULE, f"%{inst.name} (pad) read at a per-lane position")
        shifted = int(i) - p.low
        if shifted < 0 or shifted % (p.interior + 1) or shifted // (p.interior + 1) >= size:
            return values.scalar(inst.operands[1])
        operand_position.append(shifted // (p.interior + 1))
    return values.value(inst.operands[0], tuple(operand_position))


def _dynamic_slice(values: LaneValues, inst: Instruction, position: Position) -> Value:
    operand = inst.operands[0]
    sizes = inst.ints("dynamic_slice_sizes")
    starts = [_clamped(values.scalar(s) if s.shape.rank == 0 else _unlowerable(inst), d - n)
              for s, d, n in zip(inst.operands[1:], operand.shape.dims, sizes)]
    return values.value(operand, tuple(_add(i, s) for i, s in zip(position, starts)))


def _dynamic_update_slice(values: LaneValues, inst: Instruction, position: Position) -> Value:
    """The update where the position falls in its window, else the operand."""
    operand, update = inst.operands[0], inst.operands[1]
    starts = [_clamped(values.scalar(s) if s.shape.rank == 0 else _unlowerable(inst), d - n)
              for s, d, n in zip(inst.operands[2:], operand.shape.dims, update.shape.dims)]
    inside: Value = True
    shifted: list[Index] = []
    for i, s, n in zip(position, starts, update.shape.dims):
        local = i - s
        if _is_static(local):
            if not 0 <= int(local) < n:
                return values.value(operand, position)
            shifted.append(int(local))
            continue
        clamped = lax.clamp(np.int32(0), _int32(local), np.int32(n - 1))
        shifted.append(clamped)
        hit = lax.bitwise_and(local >= np.int32(0), local < np.int32(n))
        inside = hit if inside is True else lax.bitwise_and(*_same_shape(inside, hit))
    new = values.value(update, tuple(shifted))
    if inside is True:
        return new
    old = values.value(operand, position)
    return _select(inside, new, old)


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


def _gather(values: LaneValues, inst: Instruction, position: Position) -> Value:
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
        starts[dim] = _clamped(raw, operand_dims[dim] - sizes[dim])
    for operand_dim, indices_dim in zip(operand_batching, indices_batching):
        starts[operand_dim] = batch[batch_dims.index(indices_dim)]
    offsets = iter(position[k] for k in offset_dims)
    return values.value(operand, tuple(
        starts[d] if d in dropped else _add(starts[d], next(offsets))
        for d in range(len(operand_dims))))


def _scatter(values: LaneValues, inst: Instruction, position: Position) -> Value:
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
            starts[dim] = _int32(raw)
        mask: Value = True
        update_at: list[Index] = [0] * updates.shape.rank
        for j, d in enumerate(scatter_dims):
            update_at[d] = batch[j]
        for d in range(rank):
            if d in operand_batching:
                continue
            start = starts[d]
            if not _is_static(start):  # the whole window inside the operand, or skipped
                mask = _and(mask, lax.bitwise_and(
                    start >= np.int32(0), start <= np.int32(operand_dims[d] - window_size[d])))
            unshifted = _is_static(start) and start == 0
            offset = position[d] if unshifted else position[d] - start
            if d in window_of:
                if unshifted:
                    update_at[window_of[d]] = offset
                    continue
                update_at[window_of[d]] = _clamp_index(offset, window_size[d])
                mask = _and(mask, 0 <= int(offset) < window_size[d] if _is_static(offset)
                            else lax.bitwise_and(
                    offset >= np.int32(0), offset < np.int32(window_size[d])))
            else:
                mask = _and(mask, offset == 0 if _is_static(offset)
                            else offset == np.int32(0))
        if mask is False:
            continue
        update = values.value(updates, tuple(update_at))
        combined = _run_elementwise(inst.calls[0], [result, update])
        result = combined if mask is True else _select(mask, combined, result)
    return result


def _and(mask: Value, other: Value) -> Value:
    if mask is True or other is True:
        return other if mask is True else mask
    if mask is False or other is False:
        return False
    return lax.bitwise_and(*_same_shape(mask, other))


def _clamp_index(index: Index, size: int) -> Index:
    """An index kept in range where a mask already discards the out-of-range ones."""
    if _is_static(index):
        return min(max(int(index), 0), size - 1)
    return lax.clamp(np.int32(0), _int32(index), np.int32(size - 1))


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
            result = [BINARY[op](*_same_shape(result[0], items[0]))]
        else:
            combined = _run_elementwise(reducer, [*result, *items])
            result = list(combined) if half > 1 else [combined]
    return tuple(result) if half > 1 else result[0]


def _run_elementwise(comp: Computation, arguments: Sequence[Value]) -> Value:
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
    """A dot written out per position: the sum over the contracted positions of products."""
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
        term = lax.mul(*_same_shape(a, b))
        total = term if total is None else lax.add(*_same_shape(total, term))
    if total is None:
        return jnp.zeros((), wanted)
    return total


_MOVES: dict[Op, Callable[[LaneValues, Instruction, Position], Value]] = {
    Op.GET_TUPLE_ELEMENT: _tuple_element, Op.CONSTANT: _constant, Op.IOTA: _iota, Op.BROADCAST: _broadcast, Op.RESHAPE: _reshape,
    Op.BITCAST: _reshape, Op.COPY: _copy, Op.OPT_BARRIER: _copy, Op.TRANSPOSE: _transpose,
    Op.SLICE: _slice, Op.REVERSE: _reverse, Op.CONCATENATE: _concatenate, Op.PAD: _pad,
    Op.DYNAMIC_SLICE: _dynamic_slice, Op.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice,
    Op.GATHER: _gather, Op.SCATTER: _scatter, Op.REDUCE: _reduce, Op.DOT: _dot,
}

# Ops the whole-loop kernel computes on tiles (the static check before the kernel is built).
LOWERED_OPS = frozenset(ELEMENTWISE) | frozenset(_MOVES) | {
    Op.PARAMETER, Op.GET_TUPLE_ELEMENT, Op.TUPLE, Op.CUSTOM_CALL}


def first_unlowered(instructions: Sequence[Instruction]) -> Instruction | None:
    """The first instruction whose op has no per-lane form here (hlofuse's Threefry call is
    the one custom call that has)."""
    for inst in instructions:
        if inst.op not in LOWERED_OPS:
            return inst
        if inst.op is Op.CUSTOM_CALL and \
                inst.attrs.get("custom_call_target") != THREEFRY_TARGET:
            return inst
    return None

