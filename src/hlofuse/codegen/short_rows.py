"""Loops over rows of a short minor dimension, computed a chunk of rows at a time.

A kernel that reads `reduce(producer)` over the last dimensions of a [rows, k] operand, with k
small (a policy's log-sum-exp over its action logits), would compute each row's k producer
values and their reduction inside the loop over rows, the row's elements written out. gcc
vectorises such a loop only when k is a group size it can deinterleave (3, 4, 8, 16): for
k = 5, 6, 7 or 18 the whole row (the producer's exp, the consumer's log) runs scalar. The
same holds for a loop over [rows, k] that reads a row value broadcast along the row (the
log-probabilities `x - max - log(sum)`). Here such a loop runs over chunks of rows instead,
and each chunk takes these loops:

1. per reduce (operands first): the producer over the chunk's rows * k elements as one
   contiguous loop into a small buffer (vectorised for any k), then each row of the buffer
   reduced into the chunk's row values as the elemental reduce does it
   (codegen/reductions_elemental.py: same accumulation, same order, so the bits are those of
   the loop over rows);
2. per broadcast of a row value along the row (the max subtracted before exp), the chunk's
   row values each written k times into a buffer the loops after it read contiguously;
3. the outputs over the chunk's rows, or over its elements, reading those buffers.

A [k] value broadcast to every row (a bias) is written out for a chunk's rows once, before the
chunks. This is not XLA's emitter (XLA's CPU backend keeps the loop over rows); it lays out
the same computation for gcc's vectoriser, chosen by the C target
(`KernelOptions.short_row_chunk`). It applies only where every reduce and broadcast it keeps
in a buffer is read at the row or element the chunk's loops give it (through element-wise
ops); anything else keeps the loop over rows.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from hlofuse.codegen import cir
from hlofuse.codegen.cir import Expr, Stmt
from hlofuse.codegen.emitter_types import UNROLL_ELEMENTS, Binding, Index, Value, at
from hlofuse.codegen.loop_nests import LoopEmission, Store
from hlofuse.codegen.reductions_elemental import accumulation, reduced_value
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import ELEMENTWISE_OPS, Op

# Rows longer than this keep the loop over rows: a float sum over more elements is summed
# pairwise from stored rows (codegen/reductions.py), and a longer row vectorises less badly.
MAX_SHORT_ROW = 32
# Rows of these lengths written out in a loop over rows are interleaved loads and stores gcc
# vectorises (probe 43: 3, 4, 8, 16 for a row reduction; 2 as every power of two).
GCC_INTERLEAVED_GROUPS = frozenset({2, 3, 4, 8, 16})


@dataclass(frozen=True)
class ShortRows:
    """A loop over `rows` (or over `rows + row`: `per_element`) whose reduces all reduce a
    [*rows, *row] operand over its last dimensions. `stages` are those reduces and the
    broadcasts of row values along the row, operands first; `tiles` the broadcasts of a
    [*row] value to every row."""

    rows: tuple[int, ...]
    row: tuple[int, ...]
    per_element: bool
    stages: tuple[Instruction, ...]
    tiles: tuple[Instruction, ...]

    @property
    def elements(self) -> tuple[int, ...]:
        return self.rows + self.row


def short_row_shapes(instructions: list[Instruction]) -> set[tuple[int, ...]]:
    """The dims of the [*rows, *row] arrays the kernel reduces over short rows or spreads a
    row value over: the loops a chunked plan could take."""
    out = set()
    for inst in instructions:
        if inst.op is Op.REDUCE and _reduces_short_row(inst, inst.shape.dims):
            out.add(inst.operands[0].shape.dims)
        elif inst.op is Op.BROADCAST and inst.operands[0].shape.is_array and \
                _spreads_short_row(inst, inst.operands[0].shape.dims):
            out.add(inst.shape.dims)
    return out


def short_row_plan(roots: tuple[Instruction, ...], dims: tuple[int, ...], bound: set[int],
                   instructions: list[Instruction], shapes: set[tuple[int, ...]]
                   ) -> ShortRows | None:
    """The chunked plan for a loop over `dims` storing `roots`, or None where it does not
    apply. `bound`: ids of the kernel's inputs; `instructions`: the kernel's, operands first;
    `shapes`: short_row_shapes(instructions).

    The loop's dims are the rows, or the rows and the row (the softmax of a row over its
    elements). Every instruction is reached in one of three ways: at the loop's row (dims
    `rows`), at an element of a row (dims `rows + row`), or at some other position. The stages
    must be reached only at their row or element: their values are kept for the chunk only.
    """
    for split in range(len(dims), 0, -1):
        rows = dims[:split]
        if split == len(dims) and any(d[:split] == rows for d in shapes):
            plan = _walk(roots, rows, None, bound, instructions)
        elif split < len(dims) and dims in shapes:
            plan = _walk(roots, rows, dims[split:], bound, instructions)
        else:
            continue
        if plan is not None:
            return plan
    return None


def _walk(roots: tuple[Instruction, ...], rows: tuple[int, ...], row: tuple[int, ...] | None,
          bound: set[int], instructions: list[Instruction]) -> ShortRows | None:
    """The plan whose loop stores `roots` at each row (`row` None: found from the first
    reduce) or at each element of `rows + row`."""
    per_element = row is not None
    staged: set[int] = set()
    tiles: set[int] = set()
    other: set[int] = set()
    seen: set[tuple[int, str]] = set()
    pending = [(r, "element" if per_element else "row") for r in roots]
    while pending:
        inst, how = pending.pop()
        if (id(inst), how) in seen or id(inst) in bound:
            continue
        seen.add((id(inst), how))
        dims = rows if how == "row" else rows + (row or ())
        if how == "other" or inst.shape.is_tuple or inst.shape.dims != dims:
            other.add(id(inst))
            pending += [(o, "other") for o in inst.operands]
        elif inst.op in ELEMENTWISE_OPS:
            pending += [(o, how if o.shape.is_array and o.shape.dims == dims else "other")
                        for o in inst.operands]
        elif how == "row" and _reduces_short_row(inst, rows, row):
            row = inst.operands[0].shape.dims[len(rows):]
            staged.add(id(inst))
            pending += [(inst.operands[0], "element"), (inst.operands[1], "other")]
        elif how == "element" and _broadcasts_along(inst, rows, 0):
            staged.add(id(inst))
            pending.append((inst.operands[0], "row"))
        elif how == "element" and _broadcasts_along(inst, row or (), len(rows)):
            tiles.add(id(inst))
            pending.append((inst.operands[0], "other"))
        else:
            other.add(id(inst))
            pending += [(o, "other") for o in inst.operands]
    stages = tuple(inst for inst in instructions if id(inst) in staged)
    if row is None or not staged or (staged | tiles) & other:
        return None
    if not any(inst.op is Op.REDUCE for inst in stages) and \
            not _is_scalar_when_written_out(math.prod(row)):
        return None  # spread row values only: see _spreads_short_row
    return ShortRows(rows, row, per_element, stages,
                     tuple(inst for inst in instructions if id(inst) in tiles))


def _reduces_short_row(inst: Instruction, rows: tuple[int, ...],
                       row: tuple[int, ...] | None = None) -> bool:
    """A one-array reduce of a [*rows, *row] operand over its last dimensions, in order,
    with 2 <= elements per row <= MAX_SHORT_ROW (and `row`, when given)."""
    if inst.op is not Op.REDUCE or len(inst.operands) != 2 or inst.shape.is_tuple:
        return False
    dims = inst.operands[0].shape.dims
    if dims[:len(rows)] != rows or not rows or inst.shape.dims != rows:
        return False
    if not 2 <= math.prod(dims[len(rows):]) <= MAX_SHORT_ROW:
        return False
    if row is not None and dims[len(rows):] != row:
        return False
    return inst.ints("dimensions") == tuple(range(len(rows), len(dims)))


def _spreads_short_row(inst: Instruction, rows: tuple[int, ...]) -> bool:
    """A broadcast of a [*rows] value along rows gcc does not vectorise written out: a loop
    without a reduce is chunked only for those (rows of a group size gcc deinterleaves keep
    their loop over rows, which shares a row's work among its elements in vector lanes, as
    CartPole's packed [N, 4] state does; longer rows are a loop of their own)."""
    return (_broadcasts_along(inst, rows, 0)
            and _is_scalar_when_written_out(math.prod(inst.shape.dims[len(rows):])))


def _is_scalar_when_written_out(k: int) -> bool:
    return 2 <= k <= UNROLL_ELEMENTS and k not in GCC_INTERLEAVED_GROUPS


def _broadcasts_along(inst: Instruction, kept: tuple[int, ...], first: int) -> bool:
    """A broadcast of a [*kept] array into the dimensions from `first` on."""
    if inst.op is not Op.BROADCAST or not kept:
        return False
    operand = inst.operands[0]
    return (operand.shape.is_array and operand.shape.dims == kept
            and inst.ints("dimensions") == tuple(range(first, first + len(kept))))


class ShortRowEmission(LoopEmission):
    """The chunked loops of a kernel emitter (codegen/kernel.py)."""

    instructions: list[Instruction]
    _short_row_shapes: set[tuple[int, ...]] | None = None

    def _short_row_loop(self, dims: tuple[int, ...], stores: list[Store],
                        roots: tuple[Instruction, ...]) -> bool:
        """Stores `stores` over `dims` a chunk of rows at a time where `short_row_plan`
        applies; False (nothing emitted) where it does not."""
        chunk = self.options.short_row_chunk
        if chunk <= 0 or not dims or self.body.hoisting > 0 or math.prod(dims) < 2:
            return False
        if self._short_row_shapes is None:
            self._short_row_shapes = short_row_shapes(self.instructions)
        if not self._short_row_shapes:
            return False
        bound = {id(inst) for inst, _ in self.spec.inputs}
        plan = short_row_plan(roots, dims, bound, self.instructions, self._short_row_shapes)
        if plan is None:
            return False
        group = self.groups
        self.groups += 1
        if group in self.nest_groups:  # a value needs per-dimension indices: rows as before
            return False
        count = math.prod(plan.rows)
        chunks = -(-count // chunk)
        work = count * math.prod(plan.row)
        parallel = work >= self.options.parallel_min_elements and chunks > 1
        stmts: list[Stmt] = []
        with self.body.section(stmts):
            bounds = (self.body.fresh("lo"), self.body.fresh("hi")) if parallel else None
            tiles = [(tile, self._tile(plan, tile)) for tile in plan.tiles]
            q = self.body.fresh("chunk")
            lo, hi = (cir.Var(bounds[0]), cir.Var(bounds[1])) if bounds else (0, chunks)
            with self.body.loop(q, lo, hi):
                self._chunk(plan, group, cir.Var(q), stores, tiles)
        if bounds is not None:
            stmts = self._parallel_part(stmts, [(0, chunks)], list(bounds))
        self._add_section(stmts, chunks if bounds is not None else 0, False)
        return True

    def _chunk(self, plan: ShortRows, group: int, q: Expr, stores: list[Store],
               tiles: list[tuple[Instruction, str]]) -> None:
        """The loops of chunk `q`: each stage's, then the outputs'."""
        body, em = self.body, self.em
        chunk = self.options.short_row_chunk
        k = math.prod(plan.row)
        first = em.index_let(cir.mul(q, chunk))  # the chunk's first row
        left = body.let(cir.INDEX, cir.sub(cir.Int(math.prod(plan.rows)), first))
        n = body.let(cir.INDEX, cir.Select(cir.Binary("<", left, cir.Int(chunk)), left,
                                           cir.Int(chunk)))
        start = em.index_let(cir.mul(first, k))  # the chunk's first element
        overridden: dict[int, Binding | None] = {}

        def bind(inst: Instruction, buffer: str, position: Expr) -> None:
            overridden.setdefault(id(inst), em.bindings.get(id(inst)))
            em.bindings[id(inst)] = self._buffer_reader(buffer, position)

        try:
            for tile, buffer in tiles:
                bind(tile, buffer, start)
            for stage in plan.stages:
                buffer = body.fresh("rows" if stage.op is Op.REDUCE else "spread")
                if stage.op is Op.REDUCE:
                    self._reduce_stage(plan, group, stage, first, n, buffer)
                    bind(stage, buffer, first)
                else:
                    self._spread_stage(plan, group, stage, first, n, buffer)
                    bind(stage, buffer, start)
            i = body.fresh("i")
            if plan.per_element:
                with body.loop(i, 0, cir.mul(n, k)):
                    element = em.index_let(cir.add(start, cir.Var(i)))
                    self._store_all(stores, [Index(plan.elements, element, None, group)], None,
                                    whole=False)
            else:
                with body.loop(i, 0, n):
                    index = self._row_index(plan, group, em.index_let(cir.add(first, cir.Var(i))))
                    self._store_all(stores, [index], None, whole=False)
        finally:
            _restore(em.bindings, overridden)

    def _row_index(self, plan: ShortRows, group: int, row: Expr) -> Index:
        if len(plan.rows) == 1:
            return Index(plan.rows, row, (row,), None)
        return Index(plan.rows, row, None, group)

    def _buffer_reader(self, buffer: str, first: Expr) -> Binding:
        """A stage's value at an index of the chunk, from its buffer (`first`: the linear
        index of the buffer's first element)."""
        em = self.em

        def read(index: Index) -> Value:
            position = em.index_let(cir.sub(em.linear_of(index), first))
            return cir.load(buffer, position)

        return read

    def _tile(self, plan: ShortRows, broadcast: Instruction) -> str:
        """A [*row] value broadcast to every row, written out for a chunk's rows once (it is
        the same for every chunk), so that the loops of each chunk read it contiguously."""
        body, em = self.body, self.em
        chunk = self.options.short_row_chunk
        k = math.prod(plan.row)
        operand = broadcast.operands[0]
        register = self.lang.register_type(operand.dtype)
        values = [body.let(register, em.array_value(operand, at(plan.row, *position)))
                  for position in itertools.product(*(range(d) for d in plan.row))]
        buffer = body.fresh("tile")
        body.declare(self.lang.register_type(broadcast.dtype), buffer, dims=(chunk * k,))
        r = body.fresh("r")
        with body.loop(r, 0, chunk):
            base = em.index_let(cir.mul(cir.Var(r), k))
            for j, value in enumerate(values):
                body.assign(cir.load(buffer, em.index_let(cir.add(base, j))), value)
        return buffer

    def _reduce_stage(self, plan: ShortRows, group: int, reduce: Instruction, first: Expr,
                      n: Expr, buffer: str) -> None:
        """The producer over the chunk's elements into a flat buffer, then each row reduced
        from it in the elemental reduce's order into `buffer`, one value per row."""
        body, em, lang = self.body, self.em, self.lang
        chunk = self.options.short_row_chunk
        k = math.prod(plan.row)
        operand, init = reduce.operands
        register = lang.register_type(operand.dtype)
        values = body.fresh("elements")
        body.declare(register, values, dims=(chunk * k,))
        body.declare(lang.register_type(reduce.dtype), buffer, dims=(chunk,))
        start = em.index_let(cir.mul(first, k))  # the chunk's first element
        f = body.fresh("i")
        with body.loop(f, 0, cir.mul(n, k)):
            position = em.index_let(cir.add(start, cir.Var(f)))
            value = em.array_value(operand, Index(plan.elements, position, None, group))
            body.assign(cir.load(values, cir.Var(f)), value)
        how = accumulation(em, reduce.calls[0], operand.dtype, 1, k)
        r = body.fresh("r")
        with body.loop(r, 0, n):
            base = em.index_let(cir.mul(cir.Var(r), k))
            accumulators = [how.identity if how.identity is not None else em.scalar(init)]
            for j in range(k):  # row-major over the reduced dimensions, as the reference
                element = body.let(register, cir.load(values, em.index_let(cir.add(base, j))))
                accumulators = em.apply_reducer(reduce.calls[0], accumulators, [element])
            result = reduced_value(em, reduce.calls[0], (init,), how, accumulators)
            assert isinstance(result, Expr)
            body.assign(cir.load(buffer, cir.Var(r)), result)

    def _spread_stage(self, plan: ShortRows, group: int, broadcast: Instruction, first: Expr,
                      n: Expr, buffer: str) -> None:
        """A row value written to each element of its row: the loops after it then read it
        contiguously, where reading the row value would take a division per element. A
        computed row value is first computed for the chunk's rows in a loop of its own (a
        vector loop; the loop writing the rows out is not one)."""
        body, em = self.body, self.em
        chunk = self.options.short_row_chunk
        k = math.prod(plan.row)
        operand = broadcast.operands[0]
        register = self.lang.register_type(operand.dtype)
        computed = id(operand) not in em.bindings  # else a load, of a buffer or an input
        values = body.fresh("row_values") if computed else None
        if values is not None:
            body.declare(register, values, dims=(chunk,))
            r = body.fresh("r")
            with body.loop(r, 0, n):
                index = self._row_index(plan, group, em.index_let(cir.add(first, cir.Var(r))))
                body.assign(cir.load(values, cir.Var(r)), em.array_value(operand, index))
        body.declare(self.lang.register_type(broadcast.dtype), buffer, dims=(chunk * k,))
        r = body.fresh("r")
        with body.loop(r, 0, n):
            if values is not None:
                value = body.let(register, cir.load(values, cir.Var(r)))
            else:
                index = self._row_index(plan, group, em.index_let(cir.add(first, cir.Var(r))))
                value = body.let(register, em.array_value(operand, index))
            base = em.index_let(cir.mul(cir.Var(r), k))
            for j in range(k):
                body.assign(cir.load(buffer, em.index_let(cir.add(base, j))), value)


def _restore(bindings: dict[int, Binding], overridden: dict[int, Binding | None]) -> None:
    for key, previous in overridden.items():
        if previous is None:
            bindings.pop(key, None)
        else:
            bindings[key] = previous
