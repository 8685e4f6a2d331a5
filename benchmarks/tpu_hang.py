"""Which kernel of a study step's program keeps the chip from returning (issue 29: split-state,
unroll10 and none at N = 1,048,576 never returned; each kernel alone does).

`--walk`: the program walked kernel by kernel as the profile walks it (loops stepping on the
host, one trip), each kernel run alone and waited for, its name printed; then the whole
program once. `--bisect`: the whole program compiled with chosen Pallas kernels run as XLA
operations instead, each try a child process killed at --limit (a program that does not
return keeps its process until killed), halving the kernels left as Pallas kernels while the
program still does not return; prints the kernels it comes down to.

    python benchmarks/tpu_hang.py --step split-state --envs 1048576 --walk
    python benchmarks/tpu_hang.py --step split-state --envs 1048576 --bisect
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Any

if "--bisect" in sys.argv:  # the chip is the children's: one process holds it at a time
    os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402 - after the platform is chosen
import jax.numpy as jnp  # noqa: E402

from hlofuse import random
from hlofuse.api import run_strategy, strategy_constants
from hlofuse.envs import cartpole
from hlofuse.studies import cartpole_study as study
from hlofuse.targets.tpu.kernels import Kernel
from hlofuse.targets.tpu.program import TpuExecutable, Walker

RELEASE_S = 15.0


def _executable(args: argparse.Namespace) -> TpuExecutable:
    step = study.known_steps()[args.step]
    module = cartpole.trace(step.variant, args.envs, args.steps, 0)
    fused = run_strategy(module, step.strategy, debug=False,
                         constants=strategy_constants(step.strategy), log_decisions=False)
    return TpuExecutable(fused.module, interpret=args.interpret)


def _walk(executable: TpuExecutable) -> None:
    def call(kernel: Kernel, leaves: list[Any]) -> list[Any]:
        began = time.perf_counter()
        out = jax.block_until_ready(jax.jit(lambda *a: kernel(*a))(*leaves))
        print(f"{time.perf_counter() - began:7.3f} s  {kernel.name} [{kernel.kind}, "
              f"{kernel.mode} {kernel.layout}, grid {kernel.grid}, rows {kernel.block_rows}]",
              flush=True)
        return list(out)

    with executable.x64():
        inputs = [jnp.asarray(a) for a in executable._arguments([random.key(0)])]
        Walker(executable.kernel_plans, call, traced=False, trip_limit=1).run(
            executable.module.entry, inputs)
    print("every kernel returned alone", flush=True)


def _whole(executable: TpuExecutable, as_xla: set[str]) -> None:
    for kernel in executable.kernel_plans:
        if kernel.name in as_xla:
            kernel.as_xla_op("tpu_hang: run as an XLA operation")
    began = time.perf_counter()
    executable.compile()
    print(f"compiled in {time.perf_counter() - began:.1f} s", flush=True)
    with executable.x64():
        inputs = [jnp.asarray(a) for a in executable._arguments([random.key(0)])]
        began = time.perf_counter()
        jax.block_until_ready(executable.device_function()(*inputs))
    print(f"RETURNED in {time.perf_counter() - began:.3f} s", flush=True)


def _returns(args: argparse.Namespace, as_xla: list[str]) -> bool:
    command = [sys.executable, __file__, "--step", args.step, "--envs", str(args.envs),
               "--steps", str(args.steps), "--as-xla", ",".join(as_xla)]
    command += ["--interpret"] if args.interpret else []
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.limit,
                              env=env)
    except subprocess.TimeoutExpired:
        # The killed child's hold on the chip outlives it for a while: a program started right
        # after found no TPU (jax.devices('tpu') empty) in the session that bisected this.
        time.sleep(RELEASE_S)
        return False
    return "RETURNED" in done.stdout


def _bisect(args: argparse.Namespace) -> None:
    pallas = [k.name for k in _executable(args).kernel_plans if k.mode == "pallas"]
    print(f"{len(pallas)} Pallas kernels", flush=True)
    if not _returns(args, pallas):
        print("does not return with every kernel an XLA operation: not a Pallas kernel",
              flush=True)
        return
    suspects = pallas
    while len(suspects) > 1:
        half = len(suspects) // 2
        for part in (suspects[:half], suspects[half:]):
            keep = set(part)
            returned = _returns(args, [n for n in pallas if n not in keep])
            print(f"Pallas kernels {part}: {'returns' if returned else 'does not return'}",
                  flush=True)
            if not returned:
                suspects = part
                break
        else:
            print(f"each half returns; together they do not: {suspects}", flush=True)
            return
    print(f"does not return with only {suspects} as a Pallas kernel", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", default="split-state")
    parser.add_argument("--envs", type=int, default=1048576)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--limit", type=float, default=45.0,
                        help="seconds a bisection try may take")
    parser.add_argument("--walk", action="store_true")
    parser.add_argument("--interpret", action="store_true", help="(checking the script) on the CPU")
    parser.add_argument("--bisect", action="store_true")
    parser.add_argument("--as-xla", default=None,
                        help="(a bisection try) these kernels as XLA operations, then the whole "
                        "program once")
    args = parser.parse_args()
    if args.bisect:
        _bisect(args)
    elif args.walk:
        _walk(_executable(args))
    if args.as_xla is not None or args.walk:
        _whole(_executable(args), set(filter(None, (args.as_xla or "").split(","))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
