"""constant-folding: XLA's HloConstantFolding at its default level, for `xla-gpu`.

XLA's GPU compiler runs HloConstantFolding in its simplification fixed point (gpu_compiler.cc,
next to the AlgebraicSimplifier and the WhileLoopSimplifier). The pass evaluates an
instruction when at least one operand is a constant and every other one is a constant, a
broadcast of a constant or an iota (`AnyOperandsConstant`,
`AllOperandsConstantOrBroadcastConstant`), so that `reduce(broadcast(c), init)` becomes a
constant although the broadcast itself is never folded (`IsFoldable`: no broadcast, iota,
fft, kDefault-level while, side-effecting instruction, pad of a broadcast, nor a result or
operands over 45 million elements). hlofuse's own `simplify` folds only instructions whose
operands are all constants (the 2022 pipeline's `xla` keeps that), so this rule is a pass of
its own that only `xla-gpu` runs.

What hlofuse's interpreter evaluates here: element-wise, data-movement and reduction ops and
dots. Control flow (call, conditional; the loops XLA skips too) and custom calls are left
alone: XLA's evaluator cannot run a custom call, and the corpus folds no call or conditional.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op, OpKind
from hlofuse.passes.dce import has_side_effect
from hlofuse.passes.decision_log import RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, Transform, rewrite_module
from hlofuse.reference.interpreter import Interpreter

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

PASS_NAME = "constant-folding"
# HloConstantFolding's kMaximumConstantSizeElements.
MAX_CONSTANT_ELEMENTS = 45 * 1000 * 1000
_FOLDABLE_KINDS = (OpKind.ELEMENTWISE, OpKind.INJECTIVE, OpKind.REDUCTION)
# The ops IsFoldable refuses outright (and fft, which hlofuse does not implement).
_NEVER_FOLDED = frozenset({Op.BROADCAST, Op.IOTA})


def _constant_like(operand: Instruction) -> bool:
    """A constant, a broadcast of a constant or an iota (AllOperandsConstantOrBroadcastConstant;
    iota counts as a broadcast of a constant there)."""
    return (operand.op in (Op.CONSTANT, Op.IOTA)
            or (operand.op is Op.BROADCAST and operand.operands[0].op is Op.CONSTANT))


def foldable(inst: Instruction) -> bool:
    """Whether HloConstantFolding (default level) evaluates `inst`."""
    if not inst.operands or inst.op in _NEVER_FOLDED or has_side_effect(inst):
        return False
    if not (inst.definition.kind in _FOLDABLE_KINDS or inst.op is Op.DOT):
        return False
    if not any(o.op is Op.CONSTANT for o in inst.operands):
        return False
    if not all(_constant_like(o) for o in inst.operands):
        return False
    if (inst.op is Op.PAD and inst.operands[0].op is Op.BROADCAST
            and inst.operands[1].op is Op.CONSTANT):
        return False
    if not inst.shape.is_array:
        return False
    operand_elements = sum(o.shape.num_elements for o in inst.operands if o.shape.is_array)
    return max(inst.shape.num_elements, operand_elements) <= MAX_CONSTANT_ELEMENTS


def fold(inst: Instruction, builder: RewriteBuilder) -> Instruction:
    """A constant holding `inst`'s value (its operands are constant-like)."""
    nodes: dict[Instruction, None] = {}
    for operand in inst.operands:
        nodes.update(dict.fromkeys(operand.operands))
        nodes[operand] = None
    nodes[inst] = None
    value = Interpreter().run(Computation("constant_folding", tuple(nodes), inst), [])
    assert isinstance(value, np.ndarray)
    literal = np.asarray(value, dtype=inst.dtype.numpy).reshape(inst.shape.dims)
    return builder.add(Op.CONSTANT, attrs={"literal": literal}, shape=inst.shape,
                       metadata=inst.metadata)


@dataclass(frozen=True, slots=True)
class ConstantFolding:
    """Replaces an instruction of constants and broadcast constants by its value."""

    name: ClassVar[str] = PASS_NAME

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def transform_for(comp: Computation) -> Transform | None:
            if not any(i.op is Op.CONSTANT for i in comp.instructions):
                return None

            def transform(inst: Instruction, operands: tuple[Instruction, ...],
                          builder: RewriteBuilder) -> Instruction | None:
                # A stand-in with the rewritten operands, never inserted.
                current = inst if operands == inst.operands else \
                    dataclasses.replace(inst, operands=operands)
                if not foldable(current):
                    return None
                records.rewrote(comp.name, inst, "folded-constant",
                                f"%{inst.name} ({inst.op.text}) reads only constants and "
                                f"broadcast constants: it is a constant")
                return fold(current, builder)

            return transform

        return rewrite_module(module, transform_for)
