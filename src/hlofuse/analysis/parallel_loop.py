"""Whether a while loop runs independently per element of a parallel dimension, and how.

A loop is parallel over a dimension of size N, its lanes (CartPole's environments, a batch),
when its state splits into per-lane arrays (a dimension of size N at any position: lane e's
part is index e along it; a `scan`'s stacked outputs `[T, N]` hold it second) and
uniform values without that dimension (the step counter, an RNG key), and one iteration
computes lane e's new state from lane e's old state and uniform values alone,
while the uniform values, and so the trip count, never depend on per-lane values. Every
lane can then run the whole loop on its own, which is what whole-loop fusion emits
(fusion/beyond_xla/whole_loop.py decides, codegen/whole_loop.py emits; both read the plan
made here).

The analysis, for a candidate N (the dimension most elements of the state have first):

* state dependence: an instruction of the body or condition is state-dependent when it reads
  a per-lane element, directly or through its operands;
* the lane dimension of every state-dependent value, propagated forward through the
  ops' index maps (lane_dims.py). An op that moves values between lanes (a
  slice of part of the lanes, a reduction over them, a reshape merging them with
  another dimension) mixes lanes;
* accumulators: a uniform scalar element updated only as `acc <op> reduce(x, <op>)` with x
  per-lane, an associative and commutative op and its identity as the reduce's
  initial value, read nowhere else (CartPole's episode count and return sum). Each
  lane keeps a partial result; the partials are combined at the end, in a fixed order
  (for floats the additions are reassociated, so the result differs by rounding only);
* placement: per-lane outputs and accumulated values are computed per lane
  ("lane" code), reading state at the lane's own index; the condition, the uniform
  outputs and the small uniform values lane code reads ("lane inputs": rank-0 values and
  arrays without an N dimension) are computed once per step ("uniform" code), and must not be
  state-dependent. A value without state dependence that is large or has an N dimension (the
  random bits of all lanes) is computed per lane, at the index lane code asks
  for.

A per-lane-looking element that uniform code needs whole (a u32[2] key when N = 2) is
made uniform and the analysis repeated. With N = 1 every value belongs to the one lane,
so only the uniform code's independence is checked.

This module searches the candidates and builds the plan (streamed elements, sizes,
placement). State dependence and lane dimensions are lane_classification.py, accumulators
loop_accumulators.py, per-step reductions across the lanes step_reductions.py, step logs of
uniform values step_logs.py, the refusals and the structural checks
parallel_loop_refusals.py, and the plan as recorded in a whole-loop fusion's backend_config
whole_loop_config.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from hlofuse.analysis.lane_classification import LaneClassification, alias, element_read
from hlofuse.analysis.lane_dims import CROSS_LANE_ACCESS, CROSS_LANE_REDUCE, Mixed
from hlofuse.analysis.loop_accumulators import Accumulator, find_accumulators
from hlofuse.analysis.masked_loops import masked_condition, unmasked_element
from hlofuse.analysis.nested_loop_states import with_tupled_nested_states
from hlofuse.analysis.parallel_loop_refusals import (
    DATA_DEPENDENT_TRIP_COUNT,
    NESTED_CONTROL_FLOW,
    NO_PARALLEL_DIMENSION,
    STATE_TOO_LARGE,
    Refusal,
    check_structure,
)
from hlofuse.analysis.step_logs import StepLog, find_step_logs
from hlofuse.analysis.step_reductions import StepReduction, find_step_reductions
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op

# Per-lane values of one loop element: small ones are written out position by position in
# lane code, larger ones are computed in loops over the lane's scratch area (both live in
# the block's local arrays, so this bounds their size: 1024 values x 32 lanes x 8 bytes).
DEFAULT_MAX_STATE_ELEMENTS_PER_LANE = 1024
DEFAULT_MAX_UNIFORM_ELEMENTS = 64
# State-free arrays at most this large (without an N dimension) that lane code reads are
# computed once per step rather than per lane.
LANE_INPUT_MAX_ELEMENTS = 64
# A uniform element the loop never changes (a policy network's weights, a physics model's
# constants carried in the state) and larger than this is read-only: every part of the kernel
# reads it where it lies, in the loop's input, and no size limit applies to it. Smaller ones
# stay uniform state (copied to the kernel's locals and handed to the lanes per step).
READ_ONLY_MIN_ELEMENTS = 64


@dataclass(frozen=True, slots=True)
class Streamed:
    """A per-lane element the body only writes, one slice per step, at positions that are
    the same for every lane (a `scan`'s stacked outputs: `ys[i] = y`): lane code writes the
    slice straight to the output instead of holding the element."""

    element: int
    update: Instruction  # the dynamic-update-slice writing the element's new value
    lane_dim: int


@dataclass(frozen=True, slots=True)
class LoopPlan:
    """How to run a parallel loop: which elements are per lane, what runs where."""

    loop: Instruction
    size: int  # N, the parallel dimension (the lanes)
    per_lane: tuple[int, ...]  # tuple elements each lane holds its part of through the loop
    uniform: tuple[int, ...]  # uniform elements (accumulators excluded)
    accumulators: tuple[Accumulator, ...]
    lane: frozenset[int]  # id() of the body instructions computed per lane
    uniform_code: frozenset[int]  # id() of the body and condition instructions computed once
    lane_inputs: tuple[Instruction, ...]  # uniform values lane code reads, in body order
    value_lane_dims: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    dependent: frozenset[int] = frozenset()  # id() of the state-dependent instructions
    # The dimension holding the lanes of each per-lane element (held and streamed).
    lane_dims: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    streamed: tuple[Streamed, ...] = ()
    # Uniform elements written a position per step from reductions over all lanes.
    step_reductions: tuple[StepReduction, ...] = ()
    # Uniform elements written a slice per step with a uniform value (step_logs.py).
    step_logs: tuple[StepLog, ...] = ()
    # Uniform elements the loop never changes, read where they lie (READ_ONLY_MIN_ELEMENTS).
    read_only: tuple[int, ...] = ()
    # The plans of the nested loops lane code runs (a physics engine's substeps, a solver's
    # iterations), by id() of their while: the same lanes, each stepping its own part.
    nested: Mapping[int, LoopPlan] = field(default_factory=lambda: MappingProxyType({}))
    # A nested loop run until no lane wants another iteration (jax.vmap of a while_loop:
    # analysis/masked_loops.py): the per-lane predicate of its condition, which lane code
    # reduces over the block's lanes; its body leaves finished lanes unchanged.
    lane_condition: Instruction | None = None

    @property
    def condition(self) -> Computation:
        return self.loop.calls[0]

    @property
    def body(self) -> Computation:
        return self.loop.calls[1]

    def nested_loops(self) -> list[Instruction]:
        """The nested loops lane code runs, in body order."""
        return [inst for inst in self.body.instructions if id(inst) in self.nested]

    def elements_per_lane(self, element: int) -> int:
        return self.loop.shape.elements[element].num_elements // self.size


def plan_parallel_loop(loop: Instruction, *,
                       max_state_elements_per_lane: int = DEFAULT_MAX_STATE_ELEMENTS_PER_LANE,
                       max_uniform_elements: int = DEFAULT_MAX_UNIFORM_ELEMENTS
                       ) -> LoopPlan | Refusal:
    """The loop's plan (the first candidate dimension's, unless a larger one's holds the same
    elements), or the refusal of the first candidate when none has a plan."""
    loop = with_tupled_nested_states(loop)
    refusal = check_structure(loop)
    if refusal is not None:
        return refusal
    elements = loop.shape.elements
    candidates = _candidate_sizes(loop)
    if not candidates:
        return Refusal(NO_PARALLEL_DIMENSION, loop,
                       f"%{loop.name}: no loop state has a leading dimension to run in parallel")
    refusals: dict[int, Refusal] = {}  # each candidate's first refusal
    plans: list[LoopPlan] = []
    for size in candidates:
        lane_dims = {i: d for i in range(len(elements))
                     if (d := _lane_dim(loop, i, size)) is not None}
        per_lane = set(lane_dims)
        while per_lane:
            result = _Analysis(loop, size, {i: lane_dims[i] for i in per_lane},
                               max_state_elements_per_lane, max_uniform_elements).run()
            if isinstance(result, LoopPlan):
                batch = candidates[0]
                serialised = [i for i in result.uniform if size != batch
                              and batch in elements[i].dims and not _passed_through(loop, i)]
                if len(serialised) <= len(result.per_lane) and (
                        result.per_lane or size == 1 or (result.streamed and size == batch)):
                    plans.append(result)
                    break
                # The lanes hold nothing, or uniform code would hold more elements with the
                # state's most common dimension (the batch, whose own plan was refused) than
                # the lanes hold: it would compute most of the batch once per step, written
                # out (a rollout planned over its key's two words or a minor dimension).
                what = (f"element {serialised[0]} ({elements[serialised[0]].text(False)}) "
                        f"would be uniform" if serialised else "no element is held by the lanes")
                result = Refusal(NO_PARALLEL_DIMENSION, loop,
                                 f"%{loop.name}: over {size} lanes {what}")
            refusals.setdefault(size, result)
            if not result.demotable:
                break
            per_lane -= result.demotable
    if plans:
        # A dimension most elements share may be a small one (a position's two axes) with a
        # plan of its own, each of its "lanes" then holding the whole batch: a later plan
        # over more lanes that holds every element the first holds is that batch.
        chosen = plans[0]
        for plan in plans[1:]:
            if plan.size > chosen.size and set(plan.per_lane) >= set(chosen.per_lane):
                chosen = plan
        return chosen
    return _refused_everywhere(loop, list(refusals.items()))


def _refused_everywhere(loop: Instruction, refusals: list[tuple[int, Refusal]]) -> Refusal:
    """The first candidate's refusal, its message naming the next two candidates' too: which
    dimension holds the lanes is a guess (the most common), and the refusal that matters is
    often a later candidate's (a rollout's two-word key is more common than its 200 lanes)."""
    first = refusals[0][1]
    prefix = f"%{loop.name}: "
    others = [f"over {size} lanes, {r.rule}: {r.message.removeprefix(prefix)}"
              for size, r in refusals[1:3]]
    if not others:
        return first
    return replace(first, message="; ".join([first.message, *others]))


def _candidate_sizes(loop: Instruction) -> list[int]:
    """Dimensions of the state, the most common first (elements having it, then as a leading
    dimension, then the largest). Elements the loop only writes a slice of per step (a scan's
    stacked outputs, whose leading dimension is the trip count) do not vote unless all are."""
    arrays = [i for i, e in enumerate(loop.shape.elements) if e.rank >= 1]
    read = [i for i in arrays if not _written_only(loop, i)]
    elements = [loop.shape.elements[i] for i in (read or arrays)]
    counts = Counter(n for e in elements for n in set(e.dims) if n > 0)
    leading = Counter(e.dims[0] for e in elements)
    return sorted(counts, key=lambda n: (-counts[n], -leading[n], -n))


def _passed_through(loop: Instruction, element: int) -> bool:
    """The body's new value of loop element `element` is its old one (a loop invariant)."""
    body = loop.calls[1]
    return body.root.op is Op.TUPLE and element_read(body.root.operands[element]) == element


