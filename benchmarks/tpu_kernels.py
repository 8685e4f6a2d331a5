"""Two figures of the TPU target on the chip, each from a loop that runs one element-wise
kernel per iteration on the device (no host between iterations): the cost of one kernel
launch (the smallest kernel's time per iteration) and the HBM bandwidth of large element-wise
kernels (bytes read and written per iteration over its time, against v5e's 819 GB/s). Each
loop's result is checked. Writes JSON; needs a TPU (`hlofuse` backend `tpu`).

    python benchmarks/tpu_kernels.py --out results/tpu/kernels.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import hlofuse
from hlofuse import lax as hlax

HBM_BYTES_PER_S = 819e9  # TPU v5e


def _median_s(fn: Callable[..., Any], *args: Any, repeats: int = 10) -> float:
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _looped(n: int, trips: int, backend: str) -> tuple[float, int, list[str], np.ndarray]:
    """Median seconds of one program that runs `v = v + y` `trips` times on n floats (each
    iteration one element-wise kernel: reads v and y, writes v), its kernels per iteration,
    their modes, and its result (from zeros and ones: `trips` everywhere, checked by the
    caller, so a loop that did not run every iteration cannot pass)."""
    import jax.numpy as jnp

    def loop(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return hlax.fori_loop(0, trips, lambda i, v: v + y, x)

    x = np.zeros(n, np.float32)
    executable = hlofuse.jit(loop, backend=backend).lower(x, x).compile().executable
    assert executable is not None
    fn = executable.device_function()
    a, b = jnp.zeros(n, jnp.float32), jnp.ones(n, jnp.float32)
    seconds = _median_s(fn, a, b)
    result = np.asarray(fn(a, b))
    kernels = executable.kernel_plans
    return seconds, len(kernels), [f"{k.name}: {k.mode} {k.layout}" for k in kernels], result


def per_iteration(n: int, trips: int, backend: str) -> dict[str, object]:
    """One kernel per loop iteration, timed on the device: the difference between `trips`
    iterations and one removes the program call and the host transfer of the result."""
    one_s, _, _, one = _looped(n, 1, backend)
    many_s, kernels, modes, many = _looped(n, trips, backend)
    if not (np.all(one == 1) and np.all(many == trips)):
        raise SystemExit(f"tpu_kernels: the loop of {trips} at n={n} computed a wrong value")
    seconds = (many_s - one_s) / (trips - 1)
    moved = 3 * 4 * n
    return {"elements": n, "trips": trips, "kernels_per_iteration": kernels, "kernels": modes,
            "call_s": one_s, "seconds_per_iteration": seconds,
            "us_per_iteration": seconds * 1e6,
            "us_per_kernel": seconds * 1e6 / max(kernels, 1), "bytes_per_iteration": moved,
            "gb_per_s": moved / seconds / 1e9, "fraction_of_hbm": moved / seconds / HBM_BYTES_PER_S}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/tpu/kernels.json")
    parser.add_argument("--backend", default="tpu", help="tpu, or tpu-interpret to try it here")
    parser.add_argument("--launch-trips", type=int, default=2000)
    parser.add_argument("--trips", type=int, default=50)
    parser.add_argument("--sizes", default="1048576,16777216,67108864")
    args = parser.parse_args()
    # The smallest kernel ((8, 128) floats): its time per iteration is the launch cost.
    result = {"launch": per_iteration(1024, args.launch_trips, args.backend),
              "bandwidth": [per_iteration(int(n), args.trips, args.backend)
                            for n in args.sizes.split(",")]}
    print(json.dumps(result, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
