"""Issue 29's last two layouts on the chip: tiled reductions (`tiled-reduce`: a grid over
blocks, accumulators in VMEM scratch) and dynamic-update-slice in place (`in-place`: the
operand aliased to the output, one block written), each checked against the reference
interpreter and timed against JAX's own `jit` of the same function on the same chip.

- reductions of `x * x + 1` (the producers fused in): a full sum of 16 M floats, a row
  maximum and a column sum of [4096, 4096]; bytes read over time against v5e's 819 GB/s;
- a loop writing row t of its [T, N] output each step (the shape of a scan's stacked output):
  with the row written in place a step moves N floats, not the whole output; time per step.

    PYTHONPATH=src:. python benchmarks/tpu_layouts.py --out results/tpu/layouts.json
(--backend tpu-interpret --small runs it here, on the CPU; benchmarks/tpu_env.sh sets the path.)
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import hlofuse
import hlofuse.numpy as hnp
from benchmarks.tpu_kernel_costs import HBM_BYTES_PER_S, device_median_s
from hlofuse import lax as hlax
from hlofuse.reference.interpreter import evaluate, flatten_value


def _reduction(op: str, axis: int | None, trips: int, library: Any, numpy: Any
               ) -> Callable[..., Any]:
    """`trips` reductions of `x * x + i` (i the trip) summed: each trip one tiled reduction
    reading all of x; written with `library` and `numpy` (hlofuse's or JAX's)."""
    def run(x: Any) -> Any:
        out_shape = () if axis is None else tuple(d for k, d in enumerate(x.shape) if k != axis)

        def body(i: Any, acc: Any) -> Any:
            return acc + getattr(numpy, op)(x * x + i.astype(np.float32), axis=axis)

        return library.fori_loop(0, trips, body, numpy.zeros(out_shape, np.float32))
    return run


def _row_writer(steps: int, lanes: int, library: Any, numpy: Any) -> Callable[..., Any]:
    """x = x / 2 + 1 for `steps` steps, row t of the [steps, lanes] output set to x; written
    with `library` (hlofuse.lax or jax.lax) and `numpy` (hlofuse.numpy or jax.numpy)."""
    def run(x: Any) -> Any:
        def body(t: Any, carry: Any) -> Any:
            v, out = carry
            v = v * 0.5 + 1.0
            return v, library.dynamic_update_slice(out, v.reshape(1, lanes), (t, 0))

        zeros = numpy.zeros((steps, lanes), np.float32)
        return library.fori_loop(0, steps, body, (x, zeros))[1]
    return run


def _measure(name: str, ours: Callable[..., Any], theirs: Callable[..., Any], x: np.ndarray,
             strategy: str, backend: str, repeats: int, layout: str) -> dict[str, object]:
    import jax

    compiled = hlofuse.jit(ours, strategy=strategy, backend=backend).lower(x).compile()
    executable = compiled.executable
    assert executable is not None
    plans = executable.kernel_plans
    fn = executable.device_function()
    device_x = jax.numpy.asarray(x)
    got = np.asarray(fn(device_x))
    row: dict[str, object] = {
        "what": name, "strategy": strategy,
        "kernels": [f"{k.name}: {k.mode} {k.layout}" for k in plans],
        "layout_taken": any(k.layout == layout for k in plans)}
    want = np.asarray(flatten_value(evaluate(compiled.module, [x]))[0])
    difference = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-30)))
    row.update(max_relative_difference=difference, equal_within_1e_5=difference <= 1e-5)
    row["hlofuse_s"] = device_median_s(fn, (device_x,), repeats)
    row["jax_s"] = device_median_s(jax.jit(theirs), (device_x,), repeats)
    row["speedup_vs_jax"] = row["jax_s"] / row["hlofuse_s"]  # type: ignore[operator]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/tpu/layouts.json")
    parser.add_argument("--backend", default="tpu")
    parser.add_argument("--small", action="store_true", help="sizes for interpret mode")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--trips", type=int, default=21,
                        help="reductions per program; one reduction's time is the difference "
                        "from a program of one, over trips - 1")
    args = parser.parse_args()
    import jax

    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []

    def save(row: dict[str, object]) -> None:
        print(json.dumps(row), flush=True)
        rows.append(row)
        path.write_text(json.dumps({"device": str(jax.devices()[0]), "rows": rows}, indent=1)
                        + "\n")

    rng = np.random.default_rng(0)
    n, side = (65536 * 4, 1024) if args.small else (16777216, 4096)
    for name, op, axis, shape in ((f"sum of {n:,} floats", "sum", None, (n,)),
                                  (f"row max of [{side}, {side}]", "max", 1, (side, side)),
                                  (f"column sum of [{side}, {side}]", "sum", 0, (side, side))):
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        timed = {}
        for trips in (1, args.trips):
            timed[trips] = _measure(
                name, _reduction(op, axis, trips, hlax, hnp),
                _reduction(op, axis, trips, jax.lax, jax.numpy), x, "xla", args.backend,
                args.repeats, "tiled-reduce")
        row = {**timed[args.trips], "trips": args.trips}
        for who in ("hlofuse", "jax"):
            seconds = (timed[args.trips][f"{who}_s"] - timed[1][f"{who}_s"]) / (args.trips - 1)
            row[f"{who}_us_per_reduction"] = seconds * 1e6  # type: ignore[operator]
            row[f"{who}_gb_per_s"] = x.nbytes / seconds / 1e9  # type: ignore[operator]
            row[f"{who}_fraction_of_hbm"] = x.nbytes / seconds / HBM_BYTES_PER_S  # type: ignore[operator]
        save(row)
    steps, lanes = (64, 1024) if args.small else (1000, 8192)
    x = rng.standard_normal(lanes).astype(np.float32)
    for strategy in ("xla", "none"):
        row = _measure(f"row per step into [{steps}, {lanes}]",
                       _row_writer(steps, lanes, hlax, hnp),
                       _row_writer(steps, lanes, jax.lax, jax.numpy), x, strategy,
                       args.backend, args.repeats, "in-place")
        row["us_per_step"] = row["hlofuse_s"] / steps * 1e6  # type: ignore[operator]
        row["jax_us_per_step"] = row["jax_s"] / steps * 1e6  # type: ignore[operator]
        save(row)


if __name__ == "__main__":
    main()
