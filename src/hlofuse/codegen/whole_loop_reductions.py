"""Reductions over the lanes in a whole-loop kernel: the lane's part of a per-lane value
reduced to one value, the accumulated elements' per-lane sums, and the per-step reductions
across all lanes (analysis/step_reductions.py).

A per-step reduction (a scan's [T] output of the reward summed over the lanes) is computed
without any lane seeing another's values: in each step, lane code reduces the lane's part of
every reduced value into `sr<k>_<j>[lane]`; after the step's lane loops, the block combines
its valid lanes in lane order into its own partial for the position the step writes (a
partial-results array like the accumulators', `part<m>[block * count + position]`). The
uniform steps, which know the positions, mark them written (`sw<k>`). After the loop, each
written position combines the blocks' partials in block order and applies the element-wise
ops between the reductions and the written value; any other position keeps the element's
initial value. The result does not depend on the number of threads.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable

from hlofuse.analysis.parallel_loop import LoopPlan
from hlofuse.analysis.step_reductions import StepReduction
from hlofuse.codegen import cir
from hlofuse.codegen.cir import Binary, Expr
from hlofuse.codegen.elemental import ElementalEmitter
from hlofuse.codegen.emitter_types import Index, Value, strides_of
from hlofuse.codegen.whole_loop_elements import element_indices, lane_part_indices, named
from hlofuse.codegen.whole_loop_lane_code import LaneCode
from hlofuse.ir.hlo import Computation, Instruction

# Reductions in lane code over at most this many elements are written out, as the lane's
# accumulated sums are: a loop inside the loop over the lanes keeps it from vectorising.
LANE_UNROLLED_REDUCTION = 64
_L = cir.Var("l")
_B = cir.Var("b")


def step_reduction_names(plan: LoopPlan) -> list[str]:
    """The kernel's own names for the per-step reductions' arrays (reserved before any
    HLO-derived name is claimed)."""
    out = []
    for k, step in enumerate(plan.step_reductions):
        out.append(f"sw{k}")
        out += [f"sr{k}_{j}" for j in range(len(step.reduces))]
    return out + [f"part{m}" for m in range(len(plan.accumulators), _partial_count(plan))]


def _partial_count(plan: LoopPlan) -> int:
    return len(plan.accumulators) + sum(len(s.reduces) for s in plan.step_reductions)


def _partials(plan: LoopPlan) -> dict[tuple[int, int], str]:
    """The partial-results array of each (step reduction, reduce), numbered after the
    accumulators' (`part<k>`)."""
    out = {}
    m = len(plan.accumulators)
    for k, step in enumerate(plan.step_reductions):
        for j in range(len(step.reduces)):
            out[(k, j)] = f"part{m}"
            m += 1
    return out


