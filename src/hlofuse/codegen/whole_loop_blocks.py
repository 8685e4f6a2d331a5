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

import contextlib
import functools
import math
import re
from collections.abc import Callable, Iterator, Mapping

from hlofuse.analysis.loop_accumulators import Accumulator
from hlofuse.analysis.parallel_loop import LoopPlan, Streamed
from hlofuse.codegen import cir, mathlib
from hlofuse.codegen.body import FunctionBody
from hlofuse.codegen.cir import Binary, Expr, Stmt
from hlofuse.codegen.elemental import ElementalEmitter
from hlofuse.codegen.emitter_types import SCALAR, UNROLL_ELEMENTS, Index, Value, expr_of, strides_of
from hlofuse.codegen.language import Language
from hlofuse.codegen.licm import hoist_invariants, index_range
from hlofuse.codegen.op_expressions import math_arguments
from hlofuse.codegen.whole_loop_lanes import Deferred, math_lane_dim, staged_storage
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape

# A per-lane element of more positions than this is computed in a loop over its positions
# into the block's scratch area (`n<i>[position][lane]`), not written out position by position.
LOOPED_ELEMENTS = 64
# Reductions in lane code over at most this many elements are written out, as the lane's
# accumulated sums are: a loop inside the loop over the lanes keeps it from vectorising.
LANE_UNROLLED_REDUCTION = 64
# A per-lane element read at a computed position is a select over its positions when it
# has at most this many (the index is in range: lane code clamps it as XLA does).
LANE_SELECTED_READ = 32
# Lanes per simd loop computing the deferred operands of the listed lanes (one 64-byte vector
# of 32-bit values).
DEFERRED_VECTOR = 16
# Lane-steps below which a chunk runs on the calling thread alone (about a millisecond).
PARALLEL_MIN_ENV_STEPS = 1 << 17
SIMD = cir.Loop(simd=True)
L = cir.Var("l")
B = cir.Var("b")
E = cir.Var("e")


