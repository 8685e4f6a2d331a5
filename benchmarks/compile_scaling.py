"""How compile time grows with program size: hlofuse's passes, code generation and C compiler
timed apart, next to JAX's compile of the same programs, in the same run.

Programs:

- the CartPole rollout, variant `all` (fused RNG, split state) with its scan unrolled U times
  (U = 1, 10, 20, 40 by default), strategy `xla+relax_concatenate`; JAX compiles its own
  CartPole rollout (`studies/peers/jax_peer.py`, split state, `lax.scan(unroll=U)`);
- synthetic modules written in JAX and exported to HLO (so both compile the very same
  program) of about S instructions (S = 1,000, 10,000, 100,000 by default): long element-wise
  chains over a few inputs, wide row reductions of each chain, and many siblings reading the
  same values.

hlofuse compiles cold: an empty cache directory per program (the runtime library is built
once beforehand, as after any first use). Per program the JSON has the instruction count and
the CPU seconds for tracing/export, verifying the input, the passes (`run_strategy`, without
the decision log, as `jit` runs them), code generation (`generate`), the C compiler (with the
kernel counts saved beside the executable) and the cycle collection after the compile (`jit`
pauses the collector over the whole compile), and JAX's `jit(...).lower(...).compile()`.
CPU time (this process's, plus its finished children's for the C compiler) rather than wall
time, because the machine is shared: another job's load does not show in it; the wall seconds
are recorded beside it.

    .venv/bin/python benchmarks/compile_scaling.py                  # everything (long)
    .venv/bin/python benchmarks/compile_scaling.py --unrolls 1,10 --sizes 1000,10000

Writes results/compile_scaling.json and results/compile_scaling.png (time against
instructions, log-log). Not a test; a shared machine's load shows in the figures (the JSON
records the load average).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def cpu_seconds() -> float:
    """CPU time of this process (all threads: JAX compiles on several) and of its finished
    children (the C compiler)."""
    times = os.times()
    return time.process_time() + times.children_user + times.children_system


def _fresh_cache() -> None:
    os.environ["HLOFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="hlofuse-scaling-")


def hlofuse_cold(module: Any, strategy: str, with_cc: bool = True) -> dict[str, float | None]:
    """Passes, code generation and the C compiler on `module`, timed apart, empty cache
    (without `with_cc`, the passes only), as `jit` runs them: the input verified first, the
    cycle collector paused over the whole compile, and the collection that follows counted
    (`collect_s`)."""
    import gc

    from hlofuse.fusion.strategies import run_strategy
    from hlofuse.ir.verifier import verify
    from hlofuse.passes.manager import gc_paused
    from hlofuse.targets.c import CompileOptions
    from hlofuse.targets.c import generate_c as generate
    from hlofuse.targets.c.build import compile_units
    from hlofuse.toolchain.cache import Cache
    from hlofuse.toolchain.compiler import build_shared_object

    _fresh_cache()
    options = CompileOptions()
    wall = time.perf_counter()
    start = cpu_seconds()
    with gc_paused():
        verify(module)
        verified = cpu_seconds()
        # As `Compiled.compile_fusion`: the decisions are recorded only when explained.
        fused = run_strategy(module, strategy, debug=False, log_decisions=False)
        passes = cpu_seconds()
        if with_cc:
            generated = generate(fused.module, options)
            codegen = cpu_seconds()
            build_shared_object(compile_units(generated, options.flags), options.flags,
                                Cache.open())
            fused.kernels_per_iteration()  # saved with the executable (`cached_executable`)
            built = cpu_seconds()
    gc.collect(0)  # what the first allocation after the pause would start
    done = cpu_seconds()
    if not with_cc:
        return {"verify_s": verified - start, "passes_s": passes - verified, "codegen_s": None,
                "cc_s": None, "compile_s": None, "compile_wall_s": None,
                "collect_s": done - passes, "kernels": len(fused.kernels)}
    return {"verify_s": verified - start, "passes_s": passes - verified,
            "codegen_s": codegen - passes, "cc_s": built - codegen, "collect_s": done - built,
            "compile_s": done - start, "compile_wall_s": time.perf_counter() - wall,
            "kernels": len(fused.kernels)}


def instructions(module: Any) -> int:
    return sum(len(c.instructions) for c in module.computations)


def cartpole_row(unroll: int, n_envs: int, n_steps: int, strategy: str) -> dict[str, Any]:
    from hlofuse import random
    from hlofuse.api import jit
    from hlofuse.envs import cartpole

    variant = dataclasses.replace(cartpole.PRESETS["all"], unroll=unroll)
    start = cpu_seconds()
    module = jit(cartpole.scan_rollout(variant, n_envs, n_steps),
                 strategy=strategy).lower(random.key(0)).module
    row: dict[str, Any] = {"program": f"cartpole-all-u{unroll}", "unroll": unroll,
                           "instructions": instructions(module),
                           "trace_s": cpu_seconds() - start}
    row.update(hlofuse_cold(module, strategy))
    row["jax_compile_s"] = _jax_cartpole(unroll, n_envs, n_steps)
    return row


def _jax_cartpole(unroll: int, n_envs: int, n_steps: int) -> float | None:
    try:
        import jax
        import jax.numpy as jnp

        from hlofuse.studies.peers.jax_peer import ScanForm, scan_rollout
    except ImportError:
        return None
    rollout = scan_rollout(ScanForm(is_packed=False, unroll=unroll), False, n_steps)
    initial = jnp.zeros((n_envs, 4), jnp.float32)
    lowered = jax.jit(rollout).lower(initial, jnp.uint32(0))
    start = cpu_seconds()
    lowered.compile()
    return cpu_seconds() - start


def synthetic_fn(size: int) -> tuple[Callable[..., Any], int]:
    """A JAX function of about `size` HLO instructions: chains, reductions, siblings."""
    import jax.numpy as jnp

    chain = 40
    chains = max(1, round(size / 108))  # a chain and its outputs export to ~108 instructions

    def fn(x: Any, y: Any) -> Any:
        outs = []
        for c in range(chains):
            v = x * (1.0 + c / chains)
            for k in range(chain):
                v = jnp.sin(v) * y + v if k % 3 == 0 else (v * 0.5 + y if k % 3 == 1
                                                            else jnp.maximum(v, y) - x)
            outs.append(jnp.sum(v.reshape(8, -1), axis=1))  # a wide row reduction
            outs.append(v[:16] + x[:16])  # siblings of the chain's value
        return jnp.stack([o[:8] for o in outs])

    return fn, chains


def synthetic_row(size: int, strategy: str, cc_max: int = 0) -> dict[str, Any]:
    import jax

    from hlofuse.ir.parser import parse_module

    fn, chains = synthetic_fn(size)
    x = np.linspace(0, 1, 1024, dtype=np.float32)
    y = np.linspace(1, 2, 1024, dtype=np.float32)
    start = cpu_seconds()
    lowered = jax.jit(fn).lower(x, y)
    text = lowered.as_text(dialect="hlo")
    module = parse_module(text)
    row: dict[str, Any] = {"program": f"synthetic-{size}", "chains": chains,
                           "instructions": instructions(module),
                           "trace_s": cpu_seconds() - start}
    row.update(hlofuse_cold(module, strategy,
                            with_cc=not cc_max or row["instructions"] <= cc_max))
    start = cpu_seconds()
    lowered.compile()
    row["jax_compile_s"] = cpu_seconds() - start
    return row


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for kind, marker in (("cartpole", "o"), ("synthetic", "s")):
        sel = sorted((r for r in rows if r["program"].startswith(kind)),
                     key=lambda r: r["instructions"])
        if not sel:
            continue
        n = [r["instructions"] for r in sel]
        ax.loglog(n, [r["passes_s"] for r in sel], marker + "-", label=f"{kind}: passes")
        cc_s = [(a, r["cc_s"]) for a, r in zip(n, sel, strict=True) if r.get("cc_s")]
        if cc_s:
            ax.loglog(*zip(*cc_s, strict=True), marker + "--", label=f"{kind}: C compiler")
        jax_s = [(a, r["jax_compile_s"]) for a, r in zip(n, sel, strict=True)
                 if r.get("jax_compile_s")]
        if jax_s:
            ax.loglog(*zip(*jax_s, strict=True), marker + ":", label=f"{kind}: JAX compile")
    lo = min(r["instructions"] for r in rows)
    hi = max(r["instructions"] for r in rows)
    ax.loglog([lo, hi], [2e-4 * lo, 2e-4 * hi], "k-", lw=0.5, label="0.2 ms per instruction")
    ax.set_xlabel("HLO instructions")
    ax.set_ylabel("CPU seconds")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unrolls", default="1,10,20,40")
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--strategy", default="xla+relax_concatenate")
    parser.add_argument("--out", type=Path, default=Path("results"))
    parser.add_argument("--cc-max", type=int, default=20000, metavar="N",
                        help="skip code generation and the C compiler for synthetic programs "
                             "of more than N instructions (their huge kernels take the C "
                             "compiler tens of minutes; 0: never skip)")
    args = parser.parse_args()
    from hlofuse.targets.c import runtime_library

    _fresh_cache()
    runtime_library()
    rows: list[dict[str, Any]] = []
    args.out.mkdir(parents=True, exist_ok=True)

    def add(row: dict[str, Any]) -> None:
        # Written after every row: the largest programs take many minutes each.
        row["passes_ms_per_instruction"] = 1e3 * row["passes_s"] / row["instructions"]
        if row.get("jax_compile_s") and row.get("compile_s"):
            row["compile_over_jax"] = row["compile_s"] / row["jax_compile_s"]
        rows.append(row)
        print(json.dumps(row), flush=True)
        record = {"machine": platform.processor() or platform.machine(),
                  "cpus": os.cpu_count(), "load_average": os.getloadavg(),
                  "strategy": args.strategy, "time": "CPU seconds (time.process_time plus "
                  "finished children)", "rows": rows}
        (args.out / "compile_scaling.json").write_text(json.dumps(record, indent=1) + "\n")
        plot(rows, args.out / "compile_scaling.png")

    for u in [int(x) for x in args.unrolls.split(",") if x]:
        add(cartpole_row(u, args.envs, args.steps, args.strategy))
    for s in [int(x) for x in args.sizes.split(",") if x]:
        add(synthetic_row(s, args.strategy, args.cc_max))

if __name__ == "__main__":
    main()
