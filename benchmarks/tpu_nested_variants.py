"""What the chip's compiler refuses in a nested loop of the whole-loop kernel (issue 30's
implicit_pendulum: "Invalid relayout: Non-singleton logical dimension is replicated in
destination but not in source for 'vector<32x128xi32>'").

1. Small Pallas kernels with a masked while loop over (rows, 128) tiles, as the lane kernel
   runs a nested loop: an int32 count carried from a broadcast 0 or from the lane tile's
   layout (`lane_nested.on_lane_layout`), the any-lane test as a select between broadcast
   ones and zeros or as a convert of the mask, alone and inside an outer (time) loop.
2. implicit_pendulum under `max` at N lanes and T steps with each combination of the two
   constructs in the nested-loop lowering: whether its loop kernel is refused, equality with
   JAX's `jit` on the same chip, and env-steps/s (median of 3) beside JAX's.

The JSON is rewritten after each result.

    python benchmarks/tpu_nested_variants.py --out results/tpu/nested_variants.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROWS = 32


def _small_kernels(record: dict[str, Any], save: Any) -> None:
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl

    from hlofuse.targets.tpu.lane_nested import on_lane_layout

    def make(carry_start: str, test: str, outer: bool) -> Any:
        def kernel(x_ref: Any, o_ref: Any) -> None:
            lanes = (lax.broadcasted_iota(np.int32, (ROWS, 128), 0) * np.int32(128)
                     + lax.broadcasted_iota(np.int32, (ROWS, 128), 1))
            limit = x_ref[...]  # per-lane trip counts

            def inner(acc: Any) -> Any:
                zero = np.int32(0)
                k0 = on_lane_layout(zero, lanes) if carry_start == "lane_layout" else \
                    jnp.broadcast_to(jnp.asarray(zero), (ROWS, 128))

                def more(k: Any) -> Any:
                    mask = lax.lt(k, limit)
                    picks = lax.convert_element_type(mask, np.int32) if test == "convert" \
                        else jnp.where(mask, np.int32(1), np.int32(0))
                    return jnp.max(picks) > 0

                def step(k: Any) -> Any:
                    return lax.select(lax.lt(k, limit), k + np.int32(1), k)

                return acc + lax.while_loop(more, step, k0)

            start = jnp.zeros((ROWS, 128), np.int32)
            if outer:
                o_ref[...] = lax.fori_loop(0, 3, lambda i, a: inner(a), start)
            else:
                o_ref[...] = inner(start)

        return kernel

    limits = (np.arange(ROWS * 128, dtype=np.int32).reshape(ROWS, 128) % 7)
    for carry_start in ("broadcast", "lane_layout"):
        for test in ("select", "convert"):
            for outer in (False, True):
                name = f"carry {carry_start}, test {test}, {'in a time loop' if outer else 'alone'}"
                try:
                    got = np.asarray(pl.pallas_call(
                        make(carry_start, test, outer),
                        out_shape=jax.ShapeDtypeStruct((ROWS, 128), np.int32))(limits))
                    want = limits * (3 if outer else 1)
                    row: dict[str, Any] = {"lowered": True, "equal": bool((got == want).all())}
                except Exception as e:  # noqa: BLE001 - a refusal is the result
                    row = {"lowered": False, "error": f"{type(e).__name__}: {str(e)[:400]}"}
                record["small_kernels"][name] = row
                print(name, row, flush=True)
                save()


def _implicit_pendulum(record: dict[str, Any], save: Any, n: int, t: int) -> None:
    import jax
    import jax.numpy as jnp

    from hlofuse import targets
    from hlofuse.fusion.strategies import run_strategy
    from hlofuse.ir.parser import parse_module
    from hlofuse.reference.interpreter import flatten_value
    from hlofuse.studies.rollouts_bench import (
        _equal,
        _float_mismatch,
        _loop_note,
        _median_time,
        _run_jax,
        _timed_call,
        load_programs,
    )
    from hlofuse.targets.tpu import lane_nested

    f = load_programs(Path("tests/data/rollouts")).ROLLOUTS["implicit_pendulum"](n=n, t=t)
    key = jax.random.PRNGKey(0)
    compiled = jax.jit(f).lower(key).compile()
    expected = [np.asarray(a) for a in jax.tree_util.tree_leaves(compiled(key))]
    seconds = _median_time(lambda: _run_jax(compiled, key), 3)
    record["implicit_pendulum"] = {"lanes": n, "steps": t,
                                   "jax_env_steps_per_s": n * t / seconds, "variants": {}}
    save()
    text = jax.jit(f).lower(key).as_text(dialect="hlo")
    layout, picks = lane_nested.on_lane_layout, lane_nested.lane_picks
    forms = {"carry": {"broadcast": lambda v, lanes: jnp.broadcast_to(v, lanes.shape),
                       "lane_layout": layout},
             "test": {"select": lambda m: jnp.where(m, np.int32(1), np.int32(0)),
                      "convert": lambda m: jax.lax.convert_element_type(m, np.int32)}}
    for carry_start in ("broadcast", "lane_layout"):
        for test in ("select", "convert"):
            name = f"carry {carry_start}, test {test}"
            lane_nested.on_lane_layout = forms["carry"][carry_start]  # type: ignore[assignment]
            lane_nested.lane_picks = forms["test"][test]  # type: ignore[assignment]
            row: dict[str, Any] = {}
            try:
                start = time.perf_counter()
                fused = run_strategy(parse_module(text, "implicit_pendulum.hlo"), "max",
                                     debug=False)
                executable = targets.get("tpu").compile(fused.module)
                key_array = np.asarray(key)
                actual = [np.asarray(a) for a in flatten_value(executable(key_array))]
                row["compile_and_first_run_s"] = round(time.perf_counter() - start, 2)
                row["loop"] = _loop_note(executable)[:400] or "one lane kernel"
                row["equal_to_jax"] = _equal(actual, expected)
                row["float_mismatch"] = _float_mismatch(actual, expected)
                seconds = _median_time(_timed_call(executable, key_array), 3)
                row["env_steps_per_s"] = n * t / seconds
            except Exception as e:  # noqa: BLE001 - a failure is a result here
                row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
            finally:
                lane_nested.on_lane_layout, lane_nested.lane_picks = layout, picks
            record["implicit_pendulum"]["variants"][name] = row
            print(name, row, flush=True)
            save()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=65536)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--parts", default="small,program")
    parser.add_argument("--out", default="results/tpu/nested_variants.json")
    args = parser.parse_args()
    import jax

    record: dict[str, Any] = {"devices": [str(d) for d in jax.devices()], "small_kernels": {}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        out.write_text(json.dumps(record, indent=1) + "\n")

    if "small" in args.parts:
        _small_kernels(record, save)
    if "program" in args.parts:
        _implicit_pendulum(record, save, args.envs, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