class BlockEmission:
    """The per-lane half of the whole-loop emitter (codegen/whole_loop.py)."""

    lang: Language
    body: FunctionBody
    plan: LoopPlan
    loop: Instruction
    init: tuple[Instruction, ...]
    n: int
    lanes: int
    blocks: int
    env: Expr
    outputs: list[str]
    uniform_em: ElementalEmitter
    lane_em: ElementalEmitter
    deferred: dict[int, Deferred]
    small_math: list[tuple[Instruction, mathlib.SmallArgumentForm]]
    speculative: list[tuple[Instruction, mathlib.SmallArgumentForm]]

    def _ctype(self, dtype: DType) -> DType:
        return self.lang.register_type(dtype)

    def _copy_loop(self, count: int, stmt: Callable[[Expr], Stmt]) -> None:
        """`stmt(q)` for q < count: written out for a few elements, a loop beyond."""
        if count <= UNROLL_ELEMENTS:
            for q in range(count):
                self.body.emit(stmt(cir.Int(q)))
            return
        var = self.body.fresh("q")
        with self.body.loop(var, 0, count):
            self.body.emit(stmt(cir.Var(var)))

    def _each_element(self, em: ElementalEmitter, inst: Instruction,
                      stmt: Callable[[Expr, Expr], Stmt]) -> None:
        """Emit `stmt(position, value)` for every element of `inst`."""
        dims = inst.shape.dims
        if inst.shape.num_elements <= UNROLL_ELEMENTS:
            for q, index in enumerate(element_indices(dims)):
                self.body.emit(stmt(cir.Int(q), em.array_value(inst, index)))
            return
        var = self.body.fresh("q")
        with self.body.loop(var, 0, inst.shape.num_elements):
            value = em.array_value(inst, Index(dims, cir.Var(var), None, None))
            self.body.emit(stmt(cir.Var(var), value))

    def _shape(self, element: int) -> Shape:
        return self.loop.shape.elements[element]

    def _lane_dim(self, element: int) -> int:
        return self.plan.lane_dims.get(element, 0)

    def _lane_indices(self, element: int) -> list[Index]:
        """The elements of the lane's part of per-lane loop element `element`."""
        return env_indices(self._shape(element).dims, self.env, self._lane_dim(element))

    def _looped(self, element: int) -> bool:
        return self.plan.elements_per_env(element) > LOOPED_ELEMENTS

    def _lane_index_at(self, element: int, q: Expr) -> Index:
        """Element q (an expression: the position loop's variable) of the lane's part of loop
        element `element`."""
        dims, d = self._shape(element).dims, self._lane_dim(element)
        rest = dims[:d] + dims[d + 1:]
        multi: list[Expr] = []
        for size, stride in zip(rest, strides_of(rest)):
            multi.append(cir.Int(0) if size == 1 else cir.mod(cir.div(q, stride), size))
        multi.insert(d, self.env)
        return Index(dims, None, tuple(multi), None)

    @contextlib.contextmanager
    def _positions(self, element: int, how: cir.Loop = cir.SEQUENTIAL
                   ) -> Iterator[tuple[Expr, Index]]:
        """A loop over the positions of the lane's part of a looped element; what every
        position computes alike moves in front of it."""
        var = self.body.fresh("q")
        with self.body.loop(var, 0, self.plan.elements_per_env(element), how,
                            counter=cir.Special.INT):
            yield cir.Var(var), self._lane_index_at(element, cir.Var(var))
        stmts = self.body.scope.stmts
        loop = stmts.pop()
        assert isinstance(loop, cir.For)
        stmts += hoist_invariants(loop, _read_only_in_steps)
        stmts.append(loop)

    def _position(self, element: int, q: Expr) -> Expr:
        """Where element q of the lane's part of loop element `element` lies in the whole
        array (row-major, the lanes along the element's lane dimension)."""
        dims, d = self._shape(element).dims, self._lane_dim(element)
        inner = math.prod(dims[d + 1:])
        if d == 0:
            return Binary("+", Binary("*", E, cir.Int(inner)), q)
        if isinstance(q, cir.Int):
            outer, within = divmod(q.value, inner)
            return Binary("+", cir.Int(outer * self.n * inner + within),
                          Binary("*", E, cir.Int(inner)))
        outer_part = Binary("*", Binary("/", q, cir.Int(inner)), cir.Int(self.n * inner))
        return Binary("+", Binary("+", outer_part, Binary("%", q, cir.Int(inner))),
                      Binary("*", E, cir.Int(inner)))

    def speculable_lane_load(self, load: cir.Load, defined: Mapping[str, Expr]) -> bool:
        """A load lane code may run without its condition: the block's state at a position
        known to lie in the lane's part (`s<i>[q][l]`, q a literal or a clamp), or the
        step's row of a lane-input table (`tab<k>[t * count + q]`)."""
        if not isinstance(load.array, cir.Var):
            return False
        name = load.array.name
        if re.fullmatch(r"s\d+", name) and len(load.indices) == 2:
            element = int(name[1:])
            bounds = index_range(load.indices[0], defined)
            return element in self.plan.per_env and bounds is not None and \
                0 <= bounds[0] and bounds[1] < self.plan.elements_per_env(element) and \
                load.indices[1] == L
        if re.fullmatch(r"tab\d+", name) and len(load.indices) == 1:
            k = int(name[3:])
            if k >= len(self.plan.lane_inputs):
                return False
            count = max(1, self.plan.lane_inputs[k].shape.num_elements)
            row = Binary("*", cir.Var("t"), cir.Int(count))
            index = load.indices[0]
            if index == row:
                return True
            if isinstance(index, Binary) and index.op == "+" and index.left == row:
                bounds = index_range(index.right, defined)
                return bounds is not None and 0 <= bounds[0] and bounds[1] < count
        return False

    # --- blocks -----------------------------------------------------------------------------

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

    def _valid_lanes(self) -> Expr:
        if self.n % self.lanes == 0:
            return cir.Int(self.lanes)
        return cir.Select(Binary("==", B, cir.Int(self.blocks - 1)),
                          cir.Int(self.n % self.lanes), cir.Int(self.lanes))

    def _env_of_lane(self) -> Expr:
        first = Binary("*", B, cir.Int(self.lanes))
        if self.n % self.lanes == 0:
            return Binary("+", first, L)
        valid = cir.Var("valid")
        return Binary("+", first, cir.Select(Binary("<", L, valid), L,
                                             Binary("-", valid, cir.Int(1))))

    def _declare_env(self) -> None:
        self.body.declare(cir.INDEX, "e", self._env_of_lane(), const=True)

    def _block(self) -> None:
        body, lanes = self.body, self.lanes
        body.declare(cir.Special.INT, "valid", self._valid_lanes(), const=True)
        body.emit(cir.ExprStmt(cir.Cast(cir.Special.VOID, cir.Var("valid"))))
        for i in self.plan.per_env:
            body.declare(self._ctype(self._shape(i).dtype), f"s{i}",
                         dims=(self.plan.elements_per_env(i), lanes))
            if self._looped(i):  # the step's new values, until every value is computed
                body.declare(self._ctype(self._shape(i).dtype), f"n{i}",
                             dims=(self.plan.elements_per_env(i), lanes))
            if self.speculative:  # the state the step started with, should it run again
                body.declare(self._ctype(self._shape(i).dtype), f"o{i}",
                             dims=(self.plan.elements_per_env(i), lanes))
        self._declare_staging()
        self._load_block()
        for k, acc in enumerate(self.plan.accumulators):
            identity = self.lane_em.scalar(acc.identity)
            body.declare(self._ctype(acc.combines[-1].dtype), f"acc{k}", dims=(lanes,))
            if self.speculative:
                body.declare(self._ctype(acc.combines[-1].dtype), f"oacc{k}", dims=(lanes,))
            with body.loop("l", 0, lanes, counter=cir.Special.INT):
                body.assign(cir.load(f"acc{k}", L), identity)
        self._declare_small_argument_values()
        with body.loop("t", 0, cir.Var("count")):
            self._lane_step()
        self._store_block()

    def _load_block(self) -> None:
        """The block's state: the initial values in the first chunk, the outputs after."""
        body = self.body
        with body.if_else(Binary("==", cir.Var("chunk"), cir.Int(0))) as (first, later):
            with first, body.loop("l", 0, self.lanes, counter=cir.Special.INT):
                self._declare_env()
                for i in self.plan.per_env:
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
                self._declare_env()
                for i in self.plan.per_env:
                    shape = self._shape(i)
                    per_env = self.plan.elements_per_env(i)
                    loaded = functools.partial(self._load_element, shape.dtype, self.outputs[i],
                                               i)
                    self._copy_loop(per_env, copy(store_at(f"s{i}", lane=True), loaded))

    def _load_element(self, dtype: DType, pointer: str, element: int, q: Expr) -> Expr:
        return self.lang.load(dtype, cir.Var(pointer), self._position(element, q))

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
                multi.insert(streamed.lane_dim, self.env)
                value = self.uniform_em.array_value(init, Index(dims, None, tuple(multi), None))
                self.body.assign(cir.load(self.outputs[i], self._position(i, q)),
                                 storage(expr_of(value)))

    def _lane_bindings(self) -> None:
        em = self.lane_em
        for k, inst in enumerate(self.plan.lane_inputs):
            count = max(1, inst.shape.num_elements)
            if inst.shape.dims:
                em.bindings[id(inst)] = self._table_reader(inst.dtype, f"tab{k}", count)
            else:
                name = f"li{k}"
                self.body.declare(self._ctype(inst.dtype), name,
                                  cir.load(f"tab{k}", cir.Var("t")), const=True)
                em.bindings[id(inst)] = _named(name)
        for inst in self.plan.body.instructions:
            element = element_read(inst)
            if element is None or element not in self.plan.per_env:
                continue
            shape = self._shape(element)
            em.bindings[id(inst)] = self._lane_reader(f"s{element}", shape.dtype, shape.dims,
                                                      self._lane_dim(element))

    def _table_reader(self, dtype: DType, array: str, count: int) -> Callable[[Index], Value]:
        """Reads of the step's row of a lane-input table."""
        row = Binary("*", cir.Var("t"), cir.Int(count))

        def read(index: Index) -> Value:
            position = self.lane_em.linear_of(index)
            return self.body.let(self._ctype(dtype), cir.load(array, Binary("+", row, position)))

        return read

    def _lane_reader(self, array: str, dtype: DType, dims: tuple[int, ...],
                     env_dim: int) -> Callable[[Index], Value]:
        """Reads of a per-lane value kept in `array[position][lane]`: the analysis
        guarantees the index's lane component is the lane's own lane, so only
        the position inside the lane's part matters."""
        rest = dims[:env_dim] + dims[env_dim + 1:]
        count = math.prod(rest)

        def read(index: Index) -> Value:
            em = self.lane_em
            position: Expr = cir.Int(0)
            if rest:
                multi = em.multi_of(index)
                multi = multi[:env_dim] + multi[env_dim + 1:]
                position = em.linear_of(Index(rest, None, multi, None))
            if isinstance(position, cir.Int) or count > LANE_SELECTED_READ or self.lanes == 1:
                return self.body.let(self._ctype(dtype), cir.load(array, position, L))
            # A computed position: each lane reads another row, which gcc will not gather
            # from the block's arrays; a select over the rows keeps the lane loop a vector.
            value: Expr = cir.load(array, cir.Int(count - 1), L)
            for q in reversed(range(count - 1)):
                value = cir.Select(Binary("==", position, cir.Int(q)),
                                   cir.load(array, cir.Int(q), L), value)
            return self.body.let(self._ctype(dtype), value)

        return read

    def _lane_step(self) -> None:
        self._lane_bindings()
        self._small_argument_check()
        masks = self._declare_masks()
        if self.speculative:
            self._speculative_lane_loops(masks)
        else:
            self._main_lane_loop(masks)
        self._deferred_lane_loop(masks)
        self._staged_streamed_stores()

    @contextlib.contextmanager
    def _lane_loop(self, how: cir.Loop) -> Iterator[None]:
        """`for` over the block's lanes. One lane gets a plain block: gcc if-converts a loop of
        one iteration as if to vectorise it, and so computes the branches of the scalar code
        (the deferred reset draws) on every step."""
        if self.lanes == 1:
            with self.body.braces():
                self.body.emit(cir.Comment("the one lane"))
                self.body.declare(cir.Special.INT, "l", cir.Int(0), const=True)
                yield
            return
        with self.body.loop("l", 0, self.lanes, how, counter=cir.Special.INT):
            yield

    def _speculative_lane_loops(self, masks: dict[tuple[object, ...], str]) -> None:
        """The step with the speculative math in its small forms, each call also noting
        whether its argument was beyond the form's limit; in a step where one was (for
        some lane of the block), the block's state and sums go back to where the step
        started and the step runs again with the full functions. Stores to the outputs are
        made again with the same or the corrected values; nothing else is kept."""
        body = self.body
        saved = [(f"o{i}", f"s{i}") for i in self.plan.per_env]
        saved += [(f"oacc{k}", f"acc{k}") for k in range(len(self.plan.accumulators))]
        for copy_to, copy_from in saved:
            body.emit(_memcpy(copy_to, copy_from))
        beyond = body.declare(cir.Special.INT, "beyond", cir.Int(0))
        for inst, form in self.speculative:
            self.lane_em.bindings[id(inst)] = self._speculative_reader(inst, form, beyond)
        self._main_lane_loop(masks, cir.Loop(reduction=("|", beyond.name)))
        for inst, _ in self.speculative:
            del self.lane_em.bindings[id(inst)]
        with body.if_(beyond):
            for copy_from, copy_to in saved:
                body.emit(_memcpy(copy_to, copy_from))
            self._main_lane_loop(masks)

    def _speculative_reader(self, inst: Instruction, form: mathlib.SmallArgumentForm,
                            beyond: cir.Var) -> Callable[[Index], Value]:
        def read(index: Index) -> Value:
            arguments = self._math_arguments(inst, index)
            self.body.assign(beyond, cir.Unary("!", cir.call(form.guard, *arguments)), "|=")
            return self.body.let(self._ctype(inst.dtype), cir.call(form.c_name, *arguments))

        return read

    def _main_lane_loop(self, masks: dict[tuple[object, ...], str],
                        how: cir.Loop = SIMD) -> None:
        """Every new per-lane value (a deferred select's other operand in its place, and
        the select's predicate kept in a mask) and the accumulators."""
        body, em = self.body, self.lane_em
        with self._lane_loop(how):
            self._declare_env()
            stores: list[Stmt] = []
            stored: set[str] = set()
            looped = [i for i in self.plan.per_env if self._looped(i)]
            for i in self.plan.per_env:
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
                body.emit(_memcpy(f"s{i}", f"n{i}"))

    def _interchangeable(self, stmt: Stmt, looped: list[int]) -> bool:
        """Whether a looped element's position loop, just written inside the lane loop, can
        run after it with the lanes inside (`for q { simd for l }`): with vector lanes, when
        it reads no memory the lane loop writes (the state of the elements computed
        position by position, `s<i>`/`n<i>`, the step's tables and the math values only) and
        writes its own `n<i>` and variables of its own."""
        if self.lanes == 1 or not isinstance(stmt, cir.For):
            return False
        written = {f"n{i}" for i in looped}
        own = written | {f"s{i}" for i in looped}
        declared = {x.name for x in cir.statements(stmt) if isinstance(x, cir.Declare)}
        for x in cir.statements(stmt):
            if isinstance(x, cir.Assign):
                target = x.target
                if isinstance(target, cir.Var) and target.name not in declared:
                    return False
                if isinstance(target, cir.Load) and (
                        not isinstance(target.array, cir.Var) or
                        target.array.name not in written):
                    return False
            elif not isinstance(x, cir.Declare | cir.If | cir.For | cir.Block):
                return False
            for expr in cir.expressions(x):
                for e in cir.walk(expr):
                    if not isinstance(e, cir.Load):
                        continue
                    if not isinstance(e.array, cir.Var):
                        return False
                    name = e.array.name
                    if name not in own and not re.fullmatch(r"(tab|fm)\d+", name):
                        return False
        return True

    def _keep_lane_values(self, loops: list[cir.For]) -> list[tuple[cir.Type, str]]:
        """At the end of the lane loop, each lane's values the interchanged position loops
        read (the values every position shares, moved in front of them) into per-lane
        arrays `h_<name>[lane]`: (type, name) of each."""
        body = self.body
        declared = {x.name: x.type for x in body.scope.stmts
                    if isinstance(x, cir.Declare) and not x.dims}
        read = cir.names_used(list(loops))
        kept = [(ctype, name) for name, ctype in declared.items()
                if name in read and name not in ("e", "l")]
        for _, name in kept:
            body.assign(cir.load(f"h_{name}", L), cir.Var(name))
        return kept

    def _interchanged_positions(self, loops: list[cir.For],
                                lane_values: list[tuple[cir.Type, str]]) -> None:
        """The position loops after the lane loop, a simd loop over the lanes inside each:
        lane code of a large element then vectorises over the lanes (inside the lane loop
        a loop over 200 positions kept the lane loop scalar)."""
        body = self.body
        lane_loop = body.scope.stmts.pop()
        for ctype, name in lane_values:
            body.declare(ctype, f"h_{name}", dims=(self.lanes,))
        body.emit(lane_loop)
        for loop in loops:
            inner = cir.For("l", cir.Int(0), cir.Int(self.lanes), [], SIMD, cir.Special.INT)
            names = cir.names_used([loop])
            if "e" in names:
                inner.body.append(cir.Declare(cir.INDEX, "e", self._env_of_lane(), const=True))
            for ctype, name in lane_values:
                if name in names:
                    inner.body.append(cir.Declare(ctype, name, cir.load(f"h_{name}", L),
                                                  const=True))
            inner.body += loop.body
            loop.body = [inner]
            body.emit(loop)

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
        for index in env_indices(written.shape.dims, self.env, streamed.lane_dim):
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
            self._declare_env()
            for k, streamed in staged:
                for q, (_, position) in enumerate(self._streamed_positions(streamed)):
                    self.body.emit(self._streamed_store(
                        streamed, position, cir.load(f"w{k}", cir.Int(q), L)))

    # --- deferred selects -------------------------------------------------------------------

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
            self._declare_env()
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
            self._declare_env()
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
        if-conversion give up). The last vector is filled up with the last listed lane, which
        computes and stores the same values again. In a step where a few lanes of the block
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
        body, em = self.body, self.lane_em
        picked = body.declare(cir.Special.INT, "picked", cir.Int(0))
        body.declare(DType.S32, "pick", dims=(self.lanes,))
        with body.loop("l", 0, self.lanes, counter=cir.Special.INT):
            body.assign(cir.load("pick", picked), L)
            body.assign(picked, cir.Binary("!=", any_test, cir.Int(0)), "+=")
        width = min(DEFERRED_VECTOR, self.lanes)
        first, offset = body.fresh("k"), body.fresh("k")
        with body.loop(first, 0, picked, counter=cir.Special.INT, step=width), \
                body.loop(offset, 0, width, SIMD, counter=cir.Special.INT):
            listed = Binary("+", cir.Var(first), cir.Var(offset))
            last = Binary("-", picked, cir.Int(1))
            body.declare(cir.Special.INT, "l", cir.load(
                "pick", cir.Select(Binary("<", listed, picked), listed, last)), const=True)
            self._declare_env()
            # With one predicate every listed lane picks: stores, no blends.
            blended = len(groups) > 1
            blends = []
            for test, stores in groups.items():
                for i, q, operand, index in stores:
                    target = cir.load(f"s{i}", cir.Int(q), L)
                    value = expr_of(em.array_value(operand, index))
                    blends.append(cir.Assign(target, cir.Select(test, value, target)
                                             if blended else value))
            for stmt in blends:
                body.emit(stmt)

    # --- small-argument math ----------------------------------------------------------------

    def _declare_small_argument_values(self) -> None:
        """Per block, the arrays the full functions fill in a step where some argument is too
        large for the small forms (zeroed, so that lane code may read them unconditionally)."""
        for k, (inst, _) in enumerate(self.small_math):
            positions = inst.shape.num_elements // self.n
            self.body.declare(self._ctype(inst.dtype), f"fm{k}", dims=(positions, self.lanes),
                              zeroed=True)

    def _small_argument_check(self) -> None:
        """Lane code computes the small-argument math values inline with the small forms,
        except in a step where some lane's argument is too large for them (a branch the block
        almost never takes): the full functions then fill `fm<k>[position][lane]` first and
        lane code reads those. The header's functions hold under DAZ/FTZ as they are, so they
        are called directly (libm calls get their arguments and results flushed)."""
        if not self.small_math:
            return
        body = self.body
        large = body.declare(cir.Special.INT, "large", cir.Int(0))
        with self._lane_loop(cir.Loop(reduction=("|", "large"))):
            self._declare_env()
            tests: list[Stmt] = []
            for inst, form in self.small_math:
                for index in env_indices(inst.shape.dims, self.env, self._math_lane_dim(inst)):
                    arguments = self._math_arguments(inst, index)
                    test = cir.Assign(large, cir.Unary("!", cir.call(form.guard, *arguments)),
                                      "|=")
                    if test not in tests:
                        tests.append(test)
                        body.emit(test)
        with body.if_(large), self._lane_loop(cir.Loop(simd=True)):
            self._declare_env()
            for k, (inst, form) in enumerate(self.small_math):
                full = mathlib.lookup(form.name, form.dtype)
                assert full is not None
                lane_dim = self._math_lane_dim(inst)
                for q, index in enumerate(env_indices(inst.shape.dims, self.env, lane_dim)):
                    arguments = self._math_arguments(inst, index)
                    body.assign(cir.load(f"fm{k}", cir.Int(q), L),
                                cir.call(full.c_name, *arguments))
        for k, (inst, form) in enumerate(self.small_math):
            self.lane_em.bindings[id(inst)] = self._small_argument_reader(k, inst, form)

    def _math_arguments(self, inst: Instruction, index: Index) -> list[Expr]:
        """The math function's arguments at `index`, as the elemental emitter passes them."""
        values = [expr_of(self.lane_em.array_value(x, index)) for x in inst.operands]
        return math_arguments(inst, values)

    def _math_lane_dim(self, inst: Instruction) -> int:
        lane_dim = math_lane_dim(self.plan, inst)
        assert lane_dim is not None
        return lane_dim

    def _small_argument_reader(self, k: int, inst: Instruction,
                               form: mathlib.SmallArgumentForm) -> Callable[[Index], Value]:
        full_value = self._lane_reader(f"fm{k}", inst.dtype, inst.shape.dims,
                                       self._math_lane_dim(inst))

        def read(index: Index) -> Value:
            # computed outside the select: gcc if-converts no conditional division (fmod's)
            small = self.body.let(self._ctype(inst.dtype),
                                  cir.call(form.c_name, *self._math_arguments(inst, index)))
            chosen = cir.Select(cir.Var("large"), expr_of(full_value(index)), expr_of(small))
            return self.body.let(self._ctype(inst.dtype), chosen)

        return read

    # --- accumulators and the block's end ---------------------------------------------------

    def _accumulate(self, k: int, acc: Accumulator) -> None:
        total: Expr = cir.load(f"acc{k}", L)
        for operand in acc.operands:
            env_dim = self.plan.env_dims.get(id(operand), 0) if self.n > 1 else None
            total = self._reduce_at_lane(acc, operand, env_dim, total)
        self.body.assign(cir.load(f"acc{k}", L), total)

    def _reduce_at_lane(self, acc: Accumulator, operand: Instruction, env_dim: int | None,
                        total: Expr) -> Expr:
        """`total <op>` every element of the lane's lane's part of `operand`."""
        em, body = self.lane_em, self.body
        dims = operand.shape.dims
        loops = [(d, size) for d, size in enumerate(dims) if d != env_dim and size > 1]
        if math.prod(size for _, size in loops) <= LANE_UNROLLED_REDUCTION:
            # written out in the loops' order: row-major over the lane's positions
            for index in env_indices(dims, self.env, env_dim or 0) if env_dim is not None \
                    else element_indices(dims):
                value = em.array_value(operand, index)
                total = em.apply_reducer(acc.reducer, [total], [value])[0]
            return total
        name = body.variable(self._ctype(operand.dtype), "acc", total)
        variables = {d: body.fresh("r") for d, _ in loops}
        multi = tuple(self.env if d == env_dim else
                      (cir.Var(variables[d]) if d in variables else cir.Int(0))
                      for d in range(len(dims)))
        with contextlib.ExitStack() as stack:
            for d, size in loops:
                stack.enter_context(body.loop(variables[d], 0, size))
            value = em.array_value(operand, Index(dims, None, multi, None))
            body.assign(name, em.apply_reducer(acc.reducer, [name], [value])[0])
        return name

    def _store_block(self) -> None:
        body = self.body
        valid = cir.Var("valid")
        with body.loop("l", 0, valid, counter=cir.Special.INT):
            body.declare(cir.INDEX, "e", Binary("+", Binary("*", B, cir.Int(self.lanes)), L),
                         const=True)
            for i in self.plan.per_env:
                shape = self._shape(i)
                per_env = self.plan.elements_per_env(i)
                target = self.outputs[i]
                storage = functools.partial(self.lang.to_storage, shape.dtype)
                position = functools.partial(self._position, i)
                self._copy_loop(per_env, copy(_store_through(target, position),
                                              element_of(f"s{i}", lane=True), storage))
        for k, acc in enumerate(self.plan.accumulators):
            partial = body.variable(self._ctype(acc.combines[-1].dtype), "p",
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


def store_at(array: str, row: Expr | None = None, lane: bool = False
             ) -> Callable[[Expr, Expr], Stmt]:
    """`array[row + q]([l]) = value` as a function of (q, value)."""
    def store(q: Expr, value: Expr) -> Stmt:
        position = q if row is None else Binary("+", row, q)
        return cir.Assign(cir.load(array, position, *((L,) if lane else ())), value)

    return store


def _store_through(array: str, position: Callable[[Expr], Expr]) -> Callable[[Expr, Expr], Stmt]:
    """`array[position(q)] = value` as a function of (q, value)."""
    return lambda q, value: cir.Assign(cir.load(array, position(q)), value)


def element_of(array: str, row: Expr | None = None, lane: bool = False
               ) -> Callable[[Expr], Expr]:
    """`array[row + q]([l])` as a function of q."""
    def read(q: Expr) -> Expr:
        position = q if row is None else Binary("+", row, q)
        return cir.load(array, position, *((L,) if lane else ()))

    return read


def constant(value: Expr) -> Callable[[Expr], Expr]:
    return lambda q: value


def copy(store: Callable[[Expr, Expr], Stmt], source: Callable[[Expr], Expr],
         convert: Callable[[Expr], Expr] | None = None) -> Callable[[Expr], Stmt]:
    """The statement copying element q of `source` (converted) through `store`."""
    def statement(q: Expr) -> Stmt:
        value = source(q)
        return store(q, value if convert is None else convert(value))

    return statement


def _read_only_in_steps(array: str) -> bool:
    """Arrays lane code reads at positions valid in every step: the step's lane-input tables,
    the block's state and the full-function math values (`tab<k>`, `s<i>`, `fm<k>`)."""
    return _READ_ONLY.fullmatch(array) is not None


_READ_ONLY = re.compile(r"(tab|s|fm)\d+")


def _named(name: str) -> Callable[[Index], Value]:
    return lambda index: cir.Var(name)


def element_read(inst: Instruction) -> int | None:
    """The loop-state element a get-tuple-element of the loop parameter reads."""
    if inst.op is not Op.GET_TUPLE_ELEMENT or inst.operands[0].op is not Op.PARAMETER:
        return None
    index = inst.attrs["index"]
    assert isinstance(index, int)
    return index


def element_indices(dims: tuple[int, ...]) -> list[Index]:
    """Every element of an array of `dims`, as an index of literal components."""
    if not dims:
        return [SCALAR]
    strides = strides_of(dims)
    out = []
    for q in range(math.prod(dims)):
        multi = tuple(cir.Int((q // s) % d) for s, d in zip(strides, dims))
        out.append(Index(dims, None, multi, None))
    return out


def env_indices(dims: tuple[int, ...], env: Expr, lane_dim: int = 0) -> list[Index]:
    """The elements of the lane's part of a per-lane array whose lanes lie along `lane_dim`
    (that component written `env`)."""
    rest = dims[:lane_dim] + dims[lane_dim + 1:]
    out = []
    for index in element_indices(rest):
        multi = list(index.multi or ())
        multi.insert(lane_dim, env)
        out.append(Index(dims, None, tuple(multi), None))
    return out


def _memcpy(target: str, source: str) -> Stmt:
    """`memcpy(target, source, sizeof target)`: arrays of the block, of one size."""
    return cir.ExprStmt(cir.call("memcpy", cir.Var(target), cir.Var(source),
                                 cir.call("sizeof", cir.Var(target))))
