"""Reset draws for the resetting lanes only (targets/tpu/lane_compaction.py) against the
same draws for every lane, in a CartPole-shaped Pallas kernel on the TPU.

Each step of the kernel draws one Threefry value per lane (the action), resets about
`--rate` of the lanes, and gives the resetting lanes four fresh uniform values (four
Threefry evaluations a lane, as JAX's `uniform((4, N))` does). Variants: `full` (the draws
for every lane), `cond` (for the block when one lane resets: what the whole-loop kernel did),
`prev` (unconditionally when the step before had a resetting lane, else as `cond`),
`compact` (for the resetting lanes' slots only, gathered on the MXU), `tiers` (on tiers of
slots across the block's registers, `tiered_reset`), `none` (no reset draws: the floor).
`--sub S` runs the time loop over sub-tiles of S rows of the block one after another (state
held in fewer registers, less independent work a step), to tell register pressure from
issue width as the limit; prepared in interpret mode and lowering, not yet run on a chip.

    python benchmarks/tpu_reset_compaction.py --envs 65536 --rows 64 --out F.json
    python benchmarks/tpu_reset_compaction.py --envs 65536 --rows 64 --sub 0,8,16,32 \
        --variants full,none,prev
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


def tiered_reset(done: Any, lanes: Any, moved: tuple[Any, ...], draws: Any, always: int
                 ) -> tuple[Any, ...]:
    """The reset draws on tiers of slots across the block's vector registers: the block's
    rows / 8 registers hold, at each (sublane, lane) position, rows / 8 lanes; the k-th
    resetting one of them takes tier k's slot there, so tier k is one register of draws.
    The first `always` tiers are drawn every step, each later one only when some position
    has that many resetting lanes. Only element-wise selects between registers: no
    shuffles, no MXU."""
    groups = done.shape[0] // 8

    def part(x: Any, g: int) -> Any:
        return x[8 * g:8 * g + 8, :]

    count = jnp.zeros((8, 128), jnp.int32)
    ranks = []
    slots = [jnp.zeros((8, 128), jnp.int32) for _ in range(groups)]
    for g in range(groups):
        resets = part(done, g)
        ranks.append(jnp.where(resets, count, np.int32(-1)))
        for k in range(g + 1):
            slots[k] = jnp.where(resets & (count == k), part(lanes, g), slots[k])
        count = count + resets.astype(jnp.int32)
    tiers = []
    for k in range(groups):
        if k < always:
            tiers.append(tuple(draws(slots[k])))
        else:
            tiers.append(lax.cond(jnp.any(count > k), lambda at=slots[k]: tuple(draws(at)),
                                  lambda: tuple(jnp.zeros((8, 128), jnp.float32)
                                                for _ in range(4))))
    fresh = []
    for j, value in enumerate(moved):
        parts = []
        for g in range(groups):
            v = part(value, g)
            for k in range(g + 1):
                v = jnp.where(ranks[g] == k, tiers[k][j], v)
            parts.append(v)
        fresh.append(jnp.concatenate(parts, axis=0))
    return tuple(fresh)


def make_kernel(variant: str, n: int, rows: int, steps: int, threshold: int,
                always: int = 3, sub: int = 0) -> Any:
    """`sub` > 0: the time loop runs over sub-tiles of `sub` rows one after another (a loop
    over sub-tiles outside it), so a tile's state can stay in vector registers for all
    steps; 0: over the whole block at once."""
    tile_rows = sub or rows

    def kernel(keys_ref: Any, state_in: Any, state_out: Any) -> None:
        block_first = pl.program_id(0) * np.int32(rows * 128)  # read outside the tile loop
        if sub:
            def run_tile(i: Any, carry: Any) -> Any:
                r0 = pl.multiple_of(i * np.int32(sub), sub)
                tile = tuple(state_in[j, pl.ds(r0, sub), :] for j in range(4))
                result = time_loop(keys_ref, block_first + r0 * np.int32(128), tile)
                for j in range(4):
                    state_out[j, pl.ds(r0, sub), :] = result[j]
                return carry
            lax.fori_loop(0, rows // sub, run_tile, np.int32(0))
        else:
            result = time_loop(keys_ref, block_first, tuple(state_in[j] for j in range(4)))
            for j in range(4):
                state_out[j] = result[j]

    def time_loop(keys_ref: Any, first: Any, first_state: tuple[Any, ...]
                  ) -> tuple[Any, ...]:
        lanes = (lax.broadcasted_iota(np.int32, (tile_rows, 128), 0) * np.int32(128)
                 + lax.broadcasted_iota(np.int32, (tile_rows, 128), 1) + first)

        def draws(at: Any, k2: Any, k3: Any) -> list[Any]:
            return [uniform(threefry_bits(k2, k3, (at + np.int32(j * n)).astype(jnp.uint32)))
                    for j in range(4)]

        def step(t: Any, state: tuple[Any, ...]) -> tuple[Any, ...]:
            if variant == "prev":
                *state, previous = state
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
            if variant == "tiers":
                return tiered_reset(done, lanes, moved, lambda at: draws(at, k2, k3), always)
            if variant in ("cond",):
                def taken() -> tuple[Any, ...]:
                    fresh = draws(lanes, k2, k3)
                    return tuple(jnp.where(done, f, m) for f, m in zip(fresh, moved))
                if variant == "cond":
                    return lax.cond(jnp.any(done), taken, lambda: moved)
            if variant == "prev":
                # Drawn unconditionally when the step before had a resetting lane (its any
                # is then off this step's critical path), behind the cond otherwise.
                def taken_now() -> tuple[Any, ...]:
                    fresh = draws(lanes, k2, k3)
                    return tuple(jnp.where(done, f, m) for f, m in zip(fresh, moved))
                picked = jnp.any(done)
                new = lax.cond(previous != 0, taken_now,
                               lambda: lax.cond(picked, taken_now, lambda: moved))
                return (*new, picked.astype(jnp.int32))
            compaction = Compaction(done.astype(jnp.int32), first)

            def compact() -> tuple[Any, ...]:
                fresh = compaction.spread(draws(compaction.lanes, k2, k3))
                return tuple(jnp.where(done, f, m) for f, m in zip(fresh, moved))

            def whole() -> tuple[Any, ...]:
                fresh = draws(lanes, k2, k3)
                return tuple(jnp.where(done, f, m) for f, m in zip(fresh, moved))

            return lax.cond(jnp.any(done), lambda: lax.cond(compaction.fits, compact, whole),
                            lambda: moved)

        state = lax.fori_loop(0, steps, step, first_state + ((np.int32(1),)
                                                            if variant == "prev" else ()))
        return tuple(state[:4])

    return kernel


def build(variant: str, n: int, rows: int, steps: int, rate: float, interpret: bool,
          always: int = 3, sub: int = 0) -> Any:
    blocks = n // (rows * 128)
    kernel = make_kernel(variant, n, rows, steps, int(rate * 1024), always, sub)
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
    parser.add_argument("--always", default="3",
                        help="tiers drawn every step (variant tiers), comma-separated")
    parser.add_argument("--sub", default="0",
                        help="rows of the sub-tiles the time loop runs over (0: the block)")
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
            runs = [(v, int(a), int(sub)) for sub in args.sub.split(",")
                    for v in args.variants.split(",")
                    for a in (args.always.split(",") if v == "tiers" else ["0"])
                    if int(sub) == 0 or (rows % int(sub) == 0 and int(sub) % 8 == 0)]
            for variant, always, sub in runs:
                fn = build(variant, n, rows, args.steps, args.rate, args.interpret, always,
                           sub)
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
                record = {"n": n, "rows": rows, "sub": sub, "variant": variant,
                          "always": always,
                          "steps": args.steps,
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
