"""The kernel of a whole-loop fusion: a while loop run per environment, inside one C function.

The fusion (fusion/whole_loop.py) holds a while loop that `hlofuse.ir.parallel_loop` found to
be independent per environment. The kernel runs it as the hand-written CartPole kernel does,
in chunks of at most CHUNK steps:

1. uniform steps (one thread): evaluate the condition from the uniform state and stop when it
   is false; record the uniform state the per-environment code's uniform values ("lane
   inputs": the step's random key, ...) are computed from; compute the new uniform state and
   commit it. Then, in a loop over the chunk's steps that vectorises (no step depends on
   another there), the lane inputs into a table with one row per step. The uniform state
   never depends on environments, so this runs once, not once per block.
2. environment blocks (`#pragma omp parallel for` over blocks of W lanes): load the block's
   state into local arrays `s[value][lane]` (from the inputs in the first chunk, from the
   outputs after), then for every step of the chunk run a `#pragma omp simd` loop over the
   lanes that computes each new per-environment value through the elemental emitter (state
   read at the lane, lane inputs from the step's table row, the environment index where an
   iota asks for it) and writes it back once all are computed; accumulated sums collect per
   lane. Two kinds of work run apart (codegen/whole_loop_lanes.py): a select's costly operand
   that does not depend on the state (CartPole's reset draws) in a second lane loop, only for
   the lanes it is picked in; sin and cos of the state with the math library's small-argument
   forms, the full functions only in a step where some lane needs them. One lane (N = 1) is
   scalar code: plain blocks instead of loops, branches instead of selects. Lanes past N (the
   last block) run on the last environment's state and are not stored. At the end of the
   chunk the block stores its state and adds its lanes' partial sums to its own slot.
3. after the last chunk: the uniform state goes to its outputs; each accumulated element is its
   initial value combined with the blocks' partial sums, in block order (deterministic; float
   sums are reassociated compared with the reference, the only difference from it).

Every output may share its initial value's buffer: blocks read only their own environments'
rows before writing them, and uniform outputs are written after all blocks are done.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator

from hlofuse.codegen import mathlib, templates
from hlofuse.codegen.c_emitter import (
    EmittedKernel, KernelOptions, KernelSpec, leaf_shape, sanitize)
from hlofuse.codegen.elemental import (
    SCALAR, Binding, ElementalEmitter, FunctionBody, Index, UnsupportedInstruction, Value,
    strides_of)
from hlofuse.codegen.language import CLanguage
from hlofuse.codegen.whole_loop_lanes import (
    Deferred, deferred_selects, small_argument_math)
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op
from hlofuse.ir.parallel_loop import (
    Accumulator, LoopPlan, Refusal, block_lanes, plan_parallel_loop, read_whole_loop_config)

# Steps per chunk: the lane-input table holds one row per step (on the stack, at most
# TABLE_BYTES); more steps per chunk mean fewer thread-team starts and state round trips.
MAX_CHUNK = 4096
MIN_CHUNK = 64
TABLE_BYTES = 65536
# Arrays of at most this many elements are written out element by element (literal indices
# let the emitter pick concatenate operands and slices statically); larger ones get a loop.
UNROLL_ELEMENTS = 16
ENV = "e"  # the C variable holding the lane's environment index
# Environment-steps below which a chunk runs on the calling thread alone (about a millisecond).
PARALLEL_MIN_ENV_STEPS = 1 << 17


def emit_whole_loop(spec: KernelSpec, lang: CLanguage, options: KernelOptions) -> EmittedKernel:
    """The C function of a whole-loop fusion's kernel."""
    lanes = read_whole_loop_config(spec.backend_config)
    if lanes is None:
        raise UnsupportedInstruction(
            f"%{sanitize(spec.label)}: a kCustom fusion needs a whole-loop backend_config")
    return WholeLoopEmitter(spec, lang, lanes).emit()


def whole_loop_in_place(spec: KernelSpec) -> tuple[tuple[int, int], ...]:
    """The (output, input) pairs that may share a buffer: an output may overwrite the argument
    that is its initial value (one output per argument). Known from the spec alone, so the
    runtime assigns buffers before the kernel is emitted, and emits it once."""
    loop = _loop_of(spec)
    init = loop.operands[0]
    if init.op is not Op.TUPLE:
        return ()  # refused when the kernel is emitted
    argument = {id(inst): k for k, (inst, path) in enumerate(spec.inputs) if not path}
    pairs = []
    taken: set[int] = set()
    for element, value in enumerate(init.operands):
        k = argument.get(id(value))
        if k is None or k in taken or value.shape != loop.shape.elements[element]:
            continue
        taken.add(k)
        pairs.append((element, k))
    return tuple(pairs)


