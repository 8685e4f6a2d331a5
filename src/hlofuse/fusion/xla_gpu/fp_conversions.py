"""simplify-fp-conversions: a chain of floating-point converts becomes one convert (or none),
for `xla-gpu`.

XLA's GPU pipeline runs `SimplifyFPConversions` after layout assignment when excess precision
is allowed (`xla_allow_excess_precision`, on by default; `gpu_compiler.cc`,
`OptimizeHloPostLayoutAssignment`; `xla/hlo/transforms/simplifiers/simplify_fp_conversions.cc`).
Unlike the algebraic simplifier, which drops only a round trip that loses nothing
(`bf16 -> f32 -> bf16`), it removes every chain of conversions between floating-point types,
keeping the precision of the chain's input: `f32 -> f16 -> f32` becomes the f32 value itself,
`f32 -> bf16 -> f16` one convert from f32 to f16. hlofuse's reference interpreter rounds at
each convert, so results of such a chain may differ in the low bits from the unsimplified
program, as XLA's do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.passes.decision_log import DecisionSink, RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching

PASS_NAME = "simplify-fp-conversions"


def _fp_convert(inst: Instruction) -> bool:
    return (inst.op is Op.CONVERT and inst.dtype.is_float
            and inst.operands[0].dtype.is_float)


def chain_input(inst: Instruction) -> Instruction:
    """The first value of the chain of floating-point converts that ends at `inst`."""
    current = inst
    while _fp_convert(current):
        current = current.operands[0]
    return current


def _simplifiable(inst: Instruction) -> bool:
    return _fp_convert(inst) and _fp_convert(inst.operands[0])


@dataclass(frozen=True, slots=True)
class SimplifyFPConversions:
    """Replaces every chain of two or more floating-point converts by one convert from the
    chain's input, or by the input where it has the chain's result type."""

    name: ClassVar[str] = PASS_NAME

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def rewrite(inst: Instruction, operands: tuple[Instruction, ...],
                    builder: RewriteBuilder) -> Instruction | None:
            source = chain_input(operands[0])
            records.rewrote(builder.name, inst, "convert-chain",
                            f"%{inst.name}: the converts from {source.dtype.text} collapse")
            if source.dtype is inst.dtype:
                return source
            return builder.add(Op.CONVERT, [source], shape=inst.shape, metadata=inst.metadata)

        return rewrite_matching(module, _simplifiable, rewrite)
