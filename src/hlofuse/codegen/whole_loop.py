"""The kernel of a whole-loop fusion: a while loop run per lane, inside one C function.

The fusion (fusion/beyond_xla/whole_loop.py) holds a while loop that
`hlofuse.analysis.parallel_loop` found to be independent per lane. The kernel runs it as the
hand-written CartPole kernel does, in chunks of at most CHUNK steps:

1. uniform steps (one thread): evaluate the condition from the uniform state and stop when it
   is false; record the uniform state the per-lane code's uniform values ("lane
   inputs": the step's random key, ...) are computed from; write the step logs' slices
   (codegen/whole_loop_step_logs.py); compute the new uniform state and commit it. Then, in
   a loop over the chunk's steps that vectorises (no step depends on another there), the
   lane inputs into a table with one row per step. The uniform state never depends on lanes,
   so this runs once, not once per block.
2. lane blocks (codegen/whole_loop_blocks.py): blocks of W lanes shared among threads,
   each running the chunk's steps on its lanes' state in simd loops over the lanes.
3. after the last chunk: the uniform state and the step logs go to their outputs; each
   accumulated element is its initial value combined with the blocks' partial sums, in block
   order (deterministic; float sums are reassociated compared with the reference, the only
   difference from it).

Every output may share its initial value's buffer: blocks read only their own lanes'
rows before writing them, and uniform outputs are written after all blocks are done.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager

from hlofuse.analysis.lane_classification import element_read
from hlofuse.analysis.parallel_loop import LoopPlan, apply_recorded_plan, plan_parallel_loop
from hlofuse.analysis.parallel_loop_refusals import Refusal
from hlofuse.analysis.whole_loop_config import (
    block_lanes,
    read_recorded_plan,
    read_whole_loop_config,
)
from hlofuse.codegen import cir
from hlofuse.codegen.body import FunctionBody
from hlofuse.codegen.cir import Binary, Expr, Stmt
from hlofuse.codegen.elemental import ElementalEmitter
from hlofuse.codegen.emitter_types import (
    UNROLL_ELEMENTS,
    Binding,
    Index,
    UnsupportedInstruction,
    Value,
)
from hlofuse.codegen.kernel_spec import (
    EmittedKernel,
    KernelOptions,
    KernelSpec,
    leaf_shape,
    sanitize,
)
from hlofuse.codegen.language import Language
from hlofuse.codegen.whole_loop_blocks import (
    BlockEmission,
    BranchingEmitter,
)
from hlofuse.codegen.whole_loop_elements import (
    constant,
    copy,
    copy_whole,
    element_indices,
    element_of,
    store_at,
)
from hlofuse.codegen.whole_loop_lane_code import LANE_SELECTED_READ, LOOPED_ELEMENTS
from hlofuse.codegen.whole_loop_lanes import (
    deferred_selects,
    lane_language,
    small_argument_math,
    speculative_math,
)
from hlofuse.codegen.whole_loop_reductions import LANE_UNROLLED_REDUCTION, step_reduction_names
from hlofuse.codegen.whole_loop_scratch_values import materialized_values, value_lane_dims
from hlofuse.codegen.whole_loop_step_logs import StepLogs, step_log_names
from hlofuse.codegen.whole_loop_uniform_products import uniform_products_in_loops
from hlofuse.codegen.whole_loop_work import is_small_whole_loop, without_vector_loops
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import FusionKind, Op

# Steps per chunk: the lane-input table holds one row per step (on the stack, at most
# TABLE_BYTES); more steps per chunk mean fewer thread-team starts and state round trips.
MAX_CHUNK = 4096
MIN_CHUNK = 64
TABLE_BYTES = 65536
# Names of the kernel's own variables (HLO-derived names never take them).
_FIXED = ("e", "b", "l", "t", "count", "chunk", "steps", "finished", "valid", "large",
          "pending")


def emit_whole_loop(spec: KernelSpec, lang: Language, options: KernelOptions) -> EmittedKernel:
    """The C function of a whole-loop fusion's kernel."""
    lanes = read_whole_loop_config(spec.backend_config)
    if lanes is None:
        raise UnsupportedInstruction(
            f"%{sanitize(spec.label)}: a kCustom fusion needs a whole-loop backend_config")
    return WholeLoopEmitter(spec, lang, lanes).emit()


