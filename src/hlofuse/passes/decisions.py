"""Decision records of the passes that rewrite the program before fusion.

rng-expansion, concat-forwarding, scalarize-state and loop-unroll write into the same decision
log as the fusion passes (`hlofuse.passes.decision_log`), so `explain` and
`opt --decisions` show what they rewrote (verdict `rewrite`) and what they refused (verdict
`no`, with a stable rule id and a message naming the instructions).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from hlofuse.passes.decision_log import NO, REWRITE, DecisionRecord, Figure
from hlofuse.ir.hlo import Instruction

if TYPE_CHECKING:
    from hlofuse.passes.manager import DecisionSink


def _lines(inst: Instruction | None) -> tuple[str, ...]:
    location = inst.source_location if inst is not None else None
    return (location,) if location else ()


class RewriteLog:
    """Appends one pass's records to a decision sink; does nothing without one."""

    def __init__(self, sink: DecisionSink | None, pass_name: str) -> None:
        self.sink = sink
        self.pass_name = pass_name

    def rewrote(self, computation: str, inst: Instruction, rule: str, message: str,
                user: Instruction | None = None, **figures: Figure) -> None:
        self._append(REWRITE, computation, inst, rule, message, user, figures)

    def refused(self, computation: str, inst: Instruction, rule: str, message: str,
                user: Instruction | None = None, **figures: Figure) -> None:
        self._append(NO, computation, inst, rule, message, user, figures)

    def _append(self, verdict: str, computation: str, inst: Instruction, rule: str,
                message: str, user: Instruction | None, figures: dict[str, Figure]) -> None:
        if self.sink is None:
            return
        self.sink.append(DecisionRecord(
            self.pass_name, computation, inst.name, user.name if user is not None else None,
            verdict, rule, message, inst.op.text, user.op.text if user is not None else "",
            (), MappingProxyType(figures), _lines(inst), _lines(user)))
