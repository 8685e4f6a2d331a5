"""Reduction kernels for the CUDA target, shaped after XLA's GPU reduction emitters.

A kernel whose outputs are reduces of one input shape over the same dimensions (one reduce,
or several: XLA's multi-output reduction fusion), element-wise functions of such reduces
(XLA's reduction epilogue: `neg(sum(x) / n)`), and outputs of the reduce input's shape (the
fusion's side outputs, written by the thread that reads the element) is classified as XLA's
GetReductionKindAndContiguousComponents does, after dropping size-1 dimensions and merging
adjacent dimensions of one kind:

- Row reduction (`[major, outer, extent]`: the reduced dimensions minor-most, or XLA's
  batched (R, K, R) with `major` reduced rows before the kept ones): a warp per row when the
  row is short, a block per row when it is long. Each thread accumulates a strided slice of
  each of the row's `major` segments, then the warp combines its 32 partial values with
  `__shfl_down_sync`; a block also passes the warps' totals through shared memory to its
  first warp, which combines them the same way.
- Column reduction (`[outer, extent, inner]`, kept dimensions after the reduced ones): a tile
  of 32 columns per block; lane x of warp y accumulates column x over the rows y, y + 8, ...;
  the 8 x 32 partial values are transposed through shared memory, so each group of 8
  consecutive lanes holds one column's partial values and combines them with shuffles of
  width 8.
- Elemental: reduced dimensions where neither they nor the kept ones are contiguous
  (`{0, 2}` of a rank-4 array), or a reduction XLA's IsUnnestedReductionFasterThanElemental
  leaves to the loop emitter (rows shorter than a warp, short narrow columns): one thread per
  output element reduces its elements in order (XLA's ReductionSplitter, which first splits
  a non-contiguous reduce into two, is a pass: not done here).

XLA's row and column emitters (RowReductionFusion, ColumnReductionFusion with a 32-column
tile) are the model; simpler here: the column tile is 8 warps tall (XLA's: 32 x 32 threads),
short rows are not packed several to a warp, loads are not vectorised.

The initial value is applied last (`init op total`), as the reference does. A reducer that
is one op with an identity (add, multiply, min, max, and, or, xor) starts every thread at the
identity; any other (variadic ones such as argmax included) starts each thread empty, with a
flag, so lanes that saw no element drop out of the tree. f16 and bf16 reduce as XLA compiles
them for sm_80 (our target): the reducer in the reduce's own type, rounded after every
application, unless XLA's GpuFloatSupport sends the reduce through FloatNormalization to f32
(a bf16 reducer with add, multiply or subtract: those need Hopper); then a one-op bf16 add or
multiply accumulates in f32 and rounds once. Anything else (a bf16 reducer of several ops
that would be normalised, a kernel that still needs a temporary or a loop nest) returns
None: the caller emits the CPU's loops, on one thread. A kernel that holds reduces but whose
outputs are not reduces element by element (a broadcast or concatenate of sums: XLA's loop
emitter) gets a thread per output element computing the reduces it reads in order.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

from hlofuse.analysis.reducers import identity, reducer_op
from hlofuse.codegen import cir
from hlofuse.codegen.cir import Expr, Stmt
from hlofuse.codegen.emitter_types import (
    Index,
    NeedsLoopNest,
    UnsupportedInstruction,
    Value,
    pick,
)
from hlofuse.codegen.kernel import KernelEmitter
from hlofuse.codegen.kernel_spec import (
    EmittedKernel,
    KernelOptions,
    KernelSpec,
    kernel_comment,
    leaf_shape,
)
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op
from hlofuse.targets.cuda.language import CudaLanguage
from hlofuse.targets.cuda.reduction_layout import (
    BLOCK,
    WARP,
    WARPS_PER_BLOCK,
    ReductionLayout,
    low_precision_plan,
    reaches_reduce,
    reduction_layout,
)


def emit_cuda_reduction(spec: KernelSpec, lang: CudaLanguage,
                        options: KernelOptions) -> EmittedKernel | None:
    """The kernel as a grid (warps, blocks, column tiles, or a thread per output element for
    the elemental and loop kernels), or None (see the module's docstring)."""
    layout = reduction_layout(spec)
    try:
        if layout is None:
            return _LoopKernel(spec, lang, options, set()).emit_grid() \
                if _loop_with_reduce(spec) else None
        return _ReductionKernel(spec, lang, options, set(), layout).emit_grid()
    except (NeedsLoopNest, UnsupportedInstruction):
        return None


def _loop_with_reduce(spec: KernelSpec) -> bool:
    """A kernel XLA gives its loop emitter although it holds a reduce: the outputs are not
    reduces or functions of them element by element (a broadcast of a sum, a concatenate of
    sums). Each output element then computes the reduces it reads itself."""
    bound = {id(inst) for inst, _ in spec.inputs}
    if not spec.outputs or spec.aliased or any(id(inst) in bound for inst, _ in spec.outputs):
        return False  # an in-place update: the CPU's emitter orders its reads and writes
    reach: dict[int, bool] = {}
    return any(reaches_reduce(inst, bound, reach) for inst, _ in spec.outputs)


def _store_output(kernel: KernelEmitter, output: int, inst: Instruction,
                  path: tuple[int, ...], position: Expr) -> None:
    """Output `output` (leaf `path` of `inst`) at the linear `position`, in storage form."""
    shape = leaf_shape(inst, path)
    value = pick(kernel.em.value(inst, Index(shape.dims, position, None, None)), path)
    if not isinstance(value, Expr):
        raise UnsupportedInstruction(f"%{inst.name}: expected an array value")
    kernel.body.assign(cir.load(kernel.output_names[output], position),
                       kernel.lang.to_storage(shape.dtype, value))


class _LoopKernel(KernelEmitter):
    """XLA's loop emitter: a thread per output element; a reduce it reads is computed in
    order where it is read (XLA's elemental reduce), never into a temporary."""

    def emit_grid(self) -> EmittedKernel | None:
        em, body = self.em, self.body
        em.materialize = None  # no stored rows for a pairwise sum: the elemental loop
        # Outputs of several shapes (slices of one concatenate) share the largest one's grid.
        count = max(leaf_shape(inst, path).num_elements for inst, path in self.spec.outputs)
        stmts: list[Stmt] = []
        with body.section(stmts):
            out = body.variable(cir.INDEX, "unit", cir.Var("HLOFUSE_THREAD"))
            with body.while_(cir.Binary("<", out, cir.Int(count))):
                em._no_hoist += 1
                try:
                    for k, (inst, path) in enumerate(self.spec.outputs):
                        shape = leaf_shape(inst, path)
                        guard = body.if_(cir.Binary("<", out, cir.Int(shape.num_elements))) \
                            if shape.num_elements < count else contextlib.nullcontext()
                        with guard:
                            _store_output(self, k, inst, path, out)
                finally:
                    em._no_hoist -= 1
                body.emit(cir.Assign(out, cir.Var("HLOFUSE_THREADS"), "+="))
        prologue = body.prologue.stmts
        if self.parts or self.epilogue or not all(_plain_declaration(s) for s in prologue):
            return None
        types = self.parameter_types()
        function = cir.Function("$name", self.kernel_parameters(), [*prologue, *stmts],
                                cir.Linkage.KERNEL)
        assert isinstance(self.lang, CudaLanguage)
        code = self.lang.grid_function(function, max(count, 1), BLOCK)
        comment = f"{kernel_comment(self.spec)}; CUDA loop kernel with elemental reduces"
        return EmittedKernel(code, types, (), comment, False, self.spec.kind, 0)


class _ReductionKernel(KernelEmitter):
    def __init__(self, spec: KernelSpec, lang: CudaLanguage, options: KernelOptions,
                 nest_groups: set[int], layout: ReductionLayout) -> None:
        super().__init__(spec, lang, options, nest_groups)
        self.cuda = lang
        self.layout = layout

    def emit_grid(self) -> EmittedKernel | None:
        stmts: list[Stmt] = []
        with self.body.section(stmts):
            kind = self.layout.kind
            if kind == "elemental":
                self._elemental()
            elif kind == "warp-row":
                self._warp_rows()
            elif kind == "block-row":
                self._block_rows()
            else:
                self._column_tiles()
        prologue = self.body.prologue.stmts
        if self.parts or self.epilogue or not all(_plain_declaration(s) for s in prologue):
            return None  # a temporary or a loop outside the grid: the one-thread kernel
        types = self.parameter_types()
        function = cir.Function("$name", self.kernel_parameters(), [*prologue, *stmts],
                                cir.Linkage.KERNEL)
        code = self.cuda.grid_function(function, self.layout.threads, BLOCK)
        comment = f"{kernel_comment(self.spec)}; CUDA {kind} reduction"
        return EmittedKernel(code, types, (), comment, False, self.spec.kind, 0)

    # --- pieces ---------------------------------------------------------------------------

    def _start(self) -> list[_State]:
        """Each reduce's accumulators: at its op's identity, or empty (a flag says whether
        they hold a value yet) for a reducer without one (variadic, argmax)."""
        out = []
        for r in self.layout.heroes:
            start = _identity(self.cuda, r)
            if start is not None:
                out.append(_State([self.body.variable(self.lang.register_type(r.dtype), "acc",
                                                      start)], None))
                continue
            values = [self.body.variable(self.lang.register_type(t), "acc",
                                         self.lang.literal(t, 0)) for t in _types(r)]
            out.append(_State(values, self.body.variable(cir.Special.INT, "has", cir.Int(0))))
        return out

    def _combine(self, r: Instruction, state: _State, others: list[Expr],
                 other_has: Expr | None) -> None:
        """state = reducer(state, others); `other_has` None: the others are values."""
        em, body = self.em, self.body
        if low_precision_plan(r) == "f32":
            new: list[Expr] = [_wide_step(r, state.values[0], others[0])]
        else:
            new = em.apply_reducer(r.calls[0], list(state.values), others)
        if state.has is None:
            body.assign(state.values[0], new[0])
            return
        # Copies first: the reducer's results may read accumulators assigned below.
        frozen = [body.variable(self.lang.register_type(t), "new", e)
                  for t, e in zip(_types(r), new)]
        for value, combined, other in zip(state.values, frozen, others):
            pick: Expr = cir.Select(state.has, combined, other)
            if other_has is not None:
                pick = cir.Select(other_has, pick, value)
            body.assign(value, pick)
        body.assign(state.has, cir.Int(1) if other_has is None
                    else cir.Binary("|", state.has, other_has))

    def _accumulate(self, states: list[_State], linear: Expr) -> None:
        """Each reduce takes the element at `linear`; side outputs are written there (every
        kind of kernel reads each input element exactly once)."""
        em = self.em
        position = em.index_let(linear)
        index = Index(self.layout.in_dims, position, None, None)
        for state, r in zip(states, self.layout.heroes):
            xs = [em.array_value(x, index) for x in r.operands[:len(r.operands) // 2]]
            self._combine(r, state, xs, None)
        if not self.layout.side:
            return
        em._no_hoist += 1
        try:
            for k, inst in self.layout.side:
                value = em.value(inst, index)
                if not isinstance(value, Expr):
                    raise UnsupportedInstruction(f"%{inst.name}: expected an array value")
                self.body.assign(cir.load(self.output_names[k], position),
                                 self.lang.to_storage(inst.dtype, value))
        finally:
            em._no_hoist -= 1

    def _shuffle(self, states: list[_State], width: int) -> None:
        """Each group of `width` lanes combines its values into its first lane."""
        offset = width // 2
        while offset:
            for state, r in zip(states, self.layout.heroes):
                others = [self._shuffled(self.lang.register_type(t), v, offset, width)
                          for t, v in zip(_types(r), state.values)]
                other_has = None if state.has is None else \
                    self._shuffled(cir.Special.INT, state.has, offset, width)
                self._combine(r, state, others, other_has)
            offset //= 2

    def _shuffled(self, vtype: cir.Type, value: Expr, offset: int, width: int) -> Expr:
        return self.body.let(vtype, cir.call("hlofuse_shfl_down", value, cir.Int(offset),
                                             cir.Int(width)))

    def _store(self, states: list[_State], position: Expr) -> None:
        """Each reduce's result is `init op total` (the init alone when it reduced nothing);
        an output computed from reduces (XLA's reduction epilogue) reads them at its own
        position, computed here, not hoisted."""
        em, body = self.em, self.body
        for state, r in zip(states, self.layout.heroes):
            count = len(r.operands) // 2
            inits = [em.scalar(i) for i in r.operands[count:]]
            if low_precision_plan(r) == "f32":  # rounded once, as the convert after it
                results = [self.lang.round_to(r.dtype, _wide_step(r, inits[0],
                                                                  state.values[0]))]
            else:
                results = em.apply_reducer(r.calls[0], inits, list(state.values))
            values = []
            for t, init, result in zip(_types(r), inits, results):
                chosen = result if state.has is None else cir.Select(state.has, result, init)
                values.append(body.let(self.lang.register_type(t), chosen))
            em.bindings[id(r)] = _constant(values[0]) if not r.shape.is_tuple \
                else tuple(_constant(v) for v in values)
        em._no_hoist += 1
        try:
            for k, inst, path in self.layout.outputs:
                _store_output(self, k, inst, path, position)
        finally:
            em._no_hoist -= 1

    def _shared(self, r: Instruction, count: int, state: _State) -> _State:
        """Shared arrays of `count` for each accumulator (and flag) of a reduce."""
        def array(vtype: cir.Type) -> cir.Var:
            name = self.body.fresh("shared")
            self.body.declare(vtype, name, dims=(count,), block_shared=True)
            return cir.Var(name)

        values = [array(self.lang.register_type(t)) for t in _types(r)]
        return _State(values, None if state.has is None else array(cir.Special.INT))

    def _publish(self, states: list[_State], shared: list[_State], at: Expr) -> None:
        for state, arrays in zip(states, shared):
            for value, array in zip(state.values, arrays.values):
                self.body.assign(cir.Load(array, (at,)), value)
            if state.has is not None and arrays.has is not None:
                self.body.assign(cir.Load(arrays.has, (at,)), state.has)

    def _gather(self, shared: list[_State], at: Expr, valid: Expr | None) -> list[_State]:
        """New accumulators read from shared memory at `at` (empty where not `valid`)."""
        out = []
        for arrays, r in zip(shared, self.layout.heroes):
            start = _identity(self.cuda, r)
            values = []
            for t, array in zip(_types(r), arrays.values):
                read: Expr = cir.Load(array, (at,))
                if valid is not None:
                    read = cir.Select(valid, read, start if start is not None
                                      else self.lang.literal(t, 0))
                values.append(self.body.variable(self.lang.register_type(t), "acc", read))
            has = None
            if arrays.has is not None:
                flag: Expr = cir.Load(arrays.has, (at,))
                if valid is not None:
                    flag = cir.Select(valid, flag, cir.Int(0))
                has = self.body.variable(cir.Special.INT, "has", flag)
            out.append(_State(values, has))
        return out

    def _grid_stride(self, start: str, stride: str) -> tuple[cir.Var, Stmt]:
        """`v = start; while (v < count) { ...; v += stride; }`: the loop and its step."""
        var = self.body.variable(cir.INDEX, "unit", cir.Var(start))
        return var, cir.Assign(var, cir.Var(stride), "+=")

    def _row_elements(self, states: list[_State], row: Expr, first: Expr, stride: int) -> None:
        """A thread's share of a row: elements first, first + stride, ... of each of the
        row's `major` segments (one segment unless it is XLA's batched row reduction)."""
        body, layout = self.body, self.layout
        j = body.fresh("j")
        if layout.major == 1:
            with body.loop(j, first, layout.extent, step=stride):
                self._accumulate(states, cir.add(cir.mul(row, layout.extent), cir.Var(j)))
            return
        z = body.fresh("z")
        with body.loop(z, 0, layout.major):
            segment = cir.add(cir.mul(cir.Var(z), layout.outer), row)
            with body.loop(j, first, layout.extent, step=stride):
                self._accumulate(states, cir.add(cir.mul(segment, layout.extent), cir.Var(j)))

    # --- the kernels ---------------------------------------------------------------------

    def _elemental(self) -> None:
        """XLA's loop emitter for a reduce: a thread per output element reduces it in order."""
        body, layout = self.body, self.layout
        dims = layout.in_dims
        strides = [math.prod(dims[d + 1:]) for d in range(len(dims))]
        kept = [d for d in range(len(dims)) if d not in layout.reduced]
        count = math.prod(dims[d] for d in kept)
        out, step = self._grid_stride("HLOFUSE_THREAD", "HLOFUSE_THREADS")
        with body.while_(cir.Binary("<", out, cir.Int(count))):
            base: Expr = cir.Int(0)
            rest: Expr = out
            wide = [d for d in kept if dims[d] != 1]
            for d in reversed(wide):
                coordinate = rest if d == wide[0] else \
                    body.let(cir.INDEX, cir.Binary("%", rest, cir.Int(dims[d])), "c")
                if d != wide[0]:
                    rest = body.let(cir.INDEX, cir.Binary("/", rest, cir.Int(dims[d])), "rest")
                base = cir.add(base, cir.mul(coordinate, strides[d]))
            start = body.let(cir.INDEX, base, "base")
            states = self._start()
            loops = [d for d in layout.reduced if dims[d] != 1]
            with contextlib.ExitStack() as nest:
                linear: Expr = start
                for d in loops:
                    v = body.fresh("r")
                    nest.enter_context(body.loop(v, 0, dims[d]))
                    linear = cir.add(linear, cir.mul(cir.Var(v), strides[d]))
                self._accumulate(states, linear)
            self._store(states, out)
            body.emit(step)


    def _warp_rows(self) -> None:
        body, layout = self.body, self.layout
        lane = body.let(cir.INDEX, cir.Var("HLOFUSE_LANE"), "lane")
        row, step = self._grid_stride("HLOFUSE_WARP", "HLOFUSE_WARPS")
        with body.while_(cir.Binary("<", row, cir.Int(layout.outer))):
            accumulators = self._start()
            self._row_elements(accumulators, row, lane, WARP)
            self._shuffle(accumulators, WARP)
            with body.if_(cir.Binary("==", lane, cir.Int(0))):
                self._store(accumulators, row)
            body.emit(step)

    def _block_rows(self) -> None:
        body, layout = self.body, self.layout
        lane = body.let(cir.INDEX, cir.Var("HLOFUSE_LANE"), "lane")
        warp = body.let(cir.INDEX, cir.Var("HLOFUSE_WARP_IN_BLOCK"), "warp")
        row, step = self._grid_stride("HLOFUSE_BLOCK", "HLOFUSE_BLOCKS")
        shared: list[_State] | None = None
        with body.while_(cir.Binary("<", row, cir.Int(layout.outer))):
            states = self._start()
            if shared is None:
                with body.hoisted():
                    shared = [self._shared(r, WARPS_PER_BLOCK, state)
                              for r, state in zip(layout.heroes, states)]
            self._row_elements(states, row, cir.Var("HLOFUSE_BLOCK_THREAD"), BLOCK)
            self._shuffle(states, WARP)
            with body.if_(cir.Binary("==", lane, cir.Int(0))):
                self._publish(states, shared, warp)
            body.call("__syncthreads")
            with body.if_(cir.Binary("==", warp, cir.Int(0))):
                totals = self._gather(shared, lane,
                                      cir.Binary("<", lane, cir.Int(WARPS_PER_BLOCK)))
                self._shuffle(totals, WARP)
                with body.if_(cir.Binary("==", lane, cir.Int(0))):
                    self._store(totals, row)
            body.call("__syncthreads")  # the totals are read before the next row writes them
            body.emit(step)

    def _column_tiles(self) -> None:
        body, layout = self.body, self.layout
        tiles_per_outer = -(-layout.inner // WARP)
        pitch = WARP + 1  # a padded row: the transposed reads hit 32 different banks
        lane = body.let(cir.INDEX, cir.Var("HLOFUSE_LANE"), "lane")
        warp = body.let(cir.INDEX, cir.Var("HLOFUSE_WARP_IN_BLOCK"), "warp")
        tiles = layout.outer * tiles_per_outer
        tile, step = self._grid_stride("HLOFUSE_BLOCK", "HLOFUSE_BLOCKS")
        shared: list[_State] | None = None
        with body.while_(cir.Binary("<", tile, cir.Int(tiles))):
            o = body.let(cir.INDEX, cir.Binary("/", tile, cir.Int(tiles_per_outer)), "o")
            first = body.let(cir.INDEX, cir.mul(cir.Binary("%", tile, cir.Int(tiles_per_outer)),
                                                WARP), "first")
            column = body.let(cir.INDEX, cir.add(first, lane), "column")
            states = self._start()
            if shared is None:
                with body.hoisted():
                    shared = [self._shared(r, WARPS_PER_BLOCK * pitch, state)
                              for r, state in zip(layout.heroes, states)]
            with body.if_(cir.Binary("<", column, cir.Int(layout.inner))):
                r = body.fresh("r")
                with body.loop(r, warp, layout.extent, step=WARPS_PER_BLOCK):
                    row = cir.add(cir.mul(o, layout.extent), cir.Var(r))
                    self._accumulate(states, cir.add(cir.mul(row, layout.inner), column))
            self._publish(states, shared, cir.add(cir.mul(warp, pitch), lane))
            body.call("__syncthreads")
            # Transposed: lanes 8c .. 8c + 7 hold column c's partial values.
            thread = cir.Var("HLOFUSE_BLOCK_THREAD")
            mine = body.let(cir.INDEX, cir.Binary("/", thread, cir.Int(WARPS_PER_BLOCK)), "c")
            part = body.let(cir.INDEX, cir.Binary("%", thread, cir.Int(WARPS_PER_BLOCK)), "p")
            totals = self._gather(shared, cir.add(cir.mul(part, pitch), mine), None)
            self._shuffle(totals, WARPS_PER_BLOCK)
            out_column = cir.add(first, mine)
            last = cir.Binary("&&", cir.Binary("==", part, cir.Int(0)),
                              cir.Binary("<", out_column, cir.Int(layout.inner)))
            with body.if_(last):
                self._store(totals, cir.add(cir.mul(o, layout.inner), out_column))
            body.call("__syncthreads")  # the tile is read before the next one overwrites it
            body.emit(step)


@dataclass(frozen=True)
class _State:
    """A reduce's accumulators (one per operand) and, for a reducer without an identity,
    the flag saying whether they hold a value yet (None: they start at the identity)."""

    values: list[cir.Var]
    has: cir.Var | None


def _wide_step(r: Instruction, total: Expr, value: Expr) -> Expr:
    """One step of a bf16 add or multiply reduce accumulated in f32 (FloatNormalization)."""
    return cir.Binary("+" if reducer_op(r.calls[0]) is Op.ADD else "*", total, value)


def _types(r: Instruction) -> list[DType]:
    return [x.dtype for x in r.operands[:len(r.operands) // 2]]


def _identity(lang: CudaLanguage, r: Instruction) -> Expr | None:
    """The identity of a one-operand reduce's op, as a literal; None without one."""
    if len(r.operands) != 2:
        return None
    op = reducer_op(r.calls[0])
    value = None if op is None else identity(op, r.dtype)
    return None if value is None else lang.literal(r.dtype, value.item())


def _constant(value: Expr) -> Callable[[Index], Value]:
    """A binding whose every element is `value` (a reduce's result at the store's position)."""
    return lambda index: value


def _plain_declaration(s: Stmt) -> bool:
    """A value declared once (no memory of its own): every thread may compute it."""
    if isinstance(s, cir.Declare):  # scratch memory is an Allocate
        return not s.dims or s.block_shared
    return isinstance(s, cir.ExprStmt) and isinstance(s.expr, cir.Cast) \
        and s.expr.to is cir.Special.VOID
