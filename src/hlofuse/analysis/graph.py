"""Read-only analyses over computations: users, post order, reachability."""

from __future__ import annotations

from collections.abc import Iterable

from hlofuse.ir.hlo import Computation, Instruction


def users(computation: Computation) -> dict[Instruction, list[Instruction]]:
    """Each instruction's users, in definition order, one entry per distinct user."""
    out: dict[Instruction, list[Instruction]] = {i: [] for i in computation.instructions}
    for inst in computation.instructions:
        seen: set[int] = set()
        for operand in inst.operands:
            if id(operand) in seen:
                continue
            seen.add(id(operand))
            out.setdefault(operand, []).append(inst)
    return out


def post_order(roots: Iterable[Instruction],
               stop_at: Iterable[Instruction] = ()) -> list[Instruction]:
    """Operands before users, reachable from `roots`, without recursion. Instructions in
    `stop_at` are neither listed nor walked through (a kernel's bound inputs)."""
    order: list[Instruction] = []
    visited: set[int] = {id(inst) for inst in stop_at}
    for root in roots:
        if id(root) in visited:
            continue
        stack: list[tuple[Instruction, int]] = [(root, 0)]
        visited.add(id(root))
        while stack:
            inst, index = stack.pop()
            if index < len(inst.operands):
                stack.append((inst, index + 1))
                child = inst.operands[index]
                if id(child) not in visited:
                    visited.add(id(child))
                    stack.append((child, 0))
                continue
            order.append(inst)
    return order


def reachable(computation: Computation) -> set[Instruction]:
    return set(post_order([computation.root]))
