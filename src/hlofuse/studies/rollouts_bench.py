"""`hlofuse bench rollouts`: every rollout of the corpus (tests/data/rollouts/programs.py) at
N lanes and T steps, exported from JAX as its CPU lowering, compiled under the xla, priority
and max strategies and timed next to JAX's own `jit` on CPU, in the same run.

For each program and runner: env-steps/s (N * T / the median of the timed rollouts), kernels
launched per step of the time loop (1 when whole-loop fusion made the loop one kernel; the
loop's kernel count per iteration otherwise), cold compile time (fusion passes + C compiler,
with the compile cache bypassed), and whether the results equal JAX's (integers exactly,
floats within rtol 1e-4). Results go to a JSON file and a plot; the table prints.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

STRATEGIES = ("xla", "priority", "max")


@dataclass(frozen=True)
class RolloutsConfig:
    lanes: int = 4096
    steps: int = 200
    repeats: int = 3
    corpus: Path = Path("tests/data/rollouts")
    names: tuple[str, ...] = ()  # empty: every program
    strategies: tuple[str, ...] = STRATEGIES
    threads: int | None = None  # set by limit_threads before JAX and OpenMP start
    backend: str = "cpu"  # the hlofuse target the strategies' modules are compiled for


def limit_threads(threads: int) -> None:
    """Run JAX's CPU client and hlofuse's kernels on `threads` threads each: a comparison
    that does not depend on how each library schedules threads on a busy machine. Works only
    before JAX is imported and before the first compiled kernel loads (the command line)."""
    if "jax" in sys.modules:
        raise RuntimeError("limit_threads: JAX is already imported; its thread pool is fixed")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = (f"{flags} --xla_cpu_multi_thread_eigen={str(threads > 1).lower()}"
                               f" intra_op_parallelism_threads={threads}").strip()


@dataclass
class Measurement:
    program: str
    runner: str  # "jax" or a strategy
    env_steps_per_s: float
    seconds: float
    compile_s: float
    kernels_per_step: int | None = None
    equal_to_jax: bool | None = None
    # Floats: the share of elements outside rtol 1e-4 (chaotic dynamics drift apart over
    # hundreds of steps with libm's and XLA's sin/cos differing in the last bit).
    float_mismatch: float | None = None
    note: str = ""


@dataclass
class RolloutsResult:
    config: dict[str, Any]
    measurements: list[Measurement] = field(default_factory=list)

    def speedups(self, strategy: str) -> dict[str, float]:
        jax = {m.program: m.env_steps_per_s for m in self.measurements if m.runner == "jax"}
        return {m.program: m.env_steps_per_s / jax[m.program] for m in self.measurements
                if m.runner == strategy and m.program in jax and m.env_steps_per_s > 0}

    def geomean(self, strategy: str) -> float | None:
        values = list(self.speedups(strategy).values())
        if not values:
            return None
        return math.exp(sum(math.log(v) for v in values) / len(values))


def load_programs(corpus: Path) -> ModuleType:
    """The corpus' programs.py, loaded by path (it lives with the test data, not the package)."""
    path = corpus / "programs.py"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no rollout programs there (use --corpus)")
    spec = importlib.util.spec_from_file_location("hlofuse_rollout_programs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _median_time(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _run_jax(compiled: Any, key: Any) -> None:
    import jax

    jax.block_until_ready(compiled(key))


def _timed_call(executable: Any, key: np.ndarray) -> Callable[[], object]:
    """What one timed rollout runs: on a device (the TPU target), the compiled program with
    its results left there, as JAX's own rollout is timed; on the CPU, the executable."""
    device_function = getattr(executable, "device_function", None)
    if device_function is None:
        return functools.partial(executable, key)
    import jax

    run, device_key = device_function(), jax.device_put(key)
    return lambda: jax.block_until_ready(run(device_key))


def flat_outputs(value: object) -> list[np.ndarray]:
    """A program's outputs, nested lists and tuples flattened, as arrays."""
    if isinstance(value, list | tuple):
        return [a for v in value for a in flat_outputs(v)]
    return [np.asarray(value)]


def _float_mismatch(actual: list[np.ndarray], expected: list[np.ndarray]) -> float:
    total = bad = 0
    for a, e in zip(actual, expected):
        if e.dtype.kind == "f" and a.shape == e.shape:
            total += e.size
            bad += int((~np.isclose(a, e, rtol=1e-4, atol=1e-5, equal_nan=True)).sum())
    return bad / total if total else 0.0


def outputs_equal(actual: list[np.ndarray], expected: list[np.ndarray]) -> bool:
    """Same shapes and types; floats within rtol 1e-4, atol 1e-5; the rest exact."""
    if len(actual) != len(expected):
        return False
    for a, e in zip(actual, expected):
        if a.shape != e.shape or a.dtype != e.dtype:
            return False
        if e.dtype.kind == "f":
            if not np.allclose(a, e, rtol=1e-4, atol=1e-5, equal_nan=True):
                return False
        elif not np.array_equal(a, e):
            return False
    return True


def _kernels_per_step(result: Any) -> int:
    """Kernels one step of the time loop launches: the outermost loop's count, or 1 when no
    loop is left outside a kernel (whole-loop fusion)."""
    per_loop = result.kernels_per_iteration()
    if not per_loop:
        return 1
    return int(max(per_loop.values()))


def _loop_note(executable: Any) -> str:
    """On the TPU: a whole-loop fusion that runs as an XLA operation (Mosaic refused its
    kernel) and why; it counts as one kernel per step, but the steps inside are XLA's."""
    from hlofuse.ir.ops import Op

    for kernel in getattr(executable, "kernel_plans", ()):
        root = kernel.computation.root if kernel.computation is not None else None
        if kernel.mode == "xla-op" and root is not None and root.op is Op.WHILE:
            return f"the loop as an XLA operation: {kernel.reason}"
    return ""


def run_rollouts(config: RolloutsConfig, progress: Callable[[str], None] = print
                 ) -> RolloutsResult:
    import jax

    from hlofuse import targets
    from hlofuse.fusion.strategies import run_strategy
    from hlofuse.ir.parser import parse_module

    target = targets.get(config.backend)

    programs = load_programs(config.corpus)
    names = config.names or tuple(sorted(programs.ROLLOUTS))
    unknown = [n for n in names if n not in programs.ROLLOUTS]
    if unknown:
        raise KeyError(f"no rollout named {', '.join(unknown)} (the corpus has "
                       f"{', '.join(sorted(programs.ROLLOUTS))})")
    result = RolloutsResult({"lanes": config.lanes, "steps": config.steps,
                             "repeats": config.repeats, "threads": config.threads,
                             "backend": config.backend,
                             "programs": list(names),
                             "strategies": list(config.strategies)})
    key = jax.random.PRNGKey(0)
    key_array = np.asarray(key)
    work = config.lanes * config.steps
    for name in names:
        f = programs.ROLLOUTS[name](n=config.lanes, t=config.steps)
        jitted = jax.jit(f)
        start = time.perf_counter()
        lowered = jitted.lower(key)
        compiled = lowered.compile()
        jax_compile = time.perf_counter() - start
        expected = [np.asarray(a) for a in jax.tree_util.tree_leaves(compiled(key))]
        seconds = _median_time(functools.partial(_run_jax, compiled, key), config.repeats)
        result.measurements.append(Measurement(name, "jax", work / seconds, seconds,
                                               jax_compile))
        progress(f"{name}: jax {work / seconds:,.0f} env-steps/s")
        text = lowered.as_text(dialect="hlo")
        for strategy in config.strategies:
            try:
                start = time.perf_counter()
                fused = run_strategy(parse_module(text, f"{name}.hlo"), strategy, debug=False)
                with tempfile.TemporaryDirectory() as cache, _cache_dir(cache):
                    executable = target.compile(fused.module)
                compile_s = time.perf_counter() - start
                progress(f"{name}: {strategy} compiled in {compile_s:.1f} s")
                actual = [np.asarray(a) for a in flat_outputs(executable(key_array))]
                equal = outputs_equal(actual, expected)
                seconds = _median_time(_timed_call(executable, key_array), config.repeats)
            except Exception as e:  # noqa: BLE001 (a failure is a result of the benchmark)
                result.measurements.append(Measurement(name, strategy, 0.0, 0.0, 0.0,
                                                       note=f"{type(e).__name__}: {e}"[:300]))
                progress(f"{name}: {strategy} failed: {e}")
                continue
            result.measurements.append(Measurement(
                name, strategy, work / seconds, seconds, compile_s, _kernels_per_step(fused),
                equal, _float_mismatch(actual, expected), _loop_note(executable)))
            progress(f"{name}: {strategy} {work / seconds:,.0f} env-steps/s, "
                     f"{_kernels_per_step(fused)} kernels/step, compile {compile_s:.2f} s, "
                     f"equal to JAX: {equal}")
    return result


@contextlib.contextmanager
def _cache_dir(directory: str) -> Iterator[None]:
    """An empty compile cache for the duration: compile times measured cold."""
    saved = os.environ.get("HLOFUSE_CACHE_DIR")
    os.environ["HLOFUSE_CACHE_DIR"] = directory
    try:
        yield
    finally:
        if saved is None:
            del os.environ["HLOFUSE_CACHE_DIR"]
        else:
            os.environ["HLOFUSE_CACHE_DIR"] = saved


def write_json(result: RolloutsResult, path: Path) -> None:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"config": result.config,
            "measurements": [asdict(m) for m in result.measurements],
            "geomean_speedup_over_jax": {s: result.geomean(s)
                                         for s in result.config["strategies"]}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)


