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
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from hlofuse.analysis.lane_dims import CROSS_LANE_ACCESS, CROSS_LANE_REDUCE, EnvDim, Mixed, env_dim
from hlofuse.analysis.lane_linalg import is_lane_linalg
from hlofuse.analysis.reducers import ASSOCIATIVE_OPS, identity, is_identity, reducer_op
from hlofuse.ir.builder import ComputationBuilder
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import ELEMENTWISE_OPS, FusionKind, Op, OpKind
from hlofuse.ir.shapes import Shape

# Rule ids of a refusal (the decision log's words).
STATE_NOT_TUPLE = "whole-loop-state-not-tuple"
NO_PARALLEL_DIMENSION = "whole-loop-no-parallel-dimension"
OPAQUE_OP = "whole-loop-opaque-op"
NESTED_CONTROL_FLOW = "whole-loop-nested-control-flow"
DATA_DEPENDENT_TRIP_COUNT = "whole-loop-data-dependent-trip-count"
STATE_TOO_LARGE = "whole-loop-state-too-large"

# Per-lane values of one loop element: small ones are written out position by position in
# lane code, larger ones are computed in loops over the lane's scratch area (both live in
# the block's local arrays, so this bounds their size: 1024 values x 32 lanes x 8 bytes).
DEFAULT_MAX_STATE_ELEMENTS_PER_ENV = 1024
DEFAULT_MAX_UNIFORM_ELEMENTS = 64
# State-free arrays at most this large (without an N dimension) that lane code reads are
# computed once per step rather than per lane.
LANE_INPUT_MAX_ELEMENTS = 64

# Dots lane code computes element by element (codegen/dot_elemental.py writes the
# contracting positions out): float, at most this many contracting positions.
SMALL_DOT_CONTRACTION = 64


def contraction_size(inst: Instruction) -> int:
    """The number of contracting positions summed for one element of a dot."""
    lhs = inst.operands[0].shape.dims
    return math.prod(lhs[d] for d in inst.ints("lhs_contracting_dims"))


def is_small_dot(inst: Instruction) -> bool:
    return (inst.dtype.is_float and inst.dtype.bits >= 32
            and contraction_size(inst) <= SMALL_DOT_CONTRACTION)


# A whole-loop fusion is a kCustom fusion whose backend_config names this emitter, as XLA's
# custom fusions name theirs; it also carries the number of lanes per block.
WHOLE_LOOP_FUSION = "whole_loop"
MAX_LANES = 256

# Ops lane and uniform code compute element by element (besides the element-wise ones).
_STRUCTURAL = frozenset({
    Op.BITCAST, Op.BROADCAST, Op.CONCATENATE, Op.CONSTANT, Op.COPY, Op.DYNAMIC_SLICE,
    Op.DYNAMIC_UPDATE_SLICE, Op.GATHER, Op.GET_TUPLE_ELEMENT, Op.IOTA, Op.PAD, Op.PARAMETER,
    Op.REDUCE, Op.REDUCE_WINDOW, Op.RESHAPE, Op.REVERSE, Op.SCATTER, Op.SLICE, Op.TRANSPOSE,
    Op.TUPLE,
})


def whole_loop_config(lanes: int, plan: LoopPlan | None = None) -> str:
    """The backend_config text of a whole-loop fusion: the emitter, the lanes per block and
    the plan's decisions (the parallel dimension's size and the per-lane elements),
    which code generation applies instead of planning again."""
    config: dict[str, object] = {"custom_fusion": WHOLE_LOOP_FUSION, "lanes": lanes}
    if plan is not None:
        config["size"] = plan.size
        config["per_env"] = sorted([*plan.per_env, *(s.element for s in plan.streamed)])
        moved = {str(i): d for i, d in sorted(plan.lane_dims.items()) if d != 0}
        if moved:
            config["lane_dims"] = moved
    return json.dumps(config, separators=(",", ":"))


def block_lanes(lanes: int, size: int) -> int:
    """Lanes per block: `lanes`, or the power of two at or above N when N is smaller
    (a block of one lane runs scalar code)."""
    return min(lanes, 1 << max(0, (size - 1).bit_length()))


