"""What every part of a whole-loop kernel's lane code shares: the emitter's state, the block's
lane loop, and the positions of the lane's part of a loop element.

The lane code (codegen/whole_loop_blocks.py) is one class assembled from parts, each a module
with one job: reads of the state and tables (whole_loop_reads.py), deferred selects
(whole_loop_deferred.py), small-argument math (whole_loop_small_math.py), streamed outputs
(whole_loop_streamed.py) and large elements' position loops run lanes-inside
(whole_loop_scratch.py). `LaneCode` declares what they all read and the helpers they all call.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

from hlofuse.analysis.parallel_loop import LoopPlan
from hlofuse.codegen import cir, mathlib
from hlofuse.codegen.body import FunctionBody
from hlofuse.codegen.cir import Binary, Expr, Stmt
from hlofuse.codegen.elemental import ElementalEmitter
from hlofuse.codegen.emitter_types import UNROLL_ELEMENTS, Index, Value, selected, strides_of
from hlofuse.codegen.language import Language
from hlofuse.codegen.licm import hoist_invariants
from hlofuse.codegen.whole_loop_elements import L, element_indices, lane_part_indices
from hlofuse.codegen.whole_loop_lanes import Deferred
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.shapes import Shape

# A per-lane element of more positions than this is computed in a loop over its positions
# into the block's scratch area (`n<i>[position][lane]`), not written out position by position.
LOOPED_ELEMENTS = 64
# A per-lane element read at a computed position is a select over its positions when it
# has at most this many (the index is in range: lane code clamps it as XLA does).
LANE_SELECTED_READ = 32
SIMD = cir.Loop(simd=True)
B = cir.Var("b")
E = cir.Var("e")


class LaneCode:
    """The state of the lane-code emitter and the helpers its parts share."""

    lang: Language
    body: FunctionBody
    plan: LoopPlan
    loop: Instruction
    init: tuple[Instruction, ...]
    n: int
    lanes: int
    blocks: int
    lane_index: Expr
    outputs: list[str]
    uniform_em: ElementalEmitter
    lane_em: ElementalEmitter
    deferred: dict[int, Deferred]
    small_math: list[tuple[Instruction, mathlib.SmallArgumentForm]]
    speculative: list[tuple[Instruction, mathlib.SmallArgumentForm]]
    # The local arrays lane code reads, by name: each lane input's table (its index in
    # plan.lane_inputs) and each per-lane element's state (its element of the loop state).
    # Which arrays loads may read speculatively is stated where they are declared
    # (`speculable`, collected in `body.speculable`).
    tables: dict[str, int]
    state_arrays: dict[str, int]
    # Each nested loop's state arrays (`whole_loop_nested.py`), by name: their dimensions.
    nested_arrays: dict[str, tuple[int, ...]]
    # Lanes a read of a materialised value (`_lane_reader`) is ahead of the lane loop's own:
    # a loop over part of the block computing several lanes an iteration reads the others.
    lane_offset: int = 0

    def _register_type(self, dtype: DType) -> DType:
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

    def _local_reader(self, em: ElementalEmitter, dtype: DType, array: str,
                      offset: Expr | None) -> Callable[[Index], Value]:
        """Reads of a local array (`offset` + the element's position)."""
        def read(index: Index) -> Value:
            position = em.linear_of(index) if index.dims else cir.Int(0)
            if offset is not None:
                position = Binary("+", offset, position)
            return self.body.let(self._register_type(dtype), cir.load(array, position))

        return read

    def _shape(self, element: int) -> Shape:
        return self.loop.shape.elements[element]

    def _lane_dim(self, element: int) -> int:
        return self.plan.lane_dims.get(element, 0)

    def _lane_indices(self, element: int) -> list[Index]:
        """The elements of the lane's part of per-lane loop element `element`."""
        return lane_part_indices(self._shape(element).dims, self.lane_index,
                                 self._lane_dim(element))

    def _looped(self, element: int) -> bool:
        return self.plan.elements_per_lane(element) > LOOPED_ELEMENTS

    def _lane_index_at(self, element: int, q: Expr) -> Index:
        """Element q (an expression: the position loop's variable) of the lane's part of loop
        element `element`."""
        return self._index_at(self._shape(element).dims, self._lane_dim(element), q)

    def _index_at(self, dims: tuple[int, ...], d: int, q: Expr) -> Index:
        """Element q of the lane's part of a value of `dims` whose lanes lie along d."""
        rest = dims[:d] + dims[d + 1:]
        multi: list[Expr] = []
        for size, stride in zip(rest, strides_of(rest)):
            multi.append(cir.Int(0) if size == 1 else cir.mod(cir.div(q, stride), size))
        multi.insert(d, self.lane_index)
        return Index(dims, None, tuple(multi), None)

    @contextlib.contextmanager
    def _positions(self, element: int, how: cir.Loop = cir.SEQUENTIAL
                   ) -> Iterator[tuple[Expr, Index]]:
        """A loop over the positions of the lane's part of a looped element; what every
        position computes alike moves in front of it."""
        var = self.body.fresh("q")
        with self.body.loop(var, 0, self.plan.elements_per_lane(element), how,
                            counter=cir.Special.INT):
            yield cir.Var(var), self._lane_index_at(element, cir.Var(var))
        stmts = self.body.scope.stmts
        loop = stmts.pop()
        assert isinstance(loop, cir.For)
        # What moves out of a branch reads only arrays whose every position holds a value in
        # every step (declared speculable: the step's tables, the state, the math values).
        stmts += hoist_invariants(loop, self.body.speculable.__contains__)
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

    def _valid_lanes(self) -> Expr:
        if self.n % self.lanes == 0:
            return cir.Int(self.lanes)
        return cir.Select(Binary("==", B, cir.Int(self.blocks - 1)),
                          cir.Int(self.n % self.lanes), cir.Int(self.lanes))

    def _lane_index_of_slot(self) -> Expr:
        first = Binary("*", B, cir.Int(self.lanes))
        if self.n % self.lanes == 0:
            return Binary("+", first, L)
        valid = cir.Var("valid")
        return Binary("+", first, cir.Select(Binary("<", L, valid), L,
                                             Binary("-", valid, cir.Int(1))))

    def _declare_lane_index(self) -> None:
        self.body.declare(cir.INDEX, "e", self._lane_index_of_slot(), const=True)

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

    def _lane_reader(self, array: str, dtype: DType, dims: tuple[int, ...],
                     value_lane_dim: int) -> Callable[[Index], Value]:
        """Reads of a per-lane value kept in `array[position][lane]`: the analysis
        guarantees the index's lane component is the lane's own lane, so only
        the position inside the lane's part matters."""
        rest = dims[:value_lane_dim] + dims[value_lane_dim + 1:]
        count = math.prod(rest)

        def read(index: Index) -> Value:
            em = self.lane_em
            lane = L if not self.lane_offset else Binary("+", L, cir.Int(self.lane_offset))
            position: Expr = cir.Int(0)
            if rest:
                multi = em.multi_of(index)
                multi = multi[:value_lane_dim] + multi[value_lane_dim + 1:]
                position = em.linear_of(Index(rest, None, multi, None))
            if isinstance(position, cir.Int) or count > LANE_SELECTED_READ or \
                    self.lanes == 1 or self.body.of_sequential_counters(position):
                return self.body.let(self._register_type(dtype), cir.load(array, position, lane))
            # A position computed per lane: each lane reads another row, which gcc will not
            # gather from the block's arrays; a select over the rows keeps the lane loop a
            # vector. (A position of sequential loops' counters, a pass over a value's
            # positions, is one row for every lane: a plain load.)
            value = selected(position, [cir.load(array, cir.Int(q), lane) for q in range(count)])
            return self.body.let(self._register_type(dtype), value)

        return read
