"""One kernel of the program as one `pallas_call`, or, where Mosaic cannot lower it, as one
XLA operation named as such.

A kernel is a fusion (its fused computation) or one unfused computing instruction. Its body
is the computation evaluated with `lax` (`evaluate.py`) on the values of its blocks:

- **tiled**: a kernel whose instructions are all element-wise over arrays of one shape (0-d
  values broadcast) runs over the flattened arrays laid out as (rows, 128) tiles, a grid of
  blocks of as many rows as VMEM holds (`block_rows`); 0-d inputs come through SMEM;
- **whole**: any other kernel Mosaic lowers takes its arrays whole, as one block each;
- **xla-op**: a kernel with an instruction Mosaic does not lower in a kernel (see
  `refusal`) is evaluated with `lax` outside any `pallas_call`: an XLA operation of the
  jitted program. Instructions with no `lax` form at all run on the host (`lax_ops.host`).

Booleans cross the kernel boundary as int32 (Mosaic keeps no i1 arrays in memory), 8- and
16-bit integers as int32 words in every mode, XLA operations included (`words.py`), and 0-d
values as 1-element arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from hlofuse.analysis.reducers import reducer_op
from hlofuse.analysis.whole_loop_config import read_whole_loop_config
from hlofuse.ir.attrs import SliceDim
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction, reachable_computations
from hlofuse.ir.ops import FusionKind, Op
from hlofuse.ir.shapes import Shape
from hlofuse.reference.rnglib import THREEFRY_TARGET
from hlofuse.runtime.program import leaf_paths
from hlofuse.targets.tpu.blocks import (
    VMEM_LIMIT,
    WHOLE_MAX_ELEMENTS,
    WHOLE_MAX_VREGS,
    block_rows,
    from_kernel,
    is_blockwise,
    kernel_dims,
    kernel_dtype,
    kernel_name,
    kernel_struct,
    read,
    tiles,
    tiles_dims,
    to_kernel,
    vector_registers,
    whole_spec,
    write,
)
from hlofuse.targets.tpu.evaluate import LaxEvaluator
from hlofuse.targets.tpu.lane_values import Unlowerable
from hlofuse.targets.tpu.lax_ops import (
    BLOCK_ZERO,
    ELEMENTWISE,
    Value,
    runs_on_host,
    whole_block,
)
from hlofuse.targets.tpu.reduce_tiled import ReduceLayout, TiledReduce, plan_tiled_reduce
from hlofuse.targets.tpu.shape_casts import shape_cast_refusal
from hlofuse.targets.tpu.update_in_place import UpdateInPlace, UpdateLayout, plan_update_in_place
from hlofuse.targets.tpu.whole_loop import LaneKernel, LaneLayout, plan_lanes
from hlofuse.targets.tpu.words import WordEvaluator, is_narrow, narrowed, native_refusal, widen

# What Mosaic keeps in kernels: 32-bit words and bf16; booleans cross as int32, and 8- and
# 16-bit integers are computed in int32 words (words.py).
KERNEL_DTYPES = frozenset({DType.F32, DType.BF16, DType.S32, DType.U32, DType.PRED,
                           DType.S8, DType.U8, DType.S16, DType.U16})
_STRUCTURE = frozenset({Op.PARAMETER, Op.CONSTANT, Op.TUPLE, Op.GET_TUPLE_ELEMENT})
# Data movement and control Mosaic lowers inside a kernel (on whole arrays).
_IN_KERNEL = ELEMENTWISE | _STRUCTURE | {
    Op.IOTA, Op.BROADCAST, Op.RESHAPE, Op.BITCAST, Op.COPY, Op.TRANSPOSE, Op.SLICE,
    Op.CONCATENATE, Op.WHILE, Op.CALL, Op.REDUCE, Op.DOT}
# Element-wise ops Mosaic has no lowering for (JAX 0.10.2).
_NOT_LOWERED = frozenset({Op.EXPONENTIAL_MINUS_ONE, Op.REDUCE_PRECISION, Op.CBRT, Op.SIGN})
_KERNEL_REDUCERS = frozenset({Op.ADD, Op.MAXIMUM, Op.MINIMUM})


@dataclass
class Kernel:
    """One kernel call site: what the listing and the profile show, and how to call it."""

    name: str
    kind: str  # the fusion kind or the opcode
    instructions: tuple[str, ...]
    mode: str  # "pallas" or "xla-op"
    layout: str  # "tiled", "whole" or "" (xla-op)
    reason: str  # why an XLA operation
    host_ops: tuple[str, ...]  # instructions evaluated by the interpreter on the host
    computation: Computation | None  # the fused computation (None: one instruction)
    instruction: Instruction
    input_shapes: tuple[Shape, ...]
    output_shapes: tuple[Shape, ...]
    block_rows: int = 0
    grid: int = 1
    interpret: bool = False
    debug: bool = False  # pallas_call prints its jaxpr and Mosaic module (--emit mosaic)
    constants: tuple[Instruction, ...] = ()
    lanes: LaneLayout | None = None  # a whole-loop fusion's layout on lane tiles
    reduction: ReduceLayout | None = None  # a tiled reduction's blocks (reduce_tiled.py)
    update: UpdateLayout | None = None  # a dynamic-update-slice in place (update_in_place.py)
    _call: Callable[..., list[Value]] | None = field(default=None, repr=False)

    @property
    def bytes_read(self) -> int:
        return sum(s.byte_size for s in self.input_shapes) + \
            sum(c.shape.byte_size for c in self.constants)

    @property
    def bytes_written(self) -> int:
        return sum(s.byte_size for s in self.output_shapes)

    def __call__(self, *leaves: Value) -> list[Value]:
        if self._call is None:
            self._call = self._build()
        try:
            return self._call(*leaves)
        except Unlowerable as e:
            # Found while tracing the whole-loop kernel (a per-lane read over too many
            # positions, too much written-out work): the loop runs as an XLA operation.
            self.as_xla_op(f"{e.rule}: {e}")
            return self(*leaves)

    def as_xla_op(self, reason: str) -> None:
        """Run this kernel as an XLA operation from now on (Mosaic refused it)."""
        self.mode, self.layout, self.reason, self._call = "xla-op", "", reason, None
        self.lanes = self.reduction = self.update = None

    # --- evaluation --------------------------------------------------------------------

    def evaluate(self, evaluator: LaxEvaluator, leaves: Sequence[Value]) -> Value:
        """The kernel's value from its input leaves (operand trees rebuilt)."""
        operands = rebuild_all([*self._operand_shapes()], list(leaves))
        if self.computation is not None:
            return evaluator.run(self.computation, operands)
        return evaluator.instruction(self.instruction, operands)

    def _operand_shapes(self) -> list[Shape]:
        if self.computation is not None:
            return [p.shape for p in self.computation.parameters]
        return [o.shape for o in self.instruction.operands]

    def _build(self) -> Callable[..., list[Value]]:
        if self.mode == "xla-op":
            return self._xla_op
        if self.lanes is not None:
            return LaneKernel(self.lanes, self.interpret, kernel_name(self.name), self.debug)
        if self.update is not None:
            return UpdateInPlace(self.update, self.instruction, self.input_shapes,
                                 self.output_shapes[0], self.interpret, kernel_name(self.name),
                                 self.debug)
        if self.reduction is not None:
            return TiledReduce(self.reduction, self.instruction, self.input_shapes,
                               self.output_shapes, self.interpret, kernel_name(self.name),
                               self.debug)
        return self._tiled if self.layout == "tiled" else self._whole

    @property
    def word_types(self) -> tuple[str, ...]:
        """The 8- and 16-bit integer types this kernel computes in int32 words (words.py);
        the whole-loop kernel's words are its own (lane_words.py)."""
        if self.lanes is not None:
            return ()
        shapes = [*self.input_shapes, *self.output_shapes, *(i.shape for i in self._body())]
        return tuple(sorted({leaf.dtype.text for s in shapes for leaf in s.leaves()
                             if is_narrow(leaf.dtype)}))

    def _body(self) -> list[Instruction]:
        return _instructions(self.computation) if self.computation is not None \
            else [self.instruction]

    def _xla_op(self, *leaves: Value) -> list[Value]:
        words = [widen(x, s.dtype) for x, s in zip(leaves, self.input_shapes)]
        out = flatten_leaves(self.evaluate(WordEvaluator(), words))
        return [narrowed(x, s.dtype) for x, s in zip(out, self.output_shapes)]

    def _whole(self, *leaves: Value) -> list[Value]:
        constant_values = [np.asarray(c.attrs["literal"], c.dtype.numpy) for c in self.constants]
        shapes = (*self.input_shapes, *(c.shape for c in self.constants))
        arrays = [to_kernel(x).reshape(kernel_dims(s))
                  for x, s in zip((*leaves, *constant_values), shapes)]
        n_leaves = len(leaves)

        def kernel(*refs: Any) -> None:
            values = [read(r, s) for r, s in zip(refs, self.input_shapes)]
            constants = {id(c): read(r, c.shape)
                         for c, r in zip(self.constants, refs[n_leaves:])}
            result = self.evaluate(WordEvaluator(constants=constants), values)
            for ref, value in zip(refs[len(arrays):], flatten_leaves(result)):
                write(ref, value)

        out = pl.pallas_call(
            kernel, out_shape=[kernel_struct(s) for s in self.output_shapes],
            in_specs=[whole_spec(s) for s in shapes],
            out_specs=[whole_spec(s) for s in self.output_shapes],
            interpret=self.interpret, debug=self.debug, name=kernel_name(self.name),
            compiler_params=pltpu.CompilerParams(vmem_limit_bytes=VMEM_LIMIT))(*arrays)
        return [from_kernel(o, s) for o, s in zip(out, self.output_shapes)]

    def _tiled(self, *leaves: Value) -> list[Value]:
        dims = self.output_shapes[0].dims
        rows = self.block_rows
        arrays = [to_kernel(x) if jnp.ndim(x) == 0 else tiles(to_kernel(x)) for x in leaves]
        tiled_dims = tiles_dims(int(np.prod(dims)))
        block = (rows, tiled_dims[1])
        # Blocks whose rows do not divide the arrays' (`block_rows` found no divisor): the
        # arrays padded to whole blocks and the outputs cut back, never a partial block.
        pad = self.grid * rows - tiled_dims[0]
        if pad > 0:
            arrays = [x if jnp.ndim(x) == 0 else jnp.pad(x, ((0, pad), (0, 0))) for x in arrays]

        def kernel(*refs: Any) -> None:
            values = [read(r, s, whole=False) for r, s in zip(refs, self.input_shapes)]
            start = pl.program_id(0) * np.int32(block[0] * block[1])
            result = self.evaluate(WordEvaluator(block_shape=block, block_start=start), values)
            for ref, value in zip(refs[len(arrays):], flatten_leaves(result)):
                write(ref, value)

        def spec(shape: Shape) -> pl.BlockSpec:
            if shape.rank == 0:  # a 0-d input as a (1, 1) array: whole, in SMEM
                return whole_block(2, pltpu.SMEM)
            return pl.BlockSpec(block, lambda i: (i, BLOCK_ZERO))

        out = pl.pallas_call(
            kernel, grid=(self.grid,),
            out_shape=[jax.ShapeDtypeStruct((tiled_dims[0] + max(pad, 0), tiled_dims[1]),
                                            kernel_dtype(s.dtype))
                       for s in self.output_shapes],
            in_specs=[spec(s) for s in self.input_shapes],
            out_specs=[pl.BlockSpec(block, lambda i: (i, BLOCK_ZERO)) for _ in self.output_shapes],
            interpret=self.interpret, debug=self.debug, name=kernel_name(self.name),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",),
                                                 vmem_limit_bytes=VMEM_LIMIT))(*arrays)
        return [from_kernel(o[:tiled_dims[0]].reshape(s.dims), s)
                for o, s in zip(out, self.output_shapes)]


