"""arithmetic-identities: `A + 0 -> A` and `A * 1 -> A` (either operand order), for `xla-gpu`.

XLA's AlgebraicSimplifier removes these (AlgebraicSimplifierVisitor::HandleAdd, "A + 0 => A"
and "0 + A => A"; HandleMultiply, "A*1 => A" and "1*A => A"), where the zero or one is a
constant or a broadcast of a one-element constant and the result has the other operand's
shape. hlofuse's own `simplify` leaves arithmetic alone (it is shared with the 2022 pipeline,
which the study reproduces as it was); `xla-gpu` runs this pass next to the while-loop
simplifier, whose merged induction variables leave `0 + counter * 1` behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.passes.decision_log import RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, Transform, rewrite_module

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

PASS_NAME = "arithmetic-identities"
_IDENTITY = {Op.ADD: 0, Op.MULTIPLY: 1}


def _is_all(inst: Instruction, value: int) -> bool:
    """XLA's IsAll: a constant, or a broadcast of a one-element constant, holding `value`."""
    if inst.op is Op.BROADCAST and inst.operands[0].shape.num_elements == 1:
        inst = inst.operands[0]
    literal = inst.attrs.get("literal") if inst.op is Op.CONSTANT else None
    return isinstance(literal, np.ndarray) and literal.size > 0 and bool(np.all(literal == value))


def identity_operand(inst: Instruction, operands: tuple[Instruction, ...]) -> Instruction | None:
    """The operand `inst` equals when the other one is the identity of its op."""
    identity = _IDENTITY.get(inst.op)
    if identity is None or len(operands) != 2:
        return None
    for keep, other in (operands, operands[::-1]):
        if keep.shape == inst.shape and _is_all(other, identity):
            return keep
    return None


@dataclass(frozen=True, slots=True)
class ArithmeticIdentities:
    """Replaces `A + 0` and `A * 1` by `A`."""

    name: ClassVar[str] = PASS_NAME

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def transform_for(comp: Computation) -> Transform | None:
            if not any(i.op in _IDENTITY for i in comp.instructions):
                return None

            def transform(inst: Instruction, operands: tuple[Instruction, ...],
                          builder: RewriteBuilder) -> Instruction | None:
                kept = identity_operand(inst, operands)
                if kept is None:
                    return None
                records.rewrote(comp.name, inst, "identity-operand",
                                f"%{inst.name} ({inst.op.text}) has an identity operand: "
                                f"it is its other operand")
                return kept

            return transform

        return rewrite_module(module, transform_for)
