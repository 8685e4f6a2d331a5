"""Throughput of CartPole rollouts on Ray with 1 and 2 workers (hlofuse.distributed).

For each strategy (default `xla` and `max` on the baseline program) and each worker count K
(default 1 and 2), N environments are cut into K shards, each run on a Ray actor of a local
cluster (one CPU and one OpenMP thread per actor). Per row:

- first call: actors start, each traces its shard's program and loads or compiles it (with a
  warm cache: a load), runs it and sends the outputs back;
- then the median of --repeats rollouts on the warm actors, as env-steps per wall-clock second,
  and per shard the time inside the actor (run) against the whole call (run + scheduling +
  result transfer);
- for reference, the same program for N run in this process with one thread.

    .venv/bin/python benchmarks/ray_scaling.py                     # N=65536, T=500
    .venv/bin/python benchmarks/ray_scaling.py --envs 16384 --steps 200 --workers 1,2

Writes results/ray_scaling.json (--out). Not a test; on a machine shared with other work the
figures move with its load (recorded with them).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the in-process reference: one thread

from hlofuse import distributed, random  # noqa: E402
from hlofuse.api import jit  # noqa: E402
from hlofuse.envs import cartpole  # noqa: E402
from hlofuse.studies.peers.bench import machine_description, write_json_file  # noqa: E402


def _median_wall(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(strategy: str, n_envs: int, n_steps: int, workers: list[int],
            repeats: int) -> dict[str, Any]:
    build = functools.partial(cartpole.scan_rollout, cartpole.PRESETS["baseline"])
    key = random.key(0)
    local = jit(build(n_envs, n_steps), strategy=strategy, backend="cpu")
    local(key)
    local_s = _median_wall(lambda: local(key), repeats)
    rows = []
    for k in workers:
        start = time.perf_counter()
        first = distributed.rollout(build, n_envs, n_steps, workers=k, strategy=strategy,
                                    threads_per_worker=1)
        first_s = time.perf_counter() - start
        runs = [distributed.rollout(build, n_envs, n_steps, workers=k, strategy=strategy,
                                    threads_per_worker=1) for _ in range(repeats)]
        wall = statistics.median(r.wall_s for r in runs)
        inside = statistics.median(max(s.run_s for s in r.results) for r in runs)
        rows.append({
            "workers": k,
            "shard_envs": first.shard_envs,
            "first_call_s": first_s,
            "first_call_compile_s": [s.compile_s for s in first.results],
            "first_call_cache_hit": [s.cache_hit for s in first.results],
            "median_s": wall,
            "env_steps_per_s": n_envs * n_steps / wall,
            "slowest_shard_run_s": inside,
            "overhead_s": wall - inside,
        })
        print(f"{strategy:8} K={k}: {n_envs * n_steps / wall / 1e6:7.1f} M env-steps/s "
              f"(median {wall * 1e3:.0f} ms, slowest shard {inside * 1e3:.0f} ms, first call "
              f"{first_s:.2f} s)", flush=True)
        distributed.shutdown()
    one = rows[0]["env_steps_per_s"]
    for row in rows:
        row["speedup_vs_1_worker"] = row["env_steps_per_s"] / one
    print(f"{strategy:8} in-process, 1 thread: {n_envs * n_steps / local_s / 1e6:7.1f} M "
          "env-steps/s", flush=True)
    return {"strategy": strategy, "in_process_s": local_s,
            "in_process_env_steps_per_s": n_envs * n_steps / local_s, "rows": rows}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=65536)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--strategies", default="xla,max")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="results")
    args = parser.parse_args(argv)
    workers = [int(w) for w in args.workers.split(",")]
    distributed.connect(f"local:{max(workers)}")
    load_before = os.getloadavg()
    results = [measure(s, args.envs, args.steps, workers, args.repeats)
               for s in args.strategies.split(",")]
    data = {
        "benchmark": "ray_scaling",
        "command": "benchmarks/ray_scaling.py " + " ".join(argv),
        "program": "cartpole baseline (scan, custom-call RNG, packed state)",
        "envs": args.envs, "steps": args.steps, "repeats": args.repeats,
        "machine": {**machine_description(), "load_average_before": list(load_before),
                    "load_average_after": list(os.getloadavg())},
        "results": results,
    }
    path = Path(args.out) / "ray_scaling.json"
    write_json_file(data, path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
