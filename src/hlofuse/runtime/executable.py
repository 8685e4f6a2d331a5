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

from hlofuse.codegen.emitter_types import UnsupportedInstruction
from hlofuse.codegen.kernel import emit_aliased, emit_kernel
from hlofuse.codegen.kernel_spec import EmittedKernel, KernelOptions, sanitize
from hlofuse.codegen.language import C, CLanguage
from hlofuse.codegen.whole_loop import whole_loop_in_place
from hlofuse.ir.hlo import Module
from hlofuse.ir.shapes import Shape
from hlofuse.ir.verifier import verify
from hlofuse.passes.manager import gc_paused
from hlofuse.runtime.buffers import ALIGNMENT, Assignment, assign_buffers
from hlofuse.runtime.driver import KernelFunction, ModuleSource, module_source
from hlofuse.runtime.plan import ExecutablePlan, KernelInfo, plan_of
from hlofuse.runtime.profile import KernelProfile, Profile
from hlofuse.runtime.program import (
    Buffer,
    BufferKind,
    ConditionalThunk,
    CopyThunk,
    KernelThunk,
    Program,
    Thunk,
    Tree,
    WhileThunk,
    build_program,
)
from hlofuse.toolchain.cache import Cache
from hlofuse.toolchain.compiler import (
    DEFAULT_FLAGS,
    Compiler,
    Unit,
    build_shared_object,
    cache_key,
    load_library,
)

PROFILE_SAMPLES = 4096  # per kernel: the median is over the last this many calls


class CodegenError(ValueError):
    """The module cannot be compiled for the CPU; the message names the instruction."""


@dataclass(frozen=True)
class CompileOptions:
    kernel: KernelOptions = field(default_factory=KernelOptions)
    flags: tuple[str, ...] = DEFAULT_FLAGS
    verify: bool = True


@functools.cache
def runtime_library(flags: tuple[str, ...] = DEFAULT_FLAGS) -> ctypes.CDLL:
    """The separately compiled library of dot and Threefry, loaded for every module to see."""
    files = resources.files("hlofuse.runtime")
    source = files.joinpath("hlofuse_rt.c").read_text()
    source += "\n" + files.joinpath("hlofuse_linalg.c").read_text()  # codegen/linalg.py
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
    with gc_paused():
        if options.verify:
            verify(module)
        try:
            return _generate(module, options, lang)
        except UnsupportedInstruction as e:
            raise CodegenError(f"{module.name}: {e}") from None


def _generate(module: Module, options: CompileOptions, lang: CLanguage) -> Generated:
    program = build_program(module)
    thunks = program.kernel_thunks()
    # A whole-loop kernel's in-place pairs are known from its spec, so it is emitted once,
    # after buffer assignment; other kernels tell theirs by being emitted.
    emitted = {id(t): emit_kernel(t.spec, lang, options.kernel) for t in thunks
               if not t.spec.own_emitter}
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
            emitted[id(thunk)] = emit_kernel(thunk.spec, lang, options.kernel)
        elif shared:
            emitted[id(thunk)] = emit_aliased(emitted[id(thunk)], thunk.spec, lang,
                                              options.kernel)
    # The statements kept for retargeting are not needed past this point.
    emitted = {key: dataclasses.replace(kernel, retargetable=None)
               for key, kernel in emitted.items()}
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


# gcc's RTL combiner tries up to four instructions at a time; on the long straight-line
# kernels of unrolled loops that is about a third of the C compiler's time. Kernels under the
# small-kernel limit compile at -O1 (their run time is launches and memory), and for them the
# combiner is off (gcc's -fdisable-rtl-combine). Measured free: CartPole, 256 environments,
# run-time ratios without/with pair-only combining 0.93-1.00 (unroll 1, 10, 40; xla and
# xla+relax_concatenate; 31 alternating runs each, equal outputs), as pair-only combining
# was against the full combiner (0.95-1.05), where -O3 kernels lose 3-5% of run time. At
# unroll 40 the small kernels' unit compiles in 0.66 s instead of 1.2 s (2.4 s with the full
# combiner). gcc's optimize attribute takes neither option, so they are set per translation
# unit: for a module whose every kernel is small, and, in a module with both, for a unit of
# its small kernels (`ModuleSource.split`) where their code is large enough to pay for a
# second unit.
SMALL_MODULE_FLAGS: tuple[str, ...] = ("-fdisable-rtl-combine",)
# A second unit parses the header again (about 30 ms) and adds a link: worth it where the
# small kernels are long (the combiner's time grows faster than a function's length).
SPLIT_MIN_SMALL_BYTES = 64 * 1024


