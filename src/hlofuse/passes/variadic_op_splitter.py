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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape
from hlofuse.passes.decision_log import DecisionSink, RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, Transform, rewrite_module

MAX_PARAMETERS = 128  # kMaxParameters

T = TypeVar("T")


def part_shape(like: Shape, dim: int, parts: Sequence[Shape]) -> Shape:
    """The shape declared for a concatenate of `parts` that stands for part of `like`."""
    dims = list(like.dims)
    dims[dim] = sum(p.dims[dim] for p in parts)
    return Shape(like.dtype, tuple(dims), (), like.layout)


def concatenate_tree(operands: Sequence[T], limit: int,
                     concatenate: Callable[[list[T]], T]) -> T:
    """SplitConcatenate's rounds: `concatenate(group)` for each group of `limit` operands
    (a last group of fewer, not the first, waits for the next round) until one is left;
    the groups are concatenated in the order the new instructions are made."""
    pending = list(operands)
    while len(pending) > 1:
        joined: list[T] = []
        for offset in range(0, len(pending), limit):
            if offset > 0 and offset + limit > len(pending):
                joined.extend(pending[offset:])  # too few for a group: next round
            else:
                joined.append(concatenate(pending[offset:offset + limit]))
        pending = joined
    return pending[0]


def split_concatenate(inst: Instruction, operands: tuple[Instruction, ...],
                      builder: RewriteBuilder, limit: int = MAX_PARAMETERS) -> Instruction:
    """SplitConcatenate: the tree of concatenates of at most `limit` operands each."""
    dim = concatenate_dimension(inst.attrs)

    def concatenate(parts: list[Instruction]) -> Instruction:
        shape = part_shape(inst.shape, dim, [p.shape for p in parts])
        return builder.add(Op.CONCATENATE, parts, attrs=dict(inst.attrs), shape=shape)

    return concatenate_tree(operands, limit, concatenate)


def concatenate_dimension(attrs: Mapping[str, object]) -> int:
    dim = attrs["dimensions"][0]  # type: ignore[index]
    assert isinstance(dim, int)
    return dim


def check_limit(max_operands: int) -> None:
    if max_operands < 2:
        raise ValueError(f"variadic-op-splitter: max_operands must be at least 2, got "
                         f"{max_operands}")


@dataclass(frozen=True, slots=True)
class VariadicOpSplitter:
    """Splits concatenates of more than `max_operands` operands."""

    name: ClassVar[str] = "variadic-op-splitter"
    max_operands: int = MAX_PARAMETERS

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        check_limit(self.max_operands)
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
                start = len(builder.instructions)
                with builder.metadata_of(inst):
                    split = split_concatenate(inst, operands, builder, limit)
                records.rewrote(comp.name, inst, "concatenate-split",
                                f"%{inst.name} had {len(operands)} operands, over "
                                f"{limit}; it is now {len(builder.instructions) - start} "
                                "concatenates", operands=len(operands), limit=limit)
                return split

            return transform

        return rewrite_module(module, transform_for)
