"""The first step of the parallel-loop analysis (parallel_loop.py), for a candidate N and a
set of per-lane loop elements: which instructions of the loop's body and condition are
state-dependent (read a per-lane element, directly or through their operands), and along
which dimension each holds the lanes, propagated forward through the ops' index maps
(lane_dims.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hlofuse.analysis.lane_dims import LaneDim, Mixed, value_lane_dim
from hlofuse.analysis.parallel_loop_refusals import NESTED_CONTROL_FLOW, Refusal
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import THREEFRY_TARGET, Op

if TYPE_CHECKING:
    from hlofuse.analysis.parallel_loop import LoopPlan

# Ops a generated per-lane value is not made of: control flow, and what is not a function
# of the lane's position (parameters other than the loop's elements, stateful bits).
_NOT_GENERATED = frozenset({Op.WHILE, Op.CALL, Op.CONDITIONAL, Op.PARAMETER,
                            Op.RNG_BIT_GENERATOR})

# Plans a nested loop for the lanes, given the dimension holding the lanes of each element
# whose initial value depends on the state: its plan, or why it cannot run in lane code.
NestedPlanner = Callable[[Instruction, dict[int, int]], "LoopPlan | Refusal"]


def element_read(inst: Instruction) -> int | None:
    """The loop element `inst` reads from its computation's parameter, if it does."""
    if inst.op is not Op.GET_TUPLE_ELEMENT or inst.operands[0].op is not Op.PARAMETER:
        return None
    index = inst.attrs["index"]
    assert isinstance(index, int)
    return index


def alias(inst: Instruction) -> Instruction:
    """get-tuple-element of a tuple instruction is that tuple's operand."""
    while inst.op is Op.GET_TUPLE_ELEMENT and inst.operands[0].op is Op.TUPLE:
        index = inst.attrs["index"]
        assert isinstance(index, int)
        inst = inst.operands[0].operands[index]
    return inst