def compile_units(generated: Generated, flags: tuple[str, ...],
                  compiler: Compiler | None = None) -> tuple[Unit, ...]:
    """The translation units `generated` is compiled as, with the flags each adds to `flags`:
    where `flags` are the defaults and the compiler is gcc, SMALL_MODULE_FLAGS for a module of
    small kernels, or for its small kernels' own unit; otherwise the module as one unit."""
    whole = (Unit(generated.source.text),)
    if flags != DEFAULT_FLAGS or not generated.emitted:
        return whole
    every_small = all(kernel.is_small for kernel in generated.emitted.values())
    split = generated.source.split
    if not every_small and (split is None
                            or generated.source.small_code_bytes < SPLIT_MIN_SMALL_BYTES):
        return whole
    version = (compiler or Compiler.find()).version.lower()
    if "clang" in version or "intel" in version:
        return whole
    if every_small:
        return (Unit(generated.source.text, SMALL_MODULE_FLAGS),)
    assert split is not None
    return (Unit(split[0]), Unit(split[1], SMALL_MODULE_FLAGS))


def compile_cpu(module: Module, options: CompileOptions = CompileOptions()) -> Executable:
    """Generate C for `module` (fused or not), compile it through the cache, load it."""
    start = time.perf_counter()
    generated = generate(module, options)
    runtime_library(options.flags)
    built = build_shared_object(compile_units(generated, options.flags), options.flags,
                                Cache.open())
    library = load_library(built.path)
    return Executable(generated, library, built.cache_hit, time.perf_counter() - start,
                      built.key)


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
            build = pool.submit(build_shared_object, compile_units(generated, options.flags),
                                options.flags, cache)
            jobs.append((generated, build, start))
        out = []
        for generated, build, start in jobs:
            built = build.result()
            out.append(Executable(generated, load_library(built.path), built.cache_hit,
                                  time.perf_counter() - start, built.key))
    return out


class _Pointers(ctypes.Structure):
    _fields_ = [("counts", ctypes.c_void_p), ("totals", ctypes.c_void_p),
                ("samples", ctypes.c_void_p), ("capacity", ctypes.c_int64),
                ("started", ctypes.c_double)]


