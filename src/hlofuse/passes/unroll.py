"""loop-unroll: a while loop with a known trip count runs k iterations per loop iteration.

A counted loop is recognised from its induction variable: a tuple element whose initial value
is an integer constant, that the body advances by a constant (`add(i, c)`, `add(c, i)` or
`subtract(i, c)` at the root tuple), and that the condition compares with a constant (its
root is `compare(i, n)` or `compare(n, i)`, any direction): the pattern of `lax.scan`,
`fori_loop` and the front end's scan. Its trip count T follows from those three numbers. With
factor k, the body becomes k copies of itself chained one after another, the loop runs
m = T // k times (its condition compares the counter with start + m * k * step), and the
r = T % k remaining iterations are peeled: r copies of the body applied to the loop's result,
so every trip count keeps its meaning. When m <= 1 the loop is unrolled completely (T copies,
no loop left). Copies are chained through the body's root tuple; `simplify` then forwards the
get-tuple-elements, so one fusion can span several iterations.

k = 0 (the default) chooses the factor with `auto_unroll_factor`: the study's 10, capped by the
instruction budget and the trip count, moved to a divisor of the trip count when one is close
so nothing is peeled. That function is the hook for a cost model: replace it, or pass the
factor it picks.

Refused, and logged (rule ids): a condition that is not a counter compared with a constant
(`data-dependent-condition`), no counter advanced by a constant (`no-induction-variable`), a
counter that starts from a non-constant or a loop that would never end
(`unknown-trip-count`), a counter that would overflow (`counter-overflow`), a body with more
than `max_body_instructions` instructions or more than `max_unrolled_instructions` after
unrolling (`body-too-large`), a body with nested loops, conditionals or calls
(`nested-control-flow`), a body or condition shared with another loop
(`shared-loop-computation`), and nothing to gain (`factor-one`).

Mirrors XLA's WhileLoopUnroller (full unroll only, trip count <= 64, body <= 800, total <=
10000 instructions, not in the default pipelines) and the GPU's DoubleBufferLoopUnrolling
(factor 2 with a peeled iteration, run after fusion); here it runs before fusion, so
iterations fuse with each other.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.passes.call_inliner import inline_computation
from hlofuse.passes.decisions import RewriteLog
from hlofuse.passes.loops import call_counts, has_control_flow, with_reachable_computations
from hlofuse.passes.rewrite import RewriteBuilder, Transform, rewrite_module

if TYPE_CHECKING:
    from hlofuse.passes.manager import DecisionSink

# XLA's WhileLoopUnroller limits.
DEFAULT_MAX_BODY_INSTRUCTIONS = 800
DEFAULT_MAX_UNROLLED_INSTRUCTIONS = 10000
# The study unrolled its step loop by 10.
AUTO_MAX_FACTOR = 10

_FLIPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ", "NE": "NE"}


@dataclass(frozen=True, slots=True)
class CountedLoop:
    """A while loop's induction variable and trip count."""

    index: int  # tuple element of the counter
    start: int
    step: int
    trip_count: int
    body_instructions: int


