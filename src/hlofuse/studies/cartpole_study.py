"""The CartPole study on hlofuse: each step of the study's sequence compiled, checked and timed.

A step is one (program variant, strategy) pair: a preset of hlofuse.envs.cartpole compiled by
one fusion strategy, named as in docs/cartpole.md (baseline, fused-rng,
relaxed-concat, split-state, unroll10, all), plus `none` (no fusion) for reference and the
later strategies on the unchanged baseline program. `SEQUENCE` is the whole list; adding a
strategy or a step is one line there, and a step whose strategy `parse_strategy` does not know
(yet) is left out with a note.

For every step and N: trace, compile (timed: fusion, code generation and the C compiler, whose
on-disk cache may hold the object already), run once to warm up, check the final states
against the reference interpreter (at one small N per step: correctness first, a
disagreement stops the study), profile one run (kernel calls and bytes moved per step, from
what actually ran), then time at least `repeats` whole rollouts (more when they are short,
until MIN_TIMED_S have been timed) and keep the median. Each rollout is timed by the wall clock
and by this process's CPU time: on a machine shared with other work the wall clock measures
the scheduler as much as the program, while the CPU time of a single-threaded run
(OMP_NUM_THREADS=1) does not. Speedups, by either clock, are over the baseline step at the
same N.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hlofuse import random
from hlofuse.api import Compiled, compile_module
from hlofuse.envs import cartpole
from hlofuse.fusion.strategies import StrategyError, parse_strategy
from hlofuse.ir.hlo import Module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.runtime.target import CodegenError, TargetUnavailable
from hlofuse.studies.peers.bench import PRELIMINARY_NOTE, machine_description, write_json_file
from hlofuse.toolchain import ToolchainError

BASELINE = "baseline"
# The check compares with the reference interpreter at the smallest measured N; above this
# the interpreter is too slow and the step is compiled once more at CHECK_ENVS for the check.
CHECK_MAX_ENVS = 1024
CHECK_ENVS = 64
# Compiled and interpreted rollouts agree bit for bit today; the tolerance only allows for a
# math library that rounds sin/cos differently, never for a different episode count.
CHECK_ATOL = 1e-5
# Short rollouts are repeated until this long has been timed: a median of a handful of 1 ms
# runs on a busy machine is mostly the scheduler's.
MIN_TIMED_S = 0.2
MAX_REPEATS = 1000


@dataclass(frozen=True, slots=True)
class StudyStep:
    """One step of the sequence: `program` (a preset of hlofuse.envs.cartpole) compiled with
    `strategy`. Steps with `is_default` run unless --variants names others."""

    name: str
    program: str
    strategy: str
    about: str
    is_default: bool = True

    @property
    def variant(self) -> cartpole.Variant:
        return cartpole.PRESETS[self.program]


# The study's sequence (each step changes the baseline in one way; `all` combines them), then
# the references. The GPU figures are the study's.
SEQUENCE: tuple[StudyStep, ...] = (
    StudyStep(BASELINE, "baseline", "xla",
              "custom-call RNG, packed state, scan, XLA's 2022 rules"),
    StudyStep("fused-rng", "fused-rng", "xla", "RNG as element-wise HLO (GPU: 1.87x)"),
    StudyStep("relaxed-concat", "baseline", "xla+relax_concatenate",
              "multi-user concatenate may fuse (GPU: about 1.1x)"),
    StudyStep("split-state", "split-state", "xla", "four state arrays, no concatenate "
              "(GPU: 3.41x)"),
    StudyStep("unroll10", "unroll10", "xla", "scan unrolled by 10 (GPU: 3.5x)"),
    StudyStep("all", "all", "xla+relax_concatenate", "all of the above (GPU: up to 10.56x)"),
    StudyStep("none", "baseline", "none", "no fusion at all: one kernel per instruction"),
    StudyStep("priority", "baseline", "priority", "XLA's 2024 priority fusion with a cost model"),
    StudyStep("max", "baseline", "max", "as much fusion as legal"),
    StudyStep("rewrites", "baseline", "xla+rng_expansion+concat_forwarding+scalarize_state"
              "+unroll=10", "the program changes done by the compiler instead",
              is_default=False),
)


class StudyError(RuntimeError):
    """A step could not be compiled or run; the message names the step and N."""


class StudyCheckError(StudyError):
    """A compiled rollout disagrees with the reference interpreter."""


def is_available(strategy: str) -> bool:
    try:
        parse_strategy(strategy)
    except StrategyError:
        return False
    return True


def known_steps() -> dict[str, StudyStep]:
    """Every step whose strategy this build of hlofuse knows, by name."""
    return {s.name: s for s in SEQUENCE if is_available(s.strategy)}


def unavailable_steps() -> list[StudyStep]:
    return [s for s in SEQUENCE if not is_available(s.strategy)]


def strategy_step(strategy: str) -> StudyStep:
    """An extra step: the baseline program under `strategy`, named after it."""
    parse_strategy(strategy)  # raises StrategyError naming the problem
    return StudyStep(strategy, BASELINE, strategy, f"baseline program under {strategy}")


def select_steps(names: Sequence[str] = (), strategies: Sequence[str] = ()) -> list[StudyStep]:
    """The steps to run, in sequence order: `names` (default: the default steps) plus the
    baseline program under each of `strategies`; the baseline step is always included."""
    known = known_steps()
    unknown = [n for n in names if n not in known]
    if unknown:
        missing = {s.name: s.strategy for s in unavailable_steps()}
        if unknown[0] in missing:
            raise ValueError(f"step {unknown[0]!r} needs strategy {missing[unknown[0]]!r}, which "
                             "this build does not have yet")
        raise ValueError(f"unknown step {unknown[0]!r}; known: {', '.join(known)}")
    chosen = set(names) if names else {s.name for s in known.values() if s.is_default}
    chosen.add(BASELINE)
    steps = [s for s in known.values() if s.name in chosen]
    pairs = {(s.program, s.strategy) for s in steps}
    for strategy in strategies:
        extra = strategy_step(strategy)
        if (extra.program, extra.strategy) not in pairs and extra.name not in chosen:
            steps.append(extra)
            pairs.add((extra.program, extra.strategy))
    return steps


@dataclass(frozen=True, slots=True)
class StudyConfig:
    envs: tuple[int, ...] = (1024, 16384)
    steps: int = 200
    repeats: int = 5
    seed: int = 0
    # A Ray cluster ("local", "local:K" or an address): the timed rollouts then run as
    # `ray_workers` shards on its actors (hlofuse.distributed), checked against the same shards
    # run in this process.
    ray: str | None = None
    ray_workers: int = 0
    backend: str = "cpu"  # or "cuda" (nvcc and a GPU), "cuda-emulated"


@dataclass(frozen=True, slots=True)
class Record:
    """One step at one N. Per-step figures are over the whole rollout divided by T."""

    step: str
    program: str
    variant: dict[str, object]
    strategy: str
    envs: int
    steps: int
    repeats: int  # timed rollouts: at least the configured count
    seconds: float  # median wall time of one rollout
    best_seconds: float  # the fastest of the timed rollouts
    cpu_seconds: float  # median CPU time of this process (all its threads) per rollout
    env_steps_per_s: float
    env_steps_per_cpu_s: float
    kernels_per_step: float  # kernel calls (copies not counted), from the profile
    copies_per_step: float
    bytes_per_step: float  # read + written by kernels and copies, from the profile
    kernels_per_iteration: dict[str, int]  # the fused module's, per while loop
    compile_s: float  # compile_module: fusion, code generation, C compiler or cache
    cache_hit: bool  # the C object came from the on-disk cache
    trace_s: float
    episodes: int
    return_sum: float
    checked: bool  # this run's outputs were compared with the reference interpreter
    speedup_vs_baseline: float = 0.0
    cpu_speedup_vs_baseline: float = 0.0  # the same by CPU time
    workers: int = 1  # Ray actors the timed rollouts ran on (CPU time: theirs, summed)

    def rate(self, clock: str) -> float:
        return self.env_steps_per_cpu_s if clock == "cpu" else self.env_steps_per_s

    def speedup(self, clock: str) -> float:
        return self.cpu_speedup_vs_baseline if clock == "cpu" else self.speedup_vs_baseline


@dataclass(frozen=True, slots=True)
class StudyResult:
    config: StudyConfig
    steps: tuple[StudyStep, ...]
    records: tuple[Record, ...]
    machine: dict[str, object]
    notes: tuple[str, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class Built:
    module: Module
    compiled: Compiled
    trace_s: float
    compile_s: float


def build(step: StudyStep, n_envs: int, n_steps: int, seed: int,
          backend: str = "cpu") -> Built:
    """Trace the step's program for N and T and compile it with the step's strategy."""
    start = time.perf_counter()
    module = cartpole.trace(step.variant, n_envs, n_steps, seed)
    traced = time.perf_counter()
    try:
        compiled = compile_module(module, step.strategy, backend)
    except (CodegenError, ToolchainError, TargetUnavailable) as e:
        first_line = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise StudyError(f"step {step.name} (program {step.program}, strategy {step.strategy}) "
                         f"at N={n_envs}: {first_line}") from e
    return Built(module, compiled, traced - start, time.perf_counter() - traced)


Outputs = tuple[np.ndarray, int, float]


def _outputs(flat: Sequence[np.ndarray]) -> Outputs:
    states, finished, return_sum = flat
    return np.asarray(states), int(finished), float(return_sum)


class Checker:
    """Compares compiled rollouts with the reference interpreter, one evaluation per program."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._references: dict[tuple[str, int, int], Outputs] = {}

    def reference(self, step: StudyStep, module: Module, n_envs: int, n_steps: int) -> Outputs:
        key = (step.program, n_envs, n_steps)
        if key not in self._references:
            flat = flatten_value(evaluate(module, [random.key(self.seed)]))
            self._references[key] = _outputs(flat)
        return self._references[key]

    def check(self, step: StudyStep, built: Built, got: Outputs, *, n_envs: int,
              n_steps: int) -> None:
        want = self.reference(step, built.module, n_envs, n_steps)
        states_agree = got[0].shape == want[0].shape and bool(
            np.allclose(got[0], want[0], rtol=0, atol=CHECK_ATOL))
        if states_agree and got[1:] == want[1:]:
            return
        diff = (float(np.max(np.abs(got[0] - want[0]))) if got[0].shape == want[0].shape
                else float("nan"))
        raise StudyCheckError(
            f"step {step.name} (program {step.program}, strategy {step.strategy}) at N={n_envs}, "
            f"T={n_steps}: the compiled rollout disagrees with the reference interpreter: "
            f"max |state difference| {diff:.3g}, episodes {got[1]} vs {want[1]}, returns "
            f"{got[2]:g} vs {want[2]:g}")


