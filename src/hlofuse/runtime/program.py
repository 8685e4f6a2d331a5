"""A module as a tree of thunks over logical buffers: what the driver runs, in schedule order.

Each computing instruction becomes a kernel thunk: a fusion (its fused computation) or one
unfused instruction. Tuples, get-tuple-element, reshape and bitcast move no data: they only
rename buffers (with XLA's default layouts a reshape is a bitcast). A `call` is inlined. A
`while` keeps its state in buffers of its own; copies in and out of them are explicit thunks
that buffer assignment removes when the buffers can be shared (the state then updates in
place). Conditionals copy their branch's result likewise. The entry's result is copied into
the output arrays unless its buffers can be the output arrays themselves.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np

from hlofuse.analysis.graph import post_order
from hlofuse.analysis.loop_config import known_trip_count
from hlofuse.codegen.emitter_types import UnsupportedInstruction
from hlofuse.codegen.kernel_spec import KernelSpec
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import FusionKind, Op
from hlofuse.ir.shapes import Shape


class BufferKind(enum.Enum):
    TEMPORARY = "temporary"  # in the arena
    PARAMETER = "parameter"  # the caller's input array (read only)
    CONSTANT = "constant"  # in the constant pool (read only)
    OUTPUT = "output"  # the output array returned to the caller


@dataclass(eq=False)
class Buffer:
    """One logical buffer: an array value written once (while state: once per iteration)."""

    id: int
    dtype: DType
    dims: tuple[int, ...]
    kind: BufferKind
    number: int = 0  # parameter, output or constant number
    label: str = ""

    @property
    def nbytes(self) -> int:
        return Shape.array(self.dtype, self.dims).byte_size

    def __repr__(self) -> str:
        shape = f"{self.dtype.text}{list(self.dims)}"
        return f"<buffer {self.id} {self.kind.value} {shape} {self.label}>"


Tree: TypeAlias = Buffer | tuple["Tree", ...] | None


@dataclass(eq=False)
class KernelThunk:
    spec: KernelSpec
    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    profile_id: int


@dataclass(eq=False)
class CopyThunk:
    source: Buffer
    target: Buffer
    reason: str  # while-init, while-back, branch-result, output, swap
    profile_id: int


@dataclass(eq=False)
class WhileThunk:
    label: str
    condition: list[Thunk]
    predicate: Buffer
    body: list[Thunk]
    trip_count: int | None = None  # known (backend_config): the condition is never run


@dataclass(eq=False)
class ConditionalThunk:
    label: str
    selector: Buffer
    branches: list[list[Thunk]]


Thunk: TypeAlias = KernelThunk | CopyThunk | WhileThunk | ConditionalThunk


@dataclass
class Program:
    thunks: list[Thunk]
    parameters: list[Buffer]
    outputs: list[Buffer]
    result: Tree  # the entry result's structure over output buffers
    constants: list[tuple[Buffer, np.ndarray]]
    profile_labels: list[str] = field(default_factory=list)

    def kernel_thunks(self) -> list[KernelThunk]:
        return [t for t in walk(self.thunks) if isinstance(t, KernelThunk)]


def walk(thunks: list[Thunk]) -> list[Thunk]:
    """Every thunk, nested ones included, in program order."""
    out: list[Thunk] = []
    for thunk in thunks:
        out.append(thunk)
        if isinstance(thunk, WhileThunk):
            out.extend(walk(thunk.condition))
            out.extend(walk(thunk.body))
        elif isinstance(thunk, ConditionalThunk):
            for branch in thunk.branches:
                out.extend(walk(branch))
    return out


def leaves(tree: Tree) -> list[Buffer | None]:
    if isinstance(tree, tuple):
        out: list[Buffer | None] = []
        for t in tree:
            out.extend(leaves(t))
        return out
    return [tree]


def leaf_paths(shape: Shape, prefix: tuple[int, ...] = ()) -> list[tuple[int, ...]]:
    """Paths of the array leaves of a shape (tokens have none)."""
    if shape.is_tuple:
        out: list[tuple[int, ...]] = []
        for k, element in enumerate(shape.elements):
            out.extend(leaf_paths(element, prefix + (k,)))
        return out
    return [prefix] if shape.is_array else []


def at_path(tree: Tree, path: tuple[int, ...]) -> Tree:
    for k in path:
        assert isinstance(tree, tuple)
        tree = tree[k]
    return tree


def resolve_leaf(inst: Instruction, path: tuple[int, ...]) -> tuple[Instruction, tuple[int, ...]]:
    """Follow tuple and get-tuple-element to the instruction that computes a leaf."""
    while True:
        if inst.op is Op.TUPLE and path:
            inst, path = inst.operands[path[0]], path[1:]
        elif inst.op is Op.GET_TUPLE_ELEMENT:
            index = inst.attrs["index"]
            assert isinstance(index, int)
            inst, path = inst.operands[0], (index, *path)
        else:
            return inst, path


_ALIASES = (Op.RESHAPE, Op.BITCAST, Op.OPT_BARRIER)


def schedule(comp: Computation) -> list[Instruction]:
    """Operands before users, from the root. A tuple root's elements are visited last to
    first, so a loop body computes `i + 1` after the other elements have read `i` and the new
    value can overwrite the old in place."""
    root = comp.root
    if root.op is not Op.TUPLE:
        return post_order([root])
    return [*post_order(reversed(root.operands)), root]


class ProgramBuilder:
    def __init__(self) -> None:
        self._ids = itertools.count()
        self.constants: list[tuple[Buffer, np.ndarray]] = []
        self._constant_buffers: dict[int, Buffer] = {}
        self.profile_labels: list[str] = []

    def buffer(self, shape: Shape, kind: BufferKind, label: str, number: int = 0) -> Buffer:
        return Buffer(next(self._ids), shape.dtype, shape.dims, kind, number, label)

    def tree(self, shape: Shape, label: str) -> Tree:
        if shape.is_tuple:
            return tuple(self.tree(e, label) for e in shape.elements)
        if not shape.is_array:
            return None
        return self.buffer(shape, BufferKind.TEMPORARY, label)

    def profile_id(self, label: str) -> int:
        self.profile_labels.append(label)
        return len(self.profile_labels) - 1

    def constant(self, inst: Instruction) -> Buffer:
        found = self._constant_buffers.get(id(inst))
        if found is not None:
            return found
        literal = inst.attrs["literal"]
        assert isinstance(literal, np.ndarray)
        buffer = self.buffer(inst.shape, BufferKind.CONSTANT, inst.name, len(self.constants))
        self.constants.append((buffer, np.ascontiguousarray(literal, dtype=inst.dtype.numpy)))
        self._constant_buffers[id(inst)] = buffer
        return buffer

    def copy(self, source: Buffer, target: Buffer, reason: str) -> CopyThunk:
        return CopyThunk(source, target, reason, self.profile_id(f"copy ({reason})"))

    # --- computations -------------------------------------------------------------------

    def run(self, comp: Computation, arguments: list[Tree], out: list[Thunk]) -> Tree:
        env: dict[int, Tree] = {}
        for inst in schedule(comp):
            operands = [env[id(o)] for o in inst.operands]
            env[id(inst)] = self.instruction(inst, operands, arguments, out)
        return env[id(comp.root)]

    def instruction(self, inst: Instruction, operands: list[Tree], arguments: list[Tree],
                    out: list[Thunk]) -> Tree:
        op = inst.op
        if op is Op.PARAMETER:
            return arguments[inst.parameter_number]
        if op is Op.CONSTANT:
            return self.constant(inst)
        if op is Op.TUPLE:
            return tuple(operands)
        if op is Op.GET_TUPLE_ELEMENT:
            index = inst.attrs["index"]
            assert isinstance(index, int) and isinstance(operands[0], tuple)
            return operands[0][index]
        if op in _ALIASES:
            return operands[0]
        if op is Op.AFTER_ALL:
            return None
        if op is Op.CALL:
            return self.run(inst.calls[0], operands, out)
        if op is Op.WHILE:
            return self.while_loop(inst, operands[0], out)
        if op is Op.CONDITIONAL:
            return self.conditional(inst, operands, out)
        if op is Op.RNG_BIT_GENERATOR:
            raise UnsupportedInstruction(f"%{inst.name}: rng-bit-generator is not supported "
                                         "(the reference interpreter has no semantics for it)")
        return self.kernel(inst, operands, out)

    def kernel(self, inst: Instruction, operands: list[Tree], out: list[Thunk]) -> Tree:
        if inst.op is Op.FUSION:
            fused = inst.calls[0]
            bound: list[tuple[Instruction, Tree]] = [
                (p, operands[p.parameter_number]) for p in fused.parameters]
            root = fused.root
            kind = str(inst.attrs.get("kind", FusionKind.LOOP))
            names = [i.name for i in fused.instructions if i.op is not Op.PARAMETER]
            constants = _array_constants(fused)
        else:
            distinct: dict[int, tuple[Instruction, Tree]] = {}
            for operand, tree in zip(inst.operands, operands):
                distinct.setdefault(id(operand), (operand, tree))
            bound = list(distinct.values())
            root = inst
            kind = inst.op.text
            names = [inst.name]
            constants = []
        inputs: list[tuple[Instruction, tuple[int, ...]]] = []
        buffers: list[Buffer] = []
        for param, tree in bound:
            for path in leaf_paths(param.shape):
                leaf = at_path(tree, path)
                assert isinstance(leaf, Buffer)
                inputs.append((param, path))
                buffers.append(leaf)
        for constant in constants:
            inputs.append((constant, ()))
            buffers.append(self.constant(constant))
        result = self.tree(inst.shape, inst.name)
        outputs = [resolve_leaf(root, path) for path in leaf_paths(inst.shape)]
        config = next((raw.text for key, raw in inst.extra if key == "backend_config"), "")
        spec = KernelSpec(inst.name, kind, tuple(inputs), tuple(outputs), tuple(names),
                          backend_config=config)
        written = tuple(b for b in leaves(result) if b is not None)
        out.append(KernelThunk(spec, tuple(buffers), written, self.profile_id(inst.name)))
        return result

    def while_loop(self, inst: Instruction, init: Tree, out: list[Thunk]) -> Tree:
        condition, body = inst.calls
        state = self.tree(inst.shape, inst.name)
        for source, target in zip(leaves(init), leaves(state)):
            if source is not None and target is not None:
                out.append(self.copy(source, target, "while-init"))
        condition_thunks: list[Thunk] = []
        predicate = self.run(condition, [state], condition_thunks)
        body_thunks: list[Thunk] = []
        result = self.run(body, [state], body_thunks)
        _hint_in_place(body_thunks, leaves(result), leaves(state))
        self._copy_back(leaves(result), leaves(state), body_thunks)
        assert isinstance(predicate, Buffer)
        out.append(WhileThunk(inst.name, condition_thunks, predicate, body_thunks,
                              known_trip_count(inst)))
        return state

    def _copy_back(self, results: list[Buffer | None], state: list[Buffer | None],
                   thunks: list[Thunk]) -> None:
        """Copy the body's result into the state; state elements that move to another
        position (a swap) go through a temporary so no copy reads an overwritten value."""
        owned = {id(b): b for b in state if b is not None}
        sources: list[Buffer | None] = []
        for source, target in zip(results, state):
            if source is not None and target is not None and source is not target \
                    and id(source) in owned:
                temporary = self.buffer(Shape.array(source.dtype, source.dims),
                                        BufferKind.TEMPORARY, source.label)
                thunks.append(self.copy(source, temporary, "swap"))
                source = temporary
            sources.append(source)
        for source, target in zip(sources, state):
            if source is not None and target is not None and source is not target:
                thunks.append(self.copy(source, target, "while-back"))

    def conditional(self, inst: Instruction, operands: list[Tree], out: list[Thunk]) -> Tree:
        selector = operands[0]
        assert isinstance(selector, Buffer)
        result = self.tree(inst.shape, inst.name)
        branches: list[list[Thunk]] = []
        for branch, argument in zip(inst.calls, operands[1:]):
            thunks: list[Thunk] = []
            value = self.run(branch, [argument], thunks)
            for source, target in zip(leaves(value), leaves(result)):
                if source is not None and target is not None:
                    thunks.append(self.copy(source, target, "branch-result"))
            branches.append(thunks)
        out.append(ConditionalThunk(inst.name, selector, branches))
        return result


def _hint_in_place(thunks: list[Thunk], results: list[Buffer | None],
                   state: list[Buffer | None]) -> None:
    """Ask each kernel computing a new state element to write it over the old one."""
    for thunk in thunks:
        if not isinstance(thunk, KernelThunk):
            continue
        hints = []
        for result, old in zip(results, state):
            if result is None or old is None:
                continue
            outputs = [k for k, b in enumerate(thunk.outputs) if b is result]
            inputs = [j for j, b in enumerate(thunk.inputs) if b is old]
            if outputs and inputs:
                hints.append((outputs[0], inputs[0]))
        if hints:
            thunk.spec = dataclasses.replace(thunk.spec, in_place_hints=tuple(hints))


def _array_constants(comp: Computation) -> list[Instruction]:
    """Array constants of a fused computation and what it calls: read from the pool."""
    out = []
    stack = [comp]
    seen: set[int] = set()
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        for inst in current.instructions:
            if inst.op is Op.CONSTANT and inst.shape.dims:
                out.append(inst)
            stack.extend(inst.calls)
    return out


def build_program(module: Module) -> Program:
    builder = ProgramBuilder()
    params: list[Buffer] = []
    arguments: list[Tree] = []
    for p in module.entry.parameters:
        if not p.shape.is_array:
            raise UnsupportedInstruction(
                f"%{p.name}: entry parameters must be arrays, got {p.shape.text(False)}")
        buffer = builder.buffer(p.shape, BufferKind.PARAMETER, p.name, p.parameter_number)
        params.append(buffer)
        arguments.append(buffer)
    thunks: list[Thunk] = []
    result = builder.run(module.entry, arguments, thunks)
    outputs: list[Buffer] = []

    def output_tree(tree: Tree, shape: Shape) -> Tree:
        if isinstance(tree, tuple):
            return tuple(output_tree(t, s) for t, s in zip(tree, shape.elements))
        if tree is None:
            return None
        # The shape comes from the result, not the buffer: a reshape only renames a buffer.
        target = builder.buffer(shape, BufferKind.OUTPUT, f"output {len(outputs)}", len(outputs))
        outputs.append(target)
        thunks.append(builder.copy(tree, target, "output"))
        return target

    structure = output_tree(result, module.result_shape)
    return Program(thunks, params, outputs, structure, builder.constants,
                   builder.profile_labels)
