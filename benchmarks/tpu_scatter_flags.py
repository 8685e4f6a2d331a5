"""XLA's scatter on the TPU with and without its hints (indices_are_sorted, unique_indices)
against NumPy: the replace scatter grid_forage's reset runs (`walls.at[pos].set(0)` under
vmap: an [N, 10, 10] board, one [N, 2] index per lane, a batching dimension), on int8 and
int32 boards. benchmarks/tpu_kernel_walk.py found this op, run as one XLA operation on the
chip, leaving a wall in 21 of 102,400 cells where the interpreter clears it. The JSON lists
per variant how many cells differ from NumPy's.

    python benchmarks/tpu_scatter_flags.py --out results/tpu/scatter_flags.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=1024)
    parser.add_argument("--out", default="results/tpu/scatter_flags.json")
    args = parser.parse_args()

    import jax
    from jax import lax

    rng = np.random.default_rng(0)
    n = args.lanes
    record: dict[str, Any] = {"devices": [str(d) for d in jax.devices()], "lanes": n,
                              "variants": {}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    indices = rng.integers(0, 10, size=(n, 2)).astype(np.int32)
    numbers = lax.ScatterDimensionNumbers(
        update_window_dims=(), inserted_window_dims=(1, 2),
        scatter_dims_to_operand_dims=(1, 2), operand_batching_dims=(0,),
        scatter_indices_batching_dims=(0,))
    for dtype in (np.int8, np.int32):
        board = (rng.random((n, 10, 10)) < 0.5).astype(dtype)
        updates = np.zeros((n,), dtype)
        want = board.copy()
        want[np.arange(n), indices[:, 0], indices[:, 1]] = 0
        for sorted_, unique in ((True, True), (False, False), (True, False), (False, True)):
            for mode in (lax.GatherScatterMode.FILL_OR_DROP,
                         lax.GatherScatterMode.PROMISE_IN_BOUNDS):
                name = f"{np.dtype(dtype).name} sorted={sorted_} unique={unique} {mode.name}"

                def scatter(b: Any, i: Any, u: Any, s: bool = sorted_, q: bool = unique,
                            m: Any = mode) -> Any:
                    return lax.scatter(b, i, u, numbers, indices_are_sorted=s,
                                       unique_indices=q, mode=m)

                try:
                    got = np.asarray(jax.jit(scatter)(board, indices, updates))
                    row: dict[str, Any] = {"differing": int((got != want).sum())}
                except Exception as e:  # noqa: BLE001 - a failure is a result
                    row = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
                record["variants"][name] = row
                print(name, row, flush=True)
                out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
