"""Which computations call which: callees before callers, and how often each is called."""

from __future__ import annotations

from collections import Counter

from hlofuse.ir.hlo import Computation, Module, reachable_computations


def call_counts(module: Module) -> Counter[int]:
    """How many instructions call each computation (by id)."""
    return Counter(id(c) for inst in module.all_instructions() for c in inst.calls)


def callee_order(module: Module) -> list[Computation]:
    """All computations of `module`, callees before callers (the entry among them)."""
    order: list[Computation] = []
    seen: set[int] = set()
    for start in module.computations:
        order += reachable_computations(start, seen)
    return order
