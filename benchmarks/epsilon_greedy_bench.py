"""The epsilon-greedy rollout (benchmarks/epsilon_greedy/programs.py) through hlofuse's front end
against the same program in JAX, in one run: the step logs of issue 32.

Contenders, each a whole rollout of N lanes and T steps from one key:

- `jax`: `jax.jit` of the program written with `jax.numpy`, `jax.random`, `jax.lax`;
- `max`: `hlofuse.jit(..., strategy="max")` of the same program written with `hlofuse.numpy`,
  `hlofuse.random`, `hlofuse.lax` (one whole-loop kernel: epsilon and the regime are step
  logs, the mean reward and the finished count per-step reductions);
- `max-before`: the same with step logs turned off in the analysis (what `max` did before:
  the [T] logs of uniform values were uniform state, refused past 64 values as
  `whole-loop-state-too-large`, so the time loop ran as its body's kernels every step).

The runs are taken in turn (one of each contender per round) so that a busy machine slows
them alike; the median of --repeats rounds is kept, on the wall clock and on this process's
CPU time (all its threads: with --threads 1 the one thread's). Every contender's results are
checked against JAX's (integers exactly, floats within rtol 1e-4). Writes --out as JSON.

    .venv/bin/python benchmarks/epsilon_greedy_bench.py --lanes 4096 --steps 200 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).parent


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lanes", type=int, default=4096)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("docs/results/epsilon_greedy.json"))
    return p.parse_args()


def _hlofuse_contender(make: Callable[..., Any], lanes: int, steps: int, key: np.ndarray,
                       step_logs: bool) -> tuple[Callable[[], object], dict[str, Any]]:
    import hlofuse
    import hlofuse.lax as hlax
    import hlofuse.numpy as hnp
    import hlofuse.random as hrandom
    from hlofuse.analysis import parallel_loop
    from hlofuse.fusion.strategies import run_strategy

    found = parallel_loop.find_step_logs
    if not step_logs:
        parallel_loop.find_step_logs = lambda lanes, taken: []  # type: ignore[assignment]
    try:
        start = time.perf_counter()
        lowered = hlofuse.jit(make(lanes, steps, hnp, hrandom, hlax), strategy="max").lower(key)
        compiled = lowered.compile()
        compile_s = time.perf_counter() - start
        per_loop = run_strategy(lowered.module, "max", debug=False).kernels_per_iteration()
    finally:
        parallel_loop.find_step_logs = found
    info = {"compile_s": round(compile_s, 2),
            "kernels_per_step": int(max(per_loop.values())) if per_loop else 1}
    return (lambda: compiled(key)), info


def main() -> None:
    args = _parse()
    load_at_start = os.getloadavg()
    sys.path.insert(0, str(HERE.parent / "src"))
    from hlofuse.studies.rollouts_bench import flat_outputs, limit_threads, outputs_equal

    limit_threads(args.threads)  # before JAX starts its thread pool
    import jax

    sys.path.insert(0, str(HERE / "epsilon_greedy"))
    import programs  # the corpus file, by path

    key = np.asarray(jax.random.PRNGKey(0))
    jitted = jax.jit(programs.make_epsilon_greedy(args.lanes, args.steps))
    start = time.perf_counter()
    compiled_jax = jitted.lower(key).compile()
    contenders: dict[str, Callable[[], object]] = {
        "jax": lambda: jax.block_until_ready(compiled_jax(key))}
    info: dict[str, dict[str, Any]] = {
        "jax": {"compile_s": round(time.perf_counter() - start, 2)}}
    expected = flat_outputs(jax.tree_util.tree_leaves(compiled_jax(key)))
    for name, step_logs in (("max", True), ("max-before", False)):
        run, info[name] = _hlofuse_contender(programs.make_epsilon_greedy, args.lanes,
                                             args.steps, key, step_logs)
        info[name]["equal_to_jax"] = outputs_equal(flat_outputs(run()), expected)
        contenders[name] = run
    times: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in contenders}
    for _ in range(args.repeats):
        for name, run in contenders.items():
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            times[name]["cpu"].append(time.process_time() - cpu)
            times[name]["wall"].append(time.perf_counter() - wall)
    work = args.lanes * args.steps
    rows = {}
    for name in contenders:
        wall = statistics.median(times[name]["wall"])
        cpu = statistics.median(times[name]["cpu"])
        rows[name] = {**info[name], "wall_s": wall, "cpu_s": cpu,
                      "env_steps_per_s_wall": work / wall, "env_steps_per_s_cpu": work / cpu,
                      "times": times[name]}
    for name, row in rows.items():
        print(f"{name:>10}: {row['env_steps_per_s_wall'] / 1e6:7.2f} M env-steps/s wall, "
              f"{row['env_steps_per_s_cpu'] / 1e6:7.2f} M cpu, "
              f"x{rows['jax']['cpu_s'] / row['cpu_s']:.2f} JAX (cpu), "
              f"x{rows['jax']['wall_s'] / row['wall_s']:.2f} (wall); "
              + ", ".join(f"{k} {v}" for k, v in info[name].items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    config = {"lanes": args.lanes, "steps": args.steps, "repeats": args.repeats,
              "threads": args.threads, "jax": jax.__version__, "machine": platform.machine(),
              "load_average": {"start": load_at_start, "end": os.getloadavg()}}
    args.out.write_text(json.dumps({"config": config, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