def measure(step: StudyStep, built: Built, n_envs: int, config: StudyConfig,
            check: Callable[[Outputs], None] | None) -> Record:
    """Warm up, check (when asked), profile and time one compiled step at one N."""
    key = random.key(config.seed)
    compiled = built.compiled
    warm = _outputs(compiled.run_flat([key]))
    if check is not None:
        check(warm)
    profile = compiled.profile(key)
    copies = [r for r in profile.rows if r.kind == "copy"]
    kernel_calls = sum(r.calls for r in profile.rows if r.kind != "copy")
    moved = sum(r.bytes_read + r.bytes_written for r in profile.rows)
    if config.ray is not None:
        # The Ray shards are checked at the smallest N (the interpreter check may be elsewhere).
        wall, cpu = time_ray_rollouts(step, n_envs, config, check=n_envs == min(config.envs))
    else:
        wall, cpu = time_rollouts(compiled, key, config.repeats)
    median, cpu_median = statistics.median(wall), statistics.median(cpu)
    t = config.steps
    assert compiled.executable is not None  # built for the cpu backend
    return Record(
        step=step.name, program=step.program, variant=dataclasses.asdict(step.variant),
        strategy=step.strategy, envs=n_envs, steps=t, repeats=len(wall), seconds=median,
        best_seconds=min(wall), cpu_seconds=cpu_median,
        env_steps_per_s=_rate(n_envs * t, median),
        env_steps_per_cpu_s=_rate(n_envs * t, cpu_median),
        kernels_per_step=kernel_calls / t, copies_per_step=sum(r.calls for r in copies) / t,
        bytes_per_step=moved / t,
        kernels_per_iteration=compiled.kernels_per_iteration(),
        compile_s=built.compile_s, cache_hit=compiled.executable.cache_hit,
        trace_s=built.trace_s, episodes=warm[1], return_sum=warm[2], checked=check is not None,
        workers=config.ray_workers if config.ray is not None else 1,
    )


