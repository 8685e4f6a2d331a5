"""Compile time of the CartPole rollout per (program variant, strategy): cold and from the cache.

For each row (by default the steps of `hlofuse cartpole`), at N environments and T steps:

- cold: trace and compile_module with an empty cache directory, so every pass, all code
  generation and the C compiler run. The directory is seeded only with what hlofuse keeps per
  machine, not per program (the cost model's measured constants, the runtime library, the
  compiler's version), as after any first use; the median of --repeats compiles, each split
  into tracing, passes (the strategy), code generation, the C compiler and the rest;
- cached, same process: a fresh `jit` of the same function (trace, key, lookup, load) once the
  program is in the cache, the median of --repeats;
- cached, new process: the same in a new Python process (imports not counted), the median of
  --repeats processes.

    .venv/bin/python benchmarks/compile_time.py                      # N=16384, T=1000
    .venv/bin/python benchmarks/compile_time.py --rows baseline/max,all/xla+relax_concatenate

Writes results/compile_time.json (--out). Not a test: it takes minutes. Timings on a machine
shared with other work vary by a factor of two; the load average goes with them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_ROWS = ("baseline/xla,fused-rng/xla,baseline/xla+relax_concatenate,split-state/xla,"
                "unroll10/xla,all/xla+relax_concatenate,baseline/none,baseline/priority,"
                "baseline/max")
TARGET_COLD_S = 2.0  # issue 7: baseline under max, cold
TARGET_CACHED_S = 0.05  # ... and from the cache

CHILD = """
import sys, time
import numpy as np
from hlofuse.envs import cartpole
from hlofuse.api import jit
from hlofuse import random
variant, strategy, n, t = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fn = cartpole.scan_rollout(cartpole.PRESETS[variant], n, t)
key = random.key(0)
start = time.perf_counter()
lowered = jit(fn, strategy=strategy).lower(key)
traced = time.perf_counter()
compiled = lowered.compile()
done = time.perf_counter()
print(traced - start, done - traced, compiled.executable.cache_hit)
"""


@dataclass
class Phases:
    trace_s: float = 0.0
    passes_s: float = 0.0
    codegen_s: float = 0.0
    cc_s: float = 0.0
    compile_s: float = 0.0  # compile_module, all of it

    @property
    def total_s(self) -> float:
        return self.trace_s + self.compile_s


@dataclass
class Row:
    variant: str
    strategy: str
    envs: int
    steps: int
    cold_s: float  # trace + compile, median
    cold: dict[str, float]  # the phases of the median cold compile
    cached_s: float  # trace + compile from the cache, same process, median
    cached_trace_s: float
    cached_new_process_s: float  # the same in a new process, median
    cached_new_process_trace_s: float
    c_source_bytes: int
    all_cold_s: list[float] = field(default_factory=list)
    all_cached_s: list[float] = field(default_factory=list)
    all_cached_new_process_s: list[float] = field(default_factory=list)


class Timers:
    """Wraps the functions compile_module calls, to split a compile into its phases."""

    def __init__(self) -> None:
        self.phases = Phases()

    @contextmanager
    def installed(self) -> Iterator[None]:
        import hlofuse.api as api
        import hlofuse.compile_cache as compile_cache
        import hlofuse.runtime.lowering as lowering

        patches = [(api, "run_strategy", "passes_s"), (lowering, "_generate", "codegen_s"),
                   (subprocess, "run", "cc_s")]
        originals = [(module, name, getattr(module, name)) for module, name, _ in patches]
        for (module, name, phase), (_, _, original) in zip(patches, originals):
            setattr(module, name, self._timed(original, phase))
        del compile_cache  # imported so that its import is not timed
        try:
            yield
        finally:
            for module, name, original in originals:
                setattr(module, name, original)

    def _timed(self, function: Callable[..., Any], phase: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                setattr(self.phases, phase,
                        getattr(self.phases, phase) + time.perf_counter() - start)

        return timed


def compile_once(variant: str, strategy: str, n: int, t: int,
                 timers: Timers | None = None) -> tuple[Phases, int]:
    """Trace and compile the rollout as a user's fresh `jit` does; returns the phases and the
    size of the C source."""
    from hlofuse import random
    from hlofuse.api import jit
    from hlofuse.envs import cartpole

    fn = cartpole.scan_rollout(cartpole.PRESETS[variant], n, t)
    key = random.key(0)
    start = time.perf_counter()
    lowered = jit(fn, strategy=strategy).lower(key)
    traced = time.perf_counter()
    if timers is None:
        compiled = lowered.compile()
        phases = Phases()
    else:
        timers.phases = Phases()
        with timers.installed():
            compiled = lowered.compile()
        phases = timers.phases
    phases.compile_s = time.perf_counter() - traced
    phases.trace_s = traced - start
    assert compiled.executable is not None
    size = len(compiled.executable.source()) if timers is not None else 0
    return phases, size


def seed(directory: Path, machine_cache: Path) -> None:
    """The per-machine entries of a cache directory: the cost constants, the runtime
    library (built from the same source in any directory) and the compiler's version."""
    directory.mkdir(mode=0o700, parents=True)
    for pattern in ("cost-constants-*.json", "*.version"):
        for path in machine_cache.glob(pattern):
            shutil.copy2(path, directory / path.name)
    os.environ["HLOFUSE_CACHE_DIR"] = str(directory)
    from hlofuse.targets.c import CompileOptions, runtime_library
    from hlofuse.toolchain import compiler

    compiler._find_compiler.cache_clear()
    runtime_library.cache_clear()
    runtime_library(CompileOptions().flags)  # compiled into `directory`, as compiles call it


