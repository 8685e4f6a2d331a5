"""reshape-mover: XLA's ReshapeMover, for `xla-gpu`: an element-wise op whose operands are
reshapes (or transposes) is computed before the rearrange, which then follows it.

XLA's GPU compiler runs ReshapeMover (xla/hlo/transforms/simplifiers/reshape_mover.cc) in the
"simplification" fixed point of gpu_compiler.cc (after WhileLoopSimplifier and SliceSinker,
before HloConstantFolding and ConditionalSimplifier), with
`reshape_of_1d_broadcast_is_cheap = true`. Its rule, restated:

* A "rearrange" is a reshape or a transpose. An operand rearrange is trivial when it changes
  nothing (a reshape to its operand's shape, an identity transpose).
* `CanTriviallyRearrange(x, r)`: x can take the inverse of rearrange r for free when r is
  trivial, x is a constant, x is an rng with one user (the IR has no `rng` op), or x is a
  broadcast with sorted dimensions and either r is a reshape and x's operand is a scalar, has
  at most one dimension of size > 1, or r leaves x's broadcast dimensions unmodified
  (`ShapeUtil::ReshapeLeavesDimensionsUnmodified` from r's shape to r's operand's shape); or r
  is a transpose that keeps the broadcast dimensions in order.
* `IsReshapeMoveCandidate`: an element-wise instruction with a non-trivial rearrange operand
  (the first such is "the" rearrange) all of whose operands are either rearranges equivalent
  to it (same op, same result dimensions, same operand dimensions or permutation) or
  non-rearranges that can trivially take its inverse.
* `TryReshapeMoveOnCandidates`: a rearrange operand of a candidate with a user that is not a
  candidate removes all its users from the candidates, repeated until nothing changes; the
  rest are all moved.
* `SinkRearrangeOperands`: each operand gets the inverse rearrange (a reshape to the
  rearrange's operand shape, skipped when the operand already has that shape and taking the
  operand's operand when the operand is a reshape from that shape; the inverse permutation for
  a transpose), the op is cloned on them at the rearrange's operand shape (its own element
  type), and a reshape (or the same transpose) back to the old shape replaces it.

The redundant rearranges this leaves (reshape of reshape, reshape of broadcast, reshape of a
constant) are for the simplifier and constant folding in the same fixed point, as in XLA. The
values are unchanged: an element-wise op commutes with any rearrangement of its elements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import ELEMENTWISE_OPS, Op
from hlofuse.ir.shapes import Shape
from hlofuse.passes.decision_log import RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, Transform, rewrite_module

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

PASS_NAME = "reshape-mover"
_REARRANGES = (Op.RESHAPE, Op.TRANSPOSE)


def _product(xs: tuple[int, ...] | list[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def common_factors(a: tuple[int, ...], b: tuple[int, ...]) -> list[tuple[int, int]]:
    """XLA's CommonFactors (xla/util.cc): the index pairs (i, j) at which the prefixes of `a`
    and `b` have equal products, bounding the groups of dimensions a reshape maps onto
    each other."""
    if a == b:
        return [(i, i) for i in range(len(a) + 1)]
    bounds: list[tuple[int, int]] = []
    i = j = 0
    prior_i = prior_j = -1
    while i < len(a) and j < len(b) and a[i] == b[j]:
        prior_i, prior_j = i, j
        bounds.append((i, j))
        i += 1
        j += 1
    if _product(a[i:]) != _product(b[j:]):
        return [(0, 0), (len(a), len(b))]
    if _product(a[i:]) == 0:
        return [*bounds, (i, j), (len(a), len(b))]
    part_a = part_b = 1
    while True:
        if part_a == part_b and (i > prior_i or j > prior_j):
            prior_i, prior_j = i, j
            bounds.append((i, j))
            continue
        in_a, in_b = i < len(a), j < len(b)
        if not (in_a or in_b):
            break
        next_a = part_a < part_b or (in_a and (not in_b or (part_a == part_b and a[i] <= b[j])))
        next_b = part_b < part_a or (in_b and (not in_a or (part_a == part_b and a[i] >= b[j])))
        if next_a:
            part_a *= a[i]
            i += 1
        if next_b:
            part_b *= b[j]
            j += 1
    return bounds


def dimensions_unmodified_by_reshape(source: tuple[int, ...], target: tuple[int, ...]
                                     ) -> list[tuple[int, int]]:
    """XLA's ShapeUtil::DimensionsUnmodifiedByReshape: (source dim, target dim) pairs that a
    reshape from `source` to `target` maps one-to-one (common-factor groups of one each)."""
    factors = common_factors(source, target)
    kept = [(s, t) for (s, t), (s2, t2) in zip(factors, factors[1:], strict=False)
            if s2 - s == 1 and t2 - t == 1]
    return kept


def reshape_leaves_dimensions_unmodified(source: tuple[int, ...], target: tuple[int, ...],
                                         dims: tuple[int, ...]) -> bool:
    """XLA's ShapeUtil::ReshapeLeavesDimensionsUnmodified(...).has_value(): `dims` sorted and
    each a dimension the reshape from `source` to `target` leaves alone."""
    if list(dims) != sorted(dims):
        return False
    unmodified = {s for s, _ in dimensions_unmodified_by_reshape(source, target)}
    return all(d in unmodified for d in dims)


def _inverse_permutation(perm: tuple[int, ...]) -> tuple[int, ...]:
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return tuple(inverse)


def _is_trivial(rearrange: Instruction) -> bool:
    """A reshape to its operand's shape or an identity transpose."""
    if rearrange.op is Op.RESHAPE:
        return rearrange.shape == rearrange.operands[0].shape
    return rearrange.ints("dimensions") == tuple(range(rearrange.shape.rank))