def _loop_of(spec: KernelSpec) -> Instruction:
    loops = {id(inst): inst for inst, _ in spec.outputs}
    loop = spec.outputs[0][0] if spec.outputs else None
    if loop is None or len(loops) != 1 or loop.op is not Op.WHILE:
        raise UnsupportedInstruction(
            f"%{sanitize(spec.label)}: a whole-loop fusion computes one while loop")
    if [path for _, path in spec.outputs] != [(i,) for i in range(len(loop.shape.elements))]:
        raise UnsupportedInstruction(f"%{sanitize(spec.label)}: outputs must be the loop state")
    return loop


class WholeLoopEmitter:
    """Emits one whole-loop kernel function."""

    def __init__(self, spec: KernelSpec, lang: CLanguage, lanes: int) -> None:
        self.spec = spec
        self.lang = lang
        self.loop = _loop_of(spec)
        # Sizes are the pass's business; the emitter only needs the plan.
        plan = plan_parallel_loop(self.loop, max_state_elements_per_env=1 << 62,
                                  max_uniform_elements=1 << 62)
        if isinstance(plan, Refusal):
            raise UnsupportedInstruction(f"%{sanitize(spec.label)}: {plan.message}")
        self.plan: LoopPlan = plan
        self.n = plan.size
        self.lanes = block_lanes(lanes, self.n)
        self.blocks = -(-self.n // self.lanes)
        # The environment component of lane indices. With one environment it is the literal 0,
        # as index maps write it for dimensions of size 1, so equal values share one local.
        self.env = ENV if self.n > 1 else "0"
        self.body = FunctionBody()
        self.inputs = [f"in{k}" for k in range(len(spec.inputs))]
        self.outputs = [f"out{k}" for k in range(len(spec.outputs))]
        init = self.loop.operands[0]
        if init.op is not Op.TUPLE:
            raise UnsupportedInstruction(f"%{self.loop.name}: its initial state must be a tuple")
        self.init: tuple[Instruction, ...] = init.operands
        self.in_place = self._in_place()
        constants = self._argument_bindings()
        lane_lang = dataclasses.replace(lang, simd_reduction="")  # no simd inside simd
        self.uniform_em = ElementalEmitter(lang, self.body, dict(constants))
        lane_emitter = ElementalEmitter if self.lanes > 1 else BranchingEmitter
        self.lane_em = lane_emitter(lane_lang, self.body, dict(constants))
        # Lane inputs are computed after the uniform steps of a chunk, from the uniform state
        # each step recorded, in a loop over the steps the compiler vectorises.
        self.table_em = ElementalEmitter(lane_lang, self.body, dict(constants))
        self.uniform_em._no_hoist = 1  # values change every step: nothing moves out of it
        self.lane_em._no_hoist = 1
        self.table_em._no_hoist = 1
        self.recorded = self._recorded_uniform()
        self.chunk = self._chunk_steps()
        self.deferred = deferred_selects(plan)
        self.small_math = small_argument_math(plan, UNROLL_ELEMENTS)

    # --- arguments ------------------------------------------------------------------------

    def _in_place(self) -> list[tuple[int, int]]:
        return list(whole_loop_in_place(self.spec))

    def _argument_bindings(self) -> dict[int, Binding]:
        """The fusion's parameters and the body's array constants (from the runtime's constant
        pool) are pointer arguments; an input that shares its output's buffer in this call is
        read through the output's pointer."""
        through = {k: self.outputs[o] for o, k in self.spec.aliased}
        out: dict[int, Binding] = {}
        for k, ((inst, path), name) in enumerate(zip(self.spec.inputs, self.inputs)):
            if path:
                raise UnsupportedInstruction(
                    f"%{sanitize(self.spec.label)}: tuple-shaped operand %{inst.name}")
            out[id(inst)] = self._reader(inst.dtype, through.get(k, name))
        return out

    def _reader(self, dtype: DType, pointer: str) -> Callable[[Index], Value]:
        # Both emitters write into the same body; either computes the position.
        return lambda index: self.uniform_em.load(dtype, pointer, index)

    def parameter_types(self) -> tuple[str, ...]:
        # Pointers that may name the same memory lose `restrict`; once the runtime says which
        # do (`aliased`), those are read through one pointer and every pointer keeps it.
        shared = [] if self.spec.aliased else self.in_place
        in_place_inputs = {k for _, k in shared}
        in_place_outputs = {o for o, _ in shared}
        types = []
        for k, (inst, path) in enumerate(self.spec.inputs):
            types.append(self.lang.pointer(leaf_shape(inst, path).dtype, True,
                                           k not in in_place_inputs))
        for k, (inst, path) in enumerate(self.spec.outputs):
            types.append(self.lang.pointer(leaf_shape(inst, path).dtype, False,
                                           k not in in_place_outputs))
        return tuple(types)

    # --- sizes ------------------------------------------------------------------------------

    def _chunk_steps(self) -> int:
        per_step = sum(max(1, x.shape.num_elements) * 8 for x in self.plan.lane_inputs)
        per_step += sum(max(1, self.loop.shape.elements[i].num_elements) * 8
                        for i in self.recorded)
        if per_step == 0:
            return MAX_CHUNK
        return max(MIN_CHUNK, min(MAX_CHUNK, TABLE_BYTES // per_step))

    def _ctype(self, dtype: DType) -> str:
        return self.lang.register_type(dtype)

    # --- the function -----------------------------------------------------------------------

    def emit(self) -> EmittedKernel:
        body = self.body
        self._declare_uniform_state()
        self._declare_tables()
        self._declare_partials()
        body.emit("int64_t steps = 0;")
        body.emit("int finished = 0;")
        with body.block("for (int64_t chunk = 0; ; ++chunk)"):
            body.emit("int64_t count = 0;")
            with body.block(f"while (count < {self.chunk})"):
                self._uniform_step()
                body.emit("++count;")
            body.emit("if (count == 0 && chunk > 0) break;")
            self._lane_input_tables()
            self._blocks()
            body.emit("steps += count;")
            body.emit("if (finished) break;")
        self._finish()
        return self._kernel()

    def _kernel(self) -> EmittedKernel:
        types = self.parameter_types()
        names = [*self.inputs, *self.outputs]
        parameters = ", ".join(f"{t}{n}" for t, n in zip(types, names))
        comment = (f"{sanitize(self.spec.label)}: whole loop {sanitize(self.loop.name)}, "
                   f"{self.n} environments in {self.blocks} blocks of {self.lanes} lanes")
        lines = self.body.prologue.lines
        definition = templates.KERNEL.safe_substitute(
            kind="kCustom", instructions=comment,
            qualifier=f"{self.lang.kernel_qualifier} {self.lang.no_jump_threading}",
            parameters=parameters, body="\n".join(lines) + "\n", parts="")
        return EmittedKernel(definition, types, tuple(self.in_place), comment, False)

    # --- declarations -----------------------------------------------------------------------

    def _declare_uniform_state(self) -> None:
        for i in self.plan.uniform:
            shape = self.loop.shape.elements[i]
            count = max(1, shape.num_elements)
            self.body.emit(f"{self._ctype(shape.dtype)} u{i}[{count}];")
            self._each_element(self.uniform_em, self.init[i],
                               lambda q, v, i=i: f"u{i}[{q}] = {v};")

    def _declare_tables(self) -> None:
        for k, inst in enumerate(self.plan.lane_inputs):
            count = self.chunk * max(1, inst.shape.num_elements)
            self.body.emit(f"{self._ctype(inst.dtype)} tab{k}[{count}];")
        for i in self.recorded:
            shape = self.loop.shape.elements[i]
            count = self.chunk * max(1, shape.num_elements)
            self.body.emit(f"{self._ctype(shape.dtype)} ust{i}[{count}];")

    def _declare_partials(self) -> None:
        """Per block partial results of each accumulator, and its initial value: read now,
        since an output may share its buffer with it."""
        for k, acc in enumerate(self.plan.accumulators):
            ctype = self._ctype(acc.combines[-1].dtype)
            initial = self.uniform_em.scalar(self.init[acc.element])
            self.body.emit(f"const {ctype} init{k} = {initial};")
            identity = self.uniform_em.scalar(acc.identity)
            self.body.emit(f"{ctype} *part{k} = ({ctype} *)malloc({self.blocks} * "
                           f"sizeof({ctype}));")
            self._copy_loop(self.blocks, lambda q, k=k, identity=identity:
                            f"part{k}[{q}] = {identity};")

    def _copy_loop(self, count: int, line: Callable[[str], str]) -> None:
        """`line(q)` for q < count: written out for a few elements, a loop beyond."""
        if count <= UNROLL_ELEMENTS:
            for q in range(count):
                self.body.emit(line(str(q)))
            return
        var = self.body.fresh("q")
        with self.body.block(f"for (int64_t {var} = 0; {var} < {count}; ++{var})"):
            self.body.emit(line(var))

    # --- phase 1: uniform steps ---------------------------------------------------------------

    def _uniform_bindings(self) -> None:
        for comp in (self.plan.condition, self.plan.body):
            for inst in comp.instructions:
                element = _element_read(inst)
                if element is None or element not in self.plan.uniform:
                    continue
                dtype = self.loop.shape.elements[element].dtype
                self.uniform_em.bindings[id(inst)] = self._local_reader(
                    self.uniform_em, dtype, f"u{element}", "")

    def _local_reader(self, em: ElementalEmitter, dtype: DType, array: str,
                      offset: str) -> Callable[[Index], Value]:
        """Reads of a local array (`offset` + the element's position)."""
        def read(index: Index) -> Value:
            position = em.linear_of(index) if index.dims else "0"
            return self.body.let(self._ctype(dtype), f"{array}[{offset}{position}]")

        return read

    def _uniform_step(self) -> None:
        body, em = self.body, self.uniform_em
        self._uniform_bindings()
        with body.block(None):
            condition = em.scalar(self.plan.condition.root)
            body.emit(f"if (!{condition}) {{ finished = 1; break; }}")
        with body.block(None):
            for i in self.recorded:
                size = max(1, self.loop.shape.elements[i].num_elements)
                self._copy_loop(size, lambda q, i=i, size=size:
                                f"ust{i}[count * {size} + {q}] = u{i}[{q}];")
            commits: list[str] = []
            for i in self.plan.uniform:
                value = self.plan.body.root.operands[i]
                shape = self.loop.shape.elements[i]
                if shape.num_elements <= UNROLL_ELEMENTS:
                    for q, index in enumerate(_element_indices(shape.dims)):
                        commits.append(f"u{i}[{q}] = {em.array_value(value, index)};")
                    continue
                # A large uniform array: computed into a copy first, the old one is still read.
                ctype = self._ctype(shape.dtype)
                body.emit(f"{ctype} nu{i}[{shape.num_elements}];")
                self._each_element(em, value, lambda q, v, i=i: f"nu{i}[{q}] = {v};")
                commits.append(f"memcpy(u{i}, nu{i}, sizeof(u{i}));")
            for line in commits:
                body.emit(line)

    def _recorded_uniform(self) -> tuple[int, ...]:
        """The uniform elements the lane inputs are computed from."""
        seen: set[int] = set()
        stack = list(self.plan.lane_inputs)
        elements: set[int] = set()
        while stack:
            inst = stack.pop()
            if id(inst) in seen:
                continue
            seen.add(id(inst))
            element = _element_read(inst)
            if element is not None and element in self.plan.uniform:
                elements.add(element)
            stack.extend(inst.operands)
        return tuple(sorted(elements))

    def _lane_input_tables(self) -> None:
        """The lane inputs of the chunk's steps, from each step's recorded uniform state: no
        step depends on another here, so the loop vectorises (CartPole's step keys: three
        Threefry hashes a step), where the uniform steps themselves form a chain."""
        if not self.plan.lane_inputs:
            return
        body, em = self.body, self.table_em
        for inst in self.plan.body.instructions:
            element = _element_read(inst)
            if element not in self.recorded:
                continue
            assert element is not None
            shape = self.loop.shape.elements[element]
            size = max(1, shape.num_elements)
            em.bindings[id(inst)] = self._local_reader(em, shape.dtype, f"ust{element}",
                                                       f"t * {size} + ")
        body.emit(self.lang.simd)
        with body.block("for (int64_t t = 0; t < count; ++t)"):
            for k, inst in enumerate(self.plan.lane_inputs):
                size = max(1, inst.shape.num_elements)
                self._each_element(em, inst, lambda q, v, k=k, size=size:
                                   f"tab{k}[t * {size} + {q}] = {v};")

    def _each_element(self, em: ElementalEmitter, inst: Instruction,
                      line: Callable[[str, str], str]) -> None:
        """Emit `line(position, value)` for every element of `inst`."""
        dims = inst.shape.dims
        if inst.shape.num_elements <= UNROLL_ELEMENTS:
            for q, index in enumerate(_element_indices(dims)):
                self.body.emit(line(str(q), em.array_value(inst, index)))
            return
        var = self.body.fresh("q")
        with self.body.block(f"for (int64_t {var} = 0; {var} < {inst.shape.num_elements}; "
                             f"++{var})"):
            value = em.array_value(inst, Index(dims, var, None, None))
            self.body.emit(line(var, value))

    # --- phase 2: environment blocks -----------------------------------------------------------

    def _blocks(self) -> None:
        body, lang = self.body, self.lang
        parallel = self.blocks > 1
        if parallel:
            # Starting a thread team costs more than a small chunk's work, and far more when
            # the machine is busy and a thread waits for a core at the barrier.
            body.emit(f"{lang.parallel_region} if (count * {self.n} >= {PARALLEL_MIN_ENV_STEPS})")
            body.emit("{")
            body.emit(f"  {lang.ftz_begin}")
        with body.block(f"for (int64_t b = 0; b < {self.blocks}; ++b)",
                        lang.parallel_for if parallel else None):
            self._block()
        if parallel:
            body.emit(f"  {lang.ftz_end}")
            body.emit("}")

    def _valid_lanes(self) -> str:
        if self.n % self.lanes == 0:
            return str(self.lanes)
        return f"(b == {self.blocks - 1} ? {self.n % self.lanes} : {self.lanes})"

    def _env_of_lane(self) -> str:
        if self.n % self.lanes == 0:
            return "b * {w} + l".format(w=self.lanes)
        return f"b * {self.lanes} + (l < valid ? l : valid - 1)"

    def _block(self) -> None:
        body, lanes = self.body, self.lanes
        body.emit(f"const int valid = {self._valid_lanes()};")
        body.emit("(void)valid;")
        for i in self.plan.per_env:
            shape = self.loop.shape.elements[i]
            per_env = self.plan.elements_per_env(i)
            body.emit(f"{self._ctype(shape.dtype)} s{i}[{per_env}][{lanes}];")
        self._load_block()
        for k, acc in enumerate(self.plan.accumulators):
            ctype = self._ctype(acc.combines[-1].dtype)
            identity = self.lane_em.scalar(acc.identity)
            body.emit(f"{ctype} acc{k}[{lanes}];")
            body.emit(f"for (int l = 0; l < {lanes}; ++l) acc{k}[l] = {identity};")
        self._declare_small_argument_values()
        with body.block("for (int64_t t = 0; t < count; ++t)"):
            self._lane_step()
        self._store_block()

    def _load_block(self) -> None:
        """The block's state: the initial values in the first chunk, the outputs after."""
        body, lanes = self.body, self.lanes
        with body.block("if (chunk == 0)"):
            with body.block(f"for (int l = 0; l < {lanes}; ++l)"):
                body.emit(f"const int64_t {ENV} = {self._env_of_lane()};")
                for i in self.plan.per_env:
                    dims = self.loop.shape.elements[i].dims
                    for q, index in enumerate(_env_indices(dims, self.env)):
                        value = self.uniform_em.array_value(self.init[i], index)
                        body.emit(f"s{i}[{q}][l] = {value};")
        with body.block("else"):
            with body.block(f"for (int l = 0; l < {lanes}; ++l)"):
                body.emit(f"const int64_t {ENV} = {self._env_of_lane()};")
                for i in self.plan.per_env:
                    shape = self.loop.shape.elements[i]
                    per_env = self.plan.elements_per_env(i)
                    self._copy_loop(per_env, lambda q, i=i, per_env=per_env, shape=shape:
                                    f"s{i}[{q}][l] = "
                                    + self.lang.load(shape.dtype, self.outputs[i],
                                                     f"{ENV} * {per_env} + {q}") + ";")

    def _lane_bindings(self) -> None:
        em = self.lane_em
        for k, inst in enumerate(self.plan.lane_inputs):
            count = max(1, inst.shape.num_elements)
            if inst.shape.dims:
                em.bindings[id(inst)] = self._local_reader(em, inst.dtype, f"tab{k}",
                                                           f"t * {count} + ")
            else:
                name = f"li{k}"
                self.body.emit(f"const {self._ctype(inst.dtype)} {name} = tab{k}[t];")
                em.bindings[id(inst)] = lambda index, name=name: name
        for inst in self.plan.body.instructions:
            element = _element_read(inst)
            if element is None or element not in self.plan.per_env:
                continue
            shape = self.loop.shape.elements[element]
            em.bindings[id(inst)] = self._lane_reader(f"s{element}", shape.dtype, shape.dims, 0)

    def _lane_reader(self, array: str, dtype: DType, dims: tuple[int, ...],
                     env_dim: int) -> Callable[[Index], Value]:
        """Reads of a per-environment value kept in `array[position][lane]`: the analysis
        guarantees the index's environment component is the lane's own environment, so only
        the position inside the environment's part matters."""
        rest = dims[:env_dim] + dims[env_dim + 1:]

        def read(index: Index) -> Value:
            em = self.lane_em
            if not rest:
                position = "0"
            else:
                multi = em.multi_of(index)
                multi = multi[:env_dim] + multi[env_dim + 1:]
                position = em.linear_of(Index(rest, None, multi, None))
            return self.body.let(self._ctype(dtype), f"{array}[{position}][l]")

        return read

    def _lane_step(self) -> None:
        self._lane_bindings()
        self._small_argument_check()
        masks = self._declare_masks()
        self._main_lane_loop(masks)
        self._deferred_lane_loop(masks)

    @contextlib.contextmanager
    def _lane_loop(self, pragma: str | None) -> Iterator[None]:
        """`for` over the block's lanes, under `pragma`. One lane gets a plain block: gcc
        if-converts a loop of one iteration as if to vectorise it, and so computes the
        branches of the scalar code (the deferred reset draws) on every step."""
        if self.lanes == 1:
            with self.body.block("/* the one lane */"):
                self.body.emit("const int l = 0;")
                yield
            return
        with self.body.block(f"for (int l = 0; l < {self.lanes}; ++l)", pragma):
            yield

    def _main_lane_loop(self, masks: dict[tuple[object, ...], str]) -> None:
        """Every new per-environment value (a deferred select's other operand in its place, and
        the select's predicate kept in a mask) and the accumulators."""
        body, em = self.body, self.lane_em
        with self._lane_loop(self.lang.simd):
            body.emit(f"const int64_t {ENV} = {self._env_of_lane()};")
            stores: list[str] = []
            stored: set[str] = set()
            for i in self.plan.per_env:
                shape = self.loop.shape.elements[i]
                deferred = self.deferred.get(i)
                value = self.plan.body.root.operands[i] if deferred is None else deferred.kept
                for q, index in enumerate(_env_indices(shape.dims, self.env)):
                    stores.append(f"s{i}[{q}][l] = {em.array_value(value, index)};")
                    if deferred is None:
                        continue
                    mask = masks[deferred.mask_key(index)]
                    if mask not in stored:
                        stored.add(mask)
                        predicate = em.array_value(deferred.predicate,
                                                   deferred.predicate_index(index))
                        stores.append(f"{mask}[l] = {predicate};")
            for k, acc in enumerate(self.plan.accumulators):
                self._accumulate(k, acc)
            for line in stores:
                body.emit(line)

    # --- deferred selects -------------------------------------------------------------------

    def _declare_masks(self) -> dict[tuple[object, ...], str]:
        """One mask array per predicate element of the deferred selects, declared per step."""
        masks: dict[tuple[object, ...], str] = {}
        for i, deferred in self.deferred.items():
            for index in _env_indices(self.loop.shape.elements[i].dims, self.env):
                key = deferred.mask_key(index)
                if key not in masks:
                    masks[key] = f"m{len(masks)}"
                    # 32-bit, as the floats stored beside them: a byte array would make gcc
                    # vectorise the whole loop at 16 bytes per vector
                    self.body.emit(f"int32_t {masks[key]}[{self.lanes}];")
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
        groups: dict[str, list[tuple[int, int, Instruction, Index]]] = {}
        for i, deferred in self.deferred.items():
            dims = self.loop.shape.elements[i].dims
            for q, index in enumerate(_env_indices(dims, self.env)):
                mask = masks[deferred.mask_key(index)]
                test = f"{mask}[l]" if deferred.when else f"!{mask}[l]"
                groups.setdefault(test, []).append((i, q, deferred.operand, index))
        with self._lane_loop(self.lang.simd):
            body.emit(f"const int64_t {ENV} = {self._env_of_lane()};")
            for test, stores in groups.items():
                if self.lanes > 1:
                    for i, q, operand, index in stores:
                        body.emit(f"if ({test}) s{i}[{q}][l] = {em.array_value(operand, index)};")
                    continue
                with body.block(f"if ({test})"):
                    for i, q, operand, index in stores:
                        body.emit(f"s{i}[{q}][l] = {em.array_value(operand, index)};")

    # --- small-argument math ----------------------------------------------------------------

    def _declare_small_argument_values(self) -> None:
        """Per block, the arrays the full functions fill in a step where some argument is too
        large for the small forms (zeroed, so that lane code may read them unconditionally)."""
        for k, (inst, _) in enumerate(self.small_math):
            positions = inst.shape.num_elements // self.n
            self.body.emit(f"{self._ctype(inst.dtype)} fm{k}[{positions}][{self.lanes}] = "
                           "{{0}};")

    def _small_argument_check(self) -> None:
        """Lane code computes the small-argument math values inline with the small forms,
        except in a step where some lane's argument is too large for them (a branch the block
        almost never takes): the full functions then fill `fm<k>[position][lane]` first and
        lane code reads those. The header's functions hold under DAZ/FTZ as they are, so they
        are called directly (libm calls get their arguments and results flushed)."""
        if not self.small_math:
            return
        body = self.body
        body.emit("int large = 0;")
        with self._lane_loop(self.lang.simd_reduction.format(op="|", var="large")):
            body.emit(f"const int64_t {ENV} = {self._env_of_lane()};")
            tests: list[str] = []
            for inst, form in self.small_math:
                for index in _env_indices(inst.shape.dims, self.env):
                    argument = self.lane_em.array_value(inst.operands[0], index)
                    test = f"large |= !{form.guard}({argument});"
                    if test not in tests:
                        tests.append(test)
                        body.emit(test)
        with body.block("if (large)"):
            with self._lane_loop(self.lang.simd):
                body.emit(f"const int64_t {ENV} = {self._env_of_lane()};")
                for k, (inst, form) in enumerate(self.small_math):
                    full = mathlib.lookup(form.name, form.dtype)
                    assert full is not None
                    for q, index in enumerate(_env_indices(inst.shape.dims, self.env)):
                        argument = self.lane_em.array_value(inst.operands[0], index)
                        body.emit(f"fm{k}[{q}][l] = {full.c_name}({argument});")
        for k, (inst, form) in enumerate(self.small_math):
            self.lane_em.bindings[id(inst)] = self._small_argument_reader(k, inst, form)

    def _small_argument_reader(self, k: int, inst: Instruction,
                               form: mathlib.SmallArgumentForm) -> Callable[[Index], Value]:
        full_value = self._lane_reader(f"fm{k}", inst.dtype, inst.shape.dims, 0)

        def read(index: Index) -> Value:
            argument = self.lane_em.array_value(inst.operands[0], index)
            return self.body.let(self._ctype(inst.dtype),
                                 f"(large ? {full_value(index)} : {form.c_name}({argument}))")

        return read

    def _accumulate(self, k: int, acc: Accumulator) -> None:
        em = self.lane_em
        total = f"acc{k}[l]"
        for operand in acc.operands:
            env_dim = self.plan.env_dims.get(id(operand), 0) if self.n > 1 else None
            total = self._reduce_at_lane(acc, operand, env_dim, total)
        self.body.emit(f"acc{k}[l] = {total};")

    def _reduce_at_lane(self, acc: Accumulator, operand: Instruction, env_dim: int | None,
                        total: str) -> str:
        """`total <op>` every element of the lane's environment's part of `operand`."""
        em, body = self.lane_em, self.body
        dims = operand.shape.dims
        loops = [(d, size) for d, size in enumerate(dims) if d != env_dim and size > 1]
        if not loops:
            multi = tuple(self.env if d == env_dim else "0" for d in range(len(dims)))
            value = em.array_value(operand, Index(dims, None, multi, None))
            return em.apply_reducer(acc.reducer, [total], [value])[0]
        name = body.fresh("acc")
        body.emit(f"{self._ctype(operand.dtype)} {name} = {total};")
        variables = {d: body.fresh("r") for d, _ in loops}
        multi = tuple(self.env if d == env_dim else variables.get(d, "0")
                      for d in range(len(dims)))
        with contextlib.ExitStack() as stack:
            for d, size in loops:
                var = variables[d]
                stack.enter_context(body.block(f"for (int64_t {var} = 0; {var} < {size}; ++{var})"))
            value = em.array_value(operand, Index(dims, None, multi, None))
            body.emit(f"{name} = {em.apply_reducer(acc.reducer, [name], [value])[0]};")
        return name

    def _store_block(self) -> None:
        body = self.body
        with body.block("for (int l = 0; l < valid; ++l)"):
            body.emit(f"const int64_t {ENV} = b * {self.lanes} + l;")
            for i in self.plan.per_env:
                shape = self.loop.shape.elements[i]
                per_env = self.plan.elements_per_env(i)
                target = self.outputs[i]
                self._copy_loop(per_env, lambda q, i=i, target=target, per_env=per_env,
                                shape=shape: f"{target}[{ENV} * {per_env} + {q}] = "
                                f"{self.lang.to_storage(shape.dtype, f's{i}[{q}][l]')};")
        for k, acc in enumerate(self.plan.accumulators):
            ctype = self._ctype(acc.combines[-1].dtype)
            name = body.fresh("p")
            body.emit(f"{ctype} {name} = part{k}[b];")
            with body.block("for (int l = 0; l < valid; ++l)"):
                combined = self.lane_em.apply_reducer(acc.reducer, [name], [f"acc{k}[l]"])[0]
                body.emit(f"{name} = {combined};")
            body.emit(f"part{k}[b] = {name};")

    # --- the end ----------------------------------------------------------------------------

    def _finish(self) -> None:
        body, em = self.body, self.uniform_em
        for i in self.plan.uniform:
            shape = self.loop.shape.elements[i]
            target = self.outputs[i]
            self._copy_loop(shape.num_elements, lambda q, i=i, target=target, shape=shape:
                            f"{target}[{q}] = {self.lang.to_storage(shape.dtype, f'u{i}[{q}]')};")
        for k, acc in enumerate(self.plan.accumulators):
            i = acc.element
            dtype = self.loop.shape.elements[i].dtype
            ctype = self._ctype(dtype)
            total = body.fresh("total")
            body.emit(f"{ctype} {total} = init{k};")
            with body.block("if (steps > 0)"):
                with body.block(f"for (int64_t b = 0; b < {self.blocks}; ++b)"):
                    combined = em.apply_reducer(acc.reducer, [total], [f"part{k}[b]"])[0]
                    body.emit(f"{total} = {combined};")
            body.emit(f"{self.outputs[i]}[0] = {self.lang.to_storage(dtype, total)};")
            body.emit(f"free(part{k});")


class BranchingEmitter(ElementalEmitter):
    """Lane code of one lane is scalar: there a select computes only the operand it picks (an
    environment that did not finish draws no reset values), as the scalar hand-written kernel
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


def _element_read(inst: Instruction) -> int | None:
    if inst.op is not Op.GET_TUPLE_ELEMENT or inst.operands[0].op is not Op.PARAMETER:
        return None
    index = inst.attrs["index"]
    assert isinstance(index, int)
    return index


def _element_indices(dims: tuple[int, ...]) -> list[Index]:
    """Every element of an array of `dims`, as an index of literal components."""
    if not dims:
        return [SCALAR]
    strides = strides_of(dims)
    out = []
    for q in range(math.prod(dims)):
        multi = tuple(str((q // s) % d) for s, d in zip(strides, dims))
        out.append(Index(dims, None, multi, None))
    return out


def _env_indices(dims: tuple[int, ...], env: str) -> list[Index]:
    """The elements of the lane's environment's row of a per-environment array (the
    environment component written `env`)."""
    return [Index(dims, None, (env, *(index.multi or ())), None)
            for index in _element_indices(dims[1:])]
