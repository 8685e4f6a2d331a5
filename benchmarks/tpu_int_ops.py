"""Integer and conversion ops in a Pallas kernel on the TPU against XLA's own result on the
CPU, element by element: the ops whose chip lowering may differ from HLO's meaning
(unsigned and signed division and remainder, shifts by a tile of counts including counts
of 32 and more, conversions between unsigned, signed and float words, unsigned compares
and extrema, narrow-integer wrapping). Each op runs on one (rows, 128) block of random
words (every bit pattern likely, the high bit half the time); the JSON lists, per op, how
many results differ and a few examples (inputs, the kernel's, XLA CPU's, XLA TPU's).

    python benchmarks/tpu_int_ops.py --out results/tpu/int_ops.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROWS = 32


def _ops() -> dict[str, tuple[Callable[..., Any], str, str]]:
    """name -> (function of one or two tiles, x's kind, y's kind)."""
    from jax import lax

    u, s = np.uint32, np.int32
    return {
        "rem_u32_by_10": (lambda x, y: lax.rem(x, u(10)), "u32", "-"),
        "div_u32_by_10": (lambda x, y: lax.div(x, u(10)), "u32", "-"),
        "rem_u32_by_tile": (lax.rem, "u32", "u32_nonzero"),
        "div_u32_by_tile": (lax.div, "u32", "u32_nonzero"),
        "rem_s32_by_10": (lambda x, y: lax.rem(x, s(10)), "s32", "-"),
        "div_s32_by_10": (lambda x, y: lax.div(x, s(10)), "s32", "-"),
        "rem_s32_by_tile": (lax.rem, "s32", "s32_nonzero"),
        "div_s32_by_tile": (lax.div, "s32", "s32_nonzero"),
        "shift_right_logical_u32_by_9": (lambda x, y: lax.shift_right_logical(x, u(9)),
                                         "u32", "-"),
        "shift_right_logical_u32_by_tile": (lax.shift_right_logical, "u32", "u32_shift"),
        "shift_left_u32_by_tile": (lax.shift_left, "u32", "u32_shift"),
        "shift_right_arithmetic_s32_by_tile": (lax.shift_right_arithmetic, "s32", "s32_shift"),
        "convert_u32_to_f32": (lambda x, y: lax.convert_element_type(x, np.float32), "u32",
                               "-"),
        "convert_s32_to_f32": (lambda x, y: lax.convert_element_type(x, np.float32), "s32",
                               "-"),
        "convert_f32_to_s32": (lambda x, y: lax.convert_element_type(x, np.int32), "f32",
                               "-"),
        "convert_f32_to_u32": (lambda x, y: lax.convert_element_type(x, np.uint32), "f32",
                               "-"),
        "convert_u32_to_s32": (lambda x, y: lax.convert_element_type(x, np.int32), "u32",
                               "-"),
        "lt_u32": (lambda x, y: lax.convert_element_type(lax.lt(x, y), np.int32), "u32",
                   "u32"),
        "max_u32": (lax.max, "u32", "u32"),
        "min_u32": (lax.min, "u32", "u32"),
        "mul_u32": (lax.mul, "u32", "u32"),
        "wrap_s8": (lambda x, y: lax.shift_right_arithmetic(lax.shift_left(x, s(24)), s(24)),
                    "s32", "-"),
    }


def _data(kind: str, rng: np.random.Generator) -> np.ndarray:
    shape = (ROWS, 128)
    bits = rng.integers(0, 2**32, size=shape, dtype=np.uint64).astype(np.uint32)
    if kind == "u32":
        return bits
    if kind == "s32":
        return bits.view(np.int32)
    if kind == "u32_nonzero":
        small = rng.integers(1, 1000, size=shape).astype(np.uint32)
        return np.where(rng.random(shape) < 0.5, small, np.maximum(bits, 1))
    if kind == "s32_nonzero":
        small = rng.integers(-1000, 1000, size=shape).astype(np.int32)
        value = np.where(rng.random(shape) < 0.5, small, bits.view(np.int32))
        return np.where(value == 0, 7, value).astype(np.int32)
    if kind == "u32_shift":
        return rng.integers(0, 40, size=shape).astype(np.uint32)
    if kind == "s32_shift":
        return rng.integers(0, 40, size=shape).astype(np.int32)
    if kind == "f32":
        return (rng.standard_normal(shape) * 1e9).astype(np.float32)
    return np.zeros(shape, np.int32)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/tpu/int_ops.json")
    args = parser.parse_args()

    import jax
    from jax.experimental import pallas as pl

    rng = np.random.default_rng(0)
    cpu = jax.devices("cpu")[0]
    record: dict[str, Any] = {"devices": [str(d) for d in jax.devices()], "ops": {}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for name, (fn, x_kind, y_kind) in _ops().items():
        x, y = _data(x_kind, rng), _data(y_kind, rng)

        def kernel(x_ref: Any, y_ref: Any, o_ref: Any, fn: Any = fn) -> None:
            o_ref[...] = fn(x_ref[...], y_ref[...])

        result_dtype = jax.eval_shape(fn, x, y).dtype
        row: dict[str, Any] = {}
        try:
            got = np.asarray(pl.pallas_call(
                kernel, out_shape=jax.ShapeDtypeStruct(x.shape, result_dtype))(x, y))
            want = np.asarray(jax.jit(fn)(jax.device_put(x, cpu), jax.device_put(y, cpu)))
            xla_tpu = np.asarray(jax.jit(fn)(x, y))
            bad = got != want
            row = {"differing": int(bad.sum()), "of": int(bad.size),
                   "xla_tpu_differing_from_cpu": int((xla_tpu != want).sum())}
            where = np.argwhere(bad)[:4]
            row["examples"] = [{"x": str(x[i, j]), "y": str(y[i, j]), "kernel": str(got[i, j]),
                                "xla_cpu": str(want[i, j]), "xla_tpu": str(xla_tpu[i, j])}
                               for i, j in where]
        except Exception as e:  # noqa: BLE001 - a refusal is a result
            row = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        record["ops"][name] = row
        print(name, row.get("differing", row.get("error")), flush=True)
        out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
