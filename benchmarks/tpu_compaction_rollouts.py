"""Corpus rollouts under `max` on the TPU with their rare values (auto-reset draws) on the
slots of the picking lanes (targets/tpu/lane_compaction.py) and for the whole block, in
one process: env-steps/s of each form and whether their results are bit for bit the same.

    python benchmarks/tpu_compaction_rollouts.py --programs particles,bandit --out F.json
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


def main() -> int:
    import jax

    from hlofuse import targets
    from hlofuse.fusion.strategies import run_strategy
    from hlofuse.ir.parser import parse_module
    from hlofuse.studies.rollouts_bench import (
        _cache_dir,
        _flat,
        _median_time,
        _timed_call,
        load_programs,
    )
    from hlofuse.targets.tpu import TpuTarget, lane_compaction

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", required=True)
    parser.add_argument("--lanes", type=int, default=65536)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backend", default="tpu")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    programs = load_programs(Path("tests/data/rollouts"))
    target = targets.get(args.backend)
    key = np.asarray(jax.random.PRNGKey(0))
    records: list[dict[str, Any]] = []
    for name in args.programs.split(","):
        f = programs.ROLLOUTS[name](n=args.lanes, t=args.steps)
        text = jax.jit(f).lower(jax.random.PRNGKey(0)).as_text(dialect="hlo")
        results = {}
        for enabled in (True, False):
            lane_compaction.ENABLED = enabled
            TpuTarget._programs.clear()
            try:
                start = time.perf_counter()
                fused = run_strategy(parse_module(text, f"{name}.hlo"), "max", debug=False)
                with tempfile.TemporaryDirectory() as cache, _cache_dir(cache):
                    executable = target.compile(fused.module)
                    results[enabled] = [np.asarray(a) for a in _flat(executable(key))]
                    compile_s = time.perf_counter() - start
                    seconds = _median_time(_timed_call(executable, key), args.repeats)
                record: dict[str, Any] = {
                    "program": name, "compaction": enabled, "seconds": seconds,
                    "env_steps_per_s": args.lanes * args.steps / seconds,
                    "compile_s": compile_s}
            except Exception as e:  # noqa: BLE001 - a failure is a result
                record = {"program": name, "compaction": enabled,
                          "error": f"{type(e).__name__}: {e}"[:400]}
            records.append(record)
            print(json.dumps(record), flush=True)
            args.out.write_text(json.dumps(records, indent=1))
        if len(results) == 2:
            same = all(np.array_equal(a.view(np.uint8), b.view(np.uint8))
                       for a, b in zip(results[True], results[False]))
            records.append({"program": name, "forms_bit_equal": same})
            print(json.dumps(records[-1]), flush=True)
            args.out.write_text(json.dumps(records, indent=1))
    lane_compaction.ENABLED = False
    return 0


if __name__ == "__main__":
    sys.exit(main())
