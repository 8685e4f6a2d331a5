"""The FLOP rate of a policy network inside a whole-loop kernel, against NumPy's matmul.

Issue 32 asks that the network part of an MLP-policy rollout under `max` reach at least half
the FLOP rate NumPy's matmul reaches on the same machine in the same run. A rollout's step
mixes the network with physics and sampling, so this measures the network alone: a `scan`
over T steps whose step is a policy network over every lane's observation (obs -> 64 -> 64 ->
obs, tanh or relu hidden layers, weights shared by the lanes), its output (through tanh, to
keep it bounded) the next observation. Traced with `hlofuse.jit` and compiled under `max`
(the loop becomes one kernel, the products register-blocked loops in lane code), its FLOP
rate counts the three layers' multiply-adds only (2 flops each), so activations are
overhead, as in the rollouts. Beside it, in the same process:

* `numpy_matmul`: `np.matmul` of [N, 64] x [64, 64] (the hidden layer's shape), the
  reference rate the issue names;
* `numpy_network`: the same network stepped in NumPy (matmuls plus NumPy's tanh or maximum).

Threads: one for both (OMP_NUM_THREADS and OpenBLAS read before NumPy loads). Run from the
repository root:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/network_flops.py [--out PATH]

Writes results/network_flops.json (medians of --repeats runs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", os.environ["OMP_NUM_THREADS"])

import numpy as np  # noqa: E402

import hlofuse  # noqa: E402
import hlofuse.numpy as hnp  # noqa: E402
from hlofuse import lax  # noqa: E402

HIDDEN = 64
ACTIVATIONS: dict[str, tuple[Callable[[object], object], Callable[[np.ndarray], np.ndarray]]] = {
    "tanh": (hnp.tanh, np.tanh),
    "relu": (lambda x: hnp.maximum(x, 0.0), lambda x: np.maximum(x, np.float32(0.0))),
}


def init_params(obs: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    sizes = (obs, HIDDEN, HIDDEN, obs)
    return [((rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32),
             (0.1 * rng.standard_normal(n)).astype(np.float32))
            for m, n in zip(sizes[:-1], sizes[1:])]


def network_flops(obs: int) -> int:
    """Multiply-add flops of one lane's step: obs x 64, 64 x 64, 64 x obs."""
    return 2 * (obs * HIDDEN + HIDDEN * HIDDEN + HIDDEN * obs)


def hlofuse_rollout(activation: str, steps: int) -> Callable[..., object]:
    act = ACTIVATIONS[activation][0]

    def rollout(params: list[tuple[np.ndarray, np.ndarray]], obs: np.ndarray) -> object:
        def step(x: object, _: object) -> tuple[object, object]:
            h = x
            for w, b in params[:-1]:
                h = act(h @ w + b)
            w, b = params[-1]
            return hnp.tanh(h @ w + b), None

        final, _ = lax.scan(step, obs, None, length=steps)
        return final

    return hlofuse.jit(rollout, strategy="max")


def numpy_rollout(activation: str, steps: int, params: list[tuple[np.ndarray, np.ndarray]],
                  obs: np.ndarray) -> np.ndarray:
    act = ACTIVATIONS[activation][1]
    x = obs
    for _ in range(steps):
        h = x
        for w, b in params[:-1]:
            h = act(h @ w + b)
        w, b = params[-1]
        x = np.tanh(h @ w + b)
    return x


def median_s(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_rate(lanes: int, repeats: int) -> float:
    """GFLOP/s of np.matmul on the hidden layer's shape, [lanes, 64] x [64, 64]."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((lanes, HIDDEN)).astype(np.float32)
    b = rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32)
    out = np.empty((lanes, HIDDEN), np.float32)
    calls = max(1, int(2e9 / (2 * lanes * HIDDEN * HIDDEN)))  # about 2 GFLOP a sample

    def run() -> None:
        for _ in range(calls):
            np.matmul(a, b, out=out)

    return 2 * lanes * HIDDEN * HIDDEN * calls / median_s(run, repeats) / 1e9


def measure_network(activation: str, obs_size: int, lanes: int, steps: int,
                    repeats: int) -> dict[str, object]:
    params = init_params(obs_size)
    obs = np.random.default_rng(2).uniform(-1, 1, (lanes, obs_size)).astype(np.float32)
    function = hlofuse_rollout(activation, steps)
    start = time.perf_counter()
    compiled = function.lower(params, obs).compile()
    compile_s = time.perf_counter() - start
    got = np.asarray(compiled(params, obs))
    want = numpy_rollout(activation, steps, params, obs)
    # A rate is only worth quoting for the right answer from the one-kernel form.
    if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
        raise SystemExit(f"{activation} obs={obs_size}: hlofuse differs from NumPy by "
                         f"{np.max(np.abs(got - want)):.2e}")
    if compiled.kernels_per_iteration():
        raise SystemExit(f"{activation} obs={obs_size}: the scan is not one kernel "
                         f"({compiled.kernels_per_iteration()} kernels per step)")
    flops = network_flops(obs_size) * lanes * steps
    hlofuse_s = median_s(lambda: compiled(params, obs), repeats)
    numpy_s = median_s(lambda: numpy_rollout(activation, steps, params, obs), repeats)
    return {"activation": activation, "obs": obs_size, "lanes": lanes, "steps": steps,
            "kernels": len(compiled.kernels), "compile_s": compile_s,
            "max_abs_difference_from_numpy": float(np.max(np.abs(got - want))),
            "hlofuse_max_gflops": flops / hlofuse_s / 1e9,
            "numpy_network_gflops": flops / numpy_s / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lanes", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("results/network_flops.json"))
    args = parser.parse_args()
    reference = matmul_rate(args.lanes, args.repeats)
    print(f"numpy matmul [{args.lanes},64]x[64,64]: {reference:.1f} GFLOP/s")
    rows = []
    for activation in ACTIVATIONS:
        for obs_size in (4, 64):
            row = measure_network(activation, obs_size, args.lanes, args.steps, args.repeats)
            row["fraction_of_numpy_matmul"] = row["hlofuse_max_gflops"] / reference
            rows.append(row)
            print(f"{activation} obs={obs_size}: hlofuse max {row['hlofuse_max_gflops']:.1f} "
                  f"GFLOP/s ({row['fraction_of_numpy_matmul']:.0%} of matmul), numpy network "
                  f"{row['numpy_network_gflops']:.1f}, {row['kernels']} kernels, "
                  f"diff {row['max_abs_difference_from_numpy']:.1e}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "threads": os.environ["OMP_NUM_THREADS"], "numpy_matmul_gflops": reference,
        "networks": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
