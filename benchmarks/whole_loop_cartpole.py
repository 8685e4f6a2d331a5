"""Whole-loop fusion on the unchanged baseline CartPole program, against the hand-written kernel.

Measures side by side, in one run, environment-steps per second (N * T / median wall time of
--repeat runs, after building and one warm-up):

- `max`: hlofuse's strategy with every rewrite and whole-loop fusion, on the baseline program
  (opaque Threefry custom call, packed (N, 4) state, the rollout in one scan), compiled;
- `xla`: the 2022 XLA pipeline on the same program, compiled (run for --xla-steps steps: it
  launches its kernels every step, and the metric is per step);
- `c` and `c-scalar`: the hand-written C kernel of the peers benchmark (OpenMP blocks of SIMD
  lanes; one environment at a time);
- `jax`: the fastest of JAX's scan variants (jit of the whole rollout), where JAX is installed,
  at N <= --jax-max-n.

Also reports building the `max` rollout: its passes, then generating and compiling the C cold
(empty cache) and again from the cache. The machine is shared and noisy: medians, and the
ratios computed from them, are what to read.

    .venv/bin/python benchmarks/whole_loop_cartpole.py                  # N = 1, 64, 16384, 262144
    .venv/bin/python benchmarks/whole_loop_cartpole.py --n 16384 --repeat 9
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass
class Row:
    n_envs: int
    name: str
    steps: int
    seconds: float  # median wall time of one rollout

    @property
    def steps_per_s(self) -> float:
        return self.n_envs * self.steps / self.seconds


def median_time(run: Callable[[], object], repeat: int) -> float:
    run()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@dataclass
class BuildTimes:
    fuse: float  # trace excluded: the strategy's passes
    cold: float  # generating and compiling the C, empty cache
    cached: float  # the same again, the shared object from the cache


def hlofuse_rollout(strategy: str, n_envs: int, n_steps: int
                    ) -> tuple[Callable[[], object], BuildTimes]:
    """The baseline rollout compiled under `strategy`, and how long building it took."""
    from hlofuse.envs import cartpole
    from hlofuse.fusion.strategies import run_strategy
    from hlofuse.runtime import compile_cpu

    variant = cartpole.PRESETS["baseline"]
    aux = np.asarray(cartpole._rollout_input(variant, n_envs, 0, None))
    module = cartpole.trace(variant, n_envs, n_steps)
    start = time.perf_counter()
    fused = run_strategy(module, strategy, debug=False).module
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


def measure(args: argparse.Namespace) -> tuple[list[Row], dict[int, BuildTimes]]:
    rows: list[Row] = []
    build_times: dict[int, BuildTimes] = {}
    for n_envs in args.n:
        run, times = hlofuse_rollout("max", n_envs, args.t)
        build_times[n_envs] = times
        rows.append(Row(n_envs, "max", args.t, median_time(run, args.repeat)))
        print(f"N={n_envs}: max {rows[-1].steps_per_s / 1e6:.2f} M env-steps/s (fuse "
              f"{times.fuse:.2f} s, compile {times.cold:.2f} s cold, {times.cached * 1e3:.0f} ms "
              "cached)", flush=True)
        for name in ("c", "c-scalar"):
            if name == "c-scalar" and n_envs > args.scalar_max_n:
                continue
            peer = peer_rollout(name, n_envs, args.t)
            if peer is not None:
                rows.append(Row(n_envs, name, args.t, median_time(peer, args.repeat)))
                print(f"N={n_envs}: {name} {rows[-1].steps_per_s / 1e6:.2f} M", flush=True)
        steps = min(args.t, args.xla_steps)
        run, _ = hlofuse_rollout("xla", n_envs, steps)
        rows.append(Row(n_envs, "xla", steps, median_time(run, max(1, args.repeat // 2))))
        print(f"N={n_envs}: xla {rows[-1].steps_per_s / 1e6:.2f} M", flush=True)
        if n_envs <= args.jax_max_n:
            best: Row | None = None
            for name in ("jax-scan-split-u1", "jax-scan-split-u10", "jax-scan-packed-u1",
                         "jax-scan-packed-u10"):
                peer = peer_rollout(name, n_envs, args.t)
                if peer is None:
                    continue
                row = Row(n_envs, "jax", args.t, median_time(peer, args.repeat))
                if best is None or row.seconds < best.seconds:
                    best = row
            if best is not None:
                rows.append(best)
                print(f"N={n_envs}: jax (best scan) {best.steps_per_s / 1e6:.2f} M", flush=True)
    return rows, build_times


def report(rows: list[Row], build_times: dict[int, BuildTimes]) -> None:
    threads = os.environ.get("OMP_NUM_THREADS", str(os.cpu_count()))
    print(f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"OMP_NUM_THREADS={threads}; env-steps/s (median)\n")
    names = ["max", "c", "c-scalar", "xla", "jax"]
    print("| N | " + " | ".join(names) + " | max / c | max / xla | c-scalar / max | "
          "max / jax | max: fuse, compile cold / cached |")
    print("|---:|" + "---:|" * (len(names) + 5))
    for n_envs in sorted({r.n_envs for r in rows}):
        by_name = {r.name: r.steps_per_s for r in rows if r.n_envs == n_envs}

        def ratio(a: str, b: str) -> str:
            if a not in by_name or b not in by_name:
                return "-"
            return f"{by_name[a] / by_name[b]:.2f}"

        cells = [f"{by_name[name] / 1e6:.3g} M" if name in by_name else "-" for name in names]
        times = build_times[n_envs]
        print(f"| {n_envs} | " + " | ".join(cells) + f" | {ratio('max', 'c')} | "
              f"{ratio('max', 'xla')} | {ratio('c-scalar', 'max')} | {ratio('max', 'jax')} | "
              f"{times.fuse:.2f} s, {times.cold:.2f} s / {times.cached * 1e3:.0f} ms |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1, 64, 16384, 262144])
    parser.add_argument("--t", type=int, default=1000, help="steps (default 1000)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs; the median counts")
    parser.add_argument("--xla-steps", type=int, default=100,
                        help="steps for the per-step-launching xla strategy (default 100)")
    parser.add_argument("--jax-max-n", type=int, default=16384,
                        help="largest N JAX runs at (default 16384)")
    parser.add_argument("--scalar-max-n", type=int, default=16384,
                        help="largest N the scalar C kernel runs at (default 16384)")
    args = parser.parse_args()
    rows, build_times = measure(args)
    report(rows, build_times)
    return 0


if __name__ == "__main__":
    sys.exit(main())