class NotCounted(Exception):
    """Why a loop is not a counted loop: a rule id and a message."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message


def _constant_int(inst: Instruction) -> int | None:
    if inst.op is not Op.CONSTANT or not inst.shape.is_scalar or not inst.dtype.is_integer:
        return None
    literal = inst.attrs["literal"]
    assert isinstance(literal, np.ndarray)
    return int(literal)


def _counter_read(inst: Instruction, param: Instruction) -> int | None:
    """The tuple index `inst` reads from the parameter, if it is such a read."""
    if inst.op is not Op.GET_TUPLE_ELEMENT or inst.operands[0] is not param:
        return None
    index = inst.attrs["index"]
    assert isinstance(index, int)
    return index


def _condition(loop: Instruction, cond: Computation) -> tuple[int, str, int]:
    """(counter index, direction as `counter <dir> bound`, bound) of the condition."""
    root, param = cond.root, cond.parameters[0]
    if root.op is not Op.COMPARE:
        raise NotCounted("data-dependent-condition",
                         f"%{loop.name}: its condition ends in %{root.name} ({root.op.text}), "
                         "not in a comparison of a counter with a constant")
    lhs, rhs = root.operands
    direction = root.attrs["direction"]
    assert isinstance(direction, str)
    if _counter_read(lhs, param) is None:
        lhs, rhs, direction = rhs, lhs, _FLIPPED[direction]
    index = _counter_read(lhs, param)
    bound = _constant_int(rhs)
    if index is None or bound is None or not lhs.dtype.is_integer:
        raise NotCounted("data-dependent-condition",
                         f"%{loop.name}: its condition %{root.name} does not compare an integer "
                         "loop element with a constant")
    return index, direction, bound


def _step(loop: Instruction, body: Computation, index: int) -> int:
    root, param = body.root, body.parameters[0]
    update = root.operands[index] if root.op is Op.TUPLE else None
    if update is not None and update.op in (Op.ADD, Op.SUBTRACT):
        a, b = update.operands
        if _counter_read(a, param) == index and _constant_int(b) is not None:
            value = _constant_int(b)
            assert value is not None
            return value if update.op is Op.ADD else -value
        if update.op is Op.ADD and _counter_read(b, param) == index:
            value = _constant_int(a)
            if value is not None:
                return value
    what = f"%{update.name} ({update.op.text})" if update is not None else "a non-tuple root"
    raise NotCounted("no-induction-variable",
                     f"%{loop.name}: the body updates element {index} with {what}, not by "
                     "adding a constant to it")


def trip_count(start: int, step: int, direction: str, bound: int) -> int | None:
    """How often `counter <direction> bound` holds for counter = start, start + step, ...;
    None if it would hold forever (or never-ending for any other reason)."""
    if direction == "EQ":
        return 0 if start != bound else (1 if step else None)
    if direction == "NE":
        if start == bound:
            return 0
        if step == 0 or (bound - start) % step or (bound - start) // step < 0:
            return None
        return (bound - start) // step
    if direction in ("GT", "GE"):  # mirror: -counter < -bound
        start, step, bound = -start, -step, -bound
        direction = "LT" if direction == "GT" else "LE"
    if direction == "LE":
        bound += 1
    if start >= bound:
        return 0
    if step <= 0:
        return None
    return -(-(bound - start) // step)


def counted_loop(loop: Instruction, init: Instruction, cond: Computation,
                 body: Computation) -> CountedLoop:
    """The loop's induction variable and trip count; raises NotCounted saying why not."""
    index, direction, bound = _condition(loop, cond)
    step = _step(loop, body, index)
    first = init.operands[index] if init.op is Op.TUPLE else None
    start = _constant_int(first) if first is not None else None
    if start is None:
        source = f"%{first.name}" if first is not None else f"%{init.name}"
        raise NotCounted("unknown-trip-count",
                         f"%{loop.name}: its counter (element {index}) starts from {source}, "
                         "not from a constant")
    trips = trip_count(start, step, direction, bound)
    if trips is None:
        raise NotCounted("unknown-trip-count",
                         f"%{loop.name}: counter {start}, step {step}, condition "
                         f"{direction} {bound} never ends")
    dtype = init.operands[index].dtype.numpy
    info = np.iinfo(dtype)
    if not info.min <= start + trips * step <= info.max:
        raise NotCounted("counter-overflow",
                         f"%{loop.name}: its counter would pass the range of {dtype}")
    return CountedLoop(index, start, step, trips, len(body.instructions))


