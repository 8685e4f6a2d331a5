"""Whole-loop fusion on the unchanged baseline CartPole program, against the hand-written kernel.

Measures side by side, in one run, environment-steps per second (N * T / median time of
--repeat runs, after building and one warm-up), the runs of all contenders at one N taken in
turn so that a busy machine slows them alike:

- `max`: hlofuse's strategy with every rewrite and whole-loop fusion, on the baseline program
  (opaque Threefry custom call, packed (N, 4) state, the rollout in one scan), compiled;
- `xla`: the 2022 XLA pipeline on the same program, compiled (run for --xla-steps steps: it
  launches its kernels every step, and the metric is per step);
- `c` and `c-scalar`: the hand-written C kernel of the peers benchmark (OpenMP blocks of SIMD
  lanes; one environment at a time);
- `jax`: the fastest of JAX's scan variants (jit of the whole rollout), where JAX is installed,
  at N <= --jax-max-n.

Each run is timed twice: wall clock, and CPU time of this process (all its threads), the
steadier one on a shared machine: with OMP_NUM_THREADS=1 it is the time of the one thread.
The table shows env-steps per --clock second and the ratios of the medians; the JSON written
to --out (default results/whole_loop.json) has both clocks. Also reports building the `max`
rollout: its passes, then generating and compiling the C cold (empty cache) and again from the
cache.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/whole_loop_cartpole.py
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/whole_loop_cartpole.py --n 16384 --repeat 9
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

CLOCKS = ("wall", "cpu")


@dataclass
class Row:
    n_envs: int
    name: str
    steps: int
    times: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in CLOCKS})

    def seconds(self, clock: str) -> float:
        """Median time of one rollout on `clock`."""
        return statistics.median(self.times[clock])

    def steps_per_s(self, clock: str) -> float:
        return self.n_envs * self.steps / self.seconds(clock)


@dataclass
class BuildTimes:
    fuse: float  # trace excluded: the strategy's passes
    cold: float  # generating and compiling the C, empty cache
    cached: float  # the same again, the shared object from the cache


def hlofuse_rollout(strategy: str, n_envs: int, n_steps: int
                    ) -> tuple[Callable[[], object], BuildTimes]:
    """The baseline rollout compiled under `strategy`, and how long building it took."""
    from hlofuse.compile_cache import strategy_constants
    from hlofuse.envs import cartpole
    from hlofuse.fusion.strategies import run_strategy
    from hlofuse.targets.c import compile_cpu

    variant = cartpole.PRESETS["baseline"]
    aux = np.asarray(cartpole._rollout_input(variant, n_envs, 0, None))
    module = cartpole.trace(variant, n_envs, n_steps)
    constants = strategy_constants(strategy)  # measured once per machine: not timed
    start = time.perf_counter()
    fused = run_strategy(module, strategy, debug=False, constants=constants).module
    fuse = time.perf_counter() - start
    saved = os.environ.get("HLOFUSE_CACHE_DIR")
    with tempfile.TemporaryDirectory() as cold_dir:
        os.environ["HLOFUSE_CACHE_DIR"] = cold_dir
        try:
            start = time.perf_counter()
            compile_cpu(fused)
            cold = time.perf_counter() - start
            start = time.perf_counter()
            executable = compile_cpu(fused)
            cached = time.perf_counter() - start
        finally:
            if saved is None:
                os.environ.pop("HLOFUSE_CACHE_DIR", None)
            else:
                os.environ["HLOFUSE_CACHE_DIR"] = saved
    return (lambda: executable(aux)), BuildTimes(fuse, cold, cached)


def peer_rollout(name: str, n_envs: int, n_steps: int) -> Callable[[], object] | None:
    from hlofuse.studies.peers.registry import PeerUnavailable, default_registry
    from hlofuse.studies.peers.workload import Workload, initial_states

    registry = default_registry()
    if name not in registry or registry[name].availability() is not None:
        return None
    try:
        runner = registry[name].factory(Workload(initial_states(n_envs, 0), n_steps, 0, False))
    except PeerUnavailable:
        return None
    return runner.run


def time_in_turn(runs: dict[str, Callable[[], object]], rows: dict[str, Row],
                 repeat: int) -> None:
    """Warm each run up, then time every one `repeat` times, taking them in turn."""
    for run in runs.values():
        run()
    for _ in range(repeat):
        for name, run in runs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            rows[name].times["cpu"].append(time.process_time() - cpu)
            rows[name].times["wall"].append(time.perf_counter() - wall)


def fastest_jax(n_envs: int, n_steps: int, repeat: int) -> Row | None:
    """The fastest of JAX's scan variants (timed on their own: they are only a reference)."""
    best: Row | None = None
    for name in ("jax-scan-split-u1", "jax-scan-split-u10", "jax-scan-packed-u1",
                 "jax-scan-packed-u10"):
        peer = peer_rollout(name, n_envs, n_steps)
        if peer is None:
            continue
        row = Row(n_envs, "jax", n_steps)
        time_in_turn({"jax": peer}, {"jax": row}, repeat)
        if best is None or row.seconds("cpu") < best.seconds("cpu"):
            best = row
    return best


