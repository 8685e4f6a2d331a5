"""Nested loops inside a whole-loop kernel's lane code: a physics engine's substeps, a
solver's fixed iterations, stepped as loops rather than written out.

The analysis (analysis/parallel_loop.py) plans a nested while for the same lanes: the
elements its lanes hold (positions x lanes, as the outer state) and the uniform ones (its
counter, constants it carries), its trip count uniform. In each outer step, before the lane
loops that read its results, the block runs it:

    w<i>[position][lane] = initial value        (a lane loop over the block's lanes)
    u<j>[position]       = initial value        (once: uniform)
    while (1) {
        if (!condition(u)) break;               (uniform: the same trip count for every lane)
        nested loops inside this one, in body order
        large elements: position passes, lanes inside, into n<i>, copied after
        one lane loop: every small element's new positions, stored once all are computed
        the uniform elements' new values, committed after every lane's values
    }

and the outer step reads the loop's results from w<i> and u<j>. Each iteration's work is
vectorised over the block's lanes as an outer step is; the code is emitted once whatever the
trip count, so compile time does not grow with it. Elements the loop passes on unchanged were
read from their initial values before planning (fusion/beyond_xla/whole_loop.py); large
uniform ones the loop never changes (read-only) are read where their initial value lies.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable

from hlofuse.analysis.lane_classification import element_read
from hlofuse.analysis.parallel_loop import LoopPlan
from hlofuse.codegen import cir
from hlofuse.codegen.cir import Expr, Stmt
from hlofuse.codegen.emitter_types import UNROLL_ELEMENTS, Index, Value
from hlofuse.codegen.whole_loop_elements import (
    L,
    copy_whole,
    element_indices,
    lane_part_indices,
)
from hlofuse.codegen.whole_loop_lane_code import LOOPED_ELEMENTS, SIMD
from hlofuse.codegen.whole_loop_lanes import small_argument_math
from hlofuse.codegen.whole_loop_small_math import SmallArgumentLanes, SmallMath
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op


class NestedLoops(SmallArgumentLanes):
    """Runs a plan's nested loops in lane code, each where the step first needs it."""

    def _nested_loop(self, loop: Instruction, plan: LoopPlan, enclosing: Computation) -> None:
        """Runs `loop` (of computation `enclosing`) for the block's lanes and binds the reads
        of its result."""
        body, em = self.body, self.lane_em
        init = loop.operands[0].operands
        held = {i: self._nested_array(plan, i, plan.elements_per_lane(i), self.lanes)
                for i in plan.per_lane}
        shared = {i: self._nested_array(plan, i, max(1, plan.loop.shape.elements[i].num_elements))
                  for i in plan.uniform}
        body.emit(cir.Comment("a nested loop, stepped by the block's lanes together"))
        # With one lane a uniform element may start from the lane's values (the lane's state
        # is all there is): read where the lane index is declared.
        with body.cache_scope(), (self._lane_loop(SIMD) if self.lanes == 1
                                  else contextlib.nullcontext()):
            if self.lanes == 1:
                self._declare_lane_index()
            for i, name in shared.items():
                for q, index in self._element_positions(plan.loop.shape.elements[i].dims):
                    body.assign(cir.load(name, q), em.array_value(init[i], index))
        with body.cache_scope(), self._lane_loop(SIMD):
            self._declare_lane_index()
            for i, name in held.items():
                for q, index in self._held_positions(plan, i):
                    body.assign(cir.load(name, q, L), em.array_value(init[i], index))
        self._bind_nested_reads(plan, init, held, shared)
        # sin and cos of the lanes' state in their small-argument forms, as in the step: each
        # iteration checks its arguments first (a solver's iterations, a substep's angles).
        calls = small_argument_math(plan, UNROLL_ELEMENTS)
        math = SmallMath(plan, calls, body.fresh("large"), body.fresh("fm") + "_") if calls \
            else SmallMath(plan, calls)
        self._declare_small_argument_values(math)
        with body.while_(cir.Int(1)):
            with body.cache_scope():
                condition = (em.scalar(plan.condition.root) if plan.lane_condition is None
                             else self._any_lane(plan, plan.lane_condition))
                body.emit(cir.If(cir.Unary("!", condition), [cir.Break()]))
            for inner in plan.nested_loops():
                self._nested_loop(inner, plan.nested[id(inner)], plan.body)
            self._small_argument_check(math)
            self._nested_iteration(plan, held)
            self._commit_uniform(plan, shared)
        self._bind_nested_results(loop, plan, enclosing, held, shared)

    def _any_lane(self, plan: LoopPlan, predicate: Instruction) -> Expr:
        """Whether any lane of the block wants another iteration of a masked loop: its
        predicate reduced over the lanes' parts and the block's lanes (lanes past N hold
        the last lane's state, so they ask for no more than it)."""
        body, em = self.body, self.lane_em
        wanted = body.variable(cir.Special.INT, "any", cir.Int(0))
        dims = predicate.shape.dims
        d = plan.value_lane_dims.get(id(predicate), 0)
        with self._lane_loop(cir.Loop(simd=True, reduction=("|", wanted.name))):
            self._declare_lane_index()
            for index in lane_part_indices(dims, self.lane_index, d):
                lane_wants = cir.Cast(cir.Special.INT, em.array_value(predicate, index))
                body.assign(wanted, cir.Binary("|", wanted, lane_wants))
        return wanted

    def _nested_array(self, plan: LoopPlan, element: int, *dims: int) -> str:
        name = self.body.fresh("w")
        dtype = plan.loop.shape.elements[element].dtype
        self.body.declare(self._register_type(dtype), name, dims=dims)
        self.nested_arrays[name] = dims
        return name

    def _element_positions(self, dims: tuple[int, ...]) -> list[tuple[Expr, Index]]:
        return [(cir.Int(q), index) for q, index in enumerate(element_indices(dims))]

    def _held_positions(self, plan: LoopPlan, element: int) -> list[tuple[Expr, Index]]:
        dims = plan.loop.shape.elements[element].dims
        d = plan.lane_dims.get(element, 0)
        return [(cir.Int(q), index)
                for q, index in enumerate(lane_part_indices(dims, self.lane_index, d))]

    def _bind_nested_reads(self, plan: LoopPlan, init: tuple[Instruction, ...],
                           held: dict[int, str], shared: dict[int, str]) -> None:
        """The nested loop's reads of its state: each lane's part of a held element, a
        uniform element's local copy, a read-only element's initial value."""
        em = self.lane_em
        for comp in (plan.condition, plan.body):
            for inst in comp.instructions:
                element = element_read(inst)
                if element is None:
                    continue
                em.bindings[id(inst)] = (
                    self._element_reader(plan, element, held, shared)
                    or functools.partial(em.array_value, init[element]))

    def _element_reader(self, plan: LoopPlan, element: int, held: dict[int, str],
                        shared: dict[int, str]) -> Callable[[Index], Value] | None:
        """Reads of the nested loop's element where lane code keeps it: the lane's part of
        a held one, the local copy of a uniform one (None for a read-only one)."""
        shape = plan.loop.shape.elements[element]
        if element in held:
            return self._lane_reader(held[element], shape.dtype, shape.dims,
                                     plan.lane_dims.get(element, 0))
        if element in shared:
            return self._local_reader(self.lane_em, shape.dtype, shared[element], None)
        return None

    def _nested_iteration(self, plan: LoopPlan, held: dict[int, str]) -> None:
        """The held elements' new values: large ones into copies in position passes, then
        the small ones in one lane loop, stored once every value of the lane is computed
        (lane code reads the lane's own positions only), then the copies."""
        body, em = self.body, self.lane_em
        root = plan.body.root
        changed = [i for i in held if element_read(root.operands[i]) != i]
        large = [i for i in changed if plan.elements_per_lane(i) > LOOPED_ELEMENTS]
        copies: list[tuple[str, str]] = []
        for i in large:
            new = self._nested_array(plan, i, plan.elements_per_lane(i), self.lanes)
            copies.append((held[i], new))
            dims = plan.loop.shape.elements[i].dims
            d = plan.lane_dims.get(i, 0)
            q = body.fresh("q")
            with body.cache_scope(), body.loop(q, 0, plan.elements_per_lane(i),
                                               counter=cir.Special.INT):
                with self._lane_loop(SIMD):
                    self._declare_lane_index()
                    value = em.array_value(root.operands[i], self._index_at(dims, d, cir.Var(q)))
                    body.assign(cir.load(new, cir.Var(q), L), value)
        with body.cache_scope(), self._lane_loop(SIMD):
            self._declare_lane_index()
            stores: list[Stmt] = []
            for i in changed:
                if i in large:
                    continue
                for q_at, index in self._held_positions(plan, i):
                    stores.append(cir.Assign(cir.load(held[i], q_at, L),
                                             em.array_value(root.operands[i], index)))
            for stmt in stores:
                body.emit(stmt)
        for target, source in copies:
            body.emit(copy_whole(target, source))

    def _commit_uniform(self, plan: LoopPlan, shared: dict[int, str]) -> None:
        """The uniform elements' new values, all computed from the old ones before any is
        written (a counter and what it indexes)."""
        body, em = self.body, self.lane_em
        root = plan.body.root
        with body.cache_scope():
            commits: list[Stmt] = []
            for i, name in shared.items():
                value = root.operands[i]
                if element_read(value) == i:
                    continue
                shape = plan.loop.shape.elements[i]
                if shape.num_elements <= UNROLL_ELEMENTS:
                    for q, index in self._element_positions(shape.dims):
                        computed = body.let(self._register_type(shape.dtype),
                                            em.array_value(value, index))
                        commits.append(cir.Assign(cir.load(name, q), computed))
                    continue
                new = self._nested_array(plan, i, shape.num_elements)
                var = body.fresh("q")
                with body.loop(var, 0, shape.num_elements):
                    computed = em.array_value(value, Index(shape.dims, cir.Var(var), None, None))
                    body.assign(cir.load(new, cir.Var(var)), computed)
                commits.append(copy_whole(name, new))
            for stmt in commits:
                body.emit(stmt)

    def _bind_nested_results(self, loop: Instruction, plan: LoopPlan, enclosing: Computation,
                             held: dict[int, str], shared: dict[int, str]) -> None:
        """What the step reads of the loop's result: its held and uniform elements' arrays."""
        for inst in enclosing.instructions:
            if inst.op is not Op.GET_TUPLE_ELEMENT or inst.operands[0] is not loop:
                continue
            element = inst.attrs["index"]
            assert isinstance(element, int)
            reader = self._element_reader(plan, element, held, shared)
            if reader is not None:
                self.lane_em.bindings[id(inst)] = reader
