"""XLA's layout assignment as its GPU compiler runs it, for `xla-gpu`: which physical
(minor-to-major) order each array of the entry computation and of its while loops gets.

XLA gives every array a layout before fusion (`LayoutAssignment`,
`xla/service/layout_assignment.cc`, with `GpuLayoutAssignment`'s own constraints,
`xla/service/gpu/transforms/layout_assignment.cc`) and then rewrites the module so that every
layout is the default one (`layout_normalization.py` here). The layouts come from constraint
propagation, modelled here as XLA's code runs it:

- constraints on a buffer (an array an instruction defines), on an operand of an instruction,
  and on a computation's result, each with a priority, a mandatory flag and a depth-first
  flag (`SetBufferLayout`, `SetOperandLayout`, `BufferLayoutConstraint::UpdateLayout`,
  `OperandLayoutConstraint::UpdateLayout`);
- a worklist in XLA's order (`PushAddedConstraints`, `PropagateConstraints`: depth-first
  constraints to the front, the others behind, by priority);
- a buffer's layout goes to its operands (`PropagateBufferConstraintToOperands`,
  `ChooseOperandLayoutFromOutputLayout`: the same layout through an op that cannot change
  layouts, the operand layout that makes a transpose or reshape a bitcast, the one that makes a
  reduction a row reduction) and to its users (`PropagateBufferConstraintToUses`, through a
  while body's back edge too); an operand's layout to the buffers that define it
  (`PropagateUseConstraintToDefs`), to the user's other operands and to the user's output
  (`PropagateOperandConstraint`, `ChooseOutputLayoutFromOperandLayout`);
- mandatory constraints first: the entry's parameter and result layouts (row-major), a while
  loop's state as its body computed it (`AddMandatoryConstraints`), then the GPU's
  (`GpuLayoutAssignment::AddBackendConstraints`: sorts of rank > 1 row-major, a dot's batch
  dimensions major); every buffer still unconstrained gets the default layout, one at a time
  in buffer order, each propagated (`RunOnComputation`); two rounds, the second with the
  computation layouts the first found (`kNumberOfPropagationRounds`).

An operand whose constraint differs from its operand's layout gets a copy (`AssignLayouts`,
`CopyOperandIfLayoutsDiffer`); `layout_normalization.py` writes that copy as a transpose.

Not modelled (the pass then leaves the module as it is and logs `layout-not-modelled`):
conditionals and calls with arrays of rank > 1, convolutions, custom calls, dots with a
constraint XLA's `MatrixLayout` check would reject, and a loop whose condition or body is
called from elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape, default_layout
from hlofuse.passes.reshape_mover import common_factors

Layout = tuple[int, ...]  # minor_to_major
Index = tuple[int, ...]  # a position in a tuple shape; () is the whole value
Buffer = tuple[Instruction, Index]

BEGINNING_PRIORITY = 0  # LayoutConstraint::kBeginningPriority
DEFAULT_PRIORITY = 1  # LayoutConstraint::kDefaultPriority
GIVEN_PRIORITY = 3  # LayoutConstraint::kGivenPriority: the entry's layout
PROPAGATION_ROUNDS = 2  # LayoutAssignment::kNumberOfPropagationRounds
# How often a constraint may change its layout without being mandatory (kMaxLayoutProp):
# a bound that makes the propagation end.
MAX_LAYOUT_CHANGES = 5
WARP_SIZE = 32

# LayoutAssignment::InstructionCanChangeLayout's `false` list: ops whose operands of the same
# rank share the output's layout (erf and tan are element-wise ops XLA added after the list
# was first written; they are element-wise here too).
KEEPS_LAYOUT = frozenset({
    Op.ABS, Op.ADD, Op.AND, Op.ATAN2, Op.BITCAST_CONVERT, Op.CEIL, Op.CLAMP, Op.CLZ,
    Op.COMPARE, Op.CONCATENATE, Op.CONVERT, Op.COSINE, Op.DIVIDE, Op.DYNAMIC_SLICE,
    Op.DYNAMIC_UPDATE_SLICE, Op.ERF, Op.EXPONENTIAL, Op.EXPONENTIAL_MINUS_ONE, Op.FLOOR,
    Op.IS_FINITE, Op.LOG, Op.LOG_PLUS_ONE, Op.LOGISTIC, Op.MAP, Op.MAXIMUM, Op.MINIMUM,
    Op.MULTIPLY, Op.NEGATE, Op.NOT, Op.OPT_BARRIER, Op.OR, Op.XOR, Op.PAD, Op.POWER,
    Op.REDUCE_PRECISION, Op.REDUCE_WINDOW, Op.REMAINDER, Op.REVERSE, Op.ROUND_NEAREST_AFZ,
    Op.ROUND_NEAREST_EVEN, Op.RSQRT, Op.SCATTER, Op.SELECT, Op.SELECT_AND_SCATTER,
    Op.SHIFT_LEFT, Op.SHIFT_RIGHT_ARITHMETIC, Op.SHIFT_RIGHT_LOGICAL, Op.SIGN, Op.SINE,
    Op.SLICE, Op.SORT, Op.SQRT, Op.CBRT, Op.SUBTRACT, Op.TAN, Op.TANH, Op.POPCNT,
    Op.TRIANGULAR_SOLVE, Op.CHOLESKY, Op.WHILE,
    # GpuLayoutAssignment::InstructionCanChangeLayoutInstance: the TopK custom call.
    Op.TOPK,
})
UNMODELLED = frozenset({Op.CONDITIONAL, Op.CALL, Op.CONVOLUTION, Op.CUSTOM_CALL, Op.FUSION})


class LayoutNotModelled(Exception):
    """The module holds something this model of layout assignment does not cover."""


def can_change_layout(inst: Instruction) -> bool:
    return inst.op not in KEEPS_LAYOUT


def physical_order(layout: Layout) -> tuple[int, ...]:
    """The logical dimensions from major to minor."""
    return tuple(reversed(layout))


def leaves(shape: Shape, prefix: Index = ()) -> Iterator[tuple[Index, Shape]]:
    if shape.is_tuple:
        for i, element in enumerate(shape.elements):
            yield from leaves(element, prefix + (i,))
    else:
        yield prefix, shape


def at_most_rank1(shape: Shape) -> bool:
    return all(s.rank <= 1 for _, s in leaves(shape) if s.is_array)


def true_rank(shape: Shape) -> int:
    return sum(1 for d in shape.dims if d != 1)


def align_layouts(in_dims: tuple[int, ...], in_layout: Layout,
                  out_dims: tuple[int, ...]) -> Layout | None:
    """ShapeUtil::AlignLayouts: the layout of `out_dims` that makes a reshape from `in_dims`
    laid out as `in_layout` a bitcast, if there is one (dimensions of size 1 dropped first,
    then put back most major, in descending order)."""
    if 1 in in_dims or 1 in out_dims:
        kept = [d for d in range(len(in_dims)) if in_dims[d] != 1]
        renumber = {d: i for i, d in enumerate(kept)}
        simple = align_layouts(tuple(in_dims[d] for d in kept),
                               tuple(renumber[d] for d in in_layout if d in renumber),
                               tuple(d for d in out_dims if d != 1))
        if simple is None:
            return None
        out_kept = [d for d in range(len(out_dims)) if out_dims[d] != 1]
        return tuple(out_kept[d] for d in simple) + tuple(
            d for d in reversed(range(len(out_dims))) if out_dims[d] == 1)
    if int(np.prod(in_dims)) != int(np.prod(out_dims)):
        return None
    factors = common_factors(in_dims, out_dims)
    factor_of = [0] * len(in_dims)
    for pos in range(len(factors) - 1):
        start, end = factors[pos][0], factors[pos + 1][0]
        physical = in_layout.index(start)
        factor_of[start] = pos
        for i in range(start + 1, end):
            physical -= 1
            if physical < 0 or in_layout[physical] != i:
                return None
            factor_of[i] = pos
    out_layout: list[int] = []
    minor = 0
    while len(out_layout) < len(out_dims):
        factor = factor_of[in_layout[minor]]
        (in_start, out_start), (in_end, out_end) = factors[factor], factors[factor + 1]
        out_layout += range(out_end - 1, out_start - 1, -1)
        minor += in_end - in_start
    return tuple(out_layout)


def reshape_is_bitcast(in_dims: tuple[int, ...], in_layout: Layout,
                       out_dims: tuple[int, ...], out_layout: Layout) -> bool:
    """ShapeUtil::ReshapeIsBitcast: both physical orders list the elements alike."""
    count = int(np.prod(in_dims, dtype=np.int64))
    ids = np.arange(count)
    physical_in = ids.reshape(in_dims).transpose(physical_order(in_layout)).ravel()
    physical_out = ids.reshape(out_dims).transpose(physical_order(out_layout)).ravel()
    return bool(np.array_equal(physical_in, physical_out))


def filtered_layout(layout: Layout, kept: tuple[int, ...]) -> Layout:
    """ShapeUtil::FilterDimensions / DeleteDimensions on a layout: the order of the `kept`
    dimensions, renumbered."""
    renumber = {d: i for i, d in enumerate(sorted(kept))}
    return tuple(renumber[d] for d in layout if d in renumber)


@dataclass(eq=False, slots=True)
class Constraint:
    """A buffer constraint (`operand` None: `layouts[()]` is the buffer's layout), an operand
    constraint (`layouts` by leaf index of the operand) or a result constraint (`result`)."""

    layouts: dict[Index, Layout]
    mandatory: bool
    dfs: bool
    priority: int
    buffer: Buffer | None = None
    user: Instruction | None = None
    operand: int = -1
    result: bool = False
    changes: int = 0

    @property
    def layout(self) -> Layout:
        return self.layouts[()]


@dataclass(slots=True)
class ComputationLayout:
    """A computation's parameter and result layouts, with the priority they were set at."""

    params: list[dict[Index, Layout]]
    result: dict[Index, Layout] | None
    priority: int


@dataclass(slots=True)
class Assignment:
    """What layout assignment decided: every array buffer's layout, and each constrained
    operand's layouts (where they differ from the operand's, XLA inserts a copy)."""

    buffers: dict[Buffer, Layout] = field(default_factory=dict)
    operands: dict[tuple[Instruction, int], dict[Index, Layout]] = field(default_factory=dict)
    computations: dict[Computation, ComputationLayout] = field(default_factory=dict)

    def layout_of(self, inst: Instruction, index: Index = ()) -> Layout:
        """The layout of `inst`'s value at `index`, following tuples and get-tuple-element to
        the buffer that defines it."""
        while True:
            if inst.op is Op.GET_TUPLE_ELEMENT:
                index = (int(inst.attrs["index"]),) + index  # type: ignore[call-overload]
                inst = inst.operands[0]
            elif inst.op is Op.TUPLE and index:
                inst, index = inst.operands[index[0]], index[1:]
            else:
                return self.buffers.get((inst, index), default_layout(_subshape(inst.shape,
                                                                                index).rank))

    def is_default(self) -> bool:
        return (all(layout == default_layout(len(layout)) for layout in self.buffers.values())
                and not self.copies())

    def copies(self) -> list[tuple[Instruction, int]]:
        """The operands that get a copy: a constraint that differs from the operand's layout;
        and (root, -1) for a computation whose root is copied to its result layout."""
        found = []
        for (user, k), layouts in self.operands.items():
            operand = user.operands[k]
            if any(self.layout_of(operand, index) != layout for index, layout in layouts.items()):
                found.append((user, k))
        for comp, layout in self.computations.items():
            if layout.result is not None and any(
                    self.layout_of(comp.root, index) != wanted
                    for index, wanted in layout.result.items()):
                found.append((comp.root, -1))
        return found


def _subshape(shape: Shape, index: Index) -> Shape:
    for i in index:
        shape = shape.elements[i]
    return shape


def while_loops(module: Module) -> Iterator[Instruction]:
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.op is Op.WHILE:
                yield inst


def assign_layouts(module: Module) -> Assignment:
    """Layouts for the entry computation and the while loops it runs (XLA's
    `LayoutAssignment::Run`), or LayoutNotModelled."""
    from hlofuse.fusion.xla_gpu.layout_propagation import ComputationPropagation

    loops = list(while_loops(module))
    callers: dict[Computation, int] = {}
    for loop in loops:
        for comp in loop.calls:
            callers[comp] = callers.get(comp, 0) + 1
    if any(count > 1 for count in callers.values()):
        raise LayoutNotModelled("a while condition or body is called more than once")
    for comp in [module.entry, *callers]:
        for inst in comp.instructions:
            if inst.op in UNMODELLED and not at_most_rank1(inst.shape):
                raise LayoutNotModelled(f"%{inst.name} ({inst.op.text})")
    # Callees before callers, as MakeNonfusionComputations orders them.
    order = [c for c in _callee_first(module.entry) if c is module.entry or c in callers]
    loop_of = {comp: loop for loop in loops for comp in loop.calls}
    assignment = Assignment()
    entry_layout = ComputationLayout(
        [{index: default_layout(s.rank) for index, s in leaves(p.shape) if s.is_array}
         for p in _parameters(module.entry)],
        {index: default_layout(s.rank) for index, s in leaves(module.entry.root.shape)
         if s.is_array}, GIVEN_PRIORITY)
    assignment.computations[module.entry] = entry_layout
    for round_number in range(PROPAGATION_ROUNDS):
        assignment.buffers.clear()
        assignment.operands.clear()
        for comp in order:
            propagation = ComputationPropagation(comp, assignment, round_number,
                                                 loop_of.get(comp))
            propagation.run()
    return assignment


def _parameters(comp: Computation) -> list[Instruction]:
    return sorted((i for i in comp.instructions if i.op is Op.PARAMETER),
                  key=lambda i: i.parameter_number)


def _callee_first(comp: Computation) -> list[Computation]:
    order: list[Computation] = []
    seen: set[int] = set()

    def visit(c: Computation) -> None:
        if id(c) in seen:
            return
        seen.add(id(c))
        for inst in c.instructions:
            for callee in inst.calls:
                visit(callee)
        order.append(c)

    visit(comp)
    return order


def reduction_is_row_friendly(inst: Instruction) -> bool:
    """GpuLayoutAssignment::PropagateReductionLayoutToOperand: the reduction emitter would run
    the reduction as a row reduction (`IsUnnestedReductionFasterThanElemental` for a row
    reduction: at least a warp of reduced elements, or a divisor of the warp size)."""
    size = 1
    for d in inst.ints("dimensions"):
        size *= inst.operands[0].shape.dims[d]
    return size >= WARP_SIZE or WARP_SIZE % size == 0


def choose_operand_layout(out_layout: Layout, inst: Instruction, k: int) -> Layout | None:
    """LayoutAssignment::ChooseOperandLayoutFromOutputLayout, with the GPU's reduction rule."""
    chosen = _layout_across(inst, k, out_layout, to_operand=True)
    if chosen is not None or inst.op is not Op.REDUCE:
        return chosen
    if inst.shape.is_array and reduction_is_row_friendly(inst):
        reduced = inst.ints("dimensions")
        kept = [d for d in range(inst.operands[k].shape.rank) if d not in reduced]
        return tuple(reversed(reduced)) + tuple(kept[d] for d in out_layout)
    return None


def choose_output_layout(operand_layout: Layout, user: Instruction, k: int) -> Layout | None:
    """LayoutAssignment::ChooseOutputLayoutFromOperandLayout (for array-shaped users)."""
    return _layout_across(user, k, operand_layout, to_operand=False)


def _layout_across(inst: Instruction, k: int, known: Layout, to_operand: bool
                   ) -> Layout | None:
    """The rules both of XLA's choosers apply, from `inst`'s output layout `known` to its
    operand `k` (`to_operand`) or back: the same layout through an op that cannot change
    layouts; through a reshape, row-major on the other side if that makes it a bitcast (a
    bitcast either way), else the aligned layout; through a transpose, the layout that makes
    it a bitcast."""
    operand = inst.operands[k]
    if (operand.shape.rank > 0 and operand.shape.rank == inst.shape.rank
            and not can_change_layout(inst)):
        return known
    known_dims, other_dims = ((inst.shape.dims, operand.shape.dims) if to_operand
                              else (operand.shape.dims, inst.shape.dims))
    if inst.op is Op.RESHAPE:
        if true_rank(operand.shape) == 1 and true_rank(inst.shape) == 1:
            return None
        row_major = default_layout(len(other_dims))
        if reshape_is_bitcast(known_dims, known, other_dims, row_major):
            return row_major
        aligned = align_layouts(known_dims, known, other_dims)
        if aligned is not None:
            return aligned
    if inst.op is Op.TRANSPOSE:
        dims = inst.ints("dimensions")
        if to_operand:
            return tuple(dims[d] for d in known)
        inverse = [0] * len(dims)
        for out_dim, in_dim in enumerate(dims):
            inverse[in_dim] = out_dim
        return tuple(inverse[d] for d in known)
    return None


def propagates_depth_first(inst: Instruction) -> bool:
    """InstructionShouldPropagateDepthFirst."""
    if inst.op in (Op.GATHER, Op.SCATTER, Op.TRANSPOSE):
        return True
    if inst.op is Op.RESHAPE:
        operand = inst.operands[0].shape
        return operand.rank == 1 or _merely_inserts_or_deletes_ones(operand.dims, inst.shape.dims)
    return False


def _merely_inserts_or_deletes_ones(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return [d for d in a if d != 1] == [d for d in b if d != 1]


def operand_always_propagates_forward(user: Instruction) -> bool:
    return user.op in (Op.REDUCE, Op.TRANSPOSE) or not can_change_layout(user)


def output_always_propagates_to_operands(user: Instruction) -> bool:
    return user.op is not Op.RESHAPE and not can_change_layout(user)


def operand_always_propagates_to_siblings(user: Instruction) -> bool:
    return user.op is Op.REDUCE or not can_change_layout(user)
