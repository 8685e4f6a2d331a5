"""The decision log: one record per pair (or sibling group) a pass considered.

Every pass that changes or fuses the program writes here, the fusion passes (verdicts `fuse`
and `no`, through a `Recorder` of `FusionDecision`s, XLA's explained yes/no) and the rewrites
before fusion (`rewrite` and `no`, through a `RewriteLog`), so `explain` and
`opt --decisions` read one log. It lives in the passes layer, below fusion, because both the
rewrites and the fusion passes write into it.

A refusal always carries a stable kebab-case rule id (`code-duplication-too-high`, listed with
its meaning in `rule_catalogue.py`), a message naming the instructions, and the figures the
rule compared; a bare False does not exist. Records take the instructions' source lines from
their metadata, so `explain` can say which line of the program stopped a fusion.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from hlofuse.ir.ops import Op


class Verdict(enum.StrEnum):
    """What a pass decided; the value is the string the JSON and `--decisions` output show."""

    FUSE = "fuse"
    NO = "no"
    # The passes that rewrite the program before fusion (rng-expansion, loop-unroll, ...) log
    # what they rewrote with REWRITE and what they refused with NO.
    REWRITE = "rewrite"


Figure = int | float | str
NO_FIGURES: Mapping[str, Figure] = MappingProxyType({})

# The rule ids of a positive decision: `fusible` (legal, and the pass's rules agree), and
# priority fusion's `cost-model-gain` (legal, and the cost model estimates a saving).
FUSIBLE = "fusible"
COST_MODEL_GAIN = "cost-model-gain"
POSITIVE_RULES = frozenset({FUSIBLE, COST_MODEL_GAIN})


class DecisionSink(Protocol):
    """Where passes append their decision records (a list, or a DecisionLog)."""

    def append(self, record: DecisionRecord, /) -> None: ...


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One considered pair (or sibling group) and what a pass decided about it."""

    pass_name: str
    computation: str
    producer: str
    consumer: str | None
    verdict: Verdict
    rule: str
    message: str
    producer_op: str = ""
    consumer_op: str = ""
    siblings: tuple[str, ...] = ()
    figures: Mapping[str, Figure] = field(default_factory=lambda: NO_FIGURES)
    producer_lines: tuple[str, ...] = ()
    consumer_lines: tuple[str, ...] = ()

    @property
    def source_lines(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.producer_lines + self.consumer_lines))

    @property
    def is_refusal(self) -> bool:
        return self.verdict == Verdict.NO

    def key(self) -> tuple[object, ...]:
        """Records with equal keys say the same thing (a fixed point repeats them)."""
        return (self.pass_name, self.computation, self.producer, self.consumer, self.siblings,
                self.verdict, self.rule)

    def as_dict(self) -> dict[str, object]:
        return {
            "pass": self.pass_name,
            "computation": self.computation,
            "producer": self.producer,
            "producer_op": self.producer_op,
            "consumer": self.consumer,
            "consumer_op": self.consumer_op,
            "siblings": list(self.siblings),
            "verdict": str(self.verdict),
            "rule": self.rule,
            "message": self.message,
            "figures": dict(self.figures),
            "source_lines": list(self.source_lines),
        }


