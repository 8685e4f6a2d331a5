"""top-k's order on every element type, in the interpreter and the compiled code: floats in
their total order (-NaN < -inf < ... < -0 < +0 < ... < inf < +NaN; bf16 too, fuzz seed 1237),
integers by value (u64 above 2^63 included), ties to the lower index.

Expected indices are what XLA's CPU code gives (JAX 0.10.2, `lax.top_k`).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value

# Rows 3 and 4 of fuzz seed 1237 (bf16 bits): a NaN with its sign set, and one without.
BF16_ROWS = np.array([[0xFFC0, 0x3C0F, 0xBD8A, 0x3D9D], [0xBC34, 0x7FC0, 0xBEB0, 0x41AB]],
                     np.uint16).view(ml_dtypes.bfloat16)
BF16_LARGEST = [[3, 1, 2], [1, 3, 0]]
U64 = np.array([[1, 2**63 + 5, 2**64 - 1, 7, 2**63]], np.uint64)
U64_LARGEST = [[2, 1, 4]]
S64 = np.array([[-5, 2**62, -(2**63), 3, 2**63 - 1]], np.int64)
S64_LARGEST = [[4, 1, 3]]


def _topk_module(dtype: str, rows: int, n: int, k: int, largest: bool = True) -> str:
    return (f"HloModule m\n\nENTRY main {{\n  x = {dtype}[{rows},{n}] parameter(0)\n"
            f"  ROOT t = ({dtype}[{rows},{k}], s32[{rows},{k}]) topk(x), k={k}, "
            f"largest={'true' if largest else 'false'}\n}}\n")


CASES = [("bf16", BF16_ROWS, BF16_LARGEST), ("u64", U64, U64_LARGEST),
         ("s64", S64, S64_LARGEST)]


@pytest.mark.parametrize("dtype,x,expected", CASES, ids=[c[0] for c in CASES])
def test_interpreter_topk_order(dtype: str, x: np.ndarray, expected: list[list[int]]) -> None:
    text = _topk_module(dtype, x.shape[0], x.shape[1], 3)
    values, indices = flatten_value(evaluate(parse_module(text), [x]))
    assert np.asarray(indices).tolist() == expected
    want = np.take_along_axis(x, np.asarray(expected), axis=-1)
    assert np.asarray(values).view(np.uint8).tobytes() == want.view(np.uint8).tobytes()


def test_interpreter_topk_smallest_puts_negative_nan_first() -> None:
    text = _topk_module("bf16", 2, 4, 2, largest=False)
    _, indices = flatten_value(evaluate(parse_module(text), [BF16_ROWS]))
    assert np.asarray(indices).tolist() == [[0, 2], [2, 0]]


@pytest.mark.needs_cc
@pytest.mark.parametrize("dtype,x,expected", CASES, ids=[c[0] for c in CASES])
def test_compiled_topk_order(dtype: str, x: np.ndarray, expected: list[list[int]]) -> None:
    from hlofuse.api import compile_module

    text = _topk_module(dtype, x.shape[0], x.shape[1], 3)
    _, indices = compile_module(parse_module(text), "none", "cpu").run_flat([x])
    assert np.asarray(indices).tolist() == expected