def read_recorded_plan(text: str) -> tuple[int, dict[int, int]] | None:
    """(size, per-lane elements with their lane dimensions) recorded in a whole-loop
    fusion's backend_config, or None when it records none (hand-written HLO with the lanes
    only)."""
    try:
        config = json.loads(text)
    except ValueError:
        return None
    if not isinstance(config, dict):
        return None
    size, per_env = config.get("size"), config.get("per_env")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        return None
    if not isinstance(per_env, list) or not all(_is_index(i) for i in per_env):
        return None
    moved = config.get("lane_dims", {})
    if not isinstance(moved, dict) or not all(
            isinstance(k, str) and k.isdigit() and _is_index(d) for k, d in moved.items()):
        return None
    return size, {i: moved.get(str(i), 0) for i in per_env}


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def apply_recorded_plan(loop: Instruction, size: int, lane_dims: Mapping[int, int]
                        ) -> LoopPlan | Refusal:
    """The plan of `loop` for decisions fusion recorded: what runs per lane and what once
    follows from them; sizes were the pass's business, so no limits apply here."""
    refusal = _check_structure(loop)
    if refusal is not None:
        return refusal
    elements = loop.shape.elements
    if any(i >= len(elements) or d >= elements[i].rank or elements[i].dims[d] != size
           for i, d in lane_dims.items()):
        return Refusal(NO_PARALLEL_DIMENSION, loop,
                       f"%{loop.name}: the recorded plan names elements without a lane "
                       f"dimension of {size} where it says")
    return _Analysis(loop, size, dict(lane_dims), 1 << 62, 1 << 62).run()


def read_whole_loop_config(text: str) -> int | None:
    """The lanes of a whole-loop fusion's backend_config, or None if it is not one."""
    try:
        config = json.loads(text)
    except ValueError:
        return None
    if not isinstance(config, dict) or config.get("custom_fusion") != WHOLE_LOOP_FUSION:
        return None
    lanes = config.get("lanes")
    if not isinstance(lanes, int) or isinstance(lanes, bool) or not 1 <= lanes <= MAX_LANES:
        return None
    return lanes


@dataclass(frozen=True, slots=True)
class Accumulator:
    """A uniform scalar element updated as `element <op> reduce(x1) <op> reduce(x2) ...`.

    Each reduce runs `op` over all dimensions of a per-lane value from the op's
    identity; with one lane, a reduce of a one-element value is the reshape to a scalar that
    XLA's simplifier makes of it (`one_element_reshape`), and stands for it here. `combines`
    are the `op` instructions joining them with the element (several after unrolling), the
    last one being the element's new value. `reducer` and `identity` are a reduce's (or, with
    reshapes only, made here: `(a, b) -> op(a, b)` and the op's identity).
    """

    element: int
    op: Op
    reduces: tuple[Instruction, ...]
    combines: tuple[Instruction, ...]
    reducer: Computation
    identity: Instruction

    @property
    def operands(self) -> tuple[Instruction, ...]:
        return tuple(r.operands[0] for r in self.reduces)


def one_element_reshape(inst: Instruction) -> bool:
    """A reshape of a one-element array to a scalar: what XLA's simplifier leaves of a reduce
    whose result keeps every element (`passes/simplify.reduce_keeping_every_element`), so with
    one lane the sum over the lanes of a per-lane scalar."""
    return inst.op is Op.RESHAPE and inst.shape.is_array and not inst.shape.dims \
        and inst.operands[0].shape.num_elements == 1


