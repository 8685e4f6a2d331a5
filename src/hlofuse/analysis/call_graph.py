"""Which computations call which: callees before callers, and how often each is called."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from hlofuse.ir.hlo import Computation, Module


def call_counts(module: Module) -> Counter[int]:
    """How many instructions call each computation (by id)."""
    return Counter(id(c) for inst in module.all_instructions() for c in inst.calls)


def callee_order(module: Module) -> list[Computation]:
    """All computations of `module`, callees before callers (the entry among them)."""
    order: list[Computation] = []
    seen: set[int] = set()
    for start in module.computations:
        if id(start) in seen:
            continue
        seen.add(id(start))
        stack: list[tuple[Computation, Iterator[Computation]]] = [
            (start, iter(list(start.called_computations)))]
        while stack:
            comp, callees = stack[-1]
            callee = next(callees, None)
            if callee is None:
                stack.pop()
                order.append(comp)
            elif id(callee) not in seen:
                seen.add(id(callee))
                stack.append((callee, iter(list(callee.called_computations))))
    return order
