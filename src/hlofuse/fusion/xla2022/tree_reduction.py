"""tree-reduction-rewriter: a tiled reduction too large for one race-free kernel becomes two.

XLA's GPU reduction emitter (2022) writes each output element from one thread block without
atomics only when the reduction fits the block's tile (`ReductionIsRaceFree`,
xla/service/gpu/ir_emission_utils.cc): a row reduction over at most 1024 * 16 = 16384
elements with at most 8 (`BatchedReductionRaceFreeBound`) reduced batch rows, a column
reduction over at most 32 * 128 = 4096 rows. `GpuTreeReductionRewriter`
(xla/service/gpu/tree_reduction_rewriter.cc, run to a fixed point after layout assignment,
before fusion) rewrites any other contiguous reduction:

- a batched row reduction with more than 8 batch rows: an inner reduce over the row, then an
  outer reduce over the batch dimension;
- otherwise, with k the reduced dimension's size and n = ceil(sqrt(k)): the input is padded
  with the init value to n * n elements along that dimension (unless n divides k), reshaped so
  the dimension becomes (k / n or n, n), reduced over n (row) or over the major part (column),
  and the result reduced over the other part. Each reduce is then its own kInput kernel: a
  reduction that was one kernel is two.

Min and max reductions are left alone (XLA's `IsMinMaxReduction`: they are associative in any
order, its emitter uses atomics for them), as are reductions the tiled emitter does not take.
XLA sees every reduction after its normalisers (degenerate dimensions removed, adjacent
dimensions grouped, layouts made major-to-minor); hlofuse applies the rewrite to that
normalised view: the input is reshaped to its (batch, kept, reduced) or (kept, reduced, kept)
groups, size-1 groups dropped, and the final result reshaped back. Only default layouts are
rewritten, and only single-output reduces (`variadic-reduce` is logged).

Floating-point sums are grouped differently afterwards, so they round differently than the
single reduction; the compiled module still equals the interpreter run on the rewritten
module.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import isqrt
from typing import ClassVar

from hlofuse.analysis.reducers import reducer_op
from hlofuse.fusion.legality.properties import (
    ReductionDimensions,
    are_dimensions_consecutive,
    minor_to_major,
    reduction_dimensions,
    tiled_reduction_is_faster,
)
from hlofuse.ir.attrs import PaddingDim
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape, default_layout
from hlofuse.passes.decision_log import DecisionSink, RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching

MIN_THREADS_X_ROW_REDUCTION = 1024  # MinThreadsXRowReduction
ROW_TILE_X = 16  # GetReductionTiling: {min(batch, 8), 1, 16} for rows
BATCHED_REDUCTION_RACE_FREE_BOUND = 8  # BatchedReductionRaceFreeBound
WARP_SIZE = 32
COLUMN_TILE_Y = 128  # GetReductionTiling: {1, 128, 1} for columns
ROW_LIMIT = MIN_THREADS_X_ROW_REDUCTION * ROW_TILE_X  # 16384
COLUMN_LIMIT = WARP_SIZE * COLUMN_TILE_Y  # 4096


def is_race_free(dims: ReductionDimensions) -> bool:
    """ReductionIsRaceFree with the 2022 tiling."""
    if dims.is_row_reduction:
        return (dims.dimensions[2] <= ROW_LIMIT
                and dims.dimensions[0] <= BATCHED_REDUCTION_RACE_FREE_BOUND)
    return dims.dimensions[1] <= COLUMN_LIMIT


def sqrt_of_round_up_to_square(k: int) -> int:
    """ceil(sqrt(k)), exactly."""
    return isqrt(k - 1) + 1 if k > 0 else 0


@dataclass(frozen=True, slots=True)
class _Normalised:
    """The reduce as XLA's normalisers leave it: dims (size-1 groups dropped), which of them
    are reduced, and whether it is a row reduction."""

    dims: tuple[int, ...]
    reduced: tuple[int, ...]
    is_row: bool


def _normalise(groups: ReductionDimensions) -> _Normalised:
    d0, d1, d2 = groups.dimensions
    # Rows: (batch, kept, reduced), batch and reduced reduced. Columns: (kept, reduced, kept).
    roles = (True, False, True) if groups.is_row_reduction else (False, True, False)
    kept = [(size, role) for size, role in zip((d0, d1, d2), roles) if size != 1]
    if not any(role for _, role in kept):  # every reduced group has size 1: nothing to split
        return _Normalised(tuple(s for s, _ in kept), (), groups.is_row_reduction)
    dims = tuple(s for s, _ in kept)
    reduced = tuple(i for i, (_, role) in enumerate(kept) if role)
    return _Normalised(dims, reduced, groups.is_row_reduction)


def _has_default_layout(shape: Shape) -> bool:
    return minor_to_major(shape) == default_layout(shape.rank)


def splittable(inst: Instruction, reducer: Computation) -> tuple[str, str] | None:
    """Why `inst` (a reduce) is not rewritten, as (rule, message), or None if it is."""
    if inst.shape.is_tuple:
        return "variadic-reduce", f"%{inst.name} is a variadic reduce"
    if reducer_op(reducer) in (Op.MAXIMUM, Op.MINIMUM):
        return "min-max-reduction", f"%{inst.name} is a min/max reduction"
    source = inst.operands[0].shape
    if not (_has_default_layout(source) and _has_default_layout(inst.shape)):
        return "non-default-layout", f"%{inst.name} reads or writes a non-default layout"
    return None


def _contiguous(source: Shape, reduced: tuple[int, ...]) -> ReductionDimensions | None:
    kept = tuple(d for d in range(source.rank) if d not in reduced)
    if not (are_dimensions_consecutive(source, kept)
            or are_dimensions_consecutive(source, reduced)):
        return None
    groups = reduction_dimensions(source, reduced)
    return groups if tiled_reduction_is_faster(groups) else None


class _Splitter:
    """Builds the two reduces of one rewrite."""

    def __init__(self, inst: Instruction, operands: tuple[Instruction, ...],
                 builder: RewriteBuilder) -> None:
        self.inst = inst
        self.source, self.init = operands
        self.builder = builder
        self.reducer = [builder.callee(c) for c in inst.calls]

    def reduce(self, value: Instruction, dims: tuple[int, ...]) -> Instruction:
        out = tuple(s for i, s in enumerate(value.shape.dims) if i not in dims)
        return self.builder.add(Op.REDUCE, [value, self.init], attrs={"dimensions": dims},
                                calls=self.reducer, shape=Shape.array(value.dtype, out))

    def reshape(self, value: Instruction, dims: tuple[int, ...]) -> Instruction:
        if value.shape.dims == dims:
            return value
        return self.builder.add(Op.RESHAPE, [value], shape=Shape.array(value.dtype, dims))

    def split(self, view: _Normalised) -> Instruction:
        """XLA's RewriteReduction on the normalised reduce; the result has view's kept dims."""
        value = self.reshape(self.source, view.dims)
        dims, reduced = list(view.dims), sorted(view.reduced)
        batched = len(reduced) > 1
        last = reduced[-1]
        if batched and dims[0] > BATCHED_REDUCTION_RACE_FREE_BOUND:
            inner = self.reduce(value, (last,))
            return self.reduce(inner, (0,))
        k = dims[last]
        n = sqrt_of_round_up_to_square(k)
        padded = k % n != 0
        if padded:
            config = tuple(PaddingDim(0, n * n - k if i == last else 0)
                           for i in range(len(dims)))
            shape = Shape.array(value.dtype, tuple(n * n if i == last else s
                                                   for i, s in enumerate(dims)))
            value = self.builder.add(Op.PAD, [value, self.init], attrs={"padding": config},
                                     shape=shape)
        reshaped = dims[:last] + [n if padded else k // n, n] + dims[last + 1:]
        value = self.reshape(value, tuple(reshaped))
        inner_dim = len(reshaped) - 1 if view.is_row else last
        inner_dims = (inner_dim, 0) if batched else (inner_dim,)
        inner = self.reduce(value, tuple(sorted(inner_dims)))
        outer_dim = inner.shape.rank - 1 if view.is_row else (last - 1 if batched else last)
        return self.reduce(inner, (outer_dim,))


@dataclass(frozen=True, slots=True)
class TreeReductionRewriter:
    """Splits reductions that are not race-free on XLA's 2022 GPU emitter into two."""

    name: ClassVar[str] = "tree-reduction-rewriter"

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def split(inst: Instruction, operands: tuple[Instruction, ...],
                  builder: RewriteBuilder) -> Instruction | None:
            if len(operands) != 2:
                return None
            groups = _contiguous(inst.operands[0].shape, inst.ints("dimensions"))
            if groups is None or is_race_free(groups):
                return None
            why = splittable(inst, builder.callee(inst.calls[0]))
            if why is not None:
                records.refused(builder.name, inst, why[0], f"cannot split {why[1]}")
                return None
            view = _normalise(groups)
            if not view.reduced:
                return None
            with builder.metadata_of(inst):
                splitter = _Splitter(inst, operands, builder)
                result = splitter.reshape(splitter.split(view), inst.shape.dims)
            kind = "row" if groups.is_row_reduction else "column"
            records.rewrote(builder.name, inst, "reduction-split",
                            f"%{inst.name}, a {kind} reduction of {groups.dimensions}, is "
                            "over the race-free tile; it is now two reductions",
                            kind=kind, reduced=groups.dimensions[2 if kind == "row" else 1],
                            batch=groups.dimensions[0])
            return result

        return rewrite_matching(module, lambda inst: inst.op is Op.REDUCE, split)
