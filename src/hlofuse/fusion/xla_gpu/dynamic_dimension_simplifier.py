"""XLA's `DynamicDimensionSimplifier` rule `ConcatForwarding` for `xla-gpu`:
`concatenate(concatenate(A, B), C)` along one dimension is `concatenate(A, B, C)`.

`gpu_compiler.cc` runs `DynamicDimensionSimplifier`
(`xla/hlo/transforms/simplifiers/dynamic_dimension_simplifier.cc`) right after the
`BatchedGatherScatterNormalizer`, so the iota column that normaliser puts in front of a batched
gather's or scatter's index columns and JAX's concatenate of those columns become one
concatenate (XLA's dump after `dynamic-dimension-simplifier` of `rollout_grid_forage`: an
`s32[8,4]` concatenate of four operands), which the concatenate emitter can run. The outer
concatenate keeps its name (XLA's `ReplaceInstruction`). The pass's other rules (a slice of
one operand of a concatenate, reshapes of reshapes and broadcasts, identity converts and
reshapes) are the algebraic simplifier's too, which `xla-gpu` runs after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.fusion.xla_gpu.gather_scatter import replacement
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.passes.decision_log import DecisionSink, RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching

PASS_NAME = "dynamic-dimension-simplifier"


def _nested(inst: Instruction) -> bool:
    return inst.op is Op.CONCATENATE and any(
        o.op is Op.CONCATENATE and o.ints("dimensions") == inst.ints("dimensions")
        for o in inst.operands)


@dataclass(frozen=True, slots=True)
class DynamicDimensionSimplifier:
    """Flattens a concatenate of concatenates along the same dimension (its ConcatForwarding)."""

    name: ClassVar[str] = PASS_NAME

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def flatten(inst: Instruction, operands: tuple[Instruction, ...],
                    builder: RewriteBuilder) -> Instruction:
            flat: list[Instruction] = []
            for operand in operands:
                if (operand.op is Op.CONCATENATE
                        and operand.ints("dimensions") == inst.ints("dimensions")):
                    flat.extend(operand.operands)
                else:
                    flat.append(operand)
            records.rewrote(builder.name, inst, "concat-forwarded",
                            f"%{inst.name} takes its concatenated operands' operands")
            return replacement(inst, flat, dict(inst.attrs), builder)

        return rewrite_matching(module, _nested, flatten)
