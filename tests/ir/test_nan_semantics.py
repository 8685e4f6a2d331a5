"""NaN sign and payload where XLA's CPU code keeps them, and other answers the fuzzer found
(the expected bits are what JAX 0.10 on CPU gives for the same HLO, constant folding off)."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value

NANS32 = np.array([0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFC12345], np.uint32)


def unary(op: str, dtype: str = "f32", n: int = 4) -> str:
    return (f"HloModule m\nENTRY main {{\n  x = {dtype}[{n}] parameter(0)\n"
            f"  ROOT y = {dtype}[{n}] {op}(x)\n}}\n")


def binary(op: str, dtype: str = "f32", n: int = 4) -> str:
    return (f"HloModule m\nENTRY main {{\n  x = {dtype}[{n}] parameter(0)\n"
            f"  z = {dtype}[{n}] parameter(1)\n  ROOT y = {dtype}[{n}] {op}(x, z)\n}}\n")


def interpret(text: str, *args: np.ndarray) -> np.ndarray:
    return np.asarray(flatten_value(evaluate(parse_module(text), list(args)))[0])


def compiled(text: str, *args: np.ndarray) -> np.ndarray:
    from hlofuse.api import compile_module

    return np.asarray(compile_module(parse_module(text), "none", "cpu").run_flat(list(args))[0])


@pytest.mark.parametrize("op", ["tanh", "cosine", "sine", "erf", "log", "log-plus-one",
                                "exponential", "sqrt", "logistic", "cbrt"])
def test_interpreter_keeps_a_nan_operand(op: str) -> None:
    # NumPy's tanh drops the sign (copysign(x, tanh(rem(0, 0))) differed from XLA).
    x = NANS32.view(np.float32)
    assert interpret(unary(op), x).view(np.uint32).tolist() == NANS32.tolist()


def test_interpreter_atan2_and_pow_pick_xlas_nan() -> None:
    y, x = NANS32[[0, 2]].view(np.float32), NANS32[[1, 3]].view(np.float32)
    # atan2(y, x) with both NaN: XLA's CPU code returns x's NaN.
    assert interpret(binary("atan2", n=2), y, x).view(np.uint32).tolist() == [0xFFC00000,
                                                                              0xFFC12345]
    # pow(x, y): the NaN operand comes back, x's first; pow(NaN, 0) = pow(1, NaN) = 1.
    got = interpret(binary("power", n=4), np.array([np.nan, 2, np.nan, 1], np.float32),
                    np.array([2.5, x[1], 0, x[0]], np.float32))
    assert got.view(np.uint32).tolist() == [0x7FC00000, 0xFFC12345, 0x3F800000, 0x3F800000]


def test_max_and_min_of_zeros_and_denormals() -> None:
    x = np.array([0.0, -0.0, 4e-39, -0.0, 1.0], np.float32)
    z = np.array([-0.0, 0.0, 2e-39, -0.0, 4e-39], np.float32)
    mx = interpret(binary("maximum", n=5), x, z)
    mn = interpret(binary("minimum", n=5), x, z)
    assert np.signbit(mx).tolist() == [False, False, False, True, False]
    assert np.signbit(mn).tolist() == [True, True, False, True, False]
    assert mx[2] == 0 and mn[4] == 0  # denormals are flushed
    same = ("HloModule m\nENTRY main {\n  x = f32[2] parameter(0)\n"
            "  ROOT y = f32[2] maximum(x, x)\n}\n")
    assert interpret(same, x[2:4]).tolist() == [np.float32(4e-39), 0.0]  # XLA: max(x, x) = x
    reduce = ("HloModule m\nr {\n  a = f64[] parameter(0)\n  b = f64[] parameter(1)\n"
              "  ROOT m = f64[] minimum(a, b)\n}\nENTRY main {\n  x = f64[2,3] parameter(0)\n"
              "  i = f64[] constant(inf)\n"
              "  ROOT y = f64[2] reduce(x, i), dimensions={1}, to_apply=r\n}\n")
    d = np.array([[4e-323, 2e-323, 1e-323], [5e-324, -0.0, 3e62]])
    got = interpret(reduce, d)
    assert got.tolist() == [0.0, 0.0] and np.signbit(got).tolist() == [False, True]


@pytest.mark.needs_cc
@pytest.mark.parametrize("op", ["cosine", "erf", "log", "log-plus-one", "tanh", "sine"])
def test_compiled_code_keeps_a_nan_operand(op: str) -> None:
    # cos dropped the sign, erf flipped it, log returned a signalling NaN unquieted.
    x = np.array([*NANS32, 0x7F800001, 0x7FC00000, 0x7FC00000, 0x7FC00000],
                 np.uint32).view(np.float32)
    want = [*NANS32.tolist(), 0x7FC00001, 0x7FC00000, 0x7FC00000, 0x7FC00000]
    assert compiled(unary(op, n=8), x).view(np.uint32).tolist() == want


@pytest.mark.needs_cc
def test_compiled_pow_returns_the_nan_operand() -> None:
    x = np.array([NANS32[1], 2, NANS32[3], 1], np.uint32)
    x = np.where(np.arange(4) % 2 == 0, x, 0).astype(np.uint32).view(np.float32)
    x[1], x[3] = 2.0, 1.0
    y = np.array([2.5, np.nan, 0, np.nan], np.float32)
    y[1] = NANS32[3:4].view(np.float32)[0]
    got = compiled(binary("power"), x, y).view(np.uint32).tolist()
    assert got == [0xFFC00000, 0xFFC12345, 0x3F800000, 0x3F800000]
