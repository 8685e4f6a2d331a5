"""The fused module as one jitted JAX function whose compute is its kernels' `pallas_call`s,
and the executable that runs and profiles it.

The walk over the module mirrors the CPU's thunk program (`runtime/program.py`): each fusion
or unfused computing instruction is a kernel; parameters, constants, tuples, reshapes and
bitcasts only name values; a `call` is inlined; a `while` is a JAX loop and a `conditional`
a `lax.switch` (`evaluate.py` holds the rules), so the host never steps the loop. The jitted
function is compiled once, ahead of time, when the target compiles the module.

Profiling walks the same module eagerly: loops step on the host and each kernel runs alone as
its own jitted function, timed until its results are ready, on the inputs the program gives
it, so a profile counts every call of every kernel with the bytes it moved. A loop with a known
trip count steps only `PROFILE_TRIPS` times, each call of its kernels weighted by trips /
steps taken: a call from the host costs about 0.5 ms on the TPU machine, so stepping all 200
steps of a rollout of 1,048,576 lanes kernel by kernel took minutes, and the kernels of a
loop body run the same code every trip.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from hlofuse.analysis.loop_config import known_trip_count
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.reference.interpreter import coerce_argument
from hlofuse.runtime.plan import KernelInfo
from hlofuse.runtime.profile import KernelProfile, Profile
from hlofuse.runtime.program import schedule
from hlofuse.runtime.target import first_line
from hlofuse.targets.tpu.evaluate import LaxEvaluator
from hlofuse.targets.tpu.kernel_keys import kernel_key
from hlofuse.targets.tpu.kernels import Kernel, flatten_leaves, plan_kernel, rebuild
from hlofuse.targets.tpu.lax_ops import Value, constant

_NAMES_ONLY = frozenset({Op.PARAMETER, Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.AFTER_ALL,
                         Op.OPT_BARRIER, Op.RESHAPE, Op.BITCAST, Op.CONSTANT})
_CONTROL = frozenset({Op.CALL, Op.WHILE, Op.CONDITIONAL})
_WIDE = frozenset({DType.S64, DType.U64, DType.F64})

KernelCall = Callable[[Kernel, list[Value]], list[Value]]
# Trips a profiled loop with a known trip count steps on the host (its calls weighted to the
# whole count); a loop of data-dependent length steps to its end.
PROFILE_TRIPS = 4


class _ProfileCut(Exception):
    """The profile's time limit passed (`TpuExecutable.profile_limit_s`)."""


def plan_kernels(module: Module, interpret: bool) -> list[Kernel]:
    """One kernel per call site, in program order (loop bodies and branches included)."""
    kernels: list[Kernel] = []

    def visit(comp: Computation) -> None:
        for inst in schedule(comp):
            if inst.op in _NAMES_ONLY:
                continue
            if inst.op in _CONTROL:
                for called in inst.calls:
                    visit(called)
                continue
            kernels.append(plan_kernel(inst, interpret))

    visit(module.entry)
    return kernels


def uses_wide_types(module: Module) -> bool:
    """Whether any value is 64 bits wide: JAX then traces and runs with x64 enabled."""
    return any(leaf.dtype in _WIDE for comp in module.computations
               for inst in comp.instructions for leaf in inst.shape.leaves())


class Walker:
    """Evaluates the module's control structure, handing each kernel to `call`.

    `traced`: loops and branches become JAX's (inside `jax.jit`); otherwise they step on the
    host with concrete values (profiling), a loop with a known trip count at most
    `trip_limit` times (0: every trip), `weight` then the calls each kernel call stands for.
    """

    def __init__(self, kernels: Sequence[Kernel], call: KernelCall, traced: bool,
                 trip_limit: int = 0) -> None:
        self.kernel_of = {id(k.instruction): k for k in kernels}
        self.call = call
        self.traced = traced
        self.trip_limit = trip_limit
        self.weight = 1.0
        self.control = LaxEvaluator()

    def run(self, comp: Computation, arguments: Sequence[Value]) -> Value:
        env: dict[int, Value] = {}
        for inst in schedule(comp):
            operands = [env[id(o)] for o in inst.operands]
            env[id(inst)] = self.instruction(inst, operands, arguments)
        return env[id(comp.root)]

    def instruction(self, inst: Instruction, ops: list[Value],
                    arguments: Sequence[Value]) -> Value:
        op = inst.op
        if op is Op.PARAMETER:
            return arguments[inst.parameter_number]
        if op is Op.CONSTANT:
            return constant(inst)
        if op is Op.TUPLE:
            return tuple(ops)
        if op is Op.GET_TUPLE_ELEMENT:
            index = inst.attrs["index"]
            assert isinstance(index, int)
            return ops[0][index]
        if op in (Op.RESHAPE, Op.BITCAST):
            return self.control.instruction(inst, ops)
        if op is Op.OPT_BARRIER:
            return ops[0]
        if op is Op.AFTER_ALL:
            return None
        if op is Op.CALL:
            return self.run(inst.calls[0], ops)
        if op is Op.WHILE:
            return self.while_loop(inst, ops[0])
        if op is Op.CONDITIONAL:
            return self.conditional(inst, ops)
        kernel = self.kernel_of[id(inst)]
        leaves = [leaf for o in ops for leaf in flatten_leaves(o)]
        return rebuild(inst.shape, iter(self.call(kernel, leaves)))

    def while_loop(self, inst: Instruction, init: Value) -> Value:
        condition, body = inst.calls
        trips = known_trip_count(inst)
        if self.traced:
            if trips is not None:
                return jax.lax.fori_loop(0, trips, lambda _, s: self.run(body, [s]), init)
            return jax.lax.while_loop(lambda s: jnp.reshape(self.run(condition, [s]), ()),
                                      lambda s: self.run(body, [s]), init)
        if trips is not None and 0 < self.trip_limit < trips:
            # Profiling: a few trips stand for all of them (the body's kernels run the same
            # code every trip); the loop's result is then not the program's.
            outer = self.weight
            self.weight = outer * trips / self.trip_limit
            state = init
            for _ in range(self.trip_limit):
                state = self.run(body, [state])
            self.weight = outer
            return state
        state = init
        count = 0
        while (count < trips) if trips is not None else bool(self.run(condition, [state])):
            state = self.run(body, [state])
            count += 1
        return state

    def conditional(self, inst: Instruction, ops: list[Value]) -> Value:
        if self.traced:
            return _BranchEvaluator(self).conditional(inst, ops)
        selector = np.asarray(ops[0])
        if selector.dtype == np.bool_:
            index = 0 if bool(selector) else 1
        else:
            index = int(selector)
            if not 0 <= index < len(inst.calls):
                index = len(inst.calls) - 1
        return self.run(inst.calls[index], [ops[index + 1]])


