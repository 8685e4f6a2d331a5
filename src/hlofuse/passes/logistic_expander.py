"""logistic-expander: `logistic(x)` rewritten as `1 / (1 + exp(-x))`.

XLA's GPU pipeline of 2022 runs LogisticExpander with the exp form
(xla/service/logistic_expander.cc, `ExpandLogisticWithExp`, added in gpu_compiler.cc before
simplification) because the GPU has no logistic instruction. The form matters for fusion:
`logistic` is on XLA's list of expensive ops, so a sigmoid with two users is computed once
and read twice (two kernels); its expansion is negate, exp, add and divide, which the GPU's
instruction fusion counts as cheap in f32 and f16 (`GpuInstructionFusion::IsExpensive`), so
it is duplicated into both users (one kernel).

The constants are scalars broadcast to the operand's shape, as XLA's `MakeScalarLike` builds
them. The reference interpreter computes a float32 logistic in float64 and rounds once; the
expansion rounds after the exp, the add and the divide, as XLA's GPU code does, so the two
may differ in the last bits (the compiled module still equals the interpreter run on it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.passes.decision_log import DecisionSink, RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching


def _scalar_like(value: float, like: Instruction, builder: RewriteBuilder) -> Instruction:
    """XLA's MakeScalarLike: a constant of `like`'s element type, broadcast to its shape."""
    scalar = builder.constant(value, like.dtype)
    if like.shape.is_scalar:
        return scalar
    return builder.add(Op.BROADCAST, [scalar], attrs={"dimensions": ()}, shape=like.shape)


def expand_logistic(operand: Instruction, builder: RewriteBuilder) -> Instruction:
    """1 / (1 + exp(-operand)), in XLA's instruction order."""
    one = _scalar_like(1.0, operand, builder)
    exp = builder.add(Op.EXPONENTIAL, [builder.add(Op.NEGATE, [operand])])
    denominator = builder.add(Op.ADD, [one, exp])
    return builder.add(Op.DIVIDE, [one, denominator])


@dataclass(frozen=True, slots=True)
class LogisticExpander:
    """Rewrites every logistic into its exp form."""

    name: ClassVar[str] = "logistic-expander"

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def expand(inst: Instruction, operands: tuple[Instruction, ...],
                   builder: RewriteBuilder) -> Instruction:
            with builder.metadata_of(inst):
                expanded = expand_logistic(operands[0], builder)
            records.rewrote(builder.name, inst, "logistic-expanded",
                            f"%{inst.name} is now 1 / (1 + exp(-x)), which fuses as cheap "
                            "element-wise code")
            return expanded

        return rewrite_matching(module, lambda inst: inst.op is Op.LOGISTIC, expand)
