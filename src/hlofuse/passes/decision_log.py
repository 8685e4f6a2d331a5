"""The decision log: one record per pair (or sibling group) a pass considered.

Every pass that changes or fuses the program writes here, the fusion passes (verdicts `fuse`
and `no`) and the rewrites before fusion (`rewrite` and `no`), so `explain` and
`opt --decisions` read one log. It lives in the passes layer, below fusion, because both the
rewrites and the fusion passes write into it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

FUSE = "fuse"
NO = "no"
# The verdict of the passes that rewrite the program before fusion (rng-expansion, loop-unroll,
# ...): they log what they rewrote with this verdict and what they refused with NO.
REWRITE = "rewrite"

Figure = int | float | str
NO_FIGURES: Mapping[str, Figure] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One considered pair (or sibling group) and what a pass decided about it."""

    pass_name: str
    computation: str
    producer: str
    consumer: str | None
    verdict: str  # FUSE or NO (REWRITE for the passes before fusion)
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
        return self.verdict == NO

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
            "verdict": self.verdict,
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

    def with_rule(self, rule: str) -> list[DecisionRecord]:
        return [r for r in self.unique() if r.rule == rule]
