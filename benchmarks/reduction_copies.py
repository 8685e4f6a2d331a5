"""Times probe 44's rollout_gae (a rollout, GAE, then the advantages normalised by their mean
and standard deviation over [T, N] inside one kLoop fusion) with reductions reduced where
their values are computed (the default) and with the values stored in rows first (the code
before issue 32's change: `KernelOptions(store_reduced_rows=True)`), under `max` and `xla`,
next to JAX's jit in the same run; writes docs/results/reduction_copies.json.

Per build: the rollout's median time over `--repeats` rounds that run JAX and every build
once each in a shuffled order, the minor page faults a rollout takes (memory the process gets
from the kernel anew: run between other work, the stored rows' 200 KB mallocs fault their
pages in again on every call), and the median call of every
kernel that holds a reduce (not a whole loop) as the generated C times it (`profile`). The
two builds' outputs are checked equal bit for bit and equal to JAX's within rtol 1e-4. One
thread for both JAX and the kernels. Run from the repository root:

    .venv/bin/python benchmarks/reduction_copies.py [--lanes 1024 --steps 50 --repeats 30]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from hlofuse.studies.rollouts_bench import (
    flat_outputs,
    limit_threads,
    load_programs,
    outputs_equal,
)

CORPUS = Path("benchmarks/probe44")
PROGRAM = "rollout_gae"
STRATEGIES = ("max", "xla")
PROFILE_REPEAT = 20


def interleaved_medians(runs: dict[str, Callable[[], object]], rounds: int
                        ) -> tuple[dict[str, float], dict[str, float]]:
    """Each run's median time over `rounds` rounds that call every run once, in an order
    shuffled per round: a machine whose load drifts during the measurement slows every run
    alike, and no run always follows the same one (whose memory it would find in cache or
    evicted). Also each run's mean count of minor page faults a call (memory the process
    got from the kernel anew: malloc'd rows it had returned in between)."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    faults = dict.fromkeys(runs, 0)
    for run in runs.values():
        run()
    order = list(runs)
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
            faults[name] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    return ({name: statistics.median(t) for name, t in times.items()},
            {name: count / rounds for name, count in faults.items()})


def reducing_kernels(module: object) -> set[str]:
    """Names of the entry's fusions that hold a reduce and are not whole loops."""
    from hlofuse.ir.hlo import Module
    from hlofuse.ir.ops import Op

    assert isinstance(module, Module)
    names = set()
    for inst in module.entry.instructions:
        if inst.op is not Op.FUSION or str(inst.attrs.get("kind")) == "kCustom":
            continue
        if any(i.op is Op.REDUCE for i in inst.calls[0].instructions):
            names.add(inst.name)
    return names


def main(lanes: int, steps: int, repeats: int, out: Path) -> int:
    limit_threads(1)
    os.environ["HLOFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="reduction_copies_")
    import jax

    from hlofuse.codegen.kernel_spec import KernelOptions
    from hlofuse.fusion.strategies import run_strategy
    from hlofuse.ir.parser import parse_module
    from hlofuse.targets.c import compile_cpu
    from hlofuse.targets.c.build import CompileOptions

    builds = {"where_computed": KernelOptions(),
              "stored_rows": KernelOptions(store_reduced_rows=True)}
    load = os.getloadavg()[0]
    f = load_programs(CORPUS).ROLLOUTS[PROGRAM](n=lanes, t=steps)
    key = jax.random.PRNGKey(0)
    jitted = jax.jit(f)
    lowered = jitted.lower(key)
    compiled = lowered.compile()
    expected = [np.asarray(a) for a in jax.tree_util.tree_leaves(compiled(key))]
    text = lowered.as_text(dialect="hlo")
    key_array = np.asarray(key)
    runs: dict[str, Callable[[], object]] = {
        "jax": lambda: jax.block_until_ready(compiled(key))}
    kernel_us: dict[str, dict[str, float]] = {}
    for strategy in STRATEGIES:
        fused = run_strategy(parse_module(text, f"{PROGRAM}.hlo"), strategy, debug=False).module
        kernels = reducing_kernels(fused)
        outputs = {}
        for build, options in builds.items():
            executable = compile_cpu(fused, CompileOptions(kernel=options))
            outputs[build] = [np.asarray(a) for a in flat_outputs(executable(key_array))]
            assert outputs_equal(outputs[build], expected), (strategy, build)
            runs[f"{strategy}/{build}"] = functools.partial(executable, key_array)
            profile = executable.profile(key_array, repeat=PROFILE_REPEAT)
            kernel_us[f"{strategy}/{build}"] = {
                r.name: r.median_s * 1e6 for r in profile.rows if r.name in kernels}
        for a, b in zip(outputs["where_computed"], outputs["stored_rows"]):
            assert a.tobytes() == b.tobytes(), f"{strategy}: the builds' outputs differ"
    medians, faults = interleaved_medians(runs, repeats)
    jax_s = medians.pop("jax")
    print(f"{PROGRAM} [{steps}, {lanes}], one thread, load {load:.2f}")
    print(f"jax: {jax_s * 1e3:.3f} ms, {faults['jax']:.0f} page faults")
    results: dict[str, object] = {}
    for name, seconds in medians.items():
        kernels_us = kernel_us[name]
        results[name] = {"rollout_ms": seconds * 1e3, "x_jax": jax_s / seconds,
                         "page_faults_per_rollout": faults[name],
                         "reducing_kernels_median_us": dict(sorted(kernels_us.items())),
                         "reducing_kernels_total_us": sum(kernels_us.values())}
        print(f"{name:>20}: {seconds * 1e3:.3f} ms ({jax_s / seconds:.2f}x JAX), "
              f"{faults[name]:.0f} page faults; reducing "
              f"kernels {sum(kernels_us.values()):.1f} us "
              f"({', '.join(f'{k} {v:.1f}' for k, v in sorted(kernels_us.items()))})")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "program": PROGRAM, "corpus": str(CORPUS), "lanes": lanes, "steps": steps,
        "repeats": repeats, "threads": 1, "cpu_count": os.cpu_count(),
        "load_average_1min": load, "load_average_1min_after": os.getloadavg()[0],
        "jax": jax.__version__, "jax_ms": jax_s * 1e3, "jax_page_faults": faults["jax"],
        "results": results}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--lanes", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path("docs/results/reduction_copies.json"))
    args = parser.parse_args()
    raise SystemExit(main(args.lanes, args.steps, args.repeats, args.out))
