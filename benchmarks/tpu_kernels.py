"""Two figures of the TPU target on the chip: the cost of one kernel launch (a loop of a tiny
element-wise kernel, timed on the device, divided by the kernels per iteration) and the HBM
bandwidth the largest element-wise kernel reaches (bytes read and written per second, against
v5e's 819 GB/s). Writes JSON; needs a TPU (`hlofuse` backend `tpu`).

    python benchmarks/tpu_kernels.py --out results/tpu/kernels.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

import hlofuse
from hlofuse import lax as hlax

HBM_BYTES_PER_S = 819e9  # TPU v5e


def _median_s(fn, *args, repeats: int = 10) -> float:  # type: ignore[no-untyped-def]
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def launch_overhead(trips: int) -> dict[str, object]:
    def loop(x: np.ndarray) -> np.ndarray:
        return hlax.fori_loop(0, trips, lambda i, v: v * np.float32(0.999) + np.float32(1), x)

    compiled = hlofuse.jit(loop, backend="tpu").lower(np.zeros((8, 128), np.float32)).compile()
    executable = compiled.executable
    assert executable is not None
    per_iteration = [k for k in executable.kernels]
    fn = executable.device_function()
    import jax.numpy as jnp

    # A loop of one trip costs the call itself: the difference is the kernels' launches.
    one = hlofuse.jit(lambda x: hlax.fori_loop(0, 1, lambda i, v: v * np.float32(0.999)
                                               + np.float32(1), x), backend="tpu")
    base = one.lower(np.zeros((8, 128), np.float32)).compile().executable
    assert base is not None
    call_s = _median_s(base.device_function(), jnp.zeros((8, 128), jnp.float32))
    seconds = _median_s(fn, jnp.zeros((8, 128), jnp.float32)) - call_s
    kernels = len(per_iteration)
    return {"trips": trips, "kernels_per_iteration": kernels, "call_s": call_s,
            "kernel_modes": [k.function for k in per_iteration],
            "seconds": seconds, "us_per_iteration": seconds / trips * 1e6,
            "us_per_kernel": seconds / trips / max(kernels, 1) * 1e6}


def bandwidth(n: int) -> dict[str, object]:
    def axpy(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return x * np.float32(2) + y

    x = np.zeros(n, np.float32)
    compiled = hlofuse.jit(axpy, backend="tpu").lower(x, x).compile()
    executable = compiled.executable
    assert executable is not None
    import jax.numpy as jnp

    fn = executable.device_function()
    a = jnp.ones(n, jnp.float32)
    seconds = _median_s(fn, a, a)
    moved = 3 * 4 * n
    plans = executable.kernel_plans
    return {"elements": n, "kernels": [f"{k.mode} {k.layout} {k.reason}" for k in plans],
            "seconds": seconds, "bytes": moved, "gb_per_s": moved / seconds / 1e9,
            "fraction_of_hbm": moved / seconds / HBM_BYTES_PER_S}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/tpu/kernels.json")
    parser.add_argument("--trips", type=int, default=20000)
    parser.add_argument("--sizes", default="1048576,16777216,67108864")
    args = parser.parse_args()
    result = {"launch": launch_overhead(args.trips),
              "bandwidth": [bandwidth(int(n)) for n in args.sizes.split(",")]}
    print(json.dumps(result, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