class Executable:
    """A compiled module: call it with NumPy arrays, get NumPy arrays back.

    Calling and profiling need only the plan (`ExecutablePlan`); one loaded from the cache
    (`from_plan`) generates its module's code again only when asked for what the plan does
    not keep (the module, its program, the C source, the Python thunk runner)."""

    def __init__(self, generated: Generated, library: ctypes.CDLL, cache_hit: bool,
                 compile_seconds: float, object_key: str = "") -> None:
        self._generated_now: Generated | None = generated
        self._regenerate: Callable[[], Generated] | None = None
        self._flags = DEFAULT_FLAGS
        self._start(plan_of(generated, object_key), library, cache_hit, compile_seconds)

    @classmethod
    def from_plan(cls, plan: ExecutablePlan, library: ctypes.CDLL, cache_hit: bool,
                  compile_seconds: float, regenerate: Callable[[], Generated],
                  flags: tuple[str, ...] = DEFAULT_FLAGS) -> Executable:
        """An executable of a saved plan and its loaded library; `regenerate` gives the
        module's Generated when something needs it (its source, compiled with `flags`, must
        be what built `plan.object_key`)."""
        executable = cls.__new__(cls)
        executable._generated_now = None
        executable._regenerate = regenerate
        executable._flags = flags
        executable._start(plan, library, cache_hit, compile_seconds)
        return executable

    def _start(self, plan: ExecutablePlan, library: ctypes.CDLL, cache_hit: bool,
               compile_seconds: float) -> None:
        self.plan = plan
        self._library = library
        self.cache_hit = cache_hit
        self.compile_seconds = compile_seconds
        self._run = library.hlofuse_run
        self._run.restype = ctypes.c_int
        self._run.argtypes = [ctypes.c_void_p] * 5
        self._arena = _aligned_bytes(plan.arena_bytes)
        self._lock = threading.Lock()
        self._entries: dict[str, Callable[..., object]] = {}

    @property
    def _generated(self) -> Generated:
        if self._generated_now is None:
            assert self._regenerate is not None
            generated = self._regenerate()
            compiler = Compiler.find()
            key = cache_key(compile_units(generated, self._flags, compiler), self._flags,
                            compiler)
            if self.plan.object_key and key != self.plan.object_key:
                # The loaded library was built from other code: its kernels cannot be called
                # through this program's thunks.
                raise RuntimeError(f"{self.plan.name}: the code generated again differs from "
                                   "the cached library's; clear the cache (hlofuse cache "
                                   "clear) and compile again")
            self._generated_now = generated
        return self._generated_now

    # --- facts --------------------------------------------------------------------------

    @property
    def module(self) -> Module:
        return self._generated.module

    @property
    def peak_bytes(self) -> int:
        """Bytes of the arena holding every temporary buffer (the liveness-packed peak)."""
        return self.plan.arena_bytes

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
        return list(self.plan.kernels)

    def _function(self, thunk: KernelThunk) -> KernelFunction:
        return self._generated.source.function_of[id(thunk)]

    # --- running ------------------------------------------------------------------------

    def _arguments(self, args: Sequence[object]) -> list[np.ndarray]:
        params = self.plan.parameters
        if len(args) != len(params):
            raise TypeError(f"{self.plan.name} takes {len(params)} argument(s), got {len(args)}")
        out = []
        for k, (arg, buffer) in enumerate(zip(args, params)):
            out.append(_check_argument(k, arg, buffer))
        return out

    def _outputs(self) -> list[np.ndarray]:
        return [np.empty(b.dims, b.dtype.numpy) for b in self.plan.outputs]

    def _result(self, outputs: list[np.ndarray]) -> object:
        def build(tree: Tree) -> object:
            if isinstance(tree, tuple):
                return tuple(build(t) for t in tree)
            if tree is None:
                return None
            return outputs[tree.number]

        return build(self.plan.result)

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
                           self._arena.ctypes.data, self.plan.constants.ctypes.data,
                           ctypes.addressof(profile) if profile is not None else None)
        if status != 0:
            raise RuntimeError(f"{self.plan.name}: the driver returned {status}")

    def profile(self, *args: object, repeat: int = 1, runner: str = "driver") -> Profile:
        """Run `repeat` times timing every kernel and copy; `runner` is "driver" (timers in
        the generated C) or "thunks" (the Python thunk runner, one ctypes call per kernel)."""
        if runner not in ("driver", "thunks"):
            raise ValueError(f"runner must be 'driver' or 'thunks', got {runner!r}")
        arrays = self._arguments(args)
        count = self.plan.profile_count
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
        for row in self.plan.profile_rows:
            k = row.profile_id
            calls = int(counts[k])
            recorded = samples[k * PROFILE_SAMPLES:k * PROFILE_SAMPLES + min(calls,
                                                                             PROFILE_SAMPLES)]
            median = float(np.median(recorded)) if calls else 0.0
            total = float(totals[k])
            rows.append(KernelProfile(k, row.name, row.kind, row.function, calls, total, median,
                                      row.bytes_read * calls, row.bytes_written * calls,
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
            entry.argtypes = [ctypes.c_void_p]
            entry.restype = None
            self._entries[function.name] = entry
        return entry

    def _run_thunks(self, arrays: list[np.ndarray], outputs: list[np.ndarray],
                    timing: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> None:
        assignment = self._generated.assignment
        arena = self._arena.ctypes.data
        pool = self.plan.constants.ctypes.data
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
                    timed(thunk.profile_id, functools.partial(entry, ctypes.addressof(block)))
                elif isinstance(thunk, CopyThunk):
                    if id(thunk) in assignment.elided or thunk.source.nbytes == 0:
                        continue
                    target, source = address(thunk.target), address(thunk.source)
                    size = thunk.source.nbytes
                    timed(thunk.profile_id, functools.partial(ctypes.memmove, target, source, size))
                elif isinstance(thunk, WhileThunk) and thunk.trip_count is not None:
                    for _ in range(thunk.trip_count):
                        run(thunk.body)
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
