"""Candidate forms of a lane-uniform product inside a whole-loop kernel, timed on the chip.

Each lane holds K values as K (rows, 128) tiles (the whole-loop kernel's layout); the weights
W (M, K) are shared by all lanes. Every form computes the M output tiles out_j = sum_k W[j, k]
x_k, T times in a loop inside one `pallas_call` over blocks of lanes (the carry updated from
the product so that nothing is hoisted), and is checked once against NumPy (T = 1):

- vpu: scalar-times-tile multiply-adds, the weights in SMEM (what the kernel did before);
- rows: the K tiles stacked in a VMEM scratch (K x rows, 128); per row r of the tile a
  sublane-strided load gives the (K, 128) operand, W @ it on the MXU, a strided store puts
  its (M, 128) result back; the output tiles are contiguous reads;
- wide: the same strided loads concatenated along the lanes into one (K, rows x 128)
  operand, one W @ X, its lane slices stored back with strided stores;
- wide_scratch: as wide, the operand assembled in a (K, rows x 128) VMEM scratch;
- kmajor: the tiles stored with strided stores into a (rows x K, 128) scratch (each row's
  K values contiguous), one product per row on a contiguous slice, the output tiles read
  back with strided loads;
- value3d: the tiles stacked as a (K, rows, 128) value and sliced per row (no scratch): the
  form the whole-loop kernel uses (targets/tpu/lane_products.py);
- value3d_packed: as value3d, g rows of the tile in one product against g copies of W on
  the diagonal (g = 128 / max(K, M), filling the MXU's 128 x 128);
- value3d_t, value3d_t_packed: the product transposed (the lanes the streamed rows, W^T the
  stationary operand), then transposed back.

    python benchmarks/tpu_mxu_forms.py --default-precision --out results/tpu/mxu_forms.json
    python benchmarks/tpu_mxu_forms.py --light --forms vpu,value3d,value3d_packed,value3d_t,\
        value3d_t_packed --all-forms-sizes 64x64,16x16,64x3,3x64,32x32 \
        --sizes 64x64,16x16,64x3,3x64,32x32 --out results/tpu/mxu_forms_light.json

--interpret runs the forms in interpret mode at a small N (numerics only); --lower lowers each
to Mosaic without a TPU (finds primitives Mosaic does not lower; layouts show only on the chip).
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

LANES = 128
HIGHEST = lax.Precision.HIGHEST
LIGHT = 4  # tiles carried by --light


def _dot(w: Any, x: Any, precision: Any) -> Any:
    return lax.dot_general(w, x, (((1,), (0,)), ((), ())), precision=precision,
                           preferred_element_type=jnp.float32)


def _product(form: str, k: int, m: int, rows: int, precision: Any
             ) -> tuple[Callable[..., list[Any]], list[Any]]:
    """(the product of the K tiles into M tiles, its scratch shapes)."""
    if form == "vpu":
        def vpu(tiles: list[Any], w: Any, scratch: list[Any]) -> list[Any]:
            out = []
            for j in range(m):
                acc = tiles[0] * w[j * k]
                for c in range(1, k):
                    acc = acc + tiles[c] * w[j * k + c]
                out.append(acc)
            return out
        return vpu, []
    if form == "rows":
        def by_rows(tiles: list[Any], w: Any, scratch: list[Any]) -> list[Any]:
            s, o = scratch
            for c, t in enumerate(tiles):
                s[c * rows:(c + 1) * rows, :] = t
            wv = w[...]
            for r in range(rows):
                o[pl.ds(r, m, stride=rows), :] = _dot(wv, s[pl.ds(r, k, stride=rows), :],
                                                      precision)
            return [o[j * rows:(j + 1) * rows, :] for j in range(m)]
        return by_rows, [pltpu.VMEM((k * rows, LANES), jnp.float32),
                         pltpu.VMEM((m * rows, LANES), jnp.float32)]
    if form in ("wide", "wide_scratch"):
        def wide(tiles: list[Any], w: Any, scratch: list[Any]) -> list[Any]:
            s, o = scratch[0], scratch[1]
            for c, t in enumerate(tiles):
                s[c * rows:(c + 1) * rows, :] = t
            if form == "wide":
                x = jnp.concatenate([s[pl.ds(r, k, stride=rows), :] for r in range(rows)],
                                    axis=1)
            else:
                xs = scratch[2]
                for r in range(rows):
                    xs[:, r * LANES:(r + 1) * LANES] = s[pl.ds(r, k, stride=rows), :]
                x = xs[...]
            y = _dot(w[...], x, precision)
            for r in range(rows):
                o[pl.ds(r, m, stride=rows), :] = y[:, r * LANES:(r + 1) * LANES]
            return [o[j * rows:(j + 1) * rows, :] for j in range(m)]
        shapes = [pltpu.VMEM((k * rows, LANES), jnp.float32),
                  pltpu.VMEM((m * rows, LANES), jnp.float32)]
        if form == "wide_scratch":
            shapes.append(pltpu.VMEM((k, rows * LANES), jnp.float32))
        return wide, shapes
    if form == "kmajor":
        def kmajor(tiles: list[Any], w: Any, scratch: list[Any]) -> list[Any]:
            s, o = scratch
            for c, t in enumerate(tiles):
                s[pl.ds(c, rows, stride=k), :] = t
            wv = w[...]
            for r in range(rows):
                o[r * m:(r + 1) * m, :] = _dot(wv, s[r * k:(r + 1) * k, :], precision)
            return [o[pl.ds(j, rows, stride=m), :] for j in range(m)]
        return kmajor, [pltpu.VMEM((rows * k, LANES), jnp.float32),
                        pltpu.VMEM((rows * m, LANES), jnp.float32)]
    if form == "value3d":
        def value3d(tiles: list[Any], w: Any, scratch: list[Any]) -> list[Any]:
            x3 = jnp.stack(tiles)
            wv = w[...]
            ys = [_dot(wv, x3[:, r, :], precision) for r in range(rows)]
            y3 = jnp.stack(ys, axis=1)  # (M, rows, 128)
            return [y3[j] for j in range(m)]
        return value3d, []
    if form.startswith("value3d_"):
        # value3d with g rows of the tile in one product against g copies of W on the
        # diagonal (packed), and/or the product transposed (the lanes as the streamed rows,
        # W^T the stationary operand)
        g = packing(k, m, rows) if "packed" in form else 1
        transposed = form.endswith("_t") or "_t_" in form

        def value3d_more(tiles: list[Any], w: Any, scratch: list[Any]) -> list[Any]:
            x3 = jnp.stack(tiles)
            wv = w[...]
            ys: list[Any] = []
            for r0 in range(0, rows, g):
                xr = jnp.concatenate([x3[:, r0 + i, :] for i in range(g)], axis=0) \
                    if g > 1 else x3[:, r0, :]
                if transposed:
                    y = lax.dot_general(xr, wv, (((0,), (0,)), ((), ())), precision=precision,
                                        preferred_element_type=jnp.float32).T
                else:
                    y = _dot(wv, xr, precision)
                ys.extend(y[i * m:(i + 1) * m] for i in range(g))
            y3 = jnp.stack(ys, axis=1)  # (M, rows, 128)
            return [y3[j] for j in range(m)]
        return value3d_more, []
    raise ValueError(form)


def packing(k: int, m: int, rows: int) -> int:
    """Rows of the tile one packed product covers: copies of W on the diagonal that fit the
    MXU's 128 x 128 (rows a multiple of it)."""
    g = max(1, min(128 // max(k, 1), 128 // max(m, 1), rows))
    while rows % g:
        g -= 1
    return g


def weights_for(form: str, w: Any, rows: int) -> Any:
    m, k = w.shape
    if form == "vpu":
        return w.reshape(-1)
    if "packed" in form:
        g = packing(k, m, rows)
        w = np.kron(np.eye(g, dtype=w.dtype), w)
    if form.endswith("_t") or "_t_" in form:
        w = np.ascontiguousarray(w.T)
    return w


def build(form: str, k: int, m: int, rows: int, n: int, steps: int, interpret: bool,
          precision: Any = HIGHEST, light: bool = False) -> Any:
    product, scratch_shapes = _product(form, k, m, rows, precision)
    grid = n // (rows * LANES)

    def kernel(x_ref: Any, w_ref: Any, out_ref: Any, *scratch: Any) -> None:
        tiles0 = tuple(x_ref[c] for c in range(k))

        def step(_: Any, tiles: Any) -> Any:
            out = product(list(tiles), w_ref, list(scratch))
            # the next step's tiles depend on this one's product (nothing hoisted)
            return tuple(t + np.float32(1e-3) * out[c % m] for c, t in enumerate(tiles))

        def light_step(_: Any, carry: Any) -> Any:
            # a few carried tiles (a rollout's state), the K inputs computed from them and
            # every output folded back (no output unused)
            tiles = [carry[c % LIGHT] + np.float32(c * 1e-3) for c in range(k)]
            out = product(tiles, w_ref, list(scratch))
            total = out[0]
            for o in out[1:]:
                total = total + o
            return tuple(c + np.float32(1e-3) * total for c in carry)

        if light and steps > 1:
            carry = lax.fori_loop(0, steps, light_step, tiles0[:LIGHT])
            for j in range(m):
                out_ref[j] = carry[j % len(carry)]
            return
        if steps == 1:
            out = product(list(tiles0), w_ref, list(scratch))
            for j in range(m):
                out_ref[j] = out[j]
            return
        tiles = lax.fori_loop(0, steps, step, tiles0)
        for j in range(m):
            out_ref[j] = tiles[j % k]

    w_space = pltpu.SMEM if form == "vpu" else pltpu.VMEM

    def run(x: Any, w_in: Any) -> Any:
        return pl.pallas_call(
            kernel, grid=(grid,),
            in_specs=[pl.BlockSpec((k, rows, LANES), lambda i: (0, i, 0)),
                      pl.BlockSpec(memory_space=w_space)],
            out_specs=pl.BlockSpec((m, rows, LANES), lambda i: (0, i, 0)),
            out_shape=jax.ShapeDtypeStruct((m, n // LANES, LANES), jnp.float32),
            scratch_shapes=scratch_shapes, interpret=interpret,
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",),
                                                 vmem_limit_bytes=100 * 2**20),
        )(x, w_in)

    return jax.jit(run)


def measure(form: str, k: int, m: int, rows: int, n: int, steps: int, args: Any,
            precision: Any = HIGHEST) -> dict[str, Any]:
    rng = np.random.default_rng(k * 1000 + m)
    x = rng.standard_normal((k, n // LANES, LANES)).astype(np.float32)
    w = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32)
    record: dict[str, Any] = {"form": form, "k": k, "m": m, "rows": rows, "n": n,
                              "steps": steps, "precision": str(precision)}
    try:
        w_in = weights_for(form, w, rows)
        light = args.light
        record["light"] = light
        if args.lower:
            f = build(form, k, m, rows, n, steps, False, precision, light)
            f.trace(x, w_in).lower(lowering_platforms=("tpu",))
            record["lowered"] = True
            return record
        once = build(form, k, m, rows, n, 1, args.interpret, precision)
        got = np.asarray(once(x, w_in))
        want = np.einsum("mk,krl->mrl", w.astype(np.float64), x.astype(np.float64))
        record["max_rel"] = float(np.max(np.abs(got - want) / (np.abs(want) + 1e-3)))
        record["equal"] = bool(np.allclose(got, want, rtol=1e-5, atol=1e-5))
        if args.interpret:
            return record
        f = build(form, k, m, rows, n, steps, False, precision, light)
        start = time.perf_counter()
        jax.block_until_ready(f(x, w_in))
        record["compile_s"] = time.perf_counter() - start
        times = []
        for _ in range(3):
            start = time.perf_counter()
            jax.block_until_ready(f(x, w_in))
            times.append(time.perf_counter() - start)
        best = float(np.median(times))
        record["seconds"] = best
        record["lane_products_per_s"] = n * steps / best
        record["gmac_per_s"] = n * steps * k * m / best / 1e9
    except Exception as error:  # a form Mosaic refuses is a result too
        record["error"] = f"{type(error).__name__}: {str(error)[:600]}"
        traceback.print_exc(limit=2)
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forms", default="vpu,rows,wide,wide_scratch,kmajor,value3d")
    parser.add_argument("--sizes", default="64x64,32x32,16x16,8x8,64x3,3x64,128x128")
    parser.add_argument("--all-forms-sizes", default="64x64,16x16",
                        help="sizes measured with every form; others with vpu, rows, wide")
    parser.add_argument("--rows", default="64")
    parser.add_argument("--lanes", type=int, default=65536)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--interpret", action="store_true")
    parser.add_argument("--light", action="store_true",
                        help=f"carry {LIGHT} tiles, the K inputs computed from them (a "
                        "rollout's step) rather than the K inputs themselves")
    parser.add_argument("--lower", action="store_true")
    parser.add_argument("--default-precision", action="store_true",
                        help="also the one-pass bf16 product (DEFAULT) of the MXU forms")
    parser.add_argument("--out", default="results/tpu/mxu_forms.json")
    args = parser.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    forms = args.forms.split(",")
    every = set(args.all_forms_sizes.split(","))
    records: list[dict[str, Any]] = []
    for size in args.sizes.split(","):
        k, m = (int(v) for v in size.split("x"))
        for rows in (int(r) for r in args.rows.split(",")):
            for form in forms:
                if size not in every and form not in ("vpu", "rows", "wide", "value3d",
                                                      "value3d_packed", "value3d_t_packed"):
                    continue
                precisions = [HIGHEST]
                if args.default_precision and form != "vpu" and size in every:
                    precisions.append(lax.Precision.DEFAULT)
                for precision in precisions:
                    record = measure(form, k, m, rows, args.lanes, args.steps, args,
                                     precision)
                    records.append(record)
                    print(json.dumps(record), flush=True)
                    out.write_text(json.dumps({"devices": str(jax.devices()),
                                               "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