def time_rollouts(compiled: Compiled, key: np.ndarray,
                  repeats: int) -> tuple[list[float], list[float]]:
    """(wall, CPU) seconds of at least `repeats` rollouts, more until MIN_TIMED_S are timed."""
    wall: list[float] = []
    cpu: list[float] = []
    while len(wall) < MAX_REPEATS and (len(wall) < repeats or sum(wall) < MIN_TIMED_S):
        start, start_cpu = time.perf_counter(), time.process_time()
        compiled.run_flat([key])
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return wall, cpu


def time_ray_rollouts(step: StudyStep, n_envs: int, config: StudyConfig,
                      check: bool) -> tuple[list[float], list[float]]:
    """(wall, CPU) seconds of `repeats` rollouts as shards on Ray actors, after one that warms
    them up (each actor compiles or loads its shard's program). CPU: the actors' run times
    summed (one thread each). With `check`, the shards must equal the same shards run here."""
    from hlofuse import distributed

    variant = step.variant
    if variant.rollout != "scan" or variant.deterministic:
        raise StudyError(f"step {step.name}: only scan rollouts of a key run on Ray")
    build = functools.partial(cartpole.scan_rollout, variant)
    workers = config.ray_workers

    def run() -> distributed.ShardedRollout:
        return distributed.rollout(build, n_envs, config.steps, workers=workers,
                                   seed=config.seed, strategy=step.strategy,
                                   address=config.ray, threads_per_worker=1)

    warm = run()
    if check:
        local = distributed.rollout_local(build, n_envs, config.steps, shards=workers,
                                          seed=config.seed, strategy=step.strategy)
        for index, (got, want) in enumerate(zip(warm.shards, local.shards)):
            if not all(np.array_equal(a, b) for a, b in zip(got, want)):
                raise StudyCheckError(f"step {step.name} at N={n_envs}: shard {index} on Ray "
                                      "differs from the same shard run in this process")
    wall: list[float] = []
    cpu: list[float] = []
    while len(wall) < MAX_REPEATS and (len(wall) < config.repeats or sum(wall) < MIN_TIMED_S):
        done = run()
        wall.append(done.wall_s)
        cpu.append(sum(r.run_s for r in done.results))
    return wall, cpu