class _BranchEvaluator(LaxEvaluator):
    """`LaxEvaluator.conditional` with the branches walked as program computations."""

    def __init__(self, walker: Walker) -> None:
        super().__init__()
        self.walker = walker

    def run(self, comp: Computation, arguments: Sequence[Value]) -> Value:
        return self.walker.run(comp, arguments)


class TpuExecutable:
    """A fused module as one jitted JAX function (see the module docstring)."""

    cache_hit = False
    # Seconds a profile may take (0: no limit). Past it the walk stops and the profile holds
    # the kernel calls timed so far, with a note that says so: a program of many kernels at a
    # large N compiles each structure alone on first use, which took minutes on the chip.
    profile_limit_s = 0.0

    def __init__(self, module: Module, interpret: bool) -> None:
        self.module = module
        self.interpret = interpret
        self.wide = uses_wide_types(module)
        self._kernels = plan_kernels(module, interpret)
        self.compile_seconds = 0.0
        self._compiled: Any = None
        # The profile's jitted kernels by structure (`kernel_key`): a loop unrolled ten times
        # or the `none` strategy's program has many kernels of one structure, each compiled
        # alone once per structure (at 1,048,576 lanes compiling every one took minutes).
        self._timed: dict[Hashable, Callable[..., Any]] = {}

    # --- compiling and running -----------------------------------------------------------

    def x64(self) -> contextlib.AbstractContextManager[Any]:
        return jax.enable_x64(True) if self.wide else contextlib.nullcontext()

    def _traced_function(self) -> Callable[..., Any]:
        walker = Walker(self._kernels, lambda k, leaves: k(*leaves), traced=True)
        return lambda *args: walker.run(self.module.entry, args)

    def argument_structs(self) -> list[jax.ShapeDtypeStruct]:
        return [jax.ShapeDtypeStruct(p.shape.dims, np.dtype(p.shape.dtype.numpy))
                for p in self.module.entry.parameters]

    def compile(self) -> None:
        """Lower and compile the whole program once (ahead of time)."""
        start = time.perf_counter()
        with self.x64():
            self._compiled = jax.jit(self._traced_function()).lower(
                *self.argument_structs()).compile()
        self.compile_seconds = time.perf_counter() - start

    def check_kernels_on_chip(self) -> list[str]:
        """Compile each Pallas kernel alone for the chip; one Mosaic refuses (a layout, a
        size, an op its compiler rejects) runs as an XLA operation and says why. Kernels of
        the same structure (`kernel_key`) are compiled once. Returns the refused kernels'
        names."""
        refused: list[str] = []
        verdicts: dict[Hashable, str | None] = {}  # a structure's refusal, None if compiled
        for kernel in self._kernels:
            if kernel.mode != "pallas":
                continue
            key = kernel_key(kernel)
            if key is None or key not in verdicts:
                verdict = self._chip_refusal(kernel)
                if key is not None:
                    verdicts[key] = verdict
            else:
                verdict = verdicts[key]
            if verdict is not None:
                kernel.as_xla_op(f"Mosaic refused it on the chip: {verdict}")
                refused.append(kernel.name)
        return refused

    def _chip_refusal(self, kernel: Kernel) -> str | None:
        try:
            with self.x64():
                jax.jit(lambda *a, k=kernel: k(*a)).lower(*kernel_structs(kernel)).compile()
        except Exception as e:  # Mosaic's errors have no common type
            return first_line(e)[:200]
        return None

    def _arguments(self, args: Sequence[object]) -> list[np.ndarray]:
        params = self.module.entry.parameters
        if len(args) != len(params):
            raise TypeError(f"{self.module.name} takes {len(params)} argument(s), got "
                            f"{len(args)}")
        return [coerce_argument(a, p.shape, i) for i, (a, p) in enumerate(zip(args, params))]

    def __call__(self, *args: object) -> object:
        if self._compiled is None:
            self.compile()
        arrays = self._arguments(args)
        with self.x64():
            result = self._compiled(*arrays)
        return _to_numpy(result)

    def device_function(self) -> Callable[..., Any]:
        """The compiled program on JAX arrays, results left on the device (benchmarks time
        it without host transfers)."""
        if self._compiled is None:
            self.compile()
        return self._compiled

    # --- profiling -----------------------------------------------------------------------

    def profile(self, *args: object, repeat: int = 1, runner: str = "driver",
                trip_limit: int = PROFILE_TRIPS) -> Profile:
        """Each kernel timed alone, as the program calls it, over `repeat` runs after one
        warm-up run (which compiles every kernel); loops with a known trip count step at
        most `trip_limit` times (0: every trip), their calls weighted to the whole count."""
        arrays = self._arguments(args)
        # Per kernel: (seconds, calls it stands for) of each call.
        samples: dict[int, list[tuple[float, float]]] = {id(k): [] for k in self._kernels}

        structures = {id(k): kernel_key(k) for k in self._kernels}
        began = time.perf_counter()
        phase = ["warm-up"]

        def timed(kernel: Kernel, leaves: list[Value]) -> list[Value]:
            if self.profile_limit_s and time.perf_counter() - began > self.profile_limit_s:
                raise _ProfileCut
            structure = structures[id(kernel)]
            shared = structure if structure is not None else id(kernel)
            fn = self._timed.get(shared)
            if fn is None:
                fn = self._timed[shared] = jax.jit(lambda *a, k=kernel: k(*a))
            start = time.perf_counter()
            out = jax.block_until_ready(fn(*leaves))
            samples[id(kernel)].append((time.perf_counter() - start, walker.weight))
            return list(out)

        # The warm-up compiles every kernel: one trip of each loop is enough.
        walker = Walker(self._kernels, timed, traced=False, trip_limit=1 if trip_limit else 0)
        notes: tuple[str, ...] = ()
        start = time.perf_counter()
        with self.x64():
            try:
                inputs = [jnp.asarray(a) for a in arrays]
                walker.run(self.module.entry, inputs)
                phase[0] = "timed runs"
                walker.trip_limit = trip_limit
                for s in samples.values():
                    s.clear()
                start = time.perf_counter()
                for _ in range(repeat):
                    walker.run(self.module.entry, inputs)
            except _ProfileCut:
                reached = sum(1 for s in samples.values() if s)
                notes = (f"profile cut at its limit of {self.profile_limit_s:g} s in the "
                         f"{phase[0]}: {reached} of {len(self._kernels)} kernels reached, "
                         f"{len(self._timed)} structures compiled; the calls below are "
                         "partial",)
            wall = time.perf_counter() - start
        # With loops sampled, the walk's wall time is less than the kernels' weighted time:
        # the run's time is then that.
        wall = max(wall, sum(t * w for s in samples.values() for t, w in s))
        rows = []
        for index, kernel in enumerate(self._kernels):
            times = samples[id(kernel)]
            calls = round(sum(w for _, w in times))
            total = sum(t * w for t, w in times)
            rows.append(KernelProfile(
                index, kernel.name, kernel.kind, kernel.mode, calls, total,
                statistics.median(t for t, _ in times) if times else 0.0,
                kernel.bytes_read * calls, kernel.bytes_written * calls,
                total / wall if wall else 0.0))
        return Profile(tuple(rows), wall, repeat, "kernels", notes)

    # --- what the executable reports -----------------------------------------------------

    @property
    def kernel_plans(self) -> list[Kernel]:
        return list(self._kernels)

    @property
    def kernels(self) -> list[KernelInfo]:
        return [KernelInfo(k.name, k.kind, k.mode, k.instructions, k.bytes_read,
                           k.bytes_written) for k in self._kernels]

    @property
    def peak_bytes(self) -> int:
        return max((k.bytes_read + k.bytes_written for k in self._kernels), default=0)

    @property
    def facts(self) -> Mapping[str, object]:
        return {}

    def source(self) -> str:
        from hlofuse.targets.tpu.listing import pallas_listing

        return pallas_listing(self._kernels)


def kernel_structs(kernel: Kernel) -> list[jax.ShapeDtypeStruct]:
    return [jax.ShapeDtypeStruct(s.dims, np.dtype(s.dtype.numpy)) for s in kernel.input_shapes]


def _to_numpy(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return tuple(_to_numpy(v) for v in value)
    return None if value is None else np.asarray(value)

