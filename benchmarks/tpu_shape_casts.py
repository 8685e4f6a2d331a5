"""Which reshapes Mosaic compiles inside a whole-array kernel on the chip.

Lowering without a TPU accepts every reshape; libtpu's compiler refuses some
(`infer-vector-layout: unsupported shape cast`), and a program holding one then fails its first
compile (hlofuse compiles its kernels one at a time to find it). This probe compiles one small
kernel per (source shape, result shape) pair on the chip, with the reshaped value either
loaded from the kernel's input or computed in the kernel (an iota, as Threefry counters are),
and records which compile. Writes JSON: one record per pair.

    python benchmarks/tpu_shape_casts.py --out results/tpu/shape_casts.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

SIZES = (64, 256, 1000, 1024, 3000, 4000, 4096, 8192)


def shapes_of(n: int) -> list[tuple[int, ...]]:
    """Shapes of n elements a program reshapes between: flat, with a unit dimension, split
    into rows, into (rows, 128) tiles, and three-dimensional."""
    out: list[tuple[int, ...]] = [(n,), (1, n), (n, 1)]
    out += [(a, n // a) for a in (2, 4, 8, 16, 125) if n % a == 0 and n // a > 1]
    if n % 128 == 0 and n // 128 not in (1, 2, 4, 8, 16):
        out.append((n // 128, 128))
    out += [(2, a, n // (2 * a)) for a in (4, 8) if n % (2 * a) == 0 and n // (2 * a) > 1]
    return list(dict.fromkeys(out))


def kernel_for(src: tuple[int, ...], dst: tuple[int, ...], computed: bool, dtype: Any
               ) -> Any:
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def as_ref(shape: tuple[int, ...]) -> tuple[int, ...]:
        return (1, shape[0]) if len(shape) == 1 else shape  # as blocks.kernel_dims

    def body(x_ref: Any, o_ref: Any) -> None:
        if computed:
            value = lax.broadcasted_iota(dtype, src, len(src) - 1) + x_ref[0, 0]
        else:
            value = x_ref[...].reshape(src)  # as blocks.read: a 1-d array from its one row
        o_ref[...] = (value.reshape(dst) + jnp.asarray(1, dtype)).reshape(o_ref.shape)

    in_shape = (1, 1) if computed else as_ref(src)

    def spec(shape: tuple[int, ...]) -> Any:
        return pl.BlockSpec(shape, lambda: (0,) * len(shape), memory_space=pltpu.VMEM)

    call = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(as_ref(dst), dtype),
                          in_specs=[spec(in_shape)], out_specs=spec(as_ref(dst)))
    return jax.jit(call), jnp.zeros(in_shape, dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/tpu/shape_casts.json")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--lower-only", action="store_true", help="no chip: lower for the TPU")
    args = parser.parse_args()
    import jax.numpy as jnp

    records = []
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    for n in (int(s) for s in args.sizes.split(",")):
        for src, dst in itertools.permutations(shapes_of(n), 2):
            assert math.prod(src) == math.prod(dst)
            for computed, dtype in ((False, jnp.float32), (True, jnp.uint32)):
                fn, x = kernel_for(src, dst, computed, dtype)
                record: dict[str, object] = {"src": src, "dst": dst, "computed": computed,
                                             "dtype": np.dtype(dtype).name}
                try:
                    lowered = fn.trace(x).lower(lowering_platforms=("tpu",)) \
                        if args.lower_only else fn.lower(x)
                    if not args.lower_only:
                        lowered.compile()
                    record["compiles"] = True
                except Exception as e:  # noqa: BLE001 (every refusal is the datum here)
                    text = str(e)
                    record["compiles"] = False
                    at = text.find("Mosaic failed")
                    record["error"] = text[at if at >= 0 else 0:][:200]
                records.append(record)
                print(json.dumps(record), flush=True)
        path.write_text(json.dumps(records, indent=0) + "\n")


if __name__ == "__main__":
    main()
