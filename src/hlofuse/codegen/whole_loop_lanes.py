"""What a whole-loop kernel's lane code computes apart: deferred selects, small-argument math.

Two choices the whole-loop emitter (codegen/whole_loop.py) makes from the loop's plan, each
removing work the hand-written CartPole kernel does not do either:

* a deferred select: a per-lane element's new value `select(p, a, b)` where one
  operand is costly and does not depend on the state (CartPole's auto-reset: four Threefry
  draws, needed only by the lanes that just finished). The main lane loop stores the
  other operand and keeps `p` in a mask; a second lane loop stores the costly one where `p`
  picks it, which gcc runs only when some lane of the block does (masked-store sinking) and
  one lane runs behind a branch;
* small-argument math: a state-dependent sin or cos (CartPole's pole angle) or fmod (an angle
  wrapped with `%`) computed with the math library's small-argument form, the full function
  taking over only in a step where some lane's argument is beyond that form's limit.

It also picks the C of vector lane code (`lane_language`): predicates held in 32 bits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from hlofuse.analysis.parallel_loop import LoopPlan
from hlofuse.analysis.rare_selects import lane_operations, rare_selects
from hlofuse.codegen import mathlib
from hlofuse.codegen.emitter_types import SCALAR, Index
from hlofuse.codegen.language import Language
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op

# A math instruction uses its small-argument form when its operand takes at most this many
# operations: the operand is computed again where the step checks the arguments' size.
SMALL_ARGUMENT_MAX_OPERAND_OPS = 8
# A step speculates on the small-argument forms (`speculative_math`) when it calls at least this
# many full sin, cos or fmod per lane (acrobot's RK4: 18, 1.5x faster; particles: 2, not worth a
# second copy of its lane code).
SPECULATIVE_MIN_CALLS = 6
# Element-wise ops whose math function may have a small-argument form, by the function's name.
_MATH_NAMES = {Op.SINE: "sin", Op.COSINE: "cos", Op.REMAINDER: "fmod"}


@dataclasses.dataclass(frozen=True)
class Deferred:
    """A per-lane element's new value `select` whose `operand` (picked where the
    predicate equals `when`) is costly and independent of the state: the main lane loop
    stores `kept`, the deferred lane loop stores `operand` where the select picks it."""

    select: Instruction
    operand: Instruction
    kept: Instruction
    when: bool
    # The predicate is the same at every position of a lane (the auto-reset's `done`
    # broadcast over the lane's state): one mask per lane.
    per_lane: bool = False

    @property
    def predicate(self) -> Instruction:
        return self.select.operands[0]

    def predicate_index(self, index: Index) -> Index:
        """The predicate's element at the select's `index` (a scalar predicate has one)."""
        return index if self.predicate.shape.dims == self.select.shape.dims else SCALAR

    def mask_key(self, index: Index) -> tuple[object, ...]:
        if self.per_lane:
            return (id(self.predicate),)
        return (id(self.predicate), *self.predicate_index(index).key)


def deferred_selects(plan: LoopPlan) -> dict[int, Deferred]:
    """The per-lane elements whose new value is a select with one costly operand that
    does not depend on the state (analysis/rare_selects.py), by element."""
    return {r.element: Deferred(r.select, r.operand, r.kept, r.when,
                                _is_per_lane(plan, r.select.operands[0]))
            for r in rare_selects(plan)}


def _is_per_lane(plan: LoopPlan, predicate: Instruction) -> bool:
    """Whether a predicate is one value per lane broadcast over the lane's positions."""
    if not predicate.shape.dims:
        return True
    if predicate.op is not Op.BROADCAST:
        return False
    return predicate.operands[0].shape.num_elements == plan.size


def _math_with_small_forms(plan: LoopPlan, max_positions: int
                           ) -> Iterator[tuple[Instruction, mathlib.SmallArgumentForm]]:
    """The per-lane math instructions of lane code whose function has a small-argument form,
    with at most `max_positions` elements per lane."""
    for inst in plan.body.instructions:
        name = _MATH_NAMES.get(inst.op)
        form = None if name is None else mathlib.small_argument_form(name, inst.dtype)
        if form is None or id(inst) not in plan.lane or math_lane_dim(plan, inst) is None:
            continue
        if inst.shape.num_elements // plan.size <= max_positions:
            yield inst, form


def small_argument_math(plan: LoopPlan, max_positions: int
                        ) -> list[tuple[Instruction, mathlib.SmallArgumentForm]]:
    """The state-dependent math instructions of lane code whose function has a small-argument
    form: at most `max_positions` elements per lane, a cheap operand."""
    return [(inst, form) for inst, form in _math_with_small_forms(plan, max_positions)
            if id(inst) in plan.dependent and
            sum(lane_operations(plan, x) for x in inst.operands) <= SMALL_ARGUMENT_MAX_OPERAND_OPS]


def speculative_math(plan: LoopPlan, max_positions: int,
                     checked: list[tuple[Instruction, mathlib.SmallArgumentForm]]
                     ) -> list[tuple[Instruction, mathlib.SmallArgumentForm]]:
    """The per-lane math instructions of lane code with a small-argument form whose operand is
    too costly to check before the step (`small_argument_math` takes the others): the step
    runs them in their small forms and is run again with the full functions, from the state
    it started with, where some lane's argument was beyond the forms' limit. Only where the
    step calls at least SPECULATIVE_MIN_CALLS of them per lane: the kernel then holds a
    second copy of the step's lane code, which doubles the C compiler's work on it."""
    taken = {id(inst) for inst, _ in checked}
    out = [(inst, form) for inst, form in _math_with_small_forms(plan, max_positions)
           if id(inst) not in taken]
    calls = sum(inst.shape.num_elements // plan.size for inst, _ in out)
    return out if calls >= SPECULATIVE_MIN_CALLS else []


def math_lane_dim(plan: LoopPlan, inst: Instruction) -> int | None:
    """The dimension of a per-lane math instruction that holds the lanes (the leading one of
    a single lane), None when that is not a whole dimension of N."""
    dims = inst.shape.dims
    if plan.size == 1:
        return 0 if dims and dims[0] == 1 else None
    dim = plan.value_lane_dims.get(id(inst))
    if not isinstance(dim, int) or dim >= len(dims) or dims[dim] != plan.size:
        return None
    return dim


# Values narrower than this many bits make gcc vectorise a lane loop at more lanes per vector
# (as many as the narrowest type fits in 32 bytes), and every wider operation then takes
# several vector instructions: a predicate beside floats made each float operation four.
LANE_REGISTER_BITS = 32


def lane_language(lang: Language, lanes: int) -> Language:
    """The language a whole-loop kernel is written in: with vector lanes (more than one per
    block), the target's lane language (`Language.lane_language`: on the CPU, predicates in
    32-bit registers, so that a lane loop of predicates and floats vectorises with one
    vector instruction per operation). A predicate's value is 0 or 1 either way; loads and
    stores convert at memory, and a narrow streamed output is staged (`staged_storage`)."""
    return lang if lanes == 1 else lang.lane_language()


def staged_storage(lang: Language, dtype: DType) -> DType | None:
    """The type lane code stages values of `dtype` in before a narrow store (memory of
    fewer than LANE_REGISTER_BITS bits per value), None when it stores them directly."""
    if dtype.bits >= LANE_REGISTER_BITS:
        return None
    register = lang.register_type(dtype)
    return DType.F32 if register is DType.F32 else DType.S32
