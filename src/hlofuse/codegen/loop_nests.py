"""Loops over output elements: flat loops, nests, seams of concatenates, parallel parts.

A loop over output elements is flat when every operand can be read through the linear index,
otherwise a nest over the dimensions; a concatenate read element for element splits it into
branch-free parts at its seams; a small dimension of a nest is written out with literal
indices. Above a size threshold the outermost loop is shared among OpenMP threads, each
calling the loop as a function of its own (a "part") with `restrict` pointers, so the
compiler vectorises it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

from hlofuse.codegen import cir, cir_walks
from hlofuse.codegen.body import FunctionBody
from hlofuse.codegen.cir import Expr, Stmt
from hlofuse.codegen.elemental import ElementalEmitter
from hlofuse.codegen.emitter_types import (
    SCALAR,
    UNROLL_ELEMENTS,
    WRITE_OUT_BUDGET,
    Index,
    UnsharedColumns,
)
from hlofuse.codegen.kernel_spec import KernelOptions, KernelSpec
from hlofuse.codegen.language import Language
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import ELEMENTWISE_OPS, Op

MAX_CONCATENATE_PARTS = 16

# (value at an index, pointer, element type, where it is stored: None for its own position)
Store = tuple[Callable[[Index], Expr], str, DType, Callable[[Index], Expr] | None]


def concatenate_seams(roots: tuple[Instruction, ...], dims: tuple[int, ...],
                      bound: set[int]) -> tuple[int, list[int]] | None:
    """(axis, seams) of the concatenates the roots read element for element (through
    element-wise ops of the same shape), for splitting a loop into branch-free parts."""
    seams: dict[int, set[int]] = {}
    seen: set[int] = set()
    stack = [r for r in roots if r.shape.is_array and r.shape.dims == dims]
    while stack:
        inst = stack.pop()
        if id(inst) in seen or id(inst) in bound:
            continue
        seen.add(id(inst))
        if inst.op is Op.CONCATENATE:
            axis = inst.ints("dimensions")[0]
            edges = seams.setdefault(axis, {0, dims[axis]})
            offset = 0
            for operand in inst.operands:
                offset += operand.shape.dims[axis]
                edges.add(offset)
            continue
        if inst.op in ELEMENTWISE_OPS:
            stack.extend(o for o in inst.operands if o.shape.dims == dims)
    if not seams:
        return None
    axis = max(seams, key=lambda a: len(seams[a]))
    ordered = sorted(seams[axis])
    if len(ordered) - 1 > MAX_CONCATENATE_PARTS or len(ordered) <= 2:
        return None
    return axis, ordered


class Part:
    """A parallel loop moved into a function of its own, written once the in-place pairs
    (which drop `restrict`) are known."""

    def __init__(self, name: str, bounds: list[str], used: set[str], body: list[Stmt]) -> None:
        self.name = name
        self.bounds = bounds
        self.used = used
        self.body = body


class LoopEmission:
    """The loop-writing half of a kernel emitter (codegen/kernel.py holds the rest)."""

    spec: KernelSpec
    lang: Language
    options: KernelOptions
    nest_groups: set[int]
    rolled_groups: set[int]  # nest groups whose small dimension is looped over, not written out
    body: FunctionBody
    em: ElementalEmitter
    sections: list[list[Stmt]]
    parts: list[Part]
    groups: int
    input_names: list[str]
    output_names: list[str]
    stored_at: dict[str, set[tuple[object, ...]] | None]

    def loop(self, dims: tuple[int, ...], stores: list[Store], parallel: bool,
             offsets: Callable[[Index], Expr] | None = None,
             roots: tuple[Instruction, ...] = ()) -> None:
        """Store every element of `stores` over `dims`.

        `offsets` maps an element's index to the linear index it is stored at (a dynamic
        update slice's window); by default the element's own linear index. When `roots`
        read a concatenate element for element, the loop is split at its seams so each part
        knows which operand it reads (no branch per element; XLA's GPU emitter cannot do
        this, which is why it refuses some concatenate fusions).
        """
        if math.prod(dims) == 0:
            return
        group = self.groups
        self.groups += 1
        in_prologue = self.body.hoisting > 0
        parallel = (parallel and not in_prologue
                    and math.prod(dims) >= self.options.parallel_min_elements
                    and max(dims, default=1) > 1)
        bound = {id(inst) for inst, _ in self.spec.inputs}
        split = concatenate_seams(roots, dims, bound) if offsets is None else None
        unrolled = self._unrolled_dimension(dims, split, group, offsets)
        if unrolled is not None:
            split = None
        flat = (group not in self.nest_groups and offsets is None and len(dims) > 1
                and split is None and unrolled is None)
        parts: list[dict[int, tuple[int, int]]] = [{}]
        if split is not None:
            axis, seams = split
            parts = [{axis: (lo, hi)} for lo, hi in zip(seams, seams[1:])]
        stmts: list[Stmt] = []
        spans: list[tuple[int, int]] = []  # each part's outermost loop, split among threads
        bound_names: list[str] = []
        with self.body.section(stmts):
            for ranges in parts:
                bounds = (self.body.fresh("lo"), self.body.fresh("hi")) if parallel else None
                if bounds is not None:
                    bound_names += bounds
                if unrolled is not None:
                    ranges = {unrolled: (0, 1)}  # a literal; the copies below set it
                index, headers, span = self._loop_headers(dims, flat, group, ranges, bounds)
                spans.append(span)
                indices = [index] if unrolled is None else [
                    Index(dims, None, tuple(cir.Int(c) if d == unrolled else m
                                            for d, m in enumerate(index.multi or ())), None)
                    for c in range(dims[unrolled])]
                with contextlib.ExitStack() as stack:
                    for var, lo, hi in headers:
                        stack.enter_context(self.body.loop(var, lo, hi))
                    self._store_all(stores, indices, offsets, len(parts) == 1 and not in_prologue,
                                    group if unrolled is not None else None)
        extent = 0  # iterations of the outermost loops shared among threads
        if parallel:
            stmts = self._parallel_part(stmts, spans, bound_names)
            extent = max(end - start for start, end in spans)
        self._add_section(stmts, extent, in_prologue)

    def _store_all(self, stores: list[Store], indices: list[Index],
                   offsets: Callable[[Index], Expr] | None, whole: bool,
                   written_out: int | None = None) -> None:
        # Every value is computed before any is stored, so an output may overwrite an input it
        # shares a buffer with (read only at the elements stored in this iteration).
        values = []
        costs = []
        for at in indices:
            before = self.body.declared
            values.append([value_of(at) for value_of, _, _, _ in stores])
            costs.append(self.body.declared - before)
            if written_out is not None and len(costs) == 2:
                first, second = costs
                if 2 * second > first and first * len(indices) > WRITE_OUT_BUDGET:
                    raise UnsharedColumns(written_out)
        for (_, pointer, _, place) in stores:
            in_place = whole and offsets is None and place is None
            self.stored_at[pointer] = {i.key for i in indices} if in_place else None
        for at_index, row in zip(indices, values):
            for (_, pointer, dtype, place), value in zip(stores, row):
                where = place or offsets
                target = where(at_index) if where else self.em.linear_of(at_index)
                self.body.assign(cir.load(pointer, target), self.lang.to_storage(dtype, value))

    def _unrolled_dimension(self, dims: tuple[int, ...], split: tuple[int, list[int]] | None,
                            group: int, offsets: Callable[[Index], Expr] | None) -> int | None:
        """A small dimension a loop nest writes out with literal indices instead of looping
        over it: the values of one iteration of the other loops are then computed in one scope
        and share their subexpressions (the four columns of a packed (N, 4) state share the
        whole CartPole step), a concatenate along it picks its operand without a branch or a
        loop of its own per piece, and the loop left over the large dimension vectorises."""
        if offsets is not None or len(dims) < 2 or group in self.rolled_groups:
            return None
        if split is not None:
            axis = split[0]
        elif group in self.nest_groups:
            axis = len(dims) - 1
        else:
            return None  # a flat loop
        if dims[axis] > UNROLL_ELEMENTS or math.prod(dims) == dims[axis]:
            return None
        return axis

    def _parallel_part(self, stmts: list[Stmt], spans: list[tuple[int, int]],
                       bounds: list[str]) -> list[Stmt]:
        """Move a loop into a function of its own, called by every thread on its share of the
        outermost loop. The function takes the kernel's pointers as `restrict` parameters:
        inside an OpenMP region they would reach the loop through a shared struct, and the
        compiler, no longer sure they don't alias, would not vectorise it."""
        used = cir_walks.names_used(stmts)
        arguments = [n for n in [*self.input_names, *self.output_names] if n in used]
        arguments += [n for n in self.body.prologue_names if n in used]
        name = f"$name_part{len(self.parts)}"  # $name: the kernel's name, given later
        self.parts.append(Part(name, bounds, used, stmts))
        thread, threads = cir.Var("hlofuse_t"), cir.Var("hlofuse_nt")
        shares: list[Expr] = []
        for start, end in spans:
            count = end - start
            for t in (thread, cir.Binary("+", thread, cir.Int(1))):
                shares.append(cir.add(start, cir.Binary(
                    "/", cir.Binary("*", cir.Int(count), t), threads)))
        return [cir.Declare(cir.INDEX, "hlofuse_t", cir.Var("HLOFUSE_THREAD"), const=True),
                cir.Declare(cir.INDEX, "hlofuse_nt", cir.Var("HLOFUSE_THREADS"), const=True),
                cir.ExprStmt(cir.Call(name, (*shares, *(cir.Var(a) for a in arguments))))]

    def _render_part(self, part: Part, kernel_parameters: list[cir.Parameter]) -> str:
        parameters = [cir.Parameter(cir.INDEX, b) for b in part.bounds]
        parameters += [p for p in kernel_parameters if p.name in part.used]
        # The kernel's locals the loop reads: its scratch arrays, and values.
        parameters += [cir.Parameter(t, n, cir.Role.SCRATCH if isinstance(t, cir.Pointer)
                                     else cir.Role.SCALAR)
                       for n, t in self.body.prologue_names.items() if n in part.used]
        function = cir.Function(part.name, parameters, part.body, cir.Linkage.PART,
                                cir.Tuning.VECTOR_LOOPS)
        return self.lang.function(function) + "\n"

    def _add_section(self, stmts: list[Stmt], extent: int, in_prologue: bool) -> None:
        """`extent` > 0: a thread team shares that many iterations of the statements."""
        if extent:
            stmts = [cir.ParallelRegion(stmts, extent=extent)]
        if in_prologue:
            self.body.prologue.stmts.extend(stmts)
        else:
            self.sections.append(stmts)

    def _loop_headers(self, dims: tuple[int, ...], flat: bool, group: int,
                      ranges: dict[int, tuple[int, int]], bounds: tuple[str, str] | None
                      ) -> tuple[Index, list[tuple[str, Expr, Expr]], tuple[int, int]]:
        """Loops over `dims` (dimension d restricted to `ranges[d]` when given), the index
        they define and the range of the outermost loop, which runs from bounds[0] to
        bounds[1] instead when bounds are given (a thread's share)."""
        if not dims:
            return SCALAR, [], (0, 1)
        headers: list[tuple[str, Expr, Expr]] = []

        def header(var: str, lo: int, hi: int) -> tuple[str, Expr, Expr]:
            if bounds is not None and not headers:
                return var, cir.Var(bounds[0]), cir.Var(bounds[1])
            return var, cir.Int(lo), cir.Int(hi)

        if (flat or len(dims) == 1) and not ranges:
            var = self.body.fresh("i")
            count = math.prod(dims)
            headers.append(header(var, 0, count))
            self.em.ranges[var] = (0, count)
            flat_multi = (cir.Var(var),) if len(dims) == 1 else None
            index = Index(dims, cir.Var(var), flat_multi, group if flat_multi is None else None)
            return index, headers, (0, count)
        multi: list[Expr] = []
        span = (0, 1)
        for d, size in enumerate(dims):
            lo, hi = ranges.get(d, (0, size))
            if hi - lo == 1:
                multi.append(cir.Int(lo))
                continue
            var = self.body.fresh("i")
            multi.append(cir.Var(var))
            self.em.ranges[var] = (lo, hi)
            if not headers:
                span = (lo, hi)
            headers.append(header(var, lo, hi))
        return Index(dims, None, tuple(multi), None), headers, span
