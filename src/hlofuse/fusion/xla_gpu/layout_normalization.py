"""XLA's layout assignment and layout normalisation for `xla-gpu`: the module rewritten so
every array is computed in the physical order layout assignment gave it, with row-major
shapes only.

XLA's GPU pipeline assigns layouts (`layout_assignment.py`) and then rewrites every op over
its physical shape (`LayoutNormalization`, `xla/service/layout_normalization.cc`, after the
`ReshapeDecomposer`): a copy that changes the layout becomes a transpose, a transpose or
reshape whose operand is laid out so it moves no byte becomes a bitcast (a row-major reshape
here, which launches nothing), and an element-wise op, concatenate, slice, broadcast, iota,
pad, reverse, dynamic slice or update and reduction runs over the permuted shape with its
dimension numbers permuted. So `transpose(concatenate(a, b))` whose result must be row-major
becomes a concatenate along the minor dimension of the transposed operands, and no transpose
kernel is left. Other ops with a non-default layout are computed row-major between
transposes (XLA's normalisation handles a few more of them itself).

Where the model does not cover the module (`LayoutNotModelled`), the module is left as it is
and the refusal logged (rule `layout-not-modelled`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from hlofuse.analysis.call_graph import callee_order
from hlofuse.fusion.xla_gpu.layout_assignment import (
    KEEPS_LAYOUT,
    Assignment,
    Index,
    Layout,
    LayoutNotModelled,
    assign_layouts,
    physical_order,
    reshape_is_bitcast,
    while_loops,
)
from hlofuse.ir.attrs import PaddingDim, SliceDim
from hlofuse.ir.builder import NameUniquer
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape, default_layout
from hlofuse.passes.decision_log import DecisionSink, RewriteLog

PASS_NAME = "layout-assignment"
# Ops whose dimension numbers normalisation rewrites (or that it leaves row-major).
_STRUCTURED = frozenset({
    Op.CONCATENATE, Op.DYNAMIC_SLICE, Op.DYNAMIC_UPDATE_SLICE, Op.PAD, Op.REDUCE_WINDOW,
    Op.REVERSE, Op.SCATTER, Op.SELECT_AND_SCATTER, Op.SLICE, Op.SORT, Op.TRIANGULAR_SOLVE,
    Op.CHOLESKY, Op.WHILE, Op.TOPK, Op.OPT_BARRIER})
ELEMENTWISE = KEEPS_LAYOUT - _STRUCTURED


def positions(layout: Layout) -> dict[int, int]:
    """Logical dimension -> its place in the physical (major-to-minor) order."""
    return {d: i for i, d in enumerate(physical_order(layout))}


def physical_shape(shape: Shape, layout: Layout) -> Shape:
    return Shape(shape.dtype, tuple(shape.dims[d] for d in physical_order(layout)))


class _Normaliser:
    """Rebuilds the computations with layouts: the entry and its loops' bodies and
    conditions; the scalar computations reductions and maps call stay as they are."""

    def __init__(self, module: Module, assignment: Assignment, records: RewriteLog) -> None:
        self.module = module
        self.assignment = assignment
        self.records = records
        self.names = NameUniquer()
        for inst in module.all_instructions():
            self.names.reserve(inst.name)
        self.rebuilt: dict[Computation, Computation] = {}

    # -- values ----------------------------------------------------------------------------

    def layout(self, inst: Instruction, index: Index = ()) -> Layout:
        return self.assignment.layout_of(inst, index)

    def _new(self, op: Op, operands: Sequence[Instruction], shape: Shape,
             attrs: dict[str, object] | None = None, like: Instruction | None = None,
             name: str | None = None, calls: tuple[Computation, ...] = ()) -> Instruction:
        inst = Instruction(name if name is not None else self.names.unique(op.text), op,
                           tuple(operands), shape,
                           MappingProxyType(dict(attrs or {})), calls,
                           like.metadata if like is not None else None,
                           like.extra if like is not None and name is not None else ())
        self.order.append(inst)
        return inst

    def relayout(self, value: Instruction, logical: Shape, source: Layout,
                 target: Layout, like: Instruction, name: str | None = None) -> Instruction:
        """`value` (`logical` laid out as `source`) laid out as `target`: a copy, which
        normalisation writes as a transpose (named `name`, else a new name); a bitcast
        where only dimensions of size 1 move; nothing where the orders agree."""
        if source == target or logical.rank <= 1:
            return value
        where = positions(source)
        permutation = tuple(where[d] for d in physical_order(target))
        shape = physical_shape(logical, target)
        moved = [p for p in permutation if value.shape.dims[p] != 1]
        if moved == sorted(moved):
            if shape.dims == value.shape.dims:
                return value
            return self._new(Op.RESHAPE, [value], shape, like=like, name=name)
        if name is None:
            self.records.rewrote(self.current, like, "layout-copy",
                                 f"%{like.name} is laid out {{{','.join(map(str, source))}}}, "
                                 f"its user wants {{{','.join(map(str, target))}}}: "
                                 "a transpose")
        return self._new(Op.TRANSPOSE, [value], shape, {"dimensions": permutation}, like=like,
                         name=name)

    def operand(self, user: Instruction, k: int) -> tuple[Instruction, Layout]:
        """Operand `k` of `user`, normalised, laid out as `user`'s constraint wants it (XLA's
        copy where it differs), with that layout."""
        operand = user.operands[k]
        value = self.values[operand]
        wanted = self.assignment.operands.get((user, k))
        if operand.shape.is_tuple:
            if wanted and any(self.layout(operand, i) != layout for i, layout in wanted.items()):
                value = self.tuple_as(value, operand, wanted)
            return value, ()
        own = self.layout(operand)
        if wanted is None:
            return value, own
        return self.relayout(value, operand.shape, own, wanted[()], operand), wanted[()]

    def tuple_as(self, value: Instruction, logical: Instruction,
                 wanted: dict[Index, Layout], prefix: Index = ()) -> Instruction:
        """A tuple whose leaves are laid out as `wanted` says (CreateCopyWithNewLayout)."""
        shape = logical.shape
        for i in prefix:
            shape = shape.elements[i]
        elements = []
        for i, element in enumerate(shape.elements):
            index = prefix + (i,)
            part = self._new(Op.GET_TUPLE_ELEMENT, [value], value.shape.elements[i],
                             {"index": i})
            if element.is_tuple:
                part = self.tuple_as(part, logical, wanted, index)
            elif element.is_array and index in wanted:
                part = self.relayout(part, element, self.layout(logical, index), wanted[index],
                                     logical)
            elements.append(part)
        return self._new(Op.TUPLE, elements, Shape.tuple_of([e.shape for e in elements]))

    def physical(self, shape: Shape, inst: Instruction, index: Index = ()) -> Shape:
        if shape.is_tuple:
            return Shape.tuple_of([self.physical(e, inst, index + (i,))
                                   for i, e in enumerate(shape.elements)])
        if not shape.is_array or shape.rank <= 1:
            return Shape(shape.dtype, shape.dims, shape.elements)
        return physical_shape(shape, self.layout(inst, index))

    # -- computations ----------------------------------------------------------------------

    def computation(self, comp: Computation, result: dict[Index, Layout] | None) -> Computation:
        self.current = comp.name
        self.order: list[Instruction] = []
        self.values: dict[Instruction, Instruction] = {}
        for inst in comp.instructions:
            self.values[inst] = self.instruction(inst)
        root = self.values[comp.root]
        if result is not None:
            if comp.root.shape.is_tuple:
                if any(self.layout(comp.root, i) != layout for i, layout in result.items()):
                    root = self.tuple_as(root, comp.root, result)
            else:
                root = self.relayout(root, comp.root.shape, self.layout(comp.root),
                                     result[()], comp.root)
        return Computation(comp.name, tuple(self.order), root)

    def instruction(self, inst: Instruction) -> Instruction:
        shape = inst.shape
        out = self.layout(inst) if shape.is_array and shape.rank > 1 else default_layout(
            shape.rank if shape.is_array else 0)
        calls = tuple(self.rebuilt.get(c, c) for c in inst.calls)
        if inst.op is Op.PARAMETER:
            return self._new(inst.op, [], self.physical(shape, inst), dict(inst.attrs), inst,
                             inst.name)
        if inst.op in (Op.GET_TUPLE_ELEMENT, Op.TUPLE, Op.WHILE):
            operands = [self.operand(inst, k)[0] for k in range(len(inst.operands))]
            return self._new(inst.op, operands, self.physical(shape, inst), dict(inst.attrs),
                             inst, inst.name, calls)
        pairs = [self.operand(inst, k) for k in range(len(inst.operands))]
        operand_layouts = [p[1] for p in pairs]
        if (not shape.is_array or shape.rank <= 1 or out == default_layout(shape.rank)) and all(
                layout == default_layout(len(layout)) for layout in operand_layouts):
            return self._new(inst.op, [p[0] for p in pairs], _plain(shape), dict(inst.attrs),
                             inst, inst.name, calls)
        return self.laid_out(inst, pairs, out, calls)

    def laid_out(self, inst: Instruction, pairs: list[tuple[Instruction, Layout]],
                 out: Layout, calls: tuple[Computation, ...]) -> Instruction:
        """`inst` over physical shapes (LayoutNormalization's handlers): a new instruction
        with a new name, as XLA's normaliser makes (`concatenate`, `multiply.N`): it ranks
        after every instruction of the module before optimisation in priority ties."""
        op, attrs = inst.op, dict(inst.attrs)
        shape = physical_shape(inst.shape, out)
        where = positions(out)
        order = physical_order(out)

        def same_as_output(k: int) -> Instruction:
            value, layout = pairs[k]
            operand = inst.operands[k]
            if operand.shape.rank != inst.shape.rank or operand.shape.rank <= 1:
                return value
            return self.relayout(value, operand.shape, layout, out, operand)

        if op in ELEMENTWISE:
            operands = [same_as_output(k) for k in range(len(pairs))]
            return self._new(op, operands, shape, attrs, inst, calls=calls)
        if op in (Op.TRANSPOSE, Op.COPY):
            value, source = pairs[0]
            permutation = inst.ints("dimensions") if op is Op.TRANSPOSE else tuple(
                range(inst.shape.rank))
            mapped = tuple(permutation[d] for d in physical_order(out))
            source_layout = tuple(reversed(mapped))
            result = self.relayout(value, inst.operands[0].shape, source, source_layout, inst,
                                   self.names.unique(op.text))
            if result.op is not Op.TRANSPOSE:
                self.records.rewrote(self.current, inst, "layout-bitcast",
                                     f"%{inst.name} moves no byte under its layouts: a bitcast")
            return result
        if op is Op.RESHAPE:
            value, source = pairs[0]
            operand = inst.operands[0]
            if not reshape_is_bitcast(operand.shape.dims, source, inst.shape.dims, out):
                value = self.relayout(value, operand.shape, source,
                                      default_layout(operand.shape.rank), operand)
                value = self._new(Op.RESHAPE, [value], inst.shape, like=inst)
                return self.relayout(value, inst.shape, default_layout(inst.shape.rank), out,
                                     inst)
            if value.shape.dims == shape.dims:
                return value
            return self._new(Op.RESHAPE, [value], shape, like=inst)
        if op is Op.BROADCAST:
            value, source = pairs[0]
            kept = inst.ints("dimensions")
            operand = inst.operands[0]
            if operand.shape.rank > 1:
                wanted = tuple(sorted(range(len(kept)), key=lambda d: -where[kept[d]]))
                value = self.relayout(value, operand.shape, source, wanted, operand)
                source = wanted
            mapped = tuple(where[kept[d]] for d in physical_order(source)) if kept else ()
            return self._new(op, [value], shape, {"dimensions": mapped}, inst)
        if op is Op.IOTA:
            attrs["iota_dimension"] = where[int(attrs["iota_dimension"])]  # type: ignore[call-overload]
            return self._new(op, [], shape, attrs, inst)
        if op is Op.CONSTANT:
            literal = np.asarray(attrs["literal"]).transpose(order)
            attrs["literal"] = np.ascontiguousarray(literal)
            return self._new(op, [], shape, attrs, inst)
        if op is Op.SLICE:
            dims: tuple[SliceDim, ...] = inst.attrs["slice"]  # type: ignore[assignment]
            attrs["slice"] = tuple(dims[d] for d in order)
            return self._new(op, [same_as_output(0)], shape, attrs, inst)
        if op is Op.PAD:
            padding: tuple[PaddingDim, ...] = inst.attrs["padding"]  # type: ignore[assignment]
            attrs["padding"] = tuple(padding[d] for d in order)
            return self._new(op, [same_as_output(0), pairs[1][0]], shape, attrs, inst)
        if op is Op.REVERSE:
            attrs["dimensions"] = tuple(sorted(where[d] for d in inst.ints("dimensions")))
            return self._new(op, [same_as_output(0)], shape, attrs, inst)
        if op is Op.CONCATENATE:
            attrs["dimensions"] = (where[inst.ints("dimensions")[0]],)
            operands = [same_as_output(k) for k in range(len(pairs))]
            return self._new(op, operands, shape, attrs, inst)
        if op is Op.DYNAMIC_SLICE:
            sizes = inst.ints("dynamic_slice_sizes")
            attrs["dynamic_slice_sizes"] = tuple(sizes[d] for d in order)
            indices = [pairs[1 + d][0] for d in order]
            return self._new(op, [same_as_output(0), *indices], shape, attrs, inst)
        if op is Op.DYNAMIC_UPDATE_SLICE:
            indices = [pairs[2 + d][0] for d in order]
            return self._new(op, [same_as_output(0), same_as_output(1), *indices], shape,
                             attrs, inst)
        if op is Op.REDUCE and inst.shape.is_array and len(pairs) == 2:
            return self.reduce(inst, pairs, out, calls)
        return self.row_major(inst, pairs, out, calls)

    def reduce(self, inst: Instruction, pairs: list[tuple[Instruction, Layout]], out: Layout,
               calls: tuple[Computation, ...]) -> Instruction:
        """A reduction over the operand's physical shape; its result, the kept dimensions in
        the operand's order, transposed if the output's layout is another."""
        value, source = pairs[0]
        reduced = inst.ints("dimensions")
        where = positions(source)
        kept = [d for d in physical_order(source) if d not in reduced]
        numbering = {d: i for i, d in enumerate(sorted(kept))}
        result_layout = tuple(reversed([numbering[d] for d in kept]))
        shape = physical_shape(inst.shape, result_layout)
        attrs = dict(inst.attrs)
        attrs["dimensions"] = tuple(sorted(where[d] for d in reduced))
        result = self._new(Op.REDUCE, [value, pairs[1][0]], shape, attrs, inst, calls=calls)
        return self.relayout(result, inst.shape, result_layout, out, inst)

    def row_major(self, inst: Instruction, pairs: list[tuple[Instruction, Layout]],
                  out: Layout, calls: tuple[Computation, ...]) -> Instruction:
        """An op normalisation is not modelled for: computed row-major, between transposes."""
        operands = []
        for (value, layout), operand in zip(pairs, inst.operands, strict=True):
            if operand.shape.is_array and operand.shape.rank > 1:
                value = self.relayout(value, operand.shape, layout,
                                      default_layout(operand.shape.rank), operand)
            operands.append(value)
        self.records.rewrote(self.current, inst, "layout-row-major",
                             f"%{inst.name} ({inst.op.text}) is computed row-major")
        result = self._new(inst.op, operands, inst.shape, dict(inst.attrs), inst, inst.name,
                           calls)
        if inst.shape.is_array and inst.shape.rank > 1:
            return self.relayout(result, inst.shape, default_layout(inst.shape.rank), out, inst)
        return result

    def module_laid_out(self) -> Module:
        loops = {comp: loop for loop in while_loops(self.module) for comp in loop.calls}
        for comp in callee_order(self.module):
            if comp is self.module.entry or comp in loops:
                layout = self.assignment.computations.get(comp)
                result = layout.result if layout is not None else None
                if comp in loops and comp is loops[comp].calls[0]:
                    result = None
                self.rebuilt[comp] = self.computation(comp, result)
        computations = tuple(self.rebuilt.get(c, c) for c in callee_order(self.module))
        return Module(self.module.name, computations, self.rebuilt[self.module.entry],
                      self.module.debug_tables)


@dataclass(frozen=True, slots=True)
class GpuLayoutAssignment:
    """XLA's layout assignment, then layout normalisation (module docstring)."""

    name: ClassVar[str] = PASS_NAME

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)
        try:
            assignment = assign_layouts(module)
        except LayoutNotModelled as refusal:
            records.rewrote(module.entry.name, module.entry.root, "layout-not-modelled",
                            f"layouts left row-major: {refusal}")
            return module, False
        if assignment.is_default() and not _has_layouts(module):
            return module, False
        return _Normaliser(module, assignment, records).module_laid_out(), True


def _plain(shape: Shape) -> Shape:
    """`shape` without layouts."""
    if shape.is_tuple:
        return Shape.tuple_of([_plain(e) for e in shape.elements])
    return Shape(shape.dtype, shape.dims, shape.elements)


def _has_layouts(module: Module) -> bool:
    """Whether any shape of the module carries a layout (XLA clears them all)."""
    return any(inst.shape.layout is not None and inst.shape.layout != default_layout(
        inst.shape.rank) for inst in module.all_instructions() if inst.shape.is_array)