def measure_row(variant: str, strategy: str, args: argparse.Namespace,
                machine_cache: Path, scratch: Path) -> Row:
    colds: list[tuple[Phases, int]] = []
    directory = scratch
    for k in range(args.repeats):
        directory = scratch / f"{variant}-{strategy}-{k}"
        seed(directory, machine_cache)
        colds.append(compile_once(variant, strategy, args.envs, args.steps, Timers()))
    colds.sort(key=lambda c: c[0].total_s)
    cold, size = colds[len(colds) // 2]
    # The last directory holds the program now: every later compile is a cache hit.
    cached = [compile_once(variant, strategy, args.envs, args.steps)[0]
              for _ in range(max(args.repeats, 3))]
    children = [_child(variant, strategy, args, directory) for _ in range(args.repeats)]
    cached_total = [p.total_s for p in cached]
    child_total = [a + b for a, b in children]
    return Row(
        variant=variant, strategy=strategy, envs=args.envs, steps=args.steps,
        cold_s=cold.total_s, cold={**asdict(cold), "other_s": _other(cold)},
        cached_s=statistics.median(cached_total),
        cached_trace_s=statistics.median(p.trace_s for p in cached),
        cached_new_process_s=statistics.median(child_total),
        cached_new_process_trace_s=statistics.median(a for a, _ in children),
        c_source_bytes=size, all_cold_s=[c.total_s for c, _ in colds],
        all_cached_s=cached_total, all_cached_new_process_s=child_total)


def _other(phases: Phases) -> float:
    """Compile time outside the passes, code generation and the C compiler: keys, cache
    lookups and writes, loading."""
    return phases.compile_s - phases.passes_s - phases.codegen_s - phases.cc_s


def _child(variant: str, strategy: str, args: argparse.Namespace,
           directory: Path) -> tuple[float, float]:
    env = {**os.environ, "HLOFUSE_CACHE_DIR": str(directory)}
    result = subprocess.run([sys.executable, "-c", CHILD, variant, strategy, str(args.envs),
                             str(args.steps)], capture_output=True, text=True, env=env,
                            timeout=600, check=True)
    trace_s, compile_s, hit = result.stdout.split()
    if hit != "True":
        raise RuntimeError(f"{variant}/{strategy}: the new process did not hit the cache")
    return float(trace_s), float(compile_s)


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=16384, help="environments (default 16384)")
    parser.add_argument("--steps", type=int, default=1000, help="steps (default 1000)")
    parser.add_argument("--rows", default=DEFAULT_ROWS,
                        help="variant/strategy pairs, comma separated (default: the study's)")
    parser.add_argument("--repeats", type=int, default=3, help="compiles per figure (median)")
    parser.add_argument("--out", default="results/compile_time.json")
    args = parser.parse_args()
    rows = [tuple(r.split("/", 1)) for r in args.rows.split(",") if r]
    if any(len(r) != 2 for r in rows):
        parser.error("--rows takes variant/strategy pairs")

    from hlofuse.compile_cache import measured_machine_constants
    from hlofuse.studies.peers.bench import machine_description
    from hlofuse.toolchain import Compiler
    from hlofuse.toolchain.cache import default_cache_dir, ensure_cache_dir

    machine_cache = ensure_cache_dir(default_cache_dir())
    measured_machine_constants()  # measured once per machine, into the user's cache: not timed
    Compiler.find()
    load_before = load_average()
    records = []
    scratch = Path(tempfile.mkdtemp(prefix="hlofuse-compile-time-"))
    try:
        for variant, strategy in rows:
            row = measure_row(variant, strategy, args, machine_cache, scratch)
            records.append(row)
            c = row.cold
            print(f"{variant:>12} {strategy:<24} cold {row.cold_s:6.2f} s (trace "
                  f"{c['trace_s']:.2f}, passes {c['passes_s']:.2f}, codegen "
                  f"{c['codegen_s']:.2f}, cc {c['cc_s']:.2f}, other {c['other_s']:.2f}; "
                  f"{row.c_source_bytes / 1e3:.0f} kB of C)  cached {row.cached_s * 1e3:5.1f} ms "
                  f"(trace {row.cached_trace_s * 1e3:.1f})  new process "
                  f"{row.cached_new_process_s * 1e3:5.1f} ms", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = {
        "benchmark": "compile_time",
        "command": "benchmarks/compile_time.py " + " ".join(sys.argv[1:]),
        "targets": {"baseline/max cold_s": TARGET_COLD_S, "baseline/max cached_s":
                    TARGET_CACHED_S},
        "machine": {**machine_description(), "load_average_before": load_before,
                    "load_average_after": load_average()},
        "config": {"envs": args.envs, "steps": args.steps, "repeats": args.repeats},
        "records": [asdict(r) for r in records],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
