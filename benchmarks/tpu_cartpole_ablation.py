"""Where CartPole's whole-loop kernel spends its step on the TPU, by ablation.

The study's program under `max` (one pallas_call), timed as compiled and with parts of its
step changed in the code generator:
- `no-cond`: the auto-reset's draws computed for every lane every step, not behind the
  `lax.cond` on any resetting lane (`analysis/rare_selects` switched off): the same values;
- `no-trig`, `no-div`: sin and cos replaced by the identity, divisions by products; the
  values are wrong, so only the time is kept, to say what those operations cost.
JAX's best form of the program runs in the same process. Writes JSON.

    PYTHONPATH=src:. python benchmarks/tpu_cartpole_ablation.py --envs 65536,1048576 --out F.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

ABLATIONS = ("compiled", "no-cond", "no-trig", "no-div", "no-trig-no-div",
             "no-cond-no-trig-no-div")


@contextmanager
def ablated(name: str) -> Iterator[None]:
    from jax import lax

    from hlofuse.ir.ops import Op
    from hlofuse.targets.tpu import lax_ops, whole_loop, whole_loop_held

    saved = (dict(lax_ops.UNARY), dict(lax_ops.BINARY), whole_loop.rare_selects,
             whole_loop_held.rare_selects)
    if "no-cond" in name:
        whole_loop.rare_selects = whole_loop_held.rare_selects = lambda plan: []
    if "no-trig" in name:
        lax_ops.UNARY[Op.SINE] = lax_ops.UNARY[Op.COSINE] = lambda x: x
    if "no-div" in name:
        lax_ops.BINARY[Op.DIVIDE] = lax.mul
    try:
        yield
    finally:
        lax_ops.UNARY.clear()
        lax_ops.UNARY.update(saved[0])
        lax_ops.BINARY.clear()
        lax_ops.BINARY.update(saved[1])
        whole_loop.rare_selects, whole_loop_held.rare_selects = saved[2], saved[3]


def final_state(n: int, steps: int) -> Any:
    """The compiled program's outputs at N = n (device arrays), for comparing two forms."""
    import jax.numpy as jnp

    from hlofuse import random
    from hlofuse.api import compile_module
    from hlofuse.envs import cartpole
    from hlofuse.studies.cartpole_study import known_steps
    from hlofuse.targets.tpu import TpuTarget

    TpuTarget._programs.clear()
    step = known_steps()["max"]
    compiled = compile_module(cartpole.trace(step.variant, n, steps, 0), step.strategy, "tpu")
    run = compiled.executable.device_function()  # type: ignore[union-attr]
    return [np.asarray(x) for x in run(jnp.asarray(random.key(0)))]


def main() -> None:
    from benchmarks.tpu_whole_loop import hlofuse_max, jax_best

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="65536,1048576")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ablations", default=",".join(ABLATIONS))
    parser.add_argument("--out", default="results/tpu/cartpole_ablation.json")
    args = parser.parse_args()
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []

    def save(record: dict[str, Any]) -> None:
        print(json.dumps(record), flush=True)
        records.append(record)
        path.write_text(json.dumps(records, indent=1) + "\n")

    with ablated("compiled"):
        want = final_state(4096, 50)
    with ablated("no-cond"):
        got = final_state(4096, 50)
    save({"no-cond equal to compiled (N = 4096, T = 50)":
          all(np.array_equal(a, b) for a, b in zip(want, got))})
    for n in (int(x) for x in args.envs.split(",")):
        jax_record = jax_best(n, args.steps, args.repeats)
        save(jax_record)
        for name in args.ablations.split(","):
            with ablated(name):
                record = hlofuse_max(n, args.steps, args.rows, args.repeats)
            record.update(ablation=name,
                          ratio_to_jax=jax_record["seconds"] / record["seconds"])
            save(record)


if __name__ == "__main__":
    main()
