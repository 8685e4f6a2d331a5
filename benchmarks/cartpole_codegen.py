"""CartPole rollout on the compiled CPU backend: each program variant under `none` and `xla`.

Measures, per (variant, strategy): kernels launched per environment step (counted by the
driver's profile, copies separately), environment-steps per second (N * T / wall, median of
--repeat runs after compiling and one warm-up), compile time cold (empty cache) and warm
(cache hit; Python code generation included), and the arena's peak bytes.

    .venv/bin/python benchmarks/cartpole_codegen.py                  # N=16384, T=1000
    .venv/bin/python benchmarks/cartpole_codegen.py --n 1024 --t 100 --variants baseline,all
    .venv/bin/python benchmarks/cartpole_codegen.py --pairs baseline/xla,all/xla+relax_concatenate

Not a test: it takes minutes. The programs come from the front end's CartPole
(src/hlofuse/envs/cartpole.py); --hlo FILE benchmarks one HLO file instead (for instance
tests/data/jax/cartpole_rollout.hlo, whose sizes are fixed by the file).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Row:
    variant: str
    strategy: str
    kernels_per_step: float
    copies_per_step: float
    steps_per_s: float
    compile_cold_s: float
    compile_warm_s: float
    fuse_s: float
    peak_bytes: int


def measure(module, inputs: list[np.ndarray], strategy: str, n_envs: int, n_steps: int,
            repeat: int, label: str) -> Row:  # type: ignore[no-untyped-def]
    from hlofuse.compile_cache import strategy_constants
    from hlofuse.fusion.strategies import run_strategy
    from hlofuse.targets.c import compile_cpu

    constants = strategy_constants(strategy)  # measured once per machine: not timed
    start = time.perf_counter()
    fused = run_strategy(module, strategy, debug=False, constants=constants).module
    fuse_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as cold_dir:
        os.environ["HLOFUSE_CACHE_DIR"] = cold_dir
        start = time.perf_counter()
        compile_cpu(fused)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        executable = compile_cpu(fused)
        warm = time.perf_counter() - start
        assert executable.cache_hit
        executable(*inputs)  # warm-up
        # The median: on a shared machine the best run flatters and the mean is noisy.
        best = float(np.median([_timed(executable, inputs) for _ in range(repeat)]))
        profile = executable.profile(*inputs)
    kernel_calls = sum(r.calls for r in profile.rows if r.kind != "copy")
    copy_calls = sum(r.calls for r in profile.rows if r.kind == "copy")
    return Row(label, strategy, kernel_calls / n_steps, copy_calls / n_steps,
               n_envs * n_steps / best, cold, warm, fuse_s, executable.peak_bytes)


def _timed(executable, inputs: list[np.ndarray]) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    executable(*inputs)
    return time.perf_counter() - start


def programs(args: argparse.Namespace) -> list[tuple[str, object, list[np.ndarray]]]:
    if args.hlo:
        from hlofuse.cli import load_module, random_inputs

        module, _ = load_module(args.hlo)
        return [(Path(args.hlo).stem, module, random_inputs(module, 0))]
    from hlofuse.envs import cartpole

    out = []
    for name in dict.fromkeys(name for name, _ in pairs(args)):
        variant = cartpole.PRESETS[name]
        module = cartpole.trace(variant, args.n, args.t)
        aux = np.asarray(cartpole._rollout_input(variant, args.n, 0, None))
        out.append((name, module, [aux]))
    return out


def pairs(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(variant, strategy) rows: --pairs when given, else every variant under every strategy."""
    if args.pairs:
        return [tuple(p.split("/", 1)) for p in args.pairs.split(",")]  # type: ignore[misc]
    return [(v, s) for v in args.variants.split(",") for s in args.strategies.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16384, help="environments (default 16384)")
    parser.add_argument("--t", type=int, default=1000, help="steps (default 1000)")
    parser.add_argument("--variants", default="baseline,fused-rng,split-state,unroll10,all")
    parser.add_argument("--strategies", default="none,xla")
    parser.add_argument("--pairs", help="variant/strategy rows, comma separated (instead of "
                        "--variants x --strategies)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs, median taken")
    parser.add_argument("--hlo", help="benchmark this HLO file instead of the front end's")
    args = parser.parse_args()
    rows = []
    wanted = pairs(args)
    for name, module, inputs in programs(args):
        strategies = args.strategies.split(",") if args.hlo else [s for v, s in wanted if v == name]
        for strategy in strategies:
            row = measure(module, inputs, strategy, args.n, args.t, args.repeat, name)
            rows.append(row)
            print(f"{row.variant:>12} {row.strategy:>5}: {row.kernels_per_step:7.1f} kernels/step "
                  f"{row.copies_per_step:5.1f} copies/step {row.steps_per_s / 1e6:9.2f} M "
                  f"env-steps/s  compile cold {row.compile_cold_s:6.2f} s warm "
                  f"{row.compile_warm_s:5.2f} s  fuse {row.fuse_s:5.2f} s  peak "
                  f"{row.peak_bytes / 1e6:.2f} MB", flush=True)
    threads = os.environ.get("OMP_NUM_THREADS", str(os.cpu_count()))
    print(f"\nN = {args.n}, T = {args.t}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, OMP_NUM_THREADS={threads}\n")
    print("| variant | strategy | kernels/step | copies/step | env-steps/s | compile cold | "
          "compile warm |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r.variant} | {r.strategy} | {r.kernels_per_step:.1f} | {r.copies_per_step:.1f} "
              f"| {r.steps_per_s / 1e6:.2f} M | {r.compile_cold_s:.2f} s | "
              f"{r.compile_warm_s:.2f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
