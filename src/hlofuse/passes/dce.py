"""Dead-code elimination (XLA's HloDCE).

Removes every instruction that the computation's root does not depend on, unless it has side
effects (a side-effecting custom call must run even if its result is unused), and then every
computation that nothing reachable from the entry calls. Parameters always stay: they are the
computation's signature.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import SIDE_EFFECT_OPS
from hlofuse.ir.ops import has_side_effect as op_has_side_effect
from hlofuse.passes.rewrite import rewrite_module, without_unreachable

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink


def has_side_effect(inst: Instruction) -> bool:
    """XLA's HasSideEffect for the ops hlofuse knows."""
    op = inst.op
    return op in SIDE_EFFECT_OPS and op_has_side_effect(op, inst.attrs)


def live_instructions(comp: Computation) -> set[Instruction]:
    """The root, the side-effecting instructions and the parameters, and everything they
    depend on: one sweep from the last instruction back (operands come before users)."""
    live = {comp.root}
    live.update(comp.parameters)
    live.update([i for i in comp.instructions
                 if i.op in SIDE_EFFECT_OPS and has_side_effect(i)])
    add = live.update
    for inst in reversed(comp.instructions):
        if inst in live:
            add(inst.operands)
    return live


def _keep_live(comp: Computation) -> Callable[[Instruction], bool] | None:
    live = live_instructions(comp)
    if len(live) == len(comp.instructions):
        return None
    return live.__contains__


@dataclass(frozen=True, slots=True)
class DeadCodeElimination:
    """Removes unused instructions and uncalled computations."""

    name: ClassVar[str] = "dce"

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        module, changed = rewrite_module(module, lambda comp: None, _keep_live)
        module, dropped = without_unreachable(module)
        return module, changed or dropped
