"""variadic-op-splitter: a concatenate with more than 128 operands becomes a tree of them.

XLA's GPU pipeline runs VariadicOpSplitter (xla/service/gpu/variadic_op_splitter.cc, 2022) at
the start of its fusion fixed point: a kernel's parameters live in a small constant space on
the device, so a concatenate of more than `kMaxParameters` = 128 operands is split. Operands
are taken in groups of 128, each group concatenated; a final group of fewer than 128 that is
not the first is carried over to the next round as it is; rounds repeat until one
concatenate is left, which replaces the original. Only concatenates are split (XLA's TODO
names other variadic ops), and only in computations that are not fusion bodies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape
from hlofuse.passes.decision_log import DecisionSink, RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, Transform, rewrite_module

MAX_PARAMETERS = 128  # kMaxParameters


def _concatenate(parts: list[Instruction], like: Instruction, dim: int,
                 builder: RewriteBuilder) -> Instruction:
    dims = list(like.shape.dims)
    dims[dim] = sum(p.shape.dims[dim] for p in parts)
    shape = Shape(like.dtype, tuple(dims), (), like.shape.layout)
    return builder.add(Op.CONCATENATE, parts, attrs=dict(like.attrs), shape=shape)


def split_concatenate(inst: Instruction, operands: tuple[Instruction, ...],
                      builder: RewriteBuilder, limit: int = MAX_PARAMETERS) -> Instruction:
    """SplitConcatenate: the tree of concatenates of at most `limit` operands each."""
    dim = inst.attrs["dimensions"][0]  # type: ignore[index]
    assert isinstance(dim, int)
    pending = list(operands)
    while len(pending) > 1:
        joined: list[Instruction] = []
        for offset in range(0, len(pending), limit):
            if offset > 0 and offset + limit > len(pending):
                joined.extend(pending[offset:])  # too few for a group: next round
            else:
                joined.append(_concatenate(pending[offset:offset + limit], inst, dim, builder))
        pending = joined
    return pending[0]


@dataclass(frozen=True, slots=True)
class VariadicOpSplitter:
    """Splits concatenates of more than `max_operands` operands."""

    name: ClassVar[str] = "variadic-op-splitter"
    max_operands: int = MAX_PARAMETERS

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        if self.max_operands < 2:
            raise ValueError(f"variadic-op-splitter: max_operands must be at least 2, got "
                             f"{self.max_operands}")
        records = RewriteLog(log, self.name)
        limit = self.max_operands
        fusion_bodies = {id(c) for i in module.all_instructions() if i.op is Op.FUSION
                         for c in i.calls}

        def transform_for(comp: Computation) -> Transform | None:
            if id(comp) in fusion_bodies or not any(
                    i.op is Op.CONCATENATE and len(i.operands) > limit
                    for i in comp.instructions):
                return None

            def transform(inst: Instruction, operands: tuple[Instruction, ...],
                          builder: RewriteBuilder) -> Instruction | None:
                if inst.op is not Op.CONCATENATE or len(operands) <= limit:
                    return None
                saved, builder.metadata = builder.metadata, inst.metadata
                start = len(builder.instructions)
                try:
                    split = split_concatenate(inst, operands, builder, limit)
                finally:
                    builder.metadata = saved
                records.rewrote(comp.name, inst, "concatenate-split",
                                f"%{inst.name} had {len(operands)} operands, over "
                                f"{limit}; it is now {len(builder.instructions) - start} "
                                "concatenates", operands=len(operands), limit=limit)
                return split

            return transform

        return rewrite_module(module, transform_for)
