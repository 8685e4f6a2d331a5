"""Lane code of streamed elements: a loop element the step writes one slice of (a
dynamic-update-slice at the step's index, `lax.scan`'s stacked outputs) goes straight to its
output, the lane's part only; a narrow one waits in the block's staging array and is stored in
a loop of its own."""

from __future__ import annotations

import functools
import math

from hlofuse.analysis.parallel_loop import Streamed
from hlofuse.codegen import cir
from hlofuse.codegen.cir import Binary, Expr, Stmt
from hlofuse.codegen.emitter_types import Index, expr_of
from hlofuse.codegen.whole_loop_elements import L, lane_part_indices
from hlofuse.codegen.whole_loop_lane_code import LaneCode
from hlofuse.codegen.whole_loop_lanes import staged_storage
from hlofuse.ir.dtypes import DType


class StreamedLanes(LaneCode):
    """The streamed elements' initial values, per-step stores and staging."""

    def _initial_streamed(self) -> None:
        """A streamed element's output starts as its initial value (the steps overwrite
        slices of it); the lane copies its own part (lanes past N copy the last lane's)."""
        for streamed in self.plan.streamed:
            i = streamed.element
            shape = self._shape(i)
            init = self.init[i]
            dims = shape.dims
            rest = dims[:streamed.lane_dim] + dims[streamed.lane_dim + 1:]
            var = self.body.fresh("q")
            storage = functools.partial(self.lang.to_storage, shape.dtype)
            with self.body.loop(var, 0, math.prod(rest)):
                q = cir.Var(var)
                multi = list(self.uniform_em.multi_of(Index(rest, q, None, None)))
                multi.insert(streamed.lane_dim, self.lane_index)
                value = self.uniform_em.array_value(init, Index(dims, None, tuple(multi), None))
                self.body.assign(cir.load(self.outputs[i], self._position(i, q)),
                                 storage(expr_of(value)))

    def _streamed_stores(self) -> list[Stmt]:
        """The step's slice of each streamed element, stored straight to the output at the
        dynamic-update-slice's start (clamped as XLA clamps it), the lane's part only; a
        narrow one (`_staged`) into its staging array `w<k>[position][lane]` instead."""
        em = self.lane_em
        out: list[Stmt] = []
        for k, streamed in enumerate(self.plan.streamed):
            written = streamed.update.operands[1]
            staged = self._staged(streamed) is not None
            for q, (index, position) in enumerate(self._streamed_positions(streamed)):
                value = expr_of(em.array_value(written, index))
                if staged:
                    out.append(cir.Assign(cir.load(f"w{k}", cir.Int(q), L), value))
                    continue
                out.append(self._streamed_store(streamed, position, value))
        return out

    def _streamed_positions(self, streamed: Streamed) -> list[tuple[Index, Expr]]:
        """(index in the update, position in the whole output) of each value of the lane's
        part of the step's slice."""
        em = self.lane_em
        update = streamed.update
        dims = self._shape(streamed.element).dims
        written = update.operands[1]
        starts = em.clamped_starts(update, update.operands[2:], dims, written.shape.dims)
        out = []
        for index in lane_part_indices(written.shape.dims, self.lane_index, streamed.lane_dim):
            multi = index.multi
            assert multi is not None
            # The lane dimension's start clamps to 0: the slice covers every lane.
            at = tuple(m if d == streamed.lane_dim else Binary("+", starts[d], m)
                       for d, m in enumerate(multi))
            out.append((index, em.linear_of(Index(dims, None, at, None))))
        return out

    def _streamed_store(self, streamed: Streamed, position: Expr, value: Expr) -> Stmt:
        dtype = self._shape(streamed.element).dtype
        return cir.Assign(cir.load(self.outputs[streamed.element], position),
                          self.lang.to_storage(dtype, value))

    def _staged(self, streamed: Streamed) -> DType | None:
        """The type a streamed element's values wait in between the lane loop and the
        output, None when lane code stores them itself: a store of fewer than 32 bits per
        value would set gcc's lanes per vector for the whole lane loop
        (codegen/whole_loop_lanes.py, `lane_language`)."""
        if self.lanes == 1:
            return None
        return staged_storage(self.lang, self._shape(streamed.element).dtype)

    def _declare_staging(self) -> None:
        for k, streamed in enumerate(self.plan.streamed):
            ctype = self._staged(streamed)
            if ctype is None:
                continue
            positions = streamed.update.operands[1].shape.num_elements // self.n
            self.body.declare(ctype, f"w{k}", dims=(max(1, positions), self.lanes))

    def _staged_streamed_stores(self) -> None:
        """The staged streamed values of the step, from the staging arrays to the output, in
        a loop of their own (each lane's positions as lane code computes them)."""
        staged = [(k, s) for k, s in enumerate(self.plan.streamed) if self._staged(s)]
        if not staged:
            return
        with self._lane_loop(cir.SEQUENTIAL):
            self._declare_lane_index()
            for k, streamed in staged:
                for q, (_, position) in enumerate(self._streamed_positions(streamed)):
                    self.body.emit(self._streamed_store(
                        streamed, position, cir.load(f"w{k}", cir.Int(q), L)))