def auto_unroll_factor(loop: CountedLoop, max_unrolled_instructions: int) -> int:
    """The factor k = 0 picks: up to AUTO_MAX_FACTOR copies within the instruction budget and
    the trip count, lowered to a divisor of the trip count if one is at least half of it."""
    fit = max_unrolled_instructions // max(loop.body_instructions, 1)
    k = min(AUTO_MAX_FACTOR, fit, loop.trip_count)
    if k < 2:
        return 1
    for divisor in range(k, (k + 1) // 2 - 1, -1):
        if loop.trip_count % divisor == 0:
            return divisor
    return k


@dataclass(frozen=True, slots=True)
class LoopUnroll:
    """Unrolls counted while loops by `factor` (0: chosen by `auto_unroll_factor`)."""

    name: ClassVar[str] = "loop-unroll"
    factor: int = 0
    max_body_instructions: int = DEFAULT_MAX_BODY_INSTRUCTIONS
    max_unrolled_instructions: int = DEFAULT_MAX_UNROLLED_INSTRUCTIONS

    def factor_for(self, loop: CountedLoop) -> int:
        if self.factor > 0:
            return self.factor
        return auto_unroll_factor(loop, self.max_unrolled_instructions)

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        if self.factor < 0:
            raise ValueError(f"loop-unroll factor must be >= 0 (0: automatic), got {self.factor}")
        records = RewriteLog(log, self.name)
        counts = call_counts(module)

        def transform_for(comp: Computation) -> Transform | None:
            if not any(i.op is Op.WHILE for i in comp.instructions):
                return None

            def transform(inst: Instruction, operands: tuple[Instruction, ...],
                          builder: RewriteBuilder) -> Instruction | None:
                if inst.op is not Op.WHILE:
                    return None
                try:
                    if any(counts[id(c)] > 1 for c in inst.calls):
                        raise NotCounted("shared-loop-computation",
                                         f"%{inst.name}: its body or condition is also used "
                                         "by another instruction")
                    cond, body = (builder.callee(c) for c in inst.calls)
                    loop = counted_loop(inst, operands[0], cond, body)
                    k = self.check(inst, body, loop)
                except NotCounted as e:
                    records.refused(comp.name, inst, e.rule, "cannot unroll " + e.message)
                    return None
                m, r = divmod(loop.trip_count, k)
                how = (f"completely ({loop.trip_count} copies of the body, no loop left)"
                       if m <= 1 else f"by {k}: {m} iterations, {r} peeled after the loop")
                records.rewrote(comp.name, inst, "unrolled",
                                f"unrolled %{inst.name} (trip count {loop.trip_count}) {how}",
                                factor=k, trip_count=loop.trip_count)
                return _unroll(inst, operands[0], cond, body, loop, k, builder)

            return transform

        module, changed = rewrite_module(module, transform_for)
        if not changed:
            return module, False
        return with_reachable_computations(module), True

    def check(self, inst: Instruction, body: Computation, loop: CountedLoop) -> int:
        """The factor for `loop`; raises NotCounted if it is not worth it or too large."""
        if has_control_flow(body):
            raise NotCounted("nested-control-flow",
                             f"%{inst.name}: its body has a loop, conditional or call")
        size = loop.body_instructions
        if size > self.max_body_instructions:
            raise NotCounted("body-too-large",
                             f"%{inst.name}: its body has {size} instructions (at most "
                             f"{self.max_body_instructions})")
        k = self.factor_for(loop)
        if k < 2:
            raise NotCounted("factor-one", f"%{inst.name}: factor {k} leaves it as it is")
        m, r = divmod(loop.trip_count, k)
        copies = loop.trip_count if m <= 1 else k + r
        if copies * size > self.max_unrolled_instructions:
            raise NotCounted("body-too-large",
                             f"%{inst.name}: {copies} copies of its {size}-instruction body "
                             f"exceed {self.max_unrolled_instructions} instructions")
        return k


def _unroll(loop: Instruction, init: Instruction, cond: Computation, body: Computation,
            counted: CountedLoop, k: int, builder: RewriteBuilder) -> Instruction:
    """The loop's replacement: an unrolled loop plus peeled copies, or straight-line copies."""
    m, r = divmod(counted.trip_count, k)
    if m <= 1:
        state = init
        for _ in range(counted.trip_count):
            state = inline_computation(body, (state,), builder, keep_names=False)
        return state
    new_body = _chained_body(body, k, builder.names)
    new_cond = _counter_condition(cond, counted, counted.start + m * k * counted.step,
                                  builder.names)
    state = dataclasses.replace(loop, operands=(init,), calls=(new_cond, new_body))
    builder.instructions.append(state)
    for _ in range(r):
        state = inline_computation(body, (state,), builder, keep_names=False)
    return state


def _chained_body(body: Computation, k: int, names: NameUniquer) -> Computation:
    """k copies of `body`, each applied to the previous one's root tuple. The first copy keeps
    the names: the old body goes away."""
    b = ComputationBuilder(body.name, names)
    param = body.parameters[0]
    b.instructions.append(param)
    state = param
    for copy in range(k):
        state = inline_computation(body, (state,), b, keep_names=copy == 0)
    return b.build(state)


def _counter_condition(cond: Computation, counted: CountedLoop, bound: int,
                       names: NameUniquer) -> Computation:
    """`counter < bound` (or `>` for a decreasing counter) over the old condition's parameter."""
    b = ComputationBuilder(cond.name, names)
    param = cond.parameters[0]
    b.instructions.append(param)
    counter = b.add(Op.GET_TUPLE_ELEMENT, [param], attrs={"index": counted.index},
                    metadata=cond.root.metadata)
    limit = b.constant(bound, counter.dtype)
    direction = "LT" if counted.step > 0 else "GT"
    b.add(Op.COMPARE, [counter, limit], attrs={"direction": direction},
          metadata=cond.root.metadata)
    return b.build()