class LaneClassification:
    """State dependence and lane dimensions of one attempt: a size N and the per-lane elements
    with the dimension holding their lanes."""

    def __init__(self, loop: Instruction, size: int, lane_dims: dict[int, int],
                 plan_nested: NestedPlanner | None = None) -> None:
        self.loop = loop
        self.plan_nested = plan_nested
        # The plans of the nested loops lane code runs, by id() of their while.
        self.nested: dict[int, LoopPlan] = {}
        self.size = size
        self.lane_dims = lane_dims
        self.per_lane = frozenset(lane_dims)
        self.condition, self.body = loop.calls
        self.dependent: set[int] = set()  # id() of state-dependent instructions
        self.lane_at: dict[int, LaneDim] = {}  # id() -> lane dimension (N > 1)
        self._generated: dict[int, int | None] = {}  # generated_lane_dim's, by id()
        self.users: dict[int, list[Instruction]] = {}
        for comp in (self.condition, self.body):
            for inst in comp.instructions:
                for operand in inst.operands:
                    self.users.setdefault(id(operand), []).append(inst)

    def classify(self) -> None:
        """Find the state-dependent instructions and their lane dimensions, condition first."""
        for comp in (self.condition, self.body):
            for inst in comp.instructions:
                self._classify(comp, inst)

    def generated_lane_dim(self, inst: Instruction) -> int | None:
        """The dimension holding the lanes of a value that does not depend on the state but
        differs from lane to lane by construction (a step's draws: Threefry over counters
        from an iota, the key a small uniform element): one dimension of size N, computed
        from iotas, constants and uniform elements without such a dimension alone, so lane
        code can compute it at any lane's position. None for anything else."""
        key = id(inst)
        if key not in self._generated:  # the accumulators and step reductions ask again
            self._generated[key] = self._generated_lane_dim(inst)
        return self._generated[key]

    def _generated_lane_dim(self, inst: Instruction) -> int | None:
        if self.size <= 1 or id(inst) in self.dependent or not inst.shape.is_array \
                or list(inst.shape.dims).count(self.size) != 1:
            return None
        seen: set[int] = set()
        stack = [inst]
        while stack:
            x = stack.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            if x.op is Op.CONSTANT:
                continue
            if element_read(x) is not None:
                if not x.shape.is_array or self.size in x.shape.dims:
                    return None
                continue
            if x.op in _NOT_GENERATED or (x.op is Op.CUSTOM_CALL and x.attrs.get(
                    "custom_call_target") != THREEFRY_TARGET):
                return None
            stack.extend(x.operands)
        return list(inst.shape.dims).index(self.size)

    def record_generated(self, inst: Instruction) -> None:
        """A generated per-lane value lane code computes (a reduction over the lanes reads
        it): its lane dimension, for the plan's `value_lane_dims`."""
        dim = self.generated_lane_dim(inst)
        if dim is not None:
            self.lane_at[id(inst)] = dim

    def only_used_by(self, inst: Instruction, user: Instruction) -> bool:
        """Every user of `inst` in the loop's computations is `user`."""
        return all(u is user for u in self.users.get(id(inst), []))

    def elements_read(self, inst: Instruction) -> set[int]:
        """The per-lane elements a state-dependent value depends on."""
        out: set[int] = set()
        seen: set[int] = set()
        stack = [inst]
        while stack:
            current = stack.pop()
            if id(current) in seen or id(current) not in self.dependent:
                continue
            seen.add(id(current))
            element = element_read(current)
            if element is not None:
                out.add(element)
            stack.extend(current.operands)
        return out

    def _classify(self, comp: Computation, inst: Instruction) -> None:
        element = element_read(inst)
        if element is not None:
            if element in self.per_lane:
                self.dependent.add(id(inst))
                self.lane_at[id(inst)] = self.lane_dims[element]
            return
        if inst.op is Op.GET_TUPLE_ELEMENT and inst.operands[0].op is Op.TUPLE:
            source = alias(inst)
            if id(source) in self.dependent:
                self.dependent.add(id(inst))
                self.lane_at[id(inst)] = self.lane_at.get(id(source), 0)
            return
        if inst.op is Op.WHILE:
            self._classify_nested(inst)
            return
        if inst.op is Op.GET_TUPLE_ELEMENT and inst.operands[0].op is Op.WHILE:
            self._classify_nested_result(inst)
            return
        dependent = [o for o in inst.operands if id(o) in self.dependent]
        if not dependent:
            return
        self.dependent.add(id(inst))
        if self.size > 1:
            self.lane_at[id(inst)] = self._value_lane_dim(inst)

    def _operand_lanes(self, inst: Instruction) -> list[LaneDim | None]:
        return [self.lane_at.get(id(o)) if id(o) in self.dependent else None
                for o in inst.operands]

    def _value_lane_dim(self, inst: Instruction) -> LaneDim:
        return value_lane_dim(self.size, inst, self._operand_lanes(inst))

    # --- nested loops ---------------------------------------------------------------------

    def _classify_nested(self, loop: Instruction) -> None:
        """A nested loop runs in lane code, whatever its initial state depends on: the lanes
        step it together, each with its part of the elements holding lanes (planned with the
        same lanes), the uniform ones shared. An element whose initial value depends on the
        state must be one the lanes hold, along the dimension its value holds them."""
        self.dependent.add(id(loop))
        state = loop.operands[0]
        known: dict[int, int] = {}
        for k, value in enumerate(state.operands):
            lane_at = self.lane_at.get(id(value))
            if isinstance(lane_at, Mixed):
                self.lane_at[id(loop)] = lane_at
                return
            if id(value) in self.dependent and self.size > 1 and isinstance(lane_at, int):
                known[k] = lane_at
        assert self.plan_nested is not None, "a nested loop needs the analysis' planner"
        plan = self.plan_nested(loop, known)
        if isinstance(plan, Refusal):
            self.lane_at[id(loop)] = Mixed(plan.rule, plan.instruction,
                                           f"in nested loop %{loop.name}: {plan.message}")
            return
        self.nested[id(loop)] = plan
        if self.size > 1:
            self.lane_at[id(loop)] = tuple(plan.lane_dims.get(i) for i in
                                           range(len(loop.shape.elements)))

    def _classify_nested_result(self, inst: Instruction) -> None:
        """An element of a nested loop's result: held by the lanes along the dimension the
        nested plan says. A uniform one that the loop changes (its counter) is known to lane
        code only, which runs the loop; a value read from it is refused where it is read."""
        loop = inst.operands[0]
        self.dependent.add(id(inst))
        lane_at = self.lane_at.get(id(loop))
        index = inst.attrs["index"]
        assert isinstance(index, int)
        held = lane_at[index] if isinstance(lane_at, tuple) else None
        if isinstance(lane_at, Mixed):
            self.lane_at[id(inst)] = lane_at
        elif held is not None:
            self.lane_at[id(inst)] = held
        elif self.size > 1:
            self.lane_at[id(inst)] = Mixed(
                NESTED_CONTROL_FLOW, inst,
                f"%{inst.name} reads element {index} of nested loop %{loop.name}, which the "
                "loop changes and the lanes do not hold (its counter); lane code alone knows it")
