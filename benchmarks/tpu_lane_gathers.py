"""What a gather inside a vector register costs in a Pallas kernel on the TPU: the piece a
compaction of the resetting lanes (their draws computed on a few registers, spread back)
would be built from, without the MXU.

A kernel holds a (rows, 128) int32 block and, for `steps` steps, applies `ops` dependent
operations to it: `add` (x + 1: the floor), `lane` (x gathered along the lanes by a fixed
permutation, `jnp.take_along_axis(x, idx, axis=1)`), `sublane` (along the rows within each
group of 8, axis 0 of an (8, 128) register), `roll` (`pltpu.roll` by one lane). The time per
operation and register says what each costs against an add. Results are checked against
NumPy. Writes JSON.

    PYTHONPATH=src:. python benchmarks/tpu_lane_gathers.py --out F.json
    PYTHONPATH=src:. python benchmarks/tpu_lane_gathers.py --interpret --steps 4   # no TPU
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.tpu_kernel_costs import device_median_s

KINDS = ("add", "lane", "sublane", "roll")


def _permutations(rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    lane = np.stack([rng.permutation(128) for _ in range(rows)]).astype(np.int32)
    sub = np.stack([rng.permutation(8) for _ in range(128)], axis=1).astype(np.int32)
    return lane, np.tile(sub, (rows // 8, 1))


def build(kind: str, rows: int, steps: int, ops: int, interpret: bool) -> Any:
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref: Any, idx_ref: Any, o_ref: Any) -> None:
        idx = idx_ref[...]

        def one(x: Any) -> Any:
            if kind == "add":
                return x + 1
            if kind == "lane":
                return jnp.take_along_axis(x, idx, axis=1)
            if kind == "roll":
                return pltpu.roll(x, 1, 1)
            groups = [jnp.take_along_axis(x[8 * g:8 * g + 8], idx[8 * g:8 * g + 8], axis=0)
                      for g in range(rows // 8)]
            return jnp.concatenate(groups, axis=0)

        def step(_: Any, x: Any) -> Any:
            for _ in range(ops):
                x = one(x)
            return x

        o_ref[...] = lax.fori_loop(0, steps, step, x_ref[...])

    spec = pl.BlockSpec((rows, 128), lambda: (0, 0))
    return jax.jit(pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((rows, 128), jnp.int32),
                                  in_specs=[spec, spec], out_specs=spec, interpret=interpret))


def expected(kind: str, x: np.ndarray, idx: np.ndarray, times: int) -> np.ndarray:
    for _ in range(times):
        if kind == "add":
            x = x + 1
        elif kind == "lane":
            x = np.take_along_axis(x, idx, axis=1)
        elif kind == "roll":
            x = np.roll(x, 1, axis=1)
        else:
            x = np.concatenate([np.take_along_axis(x[g:g + 8], idx[g:g + 8], axis=0)
                                for g in range(0, x.shape[0], 8)])
    return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--ops", type=int, default=16)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--interpret", action="store_true")
    parser.add_argument("--out", default="results/tpu/lane_gathers.json")
    args = parser.parse_args()
    import jax

    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    records = []
    x = np.arange(args.rows * 128, dtype=np.int32).reshape(args.rows, 128)
    lane, sub = _permutations(args.rows)
    for kind in args.kinds.split(","):
        idx = sub if kind == "sublane" else lane
        record: dict[str, Any] = {"kind": kind, "rows": args.rows, "steps": args.steps,
                                  "ops_per_step": args.ops}
        try:
            fn = build(kind, args.rows, args.steps, args.ops, args.interpret)
            got = np.asarray(jax.block_until_ready(fn(x, idx)))
            record["correct"] = bool(np.array_equal(
                got, expected(kind, x, idx, args.steps * args.ops)))
            seconds = device_median_s(fn, (x, idx), args.repeats)
            registers = args.rows // 8
            record.update(seconds=seconds, ns_per_op_per_register=seconds * 1e9 / (
                args.steps * args.ops * registers))
        except Exception as e:  # noqa: BLE001 (a refusal is the datum)
            record["error"] = str(e)[:300]
        records.append(record)
        print(json.dumps(record), flush=True)
        path.write_text(json.dumps(records, indent=1) + "\n")


if __name__ == "__main__":
    main()
