"""Reductions at a kernel's root: rows reduced in the reference's order, column reductions.

Root reductions over one domain are computed together, in the reference's order (element by
element from the initial value, or NumPy's pairwise order for f32/f64 sums over more than 32
elements: `analysis/reducers.py`), so results match the interpreter bit for bit. Without
outputs of the input's shape they are reduced where their values are computed: one loop over
the rows whose pairwise sums walk each row's leaves with the producer evaluated in the leaves'
loops (codegen/pairwise_rows.py), the other reduces reading the row in order; nothing is
stored first. With such outputs (XLA's multi-output reduction fusion) one pass computes the
reduced values and those outputs, keeping the reduced values in rows, then reduces the rows.
Column reductions keep a block of accumulators so the inner loop runs along contiguous memory,
for every reducer whose order they follow.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

from hlofuse.analysis.reducers import in_index_order
from hlofuse.codegen import cir
from hlofuse.codegen.cir import Expr, Stmt
from hlofuse.codegen.emitter_types import Index
from hlofuse.codegen.kernel_spec import leaf_shape
from hlofuse.codegen.loop_nests import Store
from hlofuse.codegen.pairwise_rows import emit_pairwise_sums
from hlofuse.codegen.reductions_elemental import (
    Accumulation,
    accumulate,
    accumulation,
    reduction_order,
    simple_reducer,
    start_accumulators,
)
from hlofuse.codegen.short_rows import ShortRowEmission
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op

Outputs = list[tuple[int, tuple[Instruction, tuple[int, ...]]]]
COLUMN_BLOCK = 512
# Values of a row that is accumulated one value after another, computed ahead per chunk.
ROW_CHUNK = 64


class ReductionEmission(ShortRowEmission):
    """The reduction-writing part of a kernel emitter."""

    arg_pointer: dict[int, str]
    _temporary: Callable[[DType, int], str]
    element: Callable[[Instruction, tuple[int, ...]], Callable[[Index], Expr]]

    def _emit_reduction_groups(self, outputs: Outputs, done: set[int]) -> None:
        """Reduces over the same input shape and dimensions, and outputs of that input shape,
        in one pass (XLA's multi-output reduction fusion): the shared producers are computed
        once per input element instead of once per output. A float sum goes this way even
        alone, to be summed in the reference's pairwise order."""
        groups: dict[tuple[tuple[int, ...], tuple[int, ...]], list[Instruction]] = {}
        bound = {id(inst) for inst, _ in self.spec.inputs}
        for _, (inst, _) in outputs:
            if inst.op is not Op.REDUCE or id(inst) in bound:
                continue
            plan = self._plan(inst)
            if plan.identity is not None and not plan.pairwise:
                continue
            key = (inst.operands[0].shape.dims, inst.ints("dimensions"))
            members = groups.setdefault(key, [])
            if all(m is not inst for m in members):
                members.append(inst)
        for (in_dims, reduced), reduces in groups.items():
            siblings = [(k, inst, path) for k, (inst, path) in outputs
                        if k not in done and inst.op is not Op.REDUCE
                        and leaf_shape(inst, path).dims == in_dims]
            if len(reduces) == 1 and not siblings and not self._plan(reduces[0]).pairwise:
                continue
            targets = {}
            for r in reduces:
                for k, (inst, path) in outputs:
                    if inst is r:
                        targets[(id(r), path[0] if path else 0)] = self.output_names[k]
            self._reduction_group(in_dims, reduced, reduces, siblings, targets)
            done.update(k for k, (inst, _) in outputs if any(inst is r for r in reduces))
            done.update(k for k, _, _ in siblings)

    def _plan(self, inst: Instruction) -> Accumulation:
        dims = inst.operands[0].shape.dims
        extent = math.prod(dims[d] for d in inst.ints("dimensions"))
        return accumulation(self.em, inst.calls[0], inst.operands[0].dtype,
                            len(inst.operands) // 2, extent)

    def _reduction_group(self, in_dims: tuple[int, ...], reduced: tuple[int, ...],
                         reduces: list[Instruction],
                         siblings: list[tuple[int, Instruction, tuple[int, ...]]],
                         targets: dict[tuple[int, int], str]) -> None:
        """Without sibling outputs, one loop reducing each row where its values are computed.
        With them, two loops: the first computes every reduced value and every sibling output
        element by element (vectorised, split across threads) and keeps the values in rows,
        one row per result element (the reduced dimensions last, in `dimensions` order); the
        second reduces each row in the reference's order. `targets` maps (id(reduce), leaf)
        to the pointer a result goes to."""
        if not siblings and not self.options.store_reduced_rows:
            self._reduce_rows_where_computed(in_dims, reduced, reduces, targets)
            return
        kept = [d for d in range(len(in_dims)) if d not in reduced]
        out_dims = tuple(in_dims[d] for d in kept)
        extent = math.prod(in_dims[d] for d in reduced)
        rows = math.prod(out_dims)
        order = kept + list(reduced)
        natural = order == list(range(len(in_dims)))
        row_dims = tuple(in_dims[d] for d in order)

        def row_position(index: Index) -> Expr:
            multi = self.em.multi_of(index)
            return self.em.linear_of(Index(row_dims, None, tuple(multi[d] for d in order), None))

        stored: list[list[str]] = []
        stores: list[Store] = []
        roots: list[Instruction] = []
        for r in reduces:
            pointers = []
            for x in r.operands[:len(r.operands) // 2]:
                pointer = self._temporary(x.dtype, rows * extent)
                pointers.append(pointer)
                stores.append((self.element(x, ()), pointer, x.dtype,
                               None if natural else row_position))
                roots.append(x)
            stored.append(pointers)
        for k, inst, path in siblings:
            stores.append((self.element(inst, path), self.output_names[k],
                           leaf_shape(inst, path).dtype, None))
            roots.append(inst)
        self.loop(in_dims, stores, parallel=True, roots=tuple(roots))
        in_prologue = self.body.hoisting > 0
        for r, pointers in zip(reduces, stored):
            stmts: list[Stmt] = []
            with self.body.section(stmts):
                self._reduce_rows(r, pointers, out_dims, extent, in_dims, reduced, targets)
            self._add_section(stmts, 0, in_prologue)

    def _reduce_rows_where_computed(self, in_dims: tuple[int, ...], reduced: tuple[int, ...],
                                    reduces: list[Instruction],
                                    targets: dict[tuple[int, int], str]) -> None:
        """One loop over the rows (split across threads) that reduces each row of every
        reduce in the reference's order, computing the reduced values where they are added:
        no row is stored first. Pairwise sums share one walk of the row's leaves
        (codegen/pairwise_rows.py); the other reduces share one loop over the row in order."""
        kept = [d for d in range(len(in_dims)) if d not in reduced]
        out_dims = tuple(in_dims[d] for d in kept)
        reduced_dims = tuple(in_dims[d] for d in reduced)
        extent, rows = math.prod(reduced_dims), math.prod(out_dims)
        natural = kept + list(reduced) == list(range(len(in_dims)))
        in_prologue = self.body.hoisting > 0
        parallel = (not in_prologue and rows > 1
                    and rows * extent >= self.options.parallel_min_elements)
        is_pairwise = reduction_order(in_dims, reduced) == "pairwise"
        pairwise = [r for r in reduces if is_pairwise and self._plan(r).pairwise]
        in_order = [r for r in reduces if all(r is not p for p in pairwise)]
        em, body = self.em, self.body
        stmts: list[Stmt] = []
        with body.section(stmts):
            row = body.fresh("row")
            with body.loop(row, 0, rows, cir.Loop(parallel=True) if parallel else cir.SEQUENTIAL):
                em.ranges[row] = (0, rows)
                out_multi = em.multi_of(Index(out_dims, cir.Var(row), None, None))

                def at(position: Expr) -> Index:
                    if natural:
                        linear = em.index_let(cir.add(cir.mul(cir.Var(row), extent), position))
                        return Index(in_dims, linear, None, None)
                    inner = iter(em.multi_of(Index(reduced_dims, position, None, None)))
                    outer = iter(out_multi)
                    multi = [next(inner) if d in reduced else next(outer)
                             for d in range(len(in_dims))]
                    return Index(in_dims, None, tuple(multi), None)

                results: list[tuple[Instruction, list[Expr]]] = []
                if pairwise:
                    widths = [DType.F64 if r.dtype is DType.F64 else DType.F32 for r in pairwise]
                    sums = emit_pairwise_sums(
                        body, self.lang, widths, extent,
                        lambda p: [em.array_value(r.operands[0], at(p)) for r in pairwise])
                    results += [(r, em.apply_reducer(r.calls[0], [em.scalar(r.operands[1])],
                                                     [total]))
                                for r, total in zip(pairwise, sums)]
                if in_order:
                    results += zip(in_order, self._reduce_row_by_position(in_order, extent, at))
                for r, values in results:
                    self._store_results(r, values, targets, cir.Var(row))
        self._add_section(stmts, rows if parallel else 0, in_prologue)

    def _reduce_row_by_position(self, reduces: list[Instruction], extent: int,
                                at: Callable[[Expr], Index]) -> list[list[Expr]]:
        """The results of `reduces` over one row, accumulated position by position; `at`
        gives the input index of a position in the row. One integer reduce that OpenMP may
        vectorise (`simd_op`) reads its values where it adds them. Any other accumulation
        runs one value after another, so its values are computed a chunk of the row at a
        time by a loop of their own into small arrays (which vectorises: a Gumbel-max's two
        logs per value would otherwise run scalar), then accumulated from there."""
        em, body = self.em, self.body
        plans = [self._plan(r) for r in reduces]
        accumulators = [start_accumulators(em, plan, r.operands[len(r.operands) // 2:])
                        for r, plan in zip(reduces, plans)]
        inputs = [list(r.operands[:len(r.operands) // 2]) for r in reduces]
        if len(reduces) == 1 and plans[0].simd_op is not None:
            assert isinstance(accumulators[0][0], cir.Var)
            j = body.fresh("red")
            with body.loop(j, 0, extent, cir.Loop(reduction=(plans[0].simd_op,
                                                             accumulators[0][0].name))):
                index = at(cir.Var(j))
                accumulate(em, reduces[0].calls[0], plans[0], accumulators[0],
                           [em.array_value(x, index) for x in inputs[0]])
        else:
            self._accumulate_in_chunks(reduces, plans, accumulators, inputs, extent, at)
        return [self._with_init(r, plan, accs)
                for r, plan, accs in zip(reduces, plans, accumulators)]

    def _with_init(self, r: Instruction, plan: Accumulation, accumulators: list[Expr]
                   ) -> list[Expr]:
        """The result of `r` from its accumulators: where they started from the op's identity
        (the reference's order), the initial value combined with the total last."""
        if plan.identity is None:
            return accumulators
        init = self.em.scalar(r.operands[len(r.operands) // 2])
        return self.em.apply_reducer(r.calls[0], [init], [accumulators[0]])

    def _store_results(self, r: Instruction, values: list[Expr],
                       targets: dict[tuple[int, int], str], position: Expr) -> None:
        """Each leaf of `r`'s result at `position` of the pointer `targets` gives it."""
        for leaf, value in enumerate(values):
            pointer = targets.get((id(r), leaf))
            if pointer is not None:
                dtype = r.shape.leaves()[leaf].dtype
                self.body.assign(cir.load(pointer, position), self.lang.to_storage(dtype, value))

    def _accumulate_in_chunks(self, reduces: list[Instruction], plans: list[Accumulation],
                              accumulators: list[list[Expr]], inputs: list[list[Instruction]],
                              extent: int, at: Callable[[Expr], Index]) -> None:
        em, body, lang = self.em, self.body, self.lang
        chunk = max(1, min(extent, ROW_CHUNK))
        start = body.fresh("chunk")
        with body.loop(start, 0, extent, step=chunk):
            end = body.let(cir.INDEX, cir.Select(
                cir.Binary("<", cir.add(cir.Var(start), chunk), cir.Int(extent)),
                cir.add(cir.Var(start), chunk), cir.Int(extent)))
            arrays = [[body.declare(lang.register_type(x.dtype), body.fresh("row_values"),
                                    dims=(chunk,)) for x in xs] for xs in inputs]
            j = body.fresh("j")
            with body.loop(j, cir.Var(start), end):
                index = at(cir.Var(j))
                offset = cir.sub(cir.Var(j), cir.Var(start))
                for xs, pointers in zip(inputs, arrays):
                    for x, pointer in zip(xs, pointers):
                        body.assign(cir.load(pointer, offset), em.array_value(x, index))
            j = body.fresh("red")
            with body.loop(j, cir.Var(start), end):
                offset = cir.sub(cir.Var(j), cir.Var(start))
                for r, plan, accs, pointers in zip(reduces, plans, accumulators, arrays):
                    accumulate(em, r.calls[0], plan, accs,
                               [cir.load(p, offset) for p in pointers])

    def _reduce_rows(self, r: Instruction, pointers: list[str], out_dims: tuple[int, ...],
                     extent: int, in_dims: tuple[int, ...], reduced: tuple[int, ...],
                     targets: dict[tuple[int, int], str]) -> None:
        """Each result element of `r` from its stored row of `extent` values."""
        plan = self._plan(r)
        count = len(r.operands) // 2
        inits = r.operands[count:]
        out_index, headers, _ = self._loop_headers(out_dims, False, self.groups, {}, None)
        self.groups += 1
        em, body = self.em, self.body
        with contextlib.ExitStack() as stack:
            for var, lo, hi in headers:
                stack.enter_context(body.loop(var, lo, hi))
            row = em.index_let(cir.mul(em.linear_of(out_index), extent))
            results: list[Expr]
            if plan.pairwise and reduction_order(in_dims, reduced) == "pairwise":
                width = "f64" if r.dtype is DType.F64 else "f32"
                start = cir.Binary("+", cir.Var(pointers[0]), row)
                total = body.let(DType.F64 if width == "f64" else DType.F32,
                                 cir.call(f"hlofuse_pairwise_{width}", start, cir.Int(extent)))
                results = em.apply_reducer(r.calls[0], [em.scalar(inits[0])], [total])
            else:
                results = self._reduce_row_in_order(r, plan, pointers, row, extent)
            self._store_results(r, results, targets, em.linear_of(out_index))

    def _reduce_row_in_order(self, r: Instruction, plan: Accumulation, pointers: list[str],
                             row: Expr, extent: int) -> list[Expr]:
        em, body = self.em, self.body
        count = len(r.operands) // 2
        inits = r.operands[count:]
        accumulators = start_accumulators(em, plan, inits)
        j = body.fresh("red")
        how = cir.SEQUENTIAL
        if plan.simd_op is not None:
            assert isinstance(accumulators[0], cir.Var)
            how = cir.Loop(reduction=(plan.simd_op, accumulators[0].name))
        with body.loop(j, 0, extent, how):
            position = em.index_let(cir.add(row, cir.Var(j)))
            values = [body.let(self.lang.register_type(x.dtype),
                               self.lang.load(x.dtype, cir.Var(p), position))
                      for x, p in zip(r.operands[:count], pointers)]
            accumulate(em, r.calls[0], plan, accumulators, values)
        return self._with_init(r, plan, accumulators)

    # --- column reductions ----------------------------------------------------------------

    def _column_reduction(self, k: int, inst: Instruction, path: tuple[int, ...]) -> bool:
        """A reduce whose kept dimensions include the minor ones: accumulate a block of
        results at a time so the inner loop runs along contiguous memory."""
        if inst.op is not Op.REDUCE or inst.shape.is_tuple or id(inst) in self.arg_pointer:
            return False
        reduced = sorted(inst.ints("dimensions"))
        in_dims = inst.operands[0].shape.dims
        kept = [d for d in range(len(in_dims)) if d not in reduced]
        if not kept or not reduced or max(kept) < min(reduced):
            return False
        if reduced != list(range(reduced[0], reduced[-1] + 1)):
            return False
        outer = math.prod(in_dims[d] for d in kept if d < reduced[0])
        extent = math.prod(in_dims[d] for d in reduced)
        inner = math.prod(in_dims[d] for d in kept if d > reduced[-1])
        if inner < 8 or extent == 0 or outer * inner == 0:
            return False
        op = simple_reducer(inst.calls[0])
        if in_index_order(op, inst.dtype, extent):
            pass  # XLA's order: from the initial value, element by element, as here
        elif inst.dtype in (DType.F16, DType.BF16) and op is not None:
            return False  # the reference's order shows at this precision
        elif inst.dtype.is_float and op in (Op.ADD, Op.MULTIPLY):
            return False  # so does its order (pairwise, or from the identity) of float sums
        self._column_loops(inst, self.output_names[k], outer, extent, inner)
        return True

    def _column_loops(self, inst: Instruction, pointer: str, outer: int, extent: int,
                      inner: int) -> None:
        operand, init = inst.operands
        dtype = inst.dtype
        in_dims = operand.shape.dims
        block = COLUMN_BLOCK
        blocks = -(-inner // block)
        parallel = outer * extent * inner >= self.options.parallel_min_elements and \
            outer * blocks > 1
        em, body, lang = self.em, self.body, self.lang
        stmts: list[Stmt] = []
        with body.section(stmts):
            o, b, r, j = (body.fresh(p) for p in ("o", "b", "red", "j"))
            vo, vb, vr, vj = (cir.Var(n) for n in (o, b, r, j))
            outer_how = cir.Loop(parallel=True, collapse=2) if parallel else cir.SEQUENTIAL
            with body.loop(o, 0, outer, outer_how), body.loop(b, 0, inner, step=block):
                block_end = cir.Binary("+", vb, cir.Int(block))
                end = body.let(cir.INDEX, cir.Select(cir.Binary("<", block_end, cir.Int(inner)),
                                                     block_end, cir.Int(inner)))
                row = em.index_let(cir.mul(vo, inner))
                initial = lang.to_storage(dtype, em.scalar(init))
                with body.loop(j, vb, end):
                    body.assign(cir.load(pointer, cir.Binary("+", row, vj)), initial)
                with body.loop(r, 0, extent), body.loop(j, vb, end):
                    linear = em.index_let(cir.add(cir.mul(cir.add(cir.mul(vo, extent), vr),
                                                          inner), vj))
                    x = em.array_value(operand, Index(in_dims, linear, None, None))
                    element = cir.Binary("+", row, vj)
                    acc = body.let(lang.register_type(dtype), lang.load(dtype, cir.Var(pointer),
                                                                        element))
                    new = em.apply_reducer(inst.calls[0], [acc], [x])[0]
                    body.assign(cir.load(pointer, element), lang.to_storage(dtype, new))
        self._add_section(stmts, outer if parallel else 0, False)  # threads share `o`
