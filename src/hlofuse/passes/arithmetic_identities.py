"""arithmetic-identities: `A + 0 -> A` and `A * 1 -> A` (either operand order), and
`convert(p) * A -> select(p, A, 0)` for a pred p, for `xla-gpu`.

XLA's AlgebraicSimplifier removes the first two (AlgebraicSimplifierVisitor::HandleAdd,
"A + 0 => A" and "0 + A => A"; HandleMultiply, "A*1 => A" and "1*A => A"), where the zero or
one is a constant or a broadcast of a one-element constant and the result has the other
operand's shape. Its HandleMultiply also turns a product with a pred converted to a number
into a select of the other operand and zeros (either operand order; XLA's per-pass dump of the
corpus program `mlp` shows `multiply(convert(eq), sub)` become `select(eq, sub, broadcast(0))`
in the "algsimp" step). That select differs from the product where A is an infinity or a NaN
and p is false (0, not NaN), as XLA's does. hlofuse's own `simplify` leaves arithmetic alone
(it is shared with the 2022 pipeline, which the study reproduces as it was); `xla-gpu` runs
this pass next to the while-loop simplifier, whose merged induction variables leave
`0 + counter * 1` behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape
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


def pred_factor(inst: Instruction, operands: tuple[Instruction, ...]
                ) -> tuple[Instruction, Instruction] | None:
    """(p, A) when `inst` multiplies convert(p) of a pred p by A, in either order."""
    if inst.op is not Op.MULTIPLY or len(operands) != 2:
        return None
    for convert, other in (operands, operands[::-1]):
        if (convert.op is Op.CONVERT and convert.operands[0].dtype is DType.PRED
                and convert.operands[0].shape.dims == inst.shape.dims):
            return convert.operands[0], other
    return None


def _select_of(inst: Instruction, pred: Instruction, other: Instruction,
               builder: RewriteBuilder) -> Instruction:
    zero = builder.add(Op.CONSTANT, attrs={"literal": np.zeros((), inst.dtype.numpy)},
                       shape=Shape.scalar(inst.dtype))
    zeros = zero if inst.shape.rank == 0 else builder.add(
        Op.BROADCAST, [zero], attrs={"dimensions": ()}, shape=inst.shape)
    return builder.add(Op.SELECT, [pred, other, zeros], metadata=inst.metadata)


@dataclass(frozen=True, slots=True)
class ArithmeticIdentities:
    """Replaces `A + 0` and `A * 1` by `A`, and `convert(p) * A` by `select(p, A, 0)`."""

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
                    factor = pred_factor(inst, operands)
                    if factor is None:
                        return None
                    records.rewrote(comp.name, inst, "pred-product-select",
                                    f"%{inst.name} multiplies by a converted pred: it selects "
                                    "its other operand or zero")
                    return _select_of(inst, *factor, builder)
                records.rewrote(comp.name, inst, "identity-operand",
                                f"%{inst.name} ({inst.op.text}) has an identity operand: "
                                f"it is its other operand")
                return kept

            return transform

        return rewrite_module(module, transform_for)
