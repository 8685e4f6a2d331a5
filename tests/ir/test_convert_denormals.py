"""convert between bf16 and f32 keeps denormals (XLA's CPU code converts with integer work on
the bits, fuzz seed 3667), where other float converts read them as zeros (DAZ); in the
interpreter and the compiled code alike. Expected bits: XLA's CPU code (JAX 0.10.2)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value

STORAGE = {"bf16": np.uint16, "f16": np.uint16, "f32": np.uint32, "f64": np.uint64}
VIEW = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32, "f64": np.float64}
BF16_IN = [0x8010, 0x0001, 0x3F80]  # -denormal, +smallest denormal, 1
F32_IN = [0x80100000, 0x00000001, 0x3F800000]
CASES = [
    ("bf16", "f32", BF16_IN, [0x80100000, 0x00010000, 0x3F800000]),
    ("f32", "bf16", F32_IN, [0x8010, 0x0000, 0x3F80]),
    ("bf16", "f64", BF16_IN, [0x8000000000000000, 0, 0x3FF0000000000000]),
    ("f32", "f64", F32_IN, [0x8000000000000000, 0, 0x3FF0000000000000]),
    ("bf16", "f16", BF16_IN, [0x8000, 0x0000, 0x3C00]),
]


def _run(src: str, dst: str, bits: list[int], strategy: str | None) -> list[int]:
    text = (f"HloModule m\n\nENTRY e {{\n  p = {src}[3] parameter(0)\n"
            f"  ROOT c = {dst}[3] convert(p)\n}}\n")
    x = np.array(bits, STORAGE[src]).view(VIEW[src])
    if strategy is None:
        out = np.asarray(flatten_value(evaluate(parse_module(text), [x]))[0])
    else:
        from hlofuse.api import compile_module

        out = np.asarray(compile_module(parse_module(text), strategy, "cpu").run_flat([x])[0])
    return [int(v) for v in out.view(STORAGE[dst])]


@pytest.mark.parametrize("src,dst,bits,expected", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_interpreter_convert_denormals(src: str, dst: str, bits: list[int],
                                       expected: list[int]) -> None:
    assert _run(src, dst, bits, None) == expected


@pytest.mark.needs_cc
@pytest.mark.parametrize("src,dst,bits,expected", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_compiled_convert_denormals(src: str, dst: str, bits: list[int],
                                    expected: list[int]) -> None:
    assert _run(src, dst, bits, "none") == expected
