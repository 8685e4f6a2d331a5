"""Lane code of deferred selects (codegen/whole_loop_lanes.py, `Deferred`): the masks the main
lane loop keeps, and the second lane loop that stores the costly operand only in the lanes
whose select picks it."""

from __future__ import annotations

from hlofuse.codegen import cir
from hlofuse.codegen.cir import Binary, Expr
from hlofuse.codegen.cir_walks import longest_straight_run
from hlofuse.codegen.emitter_types import Index, expr_of
from hlofuse.codegen.whole_loop_elements import L
from hlofuse.codegen.whole_loop_lane_code import SIMD, LaneCode
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction

# Lanes per simd loop computing the deferred operands of the listed lanes (one 64-byte vector
# of 32-bit values).
DEFERRED_VECTOR = 16
# Statements one after another that the listed lanes' operands may take written out position by
# position; past it, each element's positions are a loop around the lanes' vector loop.
# Written out, a state of many positions each drawn anew on reset (a chain's masses, a
# swarm's particles) made a block of thousands of statements, which gcc's scheduler takes
# the square of that length to order (targets/c/language.py, `scheduled_block_limit`), so
# the whole kernel went unscheduled.
DEFERRED_WRITTEN_OUT = 1000


class DeferredLanes(LaneCode):
    """The deferred selects' masks and lane loops."""

    def _declare_masks(self) -> dict[tuple[object, ...], str]:
        """One mask array per predicate element of the deferred selects, declared per step."""
        masks: dict[tuple[object, ...], str] = {}
        for i, deferred in self.deferred.items():
            for index in self._lane_indices(i):
                key = deferred.mask_key(index)
                if key not in masks:
                    masks[key] = f"m{len(masks)}"
                    # 32-bit, as the floats stored beside them: a byte array would make gcc
                    # vectorise the whole loop at 16 bytes per vector
                    self.body.declare(DType.S32, masks[key], dims=(self.lanes,))
        return masks

    def _deferred_lane_loop(self, masks: dict[tuple[object, ...], str]) -> None:
        """The deferred operands, stored only where their select picks them. With several lanes
        the values are computed outside the `if`: gcc then vectorises the stores as masked
        stores and runs their computation only when some lane of the block stores (its
        masked-store sinking); computed inside, if-conversion would refuse the operations that
        may trap. One lane branches once per mask around the values it stores."""
        if not self.deferred:
            return
        body, em = self.body, self.lane_em
        groups: dict[Expr, list[tuple[int, int, Instruction, Index]]] = {}
        for i, deferred in self.deferred.items():
            if self._looped(i):
                # one entry for the whole element, its positions looped over (q = -1)
                index = self._lane_index_at(i, cir.Int(0))
                mask: Expr = cir.load(masks[deferred.mask_key(index)], L)
                test = mask if deferred.when else cir.Unary("!", mask)
                groups.setdefault(test, []).append((i, -1, deferred.operand, index))
                continue
            for q, index in enumerate(self._lane_indices(i)):
                mask = cir.load(masks[deferred.mask_key(index)], L)
                test = mask if deferred.when else cir.Unary("!", mask)
                groups.setdefault(test, []).append((i, q, deferred.operand, index))
        looped = {test: [x for x in stores if x[1] < 0] for test, stores in groups.items()}
        groups = {test: [x for x in stores if x[1] >= 0] for test, stores in groups.items()}
        looped = {test: stores for test, stores in looped.items() if stores}
        groups = {test: stores for test, stores in groups.items() if stores}
        if looped:
            self._deferred_looped(looped)
        if not groups:
            return
        if self.lanes > 1:
            self._deferred_blend(groups)
            return
        with self._lane_loop(cir.Loop(simd=True)):
            self._declare_lane_index()
            for test, stores in groups.items():
                with body.if_(test):
                    for i, q, operand, index in stores:
                        body.assign(cir.load(f"s{i}", cir.Int(q), L),
                                    em.array_value(operand, index))

    def _deferred_looped(self, groups: dict[Expr, list[tuple[int, int, Instruction, Index]]]
                         ) -> None:
        """Looped elements' deferred operands, lane by lane and only in the lanes that pick
        them: their position loops keep the lane loop from vectorising, so a blend would
        compute every lane of the block for the few that reset."""
        body, em = self.body, self.lane_em
        with self._lane_loop(cir.SEQUENTIAL):
            self._declare_lane_index()
            for test, stores in groups.items():
                with body.if_(test):
                    for i, _, operand, _ in stores:
                        with self._positions(i, SIMD) as (qv, at):
                            body.assign(cir.load(f"s{i}", qv, L), em.array_value(operand, at))

    def _deferred_blend(self, groups: dict[Expr, list[tuple[int, int, Instruction, Index]]]
                        ) -> None:
        """Several lanes: the lanes of the block that pick some deferred operand are listed
        first (`pick`, in lane order), and simd loops of DEFERRED_VECTOR lanes compute the
        operands for the listed lanes only: stored where one predicate decides them all,
        blended in where picked when several do (a select per element, which vectorises
        whatever the loop holds; masked stores after much computation make gcc's
        if-conversion give up). The vector loop stores the operands to contiguous arrays and a
        plain loop copies them to the listed lanes: stored to the lanes directly, the
        operands' loop would scatter, which AVX2 has no instruction for, and ran scalar. The
        last vector holds the lanes left. In a step where a few lanes of the block
        reset, that is one vector of work instead of the block's; a vector loop first tells
        whether any lane picks, so most steps skip the listing."""
        body = self.body
        any_test: Expr | None = None  # some predicate picks the lane
        for test in groups:
            any_test = test if any_test is None else Binary("|", any_test, test)
        assert any_test is not None
        pending = body.declare(cir.Special.INT, "pending", cir.Int(0))
        with self._lane_loop(cir.Loop(reduction=("|", "pending"))):
            body.assign(pending, any_test, "|=")
        with body.if_(pending):
            self._deferred_listed(groups, any_test)

    def _deferred_listed(self, groups: dict[Expr, list[tuple[int, int, Instruction, Index]]],
                         any_test: Expr) -> None:
        body = self.body
        picked = body.declare(cir.Special.INT, "picked", cir.Int(0))
        body.declare(DType.S32, "pick", dims=(self.lanes,))
        with body.loop("l", 0, self.lanes, counter=cir.Special.INT):
            body.assign(cir.load("pick", picked), L)
            body.assign(picked, cir.Binary("!=", any_test, cir.Int(0)), "+=")
        stores = [(test, i, q, operand, index) for test, group in groups.items()
                  for i, q, operand, index in group]
        looped = self._position_loops(stores)
        mark = len(body.scope.stmts)
        self._listed_written_out(stores, picked, blended=len(groups) > 1)
        if looped and longest_straight_run(body.scope.stmts[mark:]) > DEFERRED_WRITTEN_OUT:
            del body.scope.stmts[mark:]
            self._listed_looped(stores, looped, picked, blended=len(groups) > 1)

    @staticmethod
    def _position_loops(stores: list[tuple[Expr, int, int, Instruction, Index]]
                        ) -> dict[int, tuple[Expr, Instruction]]:
        """The elements whose positions a loop can compute: several positions, one predicate
        for all of them (the test and the operand a loop's body computes at its position)."""
        by_element: dict[int, list[tuple[Expr, Instruction]]] = {}
        for test, i, _, operand, _ in stores:
            by_element.setdefault(i, []).append((test, operand))
        return {i: entries[0] for i, entries in by_element.items()
                if len(entries) > 1 and len({test for test, _ in entries}) == 1}

    def _listed_written_out(self, stores: list[tuple[Expr, int, int, Instruction, Index]],
                            picked: Expr, blended: bool) -> None:
        body, em = self.body, self.lane_em
        width = min(DEFERRED_VECTOR, self.lanes)
        values = [body.fresh("dv") for _ in stores]
        for name, (_, i, _, _, _) in zip(values, stores):
            body.declare(self._register_type(self._shape(i).dtype), name, dims=(width,))
        first = body.fresh("k")
        left = Binary("-", picked, cir.Var(first))
        count = cir.Select(Binary("<", left, cir.Int(width)), left, cir.Int(width))
        with body.loop(first, 0, picked, counter=cir.Special.INT, step=width):
            # The operands of the listed lanes into contiguous arrays (a vector loop: no
            # scatter), then stored lane by lane where each is picked.
            offset = body.fresh("k")
            with body.cache_scope(), body.loop(offset, 0, count, SIMD, counter=cir.Special.INT):
                self._declare_listed_lane(first, offset)
                computed = [expr_of(em.array_value(operand, index))
                            for _, _, _, operand, index in stores]
                for name, value in zip(values, computed):
                    body.assign(cir.load(name, cir.Var(offset)), value)
            offset = body.fresh("k")
            # With one predicate every listed lane picks: stores, no blends.
            with body.cache_scope(), body.loop(offset, 0, count, counter=cir.Special.INT):
                self._declare_listed_lane(first, offset, with_index=False)
                for name, (test, i, q, _, _) in zip(values, stores):
                    target = cir.load(f"s{i}", cir.Int(q), L)
                    value = cir.load(name, cir.Var(offset))
                    body.assign(target, cir.Select(test, value, target) if blended else value)

    def _listed_looped(self, stores: list[tuple[Expr, int, int, Instruction, Index]],
                       looped: dict[int, tuple[Expr, Instruction]], picked: Expr,
                       blended: bool) -> None:
        """The elements of `looped` lane by lane, each a vector loop over its positions with
        what they share (a lane's own key) computed once before it (`_deferred_looped`); the
        other elements' positions written out for the listed lanes as before."""
        groups: dict[Expr, list[tuple[int, int, Instruction, Index]]] = {}
        for i, (test, operand) in looped.items():
            groups.setdefault(test, []).append(
                (i, -1, operand, self._lane_index_at(i, cir.Int(0))))
        self._deferred_looped(groups)
        rest = [store for store in stores if store[1] not in looped]
        if rest:
            self._listed_written_out(rest, picked, blended)

    def _declare_listed_lane(self, first: str, offset: str, with_index: bool = True) -> None:
        """`l`, the listed lane, and (for code computing values) its lane index `e`; the copy
        loop reads the lane's masks only."""
        self.body.declare(cir.Special.INT, "l", cir.load(
            "pick", Binary("+", cir.Var(first), cir.Var(offset))), const=True)
        if with_index:
            self._declare_lane_index()