def _reducer_and_identity(op: Op, dtype: DType) -> tuple[Computation, Instruction]:
    """`(a, b) -> op(a, b)` over `dtype` scalars, and the op's identity as a constant."""
    builder = ComputationBuilder(f"accumulate_{op.text}")
    scalar = Shape.scalar(dtype)
    builder.add(op, [builder.parameter(0, scalar), builder.parameter(1, scalar)])
    start = identity(op, dtype)
    assert start is not None, (op, dtype)
    constants = ComputationBuilder("identity")
    return builder.build(), constants.constant(start, dtype)


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
    per_env: tuple[int, ...]  # tuple elements each lane holds its part of through the loop
    uniform: tuple[int, ...]  # uniform elements (accumulators excluded)
    accumulators: tuple[Accumulator, ...]
    lane: frozenset[int]  # id() of the body instructions computed per lane
    uniform_code: frozenset[int]  # id() of the body and condition instructions computed once
    lane_inputs: tuple[Instruction, ...]  # uniform values lane code reads, in body order
    env_dims: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    dependent: frozenset[int] = frozenset()  # id() of the state-dependent instructions
    # The dimension holding the lanes of each per-lane element (held and streamed).
    lane_dims: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    streamed: tuple[Streamed, ...] = ()

    @property
    def condition(self) -> Computation:
        return self.loop.calls[0]

    @property
    def body(self) -> Computation:
        return self.loop.calls[1]

    def elements_per_env(self, element: int) -> int:
        return self.loop.shape.elements[element].num_elements // self.size


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a loop is not parallel: a rule id, the first offending instruction, a message."""

    rule: str
    instruction: Instruction
    message: str
    figures: Mapping[str, int | str] = field(default_factory=lambda: MappingProxyType({}))
    # Per-lane elements that uniform code needs whole (candidates to make uniform).
    demotable: frozenset[int] = frozenset()


def plan_parallel_loop(loop: Instruction, *,
                       max_state_elements_per_env: int = DEFAULT_MAX_STATE_ELEMENTS_PER_ENV,
                       max_uniform_elements: int = DEFAULT_MAX_UNIFORM_ELEMENTS
                       ) -> LoopPlan | Refusal:
    """The loop's plan, or the refusal of the first candidate dimension that fails."""
    refusal = _check_structure(loop)
    if refusal is not None:
        return refusal
    elements = loop.shape.elements
    candidates = _candidate_sizes(loop)
    if not candidates:
        return Refusal(NO_PARALLEL_DIMENSION, loop,
                       f"%{loop.name}: no loop state has a leading dimension to run in parallel")
    first: Refusal | None = None
    for size in candidates:
        lane_dims = {i: d for i in range(len(elements))
                     if (d := _lane_dim(loop, i, size)) is not None}
        per_env = set(lane_dims)
        while per_env:
            result = _Analysis(loop, size, {i: lane_dims[i] for i in per_env},
                               max_state_elements_per_env, max_uniform_elements).run()
            if isinstance(result, LoopPlan):
                return result
            first = first or result
            if not result.demotable:
                break
            per_env -= result.demotable
    assert first is not None
    return first


def _candidate_sizes(loop: Instruction) -> list[int]:
    """Dimensions of the state, the most common first (elements having it, then as a leading
    dimension, then the largest)."""
    elements = [e for e in loop.shape.elements if e.rank >= 1]
    counts = Counter(n for e in elements for n in set(e.dims) if n > 0)
    leading = Counter(e.dims[0] for e in elements)
    return sorted(counts, key=lambda n: (-counts[n], -leading[n], -n))


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


def _check_structure(loop: Instruction) -> Refusal | None:
    """A tuple of arrays as state, a tuple root, and only ops lane code can compute."""
    shape = loop.shape
    if not shape.is_tuple or any(not e.is_array for e in shape.elements):
        return Refusal(STATE_NOT_TUPLE, loop,
                       f"%{loop.name}: whole-loop fusion needs a tuple of arrays as loop state, "
                       f"not {shape.text(False)}")
    condition, body = loop.calls
    if body.root.op is not Op.TUPLE:
        return Refusal(STATE_NOT_TUPLE, body.root,
                       f"%{loop.name}: its body's root %{body.root.name} is not a tuple")
    for comp in (condition, body):
        param = comp.parameters[0]
        for inst in comp.instructions:
            refusal = _op_refusal(loop, inst)
            # A nested loop is named as such even when it takes the whole state.
            if refusal is not None and refusal.rule == NESTED_CONTROL_FLOW:
                return refusal
            if any(o is param for o in inst.operands) and inst.op is not Op.GET_TUPLE_ELEMENT:
                return Refusal(STATE_NOT_TUPLE, inst,
                               f"%{loop.name}: %{inst.name} uses the whole loop state, not "
                               "its elements")
            if refusal is not None:
                return refusal
    return None


def _op_refusal(loop: Instruction, inst: Instruction) -> Refusal | None:
    if inst.op is Op.FUSION and inst.attrs.get("kind") == FusionKind.CUSTOM:
        return Refusal(NESTED_CONTROL_FLOW, inst,
                       f"%{loop.name}: its body runs %{inst.name}, a loop fused into a kernel "
                       "of its own whose trip count is not a small constant (only those are "
                       "unrolled into the lane's kernel)")
    if inst.op.definition.kind is OpKind.CONTROL:
        return Refusal(NESTED_CONTROL_FLOW, inst,
                       f"%{loop.name}: its body runs {inst.op.text} %{inst.name}, which is not "
                       "a loop with a small constant trip count (the only nested control flow "
                       "unrolled into the lane's kernel)")
    if inst.op in ELEMENTWISE_OPS or inst.op in _STRUCTURAL:
        return None
    if inst.op is Op.DOT and is_small_dot(inst):
        return None
    if is_lane_linalg(inst):
        return None
    return Refusal(OPAQUE_OP, inst,
                   f"%{loop.name}: {inst.op.text} %{inst.name} is opaque (a library call or "
                   "an op without element-wise code); the loop cannot become one kernel")