def _plan(spec: KernelSpec, loop: Instruction) -> LoopPlan | Refusal:
    """The plan whole-loop fusion recorded in the backend_config, applied to the loop; a
    hand-written fusion without one is planned here (sizes were the pass's business)."""
    recorded = read_recorded_plan(spec.backend_config)
    if recorded is not None:
        return apply_recorded_plan(loop, *recorded)
    return plan_parallel_loop(loop, max_state_elements_per_lane=1 << 62,
                              max_uniform_elements=1 << 62)


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


class WholeLoopEmitter(BlockEmission, StepLogs):
    """Emits one whole-loop kernel function."""

    def __init__(self, spec: KernelSpec, lang: Language, lanes: int) -> None:
        self.spec = spec
        self.loop = _loop_of(spec)
        plan = _plan(spec, self.loop)
        if isinstance(plan, Refusal):
            raise UnsupportedInstruction(f"%{sanitize(spec.label)}: {plan.message}")
        self.plan: LoopPlan = plan
        self.n = plan.size
        self.lanes = block_lanes(lanes, self.n)
        self.lang = lang = lane_language(lang, self.lanes)
        self.blocks = -(-self.n // self.lanes)
        # The lane component of lane indices. With one lane it is the literal 0,
        # as index maps write it for dimensions of size 1, so equal values share one local.
        self.lane_index: Expr = cir.Var("e") if self.n > 1 else cir.Int(0)
        self.body = FunctionBody()
        # A looped element's positions share one mask: its select must pick per lane.
        self.deferred = {i: d for i, d in deferred_selects(plan).items()
                         if d.per_lane or plan.elements_per_lane(i) <= LOOPED_ELEMENTS}
        self.small_math = small_argument_math(plan, UNROLL_ELEMENTS)
        self.speculative = speculative_math(plan, UNROLL_ELEMENTS, self.small_math)
        self.value_dims = value_lane_dims(plan)
        self.materialized = materialized_values(
            plan, {id(d.select): (d.kept, d.predicate) for d in self.deferred.values()},
            frozenset(id(inst) for inst, _ in self.speculative), self.value_dims)
        self._reserve_names()
        self.inputs, self.outputs = spec.argument_names(self.body.names)
        init = self.loop.operands[0]
        if init.op is not Op.TUPLE:
            raise UnsupportedInstruction(f"%{self.loop.name}: its initial state must be a tuple")
        self.init: tuple[Instruction, ...] = init.operands
        self.in_place = list(whole_loop_in_place(spec))
        constants = self._argument_bindings()
        self.uniform_em = ElementalEmitter(lang, self.body, dict(constants))
        lane_emitter = ElementalEmitter if self.lanes > 1 else BranchingEmitter
        # No simd pragma for a reduction's loop inside the simd loop over lanes.
        self.lane_em = lane_emitter(lang, self.body, dict(constants), simd_reductions=False)
        # A loop inside lane code keeps gcc from vectorising the loop over the lanes, and so
        # may a branch: several lanes compute both sides of one where that is harmless.
        self.lane_em.unrolled_reduction = LANE_UNROLLED_REDUCTION
        if self.lanes > 1:
            self.lane_em.speculable_load = self.speculable_lane_load
            self.lane_em.selected_constant_reads = LANE_SELECTED_READ
        # Lane inputs are computed after the uniform steps of a chunk, from the uniform state
        # each step recorded, in a loop over the steps the compiler vectorises.
        self.table_em = ElementalEmitter(lang, self.body, dict(constants), simd_reductions=False)
        self._bind_read_only()
        self.uniform_em._no_hoist = 1  # values change every step: nothing moves out of it
        self.lane_em._no_hoist = 1
        self.table_em._no_hoist = 1
        self.recorded = self._recorded_uniform()
        self.chunk = self._chunk_steps()
        self.function: cir.Function | None = None  # the kernel's IR, once emitted
        # The local arrays lane code reads, by name: each lane input's table (its index in
        # plan.lane_inputs) and each per-lane element's state (its element of the loop state).
        self.tables: dict[str, int] = {}
        self.state_arrays: dict[str, int] = {}
        self.nested_arrays: dict[str, tuple[int, ...]] = {}

    def _reserve_names(self) -> None:
        elements = len(self.loop.shape.elements)
        self.body.names.reserve(*_FIXED)
        for k in range(max(elements, len(self.plan.lane_inputs), len(self.plan.accumulators))):
            self.body.names.reserve(*(f"{p}{k}" for p in
                                      ("u", "nu", "ust", "s", "tab", "li", "init", "part", "acc",
                                       "m", "fm", "w")))
        self.body.names.reserve(*step_reduction_names(self.plan), *step_log_names(self.plan))
        self.body.names.reserve(*(f"v{k}" for k in range(len(self.materialized))))

    # --- arguments ------------------------------------------------------------------------

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

    def _bind_read_only(self) -> None:
        """Every read of a read-only element, in every part of the kernel, reads its initial
        value (the kernel's argument, bound like every argument): the loop never changes it."""
        for element in self.plan.read_only:
            initial = self.init[element]
            for comp in (self.plan.condition, self.plan.body):
                for inst in comp.instructions:
                    if element_read(inst) != element:
                        continue
                    for em in (self.uniform_em, self.lane_em, self.table_em):
                        em.bindings[id(inst)] = functools.partial(em.array_value, initial)

    def _reader(self, dtype: DType, pointer: str) -> Callable[[Index], Value]:
        # Both emitters write into the same body; either computes the position.
        return lambda index: self.uniform_em.load(dtype, cir.Var(pointer), index)

    def parameter_types(self) -> tuple[cir.Pointer, ...]:
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

    # --- the function -----------------------------------------------------------------------

    def emit(self) -> EmittedKernel:
        body = self.body
        self._declare_uniform_state()
        self._declare_step_logs()
        self._declare_tables()
        self._declare_partials()
        body.declare(cir.INDEX, "steps", cir.Int(0))
        body.declare(cir.Special.INT, "finished", cir.Int(0))
        count, chunk = cir.Var("count"), cir.Var("chunk")
        with body.loop("chunk", 0, None):
            body.declare(cir.INDEX, "count", cir.Int(0))
            with body.while_(Binary("<", count, cir.Int(self.chunk))):
                self._uniform_step()
                body.assign(count, cir.Int(1), "+=")
            first_empty = Binary("&&", Binary("==", count, cir.Int(0)),
                                 Binary(">", chunk, cir.Int(0)))
            body.emit(cir.If(first_empty, [cir.Break()]))
            self._lane_input_tables()
            self._blocks()
            body.assign("steps", count, "+=")
            body.emit(cir.If(cir.Var("finished"), [cir.Break()]))
        self._finish()
        return self._kernel()

    def _kernel(self) -> EmittedKernel:
        types = self.parameter_types()
        comment = (f"{sanitize(self.spec.label)}: whole loop {sanitize(self.loop.name)}, "
                   f"{self.n} lanes in {self.blocks} blocks of {self.lanes} lanes")
        stmts = self.body.prologue.stmts
        small = self.spec.runs_once and is_small_whole_loop(self.loop)
        if small:
            without_vector_loops(stmts)
        self.function = cir.Function(
            "$name", self._parameters(types), stmts, cir.Linkage.KERNEL,
            cir.Tuning.RUN_ONCE if small else cir.Tuning.WHOLE_LOOP)
        return EmittedKernel(self.lang.function(self.function), types, tuple(self.in_place),
                             comment, small, FusionKind.CUSTOM)

    def _parameters(self, types: tuple[cir.Pointer, ...]) -> list[cir.Parameter]:
        """The kernel's parameters with their roles and, for an array holding the lanes' values
        (a per-lane or streamed element's initial value and output), its lane dimension."""
        laned = {*self.plan.per_lane, *(s.element for s in self.plan.streamed)}
        element_lane_dim = {i: self.plan.lane_dims.get(i, 0) for i in laned}
        argument = {id(inst): k for k, (inst, path) in enumerate(self.spec.inputs) if not path}
        input_lane_dim: dict[int, int] = {}
        for i, value in enumerate(self.init):
            if i in element_lane_dim and id(value) in argument:
                input_lane_dim.setdefault(argument[id(value)], element_lane_dim[i])
        updated = {o for o, _ in self.in_place}
        parameters = [cir.Parameter(types[k], name, cir.Role.INPUT, input_lane_dim.get(k))
                      for k, name in enumerate(self.inputs)]
        for k, name in enumerate(self.outputs):
            role = cir.Role.IN_PLACE if k in updated else cir.Role.OUTPUT
            parameters.append(cir.Parameter(types[len(self.inputs) + k], name, role,
                                            element_lane_dim.get(k)))
        return parameters

    # --- declarations -----------------------------------------------------------------------

    def _declare_uniform_state(self) -> None:
        for i in self.plan.uniform:
            shape = self.loop.shape.elements[i]
            count = max(1, shape.num_elements)
            self.body.declare(self._register_type(shape.dtype), f"u{i}", dims=(count,))
            self._each_element(self.uniform_em, self.init[i], store_at(f"u{i}"))

    def _declare_tables(self) -> None:
        for k, inst in enumerate(self.plan.lane_inputs):
            count = self.chunk * max(1, inst.shape.num_elements)
            # Every row up to the chunk's step count is written before the lanes read one.
            self.body.declare(self._register_type(inst.dtype), f"tab{k}", dims=(count,),
                              speculable=True)
            self.tables[f"tab{k}"] = k
        for i in self.recorded:
            shape = self.loop.shape.elements[i]
            count = self.chunk * max(1, shape.num_elements)
            self.body.declare(self._register_type(shape.dtype), f"ust{i}", dims=(count,))

    def _declare_partials(self) -> None:
        """Per block partial results of each accumulator, and its initial value: read now,
        since an output may share its buffer with it."""
        for k, acc in enumerate(self.plan.accumulators):
            register = self._register_type(acc.combines[-1].dtype)
            initial = self.uniform_em.scalar(self.init[acc.element])
            self.body.declare(register, f"init{k}", initial, const=True)
            identity = self.uniform_em.scalar(acc.identity)
            self.body.emit(cir.Allocate(register, f"part{k}", self.blocks))
            self._copy_loop(self.blocks, copy(store_at(f"part{k}"), constant(identity)))
        self._declare_step_partials()

    # --- phase 1: uniform steps ---------------------------------------------------------------

    def _uniform_bindings(self) -> None:
        for comp in (self.plan.condition, self.plan.body):
            for inst in comp.instructions:
                element = element_read(inst)
                if element is None or element not in self.plan.uniform:
                    continue
                dtype = self.loop.shape.elements[element].dtype
                self.uniform_em.bindings[id(inst)] = self._local_reader(
                    self.uniform_em, dtype, f"u{element}", None)

    def _uniform_step(self) -> None:
        body, em = self.body, self.uniform_em
        self._uniform_bindings()
        with body.cache_scope():
            condition = em.scalar(self.plan.condition.root)
            body.emit(cir.If(cir.Unary("!", condition),
                             [cir.Assign(cir.Var("finished"), cir.Int(1)), cir.Break()]))
        with body.cache_scope():
            count = cir.Var("count")
            for i in self.recorded:
                size = max(1, self.loop.shape.elements[i].num_elements)
                row = Binary("*", count, cir.Int(size))
                self._copy_loop(size, copy(store_at(f"ust{i}", row), element_of(f"u{i}")))
            self._mark_step_positions()
            with self._uniform_products(em, [*(self.plan.body.root.operands[i]
                                               for i in self.plan.uniform),
                                             *(log.value for log in self.plan.step_logs)]):
                self._write_step_logs(em)
                self._commit_uniform_state(em)

    def _uniform_products(self, em: ElementalEmitter, roots: list[Instruction]
                          ) -> AbstractContextManager[None]:
        return uniform_products_in_loops(
            self.body, em, self.plan, roots, lambda inst: self._register_type(inst.dtype),
            lambda name, inst: self._local_reader(em, inst.dtype, name, None))

    def _commit_uniform_state(self, em: ElementalEmitter) -> None:
        """The step's new uniform state, every value computed before any is stored."""
        body = self.body
        commits: list[Stmt] = []
        for i in self.plan.uniform:
            value = self.plan.body.root.operands[i]
            shape = self.loop.shape.elements[i]
            if shape.num_elements <= UNROLL_ELEMENTS:
                for q, index in enumerate(element_indices(shape.dims)):
                    commits.append(cir.Assign(cir.load(f"u{i}", cir.Int(q)),
                                              em.array_value(value, index)))
                continue
            # A large uniform array: computed into a copy first, the old one is still read.
            body.declare(self._register_type(shape.dtype), f"nu{i}", dims=(shape.num_elements,))
            self._each_element(em, value, store_at(f"nu{i}"))
            commits.append(copy_whole(f"u{i}", f"nu{i}"))
        for stmt in commits:
            body.emit(stmt)

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
            element = element_read(inst)
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
        t = cir.Var("t")
        for inst in self.plan.body.instructions:
            element = element_read(inst)
            if element not in self.recorded:
                continue
            assert element is not None
            shape = self.loop.shape.elements[element]
            size = max(1, shape.num_elements)
            em.bindings[id(inst)] = self._local_reader(em, shape.dtype, f"ust{element}",
                                                       Binary("*", t, cir.Int(size)))
        with body.loop("t", 0, cir.Var("count"), cir.Loop(simd=True)), \
                self._uniform_products(em, list(self.plan.lane_inputs)):
            for k, inst in enumerate(self.plan.lane_inputs):
                row = Binary("*", t, cir.Int(max(1, inst.shape.num_elements)))
                self._each_element(em, inst, store_at(f"tab{k}", row))

    # --- phase 3: the end -------------------------------------------------------------------

    def _finish(self) -> None:
        """Once every block is done: the uniform state to its outputs, the blocks' partial
        results combined."""
        after = cir.AfterAll()
        with self.body.nested(after, after.body):
            self._outputs_after_all()

    def _stored(self, store: Callable[[Expr, Expr], Stmt], dtype: DType, q: Expr,
                value: Expr) -> Stmt:
        return store(q, self.lang.to_storage(dtype, value))

    def _outputs_after_all(self) -> None:
        body, em = self.body, self.uniform_em
        for i in self.plan.uniform:
            shape = self.loop.shape.elements[i]
            target = self.outputs[i]
            storage = functools.partial(self.lang.to_storage, shape.dtype)
            self._copy_loop(shape.num_elements,
                            copy(store_at(target), element_of(f"u{i}"), storage))
        self._output_step_logs()
        for i in self.plan.read_only:  # unchanged: a copy, unless it is the same buffer
            if any(o == i for o, _ in self.spec.aliased):
                continue
            stored = functools.partial(self._stored, store_at(self.outputs[i]),
                                       self.loop.shape.elements[i].dtype)
            self._each_element(em, self.init[i], stored)
        for k, acc in enumerate(self.plan.accumulators):
            i = acc.element
            dtype = self.loop.shape.elements[i].dtype
            total = body.variable(self._register_type(dtype), "total", cir.Var(f"init{k}"))
            with body.if_(Binary(">", cir.Var("steps"), cir.Int(0))):
                with body.loop("b", 0, self.blocks):
                    part = cir.load(f"part{k}", cir.Var("b"))
                    body.assign(total, em.apply_reducer(acc.reducer, [total], [part])[0])
            body.assign(cir.load(self.outputs[i], cir.Int(0)), self.lang.to_storage(dtype, total))
            body.emit(cir.Release(f"part{k}"))
        self._finish_step_reductions()
