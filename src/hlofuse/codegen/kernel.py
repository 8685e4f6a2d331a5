"""One C function per kernel: loops over output elements around elemental expressions.

A kernel is a fusion (its fused computation) or a single unfused instruction. Its outputs are
grouped by shape and each group is one loop nest (codegen/loop_nests.py: a multi-output fusion
writes all its outputs in one pass; a horizontal fusion becomes several loops in one call);
reductions at the root go through codegen/reductions.py. Outputs may overwrite inputs read
only at the element being stored (the runtime decides whether they share a buffer); a
dynamic-update-slice at the root updates its operand in place. dot and the Threefry custom
call go through library routines of ours, called like XLA calls cuBLAS.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from hlofuse.analysis.lane_linalg import contraction_size
from hlofuse.analysis.same_values import same_values
from hlofuse.codegen import cir
from hlofuse.codegen.body import FunctionBody
from hlofuse.codegen.cir import Expr, Stmt
from hlofuse.codegen.elemental import ElementalEmitter
from hlofuse.codegen.emitter_types import (
    Binding,
    Index,
    NeedsLoopNest,
    UnsharedColumns,
    UnsupportedInstruction,
    pick,
)
from hlofuse.codegen.gather_scatter import emit_scatter
from hlofuse.codegen.kernel_spec import (
    THREEFRY_TARGET,
    EmittedKernel,
    KernelOptions,
    KernelSpec,
    Retargetable,
    kernel_comment,
    kernel_instructions,
    leaf_shape,
)
from hlofuse.codegen.language import Language
from hlofuse.codegen.linalg import LINALG_OPS, emit_linalg, is_linalg
from hlofuse.codegen.loop_nests import Part
from hlofuse.codegen.op_expressions import convert_expression
from hlofuse.codegen.reductions import Outputs, ReductionEmission
from hlofuse.codegen.retargeting import LoadRetargeting
from hlofuse.codegen.sort import emit_sort, emit_topk
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import CostClass, Op
from hlofuse.ir.shapes import Shape

# Ops computed whole into their outputs (or temporaries) by a routine of their own.
WHOLE_VALUE_OPS = (Op.DOT, Op.CUSTOM_CALL, Op.SCATTER, Op.SORT, Op.TOPK, *LINALG_OPS)
# A small kernel is compiled at -O1, scalar code that compiles quickly, where its run time is
# its launch and its memory. Where it computes much per element it is not: a vmapped RK4
# step's kernels of 1,024 elements, each with three sines, three cosines and two divisions,
# ran 122 us a call at -O1 and about 20 us vectorised (probe 47's vmapped_rk4 under
# `priority`). Work counts element operations, a math function (inlined from the math
# header: 20-40 operations) as MATH_FUNCTION_OPERATIONS and a division as
# DIVISION_OPERATIONS; past 16 operations an element at the size limit, the kernel is not
# small.
SMALL_KERNEL_WORK_PER_ELEMENT = 16
MATH_FUNCTION_OPERATIONS = 24
DIVISION_OPERATIONS = 8


class KernelEmitter(ReductionEmission):
    """Emits one kernel function from a KernelSpec."""

    def __init__(self, spec: KernelSpec, lang: Language, options: KernelOptions,
                 nest_groups: set[int], rolled_groups: set[int] | None = None) -> None:
        self.spec = spec
        self.lang = lang
        self.options = options
        self.nest_groups = nest_groups
        self.rolled_groups = rolled_groups if rolled_groups is not None else set()
        self.body = FunctionBody()
        self.body.names.reserve("hlofuse_t", "hlofuse_nt")
        self.sections: list[list[Stmt]] = []
        self.epilogue: list[Stmt] = []
        self.groups = 0
        self.input_names, self.output_names = spec.argument_names(self.body.names)
        self.arg_pointer: dict[int, str] = {}
        self.results: dict[int, tuple[str, ...]] = {}
        self.in_place: list[tuple[int, int]] = []
        self.parts: list[Part] = []
        self.function: cir.Function | None = None  # the kernel's IR, once emitted
        # Set where the code written depends on which inputs share the outputs' buffers (an
        # update copies its operand only when they differ): such a kernel is emitted again
        # after buffer assignment rather than retargeted (`emit_aliased`).
        self.layout_depends_on_aliasing = False
        # For element-wise in-place updates: every (pointer, index key) an input is read at,
        # and the index key of the loop that stores each output.
        self.reads: dict[str, set[tuple[object, ...]]] = {}
        self.stored_at: dict[str, set[tuple[object, ...]] | None] = {}
        # Every instruction the kernel computes, operands first (kernel_instructions).
        self.instructions = kernel_instructions(spec)
        self.em = ElementalEmitter(
            lang, self.body, self._bindings(), self._materialize_exprs,
            same_value=same_values([inst for inst, _ in spec.outputs],
                                   [inst for inst, _ in spec.inputs], self.instructions))

    def release(self) -> None:
        """Break the cycle between this emitter and its elemental emitter (whose loaders and
        materializer call back here), so that the kernel's statements are freed by reference
        counting once it is emitted: left to the cycle collector, the statements of a large
        module's kernels cost a sixth of its code generation to collect."""
        del self.em

    # --- arguments ----------------------------------------------------------------------

    def _bindings(self) -> dict[int, Binding]:
        trees: dict[int, dict[tuple[int, ...], Binding]] = {}
        owners: dict[int, Instruction] = {}
        through = {i: self.output_names[o] for o, i in self.spec.aliased}
        for k, ((inst, path), name) in enumerate(zip(self.spec.inputs, self.input_names)):
            shape = leaf_shape(inst, path)
            name = through.get(k, name)
            trees.setdefault(id(inst), {})[path] = self._loader(shape.dtype, name)
            owners[id(inst)] = inst
            if not path:
                self.arg_pointer[id(inst)] = name
        return {key: _tree(owners[key].shape, leaves, ()) for key, leaves in trees.items()}

    def _input_index(self, pointer: str) -> int:
        """The input argument a pointer name reads (aliased inputs read an output's)."""
        if pointer in self.input_names:
            return self.input_names.index(pointer)
        output = self.output_names.index(pointer)
        return next(i for o, i in self.spec.aliased if o == output)

    def _loader(self, dtype: DType, pointer: str) -> Callable[[Index], Expr]:
        def load(index: Index) -> Expr:
            self.reads.setdefault(pointer, set()).add(index.key)
            return self.em.load(dtype, cir.Var(pointer), index)

        return load

    def parameter_types(self) -> tuple[cir.Pointer, ...]:
        types = []
        for inst, path in self.spec.inputs:
            types.append(self.lang.pointer(leaf_shape(inst, path).dtype, True))
        for inst, path in self.spec.outputs:
            types.append(self.lang.pointer(leaf_shape(inst, path).dtype, False))
        return tuple(types)

    def kernel_parameters(self) -> list[cir.Parameter]:
        """The kernel function's parameters, each with its role: an output the kernel may
        update in place of an input (reading it first) is in-place."""
        names = [*self.input_names, *self.output_names]
        updated = {o for o, _ in self.in_place}
        roles = [cir.Role.INPUT] * len(self.spec.inputs) + [
            cir.Role.IN_PLACE if k in updated else cir.Role.OUTPUT
            for k in range(len(self.spec.outputs))]
        return [cir.Parameter(t, n, r)
                for t, n, r in zip(self.parameter_types(), names, roles, strict=True)]

    def element(self, inst: Instruction, path: tuple[int, ...] = ()) -> Callable[[Index], Expr]:
        return lambda index: pick(self.em.value(inst, index), path)

    # --- the kernel ---------------------------------------------------------------------

    def emit(self) -> EmittedKernel:
        outputs = list(enumerate(self.spec.outputs))
        done: set[int] = set()
        self._emit_library_roots(outputs, done)
        self._emit_update_slices(outputs, done)
        self._emit_reduction_groups(outputs, done)
        groups: dict[tuple[int, ...], list[tuple[int, Instruction, tuple[int, ...]]]] = {}
        for k, (inst, path) in outputs:
            if k not in done:
                groups.setdefault(leaf_shape(inst, path).dims, []).append((k, inst, path))
        for dims, members in groups.items():
            if len(members) == 1 and self._column_reduction(*members[0]):
                continue
            stores = [(self.element(inst, path), self.output_names[k],
                       leaf_shape(inst, path).dtype, None) for k, inst, path in members]
            roots = tuple(m[1] for m in members)
            if self._short_row_loop(dims, stores, roots):  # type: ignore[arg-type]
                continue
            self.loop(dims, stores, parallel=True, roots=roots)  # type: ignore[arg-type]
        return self._finish()

    def _elementwise_in_place(self) -> None:
        """An output may overwrite an input of its shape that is read only at the elements
        stored in the same iteration of the same loop (the element itself, or the row of a
        dimension written out): every element is read before any is written.
        """
        taken = {i for _, i in self.in_place}
        done = {o for o, _ in self.in_place}
        candidates = list(self.spec.in_place_hints) + [
            (k, j) for k in range(len(self.spec.outputs)) for j in range(len(self.spec.inputs))]
        read_as = {i: self.output_names[o] for o, i in self.spec.aliased}
        for k, j in candidates:
            keys = self.stored_at.get(self.output_names[k])
            if keys is None or k in done or j in taken:
                continue
            out_inst, out_path = self.spec.outputs[k]
            inst, path = self.spec.inputs[j]
            if leaf_shape(inst, path) != leaf_shape(out_inst, out_path):
                continue
            reads = self.reads.get(read_as.get(j, self.input_names[j]))
            if reads and reads <= keys:
                self.in_place.append((k, j))
                taken.add(j)
                done.add(k)

    def _finish(self) -> EmittedKernel:
        self._elementwise_in_place()
        stmts = list(self.body.prologue.stmts)
        for section in self.sections:
            stmts.extend(section)
        stmts.extend(self.epilogue)
        types = self.parameter_types()
        small = self._is_small(self.options.small_kernel_elements)
        tuning = cir.Tuning.SMALL if small else cir.Tuning.VECTOR_LOOPS
        comment = kernel_comment(self.spec)
        parameters = self.kernel_parameters()
        function = cir.Function("$name", parameters, stmts, cir.Linkage.KERNEL, tuning)
        self.function = function
        parts = "".join(self._render_part(part, parameters) for part in self.parts)
        # Parallel parts take pointers as arguments: a kernel with parts is emitted again.
        retargetable = None
        if not self.parts and not self.layout_depends_on_aliasing:
            retargetable = Retargetable(function, tuple(self.input_names),
                                        tuple(self.output_names))
        return EmittedKernel(parts + self.lang.function(function), types, tuple(self.in_place),
                             comment, small, self.spec.kind, len(self.parts), retargetable)

    def _is_small(self, limit: int) -> bool:
        """Whether every array the kernel reads or computes, and every dot's multiply count,
        stays under `limit` elements, and its element operations under
        SMALL_KERNEL_WORK_PER_ELEMENT times `limit`. The kernel's arguments are looked at
        first: a large kernel is told by them without walking its (maybe tens of thousands
        of) instructions."""
        for inst, _ in self.spec.inputs:
            if _largest_leaf(inst.shape) >= limit:
                return False
        for inst, path in self.spec.outputs:
            if _largest_leaf(leaf_shape(inst, path)) >= limit:
                return False
        work = 0
        for inst in self.instructions:
            elements = _largest_leaf(inst.shape)
            if elements >= limit:
                return False
            for operand in inst.operands:
                if _largest_leaf(operand.shape) >= limit:
                    return False
            if inst.op is Op.DOT:
                if inst.shape.num_elements * contraction_size(inst) >= limit:
                    return False
            work += elements * element_operations(inst)
        return work < SMALL_KERNEL_WORK_PER_ELEMENT * limit

    # --- dynamic-update-slice in place --------------------------------------------------

    def _emit_update_slices(self, outputs: Outputs, done: set[int]) -> None:
        for k, (inst, path) in outputs:
            if inst.op is not Op.DYNAMIC_UPDATE_SLICE or path or id(inst) in self.arg_pointer:
                continue
            done.add(k)
            self.layout_depends_on_aliasing = True
            operand, update = inst.operands[:2]
            pointer = self.output_names[k]
            source = self.arg_pointer.get(id(operand))
            if source is not None:
                if source != pointer:  # not updating the operand's buffer in place
                    self.sections.append([cir.ExprStmt(cir.call(
                        "memcpy", cir.Var(pointer), cir.Var(source),
                        cir.Int(inst.shape.byte_size)))])
                if self._only_user(operand, inst):
                    self.in_place.append((k, self._input_index(source)))
            else:
                self.loop(inst.shape.dims, [(self.element(operand), pointer, inst.dtype, None)],
                          parallel=True)
            starts = self.em.clamped_starts(inst, inst.operands[2:], inst.shape.dims,
                                            update.shape.dims)
            out_dims = inst.shape.dims

            def offset(index: Index, starts: list[Expr] = starts,
                       out_dims: tuple[int, ...] = out_dims) -> Expr:
                multi = self.em.multi_of(index)
                shifted = tuple(m if cir.is_zero(s) else self.em.index_let(cir.add(m, s))
                                for m, s in zip(multi, starts))
                return self.em.linear_of(Index(out_dims, None, shifted, None))

            self.loop(update.shape.dims, [(self.element(update), pointer, inst.dtype, None)],
                      parallel=True, offsets=offset)

    def _only_user(self, operand: Instruction, dus: Instruction) -> bool:
        """The update may be written over the operand only if nothing else reads it."""
        users = sum(1 for inst in self.instructions
                    for o in inst.operands if o is operand)
        users += sum(1 for inst, _ in self.spec.outputs if inst is operand)
        return users == 1 and dus.operands[0] is operand

    # --- library calls ------------------------------------------------------------------

    def _emit_library_roots(self, outputs: Outputs, done: set[int]) -> None:
        for _, (inst, _) in outputs:
            if inst.op not in WHOLE_VALUE_OPS or id(inst) in self.arg_pointer:
                continue
            if id(inst) in self.results:
                continue
            targets = []
            for p, leaf in enumerate(inst.shape.leaves()):
                leaf_path = (p,) if inst.shape.is_tuple else ()
                match = [j for j, (i, q) in outputs if i is inst and q == leaf_path]
                if match:
                    targets.append(self.output_names[match[0]])
                    done.add(match[0])
                else:
                    targets.append(self._temporary(leaf.dtype, leaf.num_elements))
            stmts: list[Stmt] = []
            with self.body.section(stmts):
                self._library_call(inst, targets)
            self.sections.append(stmts)
            self.results[id(inst)] = tuple(targets)

    def _materialize_exprs(self, inst: Instruction) -> tuple[Expr, ...]:
        return tuple(cir.Var(p) for p in self.materialize(inst))

    def materialize(self, inst: Instruction) -> tuple[str, ...]:
        """Pointers to `inst`'s whole value, computed once in the prologue."""
        found = self.results.get(id(inst))
        if found is not None:
            return found
        with self.body.hoisted():
            if inst.op in WHOLE_VALUE_OPS:
                targets = [self._temporary(leaf.dtype, leaf.num_elements)
                           for leaf in inst.shape.leaves()]
                self._library_call(inst, targets)
            elif inst.op is Op.REDUCE:
                leaves = inst.shape.leaves()
                targets = [self._temporary(leaf.dtype, leaf.num_elements) for leaf in leaves]
                self._reduction_group(inst.operands[0].shape.dims, inst.ints("dimensions"),
                                      [inst], [], {(id(inst), k): t
                                                   for k, t in enumerate(targets)})
            else:
                targets = [self._temporary(inst.dtype, inst.shape.num_elements)]
                self.loop(inst.shape.dims, [(self.element(inst), targets[0], inst.dtype, None)],
                          parallel=False)
        self.results[id(inst)] = tuple(targets)
        return tuple(targets)

    def _temporary(self, dtype: DType, count: int) -> str:
        name = self.body.fresh("t")
        # Its own memory: `restrict` spares the loops that write it run-time alias checks.
        self.body.prologue.stmts.append(cir.Allocate(dtype, name, max(count, 1), restrict=True))
        self.body.prologue_names[name] = self.lang.pointer(dtype, False)
        self.epilogue.append(cir.Release(name))
        return name

    def operand_pointer(self, inst: Instruction) -> str:
        pointer = self.arg_pointer.get(id(inst))
        if pointer is None:
            return self.materialize(inst)[0]
        self.reads.setdefault(pointer, set()).add(("whole array",))  # never updated in place
        return pointer

    def _library_call(self, inst: Instruction, targets: list[str]) -> None:
        if inst.op is Op.DOT:
            self._dot(inst, targets[0])
            return
        if inst.op is Op.SCATTER:
            emit_scatter(self, inst, targets)
            return
        if inst.op is Op.SORT:
            emit_sort(self, inst, targets)
            return
        if inst.op is Op.TOPK:
            emit_topk(self, inst, targets)
            return
        if is_linalg(inst):
            emit_linalg(self, inst, targets)
            return
        target = inst.attrs.get("custom_call_target")
        if target != THREEFRY_TARGET:
            raise UnsupportedInstruction(
                f"%{inst.name}: custom-call target {target!r} has no library function")
        leaves = inst.shape.leaves()
        if (len(inst.operands) != 4 or len(leaves) != 2
                or any(o.dtype is not DType.U32 or o.shape.dims != leaves[0].dims
                       for o in inst.operands)
                or any(leaf.dtype is not DType.U32 for leaf in leaves)):
            raise UnsupportedInstruction(
                f"%{inst.name}: {THREEFRY_TARGET} takes four u32 arrays of one shape and "
                "returns two")
        pointers = [cir.Var(self.operand_pointer(o)) for o in inst.operands]
        count = leaves[0].num_elements
        self.body.call("hlofuse_rt_threefry2x32", *pointers, cir.Var(targets[0]),
                       cir.Var(targets[1]), cir.Int(count), extent=max(count, 1))

    def _dot(self, inst: Instruction, target: str) -> None:
        lhs, rhs = inst.operands
        result = inst.dtype
        compute = DType.F32 if result in (DType.F16, DType.BF16) else result
        lb, rb = inst.ints("lhs_batch_dims"), inst.ints("rhs_batch_dims")
        lc, rc = inst.ints("lhs_contracting_dims"), inst.ints("rhs_contracting_dims")
        lf = tuple(d for d in range(lhs.shape.rank) if d not in lb + lc)
        rf = tuple(d for d in range(rhs.shape.rank) if d not in rb + rc)
        a, a_strides = self._dot_operand(lhs, compute, (lb, lf, lc))
        b, b_strides = self._dot_operand(rhs, compute, (rb, rc, rf))
        batch = math.prod(lhs.shape.dims[d] for d in lb)
        m = math.prod(lhs.shape.dims[d] for d in lf)
        k = math.prod(lhs.shape.dims[d] for d in lc)
        n = math.prod(rhs.shape.dims[d] for d in rf)
        count = inst.shape.num_elements
        out = target if compute is result else self._temporary(compute, count)
        sizes = (batch, m, n, k, *a_strides, *b_strides)
        # The routine shares the rows of every batch among its threads.
        self.body.call(self.lang.dot_routines[compute], cir.Var(a), cir.Var(b), cir.Var(out),
                       *(cir.Int(x) for x in sizes), extent=max(batch * m, 1))
        if out == target:
            return
        var = self.body.fresh("i")
        with self.body.loop(var, 0, count):
            value = self.lang.round_to(result, cir.load(out, cir.Var(var)))
            self.body.assign(cir.load(target, cir.Var(var)), self.lang.to_storage(result, value))

    def _dot_operand(self, inst: Instruction, compute: DType,
                     groups: tuple[tuple[int, ...], ...]) -> tuple[str, tuple[int, int, int]]:
        """Pointer and (batch, row, column) strides; a canonical copy when dims don't merge."""
        dims = inst.shape.dims
        strides = _strides(dims)
        merged = [_merge(group, dims, strides) for group in groups]
        if inst.dtype is compute and all(s is not None for s in merged):
            a, b, c = (s for s in merged if s is not None)
            return self.operand_pointer(inst), (a, b, c)
        order = [d for group in groups for d in group]
        canonical = tuple(dims[d] for d in order)
        target = self._temporary(compute, inst.shape.num_elements)

        def read(index: Index) -> Expr:
            multi = self.em.multi_of(index)
            operand_multi: list[Expr] = [cir.Int(0)] * len(order)
            for position, d in enumerate(order):
                operand_multi[d] = multi[position]
            value = self.em.array_value(inst, Index(dims, None, tuple(operand_multi), None))
            expr = convert_expression(self.lang, inst.dtype, compute, value)
            return self.body.let(self.lang.register_type(compute), expr)

        self.nest_groups.add(self.groups)  # the permutation needs per-dimension indices
        self.loop(canonical, [(read, target, compute, None)], parallel=False)
        sizes = [math.prod(dims[d] for d in group) for group in groups]
        return target, (sizes[1] * sizes[2], sizes[2], 1)


