"""The loops that compute the values a whole-loop step keeps in the block's scratch.

The values (`whole_loop_scratch_values.py`) are computed once per step into the block's
scratch `v<k>[position][lane]`, in a loop over their positions with the lanes inside (the lane
loop vectorises), before the step's lane loops, which then read them from there. Each depends
on the state the step starts with only, as every value the lane loops compute does.

A product of such a value, or of the loop state (more than LOOPED_MIN_CONTRACTING
contracting positions), with a value the lanes share (the layer's weights) is itself
computed into scratch as a loop nest: for
each pass of positions, for the lanes (vectorised), a loop over the contracting positions
that reads the lane's value once and adds it, times each position's weight, to that
position's sum. The sums keep their order (from +0, ascending, one fused multiply-add per
position, as `dot_elemental`), so results are those of the written-out form; the loop keeps
the weights in memory rather than hoisted into registers that spill, about 3x faster on a
64 x 64 layer. A pass computes a register tile (`product_tiles.py`): some positions for each
of some parts of the block, the other parts' lanes read at an offset in the same iteration,
so each sum is an independent chain (an output layer of one position: 7.7 -> 2.7 ns a lane
on Zen 2; a 64 x 64 layer 81 -> 101 GFLOP/s).
"""

from __future__ import annotations

from collections.abc import Mapping

from hlofuse.analysis.lane_classification import element_read
from hlofuse.codegen import cir
from hlofuse.codegen.cir import Binary, Expr
from hlofuse.codegen.dot_elemental import operand_index
from hlofuse.codegen.emitter_types import UNROLL_ELEMENTS, Index
from hlofuse.codegen.product_tiles import ProductTile, best_tile
from hlofuse.codegen.whole_loop_elements import L
from hlofuse.codegen.whole_loop_lane_code import SIMD, LaneCode
from hlofuse.codegen.whole_loop_scratch_values import (
    behind_rearranging,
    looped_product,
    positions_per_lane,
)
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op

# Positions of a value (not a product) computed together in one pass over the lanes.
POSITIONS_TOGETHER = 8
# Lanes a part of the block keeps where a product's pass computes several parts: two vectors
# of 8 (AVX2) or one of 16 (AVX-512).
MIN_PART_LANES = 16


