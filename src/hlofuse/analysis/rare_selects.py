"""Selects of a parallel loop's per-lane state that pick a costly, state-independent operand.

A per-lane element whose new value is `select(p, a, b)`, where `a` takes many operations and
does not depend on the loop state (an auto-reset: `where(done, fresh_draws, next_state)`),
needs `a` only in the lanes where `p` picks it. The whole-loop kernel computes such an
operand apart, for those lanes only (codegen/whole_loop_lanes.py, `Deferred`); the fusion
pass sizes its blocks of lanes by whether the loop has one (fusion/beyond_xla/whole_loop.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from hlofuse.analysis.parallel_loop import LoopPlan
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op

# A select operand independent of the state is set apart when lane code takes at least this
# many operations to compute it (CartPole's reset draws: about 400).
RARE_OPERAND_MIN_OPS = 16
# Ops that only move or name values: free when counting an operand's operations.
FREE_OPS = frozenset({
    Op.BITCAST, Op.BROADCAST, Op.CONCATENATE, Op.CONSTANT, Op.COPY, Op.GET_TUPLE_ELEMENT,
    Op.IOTA, Op.PARAMETER, Op.RESHAPE, Op.SLICE, Op.TRANSPOSE, Op.TUPLE,
})


@dataclass(frozen=True, slots=True)
class RareSelect:
    """Per-lane element `element`'s new value `select`, whose `operand` (picked where the
    predicate equals `when`) is costly and independent of the state; `kept` is the other."""

    element: int
    select: Instruction
    operand: Instruction
    kept: Instruction
    when: bool


def lane_operations(plan: LoopPlan, inst: Instruction) -> int:
    """How many operations lane code runs to compute `inst` (moving values is free; lane
    inputs come from the step's table)."""
    seen: set[int] = set()
    stack = [inst]
    count = 0
    while stack:
        x = stack.pop()
        if id(x) in seen or id(x) not in plan.lane:
            continue
        seen.add(id(x))
        count += x.op not in FREE_OPS
        stack.extend(x.operands)
    return count


def rare_selects(plan: LoopPlan) -> list[RareSelect]:
    """The per-lane elements whose new value is a select with one costly operand that does
    not depend on the state, in element order."""
    out: list[RareSelect] = []
    for i in plan.per_lane:
        value = plan.body.root.operands[i]
        if value.op is not Op.SELECT or id(value) not in plan.lane:
            continue
        _, on_true, on_false = value.operands
        for operand, kept, when in ((on_true, on_false, True), (on_false, on_true, False)):
            if id(operand) in plan.dependent:
                continue
            if lane_operations(plan, operand) < RARE_OPERAND_MIN_OPS:
                continue
            out.append(RareSelect(i, value, operand, kept, when))
            break
    return out