class DecisionLog:
    """The records of a run, in the order they were made."""

    def __init__(self) -> None:
        self.records: list[DecisionRecord] = []

    def append(self, record: DecisionRecord, /) -> None:
        self.records.append(record)

    def __iter__(self) -> Iterator[DecisionRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def unique(self) -> list[DecisionRecord]:
        """Each distinct record once, at the position of its last occurrence."""
        last: dict[tuple[object, ...], int] = {}
        for i, record in enumerate(self.records):
            last[record.key()] = i
        return [self.records[i] for i in sorted(last.values())]


# --- fusion passes -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FusionDecision:
    """Whether to fuse, and if not, which rule said no and why."""

    rule: str = FUSIBLE
    message: str = ""
    figures: Mapping[str, Figure] = field(default_factory=lambda: NO_FIGURES)

    @property
    def can_fuse(self) -> bool:
        return self.rule in POSITIVE_RULES

    @property
    def verdict(self) -> Verdict:
        return Verdict.FUSE if self.can_fuse else Verdict.NO

    def __bool__(self) -> bool:
        return self.rule in POSITIVE_RULES  # not via `can_fuse`: asked once per rule checked

    @staticmethod
    def yes(message: str = "", rule: str = FUSIBLE, **figures: Figure) -> FusionDecision:
        assert rule in POSITIVE_RULES, f"{rule!r} is not the rule id of a positive decision"
        return FusionDecision(rule, message, MappingProxyType(dict(figures)))

    @staticmethod
    def no(rule: str, message: str, **figures: Figure) -> FusionDecision:
        assert rule not in POSITIVE_RULES and message, "a refusal needs a rule id and a message"
        return FusionDecision(rule, message, MappingProxyType(dict(figures)))


class _Op(Protocol):
    @property
    def text(self) -> str: ...


class Considered(Protocol):
    """What a record needs to know about an instruction (a fusion graph node)."""

    @property
    def name(self) -> str: ...

    @property
    def op(self) -> _Op: ...

    def source_locations(self) -> tuple[str, ...]: ...


class Recorder:
    """Turns a fusion pass's decisions into records; does nothing without a log."""

    def __init__(self, log: DecisionSink | None, pass_name: str) -> None:
        self.log = log
        self.pass_name = pass_name

    def pair(self, computation: str, producer: Considered, consumer: Considered,
             decision: FusionDecision) -> None:
        if self.log is None:
            return
        self.log.append(DecisionRecord(
            self.pass_name, computation, producer.name, consumer.name, decision.verdict,
            decision.rule, decision.message or f"fuse %{producer.name} into %{consumer.name}",
            producer.op.text, consumer.op.text, (), decision.figures,
            producer.source_locations(), consumer.source_locations()))

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
            decision.verdict, decision.rule, decision.message or
            "fuse " + ", ".join(f"%{n}" for n in names) + " side by side",
            first.op.text, consumer.op.text if consumer else "", names, decision.figures,
            tuple(dict.fromkeys(lines)),
            consumer.source_locations() if consumer else ()))


# --- rewrites before fusion ----------------------------------------------------------------


class Rewritten(Protocol):
    """What a rewrite record reads of an instruction: a frozen one, or a fusion graph's node
    (the graph passes that rewrite before fusion, `fusion/graphs/cleanup.py`)."""

    @property
    def name(self) -> str: ...

    @property
    def op(self) -> Op: ...

    @property
    def source_location(self) -> str | None: ...


def _lines(inst: Rewritten | None) -> tuple[str, ...]:
    location = inst.source_location if inst is not None else None
    return (location,) if location else ()


class RewriteLog:
    """Appends one rewrite pass's records to a decision sink; does nothing without one."""

    def __init__(self, sink: DecisionSink | None, pass_name: str) -> None:
        self.sink = sink
        self.pass_name = pass_name

    def rewrote(self, computation: str, inst: Rewritten, rule: str, message: str,
                user: Rewritten | None = None, **figures: Figure) -> None:
        self._append(Verdict.REWRITE, computation, inst, rule, message, user, figures)

    def refused(self, computation: str, inst: Rewritten, rule: str, message: str,
                user: Rewritten | None = None, **figures: Figure) -> None:
        self._append(Verdict.NO, computation, inst, rule, message, user, figures)

    def _append(self, verdict: Verdict, computation: str, inst: Rewritten, rule: str,
                message: str, user: Rewritten | None, figures: dict[str, Figure]) -> None:
        if self.sink is None:
            return
        self.sink.append(DecisionRecord(
            self.pass_name, computation, inst.name, user.name if user is not None else None,
            verdict, rule, message, inst.op.text, user.op.text if user is not None else "",
            (), MappingProxyType(figures), _lines(inst), _lines(user)))