def _written_only(loop: Instruction, element: int) -> bool:
    """The body's only use of loop element `element` is overwriting a slice of it, and the
    condition does not read it."""
    condition, body = loop.calls
    if body.root.op is not Op.TUPLE or any(element_read(inst) == element
                                           for inst in condition.instructions):
        return False
    value = body.root.operands[element]
    if value.op is not Op.DYNAMIC_UPDATE_SLICE or element_read(value.operands[0]) != element:
        return False
    reads = [inst for inst in body.instructions if element_read(inst) == element]
    if len(reads) != 1:
        return False
    uses = [(inst, k) for inst in body.instructions for k, o in enumerate(inst.operands)
            if o is reads[0]]
    return uses == [(value, 0)]


def _lane_dim(loop: Instruction, element: int, size: int) -> int | None:
    """The dimension of loop element `element` that holds N = `size` lanes: its only
    dimension of that size; for several, the one the body's update of the element covers
    whole (a stacked output [T, N] with T = N written a row per step), else the first."""
    shape = loop.shape.elements[element]
    positions = [d for d in range(shape.rank) if shape.dims[d] == size]
    if len(positions) <= 1:
        return positions[0] if positions else None
    body = loop.calls[1]
    value = body.root.operands[element] if body.root.op is Op.TUPLE else None
    if value is not None and value.op is Op.DYNAMIC_UPDATE_SLICE:
        update = value.operands[1].shape.dims
        covered = [d for d in positions if update[d] == size]
        if covered:
            return covered[0]
    return positions[0]


