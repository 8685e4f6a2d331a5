"""XLA's layout constraint propagation on one computation (`LayoutAssignment::
RunOnComputation` and what it calls, `xla/service/layout_assignment.cc`); the rules and the
driver are in `layout_assignment.py`.

Buffers follow XLA's tuple points-to analysis: an array instruction defines its buffer, a
parameter, while loop or other tuple-shaped instruction one per element, and a tuple or
get-tuple-element forwards its operands' buffers.
"""

from __future__ import annotations

from collections import deque

from hlofuse.fusion.xla_gpu.layout_assignment import (
    BEGINNING_PRIORITY,
    DEFAULT_PRIORITY,
    MAX_LAYOUT_CHANGES,
    PROPAGATION_ROUNDS,
    Assignment,
    Buffer,
    ComputationLayout,
    Constraint,
    Index,
    Layout,
    LayoutNotModelled,
    at_most_rank1,
    can_change_layout,
    choose_operand_layout,
    choose_output_layout,
    filtered_layout,
    leaves,
    operand_always_propagates_forward,
    operand_always_propagates_to_siblings,
    output_always_propagates_to_operands,
    propagates_depth_first,
)
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape, default_layout

PointsTo = dict[Index, list[Buffer]]


class ComputationPropagation:
    """One round of layout assignment on `comp` (`loop`: the while loop `comp` is the body
    or condition of)."""

    def __init__(self, comp: Computation, assignment: Assignment, round_number: int,
                 loop: Instruction | None) -> None:
        self.comp = comp
        self.assignment = assignment
        self.priority = BEGINNING_PRIORITY + round_number
        self.round_number = round_number
        self.loop = loop
        self.points_to: dict[Instruction, PointsTo] = {}
        self.defined: list[Buffer] = []
        self.users: dict[Instruction, list[tuple[Instruction, int]]] = {
            inst: [] for inst in comp.instructions}
        for inst in comp.instructions:
            for k, operand in enumerate(inst.operands):
                self.users[operand].append((inst, k))
            self.points_to[inst] = self._points_to(inst)
        self.aliases: dict[Buffer, list[Instruction]] = {}
        for inst, sets in self.points_to.items():
            for index, buffers in sets.items():
                if index == () and inst.shape.is_array:
                    for buffer in buffers:
                        self.aliases.setdefault(buffer, []).append(inst)
        self.buffer_constraints: dict[Buffer, Constraint] = {}
        self.operand_constraints: dict[tuple[Instruction, int], Constraint] = {}
        self.added: list[Constraint] = []
        self.unconstrained: dict[Buffer, None] = dict.fromkeys(self.defined)

    # -- points-to -------------------------------------------------------------------------

    def _points_to(self, inst: Instruction) -> PointsTo:
        if inst.op is Op.GET_TUPLE_ELEMENT:
            index = int(inst.attrs["index"])  # type: ignore[call-overload]
            source = self.points_to[inst.operands[0]]
            return {i[1:]: b for i, b in source.items() if i[:1] == (index,)}
        if inst.op is Op.TUPLE:
            sets: PointsTo = {(): [(inst, ())]}
            for k, operand in enumerate(inst.operands):
                for i, b in self.points_to[operand].items():
                    sets[(k,) + i] = b
            return sets
        sets = {}
        for index, shape in _all_subshapes(inst.shape):
            buffer = (inst, index)
            sets[index] = [buffer]
            if shape.is_array:
                self.defined.append(buffer)
        return sets

    def _forwarded(self, user: Instruction, k: int) -> bool:
        """AnyOperandBufferForwarded."""
        mine = {b for bs in self.points_to[user].values() for b in bs}
        return any(b in mine for bs in self.points_to[user.operands[k]].values() for b in bs)

    def _array_uses(self, buffer: Buffer) -> list[tuple[Instruction, int]]:
        return [use for alias in self.aliases.get(buffer, []) for use in self.users[alias]]

    # -- setting constraints ---------------------------------------------------------------

    def _push(self, constraint: Constraint) -> None:
        """PushAddedConstraints."""
        if constraint.dfs:
            self.added.append(constraint)
            return
        for position in range(len(self.added), 0, -1):
            if constraint.priority <= self.added[position - 1].priority:
                self.added.insert(position, constraint)
                return
        self.added.insert(0, constraint)

    def set_buffer(self, layout: Layout, buffer: Buffer, mandatory: bool = True,
                   dfs: bool = True, priority: int | None = None) -> None:
        """SetBufferLayout, with BufferLayoutConstraint::UpdateLayout (by default at the
        round's priority, as XLA's log shows)."""
        priority = self.priority if priority is None else priority
        self.unconstrained.pop(buffer, None)
        current = self.buffer_constraints.get(buffer)
        if current is None:
            current = Constraint({(): layout}, mandatory, dfs, priority, buffer=buffer)
            self.buffer_constraints[buffer] = current
        elif current.layout == layout:
            change = (mandatory and not current.mandatory) or (dfs and not current.dfs) or (
                priority > current.priority)
            current.mandatory |= mandatory
            current.dfs |= dfs
            current.priority = max(current.priority, priority)
            if not change:
                return
        else:
            if not mandatory and (current.changes > MAX_LAYOUT_CHANGES
                                  or priority <= current.priority):
                return  # NegotiateLayout: XLA's base and GPU passes never agree
            current.layouts = {(): layout}
            current.mandatory, current.dfs, current.priority = mandatory, dfs, priority
            current.changes += 1
        self._push(current)

    def set_operand(self, layouts: dict[Index, Layout], user: Instruction, k: int,
                    mandatory: bool = True, dfs: bool = True,
                    priority: int | None = None) -> None:
        """SetOperandLayout, with OperandLayoutConstraint::UpdateLayout."""
        priority = self.priority if priority is None else priority
        operand = user.operands[k]
        if operand.shape.is_array and operand.shape.rank == 0:
            return
        if not mandatory and priority > DEFAULT_PRIORITY and (
                user.op is Op.DYNAMIC_UPDATE_SLICE and k > 0):
            dfs, priority = False, priority - 1
        elif (not mandatory and user.op is Op.RESHAPE
              and operand.op is Op.DYNAMIC_SLICE):
            dfs, priority = False, priority - 1
        current = self.operand_constraints.get((user, k))
        if current is not None:
            if current.layouts == layouts:
                return
            if not mandatory and (current.changes > MAX_LAYOUT_CHANGES
                                  or not operand_always_propagates_forward(user)):
                return
            if not mandatory:
                return  # NegotiateOperandLayout: never, in XLA's base and GPU passes
            if current.priority > priority:
                return
            current.layouts = dict(layouts)
            current.mandatory, current.dfs, current.priority = mandatory, dfs, priority
            current.changes += 1
        else:
            current = Constraint(dict(layouts), mandatory, dfs, priority, user=user, operand=k)
            self.operand_constraints[(user, k)] = current
        self._push(current)

    def set_array_operand(self, layout: Layout, user: Instruction, k: int, mandatory: bool,
                          dfs: bool, priority: int) -> None:
        self.set_operand({(): layout}, user, k, mandatory, dfs, priority)

    def set_instruction(self, layouts: dict[Index, Layout], inst: Instruction,
                        mandatory: bool = True) -> None:
        """SetInstructionLayout: each array the instruction defines."""
        for index, layout in layouts.items():
            for buffer in self.points_to[inst].get(index, []):
                if buffer[0] is inst:
                    self.set_buffer(layout, buffer, mandatory, True, self.priority)

    # -- the constraints of a round --------------------------------------------------------

    def add_mandatory_constraints(self) -> None:
        """AddMandatoryConstraints: parameters, while loops, the result."""
        layout = self.assignment.computations.get(self.comp)
        fixed = layout is not None and (self.loop is None or self.round_number > 0)
        for inst in self.comp.instructions:
            if inst.op is Op.PARAMETER and fixed:
                assert layout is not None
                self.set_instruction(layout.params[inst.parameter_number], inst)
            elif inst.op is Op.WHILE:
                condition, body = inst.calls
                body_layout = self.assignment.computations.get(body)
                if body_layout is None:
                    continue
                result = body_layout.result or {}
                if body_layout.params[0] != result:
                    body_layout.params[0] = dict(result)
                    body_layout.priority = self.priority + PROPAGATION_ROUNDS
                self.assignment.computations[condition] = ComputationLayout(
                    [dict(body_layout.params[0])], None, self.priority + PROPAGATION_ROUNDS)
                self.set_operand(result, inst, 0)
                self.set_instruction(result, inst)
        if layout is not None and layout.result is not None and fixed:
            self._push(Constraint(dict(layout.result), True, True, self.priority,
                                  result=True))

    def add_backend_constraints(self) -> None:
        """GpuLayoutAssignment::AddBackendConstraints, for the ops the corpus has: dots with
        batch or several non-contracting dimensions row-major, a transposed dot laid out so
        the transpose is a bitcast, sorts of rank > 1 row-major."""
        for inst in reversed(self.comp.instructions):
            if inst.op is Op.DOT:
                self._dot_constraints(inst)
            elif (inst.op is Op.TRANSPOSE and inst.operands[0].op is Op.DOT
                  and len(self.users[inst.operands[0]]) == 1):
                wanted = tuple(reversed(inst.ints("dimensions")))
                if _dot_supports(inst.operands[0], wanted):
                    self.set_array_operand(wanted, inst, 0, True, True, self.priority)
            elif inst.op is Op.SORT and inst.operands[0].shape.rank > 1:
                keys = default_layout(inst.operands[0].shape.rank)
                for k in range(len(inst.operands)):
                    self.set_array_operand(keys, inst, k, True, True, self.priority)
                    index = () if inst.shape.is_array else (k,)
                    self.set_buffer(keys, (inst, index))
            elif inst.op is Op.BITCAST_CONVERT and inst.shape.rank != inst.operands[0].shape.rank:
                raise LayoutNotModelled(f"%{inst.name}: a bitcast-convert that changes rank")

    def _dot_constraints(self, dot: Instruction) -> None:
        """AddDotBackendConstraints for dots XLA's pipeline has made canonical (batch,
        then free, then contracting dimensions): their default layouts satisfy MatrixLayout,
        so a constrained side or output is row-major."""
        lhs_batch = dot.ints("lhs_batch_dims")
        multi = False
        for k, (batch, contracting) in enumerate(
                ((lhs_batch, dot.ints("lhs_contracting_dims")),
                 (dot.ints("rhs_batch_dims"), dot.ints("rhs_contracting_dims")))):
            rank = dot.operands[k].shape.rank
            free = rank - len(batch) - len(contracting)
            multi |= free > 1
            if batch or len(contracting) > 1 or free > 1:
                self.set_array_operand(default_layout(rank), dot, k, True, True,
                                       self.priority)
        if lhs_batch or multi:
            self.set_buffer(default_layout(dot.shape.rank), (dot, ()), True, True,
                            self.priority)

    # -- propagation -----------------------------------------------------------------------

    def propagate(self) -> None:
        """PropagateConstraints: depth-first constraints first."""
        worklist: deque[Constraint] = deque()

        def take_added() -> None:
            added, self.added = self.added, []
            for constraint in added:
                if constraint.dfs:
                    worklist.appendleft(constraint)
                else:
                    worklist.append(constraint)

        take_added()
        while worklist:
            constraint = worklist.popleft()
            if constraint.result:
                self.use_to_defs(constraint.layouts, self.comp.root, self.priority)
            elif constraint.buffer is not None:
                self.buffer_to_operands(constraint)
                self.buffer_to_uses(constraint)
            else:
                self.operand_constraint(constraint)
            take_added()

    def use_to_defs(self, layouts: dict[Index, Layout], inst: Instruction,
                    priority: int) -> None:
        """PropagateUseConstraintToDefs."""
        for index, layout in layouts.items():
            for buffer in self.points_to[inst].get(index, []):
                source = buffer[0]
                if not (source.op is Op.REDUCE and source.shape.is_tuple):
                    self.set_buffer(layout, buffer, False, True, priority)

    def buffer_to_operands(self, constraint: Constraint) -> None:
        """PropagateBufferConstraintToOperands."""
        assert constraint.buffer is not None
        inst, index = constraint.buffer
        if at_most_rank1(inst.shape):
            return
        layout = constraint.layout
        for k, operand in enumerate(inst.operands):
            if at_most_rank1(operand.shape):
                continue
            if not can_change_layout(inst):
                if operand.shape.is_array and operand.shape.rank == len(layout):
                    self.set_array_operand(layout, inst, k, True, True, self.priority)
            elif inst.op is Op.BROADCAST:
                self.set_array_operand(filtered_layout(layout, inst.ints("dimensions")),
                                       inst, k, True, propagates_depth_first(inst),
                                       self.priority)
            elif index == () and operand.shape.is_array:
                chosen = choose_operand_layout(layout, inst, k)
                if chosen is not None:
                    self.set_array_operand(chosen, inst, k,
                                           output_always_propagates_to_operands(inst),
                                           propagates_depth_first(inst), self.priority)

    def buffer_to_uses(self, constraint: Constraint) -> None:
        """PropagateBufferConstraintToUses, with the while body's back edge."""
        assert constraint.buffer is not None
        buffer = constraint.buffer
        for user, k in self._array_uses(buffer):
            if not self._forwarded(user, k):
                self.set_array_operand(constraint.layout, user, k, False, True,
                                       constraint.priority)
        if self.loop is None or self.comp is not self.loop.calls[1]:
            return
        root = self.comp.root
        if root.op is not Op.TUPLE:
            return
        for user, _ in self.users[buffer[0]]:
            if user is root:
                position = root.operands.index(buffer[0])
                parameter = next(i for i in self.comp.instructions if i.op is Op.PARAMETER)
                self.set_buffer(constraint.layout, (parameter, (position,) + buffer[1]), False)

    def operand_constraint(self, constraint: Constraint) -> None:
        """PropagateOperandConstraint."""
        user, k = constraint.user, constraint.operand
        assert user is not None
        operand = user.operands[k]
        if at_most_rank1(operand.shape):
            return
        self.use_to_defs(constraint.layouts, operand, constraint.priority)
        if not operand.shape.is_array:
            return
        if can_change_layout(user) and not user.shape.is_array and user.op is not Op.REDUCE:
            return
        if self._forwarded(user, k) or operand.shape.rank <= 1:
            return
        layout = constraint.layout
        if operand_always_propagates_to_siblings(user):
            if user.op is Op.CONCATENATE:
                dim = user.ints("dimensions")[0]
                if any(s.shape.dims[dim] > operand.shape.dims[dim] for s in user.operands
                       if s is not operand):
                    return
            for k2, sibling in enumerate(user.operands):
                if (sibling is operand or not sibling.shape.is_array
                        or sibling.shape.rank <= 1 or sibling.shape.rank != operand.shape.rank):
                    continue
                self.set_array_operand(layout, user, k2, True, True, constraint.priority)
            for index, shape in _all_subshapes(user.shape):
                if (shape.is_array and shape.rank > 1 and shape.rank == operand.shape.rank
                        and (user, index) in self.points_to[user].get(index, [])):
                    self.set_buffer(layout, (user, index), True, True, constraint.priority)
            return
        for index, shape in _all_subshapes(user.shape):
            if not shape.is_array or shape.rank <= 1:
                continue
            if (user, index) not in self.points_to[user].get(index, []):
                continue
            chosen = choose_output_layout(layout, user, k) if user.shape.is_array else None
            if chosen is not None:
                self.set_buffer(chosen, (user, index), operand_always_propagates_forward(user),
                                propagates_depth_first(user), constraint.priority)

    # -- a round ---------------------------------------------------------------------------

    def run(self) -> None:
        """RunOnComputation, then CalculateComputationLayout."""
        self.add_mandatory_constraints()
        self.add_backend_constraints()
        self.propagate()
        while self.unconstrained:
            buffer = next(iter(self.unconstrained))
            shape = buffer[0].shape
            for i in buffer[1]:
                shape = shape.elements[i]
            self.set_buffer(default_layout(shape.rank), buffer, False)
            self.propagate()
        for buffer, constraint in self.buffer_constraints.items():
            self.assignment.buffers[buffer] = constraint.layout
        for key, constraint in self.operand_constraints.items():
            self.assignment.operands[key] = constraint.layouts
        if self.round_number == 0:
            self._record_computation_layout()

    def _record_computation_layout(self) -> None:
        current = self.assignment.computations.get(self.comp)
        priority = self.priority + PROPAGATION_ROUNDS
        if current is not None and current.priority >= priority:
            return
        params = sorted((i for i in self.comp.instructions if i.op is Op.PARAMETER),
                        key=lambda i: i.parameter_number)
        self.assignment.computations[self.comp] = ComputationLayout(
            [self._layouts_of(p) for p in params], self._layouts_of(self.comp.root), priority)

    def _layouts_of(self, inst: Instruction) -> dict[Index, Layout]:
        return {index: self.assignment.layout_of(inst, index)
                for index, shape in leaves(inst.shape) if shape.is_array}


def _all_subshapes(shape: Shape, prefix: Index = ()) -> list[tuple[Index, Shape]]:
    found: list[tuple[Index, Shape]] = [(prefix, shape)]
    if shape.is_tuple:
        for i, element in enumerate(shape.elements):
            found += _all_subshapes(element, prefix + (i,))
    return found


def _dot_supports(dot: Instruction, layout: Layout) -> bool:
    """DotCanSupportShapeWithLayout (MatrixLayout::For): the batch dimensions most major, and
    each operand's free dimensions together, in the physical order."""
    batch = len(dot.ints("lhs_batch_dims"))
    lhs_free = (dot.operands[0].shape.rank - batch - len(dot.ints("lhs_contracting_dims")))
    order = list(reversed(layout))
    if sorted(order[:batch]) != list(range(batch)):
        return False
    groups = [set(range(batch, batch + lhs_free)), set(range(batch + lhs_free, len(order)))]
    rest = order[batch:]
    first = next((g for g in groups if rest and rest[0] in g), None)
    if first is None:
        return not rest
    size = len(first)
    return set(rest[:size]) == first and set(rest[size:]) == (groups[0] | groups[1]) - first
