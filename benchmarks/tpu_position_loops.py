"""A rollout with stored held elements (lane_loops.py: grid_forage's board) under `max` on the
TPU with the position loop's settings varied: rows of a block (the rule's, or fixed) and
positions a trip computes. Per setting: cold compile, env-steps/s (median of --repeats),
and whether the results equal the first setting's (they must: the settings change the
schedule, not the values) and JAX's `jit` on the same chip; JAX's own env-steps/s beside.
The JSON is rewritten after each setting.

    python benchmarks/tpu_position_loops.py --program grid_forage --settings rule:8,8:8,rule:1
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from hlofuse.studies.rollouts_bench import (
    _cache_dir,
    _equal,
    _median_time,
    _run_jax,
    _timed_call,
    load_programs,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", default="grid_forage")
    parser.add_argument("--envs", type=int, default=65536)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settings", default="rule:8,8:8,rule:1,32:8",
                        help="rows:positions-per-trip, rows 'rule' or a number")
    parser.add_argument("--out", default="results/tpu/position_loops.json")
    args = parser.parse_args()

    import jax

    from hlofuse import targets
    from hlofuse.fusion.strategies import run_strategy
    from hlofuse.ir.parser import parse_module
    from hlofuse.reference.interpreter import flatten_value
    from hlofuse.targets.tpu import lane_loops, whole_loop

    n, t = args.envs, args.steps
    f = load_programs(Path("tests/data/rollouts")).ROLLOUTS[args.program](n=n, t=t)
    key = jax.random.PRNGKey(0)
    compiled = jax.jit(f).lower(key).compile()
    expected = [np.asarray(a) for a in jax.tree_util.tree_leaves(compiled(key))]
    seconds = _median_time(lambda: _run_jax(compiled, key), args.repeats)
    record: dict[str, Any] = {"program": args.program, "lanes": n, "steps": t,
                              "jax_env_steps_per_s": n * t / seconds, "settings": {}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = jax.jit(f).lower(key).as_text(dialect="hlo")
    rule, per_trip = whole_loop._block_rows, lane_loops.POSITIONS_PER_TRIP
    first: list[np.ndarray] | None = None
    for setting in args.settings.split(","):
        rows, trip = setting.split(":")
        lane_loops.POSITIONS_PER_TRIP = int(trip)
        if rows != "rule":
            whole_loop._block_rows = lambda layout, rows=int(rows): rows  # type: ignore
        row: dict[str, Any] = {}
        try:
            start = time.perf_counter()
            fused = run_strategy(parse_module(text, f"{args.program}.hlo"), "max", debug=False)
            with tempfile.TemporaryDirectory() as cache, _cache_dir(cache):
                executable = targets.get("tpu").compile(fused.module)
            row["compile_s"] = round(time.perf_counter() - start, 2)
            lanes = [k.lanes for k in executable.kernel_plans if k.lanes is not None]
            row["rows"] = sorted({layout.rows for layout in lanes})
            key_array = np.asarray(key)
            actual = [np.asarray(a) for a in flatten_value(executable(key_array))]
            first = actual if first is None else first
            row["equal_to_first_setting"] = all(
                np.array_equal(a, b) for a, b in zip(actual, first))
            row["equal_to_jax"] = _equal(actual, expected)
            seconds = _median_time(_timed_call(executable, key_array), args.repeats)
            row["env_steps_per_s"] = n * t / seconds
        except Exception as e:  # noqa: BLE001 - a failure is a result here
            row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
        finally:
            whole_loop._block_rows, lane_loops.POSITIONS_PER_TRIP = rule, per_trip
        record["settings"][setting] = row
        print(setting, row, flush=True)
        out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
