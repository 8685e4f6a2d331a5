"""Compile a module to a shared object and run it: `compile_cpu(module)(*arrays)`.

The generated driver runs the whole module in one ctypes call. The Python thunk runner
(`run_thunks`) walks the same thunk tree and calls each kernel through its exported entry;
it exists for debugging and for profiling with Python-side timers.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from hlofuse.codegen.c_emitter import (
    EmittedKernel, KernelOptions, emit_kernel, kernel_instructions, sanitize)
from hlofuse.codegen.elemental import UnsupportedInstruction
from hlofuse.codegen.language import C, CLanguage
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape
from hlofuse.ir.verifier import verify
from hlofuse.runtime.buffers import ALIGNMENT, Assignment, assign_buffers
from hlofuse.runtime.driver import KernelFunction, ModuleSource, module_source
from hlofuse.runtime.profile import KernelProfile, Profile
from hlofuse.runtime.program import (
    Buffer, BufferKind, ConditionalThunk, CopyThunk, KernelThunk, Program, Thunk, Tree,
    WhileThunk, build_program, walk)
from hlofuse.toolchain.cache import Cache
from hlofuse.toolchain.compiler import DEFAULT_FLAGS, build_shared_object, load_library

PROFILE_SAMPLES = 4096  # per kernel: the median is over the last this many calls


class CodegenError(ValueError):
    """The module cannot be compiled for the CPU; the message names the instruction."""


@dataclass(frozen=True)
class CompileOptions:
    kernel: KernelOptions = field(default_factory=KernelOptions)
    flags: tuple[str, ...] = DEFAULT_FLAGS
    verify: bool = True


@dataclass(frozen=True)
class KernelInfo:
    """One kernel call site of the program."""

    name: str  # the fusion or unfused instruction
    kind: str
    function: str
    instructions: tuple[str, ...]
    bytes_read: int  # per call
    bytes_written: int


@functools.lru_cache(maxsize=None)
def runtime_library(flags: tuple[str, ...] = DEFAULT_FLAGS) -> ctypes.CDLL:
    """The separately compiled library of dot and Threefry, loaded for every module to see."""
    source = resources.files("hlofuse.runtime").joinpath("hlofuse_rt.c").read_text()
    built = build_shared_object(source, flags)
    return load_library(built.path, global_symbols=True)


@dataclass
class Generated:
    """Everything compile_cpu derives from a module before invoking the compiler."""

    module: Module
    program: Program
    emitted: dict[int, EmittedKernel]
    assignment: Assignment
    constants: np.ndarray  # the constant pool, 64-byte aligned entries
    constant_offsets: list[int]
    source: ModuleSource


def generate(module: Module, options: CompileOptions = CompileOptions(),
             lang: CLanguage = C) -> Generated:
    """The C source and runtime plan of a module, without compiling it."""
    if options.verify:
        verify(module)
    try:
        program = build_program(module)
        emitted = {id(t): emit_kernel(t.spec, lang, options.kernel)
                   for t in program.kernel_thunks()}
    except UnsupportedInstruction as e:
        raise CodegenError(f"{module.name}: {e}") from None
    assignment = assign_buffers(program, {k: e.in_place for k, e in emitted.items()})
    for thunk in program.kernel_thunks():
        # Kernels whose output got its input's buffer are emitted again to read through one
        # pointer; the others keep the first emission.
        shared = tuple((o, i) for o, i in emitted[id(thunk)].in_place
                       if assignment.of(thunk.outputs[o]) == assignment.of(thunk.inputs[i]))
        if shared:
            thunk.spec = dataclasses.replace(thunk.spec, aliased=shared)
            emitted[id(thunk)] = emit_kernel(thunk.spec, lang, options.kernel)
    pool, offsets = _constant_pool(program)
    source = module_source(program, emitted, assignment, offsets, lang,
                           f"module {sanitize(module.name)}")
    return Generated(module, program, emitted, assignment, pool, offsets, source)


def _constant_pool(program: Program) -> tuple[np.ndarray, list[int]]:
    offsets = []
    total = 0
    for _, literal in program.constants:
        offsets.append(total)
        total += -(-literal.nbytes // ALIGNMENT) * ALIGNMENT
    pool = _aligned_bytes(total)
    for (_, literal), offset in zip(program.constants, offsets):
        pool[offset:offset + literal.nbytes] = literal.reshape(-1).view(np.uint8)
    return pool, offsets


def _aligned_bytes(count: int) -> np.ndarray:
    raw = np.zeros(count + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + count]


def compile_cpu(module: Module, options: CompileOptions = CompileOptions()) -> Executable:
    """Generate C for `module` (fused or not), compile it through the cache, load it."""
    start = time.perf_counter()
    generated = generate(module, options)
    runtime_library(options.flags)
    built = build_shared_object(generated.source.text, options.flags, Cache.open())
    library = load_library(built.path)
    return Executable(generated, library, built.cache_hit, time.perf_counter() - start)


def compile_many(modules: Sequence[Module], options: CompileOptions = CompileOptions(),
                 workers: int = 2) -> list[Executable]:
    """compile_cpu for several modules, generating C for the next ones while the compiler
    (a separate process) builds earlier ones: `workers` compilers run at once."""
    runtime_library(options.flags)
    cache = Cache.open()
    with ThreadPoolExecutor(max(workers, 1)) as pool:
        jobs = []
        for module in modules:
            start = time.perf_counter()
            generated = generate(module, options)
            build = pool.submit(build_shared_object, generated.source.text, options.flags, cache)
            jobs.append((generated, build, start))
        out = []
        for generated, build, start in jobs:
            built = build.result()
            out.append(Executable(generated, load_library(built.path), built.cache_hit,
                                  time.perf_counter() - start))
    return out


class _Pointers(ctypes.Structure):
    _fields_ = [("counts", ctypes.c_void_p), ("totals", ctypes.c_void_p),
                ("samples", ctypes.c_void_p), ("capacity", ctypes.c_int64),
                ("started", ctypes.c_double)]


class Executable:
    """A compiled module: call it with NumPy arrays, get NumPy arrays back."""

    def __init__(self, generated: Generated, library: ctypes.CDLL, cache_hit: bool,
                 compile_seconds: float) -> None:
        self._generated = generated
        self._library = library
        self.cache_hit = cache_hit
        self.compile_seconds = compile_seconds
        self._run = library.hlofuse_run
        self._run.restype = ctypes.c_int
        self._run.argtypes = [ctypes.c_void_p] * 5
        self._arena = _aligned_bytes(generated.assignment.arena_bytes)
        self._lock = threading.Lock()
        self._entries: dict[str, Callable[..., object]] = {}

    # --- facts --------------------------------------------------------------------------

    @property
    def module(self) -> Module:
        return self._generated.module

    @property
    def peak_bytes(self) -> int:
        """Bytes of the arena holding every temporary buffer (the liveness-packed peak)."""
        return self._generated.assignment.arena_bytes

    @property
    def program(self) -> Program:
        return self._generated.program

    def source(self) -> str:
        """The generated C."""
        return self._generated.source.text

    @property
    def functions(self) -> tuple[KernelFunction, ...]:
        return self._generated.source.functions

    @property
    def kernels(self) -> list[KernelInfo]:
        out = []
        for thunk in self.program.kernel_thunks():
            read, written = self._traffic(thunk)
            out.append(KernelInfo(thunk.spec.label, thunk.spec.kind, self._function(thunk).name,
                                  thunk.spec.instructions, read, written))
        return out

    def _function(self, thunk: KernelThunk) -> KernelFunction:
        return self._generated.source.function_of[id(thunk)]

    def _traffic(self, thunk: KernelThunk) -> tuple[int, int]:
        """(bytes read, bytes written) by one call of a kernel."""
        storage = self._generated.assignment
        read = 0
        seen: set[int] = set()
        for (inst, path), buffer in zip(thunk.spec.inputs, thunk.inputs):
            if buffer.id in seen:
                continue
            seen.add(buffer.id)
            read += _bytes_read(thunk, inst, buffer)
        written = sum(b.nbytes for b in thunk.outputs)
        for out_k, in_k in self._generated.emitted[id(thunk)].in_place:
            source, target = thunk.inputs[in_k], thunk.outputs[out_k]
            update = _update_bytes(thunk, out_k)
            if update is not None and storage.of(source) == storage.of(target):
                # An in-place dynamic-update-slice touches only the window it writes.
                read -= source.nbytes
                written += update - target.nbytes
        return read, written

    # --- running ------------------------------------------------------------------------

    def _arguments(self, args: Sequence[object]) -> list[np.ndarray]:
        params = self.program.parameters
        if len(args) != len(params):
            raise TypeError(f"{self.module.name} takes {len(params)} argument(s), got {len(args)}")
        out = []
        for k, (arg, buffer) in enumerate(zip(args, params)):
            out.append(_check_argument(k, arg, buffer))
        return out

    def _outputs(self) -> list[np.ndarray]:
        return [np.empty(b.dims, b.dtype.numpy) for b in self.program.outputs]

    def _result(self, outputs: list[np.ndarray]) -> object:
        def build(tree: Tree) -> object:
            if isinstance(tree, tuple):
                return tuple(build(t) for t in tree)
            if tree is None:
                return None
            return outputs[tree.number]

        return build(self.program.result)

    def __call__(self, *args: object) -> object:
        arrays = self._arguments(args)
        outputs = self._outputs()
        with self._lock:
            self._call_driver(arrays, outputs, None)
        return self._result(outputs)

    def _call_driver(self, arrays: list[np.ndarray], outputs: list[np.ndarray],
                     profile: _Pointers | None) -> None:
        params = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        outs = (ctypes.c_void_p * max(len(outputs), 1))(*[o.ctypes.data for o in outputs])
        status = self._run(ctypes.addressof(params), ctypes.addressof(outs),
                           self._arena.ctypes.data, self._generated.constants.ctypes.data,
                           ctypes.addressof(profile) if profile is not None else None)
        if status != 0:
            raise RuntimeError(f"{self.module.name}: the driver returned {status}")

    def profile(self, *args: object, repeat: int = 1, runner: str = "driver") -> Profile:
        """Run `repeat` times timing every kernel and copy; `runner` is "driver" (timers in
        the generated C) or "thunks" (the Python thunk runner, one ctypes call per kernel)."""
        if runner not in ("driver", "thunks"):
            raise ValueError(f"runner must be 'driver' or 'thunks', got {runner!r}")
        arrays = self._arguments(args)
        count = len(self.program.profile_labels)
        counts = np.zeros(max(count, 1), np.int64)
        totals = np.zeros(max(count, 1), np.float64)
        samples = np.zeros(max(count, 1) * PROFILE_SAMPLES, np.float64)
        pointers = _Pointers(counts.ctypes.data, totals.ctypes.data, samples.ctypes.data,
                             PROFILE_SAMPLES, 0.0)
        wall = 0.0
        with self._lock:
            for _ in range(repeat):
                outputs = self._outputs()
                start = time.perf_counter()
                if runner == "driver":
                    self._call_driver(arrays, outputs, pointers)
                else:
                    self._run_thunks(arrays, outputs, (counts, totals, samples))
                wall += time.perf_counter() - start
        return self._profile(counts, totals, samples, wall, repeat, runner)

    def _profile(self, counts: np.ndarray, totals: np.ndarray, samples: np.ndarray,
                 wall: float, runs: int, runner: str) -> Profile:
        rows = []
        for thunk in walk(self.program.thunks):
            if isinstance(thunk, KernelThunk):
                name, kind, function = thunk.spec.label, thunk.spec.kind, self._function(
                    thunk).name
                read, written = self._traffic(thunk)
            elif isinstance(thunk, CopyThunk):
                if id(thunk) in self._generated.assignment.elided:
                    continue
                name, kind, function = f"copy ({thunk.reason})", "copy", "memcpy"
                read = written = thunk.source.nbytes
            else:
                continue
            k = thunk.profile_id
            calls = int(counts[k])
            recorded = samples[k * PROFILE_SAMPLES:k * PROFILE_SAMPLES + min(calls,
                                                                             PROFILE_SAMPLES)]
            median = float(np.median(recorded)) if calls else 0.0
            total = float(totals[k])
            rows.append(KernelProfile(k, name, kind, function, calls, total, median,
                                      read * calls, written * calls,
                                      total / wall if wall > 0 else 0.0))
        return Profile(tuple(rows), wall, runs, runner)

    # --- the Python thunk runner ---------------------------------------------------------

    def run_thunks(self, *args: object) -> object:
        """Run through the Python thunk runner: same results as calling, slower."""
        arrays = self._arguments(args)
        outputs = self._outputs()
        with self._lock:
            self._run_thunks(arrays, outputs, None)
        return self._result(outputs)

    def _entry(self, function: KernelFunction) -> Callable[..., object]:
        entry = self._entries.get(function.name)
        if entry is None:
            entry = getattr(self._library, f"hlofuse_kernel_{function.name}")
            entry.argtypes = [ctypes.c_void_p]  # type: ignore[attr-defined]
            entry.restype = None  # type: ignore[attr-defined]
            self._entries[function.name] = entry
        return entry

    def _run_thunks(self, arrays: list[np.ndarray], outputs: list[np.ndarray],
                    timing: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> None:
        assignment = self._generated.assignment
        arena = self._arena.ctypes.data
        pool = self._generated.constants.ctypes.data
        offsets = self._generated.constant_offsets

        def address(buffer: Buffer) -> int:
            storage = assignment.of(buffer)
            if storage.kind is BufferKind.TEMPORARY:
                return arena + storage.offset
            if storage.kind is BufferKind.PARAMETER:
                return int(arrays[storage.offset].ctypes.data)
            if storage.kind is BufferKind.OUTPUT:
                return int(outputs[storage.offset].ctypes.data)
            return pool + offsets[storage.offset]

        def timed(profile_id: int, action: Callable[[], object]) -> None:
            if timing is None:
                action()
                return
            counts, totals, samples = timing
            start = time.perf_counter()
            action()
            seconds = time.perf_counter() - start
            n = counts[profile_id]
            counts[profile_id] += 1
            totals[profile_id] += seconds
            samples[profile_id * PROFILE_SAMPLES + n % PROFILE_SAMPLES] = seconds

        def run(thunks: list[Thunk]) -> None:
            for thunk in thunks:
                if isinstance(thunk, KernelThunk):
                    entry = self._entry(self._function(thunk))
                    pointers = [address(b) for b in (*thunk.inputs, *thunk.outputs)]
                    block = (ctypes.c_void_p * max(len(pointers), 1))(*pointers)
                    timed(thunk.profile_id, lambda: entry(ctypes.addressof(block)))
                elif isinstance(thunk, CopyThunk):
                    if id(thunk) in assignment.elided or thunk.source.nbytes == 0:
                        continue
                    target, source = address(thunk.target), address(thunk.source)
                    size = thunk.source.nbytes
                    timed(thunk.profile_id, lambda: ctypes.memmove(target, source, size))
                elif isinstance(thunk, WhileThunk):
                    while True:
                        run(thunk.condition)
                        if not ctypes.c_uint8.from_address(address(thunk.predicate)).value:
                            break
                        run(thunk.body)
                elif isinstance(thunk, ConditionalThunk):
                    run(thunk.branches[_branch(thunk, address(thunk.selector))])

        run(self.program.thunks)


def _branch(thunk: ConditionalThunk, selector: int) -> int:
    if thunk.selector.dtype.is_pred:
        return 0 if ctypes.c_uint8.from_address(selector).value else 1
    index = ctypes.c_int32.from_address(selector).value
    return index if 0 <= index < len(thunk.branches) else len(thunk.branches) - 1


def _check_argument(k: int, arg: object, buffer: Buffer) -> np.ndarray:
    """The interpreter's checks and messages, plus contiguity (kernels index flat memory)."""
    expected = buffer.dtype.numpy
    shape = Shape.array(buffer.dtype, buffer.dims).text(False)
    if isinstance(arg, bool | int | float) and not buffer.dims:
        return np.asarray(arg, dtype=expected)
    if isinstance(arg, np.generic):
        arg = np.asarray(arg)
    if not isinstance(arg, np.ndarray):
        raise TypeError(f"argument {k}: expected a NumPy array of {shape}, got "
                        f"{type(arg).__name__}")
    if arg.dtype != expected or arg.shape != buffer.dims:
        raise TypeError(f"argument {k}: expected {shape}, got {arg.dtype}{list(arg.shape)}")
    if not arg.flags.c_contiguous:
        raise ValueError(f"argument {k}: expected a C-contiguous array of {shape}, got one with "
                         f"strides {arg.strides}; pass np.ascontiguousarray(x)")
    return arg


def _bytes_read(thunk: KernelThunk, inst: Instruction, buffer: Buffer) -> int:
    """An input read only through dynamic-slice windows costs the windows, not the array."""
    users = [i for i in _kernel_instructions(thunk) if any(o is inst for o in i.operands)]
    if users and all(u.op is Op.DYNAMIC_SLICE and u.operands[0] is inst
                     and all(o is not inst for o in u.operands[1:]) for u in users):
        return min(buffer.nbytes, sum(u.shape.byte_size for u in users))
    return buffer.nbytes


def _kernel_instructions(thunk: KernelThunk) -> list[Instruction]:
    return kernel_instructions(thunk.spec)


def _update_bytes(thunk: KernelThunk, output: int) -> int | None:
    inst, _ = thunk.spec.outputs[output]
    return inst.operands[1].shape.byte_size if inst.op is Op.DYNAMIC_UPDATE_SLICE else None