def write_plot(result: RolloutsResult, path: Path) -> bool:
    """Speed-up over JAX per program and strategy (log scale); False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    programs = list(result.config["programs"])
    strategies = list(result.config["strategies"])
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / max(1, len(strategies))
    for k, strategy in enumerate(strategies):
        speedups = result.speedups(strategy)
        xs = [i + k * width for i in range(len(programs))]
        ax.bar(xs, [speedups.get(p, 0.0) for p in programs], width, label=strategy)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    measured = {p for s in strategies for p in result.speedups(s)}
    for i, program in enumerate(programs):
        if program not in measured:  # failed or timed out: no bar, say so
            ax.text(i + width * (len(strategies) - 1) / 2, 0.05, "not measured",
                    rotation=90, ha="center", va="bottom", fontsize=8, color="gray",
                    transform=ax.get_xaxis_transform())
    ax.set_xticks([i + width * (len(strategies) - 1) / 2 for i in range(len(programs))])
    ax.set_xticklabels(programs, rotation=30, ha="right")
    device = "TPU" if str(result.config.get("backend", "cpu")).startswith("tpu") else "CPU"
    ax.set_ylabel(f"env-steps/s relative to JAX jit ({device})")
    ax.set_title(f"Rollout corpus, N = {result.config['lanes']}, T = {result.config['steps']}")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def table_rows(result: RolloutsResult) -> list[list[str]]:
    """program, runner, env-steps/s, x JAX, kernels/step, compile s, equal."""
    jax = {m.program: m.env_steps_per_s for m in result.measurements if m.runner == "jax"}
    rows = []
    for m in result.measurements:
        ratio = m.env_steps_per_s / jax[m.program] if jax.get(m.program) else 0.0
        rows.append([m.program, m.runner, f"{m.env_steps_per_s:,.0f}",
                     f"{ratio:.2f}x", "" if m.kernels_per_step is None else str(m.kernels_per_step),
                     f"{m.compile_s:.2f}", "" if m.equal_to_jax is None else str(m.equal_to_jax),
                     m.note[:60]])
    return rows
