"""Float dots in XLA's CPU order: per element, from +0, ascending contracting index, one fused
multiply-add per position; in the interpreter, the runtime's dot and the emulated fma alike.

The expected bits are what XLA's CPU code gives (JAX 0.10.2 on x86-64 Linux, constant folding
and the algebraic simplifier off, as tests/fuzz runs its oracle) for these shapes:
- fma: (1 + e) * (1 + e) - (1 + 2e) is e^2, where a separate multiply rounds it away;
- an accumulator at -inf plus a finite product too large for the type stays -inf (fuzz seed
  1361; a separate multiply overflows to +inf and the sum is NaN);
- ascending order: MAX + MAX - MAX overflows to inf on the way (descending would give MAX).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from hlofuse.ir.parser import parse_module
from hlofuse.reference.dot import fma_f32, fma_f64
from hlofuse.reference.interpreter import evaluate, flatten_value

MAX32, MAX64 = float(np.finfo(np.float32).max), float(np.finfo(np.float64).max)


def _dot_module(dtype: str, lhs: tuple[int, int], rhs: tuple[int, int]) -> str:
    return (f"HloModule m\n\nENTRY main {{\n"
            f"  a = {dtype}[{lhs[0]},{lhs[1]}] parameter(0)\n"
            f"  b = {dtype}[{rhs[0]},{rhs[1]}] parameter(1)\n"
            f"  ROOT d = {dtype}[{lhs[0]},{rhs[1]}] dot(a, b), lhs_contracting_dims={{1}}, "
            f"rhs_contracting_dims={{0}}\n}}\n")


def _f32_case() -> tuple[np.ndarray, np.ndarray, list[int]]:
    e = 2.0**-12
    a = np.zeros((5, 4), np.float32)
    b = np.zeros((4, 5), np.float32)
    a[0, :2], b[:2, 0] = [1, 1 + e], [-(1 + 2 * e), 1 + e]
    a[1, :2], b[:2, 1] = [-np.inf, 2], [1, MAX32]
    a[2, :3], b[:3, 2] = [MAX32, MAX32, -MAX32], [1, 1, 1]
    a[3], b[:, 3] = [1.5, -2.25, 3.0, 0.5], [-0.5, 4.0, 0.25, -8.0]
    a[4, :2], b[:, 4] = [-0.0, -0.0], [1, 1, 1, 1]
    # The diagonal of XLA's result, as bits: 2^-24, -inf, inf, -13, +0.
    return a, b, [0x33800000, 0xFF800000, 0x7F800000, 0xC1500000, 0x0]


def _f64_case() -> tuple[np.ndarray, np.ndarray, list[int]]:
    e = 2.0**-27
    a = np.array([[1, 1 + e, 0], [MAX64, MAX64, -MAX64]], np.float64)
    b = np.array([[-(1 + 2 * e), 1, -np.inf, 2, -0.5], [1 + e, 1, MAX64, 3, 4],
                  [0, 1, 0, 5, 0.25]], np.float64)
    bits = [0x3C90000000000000, 0x4000000001000000, 0xFFF0000000000000, 0x4014000001800000,
            0x400C000004000000, 0xFFF0000000000000, 0x7FF0000000000000, 0xFFF0000000000000,
            0x7FF0000000000000, 0x7FF0000000000000]
    return a, b, bits


def _interpret(text: str, *args: np.ndarray) -> np.ndarray:
    return np.asarray(flatten_value(evaluate(parse_module(text), list(args)))[0])


def test_fma_f32_rounds_once() -> None:
    e = np.float32(2.0**-12)
    one = np.float32(1)
    got = fma_f32(np.array([one + e]), np.array([one + e]), np.array([-(one + 2 * e)]))
    assert got.tolist() == [2.0**-24]
    got = fma_f32(np.array([2], np.float32), np.array([MAX32], np.float32),
                  np.array([-np.inf], np.float32))
    assert got.tolist() == [-np.inf]
    # An exact product beyond f32 that the addend brings back into range.
    got = fma_f32(np.array([2], np.float32), np.array([MAX32], np.float32),
                  np.array([-MAX32], np.float32))
    assert got.tolist() == [MAX32]


def test_fma_f64_rounds_once_and_handles_extremes() -> None:
    e = 2.0**-27
    got = fma_f64(np.array([1 + e, 2.0, 2.0, 1e-300, np.inf, 3.0]),
                  np.array([1 + e, MAX64, MAX64, 1e-300, 0.0, 1e308]),
                  np.array([-(1 + 2 * e), -np.inf, -MAX64, 0.0, 1.0, -MAX64]))
    assert got[:4].tolist() == [2.0**-54, -np.inf, MAX64, 0.0]
    assert np.isnan(got[4])
    assert got[5] == float(3 * Fraction(1e308) - Fraction(MAX64))  # 3e308 would overflow


def test_f32_dot_interpreter_matches_xla() -> None:
    a, b, bits = _f32_case()
    got = _interpret(_dot_module("f32", (5, 4), (4, 5)), a, b)
    assert np.diagonal(got).view(np.uint32).tolist() == bits


def test_f64_dot_interpreter_matches_xla() -> None:
    a, b, bits = _f64_case()
    got = _interpret(_dot_module("f64", (2, 3), (3, 5)), a, b)
    assert got.view(np.uint64).ravel().tolist() == bits


def test_f16_dot_computes_in_f32() -> None:
    # 2048 + 1 + 1 in f16 steps would be 2048 (ulp 2); in f32, rounded once, 2050.
    a = np.array([[2048, 1, 1]], np.float16)
    b = np.ones((3, 1), np.float16)
    assert _interpret(_dot_module("f16", (1, 3), (3, 1)), a, b).tolist() == [[2050.0]]


@pytest.mark.needs_cc
@pytest.mark.parametrize("strategy", ["none", "xla"])
def test_compiled_dot_matches_xla(strategy: str) -> None:
    from hlofuse.api import compile_module

    a, b, bits = _f32_case()
    executable = compile_module(parse_module(_dot_module("f32", (5, 4), (4, 5))), strategy,
                                "cpu")
    got = np.asarray(executable.run_flat([a, b])[0])
    assert np.diagonal(got).view(np.uint32).tolist() == bits
    a64, b64, bits64 = _f64_case()
    executable = compile_module(parse_module(_dot_module("f64", (2, 3), (3, 5))), strategy,
                                "cpu")
    got = np.asarray(executable.run_flat([a64, b64])[0])
    assert got.view(np.uint64).ravel().tolist() == bits64