class LaneReductions(LaneCode):
    """The reductions of the whole-loop emitter's lane code (whole_loop_blocks.py mixes it in,
    whole_loop.py calls its uniform and final parts)."""

    def _reduce_at_lane(self, reducer: Computation, operand: Instruction,
                        value_lane_dim: int | None, total: Expr,
                        fixed: dict[int, int] | None = None) -> Expr:
        """`total <op>` every element of the lane's part of `operand` (with the dimensions of
        `fixed` at those positions: one value of a reduction that keeps them)."""
        em, body = self.lane_em, self.body
        dims = operand.shape.dims
        fixed = fixed or {}
        loops = [(d, size) for d, size in enumerate(dims)
                 if d != value_lane_dim and d not in fixed and size > 1]
        if math.prod(size for _, size in loops) <= LANE_UNROLLED_REDUCTION:
            # written out in the loops' order: row-major over the lane's positions
            indices = element_indices(dims) if value_lane_dim is None else \
                lane_part_indices(dims, self.lane_index, value_lane_dim)
            for index in indices:
                multi = index.multi or ()
                if any(cir.folded_int(multi[d]) != at for d, at in fixed.items()):
                    continue
                value = em.array_value(operand, index)
                total = em.apply_reducer(reducer, [total], [value])[0]
            return total
        name = body.variable(self._register_type(operand.dtype), "acc", total)
        variables = {d: body.fresh("r") for d, _ in loops}
        multi = tuple(self.lane_index if d == value_lane_dim else
                      cir.Int(fixed[d]) if d in fixed else
                      (cir.Var(variables[d]) if d in variables else cir.Int(0))
                      for d in range(len(dims)))
        with contextlib.ExitStack() as stack:
            for d, size in loops:
                stack.enter_context(body.loop(variables[d], 0, size))
            value = em.array_value(operand, Index(dims, None, multi, None))
            body.assign(name, em.apply_reducer(reducer, [name], [value])[0])
        return name

    # --- per-step reductions ----------------------------------------------------------------

    def _step_count(self, step: StepReduction) -> int:
        return self.loop.shape.elements[step.element].num_elements

    def _declare_step_partials(self) -> None:
        """Each block's partial per written position, and which positions a step wrote."""
        body = self.body
        partials = _partials(self.plan)
        for k, step in enumerate(self.plan.step_reductions):
            count = self._step_count(step)
            body.declare(cir.Special.BYTE, f"sw{k}", dims=(count,))
            var = body.fresh("q")
            with body.loop(var, 0, count):
                body.assign(cir.load(f"sw{k}", cir.Var(var)), cir.Int(0))
            for j, reduce in enumerate(step.reduces):
                body.emit(cir.Allocate(self._register_type(reduce.reduce.dtype), partials[(k, j)],
                                       self.blocks * count * reduce.components))

    def _mark_step_positions(self) -> None:
        """In a uniform step, before its new uniform state is committed: the positions it
        writes."""
        for k, step in enumerate(self.plan.step_reductions):
            position = self._step_position(self.uniform_em, step)
            self.body.assign(cir.load(f"sw{k}", position), cir.Int(1))

    def _declare_step_lane_values(self) -> None:
        """The block's per-lane results of the step's reductions (`sr<k>_<j>[c][lane]` for a
        reduction giving several values)."""
        for k, step in enumerate(self.plan.step_reductions):
            for j, reduce in enumerate(step.reduces):
                dims = (self.lanes,) if reduce.components == 1 else \
                    (reduce.components, self.lanes)
                self.body.declare(self._register_type(reduce.reduce.dtype), f"sr{k}_{j}",
                                  dims=dims)

    def _reduce_step_at_lane(self) -> None:
        """In the lane loop: the lane's part of each reduced value, reduced (for a reduction
        that keeps dimensions, once per value it gives)."""
        for k, step in enumerate(self.plan.step_reductions):
            for j, reduce in enumerate(step.reduces):
                operand = reduce.operand
                value_lane_dim = self.plan.value_lane_dims.get(id(operand), 0) if self.n > 1 \
                    else None
                if reduce.components == 1:
                    start = self.lane_em.scalar(reduce.identity)
                    total = self._reduce_at_lane(reduce.reduce.calls[0], operand,
                                                 value_lane_dim, start)
                    self.body.assign(cir.load(f"sr{k}_{j}", _L), total)
                    continue
                reduced = set(reduce.reduce.ints("dimensions"))
                kept = [d for d in range(operand.shape.rank) if d not in reduced]
                positions = itertools.product(*(range(d) for d in reduce.reduce.shape.dims))
                for c, position in enumerate(positions):
                    start = self.lane_em.scalar(reduce.identity)
                    total = self._reduce_at_lane(reduce.reduce.calls[0], operand,
                                                 value_lane_dim, start, dict(zip(kept, position)))
                    self.body.assign(cir.load(f"sr{k}_{j}", cir.Int(c), _L), total)

    def _step_position(self, em: ElementalEmitter, step: StepReduction) -> Expr:
        """Where in its element the step writes (the start clamped as XLA clamps it)."""
        update = step.update
        dims = self.loop.shape.elements[step.element].dims
        starts = em.clamped_starts(update, step.starts, dims, step.value.shape.dims)
        return em.linear_of(Index(dims, None, tuple(starts), None))

    def _store_step_partials(self) -> None:
        """After the step's lane loops: the block's valid lanes combined in lane order."""
        body, em = self.body, self.lane_em
        partials = _partials(self.plan)
        for k, step in enumerate(self.plan.step_reductions):
            position = body.let(self.lang.index_type, self._step_position(em, step), "pos")
            for j, reduce in enumerate(step.reduces):
                register = self._register_type(reduce.reduce.dtype)
                row = Binary("+", Binary("*", _B, cir.Int(self._step_count(step))), position)
                for c in range(reduce.components):
                    partial = body.variable(register, "p", em.scalar(reduce.identity))
                    lane_value = cir.load(f"sr{k}_{j}", _L) if reduce.components == 1 else \
                        cir.load(f"sr{k}_{j}", cir.Int(c), _L)
                    with body.loop("l", 0, cir.Var("valid"), counter=cir.Special.INT):
                        combined = em.apply_reducer(reduce.reduce.calls[0], [partial],
                                                    [lane_value])[0]
                        body.assign(partial, combined)
                    at = row if reduce.components == 1 else Binary(
                        "+", Binary("*", row, cir.Int(reduce.components)), cir.Int(c))
                    body.assign(cir.load(partials[(k, j)], at), partial)

    def _finish_step_reductions(self) -> None:
        """Each written position: the blocks' partials in block order, then the ops between
        the reductions and the written value; the others keep the initial value."""
        body, em = self.body, self.uniform_em
        partials = _partials(self.plan)
        for k, step in enumerate(self.plan.step_reductions):
            if _writes_several(step):
                self._finish_slices(k, step, partials)
                continue
            i = step.element
            dtype = self.loop.shape.elements[i].dtype
            count = self._step_count(step)
            var = body.fresh("q")
            q = cir.Var(var)
            with body.loop(var, 0, count):
                with body.if_else(cir.load(f"sw{k}", q)) as (written, kept):
                    with written, body.cache_scope():
                        for j, reduce in enumerate(step.reduces):
                            register = self._register_type(reduce.reduce.dtype)
                            total = body.variable(register, "total", em.scalar(reduce.identity))
                            with body.loop("b", 0, self.blocks):
                                part = cir.load(partials[(k, j)],
                                                Binary("+", Binary("*", _B, cir.Int(count)), q))
                                body.assign(total, em.apply_reducer(reduce.reduce.calls[0],
                                                                    [total], [part])[0])
                            em.bindings[id(reduce.reduce)] = named(total.name)
                        value = em.array_value(step.value, Index(
                            step.value.shape.dims, cir.Int(0), None, None))
                        body.assign(cir.load(self.outputs[i], q),
                                    self.lang.to_storage(dtype, value))
                        for reduce in step.reduces:
                            del em.bindings[id(reduce.reduce)]
                    with kept, body.cache_scope():
                        initial = em.array_value(self.init[i], Index(
                            self.loop.shape.elements[i].dims, q, None, None))
                        body.assign(cir.load(self.outputs[i], q),
                                    self.lang.to_storage(dtype, initial))
            for j in range(len(step.reduces)):
                body.emit(cir.Release(partials[(k, j)]))

    def _finish_slices(self, k: int, step: StepReduction,
                       partials: dict[tuple[int, int], str]) -> None:
        """A per-step reduction writing several values a step: the initial value everywhere,
        then at each written slice (marked at its first position) the blocks' partials of each
        reduction's values in block order and the written values computed from them."""
        body, em = self.body, self.uniform_em
        i = step.element
        element = self.loop.shape.elements[i]
        count = self._step_count(step)
        var = body.fresh("q")
        q = cir.Var(var)
        with body.loop(var, 0, count), body.cache_scope():
            initial = em.array_value(self.init[i], Index(element.dims, q, None, None))
            body.assign(cir.load(self.outputs[i], q), self.lang.to_storage(element.dtype, initial))
        var = body.fresh("q")
        q = cir.Var(var)
        strides = strides_of(element.dims)
        with body.loop(var, 0, count), body.if_(cir.load(f"sw{k}", q)), body.cache_scope():
            for j, reduce in enumerate(step.reduces):
                register = self._register_type(reduce.reduce.dtype)
                totals = body.fresh("tot")
                body.declare(register, totals, dims=(reduce.components,))
                for c in range(reduce.components):
                    total = body.variable(register, "total", em.scalar(reduce.identity))
                    with body.loop("b", 0, self.blocks):
                        row = Binary("+", Binary("*", _B, cir.Int(count)), q)
                        at = Binary("+", Binary("*", row, cir.Int(reduce.components)), cir.Int(c))
                        part = cir.load(partials[(k, j)], at)
                        body.assign(total, em.apply_reducer(reduce.reduce.calls[0],
                                                            [total], [part])[0])
                    body.assign(cir.load(totals, cir.Int(c)), total)
                em.bindings[id(reduce.reduce)] = _reader(totals)
            for index in element_indices(step.value.shape.dims):
                offset = sum(int(cir.folded_int(m) or 0) * stride
                             for m, stride in zip(index.multi or (), strides))
                value = em.array_value(step.value, index)
                body.assign(cir.load(self.outputs[i], Binary("+", q, cir.Int(offset))),
                            self.lang.to_storage(element.dtype, value))
            for reduce in step.reduces:
                del em.bindings[id(reduce.reduce)]
        for j in range(len(step.reduces)):
            body.emit(cir.Release(partials[(k, j)]))


def _writes_several(step: StepReduction) -> bool:
    """Whether the step writes a slice of several values, or reduces keeping dimensions."""
    return step.value.shape.num_elements > 1 or any(r.components > 1 for r in step.reduces)


def _reader(array: str) -> Callable[[Index], Value]:
    """A binding reading a reduction's values from a local array, row-major by its index."""
    def read(index: Index) -> Value:
        if index.multi is None:
            assert index.linear is not None
            return cir.load(array, index.linear)
        return cir.load(array, cir.add(*[cir.mul(m, stride) for m, stride
                                        in zip(index.multi, strides_of(index.dims))]))
    return read
