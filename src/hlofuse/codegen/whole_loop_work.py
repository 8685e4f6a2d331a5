"""Whether a whole-loop kernel computes so little in all that it is compiled quickly.

A whole-loop kernel is compiled for speed: long simd lane loops, tuned register allocation
and scheduling, 0.3-2 s of the C compiler's time each. A loop of a few trips over a few
thousand elements (JAX's CPU lowering draws a layer's initial weights with a Threefry loop of
five trips) runs in well under a millisecond however it is compiled, while its kernel cost
the acrobot MLP rollout's cold compile 2.5 of its 10 s. A kernel whose every trip is known
and whose whole run is at most SMALL_WHOLE_LOOP_WORK element operations (about a millisecond
of scalar code) is compiled as a small kernel, where it runs once a run (not inside another
loop, whose every trip would pay for the slower code): at -Og (the C language's
`run_once_attribute`; -O1 took twice as long to compile them), its loops without simd pragmas
(which make gcc vectorise at any level). An integer simd reduction (`|` of flags) gives the
same value in any order, so nothing it computes changes.
"""

from __future__ import annotations

import dataclasses

from hlofuse.analysis.lane_linalg import contraction_size
from hlofuse.analysis.loop_config import loop_trip_count
from hlofuse.codegen import cir
from hlofuse.codegen.cir_walks import statements
from hlofuse.codegen.kernel import element_operations
from hlofuse.codegen.linalg import LINALG_OPS
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op

SMALL_WHOLE_LOOP_WORK = 1 << 20
# Ops whose work is not a few operations an element (or is a loop of its own).
_UNCOUNTED = frozenset({Op.WHILE, Op.CONDITIONAL, Op.CALL, Op.CUSTOM_CALL, Op.SORT, Op.TOPK,
                        Op.SCATTER, Op.RNG_BIT_GENERATOR, *LINALG_OPS})


def total_work(loop: Instruction) -> int | None:
    """The element operations of all of `loop`'s trips (its condition's and body's); None
    where the trip count is not known or the body holds a loop of its own."""
    trips = loop_trip_count(loop)
    if trips is None:
        return None
    per_trip = 0
    for computation in loop.calls:  # the condition and the body
        for inst in computation.instructions:
            if inst.op in _UNCOUNTED:
                return None
            if not inst.shape.is_array:
                continue
            # A reduction's work is its operand's elements, not its result's.
            elements = max([inst.shape.num_elements] + [
                o.shape.num_elements for o in inst.operands if o.shape.is_array])
            if inst.op is Op.DOT:
                elements *= contraction_size(inst)
            per_trip += elements * max(1, element_operations(inst))
    return trips * per_trip


def is_small_whole_loop(loop: Instruction) -> bool:
    work = total_work(loop)
    return work is not None and work <= SMALL_WHOLE_LOOP_WORK


def without_vector_loops(body: list[cir.Stmt]) -> None:
    """Drops the simd pragmas of every loop in `body` (in place)."""
    for top in body:
        for stmt in statements(top):
            if isinstance(stmt, cir.For) and (stmt.how.simd or stmt.how.reduction):
                stmt.how = dataclasses.replace(stmt.how, simd=False, reduction=None)
