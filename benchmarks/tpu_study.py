"""The CartPole study on the chip one step at a time (`hlofuse cartpole --backend tpu` measures
every step before it writes anything): each step is checked against the reference
interpreter at N = 64, then compiled, profiled and timed at every N, and the JSON is
rewritten after each (step, N), speedups over the baseline included once it is measured. A
step past --limit seconds is recorded as timed out and the process exits 3, so that a rerun
with --merge goes on with the next step (`benchmarks/tpu_study.sh` loops so).

    python benchmarks/tpu_study.py --envs 16384,1048576 --out results/tpu/study.json
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from hlofuse import random
from hlofuse.studies import cartpole_study as study

ORDER = ("baseline", "max", "fused-rng", "split-state", "relaxed-concat", "priority",
         "unroll10", "all", "none")


def _speedups(records: list[dict[str, Any]]) -> None:
    base = {r["envs"]: r["env_steps_per_s"] for r in records
            if r["step"] == study.BASELINE and r.get("env_steps_per_s")}
    for r in records:
        if r.get("env_steps_per_s") and r["envs"] in base:
            r["speedup_vs_baseline"] = r["env_steps_per_s"] / base[r["envs"]]


def _limit_profile(executable: Any, limit: float) -> list[str]:
    """Holds the executable's profiles to `limit` seconds (TPU executables; 0: no limit) and
    returns the list their notes (a profile cut at the limit says so) are added to."""
    notes: list[str] = []
    if not limit or not hasattr(executable, "profile_limit_s"):
        return notes
    executable.profile_limit_s = limit
    profile = executable.profile

    def noted(*args: Any, **kwargs: Any) -> Any:
        result = profile(*args, **kwargs)
        notes.extend(result.notes)
        for line in result.notes:
            print(line, flush=True)
        return result

    executable.profile = noted
    return notes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="16384,1048576")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", default=",".join(ORDER))
    parser.add_argument("--backend", default="tpu")
    parser.add_argument("--limit", type=float, default=0.0,
                        help="seconds one step may take (its check and every N); past it the "
                        "step is recorded as timed out and the process exits 3")
    parser.add_argument("--profile-limit", type=float, default=0.0,
                        help="seconds the per-kernel profile at each N may take; past it "
                        "the profile stops, the step is still timed and the record says "
                        "the kernel counts are partial (profile_notes)")
    parser.add_argument("--merge", action="store_true",
                        help="keep --out's records and skip the steps it holds")
    parser.add_argument("--out", default="results/tpu/study.json")
    args = parser.parse_args()
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    known = study.known_steps()
    envs = sorted(int(n) for n in args.envs.split(","))
    config = study.StudyConfig(envs=tuple(envs), steps=args.steps, repeats=args.repeats,
                               backend=args.backend)
    saved: dict[str, Any] = (json.loads(path.read_text()) if args.merge and path.is_file()
                             else {"config": dataclasses.asdict(config), "records": []})
    records: list[dict[str, Any]] = saved["records"]
    done = {r["step"] for r in records}

    def write() -> None:
        _speedups(records)
        path.write_text(json.dumps(saved, indent=1) + "\n")

    checker = study.Checker(0)
    for name in (n for n in args.variants.split(",") if n and n not in done):
        step = known[name]
        last = ["starting"]

        def expire(name: str = name, last: list[str] = last) -> None:
            records.append({"step": name, "envs": 0, "note":
                            f"timed out after {args.limit:.0f} s; last: {last[0]}"})
            write()
            print(f"{name}: timed out ({last[0]})", flush=True)
            # Where it was: the main thread's stack, for the log.
            faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
            os._exit(3)

        timer = threading.Timer(args.limit, expire) if args.limit else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        start = time.perf_counter()
        last[0] = f"compiling the check at N={study.CHECK_ENVS}"
        built = study.build(step, study.CHECK_ENVS, args.steps, 0, args.backend)
        got = study._outputs(built.compiled.run_flat([random.key(0)]))
        checker.check(step, built, got, n_envs=study.CHECK_ENVS, n_steps=args.steps)
        check_s = time.perf_counter() - start
        for n in envs:
            last[0] = f"compiling at N={n}"
            began = time.perf_counter()
            built = study.build(step, n, args.steps, 0, args.backend)
            last[0] = f"profiling and timing at N={n}"
            measuring = time.perf_counter()
            notes = _limit_profile(built.compiled.executable, args.profile_limit)
            record = study.measure(step, built, n, config, None)
            plans = getattr(built.compiled.executable, "kernel_plans", [])
            row = {**dataclasses.asdict(record), "checked_at_envs": study.CHECK_ENVS,
                   "xla_ops": sum(k.mode != "pallas" for k in plans),
                   "profile_notes": notes,
                   "refused_on_chip": [k.name for k in plans
                                       if k.reason.startswith("Mosaic refused")],
                   "step_seconds": round(time.perf_counter() - start, 1),
                   "phase_seconds": {"check": round(check_s, 1),
                                     "build": round(measuring - began, 1),
                                     "profile_and_time": round(time.perf_counter() - measuring,
                                                               1)}}
            records.append(row)
            write()
            print(f"{name} N={n}: {record.env_steps_per_s / 1e6:,.0f} M env-steps/s, "
                  f"{record.kernels_per_step:g} kernels per step, compile "
                  f"{record.compile_s:.1f} s", flush=True)
        if timer is not None:
            timer.cancel()
    return 0


if __name__ == "__main__":
    sys.exit(main())