def _rate(env_steps: int, seconds: float) -> float:
    # process_time ticks coarsely on some systems: a rollout may read as 0 CPU seconds.
    return env_steps / seconds if seconds > 0 else float("inf")


def with_speedups(records: Sequence[Record]) -> list[Record]:
    """Each record with its speedups over the baseline step at the same N (both clocks)."""
    wall = {r.envs: r.env_steps_per_s for r in records if r.step == BASELINE}
    cpu = {r.envs: r.env_steps_per_cpu_s for r in records if r.step == BASELINE}
    return [dataclasses.replace(r, speedup_vs_baseline=r.env_steps_per_s / wall[r.envs],
                                cpu_speedup_vs_baseline=r.env_steps_per_cpu_s / cpu[r.envs])
            for r in records]


def run_study(
    steps: Sequence[StudyStep],
    config: StudyConfig,
    on_task: Callable[[str], None] = lambda label: None,
    on_done: Callable[[], None] = lambda: None,
    on_built: Callable[[StudyStep, Built], None] | None = None,
) -> StudyResult:
    """Measure every step at every N (N ascending); raises StudyCheckError on a wrong result."""
    if not any(s.name == BASELINE for s in steps):
        raise ValueError("the study needs the baseline step: speedups are over it")
    if config.steps < 1 or config.repeats < 1 or not config.envs or min(config.envs) < 1:
        raise ValueError(f"steps, repeats and every N must be positive: {config}")
    checker = Checker(config.seed)
    load_before = _load_average()
    envs = sorted(set(config.envs))
    check_envs = envs[0] if envs[0] <= CHECK_MAX_ENVS else CHECK_ENVS
    records: list[Record] = []
    for step in steps:
        if check_envs not in envs:
            on_task(f"{step.name}: check at N={check_envs}")
            built = build(step, check_envs, config.steps, config.seed, config.backend)
            got = _outputs(built.compiled.run_flat([random.key(config.seed)]))
            checker.check(step, built, got, n_envs=check_envs, n_steps=config.steps)
        for n in envs:
            on_task(f"{step.name} N={n}")
            built = build(step, n, config.steps, config.seed, config.backend)
            if on_built is not None and n == envs[0]:
                on_built(step, built)
            check = (functools.partial(checker.check, step, built, n_envs=n,
                                       n_steps=config.steps) if n == check_envs else None)
            records.append(measure(step, built, n, config, check))
            on_done()
    notes = [f"step {s.name!r} skipped: strategy {s.strategy!r} is not available yet"
             for s in unavailable_steps()]
    # Other work on the machine shows up in the timings (threads that wait for each other at
    # every parallel loop suffer most), so the load goes with the figures.
    machine = {**machine_description(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
               "load_average_before": load_before, "load_average_after": _load_average()}
    return StudyResult(config, tuple(steps), tuple(with_speedups(records)), machine,
                       tuple(notes))


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def command_line(result: StudyResult) -> str:
    """The `hlofuse cartpole` command that repeats this study."""
    config = result.config
    names = [s.name for s in result.steps if s.name in known_steps()]
    extra = [s.strategy for s in result.steps if s.name not in known_steps()]
    text = (f"hlofuse cartpole --envs {','.join(map(str, config.envs))} --steps {config.steps} "
            f"--repeats {config.repeats} --seed {config.seed} --variants {','.join(names)}")
    text += f" --strategies {','.join(extra)}" if extra else ""
    return text + (f" --ray {config.ray}" if config.ray is not None else "")


def result_json(result: StudyResult) -> dict[str, object]:
    return {
        "study": "cartpole",
        "command": command_line(result),
        "preliminary": PRELIMINARY_NOTE,
        "machine": result.machine,
        "config": dataclasses.asdict(result.config),
        "steps": [dataclasses.asdict(s) for s in result.steps],
        "records": [dataclasses.asdict(r) for r in result.records],
        "notes": list(result.notes),
    }


def write_json(result: StudyResult, path: Path) -> None:
    write_json_file(result_json(result), path)
