"""A dynamic-update-slice kernel in place (`in-place`): the operand aliased to the output
(`input_output_aliases`), only the update's block written.

A kernel qualifies when its root is a dynamic-update-slice (an unfused one, or a fusion with
one at its root, as XLA's in-place DUS fusions) whose operand is a kernel input read by
nothing else, whose start indices are 0-d inputs, constants or computed from them (JAX's
wrap of negative starts: evaluated before the call), and whose update the rest of
the body computes as a whole-array kernel would (its arrays within the whole-array limits).
The starts, clamped as HLO clamps them (into [0, dim - update]), come in as scalar prefetch
(`PrefetchScalarGridSpec`), and the output's one block is placed by an index map that reads
them. Per dimension of the operand (a 1-d operand as one row, as whole-array kernels take
it), with Mosaic's tile (8 rows, 128 lanes; 1 for leading dimensions):

- an update as long as the dimension: the block is the whole dimension;
- an update of one element along it: the block is one tile (one row or 128 lanes; the
  whole dimension where tiles do not divide it), at the block holding the start; the
  operand's block is read through the aliased input and the update selected in at the
  start's place (any start: no alignment needed);
- a longer update at a constant start: the block is the update itself where its length is a
  whole number of tiles and the (clamped) start a multiple of it.

Anything else (a longer update at a dynamic start, which a block could place only at a
multiple of its length) keeps the old path, an XLA operation, and the listing says why.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape
from hlofuse.targets.tpu.blocks import (
    VMEM_LIMIT,
    WHOLE_MAX_ELEMENTS,
    WHOLE_MAX_VREGS,
    from_kernel,
    kernel_dims,
    read,
    to_kernel,
    vector_registers,
    whole_spec,
    write,
)
from hlofuse.targets.tpu.evaluate import LaxEvaluator
from hlofuse.targets.tpu.lax_ops import Value
from hlofuse.targets.tpu.words import WordEvaluator


@dataclass(frozen=True)
class UpdateLayout:
    """The block of an in-place dynamic-update-slice: per dimension of the operand's kernel
    view its extent, whether its start is read from the prefetched starts (else the
    constant block index `fixed`), and whether the update is selected in at the start's
    place within the block (an update of one element along a tiled dimension)."""

    view: tuple[int, ...]
    block: tuple[int, ...]
    dynamic: tuple[bool, ...]
    fixed: tuple[int, ...]
    selected: tuple[bool, ...]
    operand: int  # the kernel input aliased to the output
    # Per start: the kernel input it is, None (a constant), or -1: computed in the fused
    # computation from 0-d values, evaluated before the call.
    starts: tuple[int | None, ...]
    constants: tuple[int, ...]  # the constant starts' values (0 for the others)
    computation: Computation | None = field(compare=False)

    def describe(self) -> str:
        read_back = "; the operand's block read and the update selected in at the start" \
            if any(self.selected) else ""
        return (f"in-place: input {self.operand} aliased to the output "
                f"(input_output_aliases), the starts clamped and prefetched to SMEM, one "
                f"block {self.block} of {self.view} placed by them{read_back}")


def plan_update_in_place(inst: Instruction, inputs: Sequence[Shape]) -> UpdateLayout | str:
    """The in-place layout of a kernel whose root is a dynamic-update-slice, or why it has
    none (module docstring)."""
    comp = inst.calls[0] if inst.op is Op.FUSION else None
    root = comp.root if comp is not None else inst
    operand, update = root.operands[0], root.operands[1]
    if comp is not None and (operand.op is not Op.PARAMETER or
                             sum(id(o) == id(operand) for i in comp.instructions
                                 for o in i.operands) != 1):
        return "the operand is not a kernel input read only by the update"
    operand_index = operand.parameter_number if comp is not None else 0
    if len(inputs) != (len(comp.parameters) if comp is not None else len(root.operands)):
        return "a tuple-shaped input"  # the inputs' leaves are then not the parameters
    if comp is not None and any(i.op is Op.CONSTANT and i.shape.rank for i in comp.instructions):
        return "an array constant in the update's computation"
    starts: list[int | None] = []
    constants: list[int] = []
    for start in root.operands[2:]:
        if start.op is Op.CONSTANT:
            starts.append(None)
            constants.append(int(np.asarray(start.attrs["literal"])))
        elif comp is None or start.op is Op.PARAMETER:
            starts.append(start.parameter_number if comp is not None
                          else root.operands.index(start))
            constants.append(0)
        elif _is_scalar_computation(start):  # JAX's wrap of negative starts, say
            starts.append(-1)
            constants.append(0)
        else:
            return f"the start %{start.name} is computed from arrays"
    view = kernel_dims(operand.shape)
    sizes = kernel_dims(update.shape)
    if operand.shape.rank == 0:
        return "a 0-d operand"
    clamped = [min(max(c, 0), d - u) for c, d, u in
               zip(_view_starts(constants, operand.shape.rank), view, sizes)]
    is_constant = [s is None for s in _view_starts(starts, operand.shape.rank, pad=None)]
    dims: list[tuple[int, bool, int, bool]] = []
    for k, (dim, size) in enumerate(zip(view, sizes)):
        placed = _place(k, len(view), dim, size, is_constant[k], clamped[k],
                        operand.dtype)
        if isinstance(placed, str):
            return placed
        dims.append(placed)
    block = tuple(d[0] for d in dims)
    others = [s for k, s in enumerate(inputs) if k != operand_index]
    if vector_registers(Shape(operand.dtype, block)) > WHOLE_MAX_VREGS or \
            any(s.num_elements > WHOLE_MAX_ELEMENTS or vector_registers(s) > WHOLE_MAX_VREGS
                for s in others):
        return "the update's block or inputs are past the whole-array limits"
    return UpdateLayout(view, block, tuple(d[1] for d in dims), tuple(d[2] for d in dims),
                        tuple(d[3] for d in dims), operand_index, tuple(starts),
                        tuple(constants), comp)


def _is_scalar_computation(inst: Instruction) -> bool:
    """Whether a value is computed from 0-d parameters and constants by 0-d instructions
    only (evaluated outside the kernel, as XLA scalar operations)."""
    if not inst.shape.is_array or inst.shape.rank or inst.calls:
        return False
    return all(_is_scalar_computation(o) for o in inst.operands)


def _scalar_value(inst: Instruction, leaves: Sequence[Value]) -> Value:
    if inst.op is Op.PARAMETER:
        return jnp.reshape(leaves[inst.parameter_number], ())
    return LaxEvaluator().instruction(inst, [_scalar_value(o, leaves) for o in inst.operands])


def _ancestors(inst: Instruction) -> set[int]:
    """The ids of an instruction and of every instruction it reads, transitively."""
    seen: set[int] = set()
    stack = [inst]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            stack.extend(node.operands)
    return seen


def _view_starts(starts: Sequence[Any], rank: int, pad: Any = 0) -> list[Any]:
    """Starts per dimension of the kernel view (a 1-d operand is one row: its start 0)."""
    return [pad, *starts] if rank == 1 else list(starts)


def _place(k: int, rank: int, dim: int, size: int, is_constant: bool, start: int,
           dtype: DType) -> tuple[int, bool, int, bool] | str:
    """(block extent, start read from the prefetch, constant block index, update selected
    in) along dimension `k` of the view, or why no block places the update."""
    tile = (16 if dtype.itemsize == 2 else 8) if k == rank - 2 else \
        (128 if k == rank - 1 else 1)
    if size == dim:
        return dim, False, 0, False
    if size == 1:  # the dimension whole where tiles do not divide it (no partial block)
        block = tile if dim % tile == 0 else dim
        return block, True, 0, block > 1
    if is_constant and size % tile == 0 and start % size == 0:
        return size, False, start // size, False
    where = "a constant start not a multiple of it" if is_constant else "a dynamic start"
    return (f"dimension {k}: an update of {size} at {where} (a block places it at multiples "
            f"of its length only, in whole {tile}-element tiles)")


class UpdateInPlace:
    """The `pallas_call` of an in-place dynamic-update-slice: called with the kernel's input
    leaves, returns the updated operand."""

    def __init__(self, layout: UpdateLayout, instruction: Instruction,
                 input_shapes: Sequence[Shape], output_shape: Shape,
                 interpret: bool, name: str, debug: bool = False) -> None:
        self.layout = layout
        self.instruction = instruction
        self.input_shapes = tuple(input_shapes)
        self.output_shape = output_shape
        self.interpret, self.name, self.debug = interpret, name, debug

    def _starts(self, leaves: Sequence[Value]) -> Value:
        """The starts per view dimension, clamped into [0, dim - update], as int32."""
        layout = self.layout
        root = self.instruction if layout.computation is None else layout.computation.root
        rank = root.shape.rank
        values = [jnp.asarray(c, np.int32) if s is None else
                  _scalar_value(start, leaves) if s == -1 else jnp.reshape(leaves[s], ())
                  for s, c, start in zip(layout.starts, layout.constants, root.operands[2:])]
        sizes = kernel_dims(root.operands[1].shape)
        clamped = []  # clamped in the start's own type, then int32 (the range fits)
        for v, d, u in zip(_view_starts(values, rank, jnp.asarray(0, np.int32)), layout.view,
                           sizes):
            low, high = jnp.asarray(0, v.dtype), jnp.asarray(d - u, v.dtype)
            clamped.append(lax.convert_element_type(lax.clamp(low, v, high), np.int32))
        return jnp.stack(clamped)

    def __call__(self, *leaves: Value) -> list[Value]:
        layout = self.layout
        arrays = [to_kernel(x).reshape(kernel_dims(s)) for x, s in zip(leaves,
                                                                        self.input_shapes)]
        starts = self._starts(leaves)

        def block_index(_: Any, starts_ref: Any) -> tuple[Any, ...]:
            # lax's truncating division (the starts are clamped, never negative): `//`
            # lowers through `sign`, which Mosaic lowers only knowing the chip.
            return tuple(lax.div(starts_ref[k], np.int32(b)) if dynamic else np.int32(fixed)
                         for k, (b, dynamic, fixed) in enumerate(
                             zip(layout.block, layout.dynamic, layout.fixed)))

        place = pl.BlockSpec(layout.block, block_index)
        operand_spec = place if any(layout.selected) else pl.BlockSpec(memory_space=pl.ANY)
        in_specs = [operand_spec if k == layout.operand else whole_spec(s)
                    for k, s in enumerate(self.input_shapes)]
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(1,), in_specs=in_specs, out_specs=place)
        out = pl.pallas_call(
            self._kernel, grid_spec=grid_spec,
            out_shape=jax.ShapeDtypeStruct(layout.view, arrays[layout.operand].dtype),
            input_output_aliases={1 + layout.operand: 0},
            interpret=self.interpret, debug=self.debug, name=self.name,
            compiler_params=pltpu.CompilerParams(vmem_limit_bytes=VMEM_LIMIT))(starts, *arrays)
        return [from_kernel(out, self.output_shape)]

    def _kernel(self, starts_ref: Any, *refs: Any) -> None:
        layout = self.layout
        in_refs, out_ref = refs[:-1], refs[-1]
        update = self._update(in_refs)
        value = jnp.broadcast_to(update, layout.block)
        if any(layout.selected):
            inside = functools.reduce(jnp.logical_and, [
                lax.broadcasted_iota(np.int32, layout.block, k) ==
                lax.rem(starts_ref[k], np.int32(layout.block[k]))
                for k, selected in enumerate(layout.selected) if selected])
            old = in_refs[layout.operand][...]
            value = jnp.where(inside, value.astype(old.dtype), old)
        write(out_ref, value)

    def _update(self, in_refs: Sequence[Any]) -> Value:
        """The update's value: an input of the unfused instruction, or the fused computation
        evaluated up to it (whole arrays, 0-d values from SMEM)."""
        layout = self.layout
        values = [None if k == layout.operand else read(r, s)
                  for k, (r, s) in enumerate(zip(in_refs, self.input_shapes))]
        comp = layout.computation
        if comp is None:
            return _as_view(values[1], self.instruction.operands[1].shape)
        evaluator = WordEvaluator()
        env: dict[int, Value] = {}
        target = comp.root.operands[1]
        needed = _ancestors(target)
        for inst in comp.instructions:
            if id(inst) not in needed:
                continue
            if inst.op is Op.PARAMETER:
                env[id(inst)] = values[inst.parameter_number]
            else:
                env[id(inst)] = evaluator.instruction(inst, [env[id(o)] for o in inst.operands])
        return _as_view(env[id(target)], target.shape)


def _as_view(value: Value, shape: Shape) -> Value:
    """A whole value in the kernel's view of its shape (a 1-d one as one row); booleans as
    int32."""
    if value.dtype == jnp.bool_:
        value = value.astype(jnp.int32)
    return jnp.reshape(value, kernel_dims(shape))