class MaterializedLanes(LaneCode):
    """The block's scratch of values read at many positions, and the loops computing it."""

    materialized: list[Instruction]
    value_dims: Mapping[int, int]  # by id(), each per-lane value's lane dimension

    def _declare_materialized(self) -> None:
        for k, value in enumerate(self.materialized):
            # Every position is written in every step before lane code reads one.
            self.body.declare(self._register_type(value.dtype), f"v{k}",
                              dims=(positions_per_lane(self.plan, value, self.value_dims),
                                    self.lanes),
                              speculable=True)

    def _materialize(self, k: int, value: Instruction) -> None:
        """The value into its scratch v<k>, a few positions per pass with the lanes inside;
        later reads (the next value's, the lane loops') read the scratch."""
        body = self.body
        dims = value.shape.dims
        dim = self.value_dims[id(value)]
        positions = positions_per_lane(self.plan, value, self.value_dims)
        # A few positions are written out: in a loop over passes, each read of a small array
        # at the pass's position would be a select over its positions.
        written_out = positions <= UNROLL_ELEMENTS
        tile = self._product_tile(value, positions)
        if tile is None:
            together = positions if written_out else \
                next(u for u in (POSITIONS_TOGETHER, 4, 2, 1) if positions % u == 0)
            tile = ProductTile(together, 1)
        looped = 0 if written_out else positions - positions % tile.positions
        if looped:
            q = body.fresh("q")
            with body.cache_scope(), body.loop(q, 0, looped, counter=cir.Special.INT,
                                               step=tile.positions):
                self._materialize_pass(k, value, [
                    cir.Var(q) if u == 0 else Binary("+", cir.Var(q), cir.Int(u))
                    for u in range(tile.positions)], tile.parts)
        # What the loop leaves (or every position, written out): passes at known positions.
        for first in range(looped, positions, tile.positions):
            with body.cache_scope(), body.braces():
                self._materialize_pass(k, value, [
                    cir.Int(u) for u in range(first, min(positions, first + tile.positions))],
                    tile.parts)
        self.lane_em.bindings[id(value)] = self._lane_reader(f"v{k}", value.dtype, dims, dim)

    def _materialize_pass(self, k: int, value: Instruction, at: list[Expr],
                          groups: int) -> None:
        """One pass: the value at positions `at` for every lane, `groups` parts of the block
        an iteration."""
        body, em = self.body, self.lane_em
        dims = value.shape.dims
        dim = self.value_dims[id(value)]
        span = self.lanes // groups
        with self._lane_loop(SIMD) if groups == 1 else \
                body.loop("l", 0, span, SIMD, counter=cir.Special.INT):
            if groups == 1:
                self._declare_lane_index()
            indices = [self._index_at(dims, dim, position) for position in at]
            if value.op is Op.DOT and looped_product(self.plan, value):
                grouped = self._looped_sums(value, indices, groups)
            else:
                grouped = [[em.array_value(value, index) for index in indices]]
            for g, values in enumerate(grouped):
                lane = L if g == 0 else Binary("+", L, cir.Int(g * span))
                for position, computed in zip(at, values):
                    body.assign(cir.load(f"v{k}", position, lane), computed)

    def _product_tile(self, value: Instruction, positions: int) -> ProductTile | None:
        """The register tile of a looped product whose per-lane operand is a materialised
        value or the block's state (`_lane_reader`'s reads, which take a part's offset): the
        one of `best_tile` over the parts the block splits into, each keeping MIN_PART_LANES
        lanes to vectorise over."""
        if value.op is not Op.DOT or not looped_product(self.plan, value):
            return None
        operand = behind_rearranging(
            next(o for o in value.operands if id(o) in self.plan.value_lane_dims))
        if not any(m is operand for m in self.materialized) and \
                element_read(operand) not in self.plan.per_lane:
            return None
        most_parts = 1
        while self.lanes % (most_parts * 2) == 0 and \
                self.lanes // (most_parts * 2) >= MIN_PART_LANES:
            most_parts *= 2
        return best_tile(positions, most_parts)

    def _looped_sums(self, dot: Instruction, outputs: list[Index],
                     groups: int = 1) -> list[list[Expr]]:
        """The product at each of `outputs` (the pass's positions of one lane), for each of
        `groups` parts of the block: one sum per position and part, updated in one loop over
        the contracting positions."""
        body, em = self.body, self.lane_em
        lhs, rhs = dot.operands
        lhs_contracting = dot.ints("lhs_contracting_dims")
        rhs_contracting = dot.ints("rhs_contracting_dims")
        n_lhs_free = lhs.shape.rank - 1
        register = self._register_type(dot.dtype)
        fma = self.lang.math("fma", dot.dtype)
        span = self.lanes // groups
        sums = [[body.variable(register, "sum", self.lang.literal(dot.dtype, 0))
                 for _ in outputs] for _ in range(groups)]
        c = body.fresh("c")
        with body.loop(c, 0, lhs.shape.dims[lhs_contracting[0]], counter=cir.Special.INT):
            for g in range(groups):
                # Each part's reads are its own (the same elements at another lane).
                with body.cache_scope():
                    self.lane_offset = g * span
                    try:
                        for total, out in zip(sums[g], outputs):
                            multi = em.multi_of(out)
                            a = em.array_value(lhs, operand_index(
                                lhs.shape.dims, (), lhs_contracting, (),
                                tuple(multi[:n_lhs_free]), (cir.Var(c),)))
                            b = em.array_value(rhs, operand_index(
                                rhs.shape.dims, (), rhs_contracting, (),
                                tuple(multi[n_lhs_free:]), (cir.Var(c),)))
                            body.assign(total, cir.call(fma, a, b, total))
                    finally:
                        self.lane_offset = 0
        return [list(part) for part in sums]