def _strides(dims: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    stride = 1
    for d in reversed(dims):
        out.append(stride)
        stride *= d
    return tuple(reversed(out))


def _merge(group: tuple[int, ...], dims: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """The stride of a group of dimensions read as one, or None if they are not contiguous."""
    kept = [d for d in group if dims[d] != 1]
    if not kept:
        return 0
    for a, b in zip(kept, kept[1:]):
        if strides[a] != strides[b] * dims[b]:
            return None
    return strides[kept[-1]]


def _tree(shape: Shape, leaves: dict[tuple[int, ...], Binding],
          path: tuple[int, ...]) -> Binding:
    if path in leaves:
        return leaves[path]
    if not shape.is_tuple:
        raise UnsupportedInstruction("a kernel input leaf has no argument")
    return tuple(_tree(e, leaves, path + (k,)) for k, e in enumerate(shape.elements))


DEFAULT_OPTIONS = KernelOptions()


def emit_aliased(previous: EmittedKernel, spec: KernelSpec, lang: Language,
                 options: KernelOptions = DEFAULT_OPTIONS) -> EmittedKernel:
    """The kernel again once buffer assignment gave some outputs their inputs' buffers
    (`spec.aliased`): those inputs are read through the outputs' pointers. Where the pointers
    are only loaded from, the first emission's statements are retargeted and printed (the same
    text as emitting again, at a fraction of the cost: a large kernel's emission is most of
    code generation); otherwise the kernel is emitted again."""
    kept = previous.retargetable
    if kept is not None:
        renamed = {kept.input_names[i]: kept.output_names[o] for o, i in spec.aliased}
        body = LoadRetargeting(renamed).apply(kept.function.body)
        if body is not None:
            function = dataclasses.replace(kept.function, body=body)
            return dataclasses.replace(previous, code=lang.function(function),
                                       retargetable=None)
    return emit_kernel(spec, lang, options)


def emit_kernel(spec: KernelSpec, lang: Language,
                options: KernelOptions = DEFAULT_OPTIONS) -> EmittedKernel:
    """The kernel's C function; flat loops are tried first, nests where a flat one can't work."""
    if spec.own_emitter:
        # A custom fusion has an emitter of its own, built on this module's pieces.
        from hlofuse.codegen.whole_loop import emit_whole_loop

        return emit_whole_loop(spec, lang, options)
    nest_groups: set[int] = set()
    rolled_groups: set[int] = set()
    while True:
        try:
            emitter = KernelEmitter(spec, lang, options, nest_groups, rolled_groups)
            try:
                return emitter.emit()
            finally:
                emitter.release()
        except NeedsLoopNest as e:
            if e.group in nest_groups:
                raise
            nest_groups.add(e.group)
        except UnsharedColumns as e:
            if e.group in rolled_groups:
                raise
            rolled_groups.add(e.group)


def _largest_leaf(shape: Shape) -> int:
    if not shape.is_tuple:
        return shape.num_elements if shape.is_array else 0
    return max((_largest_leaf(e) for e in shape.elements), default=0)


def element_operations(inst: Instruction) -> int:
    """What computing one element of `inst` costs, in operations (SMALL_KERNEL_WORK_...)."""
    cost = inst.op.definition.cost
    if cost is CostClass.FREE:
        return 0
    if cost is CostClass.TRANSCENDENTAL:
        return MATH_FUNCTION_OPERATIONS
    if cost is CostClass.TWO_TRANSCENDENTALS:
        return 2 * MATH_FUNCTION_OPERATIONS
    if cost is CostClass.DIVISION:
        return DIVISION_OPERATIONS
    return 1
