"""Common-subexpression elimination (XLA's HloCSE).

Walks each computation operands-first and replaces an instruction by an earlier one with the
same opcode, the same (already de-duplicated) operands, the same shape and the same
attributes and called computations. Constants are merged by value (bit for bit, so 0.0 and
-0.0 stay apart). Parameters, instructions without operands other than constants and
side-effecting instructions are never merged. With `combine_iotas` (`xla-gpu`; the 2022
pipeline of `xla` does not have it), identical iotas (same shape and dimension) count as the
same operand, as today's HloCSE compares them (HloCSE::Run: `CseKey` leaves iota operands out
of its hash, `eq_instructions` takes two identical iotas as equal, and an instruction reading
two identical iotas reads the first one twice); the iotas themselves are not merged (HloCSE
skips instructions without operands, and CombineConstants merges constants only: XLA's
pre-fusion graph of `random_uniform` keeps its two `u64[4]` iotas). With
`only_fusion_computations` it looks only inside fused computations, as the CSE that XLA's GPU
fusion pipeline runs between its fusion passes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np

from hlofuse.ir.attrs import RawAttr
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import SIDE_EFFECT_OPS, Op
from hlofuse.ir.shapes import Shape
from hlofuse.passes.dce import has_side_effect
from hlofuse.passes.rewrite import RewriteBuilder, Transform, rewrite_module

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink


# Attribute values that are their own key (most are: ints, names, flags).
_PLAIN = frozenset({int, str, bool, float, type(None)})


def attr_key(value: object) -> Hashable:
    """A hashable stand-in for an attribute value (literals are compared bit for bit)."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is tuple:  # dimensions and the like: one list comprehension
        assert isinstance(value, tuple)
        return tuple([v if type(v) in _PLAIN else attr_key(v) for v in value])
    if isinstance(value, np.ndarray):
        return ("literal", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, tuple):
        return tuple(attr_key(v) for v in value)
    assert isinstance(value, Hashable)
    return value


class Keyed(Protocol):
    """What a key is made of: an Instruction, or a fusion graph's Node."""

    @property
    def op(self) -> Op: ...
    @property
    def shape(self) -> Shape: ...
    @property
    def attrs(self) -> Mapping[str, object]: ...
    @property
    def calls(self) -> Sequence[object]: ...
    @property
    def extra(self) -> Sequence[tuple[str, RawAttr]]: ...


def instruction_key(inst: Keyed, operands: Sequence[object]) -> Hashable:
    """Instructions with equal keys compute the same value (operands and called computations
    by identity: instructions, nodes, computations and graphs hash and compare so, in C; a
    tuple of operands is its own key)."""
    shape = inst.shape
    attrs = (tuple(sorted([(k, attr_key(v)) for k, v in inst.attrs.items()])) if inst.attrs
             else ())
    # The shape as its compared fields (Shape's own hash and equality run in Python).
    return (inst.op, tuple(operands), shape.dtype, shape.dims, shape.elements,
            shape.layout, attrs,
            tuple(inst.calls) if inst.calls else (),
            tuple((k, r.text) for k, r in inst.extra) if inst.extra else ())


def fusion_computations(module: Module) -> set[Computation]:
    return {c for inst in module.all_instructions() if inst.op is Op.FUSION for c in inst.calls}


@dataclass(frozen=True, slots=True)
class CommonSubexpressionElimination:
    """Merges instructions that compute the same value."""

    name: ClassVar[str] = "cse"
    only_fusion_computations: bool = False
    combine_iotas: bool = False

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        fused = fusion_computations(module) if self.only_fusion_computations else None

        def transform_for(comp: Computation) -> Transform | None:
            if fused is not None and comp not in fused:
                return None
            return _Deduplicator(self.combine_iotas).transform

        return rewrite_module(module, transform_for)


def iota_key(iota: Keyed) -> Hashable:
    """What HloCSE compares of an iota operand: shape, layout and iota dimension."""
    return ("iota", iota.shape, iota.shape.layout, iota.attrs.get("iota_dimension", 0))


class _Deduplicator:
    def __init__(self, combine_iotas: bool = False) -> None:
        self.seen: dict[Hashable, Instruction] = {}
        self.combine_iotas = combine_iotas

    def transform(self, inst: Instruction, operands: tuple[Instruction, ...],
                  builder: RewriteBuilder) -> Instruction | None:
        op = inst.op
        if not operands and op is not Op.CONSTANT:
            return None  # parameters among them
        if op in SIDE_EFFECT_OPS and has_side_effect(inst):
            return None
        reads_iota = self.combine_iotas and any(o.op is Op.IOTA for o in operands)
        key = ((instruction_key(inst, ()),
                tuple(iota_key(o) if o.op is Op.IOTA else id(o) for o in operands))
               if reads_iota else instruction_key(inst, operands))
        earlier = self.seen.get(key)
        if earlier is not None:
            return builder.rewritten[earlier]
        self.seen[key] = inst
        if not reads_iota:
            return None
        first: dict[Hashable, Instruction] = {}
        reads = tuple(first.setdefault(iota_key(o), o) if o.op is Op.IOTA else o
                      for o in operands)
        if reads == operands:
            return None
        # The same instruction (name, attributes) reading the first of identical iotas.
        kept = dataclasses.replace(inst, operands=reads,
                                   calls=tuple(builder.callee(c) for c in inst.calls))
        builder.instructions.append(kept)
        return kept
