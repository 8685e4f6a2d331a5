"""Lowering a module to source code: the one generate loop every source-emitting target runs.

The module becomes a thunk program (`program.py`); the target emits each kernel thunk's code;
buffer assignment then decides which outputs may update an input in place, and kernels whose
output got its input's buffer are emitted again to read through one pointer; the constants go
into one pool; the target writes the module's source around its kernels (a driver that runs
the thunks). Targets differ only in the `KernelCodegen` they pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from hlofuse.codegen import cir
from hlofuse.codegen.emitter_types import UnsupportedInstruction
from hlofuse.codegen.kernel_spec import EmittedKernel, KernelSpec, sanitize
from hlofuse.codegen.whole_loop import whole_loop_in_place
from hlofuse.ir.hlo import Module
from hlofuse.ir.verifier import verify
from hlofuse.passes.manager import gc_paused
from hlofuse.runtime.buffers import ALIGNMENT, Assignment, assign_buffers
from hlofuse.runtime.program import Program, build_program
from hlofuse.runtime.target import CodegenError


@dataclass(frozen=True)
class KernelFunction:
    """A generated function shared by the kernel thunks whose kernels are identical."""

    name: str
    parameter_types: tuple[cir.Pointer, ...]
    comment: str


@dataclass(frozen=True)
class ModuleSource:
    text: str  # what the compiler gets: the header and the math library included whole
    functions: tuple[KernelFunction, ...]
    function_of: Mapping[int, KernelFunction]  # id(kernel thunk) -> its function
    listing: str = ""  # for reading: the kernels first, the headers included by name
    # The same module as two translation units, where the target compiles some kernels with
    # other flags (the C target's small kernels): the others with the driver, then those.
    split: tuple[str, str] | None = None
    small_code_bytes: int = 0  # how much of `text` the small kernels' code is


class KernelCodegen(Protocol):
    """What the generate loop asks of a source-emitting target."""

    def prepare(self, spec: KernelSpec) -> KernelSpec:
        """The spec as this target emits it (a target may set its own whole-loop config)."""
        ...

    def emit(self, spec: KernelSpec) -> EmittedKernel: ...

    def emit_aliased(self, first: EmittedKernel, spec: KernelSpec) -> EmittedKernel:
        """The kernel again, reading the inputs of `spec.aliased` through the outputs."""
        ...

    def module_source(self, program: Program, emitted: Mapping[int, EmittedKernel],
                      assignment: Assignment, constant_offsets: list[int],
                      constant_bytes: int, what: str) -> ModuleSource: ...


@dataclass
class Generated:
    """Everything lowering derives from a module before a compiler runs."""

    module: Module
    program: Program
    emitted: dict[int, EmittedKernel]
    assignment: Assignment
    constants: np.ndarray  # the constant pool, ALIGNMENT-aligned entries
    constant_offsets: list[int]
    source: ModuleSource


def generate(module: Module, codegen: KernelCodegen, check: bool = True) -> Generated:
    """The source and runtime plan of a module for one target, without compiling it."""
    with gc_paused():
        if check:
            verify(module)
        try:
            return _generate(module, codegen)
        except UnsupportedInstruction as e:
            raise CodegenError(f"{module.name}: {e}") from None


def _generate(module: Module, codegen: KernelCodegen) -> Generated:
    program = build_program(module)
    thunks = program.kernel_thunks()
    top_level = {id(t) for t in program.thunks}
    for thunk in thunks:
        thunk.spec = codegen.prepare(thunk.spec)
        if id(thunk) in top_level:
            thunk.spec = dataclasses.replace(thunk.spec, runs_once=True)
    # A whole-loop kernel's in-place pairs are known from its spec, so it is emitted once,
    # after buffer assignment; other kernels tell theirs by being emitted.
    emitted = {id(t): codegen.emit(t.spec) for t in thunks if not t.spec.own_emitter}
    in_place = {id(t): emitted[id(t)].in_place if id(t) in emitted
                else whole_loop_in_place(t.spec) for t in thunks}
    assignment = assign_buffers(program, in_place)
    for thunk in thunks:
        # Kernels whose output got its input's buffer are emitted again to read through one
        # pointer; the others keep the first emission.
        shared = tuple((o, i) for o, i in in_place[id(thunk)]
                       if assignment.of(thunk.outputs[o]) == assignment.of(thunk.inputs[i]))
        if shared:
            thunk.spec = dataclasses.replace(thunk.spec, aliased=shared)
        if id(thunk) not in emitted:
            emitted[id(thunk)] = codegen.emit(thunk.spec)
        elif shared:
            emitted[id(thunk)] = codegen.emit_aliased(emitted[id(thunk)], thunk.spec)
    # The statements kept for retargeting are not needed past this point.
    emitted = {key: dataclasses.replace(kernel, retargetable=None)
               for key, kernel in emitted.items()}
    pool, offsets = constant_pool(program)
    source = codegen.module_source(program, emitted, assignment, offsets, int(pool.nbytes),
                                   f"module {sanitize(module.name)}")
    return Generated(module, program, emitted, assignment, pool, offsets, source)


def constant_pool(program: Program) -> tuple[np.ndarray, list[int]]:
    """The program's array constants in one aligned pool, and each one's offset in it."""
    offsets = []
    total = 0
    for _, literal in program.constants:
        offsets.append(total)
        total += -(-literal.nbytes // ALIGNMENT) * ALIGNMENT
    pool = aligned_bytes(total)
    for (_, literal), offset in zip(program.constants, offsets):
        pool[offset:offset + literal.nbytes] = literal.reshape(-1).view(np.uint8)
    return pool, offsets


def aligned_bytes(count: int) -> np.ndarray:
    """`count` zero bytes starting at an ALIGNMENT boundary."""
    raw = np.zeros(count + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + count]
