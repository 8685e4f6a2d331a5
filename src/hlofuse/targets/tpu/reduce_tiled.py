"""Reduction kernels over inputs too large for one block (`tiled-reduce`): a grid over blocks
of the reduced input, the partial results in VMEM scratch accumulators.

A kernel qualifies when its root is a reduce, or a tuple of reduces of one input shape over
the same dimensions (a multi-output reduction), each of one array with an add, max or min
reducer, an f32 or s32 result (bf16 for max and min) and a constant initial value, and
every other instruction computes a block from the same block of its operands
(`blocks.is_blockwise`, reshapes between arrays of the reduced input's size included: the
producers fused in). The reduced
input is viewed as three axes (P, Q, S), the last two laid out as (sublanes, lanes):

- a full reduction (to a 0-d value) takes the flattened input as (1, rows, 128), reducing
  axes 1 and 2 (the flattened position is known per block, so a 1-d iota may be fused);
- a row reduction ([A, R] -> [A], the reduced dimensions last) takes (1, A, R), reducing
  axis 2 (the lanes);
- a column reduction ([A, R, C] -> [A, C], the reduced dimensions followed by kept ones)
  takes (A, R, C), reducing axis 1 (the sublanes).

The grid has one axis per view axis, the kept ones first ("parallel") and the reduced ones
last ("arbitrary"), so each output block's steps run in order. A step evaluates the body on
its block, replaces elements past the input's end by the accumulator's identity (the blocks
are whole: the input is padded to them, as the tiled layout pads, never a partial block),
and combines the block element-wise into the accumulator, one block-sized array per reduce
in VMEM scratch, set to the identity on the first step of the reduced axes
(`pl.when(program_id == 0)`). The last step reduces the accumulator over the reduced axes,
combines the initial value and writes the output block. The identity is the initial value
itself for max and min (idempotent: combining it with every element changes nothing) and 0
for add, the initial value then added once at the end. Float sums are grouped differently
from the reference interpreter's (NumPy's pairwise order): equal within a float tolerance,
not bit for bit; bf16 sums, which HLO rounds after every element, keep the old path.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from hlofuse.analysis.reducers import reducer_op
from hlofuse.ir.attrs import PaddingDim
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape
from hlofuse.targets.tpu.blocks import (
    BLOCK_ROWS,
    BLOCK_VMEM_BYTES,
    LANES,
    ROW_MULTIPLE,
    VMEM_LIMIT,
    divided_block,
    from_kernel,
    is_blockwise,
    read,
    to_kernel,
    whole_block,
)
from hlofuse.targets.tpu.lax_ops import BINARY, BLOCK_ZERO, BYTE_SUM_MAX, Value, exact_int_sum
from hlofuse.targets.tpu.words import WordEvaluator

# The most lanes of a block: a row reduction's rows longer than this are split over the grid.
LANE_BLOCK = 2048
# Accumulators by result type. Mosaic has no reductions over unsigned integers (JAX
# 0.10.2: "Reductions over unsigned integers not implemented"): u32 keeps the old path.
_ACCUMULATED = {DType.F32: np.float32, DType.BF16: np.float32, DType.S32: np.int32}
_REDUCED = {Op.ADD: lax.reduce_sum, Op.MAXIMUM: lax.reduce_max, Op.MINIMUM: lax.reduce_min}


@dataclass(frozen=True)
class ReduceLayout:
    """Where a tiled reduction's blocks lie (module docstring). `view` is the reduced input's
    (P, Q, S) before padding, `block` the (Q, S) extents of a block (P's blocks are one
    long), `reduced` the view axes reduced, `flat` a full reduction over the flattened
    input; per reduce its reducer op and initial value."""

    view: tuple[int, int, int]
    count: int  # elements reduced into each output element
    block: tuple[int, int]
    reduced: tuple[int, ...]
    flat: bool
    ops: tuple[Op, ...]
    inits: tuple[float | int, ...]
    dtypes: tuple[DType, ...]
    computation: Computation | None = field(compare=False)
    reduces: tuple[Instruction, ...] = field(compare=False)

    @property
    def padded(self) -> tuple[int, int, int]:
        p, q, s = self.view
        return (p, -(-q // self.block[0]) * self.block[0], -(-s // self.block[1]) * self.block[1])

    @property
    def order(self) -> tuple[int, ...]:
        """The view axis of each grid axis: the kept ones first, the reduced ones last."""
        return (*(a for a in range(3) if a not in self.reduced), *self.reduced)

    @property
    def grid(self) -> tuple[int, ...]:
        counts = (self.view[0], self.padded[1] // self.block[0], self.padded[2] // self.block[1])
        return tuple(counts[a] for a in self.order)

    @property
    def masked(self) -> bool:
        """Whether some block holds elements past the input's end on a reduced axis."""
        if self.flat:
            return self.padded[1] * self.padded[2] != self.count
        return any(self.padded[a] != self.view[a] for a in self.reduced)

    def output_view(self) -> tuple[int, int, int]:
        p, q, s = self.padded
        return (p, 1 if 1 in self.reduced else q, 1 if 2 in self.reduced else s)

    def describe(self) -> str:
        kind = "full" if self.flat else ("row" if self.reduced == (2,) else "column")
        accumulators = ", ".join(f"{np.dtype(_ACCUMULATED[d]).name} {self.block}"
                                 for d in self.dtypes)
        pad = "; the padding masked to the identity" if self.masked else ""
        padded = f" padded to {self.padded}" if self.padded != self.view else ""
        return (f"{kind} reduction of the input as {self.view}{padded} in blocks (1, "
                f"{self.block[0]}, {self.block[1]}), grid {self.grid} with the reduced axes "
                "'arbitrary', "
                f"accumulators in VMEM scratch: {accumulators}{pad}")