def apply_recorded_plan(loop: Instruction, size: int, lane_dims: Mapping[int, int]
                        ) -> LoopPlan | Refusal:
    """The plan of `loop` for decisions fusion recorded: what runs per lane and what once
    follows from them; sizes were the pass's business, so no limits apply here."""
    loop = with_tupled_nested_states(loop)
    refusal = check_structure(loop)
    if refusal is not None:
        return refusal
    elements = loop.shape.elements
    if any(i >= len(elements) or d >= elements[i].rank or elements[i].dims[d] != size
           for i, d in lane_dims.items()):
        return Refusal(NO_PARALLEL_DIMENSION, loop,
                       f"%{loop.name}: the recorded plan names elements without a lane "
                       f"dimension of {size} where it says")
    return _Analysis(loop, size, dict(lane_dims), 1 << 62, 1 << 62).run()


class _Refused(Exception):
    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


class _Analysis:
    """One attempt: a size N and a set of per-lane elements."""

    def __init__(self, loop: Instruction, size: int, lane_dims: dict[int, int],
                 max_per_lane: int, max_uniform: int, nested: bool = False,
                 lane_condition: Instruction | None = None) -> None:
        self.loop = loop
        self.size = size
        self.lane_dims = lane_dims
        self.per_lane = frozenset(lane_dims)
        self.max_per_lane = max_per_lane
        self.max_uniform = max_uniform
        # A nested loop runs inside lane code: no outputs streamed to memory, no sums
        # across the lanes (lane code sees one lane at a time).
        self.is_nested = nested
        self.lane_condition = lane_condition
        self.condition, self.body = loop.calls
        self.lanes = LaneClassification(loop, size, lane_dims, self._plan_nested)

    def run(self) -> LoopPlan | Refusal:
        try:
            return self._plan()
        except _Refused as e:
            return e.refusal

    def refuse(self, rule: str, inst: Instruction, message: str,
               demotable: Iterable[int] = (), **figures: int | str) -> _Refused:
        return _Refused(Refusal(rule, inst, f"%{self.loop.name}: {message}",
                                MappingProxyType(dict(figures)), frozenset(demotable)))

    # --- the plan -----------------------------------------------------------------------

    def _plan(self) -> LoopPlan:
        self.streamed = () if self.is_nested else self._streamed()
        self._check_sizes()
        self.lanes.classify()
        accumulators = [] if self.is_nested else find_accumulators(self.lanes)
        step_reductions = [] if self.is_nested else find_step_reductions(self.lanes)
        accumulated = {a.element for a in accumulators} | {s.element for s in step_reductions}
        step_logs = [] if self.is_nested else find_step_logs(self.lanes, accumulated)
        accumulated |= {s.element for s in step_logs}
        unchanged = tuple(i for i in range(len(self.loop.shape.elements))
                          if i not in self.per_lane and i not in accumulated)
        self.read_only = frozenset(i for i in unchanged if self._read_only(i))
        uniform = tuple(i for i in unchanged if i not in self.read_only)
        masked = self._masked(uniform)
        lane, inputs = self._lane_code(accumulators, step_reductions)
        roots = [] if masked is not None else [(self.condition.root, True)]
        roots += [(self.body.root.operands[i], False) for i in uniform]
        roots += [(inst, False) for inst in inputs]
        roots += [(start, False) for s in step_reductions for start in s.starts]
        roots += [(x, False) for s in step_logs for x in s.update.operands[1:]]
        uniform_code = self._uniform_code(roots)
        # After the placement, whose refusals name what is wrong with a large uniform
        # element computed from the lanes (a reduction across them the state also reads).
        for i in uniform:
            if self.loop.shape.elements[i].num_elements > self.max_uniform:
                raise self.refuse(STATE_TOO_LARGE, self.loop,
                                  f"uniform loop element {i} has "
                                  f"{self.loop.shape.elements[i].num_elements} elements, over "
                                  f"{self.max_uniform}", element=i, limit=self.max_uniform)
        # (A masked loop's lane code reads its condition's values too.)
        order = {id(inst): k for k, inst in
                 enumerate((*self.condition.instructions, *self.body.instructions))}
        lane_inputs = tuple(sorted(inputs, key=lambda inst: order[id(inst)]))
        value_lane_dims = {key: value for key, value in self.lanes.lane_at.items()
                           if isinstance(value, int)}
        held = tuple(sorted(self.per_lane - {s.element for s in self.streamed}))
        return LoopPlan(self.loop, self.size, held, uniform,
                        tuple(accumulators), frozenset(lane), frozenset(uniform_code),
                        lane_inputs, MappingProxyType(value_lane_dims),
                        frozenset(self.lanes.dependent),
                        MappingProxyType(dict(self.lane_dims)), self.streamed,
                        tuple(step_reductions), tuple(step_logs), tuple(sorted(self.read_only)),
                        MappingProxyType(dict(self.lanes.nested)), masked)

    def _masked(self, uniform: tuple[int, ...]) -> Instruction | None:
        """The per-lane predicate lane code stops the loop by, for a nested loop of
        jax.vmap's masked form whose predicate depends on the lanes' state; refused when its
        body would change a finished lane."""
        predicate = self.lane_condition
        if predicate is None or id(predicate) not in self.lanes.dependent:
            return None
        unmasked = unmasked_element(self.loop, predicate, frozenset(uniform))
        if unmasked is not None:
            raise self.refuse(DATA_DEPENDENT_TRIP_COUNT, self.body.root.operands[unmasked],
                              f"its condition waits for every lane (%{predicate.name}), and "
                              f"its body changes element {unmasked} of a lane that has "
                              "finished, so no lane can stop before the slowest")
        return predicate

    def _plan_nested(self, loop: Instruction, known: dict[int, int]) -> LoopPlan | Refusal:
        """The plan of a nested loop for these lanes. The elements whose initial value depends
        on the state are held along the dimension `known` says; any other element with a
        dimension of N lanes is held too (a zero-filled buffer the loop fills per lane),
        unless the loop needs it whole, which makes it uniform."""
        # (check_structure of the outer loop checked the nested one's structure.)
        loop = with_tupled_nested_states(loop)
        lane_dims = dict(known)
        for i in range(len(loop.shape.elements)):
            if i not in lane_dims and (d := _lane_dim(loop, i, self.size)) is not None:
                lane_dims[i] = d
        predicate = masked_condition(loop)
        while True:
            result = _Analysis(loop, self.size, lane_dims, self.max_per_lane, self.max_uniform,
                               nested=True, lane_condition=predicate).run()
            if isinstance(result, LoopPlan):
                return result
            demoted = set(result.demotable) - set(known)
            if not demoted or not demoted <= set(lane_dims):
                return result
            lane_dims = {i: d for i, d in lane_dims.items() if i not in demoted}

    def _read_only(self, element: int) -> bool:
        """A large element whose new value is its old one, read straight from the state."""
        # The body's one parameter is the state: a read of it is a read of the old value.
        return (self.loop.shape.elements[element].num_elements > READ_ONLY_MIN_ELEMENTS
                and element_read(self.body.root.operands[element]) == element)

    def _streamed(self) -> tuple[Streamed, ...]:
        """The per-lane elements the body only overwrites a slice of (their old value read by
        nothing but the dynamic-update-slice that is their new value) and the condition
        never reads."""
        out = []
        root = self.body.root
        for i in sorted(self.per_lane):
            value = root.operands[i]
            if value.op is not Op.DYNAMIC_UPDATE_SLICE or self.loop.shape.elements[i].rank < 2:
                continue
            if sum(1 for o in root.operands if o is value) != 1 or \
                    not self.lanes.only_used_by(value, root):
                continue
            if element_read(value.operands[0]) != i:
                continue
            reads = [inst for inst in self.body.instructions if element_read(inst) == i]
            if any(not self.lanes.only_used_by(r, value) for r in reads):
                continue
            if any(element_read(inst) == i and self.lanes.users.get(id(inst))
                   for inst in self.condition.instructions):
                continue
            if any(o is value.operands[0] for o in value.operands[1:]):
                continue
            if value.operands[1].shape.dims[self.lane_dims[i]] != self.size:
                continue  # a slice of part of the lanes: held, and refused if it mixes lanes
            out.append(Streamed(i, value, self.lane_dims[i]))
        return tuple(out)

    def _check_sizes(self) -> None:
        streamed = {s.element for s in self.streamed}
        for i in sorted(self.per_lane - streamed):
            shape = self.loop.shape.elements[i]
            per_lane = shape.num_elements // self.size
            if per_lane > self.max_per_lane:
                raise self.refuse(STATE_TOO_LARGE, self.loop,
                                  f"loop element {i} ({shape.text(False)}) holds {per_lane} "
                                  f"values per lane, over {self.max_per_lane}",
                                  element=i, per_lane=per_lane, limit=self.max_per_lane)

    # --- placement ----------------------------------------------------------------------

    def _is_lane_input(self, inst: Instruction) -> bool:
        """A state-free value lane code reads that is better computed once per step."""
        shape = inst.shape
        if not shape.is_array or inst.op in (Op.CONSTANT, Op.IOTA):
            return False
        if not shape.dims:
            return True
        return shape.num_elements <= LANE_INPUT_MAX_ELEMENTS and self.size not in shape.dims

    def _lane_code(self, accumulators: list[Accumulator],
                   step_reductions: list[StepReduction]) -> tuple[set[int], list[Instruction]]:
        streamed = {s.element: s for s in self.streamed}
        roots: list[tuple[Instruction, int | None]] = [
            (self.body.root.operands[i], i) for i in sorted(self.per_lane - set(streamed))]
        roots += [(x, None) for a in accumulators for x in a.operands]
        # Lane code reduces each step's lanes and needs the position the step writes.
        roots += [(r.operand, None) for s in step_reductions for r in s.reduces]
        roots += [(start, None) for s in step_reductions for start in s.starts]
        if self.lane_condition is not None and id(self.lane_condition) in self.lanes.dependent:
            roots.append((self.lane_condition, None))
        for s in self.streamed:
            # Lane code computes the written slice and the uniform positions, not the element.
            self._check_lane_dim(s.update, s.element)
            for start in s.update.operands[2:]:
                if id(start) in self.lanes.dependent:
                    raise self.refuse(CROSS_LANE_ACCESS, start,
                                      f"%{s.update.name} writes element {s.element} at a "
                                      "per-lane position")
            roots += [(x, None) for x in s.update.operands[1:]]
        lane: set[int] = set()
        inputs: dict[int, Instruction] = {}
        for root, element in roots:
            if element is not None:
                self._check_lane_dim(root, element)
            stack = [root]
            while stack:
                inst = alias(stack.pop())
                if id(inst) in lane or id(inst) in inputs:
                    continue
                if id(inst) in self.lanes.dependent:
                    lane_at = self.lanes.lane_at.get(id(inst))
                    if isinstance(lane_at, Mixed):
                        raise self._refuse_mixed(lane_at)
                    lane.add(id(inst))
                    stack.extend(inst.operands)
                elif element_read(inst) in self.read_only:
                    lane.add(id(inst))  # lane code reads it where it lies
                elif element_read(inst) is not None or self._is_lane_input(inst):
                    inputs[id(inst)] = inst
                else:
                    lane.add(id(inst))
                    stack.extend(inst.operands)
        return lane, list(inputs.values())

    def _check_lane_dim(self, value: Instruction, element: int) -> None:
        """The new value of a per-lane element holds the lanes where the element does."""
        if id(value) not in self.lanes.dependent or self.size == 1:
            return
        lane_at = self.lanes.lane_at.get(id(value))
        if isinstance(lane_at, Mixed):
            raise self._refuse_mixed(lane_at)
        if lane_at != self.lane_dims[element]:
            raise self.refuse(CROSS_LANE_ACCESS, value,
                              f"its new element {element} (%{value.name}) holds the lanes "
                              f"along dimension {lane_at}, not {self.lane_dims[element]}")

    def _uniform_code(self, roots: list[tuple[Instruction, bool]]) -> set[int]:
        seen: set[int] = set()
        for root, in_condition in roots:
            stack = [root]
            while stack:
                inst = stack.pop()
                if id(inst) in seen:
                    continue
                if id(inst) in self.lanes.dependent:
                    raise self._refuse_uniform(inst, in_condition)
                seen.add(id(inst))
                if element_read(inst) is None:
                    stack.extend(inst.operands)
        return seen

    def _refuse_mixed(self, mixed: Mixed) -> _Refused:
        return self.refuse(mixed.rule, mixed.instruction, mixed.message,
                           self._demotable(mixed.instruction))

    def _demotable(self, inst: Instruction) -> set[int]:
        """The per-lane elements behind `inst`, if all could be uniform instead."""
        reads = self.lanes.elements_read(inst)
        if all(self.loop.shape.elements[i].num_elements <= self.max_uniform for i in reads):
            return reads
        return set()

    def _refuse_uniform(self, inst: Instruction, in_condition: bool) -> _Refused:
        """A value computed once per step that depends on per-lane state."""
        demotable = self._demotable(inst)
        lane_at = self.lanes.lane_at.get(id(inst))
        if in_condition:
            # Name the op that gathers the lanes (a reduce, a slice), if there is one.
            origin = lane_at.instruction if isinstance(lane_at, Mixed) else inst
            return self.refuse(DATA_DEPENDENT_TRIP_COUNT, origin,
                               f"its condition reads per-lane state through "
                               f"%{origin.name} ({origin.op.text}), so the trip count depends "
                               "on data", demotable)
        if isinstance(lane_at, Mixed):
            return self.refuse(lane_at.rule, lane_at.instruction, lane_at.message, demotable)
        loop = inst.operands[0] if inst.op is Op.GET_TUPLE_ELEMENT else inst
        if loop.op is Op.WHILE:
            return self.refuse(NESTED_CONTROL_FLOW, loop,
                               f"values computed once per step (the condition, the uniform "
                               f"state) need the result of nested loop %{loop.name}, which "
                               "runs in lane code", demotable)
        if inst.op is Op.REDUCE:
            return self.refuse(CROSS_LANE_REDUCE, inst,
                               f"%{inst.name} reduces over the lanes and is not an "
                               "accumulated sum (acc <op> reduce(...)) read nowhere else",
                               demotable)
        return self.refuse(CROSS_LANE_ACCESS, inst,
                           f"%{inst.name} ({inst.op.text}) is per-lane but is needed "
                           "whole by uniform code (a loop element without the parallel "
                           "dimension)", demotable)