def can_trivially_rearrange(inst: Instruction, rearrange: Instruction) -> bool:
    """XLA's ReshapeMover::CanTriviallyRearrange with reshape_of_1d_broadcast_is_cheap."""
    if _is_trivial(rearrange):
        return True
    if inst.op is Op.CONSTANT:
        return True
    if inst.op is not Op.BROADCAST:
        return False
    dims = inst.ints("dimensions")
    if list(dims) != sorted(dims):
        return False
    small = inst.operands[0].shape
    if rearrange.op is Op.RESHAPE:
        return (small.rank == 0 or sum(d != 1 for d in small.dims) <= 1
                or reshape_leaves_dimensions_unmodified(
                    rearrange.shape.dims, rearrange.operands[0].shape.dims, dims))
    # TransposedBcastDims(dims, InversePermutation(perm)) maps broadcast dim d to perm[d].
    perm = rearrange.ints("dimensions")
    moved = [perm[d] for d in dims]
    return moved == sorted(moved)


def _equivalent(a: Instruction, b: Instruction) -> bool:
    """XLA's AreEquivalentRearranges."""
    if a.op is not b.op or a.shape.dims != b.shape.dims:
        return False
    if a.op is Op.TRANSPOSE:
        return a.ints("dimensions") == b.ints("dimensions")
    return a.operands[0].shape.dims == b.operands[0].shape.dims


def first_nontrivial_rearrange(operands: tuple[Instruction, ...]) -> Instruction | None:
    for operand in operands:
        if operand.op in _REARRANGES and not can_trivially_rearrange(operand.operands[0],
                                                                     operand):
            return operand
    return None


def is_candidate(inst: Instruction) -> bool:
    """XLA's ReshapeMover::IsReshapeMoveCandidate."""
    if inst.op not in ELEMENTWISE_OPS:
        return False
    rearrange = first_nontrivial_rearrange(inst.operands)
    if rearrange is None:
        return False
    return all(_equivalent(o, rearrange) if o.op in _REARRANGES
               else can_trivially_rearrange(o, rearrange) for o in inst.operands)


def moved_instructions(comp: Computation) -> set[Instruction]:
    """XLA's candidate selection and TryReshapeMoveOnCandidates: the candidates left once
    every rearrange operand with a user outside the set has taken its users out."""
    candidates = {i for i in comp.instructions if is_candidate(i)}
    if not candidates:
        return candidates
    users: dict[Instruction, list[Instruction]] = {}
    for user in comp.instructions:
        for operand in dict.fromkeys(user.operands):
            users.setdefault(operand, []).append(user)
    removed = True
    while candidates and removed:
        rearranges = {o for c in candidates for o in c.operands if o.op in _REARRANGES}
        removed = False
        for operand in rearranges:
            if any(u not in candidates for u in users.get(operand, ())):
                for user in users.get(operand, ()):
                    if user in candidates:
                        candidates.discard(user)
                        removed = True
    return candidates


def _inverse(rearrange: Instruction, operand: Instruction,
             builder: RewriteBuilder) -> Instruction:
    """XLA's ReshapeMover::ApplyInverseRearrange."""
    if rearrange.op is Op.RESHAPE:
        shape = Shape(operand.dtype, rearrange.operands[0].shape.dims)
        if operand.shape == shape:
            return operand
        if operand.op is Op.RESHAPE and operand.operands[0].shape == shape:
            return operand.operands[0]
        return builder.add(Op.RESHAPE, [operand], shape=shape, metadata=operand.metadata)
    perm = rearrange.ints("dimensions")
    if perm == tuple(range(len(perm))):
        return operand
    inverse = _inverse_permutation(perm)
    return builder.add(Op.TRANSPOSE, [operand], attrs={"dimensions": inverse},
                       shape=Shape(operand.dtype, tuple(operand.shape.dims[d] for d in inverse)),
                       metadata=operand.metadata)


def _sink(inst: Instruction, operands: tuple[Instruction, ...],
          builder: RewriteBuilder) -> Instruction:
    """XLA's ReshapeMover::SinkRearrangeOperands on the rewritten operands."""
    rearrange = first_nontrivial_rearrange(inst.operands)
    assert rearrange is not None
    new_operands = [_inverse(rearrange, o, builder) for o in operands]
    moved = builder.add(inst.op, new_operands, attrs=dict(inst.attrs),
                        shape=Shape(inst.dtype, rearrange.operands[0].shape.dims),
                        name_base=inst.name, metadata=inst.metadata)
    if rearrange.op is Op.RESHAPE:
        return builder.add(Op.RESHAPE, [moved], shape=inst.shape, metadata=inst.metadata)
    return builder.add(Op.TRANSPOSE, [moved], attrs={"dimensions": rearrange.ints("dimensions")},
                       shape=inst.shape, metadata=inst.metadata)


@dataclass(frozen=True, slots=True)
class ReshapeMover:
    """Moves reshapes and transposes from the operands of element-wise ops to their results."""

    name: ClassVar[str] = PASS_NAME

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)
        fused = {id(c) for i in module.all_instructions() if i.op is Op.FUSION for c in i.calls}

        def transform_for(comp: Computation) -> Transform | None:
            if id(comp) in fused:  # XLA: MakeNonfusionComputations
                return None
            moved = moved_instructions(comp)
            if not moved:
                return None

            def transform(inst: Instruction, operands: tuple[Instruction, ...],
                          builder: RewriteBuilder) -> Instruction | None:
                if inst not in moved:
                    return None
                records.rewrote(comp.name, inst, "sink-rearrange",
                                f"%{inst.name} ({inst.op.text}) reads reshaped or transposed "
                                "operands: it is computed before the rearrange")
                return _sink(inst, operands, builder)

            return transform

        return rewrite_module(module, transform_for)