def plan_tiled_reduce(inst: Instruction, body: list[Instruction],
                      inputs: Sequence[Shape]) -> ReduceLayout | None:
    """The tiled layout of a reduction kernel (`inst` a reduce fusion or an unfused reduce),
    or None where it does not qualify (module docstring)."""
    comp = inst.calls[0] if inst.op is Op.FUSION else None
    root = comp.root if comp is not None else inst
    reduces = tuple(root.operands) if root.op is Op.TUPLE else (root,)
    if not reduces or any(not _is_tileable_reduce(r) for r in reduces):
        return None
    dims = reduces[0].operands[0].shape.dims
    reduced_dims = reduces[0].ints("dimensions")
    if any(r.operands[0].shape.dims != dims or r.ints("dimensions") != reduced_dims
           for r in reduces):
        return None
    inits = [_constant_init(inst, comp, r) for r in reduces]
    size = int(np.prod(dims))
    view = _view(dims, reduced_dims)
    if view is None or any(i is None for i in inits):
        return None
    shape, reduced, flat = view
    skipped = {id(r) for r in reduces} | {id(root)}
    counts = {size, *(i.operands[0].shape.num_elements for i in body if i.op is Op.PAD)}
    if len(counts) > 2 or any(s.rank and s.num_elements not in counts for s in inputs):
        return None
    if any(id(i) not in skipped and not _is_flat_blockwise(i, counts, flat) for i in body):
        return None
    count = int(np.prod([dims[d] for d in reduced_dims]))
    per_element = 2 * sum(max(np.dtype(s.dtype.numpy).itemsize, 4) for s in inputs if s.rank)
    per_element += 4 * (len(body) + len(reduces))  # a value per instruction, the accumulators
    block = _block(shape, reduced, BLOCK_VMEM_BYTES // per_element)
    return ReduceLayout(shape, count, block, reduced, flat,
                        tuple(reducer_op(r.calls[0]) or Op.ADD for r in reduces),
                        tuple(i for i in inits if i is not None),
                        tuple(r.dtype for r in reduces), comp, reduces)


def _is_flat_blockwise(inst: Instruction, counts: set[int], flat: bool) -> bool:
    """Whether an instruction computes each block of the view from the same block of its
    operands: `is_blockwise` over its own dimensions where it has the reduced input's
    elements (the view takes every array in row-major order, so a reshape or bitcast between
    such arrays moves nothing); a pad at the end of the first dimension (XLA's tree
    reduction pads so) from the one shorter element count allowed, its first elements the
    operand's in the same order; a 1-d iota only in a full reduction's flattened view."""
    if inst.shape.is_array and inst.shape.rank and inst.shape.num_elements not in counts:
        return False
    if inst.op in (Op.RESHAPE, Op.BITCAST):
        return inst.dtype is inst.operands[0].dtype
    if inst.op is Op.PAD:
        return _pads_the_end(inst) and inst.shape.num_elements == max(counts)
    if inst.op is Op.IOTA and not flat:
        return False
    return is_blockwise(inst, inst.shape.dims if inst.shape.is_array else ())


def _pads_the_end(inst: Instruction) -> bool:
    config = inst.attrs["padding"]
    assert isinstance(config, tuple)
    dims = [d for d in config if isinstance(d, PaddingDim)]
    return all(d.low == 0 and d.interior == 0 and (k == 0 or d.high == 0)
               for k, d in enumerate(dims))


def _is_tileable_reduce(inst: Instruction) -> bool:
    if inst.op is not Op.REDUCE or len(inst.operands) != 2:
        return False
    op = reducer_op(inst.calls[0])
    if op not in _REDUCED or inst.dtype not in _ACCUMULATED:
        return False
    # HLO rounds a bf16 sum after every element (the interpreter does): not regrouped here.
    return not (inst.dtype is DType.BF16 and op is Op.ADD)


def _constant_init(kernel: Instruction, comp: Computation | None,
                   reduce: Instruction) -> float | int | None:
    """The reduce's initial value where it is a constant: in the fused computation, or the
    fusion's operand behind the parameter it reads."""
    init = reduce.operands[1]
    if comp is not None and init.op is Op.PARAMETER:
        init = kernel.operands[init.parameter_number]
    if init.op is not Op.CONSTANT or init.shape.rank != 0:
        return None
    literal = init.attrs["literal"]
    assert isinstance(literal, np.ndarray)
    value = np.asarray(literal, init.dtype.numpy).item()
    return value if isinstance(value, int) else float(value)


def _view(dims: tuple[int, ...], reduced: tuple[int, ...]
          ) -> tuple[tuple[int, int, int], tuple[int, ...], bool] | None:
    """(view, reduced view axes, flat) of a reduce over `reduced` of an input of `dims`; None
    where the reduced dimensions are not one contiguous run (a transposing reduction)."""
    size = int(np.prod(dims))
    if int(np.prod([n for d, n in enumerate(dims) if d not in reduced])) == 1:
        return (1, -(-size // LANES), LANES), (1, 2), True  # one output element: flattened
    first, last = min(reduced), max(reduced) + 1
    if sorted(reduced) != list(range(first, last)):
        return None
    outer = int(np.prod(dims[:first]))
    middle = int(np.prod(dims[first:last]))
    inner = int(np.prod(dims[last:]))
    if inner == 1:
        return (1, outer, middle), (2,), False
    return (outer, middle, inner), (1,), False


def _block(view: tuple[int, int, int], reduced: tuple[int, ...],
           elements: int) -> tuple[int, int]:
    """The (Q, S) extents of a block within `elements` (the VMEM model's budget, counted on
    the lanes padded to 128): lanes first (a whole axis up to LANE_BLOCK, else multiples of
    128), then as many rows as fit."""
    _, q, s = view
    lanes = s if s <= LANE_BLOCK else divided_block(s, LANE_BLOCK, LANES)
    padded = -(-lanes // LANES) * LANES  # VMEM holds whole (8, 128) tiles: 70 lanes take 128
    fit = min(BLOCK_ROWS, max(elements // padded // ROW_MULTIPLE * ROW_MULTIPLE, ROW_MULTIPLE))
    return divided_block(q, fit, ROW_MULTIPLE), lanes


class TiledReduce:
    """The `pallas_call` of a tiled reduction: called with the kernel's input leaves."""

    def __init__(self, layout: ReduceLayout, instruction: Instruction,
                 input_shapes: Sequence[Shape], output_shapes: Sequence[Shape],
                 interpret: bool, name: str, debug: bool = False) -> None:
        self.layout = layout
        self.instruction = instruction
        self.input_shapes = tuple(input_shapes)
        self.output_shapes = tuple(output_shapes)
        self.interpret, self.name, self.debug = interpret, name, debug

    def __call__(self, *leaves: Value) -> list[Value]:
        layout = self.layout
        arrays = [self._padded(to_kernel(x), s) for x, s in zip(leaves, self.input_shapes)]
        grid, order = layout.grid, layout.order
        q_block, s_block = layout.block
        kept = len(order) - len(layout.reduced)

        def block_index(*ids: Any) -> tuple[Any, ...]:
            return tuple(ids[order.index(a)] for a in range(3))

        def output_index(*ids: Any) -> tuple[Any, ...]:
            index = block_index(*ids)
            return tuple(BLOCK_ZERO if a in layout.reduced else index[a] for a in range(3))

        def spec(shape: Shape) -> pl.BlockSpec:
            if shape.rank == 0:
                return whole_block(2, pltpu.SMEM)
            return pl.BlockSpec((1, q_block, s_block), block_index)

        out_view = layout.output_view()
        out_block = (1, *(1 if a in layout.reduced else b
                          for a, b in zip((1, 2), layout.block)))
        outputs = [jax.ShapeDtypeStruct(out_view, np.dtype(d.numpy)) for d in layout.dtypes]
        scratch = [pltpu.VMEM(layout.block, np.dtype(_ACCUMULATED[d])) for d in layout.dtypes]
        semantics: list[Literal["parallel", "arbitrary"]] = ["parallel"] * kept
        semantics += ["arbitrary"] * len(layout.reduced)
        kernel = functools.partial(self._kernel, len(arrays))
        out = pl.pallas_call(
            kernel, grid=grid, out_shape=outputs,
            in_specs=[spec(s) for s in self.input_shapes],
            out_specs=[pl.BlockSpec(out_block, output_index) for _ in outputs],
            scratch_shapes=scratch, interpret=self.interpret, debug=self.debug, name=self.name,
            compiler_params=pltpu.CompilerParams(dimension_semantics=tuple(semantics),
                                                 vmem_limit_bytes=VMEM_LIMIT))(*arrays)
        p, q, s = layout.view
        cut = [o[:, :1 if 1 in layout.reduced else q, :1 if 2 in layout.reduced else s]
               for o in out]
        return [from_kernel(o, shape) for o, shape in zip(cut, self.output_shapes)]

    def _padded(self, x: Value, shape: Shape) -> Value:
        """An input as the padded view (a 0-d one as a (1, 1) array for SMEM)."""
        if shape.rank == 0:
            return x
        layout = self.layout
        flat = x.reshape(-1)
        if layout.flat:
            rows, lanes = layout.padded[1], layout.padded[2]
            return jnp.pad(flat, (0, rows * lanes - flat.size)).reshape(1, rows, lanes)
        if flat.size < int(np.prod(layout.view)):  # a pad's operand: its elements first
            flat = jnp.pad(flat, (0, int(np.prod(layout.view)) - flat.size))
        x = flat.reshape(layout.view)
        pad = [(0, want - have) for want, have in zip(layout.padded, layout.view)]
        return jnp.pad(x, pad) if any(high for _, high in pad) else x

    def _kernel(self, n_inputs: int, *refs: Any) -> None:
        layout = self.layout
        n_reduces = len(layout.reduces)
        in_refs = refs[:n_inputs]
        out_refs = refs[n_inputs:n_inputs + n_reduces]
        accumulators = refs[n_inputs + n_reduces:]
        ids = [pl.program_id(k) for k in range(len(layout.grid))]
        reduced_ids = ids[len(ids) - len(layout.reduced):]
        counts = layout.grid[len(ids) - len(layout.reduced):]
        first = functools.reduce(jnp.logical_and, [i == 0 for i in reduced_ids])
        last = functools.reduce(jnp.logical_and,
                                [i == np.int32(n - 1) for i, n in zip(reduced_ids, counts)])
        identities = [_identity(op, init) for op, init in zip(layout.ops, layout.inits)]

        @pl.when(first)
        def _start() -> None:
            for acc, value in zip(accumulators, identities):
                acc[...] = jnp.full(acc.shape, value, acc.dtype)

        rows, lanes = layout.block
        p = ids[layout.order.index(0)]
        q = lax.broadcasted_iota(np.int32, layout.block, 0) + \
            ids[layout.order.index(1)] * np.int32(rows)
        s = lax.broadcasted_iota(np.int32, layout.block, 1) + \
            ids[layout.order.index(2)] * np.int32(lanes)
        # Each element's row-major position in the reduced input (before the padding).
        position = (p * np.int32(layout.view[1]) + q) * np.int32(layout.view[2]) + s
        values = self._reduce_inputs(
            [_read_block(r, shape) for r, shape in zip(in_refs, self.input_shapes)], position,
            ids[layout.order.index(1)] * np.int32(rows * LANES))
        mask = self._mask(q, s, position) if layout.masked else None
        for acc, value, op, identity in zip(accumulators, values, layout.ops, identities):
            value = lax.convert_element_type(value, acc.dtype)
            if mask is not None:
                value = jnp.where(mask, value, jnp.asarray(identity, acc.dtype))
            acc[...] = BINARY[op](acc[...], value)

        @pl.when(last)
        def _finish() -> None:
            for out, acc, op, init in zip(out_refs, accumulators, layout.ops, layout.inits):
                total = acc[...]
                for axis in sorted((a - 1 for a in layout.reduced), reverse=True):
                    total = _reduced(total, op, axis)
                if op is Op.ADD and init != 0:
                    total = total + jnp.asarray(init, acc.dtype)
                out[0] = total.astype(out.dtype)

    def _reduce_inputs(self, values: list[Value], position: Value,
                       start: Value) -> list[Value]:
        """Each reduce's input on this block: the body evaluated up to the reduces, a pad
        as its operand where `position` is within it, else its padding value."""
        layout = self.layout
        if layout.computation is None:
            return [values[0]]
        evaluator = WordEvaluator(block_shape=layout.block,
                                  block_start=start if layout.flat else None)
        comp = layout.computation
        skipped = {id(r) for r in layout.reduces} | {id(comp.root)}
        env: dict[int, Value] = {}
        for inst in comp.instructions:
            if inst.op is Op.PARAMETER:
                env[id(inst)] = values[inst.parameter_number]
            elif inst.op is Op.PAD:
                inside = position < np.int32(inst.operands[0].shape.num_elements)
                x, value = (env[id(o)] for o in inst.operands)
                env[id(inst)] = jnp.where(inside, x, value)
            elif id(inst) not in skipped:
                env[id(inst)] = evaluator.instruction(inst, [env[id(o)] for o in inst.operands])
        return [env[id(r.operands[0])] for r in layout.reduces]

    def _mask(self, q: Value, s: Value, position: Value) -> Value:
        """Which elements of the block lie inside the input (before the padding)."""
        layout = self.layout
        if layout.flat:
            return position < np.int32(layout.count)
        if layout.reduced == (1,):
            return q < np.int32(layout.view[1])
        return s < np.int32(layout.view[2])


def _read_block(ref: Any, shape: Shape) -> Value:
    """A block's value: a (1, Q, S) block as (Q, S); a 0-d input from SMEM."""
    if shape.rank == 0:
        return read(ref, shape)
    value = ref[0]
    return value != 0 if shape.dtype is DType.PRED else value


def _identity(op: Op, init: float) -> float:
    return 0.0 if op is Op.ADD else init


def _reduced(value: Value, op: Op, axis: int) -> Value:
    """A 2-d value reduced over one axis, the axis kept (of extent 1). With x64 enabled
    (programs with 64-bit values) an int32 sum is summed as bytes (`lax_ops.exact_int_sum`:
    Pallas lowers an int32 `reduce_sum` there through a 64-bit sum Mosaic refuses); a block's
    axis has at most BLOCK_ROWS (or LANE_BLOCK) elements, within what a byte sum adds
    exactly."""
    if op is Op.ADD and jnp.issubdtype(value.dtype, jnp.integer) \
            and bool(jax.config.read("jax_enable_x64")):
        assert value.shape[axis] <= BYTE_SUM_MAX
        total = exact_int_sum(value, (axis,))
    else:
        total = _REDUCED[op](value, (axis,))
    return jnp.expand_dims(total, axis)
