"""Reset draws for the resetting lanes only (targets/tpu/lane_compaction.py) against the
same draws for every lane, in a CartPole-shaped Pallas kernel on the TPU.

Each step of the kernel draws one Threefry value per lane (the action), resets about
`--rate` of the lanes, and gives the resetting lanes four fresh uniform values (four
Threefry evaluations a lane, as JAX's `uniform((4, N))` does). Variants: `full` (the draws
for every lane), `cond` (for the block when one lane resets: what the whole-loop kernel did),
`compact` (for the resetting lanes' slots only), `none` (no reset draws: the floor).

    python benchmarks/tpu_reset_compaction.py --envs 65536 --rows 64 --out F.json
    python benchmarks/tpu_reset_compaction.py --interpret --envs 2048 --steps 20   # no TPU

Every variant's final state is compared with `full`'s bit for bit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from hlofuse.ir.ops import Op
from hlofuse.reference.rnglib import PARITY, threefry2x32_ops
from hlofuse.targets.tpu.lane_compaction import Compaction

OPS = {Op.ADD: lax.add, Op.XOR: lax.bitwise_xor, Op.OR: lax.bitwise_or,
       Op.SHIFT_LEFT: lax.shift_left, Op.SHIFT_RIGHT_LOGICAL: lax.shift_right_logical}


def threefry_bits(k0: Any, k1: Any, counter: Any) -> Any:
    shape = counter.shape

    def const(v: int) -> Any:
        return jnp.full(shape, v, jnp.uint32)

    k2 = k0 ^ k1 ^ np.uint32(PARITY)
    keys = (jnp.broadcast_to(k0, shape), jnp.broadcast_to(k1, shape), jnp.broadcast_to(k2, shape))
    y0, y1 = threefry2x32_ops(lambda op, a, b: OPS[op](a, b), const, keys,
                              jnp.zeros(shape, jnp.uint32), counter)
    return y0 ^ y1


def uniform(bits: Any) -> Any:
    f = lax.bitcast_convert_type((bits >> np.uint32(9)) | np.uint32(0x3F800000), jnp.float32)
    return (f - np.float32(1.0)) * np.float32(0.1) - np.float32(0.05)


def make_kernel(variant: str, n: int, rows: int, steps: int, threshold: int) -> Any:
    def kernel(keys_ref: Any, state_in: Any, state_out: Any) -> None:
        first = pl.program_id(0) * np.int32(rows * 128)
        lanes = (lax.broadcasted_iota(np.int32, (rows, 128), 0) * np.int32(128)
                 + lax.broadcasted_iota(np.int32, (rows, 128), 1) + first)

        def draws(at: Any, k2: Any, k3: Any) -> list[Any]:
            return [uniform(threefry_bits(k2, k3, (at + np.int32(j * n)).astype(jnp.uint32)))
                    for j in range(4)]

        def step(t: Any, state: tuple[Any, ...]) -> tuple[Any, ...]:
            k0, k1, k2, k3 = (keys_ref[t, j] for j in range(4))
            bits = threefry_bits(k0, k1, lanes.astype(jnp.uint32))
            push = jnp.where((bits & np.uint32(1)) != 0, np.float32(0.1), np.float32(-0.1))
            moved = (state[0] + np.float32(0.02) * state[1], state[1] + push,
                     state[2] + np.float32(0.02) * state[3], state[3] - push * state[2])
            done = ((bits >> np.uint32(9)) & np.uint32(1023)) < np.uint32(threshold)
            if variant == "none":
                return tuple(jnp.where(done, np.float32(0), m) for m in moved)
            if variant == "full":
                fresh = draws(lanes, k2, k3)
                return tuple(jnp.where(done, f, m) for f, m in zip(fresh, moved))
            if variant == "cond":
                def taken() -> tuple[Any, ...]:
                    fresh = draws(lanes, k2, k3)
                    return tuple(jnp.where(done, f, m) for f, m in zip(fresh, moved))
                return lax.cond(jnp.any(done), taken, lambda: moved)
            compaction = Compaction(done.astype(jnp.int32), first)

            def compact() -> tuple[Any, ...]:
                fresh = compaction.spread(draws(compaction.lanes, k2, k3))
                return tuple(jnp.where(done, f, m) for f, m in zip(fresh, moved))

            def whole() -> tuple[Any, ...]:
                fresh = draws(lanes, k2, k3)
                return tuple(jnp.where(done, f, m) for f, m in zip(fresh, moved))

            return lax.cond(jnp.any(done), lambda: lax.cond(compaction.fits, compact, whole),
                            lambda: moved)

        state = lax.fori_loop(0, steps, step, tuple(state_in[j] for j in range(4)))
        for j in range(4):
            state_out[j] = state[j]

    return kernel


def build(variant: str, n: int, rows: int, steps: int, rate: float, interpret: bool) -> Any:
    blocks = n // (rows * 128)
    kernel = make_kernel(variant, n, rows, steps, int(rate * 1024))
    call = pl.pallas_call(
        kernel, grid=(blocks,),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM),
                  pl.BlockSpec((4, rows, 128), lambda i: (0, i, 0))],
        out_specs=pl.BlockSpec((4, rows, 128), lambda i: (0, i, 0)),
        out_shape=jax.ShapeDtypeStruct((4, n // 128, 128), jnp.float32),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=interpret)
    return jax.jit(call)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", default="65536")
    parser.add_argument("--rows", default="64")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rate", type=float, default=0.045)
    parser.add_argument("--variants", default="none,full,cond,compact")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--interpret", action="store_true")
    parser.add_argument("--lower", action="store_true", help="lower for the TPU, no run")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    records = []
    for n in (int(x) for x in args.envs.split(",")):
        keys = jnp.asarray(rng.integers(0, 2**32, (args.steps, 4), dtype=np.uint32))
        state = jnp.asarray(rng.uniform(-0.05, 0.05, (4, n // 128, 128)).astype(np.float32))
        for rows in (int(x) for x in args.rows.split(",")):
            want = None
            for variant in args.variants.split(","):
                fn = build(variant, n, rows, args.steps, args.rate, args.interpret)
                if args.lower:
                    start = time.perf_counter()
                    fn.trace(keys, state).lower(lowering_platforms=("tpu",))
                    print(f"{variant}: lowered in {time.perf_counter() - start:.1f} s")
                    continue
                start = time.perf_counter()
                got = np.asarray(jax.block_until_ready(fn(keys, state)))
                compile_s = time.perf_counter() - start
                times = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    jax.block_until_ready(fn(keys, state))
                    times.append(time.perf_counter() - start)
                seconds = statistics.median(times)
                if variant == "full":
                    want = got
                equal = None if want is None or variant == "none" else \
                    bool(np.array_equal(got.view(np.uint32), want.view(np.uint32)))
                record = {"n": n, "rows": rows, "variant": variant, "steps": args.steps,
                          "rate": args.rate, "seconds": seconds,
                          "env_steps_per_s": n * args.steps / seconds,
                          "compile_s": compile_s, "equal_to_full": equal}
                records.append(record)
                print(json.dumps(record), flush=True)
                if args.out:
                    args.out.write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
