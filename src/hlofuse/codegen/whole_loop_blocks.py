"""Phase 2 of a whole-loop kernel: blocks of lanes, each stepping in simd lane loops.

Lane blocks (`#pragma omp parallel for` over blocks of W lanes) load the block's state
into local arrays `s[value][lane]` (from the inputs in the first chunk, from the outputs
after), then for every step of the chunk run a simd loop over the lanes that computes each new
per-lane value through the elemental emitter (state read at the lane, lane inputs from
the step's table row, the lane index where an iota asks for it) and writes it back once
all are computed; accumulated sums collect per lane. Two kinds of work run apart
(codegen/whole_loop_lanes.py): a select's costly operand that does not depend on the state
(CartPole's reset draws) in a second lane loop, only for the lanes it is picked in; sin and
cos of the state with the math library's small-argument forms, the full functions only in a
step where some lane needs them. An element of more than LOOPED_ELEMENTS positions per lane
lives in the lane's scratch area: its new values are computed in a loop over its positions
into `n<i>[position][lane]` (what the positions share moved in front: codegen/licm.py) and
copied back once every value of the step is computed. A streamed output narrower than 32 bits
(the step's dones) waits in the block's staging array `w<k>[position][lane]` and reaches memory
in a loop after the lane loops: a byte store in the lane loop would set gcc's lanes per vector
for all of it (whole_loop_lanes.py, `lane_language`). One lane (N = 1) is scalar code: plain
blocks instead of loops, branches instead of selects. Lanes past N (the last block) run on
the last lane's state and are not stored. At the end of the chunk the block stores its state
and adds its lanes' partial sums to its own slot.
"""

from __future__ import annotations

import functools

from hlofuse.analysis.loop_accumulators import Accumulator
from hlofuse.codegen import cir
from hlofuse.codegen.cir import Binary, Expr, Stmt
from hlofuse.codegen.elemental import ElementalEmitter
from hlofuse.codegen.emitter_types import SCALAR, Index, Value
from hlofuse.codegen.whole_loop_deferred import DeferredLanes
from hlofuse.codegen.whole_loop_elements import (
    L,
    copy,
    copy_whole,
    element_of,
    store_at,
    store_through,
)
from hlofuse.codegen.whole_loop_lane_code import SIMD, B
from hlofuse.codegen.whole_loop_materialized import MaterializedLanes
from hlofuse.codegen.whole_loop_nested import NestedLoops
from hlofuse.codegen.whole_loop_reads import LaneReads
from hlofuse.codegen.whole_loop_reductions import LaneReductions
from hlofuse.codegen.whole_loop_scratch import ScratchLanes
from hlofuse.codegen.whole_loop_streamed import StreamedLanes
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op

# Lane-steps below which a chunk runs on the calling thread alone (about a millisecond).
PARALLEL_MIN_ENV_STEPS = 1 << 17


