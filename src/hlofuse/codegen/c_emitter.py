"""One C function per kernel: loops over output elements around elemental expressions.

A kernel is a fusion (its fused computation) or a single unfused instruction. Its outputs are
grouped by shape and each group is one loop nest (a multi-output fusion writes all its outputs
in one pass; a horizontal fusion becomes several loops in one call). A loop over output
elements is flat when every operand can be read through the linear index, otherwise a nest over
the dimensions; a concatenate read element for element splits it into branch-free parts. Above
a size threshold the outermost loop is shared among OpenMP threads, each calling the loop as a
function of its own with `restrict` pointers, so the compiler vectorises it.

Reductions put the reduced loop inside. Root reductions over one domain, and outputs of the
input's shape, are computed in one pass that keeps the reduced values in rows; the rows are
then reduced in the reference's order (NumPy's pairwise order for float sums), so results
match the interpreter bit for bit. Column reductions of other reducers keep a block of
accumulators so the inner loop runs along contiguous memory. Outputs may overwrite inputs read
only at the element being stored (the runtime decides whether they share a buffer); a
dynamic-update-slice at the root updates its operand in place. dot and the Threefry custom
call go through library routines of ours, called like XLA calls cuBLAS.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from hlofuse.codegen import templates
from hlofuse.codegen.elemental import (
    SCALAR, UNROLL_ELEMENTS, Binding, ElementalEmitter, FunctionBody, Index, NeedsLoopNest,
    UnsupportedInstruction, Accumulation, Value, accumulation, reduction_order, simple_reducer)
from hlofuse.codegen.elementwise import convert_expression
from hlofuse.codegen.language import CLanguage
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import ELEMENTWISE_OPS, Op
from hlofuse.ir.shapes import Shape

THREEFRY_TARGET = "hlofuse_threefry2x32"
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def sanitize(name: str) -> str:
    """An HLO name as it may appear in a C comment: [A-Za-z0-9_.-] only."""
    return _SAFE_NAME.sub("_", name)[:80] or "_"


@dataclass(frozen=True)
class KernelSpec:
    """What one kernel computes.

    `inputs` and `outputs` list the kernel's arguments in order, each as (instruction, tuple
    path): an input binds that leaf of the instruction's value to a pointer argument; an
    output stores that leaf of the instruction's value. For a fusion the inputs are its fused
    parameters (and array constants); for an unfused instruction they are its operands.
    """

    label: str
    kind: str
    inputs: tuple[tuple[Instruction, tuple[int, ...]], ...]
    outputs: tuple[tuple[Instruction, tuple[int, ...]], ...]
    instructions: tuple[str, ...] = ()
    # (output, input) pairs the runtime would like to share a buffer (a loop's new state and
    # its old value); tried first when the kernel decides what may be updated in place.
    in_place_hints: tuple[tuple[int, int], ...] = ()
    # (output, input) pairs that do share a buffer in this call: the kernel then reads the
    # input through the output's pointer, so every pointer stays `restrict` (no two name the
    # same memory) and loops still vectorise.
    aliased: tuple[tuple[int, int], ...] = ()
    # A fusion's backend_config text: which emitter a kCustom fusion needs (whole_loop.py).
    backend_config: str = ""


@dataclass(frozen=True)
class KernelOptions:
    parallel_min_elements: int = 16384
    small_kernel_elements: int = 2048


@dataclass(frozen=True)
class EmittedKernel:
    """A kernel function with its name left as $name (identical kernels share one function)."""

    definition: str
    parameter_types: tuple[str, ...]
    # (output argument, input argument) pairs whose buffers may be the same one: an in-place
    # dynamic-update-slice. The kernel copies the input first when they differ.
    in_place: tuple[tuple[int, int], ...]
    comment: str
    is_small: bool


def leaf_shape(inst: Instruction, path: tuple[int, ...]) -> Shape:
    shape = inst.shape
    for k in path:
        shape = shape.elements[k]
    return shape


def pick(value: Value, path: tuple[int, ...]) -> str:
    for k in path:
        assert isinstance(value, tuple)
        value = value[k]
    assert isinstance(value, str)
    return value


MAX_CONCATENATE_PARTS = 16


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
    edges = sorted(seams[axis])
    if len(edges) - 1 > MAX_CONCATENATE_PARTS or len(edges) <= 2:
        return None
    return axis, edges


def kernel_instructions(spec: KernelSpec) -> list[Instruction]:
    """Every instruction the kernel computes (operands before users), bound inputs excluded."""
    bound = {id(inst) for inst, _ in spec.inputs}
    order: list[Instruction] = []
    seen: set[int] = set(bound)
    stack: list[tuple[Instruction, int]] = []
    for root, _ in spec.outputs:
        if id(root) in seen:
            continue
        seen.add(id(root))
        stack.append((root, 0))
        while stack:
            inst, k = stack.pop()
            if k < len(inst.operands):
                stack.append((inst, k + 1))
                operand = inst.operands[k]
                if id(operand) not in seen:
                    seen.add(id(operand))
                    stack.append((operand, 0))
                continue
            order.append(inst)
    return order


Store = tuple[Callable[[Index], str], str, DType, Callable[[Index], str] | None]


class KernelEmitter:
    """Emits one kernel function from a KernelSpec."""

    def __init__(self, spec: KernelSpec, lang: CLanguage, options: KernelOptions,
                 nest_groups: set[int]) -> None:
        self.spec = spec
        self.lang = lang
        self.options = options
        self.nest_groups = nest_groups
        self.body = FunctionBody()
        self.sections: list[list[str]] = []
        self.epilogue: list[str] = []
        self.groups = 0
        self.input_names = [f"a{k}" for k in range(len(spec.inputs))]
        self.output_names = [f"r{k}" for k in range(len(spec.outputs))]
        self.arg_pointer: dict[int, str] = {}
        self.results: dict[int, tuple[str, ...]] = {}
        self.converted: dict[tuple[int, DType], str] = {}
        self.in_place: list[tuple[int, int]] = []
        # Functions holding parallel loops (name, bounds, names read, body), written out once
        # the in-place pairs (which drop `restrict`) are known.
        self.parts: list[tuple[str, list[str], set[str], str]] = []
        # For element-wise in-place updates: every (pointer, index key) an input is read at,
        # and the index key of the loop that stores each output.
        self.reads: dict[str, set[tuple[str, ...]]] = {}
        self.stored_at: dict[str, set[tuple[str, ...]] | None] = {}
        self.em = ElementalEmitter(lang, self.body, self._bindings(), self.materialize)

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

    def _loader(self, dtype: DType, pointer: str) -> Callable[[Index], Value]:
        def load(index: Index) -> Value:
            self.reads.setdefault(pointer, set()).add(index.key)
            return self.em.load(dtype, pointer, index)

        return load

    def parameter_types(self) -> tuple[str, ...]:
        types = []
        for inst, path in self.spec.inputs:
            types.append(self.lang.pointer(leaf_shape(inst, path).dtype, True))
        for inst, path in self.spec.outputs:
            types.append(self.lang.pointer(leaf_shape(inst, path).dtype, False))
        return tuple(types)

    def element(self, inst: Instruction, path: tuple[int, ...] = ()) -> Callable[[Index], str]:
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
            stores: list[Store] = [(self.element(inst, path), self.output_names[k],
                                    leaf_shape(inst, path).dtype, None)
                                   for k, inst, path in members]
            self.loop(dims, stores, parallel=True, roots=tuple(m[1] for m in members))
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
        for k, j in candidates:
            keys = self.stored_at.get(self.output_names[k])
            if keys is None or k in done or j in taken:
                continue
            out_inst, out_path = self.spec.outputs[k]
            inst, path = self.spec.inputs[j]
            if leaf_shape(inst, path) != leaf_shape(out_inst, out_path):
                continue
            read_as = dict((i, self.output_names[o]) for o, i in self.spec.aliased)
            reads = self.reads.get(read_as.get(j, self.input_names[j]))
            if reads and reads <= keys:
                self.in_place.append((k, j))
                taken.add(j)
                done.add(k)

    def _finish(self) -> EmittedKernel:
        self._elementwise_in_place()
        lines = list(self.body.prologue.lines)
        for section in self.sections:
            lines.extend(section)
        lines.extend(self.epilogue)
        types = self.parameter_types()
        names = [*self.input_names, *self.output_names]
        parameters = ", ".join(f"{t}{n}" for t, n in zip(types, names)) or "void"
        small = self._work() < self.options.small_kernel_elements
        qualifier = self.lang.kernel_qualifier
        if small:
            qualifier += " " + self.lang.small_kernel_attribute
        else:
            qualifier += " " + self.lang.no_jump_threading
        comment = self._comment()
        definition = templates.KERNEL.safe_substitute(
            kind=_SAFE_NAME.sub("_", self.spec.kind), instructions=comment, qualifier=qualifier,
            parameters=parameters, body="\n".join(lines) + ("\n" if lines else ""),
            parts="".join(self._render_part(*part) for part in self.parts))
        return EmittedKernel(definition, types, tuple(self.in_place), comment, small)

    def _comment(self) -> str:
        names = [sanitize(n) for n in (self.spec.instructions or (self.spec.label,))]
        if len(names) > 40:
            names = names[:40] + [f"and {len(names) - 40} more"]
        return f"{sanitize(self.spec.label)}: " + " ".join(names)

    def _work(self) -> int:
        work = 0
        for inst in kernel_instructions(self.spec):
            for shape in [inst.shape, *(o.shape for o in inst.operands)]:
                for leaf in shape.leaves():
                    if leaf.is_array:
                        work = max(work, leaf.num_elements)
            if inst.op is Op.DOT:
                k = math.prod(inst.operands[0].shape.dims[d]
                              for d in inst.ints("lhs_contracting_dims"))
                work = max(work, inst.shape.num_elements * k)
        return work

    # --- loops --------------------------------------------------------------------------

    def loop(self, dims: tuple[int, ...], stores: list[Store], parallel: bool,
             offsets: Callable[[Index], str] | None = None,
             roots: tuple[Instruction, ...] = ()) -> None:
        """Store every element of `stores` (value function, pointer, type) over `dims`.

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
        base = self.body.scope.indent if in_prologue else 1
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
        lines: list[str] = []
        spans: list[tuple[int, int]] = []  # each part's outermost loop, split among threads
        with self.body.section(lines, base):
            for k, ranges in enumerate(parts):
                bounds = (f"lo{k}", f"hi{k}") if parallel else None
                if unrolled is not None:
                    ranges = {unrolled: (0, 1)}  # a literal; the copies below set it
                index, headers, span = self._loop_headers(dims, flat, group, ranges, bounds)
                spans.append(span)
                indices = [index] if unrolled is None else [
                    Index(dims, None, tuple(str(c) if d == unrolled else m
                                            for d, m in enumerate(index.multi or ())), None)
                    for c in range(dims[unrolled])]
                with contextlib.ExitStack() as stack:
                    for header in headers:
                        stack.enter_context(self.body.block(header))
                    # Every value is computed before any is stored, so an output may overwrite
                    # an input it shares a buffer with (read only at the elements stored in
                    # this iteration).
                    values = [[value_of(at) for value_of, _, _, _ in stores] for at in indices]
                    for (_, pointer, _, place) in stores:
                        natural = offsets is None and place is None
                        in_place = len(parts) == 1 and natural and not in_prologue
                        self.stored_at[pointer] = {i.key for i in indices} if in_place else None
                    for at_index, row in zip(indices, values):
                        for (_, pointer, dtype, place), value in zip(stores, row):
                            at = place or offsets
                            target = at(at_index) if at else self.em.linear_of(at_index)
                            self.body.emit(
                                f"{pointer}[{target}] = {self.lang.to_storage(dtype, value)};")
        if parallel:
            lines = self._parallel_part(lines, spans)
        self._add_section(lines, parallel, base, in_prologue)

    def _unrolled_dimension(self, dims: tuple[int, ...], split: tuple[int, list[int]] | None,
                            group: int, offsets: Callable[[Index], str] | None) -> int | None:
        """A small dimension a loop nest writes out with literal indices instead of looping
        over it: the values of one iteration of the other loops are then computed in one scope
        and share their subexpressions (the four columns of a packed (N, 4) state share the
        whole CartPole step), a concatenate along it picks its operand without a branch or a
        loop of its own per piece, and the loop left over the large dimension vectorises."""
        if offsets is not None or len(dims) < 2:
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

    def _parallel_part(self, lines: list[str], spans: list[tuple[int, int]]) -> list[str]:
        """Move a loop into a function of its own, called by every thread on its share of the
        outermost loop. The function takes the kernel's pointers as `restrict` parameters:
        inside an OpenMP region they would reach the loop through a shared struct, and the
        compiler, no longer sure they don't alias, would not vectorise it."""
        text = "\n".join(lines)
        used = set(re.findall(r"\b[A-Za-z_][A-Za-z0-9_]*\b", text))
        names = [*self.input_names, *self.output_names]
        arguments = [n for n in names if n in used]
        arguments += [n for n in self.body.prologue_names if n in used]
        bounds = [f"int64_t {b}{k}" for k in range(len(spans)) for b in ("lo", "hi")]
        name = f"$name_part{len(self.parts)}"  # $name: the kernel's name, given later
        self.parts.append((name, bounds, used, text))
        shares = []
        for start, end in spans:
            count = end - start
            shares += [f"{start} + {count} * hlofuse_t / hlofuse_nt",
                       f"{start} + {count} * (hlofuse_t + 1) / hlofuse_nt"]
        call = f"{name}({', '.join(shares + arguments)});"
        return ["    const int64_t hlofuse_t = HLOFUSE_THREAD, hlofuse_nt = HLOFUSE_THREADS;",
                "    " + call]

    def _render_part(self, name: str, bounds: list[str], used: set[str], text: str) -> str:
        types = self.parameter_types()
        names = [*self.input_names, *self.output_names]
        parameters = [f"{t}{n}" for t, n in zip(types, names) if n in used]
        parameters += [f"{t} {n}".replace("* ", "*") for n, t in self.body.prologue_names.items()
                       if n in used]
        return templates.KERNEL_PART.substitute(
            name=name, qualifier=self.lang.no_jump_threading,
            parameters=", ".join(bounds + parameters), body=text + "\n")

    def _add_section(self, lines: list[str], parallel: bool, base: int,
                     in_prologue: bool) -> None:
        if parallel:
            lines = templates.PARALLEL_REGION.substitute(
                indent="  " * base, region=self.lang.parallel_region,
                ftz_begin=self.lang.ftz_begin, ftz_end=self.lang.ftz_end,
                body="".join(line + "\n" for line in lines)).rstrip("\n").split("\n")
        if in_prologue:
            self.body.prologue.lines.extend(lines)
        else:
            self.sections.append(lines)

    def _loop_headers(self, dims: tuple[int, ...], flat: bool, group: int,
                      ranges: dict[int, tuple[int, int]], bounds: tuple[str, str] | None
                      ) -> tuple[Index, list[str], tuple[int, int]]:
        """Loop headers over `dims` (dimension d restricted to `ranges[d]` when given), the
        index they define and the range of the outermost loop, which runs from bounds[0]
        to bounds[1] instead when bounds are given (a thread's share)."""
        if not dims:
            return SCALAR, [], (0, 1)

        def header(var: str, lo: int, hi: int) -> str:
            first, last = bounds if bounds is not None and not headers else (lo, hi)
            return f"for (int64_t {var} = {first}; {var} < {last}; ++{var})"

        headers: list[str] = []
        if (flat or len(dims) == 1) and not ranges:
            var = self.body.fresh("i")
            count = math.prod(dims)
            headers.append(header(var, 0, count))
            self.em.ranges[var] = (0, count)
            multi = (var,) if len(dims) == 1 else None
            index = Index(dims, var, multi, group if multi is None else None)
            return index, headers, (0, count)
        multi = []
        span = (0, 1)
        for d, size in enumerate(dims):
            lo, hi = ranges.get(d, (0, size))
            if hi - lo == 1:
                multi.append(str(lo))
                continue
            var = self.body.fresh("i")
            multi.append(var)
            self.em.ranges[var] = (lo, hi)
            if not headers:
                span = (lo, hi)
            headers.append(header(var, lo, hi))
        return Index(dims, None, tuple(multi), None), headers, span

    # --- reductions computed together ----------------------------------------------------

    def _emit_reduction_groups(self, outputs: list[tuple[int, tuple[Instruction, tuple[int, ...]]]],
                               done: set[int]) -> None:
        """Reduces over the same input shape and dimensions, and outputs of that input shape,
        in one pass (XLA's multi-output reduction fusion): the shared producers are computed
        once per input element instead of once per output. A float sum goes this way even
        alone: its values are stored so they can be summed in the reference's order."""
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
        return accumulation(self.em, inst.calls[0], inst.operands[0].dtype,
                            len(inst.operands) // 2)

    def _reduction_group(self, in_dims: tuple[int, ...], reduced: tuple[int, ...],
                         reduces: list[Instruction],
                         siblings: list[tuple[int, Instruction, tuple[int, ...]]],
                         targets: dict[tuple[int, int], str]) -> None:
        """Two loops: the first computes every reduced value and every sibling output element
        by element (vectorised, split across threads) and keeps the values in rows, one row
        per result element (the reduced dimensions last, in `dimensions` order); the second
        reduces each row in the reference's order. `targets` maps (id(reduce), leaf) to the
        pointer a result goes to."""
        kept = [d for d in range(len(in_dims)) if d not in reduced]
        out_dims = tuple(in_dims[d] for d in kept)
        extent = math.prod(in_dims[d] for d in reduced)
        rows = math.prod(out_dims)
        order = kept + list(reduced)
        natural = order == list(range(len(in_dims)))
        row_dims = tuple(in_dims[d] for d in order)

        def row_position(index: Index) -> str:
            multi = self.em.multi_of(index)
            return self.em.linear_of(Index(row_dims, None, tuple(multi[d] for d in order), None))

        stored: list[list[str]] = []
        stores: list[Store] = []
        roots: list[Instruction] = []
        for r in reduces:
            plan = self._plan(r)
            pointers = []
            for x in r.operands[:len(r.operands) // 2]:
                kept_type = DType.F32 if plan.unrounded or plan.pairwise and \
                    x.dtype is DType.F16 else x.dtype
                pointer = self._temporary(kept_type, rows * extent)
                pointers.append(pointer)
                stores.append((self.element(x), pointer, kept_type,
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
            lines: list[str] = []
            with self.body.section(lines, self.body.scope.indent if in_prologue else 1):
                self._reduce_rows(r, pointers, out_dims, extent, in_dims, reduced, targets)
            self._add_section(lines, False, 1, in_prologue)

    def _reduce_rows(self, r: Instruction, pointers: list[str], out_dims: tuple[int, ...],
                     extent: int, in_dims: tuple[int, ...], reduced: tuple[int, ...],
                     targets: dict[tuple[int, int], str]) -> None:
        """Each result element of `r` from its stored row of `extent` values."""
        plan = self._plan(r)
        count = len(r.operands) // 2
        inits = r.operands[count:]
        out_index, headers, _ = self._loop_headers(out_dims, False, self.groups, {}, None)
        self.groups += 1
        with contextlib.ExitStack() as stack:
            for header in headers:
                stack.enter_context(self.body.block(header))
            row = self.em.index_let(f"{self.em.linear_of(out_index)} * {extent}")
            results: list[str]
            if plan.pairwise and reduction_order(in_dims, reduced) == "pairwise":
                width = "f64" if r.dtype is DType.F64 else "f32"
                total = self.body.let("double" if width == "f64" else "float",
                                      f"hlofuse_pairwise_{width}({pointers[0]} + {row}, {extent})")
                if plan.unrounded:
                    total = self.body.let("float", self.lang.round_to(DType.F16, total))
                results = self.em.apply_reducer(r.calls[0], [self.em.scalar(inits[0])], [total])
            else:
                accumulators = []
                for init in inits:
                    name = self.body.fresh("acc")
                    start = plan.identity if plan.identity is not None else self.em.scalar(init)
                    ctype = "float" if plan.unrounded else self.lang.register_type(init.dtype)
                    self.body.declare(ctype, name, start)
                    accumulators.append(name)
                j = self.body.fresh("red")
                pragma = (self.lang.simd_reduction.format(op=plan.simd_op, var=accumulators[0])
                          if plan.simd_op is not None else None)
                with self.body.block(f"for (int64_t {j} = 0; {j} < {extent}; ++{j})", pragma):
                    position = self.em.index_let(f"{row} + {j}")
                    kept_type = [DType.F32 if plan.unrounded or plan.pairwise and
                                 x.dtype is DType.F16 else x.dtype for x in r.operands[:count]]
                    values = [self.body.let(self.lang.register_type(t),
                                            self.lang.load(t, p, position))
                              for t, p in zip(kept_type, pointers)]
                    if plan.unrounded:
                        symbol = "+" if simple_reducer(r.calls[0]) is Op.ADD else "*"
                        self.body.emit(f"{accumulators[0]} = {accumulators[0]} {symbol} "
                                       f"{values[0]};")
                    else:
                        for acc, new in zip(accumulators,
                                            self.em.apply_reducer(r.calls[0], accumulators,
                                                                  values)):
                            self.body.emit(f"{acc} = {new};")
                results = accumulators
                if plan.identity is not None:
                    total = accumulators[0]
                    if plan.unrounded:
                        total = self.body.let("float", self.lang.round_to(DType.F16, total))
                    results = self.em.apply_reducer(r.calls[0], [self.em.scalar(inits[0])],
                                                    [total])
            target = self.em.linear_of(out_index)
            for leaf, value in enumerate(results):
                pointer = targets.get((id(r), leaf))
                if pointer is not None:
                    dtype = r.shape.leaves()[leaf].dtype
                    self.body.emit(f"{pointer}[{target}] = {self.lang.to_storage(dtype, value)};")

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
        if inst.dtype in (DType.F16, DType.BF16) and simple_reducer(inst.calls[0]) is not None:
            return False  # the reference's summation order shows at this precision
        if inst.dtype.is_float and simple_reducer(inst.calls[0]) in (Op.ADD, Op.MULTIPLY):
            return False  # so does its order of float sums and products
        self._column_loops(inst, self.output_names[k], outer, extent, inner)
        return True

    def _column_loops(self, inst: Instruction, pointer: str, outer: int, extent: int,
                      inner: int) -> None:
        operand, init = inst.operands
        dtype = inst.dtype
        in_dims = operand.shape.dims
        block = 512
        blocks = -(-inner // block)
        parallel = outer * extent * inner >= self.options.parallel_min_elements and \
            outer * blocks > 1
        lines: list[str] = []
        with self.body.section(lines, 3 if parallel else 1):
            o, b, r, j = (self.body.fresh(p) for p in ("o", "b", "red", "j"))
            pragma = self.lang.parallel_for_collapse.format(n=2) if parallel else None
            with contextlib.ExitStack() as stack:
                stack.enter_context(self.body.block(
                    f"for (int64_t {o} = 0; {o} < {outer}; ++{o})", pragma))
                stack.enter_context(self.body.block(
                    f"for (int64_t {b} = 0; {b} < {inner}; {b} += {block})"))
                end = self.body.let("int64_t", f"{b} + {block} < {inner} ? {b} + {block} : {inner}")
                row = self.em.index_let(f"{o} * {inner}")
                initial = self.lang.to_storage(dtype, self.em.scalar(init))
                with self.body.block(f"for (int64_t {j} = {b}; {j} < {end}; ++{j})"):
                    self.body.emit(f"{pointer}[{row} + {j}] = {initial};")
                with self.body.block(f"for (int64_t {r} = 0; {r} < {extent}; ++{r})"):
                    with self.body.block(f"for (int64_t {j} = {b}; {j} < {end}; ++{j})"):
                        linear = self.em.index_let(f"({o} * {extent} + {r}) * {inner} + {j}")
                        x = self.em.array_value(operand, Index(in_dims, linear, None, None))
                        acc = self.body.let(self.lang.register_type(dtype),
                                            self.lang.load(dtype, pointer, f"{row} + {j}"))
                        new = self.em.apply_reducer(inst.calls[0], [acc], [x])[0]
                        self.body.emit(f"{pointer}[{row} + {j}] = "
                                       f"{self.lang.to_storage(dtype, new)};")
        self._add_section(lines, parallel, 1, False)

    # --- dynamic-update-slice in place --------------------------------------------------

    def _emit_update_slices(self, outputs: list[tuple[int, tuple[Instruction, tuple[int, ...]]]],
                            done: set[int]) -> None:
        for k, (inst, path) in outputs:
            if inst.op is not Op.DYNAMIC_UPDATE_SLICE or path or id(inst) in self.arg_pointer:
                continue
            done.add(k)
            operand, update = inst.operands[:2]
            pointer = self.output_names[k]
            source = self.arg_pointer.get(id(operand))
            if source is not None:
                if source != pointer:  # not updating the operand's buffer in place
                    lines: list[str] = []
                    with self.body.section(lines, 1):
                        self.body.emit(f"memcpy({pointer}, {source}, {inst.shape.byte_size});")
                    self.sections.append(lines)
                if self._only_user(operand, inst):
                    self.in_place.append((k, self._input_index(source)))
            else:
                self.loop(inst.shape.dims, [(self.element(operand), pointer, inst.dtype, None)],
                          parallel=True)
            starts = self.em.clamped_starts(inst, inst.operands[2:], inst.shape.dims,
                                            update.shape.dims)
            out_dims = inst.shape.dims

            def offset(index: Index, starts: list[str] = starts,
                       out_dims: tuple[int, ...] = out_dims) -> str:
                multi = self.em.multi_of(index)
                shifted = tuple(m if s == "0" else self.em.index_let(f"{m} + {s}")
                                for m, s in zip(multi, starts))
                return self.em.linear_of(Index(out_dims, None, shifted, None))

            self.loop(update.shape.dims, [(self.element(update), pointer, inst.dtype, None)],
                      parallel=True, offsets=offset)

    def _only_user(self, operand: Instruction, dus: Instruction) -> bool:
        """The update may be written over the operand only if nothing else reads it."""
        users = sum(1 for inst in kernel_instructions(self.spec)
                    for o in inst.operands if o is operand)
        users += sum(1 for inst, _ in self.spec.outputs if inst is operand)
        return users == 1 and dus.operands[0] is operand

    # --- library calls ------------------------------------------------------------------

    def _emit_library_roots(self, outputs: list[tuple[int, tuple[Instruction, tuple[int, ...]]]],
                            done: set[int]) -> None:
        for _, (inst, _) in outputs:
            if inst.op not in (Op.DOT, Op.CUSTOM_CALL) or id(inst) in self.arg_pointer:
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
            lines: list[str] = []
            with self.body.section(lines, 1):
                self._library_call(inst, targets)
            self.sections.append(lines)
            self.results[id(inst)] = tuple(targets)

    def materialize(self, inst: Instruction) -> tuple[str, ...]:
        """Pointers to `inst`'s whole value, computed once in the prologue."""
        found = self.results.get(id(inst))
        if found is not None:
            return found
        with self.body.hoisted():
            if inst.op in (Op.DOT, Op.CUSTOM_CALL):
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
        ctype = self.lang.storage_type(dtype)
        self.body.prologue.lines.append(
            f"  {ctype} *{name} = ({ctype} *)malloc({max(count, 1)} * sizeof({ctype}));")
        # Its own memory: `restrict` spares the loops that write it run-time alias checks.
        self.body.prologue_names[name] = f"{ctype} *{self.lang.restrict}"
        self.epilogue.append(f"  free({name});")
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
        pointers = [self.operand_pointer(o) for o in inst.operands]
        self.body.emit(f"hlofuse_rt_threefry2x32({', '.join(pointers)}, {targets[0]}, "
                       f"{targets[1]}, {leaves[0].num_elements});")

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
        args = ", ".join(str(x) for x in (a, b, out, batch, m, n, k, *a_strides, *b_strides))
        self.body.emit(f"{_DOT_ROUTINES[compute]}({args});")
        if out == target:
            return
        var = self.body.fresh("i")
        with self.body.block(f"for (int64_t {var} = 0; {var} < {count}; ++{var})"):
            value = self.lang.round_to(result, f"{out}[{var}]")
            self.body.emit(f"{target}[{var}] = {self.lang.to_storage(result, value)};")

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

        def read(index: Index) -> str:
            multi = self.em.multi_of(index)
            operand_multi = ["0"] * len(order)
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


_DOT_ROUTINES = {
    DType.F32: "hlofuse_rt_dot_f32", DType.F64: "hlofuse_rt_dot_f64",
    DType.S8: "hlofuse_rt_dot_u8", DType.U8: "hlofuse_rt_dot_u8",
    DType.S16: "hlofuse_rt_dot_u16", DType.U16: "hlofuse_rt_dot_u16",
    DType.S32: "hlofuse_rt_dot_u32", DType.U32: "hlofuse_rt_dot_u32",
    DType.S64: "hlofuse_rt_dot_u64", DType.U64: "hlofuse_rt_dot_u64",
    DType.PRED: "hlofuse_rt_dot_pred",
}


def emit_kernel(spec: KernelSpec, lang: CLanguage,
                options: KernelOptions = KernelOptions()) -> EmittedKernel:
    """The kernel's C function; flat loops are tried first, nests where a flat one can't work."""
    if spec.kind == "kCustom":
        # A custom fusion has an emitter of its own, built on this module's pieces.
        from hlofuse.codegen.whole_loop import emit_whole_loop

        return emit_whole_loop(spec, lang, options)
    nest_groups: set[int] = set()
    while True:
        try:
            return KernelEmitter(spec, lang, options, nest_groups).emit()
        except NeedsLoopNest as e:
            if e.group in nest_groups:
                raise
            nest_groups.add(e.group)


__all__ = ["EmittedKernel", "KernelOptions", "KernelSpec", "SCALAR", "THREEFRY_TARGET",
           "emit_kernel", "sanitize"]