def rollout_steps(args: argparse.Namespace, n_envs: int) -> int:
    """T at this N: --t, fewer where N * T would pass --max-env-steps."""
    return max(1, min(args.t, args.max_env_steps // n_envs))


def measure(args: argparse.Namespace) -> tuple[list[Row], dict[int, BuildTimes]]:
    rows: list[Row] = []
    build_times: dict[int, BuildTimes] = {}
    for n_envs in args.n:
        steps = rollout_steps(args, n_envs)
        runs: dict[str, Callable[[], object]] = {}
        runs["max"], build_times[n_envs] = hlofuse_rollout("max", n_envs, steps)
        print(f"N={n_envs}, T={steps}: max built (fuse {build_times[n_envs].fuse:.2f} s, "
              f"compile {build_times[n_envs].cold:.2f} s cold, "
              f"{build_times[n_envs].cached * 1e3:.0f} ms cached)", flush=True)
        for name in ("c", "c-scalar"):
            if name == "c-scalar" and n_envs > args.scalar_max_n:
                continue
            peer = peer_rollout(name, n_envs, steps)
            if peer is not None:
                runs[name] = peer
        by_name = {name: Row(n_envs, name, steps) for name in runs}
        xla_steps = min(steps, args.xla_steps)
        runs["xla"], _ = hlofuse_rollout("xla", n_envs, xla_steps)
        by_name["xla"] = Row(n_envs, "xla", xla_steps)
        time_in_turn(runs, by_name, args.repeat)
        rows.extend(by_name.values())
        if n_envs <= args.jax_max_n:
            best = fastest_jax(n_envs, steps, args.repeat)
            if best is not None:
                rows.append(best)
        for row in rows:
            if row.n_envs == n_envs:
                print(f"  {row.name}: {row.steps_per_s('cpu') / 1e6:.3g} M env-steps per "
                      f"CPU-s, {row.steps_per_s('wall') / 1e6:.3g} M per wall-s", flush=True)
    return rows, build_times


NAMES = ("max", "c", "c-scalar", "xla", "jax")
RATIOS = (("max", "c"), ("max", "xla"), ("c-scalar", "max"), ("max", "jax"))


def ratios(rows: list[Row], n_envs: int, clock: str) -> dict[str, float]:
    rate = {r.name: r.steps_per_s(clock) for r in rows if r.n_envs == n_envs}
    return {f"{a}/{b}": rate[a] / rate[b] for a, b in RATIOS if a in rate and b in rate}


def report(rows: list[Row], build_times: dict[int, BuildTimes], clock: str) -> None:
    threads = os.environ.get("OMP_NUM_THREADS", str(os.cpu_count()))
    print(f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"OMP_NUM_THREADS={threads}; env-steps per {clock} second (median)\n")
    print("| N | T | " + " | ".join(NAMES) + " | "
          + " | ".join(f"{a} / {b}" for a, b in RATIOS) + " | max: fuse, compile cold / cached |")
    print("|---:|---:|" + "---:|" * (len(NAMES) + len(RATIOS) + 1))
    for n_envs in sorted({r.n_envs for r in rows}):
        by_name = {r.name: r for r in rows if r.n_envs == n_envs}
        cells = [f"{by_name[name].steps_per_s(clock) / 1e6:.3g} M" if name in by_name else "-"
                 for name in NAMES]
        found = ratios(rows, n_envs, clock)
        ratio_cells = [f"{found[f'{a}/{b}']:.2f}" if f"{a}/{b}" in found else "-"
                       for a, b in RATIOS]
        times = build_times[n_envs]
        print(f"| {n_envs} | {by_name['max'].steps} | " + " | ".join(cells) + " | "
              + " | ".join(ratio_cells) + f" | {times.fuse:.2f} s, {times.cold:.2f} s / "
              f"{times.cached * 1e3:.0f} ms |")


def write_json(path: Path, args: argparse.Namespace, rows: list[Row],
               build_times: dict[int, BuildTimes]) -> None:
    from hlofuse.toolchain import Compiler

    results = []
    for n_envs in sorted({r.n_envs for r in rows}):
        entry: dict[str, object] = {"n_envs": n_envs, "contenders": {}}
        for row in (r for r in rows if r.n_envs == n_envs):
            entry["contenders"][row.name] = {  # type: ignore[index]
                "steps": row.steps,
                **{f"{clock}_median_s": row.seconds(clock) for clock in CLOCKS},
                **{f"env_steps_per_{clock}_s": row.steps_per_s(clock) for clock in CLOCKS},
                **{f"{clock}_s": row.times[clock] for clock in CLOCKS},
            }
        entry["ratios"] = {clock: ratios(rows, n_envs, clock) for clock in CLOCKS}
        times = build_times[n_envs]
        entry["max_build_s"] = {"fuse": times.fuse, "compile_cold": times.cold,
                                "compile_cached": times.cached}
        results.append(entry)
    document = {
        "benchmark": "whole-loop CartPole (baseline program): max vs hand-written C, xla, JAX",
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", str(os.cpu_count())),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "compiler": Compiler.find().version,
        "repeat": args.repeat,
        "results": results,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nwrote {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1, 64, 1024, 16384, 262144])
    parser.add_argument("--t", type=int, default=1000, help="steps (default 1000)")
    parser.add_argument("--max-env-steps", type=int, default=64_000_000,
                        help="fewer steps where N * T would pass this (default 64M: T = 244 "
                             "at N = 262144)")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs; the median counts")
    parser.add_argument("--xla-steps", type=int, default=100,
                        help="steps for the per-step-launching xla strategy (default 100)")
    parser.add_argument("--jax-max-n", type=int, default=16384,
                        help="largest N JAX runs at (default 16384)")
    parser.add_argument("--scalar-max-n", type=int, default=16384,
                        help="largest N the scalar C kernel runs at (default 16384)")
    parser.add_argument("--clock", choices=CLOCKS, default="cpu",
                        help="what the table shows (default cpu; the JSON has both)")
    parser.add_argument("--out", type=Path, default=Path("results/whole_loop.json"))
    args = parser.parse_args()
    rows, build_times = measure(args)
    report(rows, build_times, args.clock)
    write_json(args.out, args, rows, build_times)
    return 0


if __name__ == "__main__":
    sys.exit(main())
