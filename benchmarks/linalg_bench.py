"""Times batched small-matrix linear algebra, hlofuse against JAX's CPU jit in the same run;
writes results/linalg.json.

Every program is exported from JAX (its CPU lowering: LAPACK custom calls), compiled by
hlofuse under `xla` and `max`, and run on N matrices of size n (N = 4096, n = 6 by default,
the size of a rigid body's mass matrix); the figure is the best of several runs of each, in
milliseconds. OpenMP follows $OMP_NUM_THREADS (on a shared, loaded machine set it to 1:
spinning worker threads that lose their core make every parallel region slow). Run from the
repository root:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/linalg_bench.py [--n 6] [--batch 4096]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.targets.c import compile_cpu

PROGRAMS: dict[str, Callable[..., object]] = {
    "cholesky": jnp.linalg.cholesky,
    "cho_solve": lambda a, b: jsl.cho_solve(jsl.cho_factor(a, lower=True), b),
    "solve": jnp.linalg.solve,
    "qr": lambda a: jnp.linalg.qr(a)[1],
    "eigh": lambda a: jnp.linalg.eigh(a)[0],
    "svd": lambda a: jnp.linalg.svd(a, compute_uv=False),
}
TAKES_RHS = {"cho_solve", "solve"}
CORPUS = Path(__file__).parents[1] / "tests" / "data" / "linalg" / "generate.py"


def rigid_body_rollout() -> Callable[..., object]:
    """The corpus' rollout (25 steps, a Cholesky solve per body per step), loaded by path."""
    spec = importlib.util.spec_from_file_location("linalg_corpus", CORPUS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.rigid_body_rollout  # type: ignore[no-any-return]


def best_ms(fn: Callable[..., object], args: tuple[np.ndarray, ...], repeats: int) -> float:
    fn(*args)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def main(n: int, batch: int, repeats: int, out: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, n, n)).astype(np.float32)
    a = x @ np.swapaxes(x, -1, -2) + n * np.eye(n, dtype=np.float32)
    b = rng.standard_normal((batch, n, 1)).astype(np.float32)
    rows: list[dict[str, object]] = []
    programs = dict(PROGRAMS, rollout_rigid_body=rigid_body_rollout())
    for name, fn in programs.items():
        args: tuple[np.ndarray, ...] = (a, b) if name in TAKES_RHS else (a,)
        if name == "rollout_rigid_body":
            args = (rng.standard_normal((batch, n)).astype(np.float32),
                    np.zeros((batch, n), np.float32))
        jitted = jax.jit(fn)
        row: dict[str, float] = {"n": n, "batch": batch}
        row["jax_ms"] = best_ms(jitted, args, repeats)
        module = parse_module(jitted.lower(*args).as_text(dialect="hlo"))
        for strategy in ("xla", "max"):
            executable = compile_cpu(run_strategy(module, strategy, debug=False).module)
            row[f"{strategy}_ms"] = best_ms(executable, args, repeats)
        row["max_speedup"] = row["jax_ms"] / row["max_ms"]
        rows.append({"program": name, **row})
        print(f"{name:10s} jax {row['jax_ms']:8.3f} ms  xla {row['xla_ms']:8.3f} ms  "
              f"max {row['max_ms']:8.3f} ms  ({row['max_speedup']:.2f}x JAX)")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                               "cpu_count": os.cpu_count(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=6)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("results/linalg.json"))
    args = parser.parse_args()
    main(args.n, args.batch, args.repeats, args.out)