def plan_kernel(inst: Instruction, interpret: bool) -> Kernel:
    """The kernel of a fusion or unfused computing instruction: its mode and layout."""
    if inst.op is Op.FUSION:
        comp: Computation | None = inst.calls[0]
        assert comp is not None
        kind = str(inst.attrs.get("kind", FusionKind.LOOP))
        body = _instructions(comp)
        names = tuple(i.name for i in comp.instructions if i.op is not Op.PARAMETER)
        constants = tuple(i for i in body if i.op is Op.CONSTANT and i.shape.rank > 0)
        operand_shapes = [p.shape for p in comp.parameters]
    else:
        comp, kind, body, names = None, inst.op.text, [inst], (inst.name,)
        constants = ()
        operand_shapes = [o.shape for o in inst.operands]
    inputs = tuple(_leaf_shapes(operand_shapes))
    outputs = tuple(_leaf_shapes([inst.shape]))
    host = tuple(i.name for i in body if runs_on_host(i))
    kernel = Kernel(inst.name, kind, names, "pallas", "whole", "", host, comp, inst, inputs,
                    outputs, interpret=interpret, constants=constants)
    if kind == FusionKind.CUSTOM and _is_whole_loop(inst):
        layout = plan_lanes(inst)
        if isinstance(layout, LaneLayout):
            kernel.layout, kernel.lanes, kernel.constants = "lanes", layout, ()
        else:
            kernel.as_xla_op(str(layout))
            kernel.constants = ()
        return kernel
    in_place = _plan_in_place(kernel, body)
    if in_place is None:
        return kernel
    reason = refusal(body, inputs, outputs)
    tiled = reason is None and _is_tiled(body, inputs, outputs)
    largest = max((s.num_elements for s in (*inputs, *outputs)), default=0)
    widest = max((*inputs, *outputs), key=vector_registers, default=None)
    too_large = largest > WHOLE_MAX_ELEMENTS or \
        (widest is not None and vector_registers(widest) > WHOLE_MAX_VREGS)
    # A tiled reduction evaluates a pad (XLA's tree reduction pads a reduce's input to whole
    # rows) as a select on the element's position, which Mosaic lowers.
    unpadded = [i for i in body if i.op is not Op.PAD]
    reduction = plan_tiled_reduce(inst, body, inputs) \
        if not tiled and too_large and refusal(unpadded, inputs, outputs) is None else None
    if reduction is not None:
        kernel.layout, kernel.reduction, kernel.constants = "tiled-reduce", reduction, ()
        return kernel
    if reason is None and not tiled and largest > WHOLE_MAX_ELEMENTS:
        reason = (f"arrays of {largest} elements: only element-wise kernels and reductions "
                  "of them (reduce_tiled.py) are tiled, and "
                  f"whole-array kernels are kept to {WHOLE_MAX_ELEMENTS} elements (Mosaic "
                  "unrolls every vector operation over the whole array)")
    elif reason is None and not tiled and widest is not None and \
            vector_registers(widest) > WHOLE_MAX_VREGS:
        reason = (f"{widest.text(False)} takes {vector_registers(widest)} vector registers "
                  f"as {kernel_dims(widest)} tiles: only element-wise kernels and "
                  "reductions of them (reduce_tiled.py) are tiled, and "
                  f"a whole-array kernel's values are kept to {WHOLE_MAX_VREGS} registers each "
                  "(Mosaic unrolls every vector operation over the whole array)")
    elif reason is None and not tiled:
        reason = shape_cast_refusal(body)
    if reason is not None:
        kernel.as_xla_op(reason + (f"; not in place: {in_place}" if in_place else ""))
        kernel.constants = ()
    elif tiled:
        size = int(np.prod(outputs[0].dims))
        rows = tiles_dims(size)[0]
        kernel.layout = "tiled"
        kernel.block_rows = block_rows(rows, (*inputs, *outputs), len(body))
        kernel.grid = -(-rows // kernel.block_rows)
    return kernel


def _plan_in_place(kernel: Kernel, body: list[Instruction]) -> str | None:
    """Lay a kernel whose root is a dynamic-update-slice out in place (update_in_place.py);
    returns None when it is, else why not ("" where the kernel's own reason says it: another
    root, or an instruction Mosaic does not lower)."""
    root = kernel.computation.root if kernel.computation is not None else kernel.instruction
    if root.op is not Op.DYNAMIC_UPDATE_SLICE:
        return ""
    if refusal([i for i in body if i is not root], kernel.input_shapes,
               kernel.output_shapes) is not None:
        return ""  # the kernel's own refusal names the instruction Mosaic does not lower
    placed = plan_update_in_place(kernel.instruction, kernel.input_shapes)
    if isinstance(placed, str):
        return placed
    kernel.layout, kernel.update, kernel.constants = "in-place", placed, ()
    return None


def _is_whole_loop(inst: Instruction) -> bool:
    config = next((raw.text for key, raw in inst.extra if key == "backend_config"), "")
    return read_whole_loop_config(config) is not None


def refusal(body: list[Instruction], inputs: Sequence[Shape],
            outputs: Sequence[Shape]) -> str | None:
    """Why the kernel cannot be a Pallas kernel on the TPU (None when it can): the first
    instruction Mosaic does not lower there, named with its op."""
    if not outputs:
        return "the kernel writes no array"
    for shape in (*inputs, *outputs):
        if shape.dtype not in KERNEL_DTYPES:
            return (f"{shape.dtype.text} values (Mosaic keeps 32-bit and bf16 types, and "
                    "narrower integers as int32 words)")
    for inst in body:
        why = _instruction_refusal(inst)
        if why is not None:
            return f"%{inst.name} ({inst.op.text}): {why}"
    return None


def _instruction_refusal(inst: Instruction) -> str | None:
    why = _op_refusal(inst)
    return why if why is not None else native_refusal(inst)


def _op_refusal(inst: Instruction) -> str | None:
    for leaf in _leaf_shapes([inst.shape]):
        if leaf.dtype not in KERNEL_DTYPES:
            return f"{leaf.dtype.text} (Mosaic keeps 32-bit and bf16 types only)"
    op = inst.op
    if op is Op.CUSTOM_CALL:
        if inst.attrs.get("custom_call_target") == THREEFRY_TARGET:
            return None
        return "a library call (run on the host)"
    if runs_on_host(inst):
        return "no lax form: evaluated by the interpreter on the host"
    if op not in _IN_KERNEL or op in _NOT_LOWERED:
        return "Mosaic does not lower it in a kernel"
    if op is Op.REDUCE:
        if len(inst.operands) != 2 or reducer_op(inst.calls[0]) not in _KERNEL_REDUCERS:
            return "only add, max and min reductions of one array lower in a kernel"
    if op is Op.SLICE and _strided(inst):
        return "strided slices do not lower in a kernel"
    if op is Op.DOT:
        if inst.ints("lhs_batch_dims") or inst.shape.rank > 2 or not inst.dtype.is_float:
            return "only float matrix products without batch dimensions lower in a kernel"
    return None


def _strided(inst: Instruction) -> bool:
    spec = inst.attrs["slice"]
    assert isinstance(spec, tuple)
    return any(isinstance(d, SliceDim) and d.stride != 1 for d in spec)


def _is_tiled(body: list[Instruction], inputs: Sequence[Shape],
              outputs: Sequence[Shape]) -> bool:
    """Element-wise over arrays of one shape (`is_blockwise`), the root tuple aside."""
    dims = outputs[0].dims
    if not dims or any(s.dims != dims for s in outputs) \
            or any(s.dims not in (dims, ()) for s in inputs):
        return False
    return all(inst.op is Op.TUPLE or is_blockwise(inst, dims) for inst in body)


def _instructions(comp: Computation) -> list[Instruction]:
    """Every instruction of a computation and of what it calls, the computation's first."""
    return [inst for c in reversed(reachable_computations(comp)) for inst in c.instructions]


# --- values across the kernel boundary -------------------------------------------------

def _leaf_shapes(shapes: Sequence[Shape]) -> list[Shape]:
    out = []
    for shape in shapes:
        for path in leaf_paths(shape):
            leaf = shape
            for k in path:
                leaf = leaf.elements[k]
            out.append(leaf)
    return out


def rebuild_all(shapes: list[Shape], leaves: list[Value]) -> list[Value]:
    it = iter(leaves)
    return [rebuild(s, it) for s in shapes]


def rebuild(shape: Shape, leaves: Any) -> Value:
    if shape.is_tuple:
        return tuple(rebuild(e, leaves) for e in shape.elements)
    return next(leaves) if shape.is_array else None


def flatten_leaves(value: Value) -> list[Value]:
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in flatten_leaves(v)]
    return [] if value is None else [value]


