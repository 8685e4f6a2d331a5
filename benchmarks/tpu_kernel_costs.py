"""Issue 29's two per-kernel figures on the chip, each from a straight chain of kernels in one
jitted program (no loop for XLA to reason about): K kernels, each reading the previous one's
result, timed against a chain of one, so the difference divided by K - 1 is one kernel's cost
on the device without the program call or the host.

- launch: hlofuse's kernel of one small add ((8, 128) floats, strategy `none`: one kernel per
  add) and a hand-written Pallas kernel that adds 1 to one (8, 128) block: an empty kernel.
  A straight chain of 101 such kernels took no measurably longer than one on the v5e (the
  program call's 0.65 ms hides them), so here each chain runs --launch-trips times in a
  loop on the device and the loop's own cost cancels in the difference;
- bandwidth: hlofuse's tiled element-wise kernel (`v + y`, reading two arrays and writing
  one) over 16 M and 64 M floats, bytes moved over time against v5e's 819 GB/s; beside it the
  same add as a hand-written Pallas kernel with several block shapes ((rows, 128) and
  lane-dense (rows, 128 k)), which says what the chip reaches and which tiles reach it.

Every chain's result is checked (from zeros and ones, K adds give K everywhere). Writes the
JSON after each measurement. Needs a TPU for --backend tpu; --backend tpu-interpret runs the
same script on the CPU at small --sizes.

    python benchmarks/tpu_kernel_costs.py --out results/tpu/kernel_costs.json
"""

from __future__ import annotations

import argparse
import functools
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


def device_median_s(fn: Callable[..., Any], args: tuple[Any, ...], repeats: int) -> float:
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _check(result: Any, chain: int, what: str) -> None:
    values = np.asarray(result)
    if not np.all(values == chain):
        raise SystemExit(f"tpu_kernel_costs: {what}, a chain of {chain}, computed a wrong value")


