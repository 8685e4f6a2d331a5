"""while-loop-trip-count-annotator: a while loop whose trip count can be proven carries it.

A counted loop (an integer tuple element that starts from a constant, that the body advances
by a constant, and that the condition compares with a constant: the pattern of `lax.scan`,
`fori_loop` and the front end's scan) gets `backend_config={"known_trip_count":{"n":"N"}}`,
XLA's spelling. The loop's meaning does not change; what the annotation buys is in the
runtime: XLA's GPU backend then runs the body N times as a for-loop thunk without evaluating
the condition (no condition kernel, no device-to-host copy of the predicate per iteration),
and hlofuse counts no condition kernels for such a loop (`fusion/kernels.py`).

Mirrors XLA's WhileLoopTripCountAnnotator (xla/service/while_loop_trip_count_annotator.cc),
which calls ComputeWhileLoopTripCount (xla/service/while_loop_analysis.cc) at the end of the
GPU simplification pipeline, before fusion. XLA's analysis also simulates loops whose counter
is not updated by a constant (up to 128 iterations); here only the constant-step pattern is
proven (`analysis.loops.counted_loop`), which covers every loop the front end writes.

Not annotated, and logged (rule ids as loop-unroll's): `data-dependent-condition`,
`no-induction-variable`, `unknown-trip-count`, `counter-overflow`. A loop whose init is not a
tuple instruction is skipped silently (no counter start to read).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import ClassVar

from hlofuse.analysis.counted_loops import NotCounted, counted_loop
from hlofuse.analysis.loop_config import known_trip_count
from hlofuse.ir.attrs import RawAttr
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.passes.decision_log import DecisionSink, RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching

BACKEND_CONFIG = "backend_config"


def trip_count_config(n: int) -> str:
    """XLA's WhileLoopBackendConfig as JSON: the count is an int64, printed as a string."""
    return json.dumps({"known_trip_count": {"n": str(n)}}, separators=(",", ":"))


def _with_config(extra: tuple[tuple[str, RawAttr], ...], n: int
                 ) -> tuple[tuple[str, RawAttr], ...]:
    kept = tuple((k, v) for k, v in extra if k != BACKEND_CONFIG)
    return kept + ((BACKEND_CONFIG, RawAttr(trip_count_config(n))),)


@dataclass(frozen=True, slots=True)
class WhileLoopTripCountAnnotator:
    """Annotates while loops whose trip count is proven with XLA's known_trip_count."""

    name: ClassVar[str] = "while-loop-trip-count-annotator"

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def annotate(inst: Instruction, operands: tuple[Instruction, ...],
                     builder: RewriteBuilder) -> Instruction | None:
            if operands[0].op is not Op.TUPLE:
                return None
            cond, body = inst.calls
            try:
                loop = counted_loop(inst, operands[0], cond, body)
            except NotCounted as why:
                records.refused(builder.name, inst, why.rule, why.message)
                return None
            if known_trip_count(inst) == loop.trip_count:
                return None
            records.rewrote(builder.name, inst, "trip-count-annotated",
                            f"%{inst.name} runs {loop.trip_count} times (counter element "
                            f"{loop.index} from {loop.start} by {loop.step})",
                            trip_count=loop.trip_count)
            # Same name and everything else: only the backend_config differs.
            annotated = dataclasses.replace(
                inst, operands=operands, calls=tuple(builder.callee(c) for c in inst.calls),
                extra=_with_config(inst.extra, loop.trip_count))
            builder.instructions.append(annotated)
            return annotated

        return rewrite_matching(module, lambda inst: inst.op is Op.WHILE, annotate)
