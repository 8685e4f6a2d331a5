"""Per-step reductions across the lanes of a parallel loop: the sums, means, maxima, minima and
counts over all lanes that RL code records at every step (`lax.scan` outputs of shape [T], or
[T, k] for a vector such as the mean observation).

A uniform loop element qualifies when the body's only use of it is a dynamic-update-slice
writing a slice of at most `MAX_COMPONENTS` values per step, at uniform positions, with a
value computed from reductions of per-lane values over their lanes (each over the lane
dimension and any others, with an associative and commutative op and that op's identity as
initial value) by element-wise ops, reshapes and broadcasts whose other operands are
loop-invariant (the division of a mean by N, a convert). The condition never reads it, nor
does anything else.

Such an element needs no lane's values but the step's reduction: each block of lanes reduces
its own lanes at every step into a partial of its own for the written position, and after the
loop the partials of each position are combined in block order (deterministic; float sums
are reassociated compared with the reference, the only difference from it) and the
element-wise ops applied. A position no step wrote keeps its initial value.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlofuse.analysis.lane_classification import LaneClassification, element_read
from hlofuse.analysis.loop_accumulators import full_lane_reduce_op
from hlofuse.analysis.reducers import ASSOCIATIVE_OPS, is_identity, reducer_op
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import ELEMENTWISE_OPS, Op

# Ops between the reductions and the written value besides the element-wise ones.
_PASS_THROUGH = frozenset({Op.RESHAPE, Op.BROADCAST, Op.BITCAST, Op.COPY})
# Values a step writes at most: each lane keeps its part of every one in the step, and each
# block its partial of every one for every step.
MAX_COMPONENTS = 64


@dataclass(frozen=True, slots=True)
class LaneReduce:
    """One full reduction over per-lane values that a per-step reduction reads."""

    reduce: Instruction
    op: Op

    @property
    def components(self) -> int:
        """The values it gives (1 for a reduction over all dimensions)."""
        return self.reduce.shape.num_elements

    @property
    def operand(self) -> Instruction:
        return self.reduce.operands[0]

    @property
    def identity(self) -> Instruction:
        return self.reduce.operands[1]


@dataclass(frozen=True, slots=True)
class SliceWrite:
    """A uniform loop element written one slice per step (`update` is the body's
    dynamic-update-slice of it, its new value)."""

    element: int
    update: Instruction

    @property
    def starts(self) -> tuple[Instruction, ...]:
        return self.update.operands[2:]

    @property
    def value(self) -> Instruction:
        """The slice written each step."""
        return self.update.operands[1]


@dataclass(frozen=True, slots=True)
class StepReduction(SliceWrite):
    """A uniform loop element written one position per step with a value computed from
    reductions over all lanes."""

    reduces: tuple[LaneReduce, ...]


def find_step_reductions(lanes: LaneClassification) -> list[StepReduction]:
    """The loop's per-step reductions among its uniform elements (after `lanes.classify()`).
    The values between the reductions and the written slices are used by nothing else; two
    elements may share them (a sum and a mean of the same reward)."""
    found: dict[int, tuple[StepReduction, dict[int, Instruction]]] = {}
    for i, shape in enumerate(lanes.loop.shape.elements):
        if i in lanes.per_lane or not shape.dims:
            continue
        candidate = _step_reduction(lanes, i)
        if candidate is not None:
            found[i] = candidate
    while True:
        allowed = {key for step, path in found.values() for key in (*path, id(step.update))}
        escaping = [i for i, (_, path) in found.items()
                    if any(id(u) not in allowed for node in path.values()
                           for u in lanes.users.get(id(node), []))]
        if not escaping:
            steps = [step for step, _ in found.values()]
            for step in steps:
                for r in step.reduces:
                    lanes.record_generated(r.operand)
            return steps
        for i in escaping:
            del found[i]


def written_a_slice_a_step(lanes: LaneClassification, element: int) -> Instruction | None:
    """The body's dynamic-update-slice of loop element `element` when it is the element's
    new value and its only use, and nothing else (the condition included) reads the
    element: what the loop holds there is only ever written, a slice a step."""
    root = lanes.body.root
    update = root.operands[element]
    if update.op is not Op.DYNAMIC_UPDATE_SLICE or sum(1 for o in root.operands
                                                       if o is update) != 1:
        return None
    if not lanes.only_used_by(update, root) or element_read(update.operands[0]) != element:
        return None
    reads = [inst for inst in lanes.body.instructions if element_read(inst) == element]
    if len(reads) != 1 or not lanes.only_used_by(reads[0], update):
        return None
    if any(element_read(inst) == element for inst in lanes.condition.instructions):
        return None
    return update


def _step_reduction(lanes: LaneClassification, element: int
                    ) -> tuple[StepReduction, dict[int, Instruction]] | None:
    """Element `element` as a per-step reduction, with the values on its path from the
    reductions to the written slice (their users not yet checked)."""
    update = written_a_slice_a_step(lanes, element)
    if update is None:
        return None
    value = update.operands[1]
    if value.shape.num_elements > MAX_COMPONENTS or not _from_lanes(lanes, value):
        return None
    if any(id(start) in lanes.dependent for start in update.operands[2:]):
        return None
    if any(o is update.operands[0] for o in update.operands[1:]):
        return None
    behind = _reduces_behind(lanes, value)
    if behind is None:
        return None
    reduces, path = behind
    return StepReduction(element, update, tuple(reduces)), path


def _reduces_behind(lanes: LaneClassification, value: Instruction
                    ) -> tuple[list[LaneReduce], dict[int, Instruction]] | None:
    """The reductions over the lanes `value` is computed from by element-wise ops (of no more
    values than the slice written), and those values; None when anything else state-dependent
    is on the way."""
    reduces: list[LaneReduce] = []
    path: dict[int, Instruction] = {}
    stack = [value]
    while stack:
        inst = stack.pop()
        if id(inst) in path:
            continue
        if not _from_lanes(lanes, inst):
            if _reads_loop_state(inst):
                return None  # a value that changes from step to step, known only in the loop
            continue
        path[id(inst)] = inst
        found = _lane_reduce(lanes, inst)
        if found is not None:
            reduces.append(found)
            continue
        if not inst.shape.is_array or inst.shape.num_elements > MAX_COMPONENTS:
            return None
        if lanes.size > 1 and isinstance(lanes.lane_at.get(id(inst)), int):
            return None  # still one value per lane: not reduced over them
        if inst.op not in ELEMENTWISE_OPS and inst.op not in _PASS_THROUGH:
            return None
        stack.extend(inst.operands)
    return (reduces, path) if reduces else None


def _lane_reduce(lanes: LaneClassification, inst: Instruction) -> LaneReduce | None:
    """`inst` as a reduction of a per-lane value over all its dimensions, or over its lane
    dimension and any others, from the identity."""
    op = full_lane_reduce_op(lanes, inst)
    if op is None:
        op = _over_lanes_op(lanes, inst)
    return None if op is None else LaneReduce(inst, op)


def _over_lanes_op(lanes: LaneClassification, reduce: Instruction) -> Op | None:
    """The op of `reduce` when it reduces a per-lane value over its lane dimension (and maybe
    others) with an associative and commutative op from that op's identity."""
    if reduce.op is not Op.REDUCE or len(reduce.operands) != 2 or lanes.size == 1:
        return None
    operand, init = reduce.operands
    lane_at = lanes.lane_at.get(id(operand)) if id(operand) in lanes.dependent else \
        lanes.generated_lane_dim(operand)
    if id(init) in lanes.dependent or not isinstance(lane_at, int) or \
            lane_at not in reduce.ints("dimensions"):
        return None
    if reduce.shape.num_elements > MAX_COMPONENTS:
        return None
    op = reducer_op(reduce.calls[0])
    return op if op in ASSOCIATIVE_OPS and is_identity(init, op) else None


def _from_lanes(lanes: LaneClassification, inst: Instruction) -> bool:
    """Whether `inst` is made from the lanes' values: state-dependent, or computed from a
    reduction over the lanes of a value generated per lane (a count of a step's draws)."""
    if id(inst) in lanes.dependent:
        return True
    seen: set[int] = set()
    stack = [inst]
    while stack:
        x = stack.pop()
        if id(x) in seen or element_read(x) is not None:
            continue
        seen.add(id(x))
        if x.op is Op.REDUCE and len(x.operands) == 2:
            lane_dim = lanes.generated_lane_dim(x.operands[0])
            if lane_dim is not None and lane_dim in x.ints("dimensions"):
                return True
        stack.extend(x.operands)
    return False


def _reads_loop_state(inst: Instruction) -> bool:
    """Whether `inst` depends on the loop's state (any element): values applied after the loop
    must be the same in every step."""
    seen: set[int] = set()
    stack = [inst]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current.op is Op.PARAMETER:
            return True
        stack.extend(current.operands)
    return False