def _hlofuse_chain(n: int, chain: int, backend: str, trips: int = 1
                   ) -> tuple[Callable[..., Any], list[str]]:
    """`chain` adds, each hlofuse's kernel under strategy none (in a loop of `trips` when
    over one); the device function and the kernels' descriptions."""

    def chained(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        for _ in range(chain):
            x = x + y
        return x

    def adds(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        if trips == 1:
            return chained(x, y)
        return hlax.fori_loop(0, trips, lambda i, v: chained(v, y), x)

    x = np.zeros(n, np.float32)
    executable = hlofuse.jit(adds, strategy="none", backend=backend).lower(x, x).compile()
    plans = executable.executable.kernel_plans
    described = [f"{len(plans)} kernels"] + sorted(
        {f"{k.mode} {k.layout}, block rows {k.block_rows}" for k in plans})
    return executable.executable.device_function(), described


def _pallas_chain(n: int, chain: int, *, block: tuple[int, int], interpret: bool,
                  copy_only: bool = False, trips: int = 1) -> Callable[..., Any]:
    """`chain` hand-written Pallas kernels over n floats laid out as (n / columns, columns),
    each `v + y` (or, with copy_only, `v + 1` read from v alone) in blocks of `block`, in a
    loop of `trips` when over one."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    rows, columns = block
    shape = (n // columns, columns)
    spec = pl.BlockSpec(block, lambda i: (i, 0))
    params = pltpu.CompilerParams(dimension_semantics=("parallel",),
                                  vmem_limit_bytes=64 * 2**20)

    def add(v_ref: Any, y_ref: Any, o_ref: Any) -> None:
        o_ref[...] = v_ref[...] + y_ref[...]

    def bump(v_ref: Any, o_ref: Any) -> None:
        o_ref[...] = v_ref[...] + 1.0

    grid = (shape[0] // rows,)
    out = jax.ShapeDtypeStruct(shape, jnp.float32)
    one = pl.pallas_call(bump if copy_only else add, grid=grid, out_shape=out,
                         in_specs=[spec] if copy_only else [spec, spec], out_specs=spec,
                         compiler_params=params, interpret=interpret)

    def chained(x: Any, y: Any) -> Any:
        v = x.reshape(shape)
        w = y.reshape(shape)
        def links(v: Any) -> Any:
            for _ in range(chain):
                v = one(v) if copy_only else one(v, w)
            return v

        if trips > 1:
            v = jax.lax.fori_loop(0, trips, lambda i, v: links(v), v)
        else:
            v = links(v)
        return v.reshape(n)

    return jax.jit(chained)


def per_kernel(make: Callable[[int], Callable[..., Any]], n: int, chain: int, bytes_moved: int,
               repeats: int, what: str, trips: int = 1) -> dict[str, object]:
    """One kernel's device time: (a chain of `chain` minus a chain of one) / (chain - 1),
    per trip of the loop the chains run in (`make` builds them so)."""
    import jax.numpy as jnp

    x, y = jnp.zeros(n, jnp.float32), jnp.ones(n, jnp.float32)
    timings = {}
    for length in (1, chain):
        fn = make(length)
        _check(fn(x, y), length * trips, what)
        timings[length] = device_median_s(fn, (x, y), repeats)
    seconds = (timings[chain] - timings[1]) / (chain - 1) / trips
    row: dict[str, object] = {"what": what, "elements": n, "chain": chain, "trips": trips,
                              "call_s_chain_of_1": timings[1],
                              f"call_s_chain_of_{chain}": timings[chain],
                              "us_per_kernel": seconds * 1e6}
    if bytes_moved:
        row.update(bytes_per_kernel=bytes_moved, gb_per_s=bytes_moved / seconds / 1e9,
                   fraction_of_hbm=bytes_moved / seconds / HBM_BYTES_PER_S)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/tpu/kernel_costs.json")
    parser.add_argument("--backend", default="tpu", help="tpu, or tpu-interpret to try it here")
    parser.add_argument("--launch-chain", type=int, default=11)
    parser.add_argument("--launch-trips", type=int, default=1000)
    parser.add_argument("--chain", type=int, default=9)
    parser.add_argument("--sizes", default="16777216,67108864")
    parser.add_argument("--blocks", default="512x128,2048x128,4096x128,256x1024,512x1024",
                        help="hand-written kernels' block shapes, rows x columns")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    interpret = args.backend != "tpu"
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    result: dict[str, list[dict[str, object]]] = {"launch": [], "bandwidth": []}

    def save(section: str, row: dict[str, object]) -> None:
        print(json.dumps(row), flush=True)
        result[section].append(row)
        path.write_text(json.dumps(result, indent=1) + "\n")

    kernels: dict[tuple[int, int], list[str]] = {}

    def hlofuse_chain(n: int, trips: int = 1) -> Callable[[int], Callable[..., Any]]:
        def make(length: int) -> Callable[..., Any]:
            fn, kernels[n, length] = _hlofuse_chain(n, length, args.backend, trips)
            return fn
        return make

    small, trips = 1024, args.launch_trips
    save("launch", per_kernel(
        functools.partial(_pallas_chain, small, block=(8, 128), interpret=interpret,
                          copy_only=True, trips=trips), small,
        args.launch_chain, 0, args.repeats, "hand-written Pallas kernel, one (8, 128) block",
        trips))
    row = per_kernel(hlofuse_chain(small, trips), small, args.launch_chain, 0, args.repeats,
                     "hlofuse kernel: one add of 1,024 floats (strategy none)", trips)
    save("launch", {**row, "kernels": kernels[small, args.launch_chain]})
    for n in (int(s) for s in args.sizes.split(",")):
        moved = 3 * 4 * n
        row = per_kernel(hlofuse_chain(n), n, args.chain, moved, args.repeats,
                         "hlofuse tiled kernel: v + y (strategy none)")
        save("bandwidth", {**row, "kernels": kernels[n, args.chain]})
        for block in args.blocks.split(","):
            rows, columns = (int(b) for b in block.split("x"))
            if n % (rows * columns):
                continue
            save("bandwidth", per_kernel(
                functools.partial(_pallas_chain, n, block=(rows, columns), interpret=interpret),
                n, args.chain, moved, args.repeats,
                f"hand-written Pallas kernel: v + y, blocks ({rows}, {columns})"))


if __name__ == "__main__":
    main()
