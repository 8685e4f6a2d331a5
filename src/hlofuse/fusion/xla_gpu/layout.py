"""transpose-to-bitcast: a transpose that moves only dimensions of size 1 becomes a reshape,
and a bitcast-convert that keeps the element width becomes a bitcast, for `xla-gpu`.

XLA's algebraic simplifier, run after layout assignment in the GPU pipeline, replaces a
transpose whose result is its operand's bytes in the same order with a bitcast
(`AlgebraicSimplifierVisitor::HandleTranspose`, `ShapeUtil::TransposeIsBitcast`): with
row-major layouts that is a transpose that keeps the order of every dimension larger than 1.
Such a transpose launches nothing in XLA's optimised program; in hlofuse it becomes a
row-major reshape, which is free (`kernels.is_free`) and computes the same values.

The same simplifier, when it may rewrite no-op bitcast-converts (the GPU pipeline's option
`rewrite_no_op_bitcast_convert_to_bitcast`), replaces a bitcast-convert whose shape equals its
operand's but for the element type with a bitcast (`HandleBitcastConvert`), which launches
nothing where it is not fused and is fusible as a bitcast that keeps the bit width. XLA also
makes a width-changing one a bitcast when the dimension that grows or shrinks is the minor-most;
hlofuse's bitcast keeps the element width, so those stay bitcast-converts here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import default_layout
from hlofuse.passes.decision_log import DecisionSink, RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, Transform, rewrite_module

PASS_NAME = "transpose-to-bitcast"


def transpose_is_bitcast(inst: Instruction) -> bool:
    """A row-major transpose that keeps the order of the dimensions larger than 1."""
    if inst.op is not Op.TRANSPOSE:
        return False
    source = inst.operands[0].shape
    for shape in (source, inst.shape):
        if shape.layout is not None and tuple(shape.layout) != default_layout(shape.rank):
            return False
    permutation = inst.ints("dimensions")
    moved = [d for d in permutation if source.dims[d] != 1]
    return moved == sorted(moved)


def bitcast_convert_is_bitcast(inst: Instruction) -> bool:
    """A bitcast-convert whose shape is its operand's but for the element type."""
    return (inst.op is Op.BITCAST_CONVERT
            and inst.operands[0].shape.dims == inst.shape.dims
            and inst.operands[0].dtype.bits == inst.dtype.bits)


@dataclass(frozen=True, slots=True)
class TransposeToBitcast:
    """Rewrites every transpose that only moves dimensions of size 1 into a reshape, and every
    bitcast-convert that keeps the element width into a bitcast."""

    name: ClassVar[str] = PASS_NAME

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def transform_for(comp: Computation) -> Transform | None:
            if not any(transpose_is_bitcast(i) or bitcast_convert_is_bitcast(i)
                       for i in comp.instructions):
                return None

            def transform(inst: Instruction, operands: tuple[Instruction, ...],
                          builder: RewriteBuilder) -> Instruction | None:
                if bitcast_convert_is_bitcast(inst):
                    records.rewrote(comp.name, inst, "bitcast-convert-is-bitcast",
                                    f"%{inst.name} keeps the element width: a bitcast")
                    return builder.add(Op.BITCAST, [operands[0]], shape=inst.shape,
                                       metadata=inst.metadata)
                if not transpose_is_bitcast(inst):
                    return None
                records.rewrote(comp.name, inst, "transpose-is-bitcast",
                                f"%{inst.name} only moves dimensions of size 1: a reshape")
                return builder.add(Op.RESHAPE, [operands[0]], shape=inst.shape,
                                   metadata=inst.metadata)

            return transform

        return rewrite_module(module, transform_for)
