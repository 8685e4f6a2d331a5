"""Times hlofuse's dot kernel against NumPy's matmul on the shapes policy networks and rollouts
use; writes results/dot_bench.json.

Each case is one f32 dot, [N, K] x [K, 64] (a layer of 64 units over N observations of K
features; N from 1 to 16,384, K from 4 to 64), the heads [N, 64] x [64, 1 or 2] (a value or
action head: a GEMV where the output has one column) and the square [1024, 1024] x [1024, 1024],
compiled by hlofuse for the C target (a dot is a kernel of its own: the runtime library's dot,
which calls OpenBLAS where scipy-openblas32 is installed) and timed next to `a @ b` in the same
process. Figures are medians of single calls:

* `kernel_us`: the dot kernel alone, timed in the generated C (`profile`): what the 1.5x goal
  (`ratio`) is about. The program sums the product to a scalar (a second kernel, not timed), so
  the dot writes into the program's reused arena, as in a rollout, and not into a fresh output
  array whose first touch would be timed with it;
* `call_us`: a whole call from Python (argument checks, the output's allocation, ctypes), which
  dominates at small N;
* `numpy_us`: `np.matmul(a, b, out=c)`.

Threads: both sides follow $OMP_NUM_THREADS (NumPy's OpenBLAS reads it where
$OPENBLAS_NUM_THREADS is unset); on a shared machine set it. HLOFUSE_BLAS=0 measures the
runtime's own loop instead. Run from the repository root:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/dot_bench.py [--quick] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from hlofuse.ir.parser import parse_module
from hlofuse.targets.c import compile_cpu
from hlofuse.targets.c.blas import find_blas

LAYER_ROWS = (1, 16, 256, 1024, 4096, 16384)
LAYER_FEATURES = (4, 16, 64)
LAYER_UNITS = 64
HEAD_OUTPUTS = (1, 2)  # value and action heads: [N, 64] x [64, 1 or 2]
SQUARE = 1024
GOAL = 1.5  # hlofuse's kernel time over NumPy's, at most
SAMPLE_S = 0.02  # each profile runs the program this long, at least
CALLS = 20  # single calls timed per sample


def dot_module(m: int, k: int, n: int) -> str:
    """The dot, and the sum of its elements as the program's result (see `kernel_us`)."""
    return (f"HloModule dot_{m}x{k}x{n}\n\nadd {{\n  x = f32[] parameter(0)\n"
            f"  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}}\n\nENTRY main {{\n"
            f"  a = f32[{m},{k}] parameter(0)\n  b = f32[{k},{n}] parameter(1)\n"
            f"  d = f32[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, "
            f"rhs_contracting_dims={{0}}\n  zero = f32[] constant(0)\n"
            f"  ROOT total = f32[] reduce(d, zero), dimensions={{0,1}}, to_apply=add\n}}\n")


def median_us(run: Callable[[], object], samples: int) -> float:
    """The median time of one call over `samples` x CALLS calls, each timed alone, as the
    profile times each kernel call (a median of single calls leaves out the calls another
    process preempted, on both sides alike)."""
    run()
    times = []
    for _ in range(samples * CALLS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def kernel_us(executable: object, a: np.ndarray, b: np.ndarray, samples: int) -> float:
    """The dot kernel's median time as the generated C times it, over `samples` profiles of
    enough runs each; the profile's per-kernel median is of up to its sample count of calls."""
    once = median_us(lambda: executable(a, b), 1) * 1e-6
    repeat = max(1, min(200, int(SAMPLE_S / max(once, 1e-9))))
    medians = []
    for _ in range(samples):
        profile = executable.profile(a, b, repeat=repeat)  # type: ignore[attr-defined]
        medians.append(sum(r.median_s for r in profile.rows if r.kind == "dot" and r.calls))
    return statistics.median(medians) * 1e6


def measure(m: int, k: int, n: int, samples: int, rng: np.random.Generator) -> dict[str, object]:
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    executable = compile_cpu(parse_module(dot_module(m, k, n)))
    got = float(np.asarray(executable(a, b)))
    want = float((a.astype(np.float64) @ b.astype(np.float64)).sum())
    scale = float((np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)).sum())
    if abs(got - want) > 1e-5 * scale:
        raise SystemExit(f"[{m},{k}]x[{k},{n}]: hlofuse's dot sums to {got}, NumPy's to {want}")
    out = np.empty((m, n), np.float32)
    row: dict[str, object] = {"m": m, "k": k, "n": n}
    row["numpy_us"] = numpy_us = median_us(lambda: np.matmul(a, b, out=out), samples)
    row["kernel_us"] = kernel_us(executable, a, b, samples)
    row["call_us"] = median_us(lambda: executable(a, b), samples)
    row["ratio"] = kernel = float(row["kernel_us"]) / numpy_us  # type: ignore[arg-type]
    row["kernel_gflops"] = 2.0 * m * k * n / (kernel * numpy_us) / 1e3
    row["numpy_gflops"] = 2.0 * m * k * n / numpy_us / 1e3
    return row


def main(quick: bool, samples: int, out: Path) -> int:
    rng = np.random.default_rng(0)
    rows_n = (1, 256, 4096) if quick else LAYER_ROWS
    cases = [(m, k, LAYER_UNITS) for m in rows_n for k in LAYER_FEATURES]
    cases += [(m, LAYER_UNITS, n) for m in rows_n if m > 1 for n in HEAD_OUTPUTS]
    cases.append((SQUARE, SQUARE, SQUARE))
    blas = find_blas()
    print(f"dot: {blas.identity if blas else 'the runtime loop (no BLAS)'}; "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
    print(f"{'shape':>24} {'numpy us':>10} {'kernel us':>10} {'call us':>9} {'ratio':>6} "
          f"{'GFLOP/s':>8}")
    rows = []
    for m, k, n in cases:
        row = measure(m, k, n, samples, rng)
        rows.append(row)
        print(f"{f'[{m},{k}]x[{k},{n}]':>24} {row['numpy_us']:>10.2f} "
              f"{row['kernel_us']:>10.2f} {row['call_us']:>9.2f} {row['ratio']:>6.2f} "
              f"{row['kernel_gflops']:>8.1f}")
    # The goal is the layers' and the square's; a head is reported beside it (below 16,384
    # multiply-adds it runs the runtime's loop, which keeps the reference's order).
    heads = [r for r in rows if r["n"] in HEAD_OUTPUTS]
    worst = max(float(r["ratio"]) for r in rows if r not in heads)  # type: ignore[arg-type]
    worst_head = max((float(r["ratio"]) for r in heads), default=0.0)  # type: ignore[arg-type]
    print(f"worst kernel/NumPy ratio {worst:.2f} (goal: at most {GOAL}); heads: "
          f"{worst_head:.2f}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "blas": blas.identity if blas else None,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpu_count": os.cpu_count(), "numpy": np.__version__, "goal_ratio": GOAL,
        "worst_ratio": worst, "worst_head_ratio": worst_head, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="N in 1, 256, 4096 only")
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path("results/dot_bench.json"))
    args = parser.parse_args()
    raise SystemExit(main(args.quick, args.samples, args.out))
