"""FusionDecision (XLA's explained yes/no) and the decision log every fusion pass writes.

A refusal always carries a stable kebab-case rule id (`code-duplication-too-high`), a message
naming both instructions, and the figures the rule compared; a bare False does not exist.
Each pair a pass considers becomes one `DecisionRecord`, with the user's source lines taken
from instruction metadata, so `explain` can say which line of the program stopped a fusion.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from hlofuse.passes.decision_log import (  # noqa: F401  (re-exported)
    FUSE, NO, NO_FIGURES, REWRITE, DecisionLog, DecisionRecord, Figure)

# The rule ids of a positive decision: `fusible` (legal, and the pass's rules agree), and
# priority fusion's `cost-model-gain` (legal, and the cost model estimates a saving).
FUSIBLE = "fusible"
COST_MODEL_GAIN = "cost-model-gain"
_POSITIVE_RULES = frozenset({FUSIBLE, COST_MODEL_GAIN})

_NO_FIGURES = NO_FIGURES


@dataclass(frozen=True, slots=True)
class FusionDecision:
    """Whether to fuse, and if not, which rule said no and why."""

    rule: str = FUSIBLE
    message: str = ""
    figures: Mapping[str, Figure] = field(default_factory=lambda: _NO_FIGURES)

    @property
    def can_fuse(self) -> bool:
        return self.rule in _POSITIVE_RULES

    def __bool__(self) -> bool:
        return self.can_fuse

    @staticmethod
    def yes(message: str = "", rule: str = FUSIBLE, **figures: Figure) -> FusionDecision:
        assert rule in _POSITIVE_RULES, f"{rule!r} is not the rule id of a positive decision"
        return FusionDecision(rule, message, MappingProxyType(dict(figures)))

    @staticmethod
    def no(rule: str, message: str, **figures: Figure) -> FusionDecision:
        assert rule not in _POSITIVE_RULES and message, "a refusal needs a rule id and a message"
        return FusionDecision(rule, message, MappingProxyType(dict(figures)))


class _Op(Protocol):
    @property
    def text(self) -> str: ...


class Considered(Protocol):
    """What a record needs to know about an instruction (a fusion graph node)."""

    name: str

    @property
    def op(self) -> _Op: ...

    def source_locations(self) -> tuple[str, ...]: ...


class Recorder:
    """Turns a pass's decisions into records; does nothing without a log."""

    def __init__(self, log: Any, pass_name: str) -> None:
        self.log = log
        self.pass_name = pass_name

    def pair(self, computation: str, producer: Considered, consumer: Considered,
             decision: FusionDecision) -> None:
        if self.log is None:
            return
        self.log.append(DecisionRecord(
            self.pass_name, computation, producer.name, consumer.name,
            FUSE if decision else NO, decision.rule, decision.message or
            f"fuse %{producer.name} into %{consumer.name}", producer.op.text,
            consumer.op.text, (), decision.figures, producer.source_locations(),
            consumer.source_locations()))

    def group(self, computation: str, members: Sequence[Considered],
              decision: FusionDecision, consumer: Considered | None = None) -> None:
        """A decision about fusing `members` side by side (siblings, horizontal fusion)."""
        if self.log is None or not members:
            return
        first = members[0]
        lines: tuple[str, ...] = ()
        for member in members:
            lines += member.source_locations()
        names = tuple(m.name for m in members)
        self.log.append(DecisionRecord(
            self.pass_name, computation, first.name, consumer.name if consumer else None,
            FUSE if decision else NO, decision.rule, decision.message or
            "fuse " + ", ".join(f"%{n}" for n in names) + " side by side",
            first.op.text, consumer.op.text if consumer else "", names, decision.figures,
            tuple(dict.fromkeys(lines)),
            consumer.source_locations() if consumer else ()))