class _Refused(Exception):
    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


class _Analysis:
    """One attempt: a size N and a set of per-lane elements."""

    def __init__(self, loop: Instruction, size: int, lane_dims: dict[int, int],
                 max_per_env: int, max_uniform: int) -> None:
        self.loop = loop
        self.size = size
        self.lane_dims = lane_dims
        self.per_env = frozenset(lane_dims)
        self.max_per_env = max_per_env
        self.max_uniform = max_uniform
        self.condition, self.body = loop.calls
        self.dependent: set[int] = set()  # id() of state-dependent instructions
        self.env: dict[int, EnvDim] = {}  # id() -> lane dimension (N > 1)
        self.users: dict[int, list[Instruction]] = {}

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
        for comp in (self.condition, self.body):
            for inst in comp.instructions:
                for operand in inst.operands:
                    self.users.setdefault(id(operand), []).append(inst)
        self.streamed = self._streamed()
        self._check_sizes()
        for comp in (self.condition, self.body):
            for inst in comp.instructions:
                self._classify(comp, inst)
        accumulators = self._accumulators()
        accumulated = {a.element for a in accumulators}
        uniform = tuple(i for i in range(len(self.loop.shape.elements))
                        if i not in self.per_env and i not in accumulated)
        for i in uniform:
            if self.loop.shape.elements[i].num_elements > self.max_uniform:
                raise self.refuse(STATE_TOO_LARGE, self.loop,
                                  f"uniform loop element {i} has "
                                  f"{self.loop.shape.elements[i].num_elements} elements, over "
                                  f"{self.max_uniform}", element=i, limit=self.max_uniform)
        lane, inputs = self._lane_code(accumulators)
        roots = [(self.condition.root, True)]
        roots += [(self.body.root.operands[i], False) for i in uniform]
        roots += [(inst, False) for inst in inputs]
        uniform_code = self._uniform_code(roots)
        order = {id(inst): k for k, inst in enumerate(self.body.instructions)}
        lane_inputs = tuple(sorted(inputs, key=lambda inst: order[id(inst)]))
        env_dims = {key: value for key, value in self.env.items() if isinstance(value, int)}
        held = tuple(sorted(self.per_env - {s.element for s in self.streamed}))
        return LoopPlan(self.loop, self.size, held, uniform,
                        tuple(accumulators), frozenset(lane), frozenset(uniform_code),
                        lane_inputs, MappingProxyType(env_dims), frozenset(self.dependent),
                        MappingProxyType(dict(self.lane_dims)), self.streamed)

    def _streamed(self) -> tuple[Streamed, ...]:
        """The per-lane elements the body only overwrites a slice of (their old value read by
        nothing but the dynamic-update-slice that is their new value) and the condition
        never reads."""
        out = []
        root = self.body.root
        for i in sorted(self.per_env):
            value = root.operands[i]
            if value.op is not Op.DYNAMIC_UPDATE_SLICE or self.loop.shape.elements[i].rank < 2:
                continue
            if sum(1 for o in root.operands if o is value) != 1 or \
                    not self._only_used_by(value, root):
                continue
            if self._element_read(value.operands[0]) != i:
                continue
            reads = [inst for inst in self.body.instructions if self._element_read(inst) == i]
            if any(not self._only_used_by(r, value) for r in reads):
                continue
            if any(self._element_read(inst) == i and self.users.get(id(inst))
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
        for i in sorted(self.per_env - streamed):
            shape = self.loop.shape.elements[i]
            per_env = shape.num_elements // self.size
            if per_env > self.max_per_env:
                raise self.refuse(STATE_TOO_LARGE, self.loop,
                                  f"loop element {i} ({shape.text(False)}) holds {per_env} "
                                  f"values per lane, over {self.max_per_env}",
                                  element=i, per_env=per_env, limit=self.max_per_env)

    # --- state dependence and lane dimensions ------------------------------------

    def _element_read(self, inst: Instruction) -> int | None:
        """The loop element `inst` reads from its computation's parameter, if it does."""
        if inst.op is not Op.GET_TUPLE_ELEMENT or inst.operands[0].op is not Op.PARAMETER:
            return None
        index = inst.attrs["index"]
        assert isinstance(index, int)
        return index

    def _alias(self, inst: Instruction) -> Instruction:
        """get-tuple-element of a tuple instruction is that tuple's operand."""
        while inst.op is Op.GET_TUPLE_ELEMENT and inst.operands[0].op is Op.TUPLE:
            index = inst.attrs["index"]
            assert isinstance(index, int)
            inst = inst.operands[0].operands[index]
        return inst

    def _classify(self, comp: Computation, inst: Instruction) -> None:
        element = self._element_read(inst)
        if element is not None:
            if element in self.per_env:
                self.dependent.add(id(inst))
                self.env[id(inst)] = self.lane_dims[element]
            return
        if inst.op is Op.GET_TUPLE_ELEMENT and inst.operands[0].op is Op.TUPLE:
            source = self._alias(inst)
            if id(source) in self.dependent:
                self.dependent.add(id(inst))
                self.env[id(inst)] = self.env.get(id(source), 0)
            return
        dependent = [o for o in inst.operands if id(o) in self.dependent]
        if not dependent:
            return
        self.dependent.add(id(inst))
        if self.size > 1:
            self.env[id(inst)] = self._env_dim(inst)

    def _operand_env(self, inst: Instruction) -> list[EnvDim | None]:
        return [self.env.get(id(o)) if id(o) in self.dependent else None
                for o in inst.operands]

    def _env_dim(self, inst: Instruction) -> EnvDim:
        return env_dim(self.size, inst, self._operand_env(inst))

    # --- accumulators -------------------------------------------------------------------

    def _accumulators(self) -> list[Accumulator]:
        out = []
        for i, shape in enumerate(self.loop.shape.elements):
            if i in self.per_env or shape.dims:
                continue
            found = self._accumulator(i)
            if found is not None:
                out.append(found)
        return out

    def _accumulator(self, element: int) -> Accumulator | None:
        top = self.body.root.operands[element]
        op = top.op
        if op not in ASSOCIATIVE_OPS or sum(1 for o in self.body.root.operands
                                               if o is top) != 1:
            return None
        combines: list[Instruction] = []
        leaves: list[Instruction] = []
        stack = [top]
        while stack:
            node = stack.pop()
            if node.op is op and not node.shape.dims and (node is top or len(
                    self.users.get(id(node), [])) == 1):
                combines.append(node)
                stack.extend(node.operands)
            else:
                leaves.append(node)
        reads = [leaf for leaf in leaves if self._element_read(leaf) == element]
        reduces = [leaf for leaf in leaves if self._element_read(leaf) != element]
        if len(reads) != 1 or not reduces:
            return None
        if not all(self._is_accumulated_reduce(r, op) for r in reduces):
            return None
        inside = {id(c) for c in combines}
        if not all(all(id(u) in inside for u in self.users.get(id(leaf), []))
                   for leaf in [*leaves, *combines[1:]]):
            return None
        if not all(u is self.body.root for u in self.users.get(id(top), [])):
            return None
        if any(self._element_read(inst) == element for inst in self.condition.instructions):
            return None
        if any(self._element_read(inst) == element and inst is not reads[0]
               for inst in self.body.instructions):
            return None
        if len({id(r) for r in reduces}) != len(reduces):
            return None
        combines.reverse()
        proper = [r for r in reduces if r.op is Op.REDUCE]
        if proper:
            reducer, start = proper[0].calls[0], proper[0].operands[1]
        else:
            reducer, start = _reducer_and_identity(op, top.dtype)
        return Accumulator(element, op, tuple(reduces), tuple(combines), reducer, start)

    def _is_accumulated_reduce(self, reduce: Instruction, op: Op) -> bool:
        if self.size == 1 and one_element_reshape(reduce):
            return id(reduce.operands[0]) in self.dependent and identity(op, reduce.dtype) \
                is not None
        if reduce.op is not Op.REDUCE or len(reduce.operands) != 2:
            return False
        operand, init = reduce.operands
        if id(operand) not in self.dependent or id(init) in self.dependent:
            return False
        if sorted(reduce.ints("dimensions")) != list(range(operand.shape.rank)):
            return False
        return reducer_op(reduce.calls[0]) is op and is_identity(init, op)

    def _only_used_by(self, inst: Instruction, user: Instruction) -> bool:
        return all(u is user for u in self.users.get(id(inst), []))

    # --- placement ----------------------------------------------------------------------

    def _is_lane_input(self, inst: Instruction) -> bool:
        """A state-free value lane code reads that is better computed once per step."""
        shape = inst.shape
        if not shape.is_array or inst.op in (Op.CONSTANT, Op.IOTA):
            return False
        if not shape.dims:
            return True
        return shape.num_elements <= LANE_INPUT_MAX_ELEMENTS and self.size not in shape.dims

    def _lane_code(self, accumulators: list[Accumulator]) -> tuple[set[int], list[Instruction]]:
        streamed = {s.element: s for s in self.streamed}
        roots: list[tuple[Instruction, int | None]] = [
            (self.body.root.operands[i], i) for i in sorted(self.per_env - set(streamed))]
        roots += [(x, None) for a in accumulators for x in a.operands]
        for s in self.streamed:
            # Lane code computes the written slice and the uniform positions, not the element.
            self._check_lane_dim(s.update, s.element)
            for start in s.update.operands[2:]:
                if id(start) in self.dependent:
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
                inst = self._alias(stack.pop())
                if id(inst) in lane or id(inst) in inputs:
                    continue
                if id(inst) in self.dependent:
                    env = self.env.get(id(inst))
                    if isinstance(env, Mixed):
                        raise self._refuse_mixed(env)
                    lane.add(id(inst))
                    stack.extend(inst.operands)
                elif self._element_read(inst) is not None or self._is_lane_input(inst):
                    inputs[id(inst)] = inst
                else:
                    lane.add(id(inst))
                    stack.extend(inst.operands)
        return lane, list(inputs.values())

    def _check_lane_dim(self, value: Instruction, element: int) -> None:
        """The new value of a per-lane element holds the lanes where the element does."""
        if id(value) not in self.dependent or self.size == 1:
            return
        env = self.env.get(id(value))
        if isinstance(env, Mixed):
            raise self._refuse_mixed(env)
        if env != self.lane_dims[element]:
            raise self.refuse(CROSS_LANE_ACCESS, value,
                              f"its new element {element} (%{value.name}) holds the lanes "
                              f"along dimension {env}, not {self.lane_dims[element]}")

    def _uniform_code(self, roots: list[tuple[Instruction, bool]]) -> set[int]:
        seen: set[int] = set()
        for root, in_condition in roots:
            stack = [root]
            while stack:
                inst = stack.pop()
                if id(inst) in seen:
                    continue
                if id(inst) in self.dependent:
                    raise self._refuse_uniform(inst, in_condition)
                seen.add(id(inst))
                if self._element_read(inst) is None:
                    stack.extend(inst.operands)
        return seen

    def _refuse_mixed(self, mixed: Mixed) -> _Refused:
        return self.refuse(mixed.rule, mixed.instruction, mixed.message,
                           self._demotable(mixed.instruction))

    def _demotable(self, inst: Instruction) -> set[int]:
        """The per-lane elements behind `inst`, if all could be uniform instead."""
        reads = self._elements_read(inst)
        if all(self.loop.shape.elements[i].num_elements <= self.max_uniform for i in reads):
            return reads
        return set()

    def _refuse_uniform(self, inst: Instruction, in_condition: bool) -> _Refused:
        """A value computed once per step that depends on per-lane state."""
        demotable = self._demotable(inst)
        env = self.env.get(id(inst))
        if in_condition:
            # Name the op that gathers the lanes (a reduce, a slice), if there is one.
            origin = env.instruction if isinstance(env, Mixed) else inst
            return self.refuse(DATA_DEPENDENT_TRIP_COUNT, origin,
                               f"its condition reads per-lane state through "
                               f"%{origin.name} ({origin.op.text}), so the trip count depends "
                               "on data", demotable)
        if isinstance(env, Mixed):
            return self.refuse(env.rule, env.instruction, env.message, demotable)
        if inst.op is Op.REDUCE:
            return self.refuse(CROSS_LANE_REDUCE, inst,
                               f"%{inst.name} reduces over the lanes and is not an "
                               "accumulated sum (acc <op> reduce(...)) read nowhere else",
                               demotable)
        return self.refuse(CROSS_LANE_ACCESS, inst,
                           f"%{inst.name} ({inst.op.text}) is per-lane but is needed "
                           "whole by uniform code (a loop element without the parallel "
                           "dimension)", demotable)

    def _elements_read(self, inst: Instruction) -> set[int]:
        """The per-lane elements a state-dependent value depends on."""
        out: set[int] = set()
        seen: set[int] = set()
        stack = [inst]
        while stack:
            current = stack.pop()
            if id(current) in seen or id(current) not in self.dependent:
                continue
            seen.add(id(current))
            element = self._element_read(current)
            if element is not None:
                out.add(element)
            stack.extend(current.operands)
        return out