class BlockEmission(LaneReads, DeferredLanes, StreamedLanes, ScratchLanes, LaneReductions,
                    MaterializedLanes, NestedLoops):
    """The per-lane half of the whole-loop emitter (codegen/whole_loop.py): the blocks, their
    state's loads and stores, and each step's lane loops."""

    def _blocks(self) -> None:
        body = self.body
        if self.blocks == 1:
            with body.loop("b", 0, 1):
                self._block()
            return
        # Starting a thread team costs more than a small chunk's work, and far more when the
        # machine is busy and a thread waits for a core at the barrier.
        work = Binary(">=", Binary("*", cir.Var("count"), cir.Int(self.n)),
                      cir.Int(PARALLEL_MIN_ENV_STEPS))
        region = cir.ParallelRegion([], work, extent=self.blocks)
        with body.nested(region, region.body):
            with body.loop("b", 0, self.blocks, cir.Loop(parallel=True)):
                self._block()

    def _block(self) -> None:
        body, lanes = self.body, self.lanes
        body.declare(cir.Special.INT, "valid", self._valid_lanes(), const=True)
        body.emit(cir.ExprStmt(cir.Cast(cir.Special.VOID, cir.Var("valid"))))
        for i in self.plan.per_lane:
            # Every position of the lanes' state holds its value for the whole step.
            body.declare(self._register_type(self._shape(i).dtype), f"s{i}",
                         dims=(self.plan.elements_per_lane(i), lanes), speculable=True)
            self.state_arrays[f"s{i}"] = i
            if self._looped(i):  # the step's new values, until every value is computed
                body.declare(self._register_type(self._shape(i).dtype), f"n{i}",
                             dims=(self.plan.elements_per_lane(i), lanes))
            if self.speculative:  # the state the step started with, should it run again
                body.declare(self._register_type(self._shape(i).dtype), f"o{i}",
                             dims=(self.plan.elements_per_lane(i), lanes))
        self._declare_staging()
        self._declare_materialized()
        self._load_block()
        for k, acc in enumerate(self.plan.accumulators):
            identity = self.lane_em.scalar(acc.identity)
            body.declare(self._register_type(acc.combines[-1].dtype), f"acc{k}", dims=(lanes,))
            if self.speculative:
                body.declare(self._register_type(acc.combines[-1].dtype), f"oacc{k}", dims=(lanes,))
            with body.loop("l", 0, lanes, counter=cir.Special.INT):
                body.assign(cir.load(f"acc{k}", L), identity)
        self._declare_step_lane_values()
        self._declare_small_argument_values()
        with body.loop("t", 0, cir.Var("count")):
            self._lane_step()
        self._store_block()

    def _load_block(self) -> None:
        """The block's state: the initial values in the first chunk, the outputs after."""
        body = self.body
        with body.if_else(Binary("==", cir.Var("chunk"), cir.Int(0))) as (first, later):
            with first, body.loop("l", 0, self.lanes, counter=cir.Special.INT):
                self._declare_lane_index()
                for i in self.plan.per_lane:
                    if self._looped(i):
                        with self._positions(i) as (q, index):
                            value = self.uniform_em.array_value(self.init[i], index)
                            body.assign(cir.load(f"s{i}", q, L), value)
                        continue
                    for k, index in enumerate(self._lane_indices(i)):
                        value = self.uniform_em.array_value(self.init[i], index)
                        body.assign(cir.load(f"s{i}", cir.Int(k), L), value)
                self._initial_streamed()
            with later, body.loop("l", 0, self.lanes, counter=cir.Special.INT):
                self._declare_lane_index()
                for i in self.plan.per_lane:
                    shape = self._shape(i)
                    per_lane = self.plan.elements_per_lane(i)
                    loaded = functools.partial(self._load_element, shape.dtype, self.outputs[i],
                                               i)
                    self._copy_loop(per_lane, copy(store_at(f"s{i}", lane=True), loaded))

    def _load_element(self, dtype: DType, pointer: str, element: int, q: Expr) -> Expr:
        return self.lang.load(dtype, cir.Var(pointer), self._position(element, q))

    def _lane_step(self) -> None:
        self._lane_bindings()
        self._small_argument_check()
        self._step_values()
        masks = self._declare_masks()
        if self.speculative:
            self._speculative_lane_loops(masks)
        else:
            self._main_lane_loop(masks)
        self._deferred_lane_loop(masks)
        self._staged_streamed_stores()
        self._store_step_partials()

    def _step_values(self) -> None:
        """In body order, what the step's lane loops read: the values computed once into
        scratch and the nested loops' results."""
        scratch = {id(value): k for k, value in enumerate(self.materialized)}
        for inst in self.plan.body.instructions:
            if id(inst) in self.plan.nested:
                self._nested_loop(inst, self.plan.nested[id(inst)], self.plan.body)
            elif id(inst) in scratch:
                self._materialize(scratch[id(inst)], inst)

    def _speculative_lane_loops(self, masks: dict[tuple[object, ...], str]) -> None:
        """The step with the speculative math in its small forms, each call also noting
        whether its argument was beyond the form's limit; in a step where one was (for
        some lane of the block), the block's state and sums go back to where the step
        started and the step runs again with the full functions. Stores to the outputs are
        made again with the same or the corrected values; nothing else is kept."""
        body = self.body
        saved = [(f"o{i}", f"s{i}") for i in self.plan.per_lane]
        saved += [(f"oacc{k}", f"acc{k}") for k in range(len(self.plan.accumulators))]
        for copy_to, copy_from in saved:
            body.emit(copy_whole(copy_to, copy_from))
        beyond = body.declare(cir.Special.INT, "beyond", cir.Int(0))
        for inst, form in self.speculative:
            self.lane_em.bindings[id(inst)] = self._speculative_reader(inst, form, beyond)
        self._main_lane_loop(masks, cir.Loop(reduction=("|", beyond.name)))
        for inst, _ in self.speculative:
            del self.lane_em.bindings[id(inst)]
        with body.if_(beyond):
            for copy_from, copy_to in saved:
                body.emit(copy_whole(copy_to, copy_from))
            self._main_lane_loop(masks)

    def _main_lane_loop(self, masks: dict[tuple[object, ...], str],
                        how: cir.Loop = SIMD) -> None:
        """Every new per-lane value (a deferred select's other operand in its place, and
        the select's predicate kept in a mask) and the accumulators."""
        body, em = self.body, self.lane_em
        with self._lane_loop(how):
            self._declare_lane_index()
            stores: list[Stmt] = []
            stored: set[str] = set()
            looped = [i for i in self.plan.per_lane if self._looped(i)]
            for i in self.plan.per_lane:
                deferred = self.deferred.get(i)
                value = self.plan.body.root.operands[i] if deferred is None else deferred.kept
                if i in looped:
                    if deferred is not None:
                        mask = masks[deferred.mask_key(self._lane_index_at(i, cir.Int(0)))]
                        if mask not in stored:
                            stored.add(mask)
                            predicate = em.array_value(deferred.predicate,
                                                       deferred.predicate_index(
                                                           self._lane_index_at(i, cir.Int(0))))
                            stores.append(cir.Assign(cir.load(mask, L), predicate))
                    continue
                for q, index in enumerate(self._lane_indices(i)):
                    stores.append(cir.Assign(cir.load(f"s{i}", cir.Int(q), L),
                                             em.array_value(value, index)))
                    if deferred is None:
                        continue
                    mask = masks[deferred.mask_key(index)]
                    if mask not in stored:
                        stored.add(mask)
                        predicate = em.array_value(deferred.predicate,
                                                   deferred.predicate_index(index))
                        stores.append(cir.Assign(cir.load(mask, L), predicate))
            for k, acc in enumerate(self.plan.accumulators):
                self._accumulate(k, acc)
            self._reduce_step_at_lane()
            stores += self._streamed_stores()
            # Looped elements read the old state: computed before any store, then copied.
            interchanged: list[cir.For] = []
            for i in looped:
                deferred = self.deferred.get(i)
                value = self.plan.body.root.operands[i] if deferred is None else deferred.kept
                with self._positions(i) as (qv, index):
                    body.assign(cir.load(f"n{i}", qv, L), em.array_value(value, index))
                if self._interchangeable(body.scope.stmts[-1], looped):
                    interchanged.append(body.scope.stmts.pop())  # type: ignore[arg-type]
            for stmt in stores:
                body.emit(stmt)
            if interchanged:
                lane_values = self._keep_lane_values(interchanged)
            else:
                for i in looped:
                    with self._positions(i) as (qv, _):
                        body.assign(cir.load(f"s{i}", qv, L), cir.load(f"n{i}", qv, L))
        if interchanged:
            self._interchanged_positions(interchanged, lane_values)
            for i in looped:
                body.emit(copy_whole(f"s{i}", f"n{i}"))

    def _accumulate(self, k: int, acc: Accumulator) -> None:
        total: Expr = cir.load(f"acc{k}", L)
        for operand in acc.operands:
            value_lane_dim = self.plan.value_lane_dims.get(id(operand), 0) if self.n > 1 else None
            total = self._reduce_at_lane(acc.reducer, operand, value_lane_dim, total)
        self.body.assign(cir.load(f"acc{k}", L), total)

    def _store_block(self) -> None:
        body = self.body
        valid = cir.Var("valid")
        with body.loop("l", 0, valid, counter=cir.Special.INT):
            body.declare(cir.INDEX, "e", Binary("+", Binary("*", B, cir.Int(self.lanes)), L),
                         const=True)
            for i in self.plan.per_lane:
                shape = self._shape(i)
                per_lane = self.plan.elements_per_lane(i)
                target = self.outputs[i]
                storage = functools.partial(self.lang.to_storage, shape.dtype)
                position = functools.partial(self._position, i)
                self._copy_loop(per_lane, copy(store_through(target, position),
                                              element_of(f"s{i}", lane=True), storage))
        for k, acc in enumerate(self.plan.accumulators):
            partial = body.variable(self._register_type(acc.combines[-1].dtype), "p",
                                    cir.load(f"part{k}", B))
            with body.loop("l", 0, valid, counter=cir.Special.INT):
                combined = self.lane_em.apply_reducer(acc.reducer, [partial],
                                                      [cir.load(f"acc{k}", L)])[0]
                body.assign(partial, combined)
            body.assign(cir.load(f"part{k}", B), partial)


class BranchingEmitter(ElementalEmitter):
    """Lane code of one lane is scalar: there a select computes only the operand it picks (an
    lane that did not finish draws no reset values), as the scalar hand-written kernel
    does. With several lanes both are computed and blended, which is what vectors do."""

    def _compute(self, inst: Instruction, index: Index) -> Value:
        if inst.op is not Op.SELECT or not inst.shape.dims:
            return super()._compute(inst, index)

        def at(operand: Instruction) -> Index:
            return index if operand.shape.dims == inst.shape.dims else SCALAR

        predicate, on_true, on_false = inst.operands
        condition = self.array_value(predicate, at(predicate))
        return self.branch(inst.dtype, condition,
                           lambda: self.array_value(on_true, at(on_true)),
                           lambda: self.array_value(on_false, at(on_false)))

