"""Regenerate the rollout corpus in this directory from `programs.py`.

Run from the repository root (needs JAX; tests only read the stored files):

    .venv/bin/python tests/data/rollouts/generate.py           # rewrite every file
    .venv/bin/python tests/data/rollouts/generate.py --check   # re-run JAX, compare
    .venv/bin/python tests/data/rollouts/generate.py --only acrobot,catch

For every rollout `<name>` of `programs.ROLLOUTS`, at N = 8 environments and T = 30 steps:

* `<name>.cpu.hlo`: JAX's CPU lowering, `jax.jit(f).lower(key).as_text(dialect="hlo",
  debug_info=True)` (Threefry as a 5-round `while` loop nested in the step);
* `<name>.gpu.hlo`: JAX's GPU lowering, `jax.jit(f).trace(key).lower(
  lowering_platforms=("cuda",)).as_text(...)` (Threefry unrolled; no GPU needed);
* `<name>.npz`: the input `arg0` (the key, u32[2] from `jax.random.PRNGKey(0)`) and JAX's
  CPU outputs `out0, out1, ...` (the flattened outputs, in order).

The classic-control rollouts are exported with short episode limits (`EXPORT_OPTIONS`) so that
lanes reset within the 30 steps.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import programs  # noqa: E402  (this directory, put on the path just above)

# File names in the debug-info tables relative to the repository root, so that regenerating
# from another checkout gives the same text.
jax.config.update("jax_hlo_source_file_canonicalization_regex", r"^.*/(?=tests/data/rollouts/)")
assert not jax.config.jax_enable_x64

N_ENVS = 8
STEPS = 30
SEED = 0
# Episode limits short enough that every lane resets within the 30 exported steps, so the
# stored outputs exercise the auto-reset (benchmarks use the environments' own limits).
EXPORT_OPTIONS: dict[str, dict[str, int]] = {
    "acrobot": {"max_steps": 12},
    "pendulum": {"max_steps": 16},
    "mountain_car": {"max_steps": 20},
    "mountain_car_continuous": {"max_steps": 14},
    "bandit": {"max_steps": 12},
    "rigid_body": {"max_steps": 15},
    "reacher_logged": {"max_steps": 12},
    "inventory_logged": {"horizon": 9},
    "acrobot_mlp": {"max_steps": 12},
    "pendulum_mlp": {"max_steps": 16},
    "mountain_car_mlp": {"max_steps": 20},
    "mountain_car_continuous_mlp": {"max_steps": 14},
    "spring_chain": {"max_steps": 13},
    "jacobi_rope": {"max_steps": 11},
    "implicit_pendulum": {"max_steps": 9},
}


def export(name: str) -> tuple[str, str, dict[str, np.ndarray]]:
    fn = programs.ROLLOUTS[name](N_ENVS, STEPS, **EXPORT_OPTIONS.get(name, {}))
    key = jax.random.PRNGKey(SEED)
    jitted = jax.jit(fn)
    cpu = jitted.lower(key).as_text(dialect="hlo", debug_info=True)
    gpu = jitted.trace(key).lower(lowering_platforms=("cuda",)).as_text(dialect="hlo",
                                                                         debug_info=True)
    outputs = jax.tree_util.tree_leaves(jitted(key))
    arrays = {"arg0": np.asarray(key)}
    arrays.update({f"out{i}": np.asarray(o) for i, o in enumerate(outputs)})
    return cpu, gpu, arrays


def main(check: bool, only: list[str] | None) -> bool:
    ok = True
    for name in programs.ROLLOUTS:
        if only and name not in only:
            continue
        cpu, gpu, arrays = export(name)
        paths = {form: os.path.join(HERE, f"{name}.{form}.hlo") for form in ("cpu", "gpu")}
        npz = os.path.join(HERE, f"{name}.npz")
        if check:
            stored = np.load(npz)
            same = set(stored.files) == set(arrays) and all(
                np.array_equal(stored[k], v) for k, v in arrays.items())
            for form, text in (("cpu", cpu), ("gpu", gpu)):
                with open(paths[form]) as f:
                    same = same and f.read() == text
            print(f"{name}: {'same' if same else 'DIFFERENT'}")
            ok = ok and same
            continue
        for form, text in (("cpu", cpu), ("gpu", gpu)):
            with open(paths[form], "w") as f:
                f.write(text)
        np.savez(npz, **arrays)
        print(f"{name}: {len(cpu.splitlines())} / {len(gpu.splitlines())} lines, "
              f"{len(arrays) - 1} outputs")
    return ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true",
                        help="re-run JAX and compare with the stored files")
    parser.add_argument("--only", default="", help="comma-separated rollout names")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or None
    sys.exit(0 if main(args.check, names) else 1)
