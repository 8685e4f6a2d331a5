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

from hlofuse.analysis.call_graph import call_counts
from hlofuse.analysis.counted_loops import CountedLoop, NotCounted, counted_loop
from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.passes.call_inliner import inline_computation
from hlofuse.passes.decision_log import RewriteLog
from hlofuse.passes.loop_rebuild import has_control_flow, with_reachable_computations
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

# XLA's WhileLoopUnroller limits.
DEFAULT_MAX_BODY_INSTRUCTIONS = 800
DEFAULT_MAX_UNROLLED_INSTRUCTIONS = 10000
# The study unrolled its step loop by 10.
AUTO_MAX_FACTOR = 10

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

        def unroll(inst: Instruction, operands: tuple[Instruction, ...],
                   builder: RewriteBuilder) -> Instruction | None:
            try:
                if any(counts[id(c)] > 1 for c in inst.calls):
                    raise NotCounted("shared-loop-computation",
                                     f"%{inst.name}: its body or condition is also used "
                                     "by another instruction")
                cond, body = (builder.callee(c) for c in inst.calls)
                loop = counted_loop(inst, operands[0], cond, body)
                k = self.check(inst, body, loop)
            except NotCounted as e:
                records.refused(builder.name, inst, e.rule, "cannot unroll " + e.message)
                return None
            m, r = divmod(loop.trip_count, k)
            how = (f"completely ({loop.trip_count} copies of the body, no loop left)"
                   if m <= 1 else f"by {k}: {m} iterations, {r} peeled after the loop")
            records.rewrote(builder.name, inst, "unrolled",
                            f"unrolled %{inst.name} (trip count {loop.trip_count}) {how}",
                            factor=k, trip_count=loop.trip_count)
            return _unroll(inst, operands[0], cond, body, loop, k, builder)

        module, changed = rewrite_matching(module, lambda inst: inst.op is Op.WHILE, unroll)
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
