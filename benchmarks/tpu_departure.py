"""Which side departs where a rollout's results on the TPU differ: one corpus rollout at N lanes
and T steps computed by JAX's `jit` on the TPU, JAX's `jit` on the host's CPU, hlofuse
(--strategies) on the TPU from the HLO JAX lowers for the TPU (what `bench rollouts` runs)
and from the HLO it lowers for the CPU (what the corpus holds), and the reference
interpreter on the host (where N x T is at most --interpreter-work). Every pair is
compared (integers exactly, floats within rtol 1e-5, atol 1e-6): per output the number of
differing values and, for a stacked per-step output ([T, N]: rewards, dones), the first
step where a lane differs; per float output the largest absolute and relative gap. At the
last size each result is timed as it comes (env-steps/s, median of --repeats). The JSON is
rewritten after each result. With --backend tpu-interpret (or cpu, hlofuse's C target) and
--hlo-platform tpu it runs on a machine without a TPU from the HLO the chip's run compiles
(JAX's `jax_tpu` then on JAX's default device): what a departure on the chip is checked
against.

    python benchmarks/tpu_departure.py --program grid_forage --envs 1024,65536 --steps 30,200
    python benchmarks/tpu_departure.py --envs 65536 --steps 200 --strategies max,xla \
        --backend tpu-interpret --hlo-platform tpu --jax-cpu-lanes 0 --repeats 0
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from hlofuse.studies.rollouts_bench import _median_time, _timed_call, load_programs


def _leaves(value: Any) -> list[np.ndarray]:
    import jax

    return [np.asarray(a) for a in jax.tree_util.tree_leaves(value)]


def _compare(a: list[np.ndarray], b: list[np.ndarray], steps: int) -> dict[str, Any]:
    outputs: list[dict[str, Any]] = []
    floats: list[dict[str, Any]] = []  # float outputs within the tolerance: largest gaps
    for k, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape:
            outputs.append({"output": k, "shapes": [list(x.shape), list(y.shape)]})
            continue
        row: dict[str, Any] = {"output": k, "dtype": str(x.dtype), "shape": list(x.shape)}
        if x.dtype.kind == "f":
            bad = ~np.isclose(x, y, rtol=1e-5, atol=1e-6, equal_nan=True)
            gap = np.abs(x.astype(np.float64) - y)
            gap = np.where(np.isnan(x) & np.isnan(y), 0.0, gap)
            row["max_abs"] = float(np.nanmax(gap)) if gap.size else 0.0
            row["max_rel"] = float(np.nanmax(gap / np.maximum(np.abs(y), 1e-6))) \
                if gap.size else 0.0
        else:
            bad = x != y
        if not bad.any():
            if "max_abs" in row and row["max_abs"] > 0:  # within the tolerance, not equal
                floats.append(row)
            continue
        row["differing"] = int(bad.sum())
        if x.ndim == 2 and x.shape[0] == steps:  # stacked per step: [T, N]
            row["first_step"] = int(np.argmax(bad.any(axis=1)))
            row["lanes_differing"] = int(bad.any(axis=0).sum())
        elif x.ndim >= 1:
            lanes = bad.reshape(bad.shape[0], -1).any(axis=1)
            row["lanes_differing"] = int(lanes.sum())
            row["first_lane"] = int(np.argmax(lanes))
        outputs.append(row)
    return {"equal": not outputs, "outputs": outputs, "close_floats": floats}


def _one_size(args: argparse.Namespace, n: int, t: int, last: bool, run: dict[str, Any],
              save: Any) -> None:
    """Every result at N = n, T = t into `run`, the pairs compared as they come."""
    import jax

    from hlofuse import targets
    from hlofuse.fusion.strategies import run_strategy
    from hlofuse.ir.parser import parse_module
    from hlofuse.reference.interpreter import evaluate, flatten_value

    f = load_programs(Path("tests/data/rollouts")).ROLLOUTS[args.program](n=n, t=t)
    cpu = jax.devices("cpu")[0]
    key = jax.random.PRNGKey(0)
    key_array = np.asarray(key)
    results: dict[str, list[np.ndarray]] = {}
    executables: dict[str, Any] = {}

    def timed(name: str, compute: Any) -> None:
        start = time.perf_counter()
        try:
            results[name] = compute()
        except Exception as e:  # noqa: BLE001 - a failure is a result here
            run["notes"].append(f"{name}: {type(e).__name__}: {str(e)[:300]}")
        run["seconds"][name] = round(time.perf_counter() - start, 2)
        for other in list(results):
            if other != name and name in results:
                run["pairs"][f"{name} vs {other}"] = _compare(results[name], results[other], t)
        print(f"N={n} T={t} {name}: {run['seconds'][name]} s", flush=True)
        save()

    def rate(name: str, call: Any) -> None:
        """env-steps/s of a result just computed, at the last size (median of --repeats)."""
        if not (args.repeats and last and name in results):
            return
        seconds = _median_time(call, args.repeats)
        run.setdefault("env_steps_per_s", {})[name] = n * t / seconds
        print(f"N={n} T={t} {name}: {n * t / seconds:.4g} env-steps/s", flush=True)
        save()

    def hlofuse(text: str, strategy: str, form: str) -> list[np.ndarray]:
        start = time.perf_counter()
        fused = run_strategy(parse_module(text, f"{args.program}.hlo"), strategy, debug=False)
        executable = targets.get(args.backend).compile(fused.module)
        run["seconds"][f"compile {strategy} {form}"] = round(time.perf_counter() - start, 2)
        executables[f"{strategy} {form}"] = executable
        got = [np.asarray(a) for a in flatten_value(executable(key_array))]
        plans = getattr(executable, "kernel_plans", ())
        run["notes"].extend(f"{strategy} {form}: {k.name} xla-op: {k.reason[:200]}"
                            for k in plans if k.mode != "pallas")
        run.setdefault("kernels", {})[f"{strategy} {form}"] = {
            "pallas": sum(k.mode == "pallas" for k in plans),
            "lane kernels": sum(k.lanes is not None for k in plans),
            "xla-op": sum(k.mode != "pallas" for k in plans),
            "in int32 words": sum(bool(k.word_types) for k in plans)}
        return got

    jitted = jax.jit(f)
    timed("jax_tpu", lambda: _leaves(jitted(key)))
    rate("jax_tpu", lambda: jax.block_until_ready(jitted(key)))
    if n <= args.jax_cpu_lanes:
        with jax.default_device(cpu):
            timed("jax_cpu", lambda: _leaves(jax.jit(f)(jax.device_put(key, cpu))))
    lowered = (jitted.trace(key).lower(lowering_platforms=(args.hlo_platform,))
               if args.hlo_platform else jitted.lower(key))
    texts = {"tpu_hlo": lowered.as_text(dialect="hlo")}
    cpu_text = jitted.trace(key).lower(lowering_platforms=("cpu",)).as_text(dialect="hlo")
    if n <= args.cpu_hlo_lanes:
        texts["cpu_hlo"] = cpu_text
    for strategy in (s for s in args.strategies.split(",") if s):
        for form, text in texts.items():
            name = f"hlofuse_{strategy}_{form}"
            timed(name, functools.partial(hlofuse, text, strategy, form))
            if name in results:
                rate(name, _timed_call(executables[f"{strategy} {form}"], key_array))
    if n * t <= args.interpreter_work:
        module = parse_module(cpu_text, f"{args.program}.hlo")
        timed("interpreter", lambda: [np.asarray(a) for a in flatten_value(
            evaluate(module, [key_array]))])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", default="grid_forage")
    parser.add_argument("--envs", default="1024,65536")
    parser.add_argument("--steps", default="30,200", help="one per --envs entry")
    parser.add_argument("--strategies", default="max")
    parser.add_argument("--interpreter-work", type=int, default=1024 * 30)
    parser.add_argument("--cpu-hlo-lanes", type=int, default=4096,
                        help="hlofuse from the CPU's HLO only up to this many lanes")
    parser.add_argument("--jax-cpu-lanes", type=int, default=1 << 30,
                        help="JAX's jit on the host's CPU only up to this many lanes")
    parser.add_argument("--repeats", type=int, default=3,
                        help="time JAX and hlofuse at the last --envs (median; 0: not)")
    parser.add_argument("--backend", default="tpu",
                        help="hlofuse's backend (tpu-interpret or cpu: a check on the CPU; "
                        "JAX's `jax_tpu` then runs on JAX's default device)")
    parser.add_argument("--hlo-platform", default="",
                        help="the platform `tpu_hlo` is lowered for (default: JAX's default "
                        "device's; `tpu` lowers for the TPU without one)")
    parser.add_argument("--out", default="results/tpu/departure.json")
    args = parser.parse_args()

    import jax

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"program": args.program, "devices": [str(d) for d in jax.devices()],
                              "runs": []}

    def save() -> None:
        out.write_text(json.dumps(record, indent=1) + "\n")

    sizes = list(zip((int(x) for x in args.envs.split(",")),
                     (int(x) for x in args.steps.split(","))))
    for k, (n, t) in enumerate(sizes):
        run: dict[str, Any] = {"lanes": n, "steps": t, "seconds": {}, "pairs": {}, "notes": []}
        record["runs"].append(run)
        _one_size(args, n, t, k == len(sizes) - 1, run, save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
