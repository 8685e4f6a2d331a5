"""XLA's canonical forms of gather and scatter, for `xla-gpu`: BatchedGatherScatterNormalizer,
GatherSimplifier and ScatterSimplifier.

XLA's GPU compiler first rewrites every gather and scatter with batching dimensions
(`operand_batching_dims`, `input_batching_dims`: what `jax.vmap` of an indexing op lowers to)
into one without (xla/service/batched_gather_scatter_normalizer.cc, run by gpu_compiler.cc's
`RunPreSPMDPartitionerPasses` before everything else): each batching dimension of the indices
becomes an explicit index column, an iota along that dimension concatenated in front of the
indices along the index vector dimension (`CreateConcatIndices`; the indices are reshaped to
get a trailing index vector dimension first when they have none, and converted to s32 or s64
when a batching dimension's size does not fit their type), the batching dimensions of the
operand join the collapsed (gather) or inserted (scatter) window dimensions, and the start
index map (gather) or scatter-to-operand map (scatter) gets them in front
(`NormalizeBatchGather`, `NormalizeBatchScatter`).

Then, in the simplification fixed point, ahead of the algebraic simplifier, every gather and
scatter not in canonical form is rewritten into it (xla/service/gather_simplifier.cc,
xla/service/scatter_simplifier.cc, with the helpers of gather_scatter_utils.cc): the indices
become a matrix `[number of indices, index vector]` (`TransformStartIndices`: the index vector
dimension made explicit and moved last, the others collapsed into one); a gather reads the
operand transposed so that the start index map is the leading dimensions, keeps every slice
dimension (`offset_dims` 1..rank, none collapsed) and is then transposed back, reshaped to drop
the collapsed dimensions and to restore the indices' dimensions, and transposed to put the
offset dimensions where they were (`GatherSimplifier::ExpandInstruction`); a scatter's updates
are transposed to put their scatter dimensions first, collapsed into one (or given one), and
given the inserted window dimensions back as dimensions of size 1, so the scatter has
`update_window_dims` 1..rank and no inserted ones (`ScatterSimplifier::ExpandInstruction`,
`FlattenAndTransposeUpdates`). The replacement takes the name of what it replaces (XLA's
`ReplaceInstruction` keeps the name), and a new unique id.

A gather or scatter of a single index is left by the simplifiers to XLA's GatherExpander and
ScatterExpander (`kEliminateSimpleGathers`/`kEliminateSimpleScatters`, run right after each
simplifier, which turn it into a dynamic slice or dynamic-update-slice through a loop of one
iteration): `scatter_expander.py` models the scatter's for constant indices; the gather's is
not modelled (such a gather is left as it is). Not modelled either: a gather with a slice of
size 0 (a broadcast zero in XLA); a scatter into a scalar (XLA inlines its update
computation); ScatterSimplifier's reordering of the operand's dimensions for coalesced writes
(`ShouldReorderOperandDims`), which applies to scatters without batching dimensions only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from hlofuse.fusion.xla_gpu.ids import InstructionIds
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape
from hlofuse.passes.decision_log import DecisionSink, RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching

_BATCHING = {Op.GATHER: ("operand_batching_dims", "start_indices_batching_dims"),
             Op.SCATTER: ("input_batching_dims", "scatter_indices_batching_dims")}
_S32_MAX = int(np.iinfo(np.int32).max)


def is_batched(inst: Instruction) -> bool:
    """IsBatchGather / IsBatchScatter: the operand has batching dimensions."""
    names = _BATCHING.get(inst.op)
    return names is not None and bool(inst.ints(names[0]))


def replacement(inst: Instruction, operands: Sequence[Instruction], attrs: dict[str, object],
                 builder: RewriteBuilder) -> Instruction:
    """The rewritten gather or scatter under `inst`'s name (XLA's ReplaceInstruction keeps the
    name)."""
    new = Instruction(inst.name, inst.op, tuple(operands), inst.shape,
                      _frozen(attrs), tuple(builder.callee(c) for c in inst.calls),
                      inst.metadata, inst.extra)
    builder.instructions.append(new)
    return new


def _frozen(attrs: dict[str, object]) -> Mapping[str, object]:
    return MappingProxyType(dict(attrs))


def _promoted(dtype: DType, size: int) -> DType:
    """PromoteTypeForSize: an integer type `size` does not fit in becomes s32 or s64."""
    if not dtype.is_integer or size <= int(np.iinfo(dtype.numpy).max):
        return dtype
    return DType.S32 if size <= _S32_MAX else DType.S64


def reshape_to(operand: Instruction, dims: Sequence[int], builder: RewriteBuilder
             ) -> Instruction:
    if tuple(dims) == operand.shape.dims:
        return operand
    return builder.add(Op.RESHAPE, [operand], shape=operand.shape.with_dims(tuple(dims)))


def transpose_by(operand: Instruction, permutation: Sequence[int], builder: RewriteBuilder
               ) -> Instruction:
    """MaybeTranspose: nothing for the identity permutation."""
    if list(permutation) == sorted(permutation):
        return operand
    return builder.add(Op.TRANSPOSE, [operand], attrs={"dimensions": tuple(permutation)})


def concat_indices(indices: Instruction, index_vector_dim: int,
                   batching_dims: Sequence[int], builder: RewriteBuilder) -> Instruction:
    """CreateConcatIndices: an iota per batching dimension of the indices, in front of the
    indices along the index vector dimension."""
    dtype = indices.dtype
    for dim in batching_dims:
        dtype = _promoted(dtype, indices.shape.dims[dim])
    if dtype is not indices.dtype:
        indices = builder.add(Op.CONVERT, [indices], shape=indices.shape.with_dtype(dtype))
    dims = list(indices.shape.dims)
    implicit = index_vector_dim == len(dims)
    if implicit:
        indices = reshape_to(indices, (*dims, 1), builder)
        dims.append(1)
    column = list(dims)
    column[index_vector_dim] = 1
    iota_shape = Shape.array(dtype, tuple(column))
    pieces = [builder.add(Op.IOTA, attrs={"iota_dimension": dim}, shape=iota_shape)
              for dim in batching_dims]
    pieces.append(indices)
    total = list(column)
    total[index_vector_dim] = len(batching_dims) + dims[index_vector_dim]
    return builder.add(Op.CONCATENATE, pieces, attrs={"dimensions": (index_vector_dim,)},
                       shape=Shape.array(dtype, tuple(total)))


def normalize_gather(gather: Instruction, operands: tuple[Instruction, ...],
                     builder: RewriteBuilder) -> Instruction:
    """NormalizeBatchGather."""
    operand, indices = operands
    operand_batching = gather.ints("operand_batching_dims")
    start_index_map = (*operand_batching, *gather.ints("start_index_map"))
    index_vector_dim = gather.attrs["index_vector_dim"]
    assert isinstance(index_vector_dim, int)
    with builder.metadata_of(gather):
        indices = concat_indices(indices, index_vector_dim,
                                 gather.ints("start_indices_batching_dims"), builder)
    attrs = {"offset_dims": gather.ints("offset_dims"),
             "collapsed_slice_dims": tuple(sorted((*gather.ints("collapsed_slice_dims"),
                                                   *operand_batching))),
             "start_index_map": start_index_map, "index_vector_dim": index_vector_dim,
             "slice_sizes": gather.ints("slice_sizes")}
    if gather.attrs.get("indices_are_sorted") and list(start_index_map) == sorted(
            start_index_map):
        attrs["indices_are_sorted"] = True
    return replacement(gather, (operand, indices), attrs, builder)


def normalize_scatter(scatter: Instruction, operands: tuple[Instruction, ...],
                      builder: RewriteBuilder) -> Instruction:
    """NormalizeBatchScatter."""
    count = (len(operands) - 1) // 2
    targets, indices, updates = operands[:count], operands[count], operands[count + 1:]
    input_batching = scatter.ints("input_batching_dims")
    to_operand = (*input_batching, *scatter.ints("scatter_dims_to_operand_dims"))
    index_vector_dim = scatter.attrs["index_vector_dim"]
    assert isinstance(index_vector_dim, int)
    with builder.metadata_of(scatter):
        indices = concat_indices(indices, index_vector_dim,
                                 scatter.ints("scatter_indices_batching_dims"), builder)
    attrs: dict[str, object] = {
        "update_window_dims": scatter.ints("update_window_dims"),
        "inserted_window_dims": tuple(sorted((*scatter.ints("inserted_window_dims"),
                                              *input_batching))),
        "scatter_dims_to_operand_dims": to_operand, "index_vector_dim": index_vector_dim}
    if scatter.attrs.get("indices_are_sorted") and list(to_operand) == sorted(to_operand):
        attrs["indices_are_sorted"] = True
    if scatter.attrs.get("unique_indices"):
        attrs["unique_indices"] = True
    return replacement(scatter, (*targets, indices, *updates), attrs, builder)


def forget_ids(ids: InstructionIds | None, name: str) -> None:
    """The replacement is a new instruction to XLA: a new unique id, after every old one."""
    if ids is not None:
        ids.ranks.pop(name, None)


@dataclass(frozen=True, slots=True)
class BatchedGatherScatterNormalizer:
    """Every gather and scatter with batching dimensions becomes one without, the batch
    positions given as iota index columns."""

    name: ClassVar[str] = "batched-gather-scatter-normalizer"
    ids: InstructionIds | None = field(default=None, compare=False)

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def rewrite(inst: Instruction, operands: tuple[Instruction, ...],
                    builder: RewriteBuilder) -> Instruction:
            records.rewrote(builder.name, inst, "batched-gather-scatter-normalized",
                            f"%{inst.name} has batching dimensions: iota index columns "
                            "instead")
            forget_ids(self.ids, inst.name)
            if inst.op is Op.GATHER:
                return normalize_gather(inst, operands, builder)
            return normalize_scatter(inst, operands, builder)

        return rewrite_matching(module, is_batched, rewrite)
