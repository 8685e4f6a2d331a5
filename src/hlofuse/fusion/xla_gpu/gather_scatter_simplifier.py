"""XLA's GatherSimplifier and ScatterSimplifier, for `xla-gpu`: every gather and scatter in the
canonical form XLA's GPU emitters take (the module docstring of `gather_scatter.py` says what
that form is and what is not modelled)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from hlofuse.fusion.xla_gpu.gather_scatter import (
    forget_ids,
    is_batched,
    replacement,
    reshape_to,
    transpose_by,
)
from hlofuse.fusion.xla_gpu.ids import InstructionIds
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.passes.decision_log import DecisionSink, RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching


def _insert_degenerate(operand: Instruction, positions: Sequence[int],
                       builder: RewriteBuilder) -> Instruction:
    """InsertDegenerateDims: dimensions of size 1 at `positions` of the result."""
    rest = iter(operand.shape.dims)
    rank = operand.shape.rank + len(positions)
    dims = [1 if d in positions else next(rest) for d in range(rank)]
    return reshape_to(operand, dims, builder)


def _elide_degenerate(operand: Instruction, positions: Sequence[int],
                      builder: RewriteBuilder) -> Instruction:
    """ElideDegenerateDims: the dimensions of size 1 at `positions` dropped."""
    dims = [n for d, n in enumerate(operand.shape.dims) if d not in positions]
    return reshape_to(operand, dims, builder)


def _collapse_first(operand: Instruction, count: int, builder: RewriteBuilder) -> Instruction:
    """CollapseFirstNDims."""
    dims = operand.shape.dims
    return reshape_to(operand, (math.prod(dims[:count]), *dims[count:]), builder)


def transform_start_indices(indices: Instruction, index_vector_dim: int,
                            builder: RewriteBuilder) -> Instruction:
    """TransformStartIndices: the indices as a matrix [number of indices, index vector]."""
    rank = indices.shape.rank
    if index_vector_dim == rank:
        indices = _insert_degenerate(indices, (index_vector_dim,), builder)
        rank += 1
    elif index_vector_dim < rank - 1:
        order = [d for d in range(rank) if d != index_vector_dim] + [index_vector_dim]
        indices = transpose_by(indices, order, builder)
    if rank > 2:
        return _collapse_first(indices, rank - 1, builder)
    if rank == 1:
        return _insert_degenerate(indices, (0,), builder)
    return indices


def _index_count(indices: Instruction, index_vector_dim: int) -> int:
    """GatherLoopTripCount / ScatterTripCount: how many index vectors there are."""
    return math.prod(n for d, n in enumerate(indices.shape.dims) if d != index_vector_dim)


def _start_index_permutation(start_map: Sequence[int], rank: int) -> tuple[list[int], list[int]]:
    """MakeOperandStartIndexPermutations: the mapped dimensions first, and the inverse."""
    permutation = list(start_map) + [d for d in range(rank) if d not in start_map]
    inverse = [0] * rank
    for position, d in enumerate(permutation):
        inverse[d] = position
    return permutation, inverse


def _ivd(inst: Instruction) -> int:
    value = inst.attrs["index_vector_dim"]
    assert isinstance(value, int)
    return value


def gather_needs_simplifying(inst: Instruction) -> bool:
    """GatherSimplifier::InstructionMatchesPattern, less the gathers of one index (left to
    XLA's GatherExpander, not modelled) and those with a slice of size 0."""
    # A batched gather is the normaliser's to rewrite first (XLA runs it before); a gather
    # from a scalar has no canonical form.
    if (inst.op is not Op.GATHER or 0 in inst.ints("slice_sizes") or is_batched(inst)
            or inst.operands[0].shape.rank == 0):
        return False
    indices = inst.operands[1]
    if _index_count(indices, _ivd(inst)) == 1:
        return False
    offset = inst.ints("offset_dims")
    start_map = inst.ints("start_index_map")
    return (indices.shape.rank != 2 or _ivd(inst) != 1
            or start_map != tuple(range(len(start_map)))
            or bool(inst.ints("collapsed_slice_dims"))
            or not offset or offset[0] != 1 or offset[-1] != len(offset))


def simplify_gather(gather: Instruction, operands: tuple[Instruction, ...],
                    builder: RewriteBuilder) -> Instruction:
    """GatherSimplifier::ExpandInstruction."""
    operand, indices = operands
    offset_dims = gather.ints("offset_dims")
    collapsed = gather.ints("collapsed_slice_dims")
    rank = len(offset_dims) + len(collapsed)
    permutation, inverse = _start_index_permutation(gather.ints("start_index_map"), rank)
    operand = transpose_by(operand, permutation, builder)
    indices = transform_start_indices(indices, _ivd(gather), builder)
    sizes = gather.ints("slice_sizes")
    slice_sizes = tuple(sizes[d] for d in permutation)
    count = len(gather.ints("start_index_map"))
    result = builder.add(Op.GATHER, [operand, indices], attrs={
        "offset_dims": tuple(range(1, rank + 1)), "collapsed_slice_dims": (),
        "start_index_map": tuple(range(count)), "index_vector_dim": 1,
        "slice_sizes": slice_sizes,
        **({"indices_are_sorted": True} if gather.attrs.get("indices_are_sorted") else {})},
        shape=gather.shape.with_dims((indices.shape.dims[0], *slice_sizes)))
    result = transpose_by(result, [0] + [d + 1 for d in inverse], builder)
    if collapsed:
        result = _elide_degenerate(result, [d + 1 for d in collapsed], builder)
    start_dims = [n for d, n in enumerate(gather.operands[1].shape.dims) if d != _ivd(gather)]
    if len(start_dims) > 1:
        result = reshape_to(result, (*start_dims, *result.shape.dims[1:]), builder)
    elif not start_dims:
        result = _elide_degenerate(result, (0,), builder)
    output_rank = len(start_dims) + len(offset_dims)
    next_offset, next_start, order = len(start_dims), 0, []
    for d in range(output_rank):
        if d in offset_dims:
            order.append(next_offset)
            next_offset += 1
        else:
            order.append(next_start)
            next_start += 1
    return _named_last(gather, transpose_by(result, order, builder), builder)


def scatter_needs_simplifying(inst: Instruction) -> bool:
    """ScatterSimplifier::InstructionMatchesPattern (not IsSimplifiedScatter), less the
    scatters of one index (left to XLA's ScatterExpander, scatter_expander.py) and those into a
    scalar."""
    if inst.op is not Op.SCATTER or is_batched(inst):
        return False
    count = (len(inst.operands) - 1) // 2
    indices, update = inst.operands[count], inst.operands[count + 1]
    if inst.operands[0].shape.rank == 0 or _index_count(indices, _ivd(inst)) == 1:
        return False
    window = inst.ints("update_window_dims")
    return not (_ivd(inst) + 1 == indices.shape.rank
                and update.shape.rank - len(window) <= 1
                and 0 not in window and list(window) == sorted(window)
                and not inst.ints("inserted_window_dims"))


def _flatten_updates(update: Instruction, window: Sequence[int], inserted: Sequence[int],
                     builder: RewriteBuilder) -> Instruction:
    """FlattenAndTransposeUpdates: scatter dimensions first, collapsed into one (or one
    added), the inserted window dimensions back as dimensions of size 1."""
    rank = update.shape.rank
    update = transpose_by(update, [d for d in range(rank) if d not in window] + list(window),
                        builder)
    scatter_dims = rank - len(window)
    if scatter_dims > 1:
        update = _collapse_first(update, scatter_dims, builder)
    elif scatter_dims == 0:
        update = _insert_degenerate(update, (0,), builder)
    if inserted:
        update = _insert_degenerate(update, [d + 1 for d in inserted], builder)
    return update


def simplify_scatter(scatter: Instruction, operands: tuple[Instruction, ...],
                     builder: RewriteBuilder) -> Instruction:
    """ScatterSimplifier::ExpandInstruction (operand dimensions in their order)."""
    count = (len(operands) - 1) // 2
    targets, indices, updates = operands[:count], operands[count], operands[count + 1:]
    window = scatter.ints("update_window_dims")
    inserted = scatter.ints("inserted_window_dims")
    indices = transform_start_indices(indices, _ivd(scatter), builder)
    updates = tuple(_flatten_updates(u, window, inserted, builder) for u in updates)
    rank = len(window) + len(inserted)
    attrs: dict[str, object] = {
        "update_window_dims": tuple(range(1, rank + 1)), "inserted_window_dims": (),
        "scatter_dims_to_operand_dims": scatter.ints("scatter_dims_to_operand_dims"),
        "index_vector_dim": 1}
    for flag in ("indices_are_sorted", "unique_indices"):
        if scatter.attrs.get(flag):
            attrs[flag] = True
    return replacement(scatter, (*targets, indices, *updates), attrs, builder)


def _named_last(inst: Instruction, result: Instruction, builder: RewriteBuilder
                ) -> Instruction:
    """The last instruction of the replacement, under `inst`'s name (ReplaceInstruction)."""
    if result.name == inst.name:
        return result
    builder.instructions.remove(result)
    renamed = Instruction(inst.name, result.op, result.operands, result.shape, result.attrs,
                          result.calls, inst.metadata, result.extra)
    builder.instructions.append(renamed)
    return renamed


@dataclass(frozen=True, slots=True)
class GatherSimplifier:
    """Gathers in XLA's canonical form: indices [N, k], the start index map the leading
    operand dimensions, every slice dimension kept."""

    name: ClassVar[str] = "gather-simplifier"
    ids: InstructionIds | None = field(default=None, compare=False)

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def rewrite(inst: Instruction, operands: tuple[Instruction, ...],
                    builder: RewriteBuilder) -> Instruction:
            records.rewrote(builder.name, inst, "gather-simplified",
                            f"%{inst.name} is not in canonical form: one with indices "
                            "[N, k] and transposes and reshapes around it")
            forget_ids(self.ids, inst.name)
            with builder.metadata_of(inst):
                return simplify_gather(inst, operands, builder)

        return rewrite_matching(module, gather_needs_simplifying, rewrite)


@dataclass(frozen=True, slots=True)
class ScatterSimplifier:
    """Scatters in XLA's canonical form: indices [N, k], updates [N, window...], no inserted
    window dimensions."""

    name: ClassVar[str] = "scatter-simplifier"
    ids: InstructionIds | None = field(default=None, compare=False)

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def rewrite(inst: Instruction, operands: tuple[Instruction, ...],
                    builder: RewriteBuilder) -> Instruction:
            records.rewrote(builder.name, inst, "scatter-simplified",
                            f"%{inst.name} is not in canonical form: one with indices "
                            "[N, k] and updates [N, window...]")
            forget_ids(self.ids, inst.name)
            with builder.metadata_of(inst):
                return simplify_scatter(inst, operands, builder)

        return rewrite_matching(module, scatter_needs_simplifying, rewrite)
