"""dot-decomposer and dot-strength-reduction: XLA's DotDecomposer and its GPU
DotStrengthReduction, for `xla-gpu`.

XLA's GPU compiler canonicalises dots before its simplification pipeline
(xla/hlo/transforms/expanders/dot_decomposer.cc, `DotDecomposer::RunImpl`): a dot with an
operand that has several contracting or several non-contracting dimensions, or batch
dimensions that are not the leading ones in order, becomes a dot of the lhs transposed to
(batch, non-contracting, contracting) and the rhs to (batch, contracting, non-contracting),
each reshaped to one dimension per group (the non-contracting one left out when its size is
1), its result reshaped back (`CanonicalizeDot`). A transpose feeding such a dot then cancels
against the new one in the simplifier (`batched_matmul`'s `transpose.1`, which XLA launches
no kernel for).

DotStrengthReduction runs in the simplification fixed point, before the algebraic simplifier
(xla/backends/gpu/transforms/dot_strength_reduction.cc; the "dot-strength-reduction" step of
XLA's per-pass dump of `batched_matmul`). A dot one of whose operands is a vector (every
dimension a batch or a contracting one), or an s32 x s32 -> s32 dot contracting the rhs's
dimension 1, becomes an element-wise multiply and a sum when both operands are vectors or when
the product is under 10 million (`IsMatrixMultiplicationTooSmallForRewriting`: the operands'
non-contracting sizes added, times the contracting size). Each operand is converted to the
result type, transposed to (batch, non-contracting, contracting) order when it is not in it
already, broadcast over the other operand's non-contracting dimensions (the lhs's come first),
the two multiplied, the trailing contracting dimensions summed from zero in the accumulator
type (f32 for f16, bf16 and f32), and the sum converted to the result type.

Not modelled: DotStrengthReduction's last clause, which also reduces a larger vector dot
that Triton cannot handle (`CanTritonHandleGEMM`); the corpus has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape
from hlofuse.passes.decision_log import RewriteLog
from hlofuse.passes.loop_rebuild import with_reachable_computations
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

PASS_NAME = "dot-strength-reduction"
SIZE_THRESHOLD = 10_000_000
_F32_ACCUMULATED = frozenset({DType.F16, DType.BF16, DType.F32})


def _dims(dot: Instruction, side: str) -> tuple[tuple[int, ...], tuple[int, ...],
                                                 tuple[int, ...]]:
    """(batch, non-contracting, contracting) dimensions of one operand, each ascending."""
    operand = dot.operands[0 if side == "lhs" else 1]
    batch = tuple(dot.ints(f"{side}_batch_dims"))
    contracting = tuple(dot.ints(f"{side}_contracting_dims"))
    free = tuple(d for d in range(operand.shape.rank) if d not in batch and d not in contracting)
    return batch, free, contracting


def _size(dot: Instruction) -> int:
    lhs, rhs = dot.operands
    contracting = int(np.prod([lhs.shape.dims[d] for d in dot.ints("lhs_contracting_dims")]))
    lhs_free = int(np.prod([lhs.shape.dims[d] for d in _dims(dot, "lhs")[1]]))
    rhs_free = int(np.prod([rhs.shape.dims[d] for d in _dims(dot, "rhs")[1]]))
    return (lhs_free + rhs_free) * contracting


def reduces(dot: Instruction) -> bool:
    """DotStrengthReduction::InstructionMatchesPattern (without the Triton clause)."""
    if dot.op is not Op.DOT:
        return False
    lhs, rhs = dot.operands
    lhs_batch, _, lhs_contracting = _dims(dot, "lhs")
    rhs_batch, _, rhs_contracting = _dims(dot, "rhs")
    lhs_vector = len(lhs_batch) + len(lhs_contracting) == lhs.shape.rank
    rhs_vector = len(rhs_batch) + len(rhs_contracting) == rhs.shape.rank
    s32 = (lhs.dtype is DType.S32 and rhs.dtype is DType.S32 and dot.dtype is DType.S32
           and tuple(dot.ints("rhs_contracting_dims")) == (1,))
    if not (lhs_vector or rhs_vector or s32):
        return False
    return (lhs_vector and rhs_vector) or _size(dot) < SIZE_THRESHOLD


def _scalar_add(dtype: DType, names: NameUniquer, name: str) -> Computation:
    builder = ComputationBuilder(name, names)
    lhs = builder.parameter(0, Shape.scalar(dtype))
    rhs = builder.parameter(1, Shape.scalar(dtype))
    return builder.build(builder.add(Op.ADD, [lhs, rhs]))


def expand(dot: Instruction, operands: tuple[Instruction, ...], builder: RewriteBuilder,
           adders: dict[DType, Computation]) -> Instruction:
    """DotStrengthReduction::ExpandInstruction."""
    metadata = dot.metadata
    sides = (_dims(dot, "lhs"), _dims(dot, "rhs"))
    flows = []
    for i, (side, operand) in enumerate(zip(sides, operands, strict=True)):
        batch, free, contracting = side
        if operand.dtype is not dot.dtype:
            operand = builder.add(Op.CONVERT, [operand], shape=operand.shape.with_dtype(
                dot.dtype), metadata=metadata)
        permutation = batch + free + contracting
        if list(permutation) != sorted(permutation):
            operand = builder.add(Op.TRANSPOSE, [operand], attrs={"dimensions": permutation},
                                  metadata=metadata)
        other_free = sides[1 - i][1]
        other = operands[1 - i]
        inserted = tuple(other.shape.dims[d] for d in other_free)
        if inserted:
            before = len(batch) + (len(free) if i == 0 else 0)
            dims = operand.shape.dims
            shape = operand.shape.with_dims(dims[:before] + inserted + dims[before:])
            mapping = tuple(range(before)) + tuple(
                range(before + len(inserted), len(dims) + len(inserted)))
            operand = builder.add(Op.BROADCAST, [operand], attrs={"dimensions": mapping},
                                  shape=shape, metadata=metadata)
        flows.append(operand)
    flow = builder.add(Op.MULTIPLY, flows, metadata=metadata)
    count = len(sides[0][2])
    if count:
        accumulator = DType.F32 if dot.dtype in _F32_ACCUMULATED else dot.dtype
        if flow.dtype is not accumulator:
            flow = builder.add(Op.CONVERT, [flow], shape=flow.shape.with_dtype(accumulator),
                               metadata=metadata)
        zero = builder.add(Op.CONSTANT, attrs={"literal": np.zeros((), accumulator.numpy)},
                           shape=Shape.scalar(accumulator))
        if accumulator not in adders:
            adders[accumulator] = _scalar_add(accumulator, builder.names,
                                              f"scalar_add_computation.{len(adders)}")
        adder = adders[accumulator]
        rank = flow.shape.rank
        flow = builder.add(Op.REDUCE, [flow, zero],
                           attrs={"dimensions": tuple(range(rank - count, rank))},
                           calls=[adder], metadata=metadata)
    if flow.dtype is not dot.dtype:
        flow = builder.add(Op.CONVERT, [flow], shape=flow.shape.with_dtype(dot.dtype),
                           metadata=metadata)
    return flow


@dataclass(frozen=True, slots=True)
class DotStrengthReduction:
    """Small dots with a vector operand become a multiply and a reduce."""

    name: ClassVar[str] = PASS_NAME

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)
        adders: dict[DType, Computation] = {}

        def reduce_dot(inst: Instruction, operands: tuple[Instruction, ...],
                       builder: RewriteBuilder) -> Instruction:
            records.rewrote(builder.name, inst, "dot-to-reduce",
                            f"%{inst.name} has a vector operand and is small: a multiply and "
                            "a reduce")
            return expand(inst, operands, builder, adders)

        module, changed = rewrite_matching(module, reduces, reduce_dot)
        if not adders:
            return module, changed
        # The new adder computations join the module, callees first.
        return with_reachable_computations(module), changed


def _canonical_operand(rank: int, contracting: tuple[int, ...], batch: tuple[int, ...]) -> bool:
    """DotDecomposer's IsCanonical: one contracting dimension, at most one non-contracting
    one, the batch dimensions leading and in order."""
    if len(contracting) != 1 or len(batch) + 2 < rank:
        return False
    return batch == tuple(range(len(batch)))


def canonical(dot: Instruction) -> bool:
    lhs, rhs = dot.operands
    return all(_canonical_operand(o.shape.rank, tuple(dot.ints(f"{side}_contracting_dims")),
                                  tuple(dot.ints(f"{side}_batch_dims")))
               for side, o in (("lhs", lhs), ("rhs", rhs)))


def canonicalize(dot: Instruction, operands: tuple[Instruction, ...],
                 builder: RewriteBuilder) -> Instruction:
    """DotDecomposer's CanonicalizeDot: the lhs transposed to (batch, non-contracting,
    contracting) and the rhs to (batch, contracting, non-contracting), each reshaped to one
    dimension per group, a canonical dot, and its result reshaped back."""
    metadata = dot.metadata
    reshaped = []
    for i, (side, operand) in enumerate(zip(("lhs", "rhs"), operands, strict=True)):
        batch = tuple(dot.ints(f"{side}_batch_dims"))
        contracting = tuple(dot.ints(f"{side}_contracting_dims"))
        free = tuple(d for d in range(operand.shape.rank)
                     if d not in batch and d not in contracting)
        groups = (batch, free, contracting) if i == 0 else (batch, contracting, free)
        permutation = tuple(d for group in groups for d in group)
        if permutation != tuple(range(operand.shape.rank)):
            operand = builder.add(Op.TRANSPOSE, [operand], attrs={"dimensions": permutation},
                                  metadata=metadata)
        dims = operand.shape.dims
        sizes = [dims[d] for d in range(len(batch))]
        start = len(batch)
        for k, group in enumerate(groups[1:]):
            size = int(np.prod(dims[start:start + len(group)], dtype=np.int64))
            # The contracting group is always a dimension, the other one unless its size is 1.
            if size != 1 or k == 1 - i:
                sizes.append(size)
            start += len(group)
        if tuple(sizes) != dims:
            operand = builder.add(Op.RESHAPE, [operand],
                                  shape=operand.shape.with_dims(tuple(sizes)),
                                  metadata=metadata)
        reshaped.append(operand)
    lhs, rhs = reshaped
    batch = tuple(range(len(dot.ints("lhs_batch_dims"))))
    lhs_free = lhs.shape.rank - len(batch) - 1  # 0 or 1
    attrs: dict[str, object] = {"lhs_batch_dims": batch, "rhs_batch_dims": batch,
             "lhs_contracting_dims": (len(batch) + lhs_free,),
             "rhs_contracting_dims": (len(batch),)}
    for key, value in dot.attrs.items():
        attrs.setdefault(key, value)
    out = builder.add(Op.DOT, [lhs, rhs], attrs=attrs, metadata=metadata)
    if out.shape.dims != dot.shape.dims:
        out = builder.add(Op.RESHAPE, [out], shape=dot.shape, metadata=metadata)
    return out


@dataclass(frozen=True, slots=True)
class DotDecomposer:
    """Dots not in canonical form become transposes and reshapes around a canonical dot."""

    name: ClassVar[str] = "dot-decomposer"

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def pending(inst: Instruction) -> bool:
            return inst.op is Op.DOT and not canonical(inst)

        def decompose(inst: Instruction, operands: tuple[Instruction, ...],
                      builder: RewriteBuilder) -> Instruction:
            records.rewrote(builder.name, inst, "canonical-dot",
                            f"%{inst.name} is not a canonical dot: transposes and reshapes "
                            "around one")
            return canonicalize(inst, operands, builder)

        return rewrite_matching(module, pending, decompose)
