"""A module compiled to a shared object and loaded with ctypes: the executables of the C and
CUDA targets, which share one calling convention.

The generated driver (`hlofuse_run(params, outs, arena, consts, prof)`) runs the whole module
in one ctypes call. The Python thunk runner (`run_thunks`) walks the same thunk tree and calls
each kernel through its exported entry; it exists for debugging and for profiling with
Python-side timers.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from hlofuse.ir.hlo import Module
from hlofuse.ir.shapes import Shape
from hlofuse.runtime.lowering import Generated, KernelFunction, aligned_bytes
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
)

PROFILE_SAMPLES = 4096  # per kernel: the median is over the last this many calls


class ProfilePointers(ctypes.Structure):
    _fields_ = [("counts", ctypes.c_void_p), ("totals", ctypes.c_void_p),
                ("samples", ctypes.c_void_p), ("capacity", ctypes.c_int64),
                ("started", ctypes.c_double)]


class SharedObjectExecutable:
    """A compiled module: call it with NumPy arrays, get NumPy arrays back.

    Calling and profiling need only the plan (`ExecutablePlan`); one loaded from the cache
    (`from_plan`) generates its module's code again only when asked for what the plan does
    not keep (the module, its program, the C source, the Python thunk runner)."""

    def __init__(self, generated: Generated, library: ctypes.CDLL, cache_hit: bool,
                 compile_seconds: float, object_key: str = "") -> None:
        self._generated_now: Generated | None = generated
        self._regenerate: Callable[[], tuple[Generated, str]] | None = None
        self._start(plan_of(generated, object_key), library, cache_hit, compile_seconds)

    @classmethod
    def from_plan(cls, plan: ExecutablePlan, library: ctypes.CDLL, cache_hit: bool,
                  compile_seconds: float, regenerate: Callable[[], tuple[Generated, str]]
                  ) -> SharedObjectExecutable:
        """An executable of a saved plan and its loaded library; `regenerate` gives the
        module's Generated when something needs it, with the key of the shared object its
        source builds (which must be `plan.object_key`)."""
        executable = cls.__new__(cls)
        executable._generated_now = None
        executable._regenerate = regenerate
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
        self._arena = aligned_bytes(plan.arena_bytes)
        self._lock = threading.Lock()
        self._entries: dict[str, Callable[..., object]] = {}

    @property
    def _generated(self) -> Generated:
        if self._generated_now is None:
            assert self._regenerate is not None
            generated, key = self._regenerate()
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
        """The generated source."""
        return self._generated.source.text

    @property
    def functions(self) -> tuple[KernelFunction, ...]:
        return self._generated.source.functions

    @property
    def facts(self) -> Mapping[str, object]:
        return self.plan.facts

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
                     profile: ProfilePointers | None) -> None:
        params = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        outs = (ctypes.c_void_p * max(len(outputs), 1))(*[o.ctypes.data for o in outputs])
        status = self._run(ctypes.addressof(params), ctypes.addressof(outs),
                           self._arena.ctypes.data, self.plan.constants.ctypes.data,
                           ctypes.addressof(profile) if profile is not None else None)
        if status != 0:
            raise RuntimeError(f"{self.plan.name}: the driver returned {status}")

    def profile_notes(self, rows: list[KernelProfile]) -> tuple[str, ...]:
        """Lines the target adds under a profile of `rows` (none here)."""
        return ()

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
        pointers = ProfilePointers(counts.ctypes.data, totals.ctypes.data, samples.ctypes.data,
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
        return Profile(tuple(rows), wall, runs, runner, self.profile_notes(rows))

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
