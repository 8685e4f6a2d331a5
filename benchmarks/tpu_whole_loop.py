"""CartPole under `max` on the TPU (the whole loop one pallas_call over lane tiles) next to
JAX's best form of the study's program (split state, lax.scan, unroll 10) on the same chip,
in the same process: env-steps/s (N x T / the median of the timed rollouts, results left on
the device), cold compile time, and equality with the reference interpreter at a small N.

    python benchmarks/tpu_whole_loop.py --envs 65536,1048576 --rows 16,32,64 --out F.json

Needs a TPU (JAX with libtpu). Each N's rows are measured by recompiling with
`whole_loop.BLOCK_ROWS` set; the JSON records every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def _median_seconds(run: Any, repeats: int) -> float:
    import jax

    jax.block_until_ready(run())  # warm
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def check_equal(steps: int) -> dict[str, Any]:
    """CartPole `max` on the chip against the reference interpreter (N = 1000, T = steps)."""
    import numpy as np

    from hlofuse import random
    from hlofuse.api import compile_module
    from hlofuse.envs import cartpole
    from hlofuse.reference.interpreter import evaluate, flatten_value
    from hlofuse.studies.cartpole_study import known_steps

    step = known_steps()["max"]
    module = cartpole.trace(step.variant, 1000, steps, 0)
    want = flatten_value(evaluate(module, [random.key(0)]))
    compiled = compile_module(module, step.strategy, "tpu")
    got = compiled.run_flat([random.key(0)])
    layouts = [k.layout for k in compiled.executable.kernel_plans]  # type: ignore[union-attr]
    return {"max_state_error": float(np.abs(np.asarray(got[0]) - np.asarray(want[0])).max()),
            "episodes": [int(got[1]), int(want[1])],
            "returns": [float(got[2]), float(want[2])], "layouts": layouts}


def hlofuse_max(n: int, steps: int, rows: int, repeats: int, compaction: bool = False
                ) -> dict[str, Any]:
    import jax.numpy as jnp

    from hlofuse import random
    from hlofuse.api import compile_module
    from hlofuse.envs import cartpole
    from hlofuse.studies.cartpole_study import known_steps
    from hlofuse.targets.tpu import lane_compaction, whole_loop

    whole_loop.BLOCK_ROWS = rows
    lane_compaction.ENABLED = compaction
    # Programs are kept in memory by the module's cache key, which the block size is not part
    # of: forget them, or every block size after the first reuses the first's kernel.
    from hlofuse.targets.tpu import TpuTarget

    TpuTarget._programs.clear()
    step = known_steps()["max"]
    module = cartpole.trace(step.variant, n, steps, 0)
    start = time.perf_counter()
    compiled = compile_module(module, step.strategy, "tpu")
    run = compiled.executable.device_function()  # type: ignore[union-attr]
    key = jnp.asarray(random.key(0))
    run(key)
    compile_s = time.perf_counter() - start
    seconds = _median_seconds(lambda: run(key), repeats)
    kernels = compiled.executable.kernel_plans  # type: ignore[union-attr]
    return {"runner": "hlofuse-max-tpu", "n": n, "steps": steps, "rows": rows,
            "compaction": compaction,
            "seconds": seconds, "env_steps_per_s": n * steps / seconds,
            "compile_s": compile_s,
            "lane_kernels": sum(k.lanes is not None for k in kernels)}


def jax_best(n: int, steps: int, repeats: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from hlofuse.studies.peers.jax_peer import ScanForm, scan_rollout

    rng = np.random.default_rng(0)
    initial = jnp.asarray(rng.uniform(-0.05, 0.05, (n, 4)).astype(np.float32))
    seed = jnp.uint32(0)
    start = time.perf_counter()
    compiled = jax.jit(scan_rollout(ScanForm(False, 10), False, steps)).lower(
        initial, seed).compile()
    compile_s = time.perf_counter() - start
    seconds = _median_seconds(lambda: compiled(initial, seed), repeats)
    return {"runner": "jax-scan-split-u10", "n": n, "steps": steps, "seconds": seconds,
            "env_steps_per_s": n * steps / seconds, "compile_s": compile_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="65536,1048576")
    parser.add_argument("--rows", default="32")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compaction", choices=("on", "off", "both"), default="off",
                        help="reset draws for the resetting lanes only (lane_compaction.py), "
                        "for the whole block, or both in turn")
    parser.add_argument("--out", default="results/tpu/whole_loop.json")
    args = parser.parse_args()
    import jax

    out: dict[str, Any] = {"devices": [str(d) for d in jax.devices()],
                           "jax": jax.__version__, "runs": []}
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        path.write_text(json.dumps(out, indent=1))

    try:
        out["equal"] = check_equal(50)
    except Exception as e:  # noqa: BLE001 - a failure is a result
        out["equal"] = {"error": f"{type(e).__name__}: {e}"[:500]}
    print("equal:", out["equal"], flush=True)
    save()
    for n in (int(x) for x in args.envs.split(",")):
        forms = {"on": ("-slots",), "off": ("",), "both": ("", "-slots")}[args.compaction]
        for runner in ("jax", *(f"rows{r}{f}" for r in args.rows.split(",") for f in forms)):
            try:
                if runner == "jax":
                    record = jax_best(n, args.steps, args.repeats)
                else:
                    rows = int(runner[4:].removesuffix("-slots"))
                    record = hlofuse_max(n, args.steps, rows, args.repeats,
                                         runner.endswith("-slots"))
            except Exception as e:  # noqa: BLE001 - a failure is a result
                record = {"runner": runner, "n": n, "error": f"{type(e).__name__}: {e}"[:500]}
            out["runs"].append(record)
            print(record, flush=True)
            save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
