"""The reference interpreter, op by op, against XLA's operation semantics.

Three kinds of tests:
- hand-checked tables for every op in OP_TABLE (the completeness test fails if an op has none and
  is not in UNSUPPORTED), written down from XLA's documented semantics;
- for every element-wise op and every element type its shape rule accepts, a Python scalar
  oracle over edge values (exact where XLA's result is a single correctly rounded operation,
  within a tolerance for transcendental functions);
- data-movement ops for every element type.
Every module is also printed, parsed back and evaluated again, with bit-identical results.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import ml_dtypes
import numpy as np
import pytest

from hlofuse.ir.attrs import PaddingDim, SliceDim, Window
from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.dtypes import ARRAY_DTYPES, DType
from hlofuse.ir.hlo import Computation, Instruction, make_module
from hlofuse.ir.ops import ELEMENTWISE_OPS, OP_TABLE, Op
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.ir.shape_inference.checks import ShapeError
from hlofuse.ir.shapes import Shape
from hlofuse.ir.verifier import verify
from hlofuse.reference.interpreter import Interpreter, InterpreterError, Value, evaluate

# Ops the interpreter refuses, and why. Each must raise InterpreterError naming the op.
UNSUPPORTED: dict[Op, str] = {
    Op.RNG_BIT_GENERATOR: "its bits are defined by XLA's implementation of each algorithm; "
                          "hlofuse expands random numbers into Threefry arithmetic instead",
}

COVERED: set[Op] = set()


def covers(*ops: Op) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Record that the decorated test holds hand-checked values for `ops`."""
    COVERED.update(ops)
    return lambda fn: fn


BF16 = np.dtype(ml_dtypes.bfloat16)
INF, NAN = math.inf, math.nan
S32_MIN, S32_MAX = -(2**31), 2**31 - 1
S64_MIN, S64_MAX = -(2**63), 2**63 - 1


# --- running one op -----------------------------------------------------------------------


class Ctx:
    """Builds the called computations of one module with module-unique names."""

    def __init__(self) -> None:
        self.names = NameUniquer()

    def computation(self, name: str, params: Sequence[Shape],
                    body: Callable[[ComputationBuilder, list[Instruction]], Instruction]
                    ) -> Computation:
        b = ComputationBuilder(name, self.names)
        ps = [b.parameter(i, s) for i, s in enumerate(params)]
        return b.build(body(b, ps))

    def binary(self, op: Op, dtype: DType, name: str = "reducer") -> Computation:
        scalar = Shape.scalar(dtype)
        return self.computation(name, [scalar, scalar], lambda b, ps: b.add(op, ps))


def _shape_of(value: Value) -> Shape:
    if isinstance(value, tuple):
        return Shape.tuple_of([_shape_of(v) for v in value])
    assert isinstance(value, np.ndarray | np.generic)
    array = np.asarray(value)
    return Shape.array(DType.from_numpy(array.dtype), array.shape)


def run_built(build: Callable[[Ctx, ComputationBuilder, list[Instruction]], Instruction],
              *args: Value) -> Value:
    """Evaluate the module `build` makes over parameters shaped like `args`; the module must
    verify and evaluate bit-identically after a print/parse round trip."""
    ctx = Ctx()
    b = ComputationBuilder("main", ctx.names)
    params = [b.parameter(i, _shape_of(a)) for i, a in enumerate(args)]
    module = make_module("op_test", b.build(build(ctx, b, params)))
    verify(module)
    result = evaluate(module, list(args))
    again = parse_module(module_text(module))
    verify(again)
    assert_same(evaluate(again, list(args)), result)
    return result


def run(op: Op, *args: Value, attrs: dict[str, object] | None = None,
        shape: Shape | None = None,
        calls: Callable[[Ctx], Sequence[Computation]] | None = None) -> Value:
    return run_built(lambda ctx, b, ps: b.add(op, ps, attrs=attrs, shape=shape,
                                              calls=calls(ctx) if calls else ()), *args)


def a(values: object, dtype: object) -> np.ndarray:
    return np.array(values, dtype=np.dtype(dtype))  # type: ignore[call-overload]


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype == BF16


def assert_same(actual: Value, expected: Value) -> None:
    """Same dtype and shape; bit-exact values, except that any NaN equals any NaN."""
    if isinstance(expected, tuple) or expected is None:
        assert type(actual) is type(expected)
        if isinstance(expected, tuple):
            assert isinstance(actual, tuple) and len(actual) == len(expected)
            for x, y in zip(actual, expected):
                assert_same(x, y)
        return
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype}, expected {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape}, expected {expected.shape}"
    if not _is_float(expected.dtype):
        np.testing.assert_array_equal(actual, expected)
        return
    x, y = actual.astype(np.float64), expected.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(x), np.isnan(y), err_msg=f"{actual} vs {expected}")
    keep = ~np.isnan(y)
    np.testing.assert_array_equal(x[keep], y[keep])
    np.testing.assert_array_equal(np.signbit(x[keep]), np.signbit(y[keep]),
                                  err_msg=f"signs of zeros: {actual} vs {expected}")


def check(op: Op, args: Sequence[np.ndarray], expected: np.ndarray, **kwargs: object) -> None:
    assert_same(run(op, *args, **kwargs), expected)  # type: ignore[arg-type]


# --- integer arithmetic ---------------------------------------------------------------------


@covers(Op.ADD, Op.SUBTRACT, Op.MULTIPLY, Op.NEGATE, Op.ABS)
def test_integer_wrap_around() -> None:
    check(Op.ADD, [a([127, -128, 100], "i1"), a([1, -1, 100], "i1")], a([-128, 127, -56], "i1"))
    check(Op.ADD, [a([255, 200], "u1"), a([1, 100], "u1")], a([0, 44], "u1"))
    check(Op.SUBTRACT, [a([0, 5], "u4"), a([1, 7], "u4")], a([2**32 - 1, 2**32 - 2], "u4"))
    check(Op.MULTIPLY, [a([65536, 46341], "i4"), a([65536, 46341], "i4")],
          a([0, -2147479015], "i4"))
    check(Op.MULTIPLY, [a([-32768], "i2"), a([-1], "i2")], a([-32768], "i2"))
    check(Op.MULTIPLY, [a([2**32 + 1], "u8"), a([2**32 + 1], "u8")], a([2**33 + 1], "u8"))
    check(Op.NEGATE, [a([S64_MIN, 5], "i8")], a([S64_MIN, -5], "i8"))
    check(Op.NEGATE, [a([1, 0], "u1")], a([255, 0], "u1"))
    check(Op.ABS, [a([-128, -5, 7], "i1")], a([-128, 5, 7], "i1"))
    check(Op.ABS, [a([200], "u1")], a([200], "u1"))


@covers(Op.ADD, Op.SUBTRACT, Op.MULTIPLY, Op.NEGATE, Op.ABS)
def test_float_arithmetic_special_values() -> None:
    f = "f4"
    check(Op.ADD, [a([-0.0, -0.0, INF, 3e38], f), a([-0.0, 0.0, -INF, 3e38], f)],
          a([-0.0, 0.0, NAN, INF], f))
    check(Op.SUBTRACT, [a([INF, 0.0, 1.0], f), a([INF, 0.0, 1.0], f)], a([NAN, 0.0, 0.0], f))
    check(Op.MULTIPLY, [a([0.0, -2.0, 1e20], f), a([INF, 0.0, 1e20], f)], a([NAN, -0.0, INF], f))
    check(Op.NEGATE, [a([0.0, -INF, NAN], f)], a([-0.0, INF, NAN], f))
    check(Op.ABS, [a([-0.0, -INF, -1.5], f)], a([0.0, INF, 1.5], f))


@covers(Op.ADD, Op.MULTIPLY, Op.MAXIMUM, Op.MINIMUM)
def test_pred_arithmetic_is_logic() -> None:
    x, y = a([True, True, False, False], "?"), a([True, False, True, False], "?")
    check(Op.ADD, [x, y], a([True, True, True, False], "?"))
    check(Op.MULTIPLY, [x, y], a([True, False, False, False], "?"))
    check(Op.MAXIMUM, [x, y], a([True, True, True, False], "?"))
    check(Op.MINIMUM, [x, y], a([True, False, False, False], "?"))


@covers(Op.DIVIDE, Op.REMAINDER)
def test_integer_division_truncates_and_follows_xla_at_zero_and_overflow() -> None:
    x = a([7, -7, 7, -7, 5, -5, S32_MIN, S32_MIN, 0], "i4")
    y = a([2, 2, -2, -2, 0, 0, -1, 1, 0], "i4")
    check(Op.DIVIDE, [x, y], a([3, -3, -3, 3, -1, -1, S32_MIN, S32_MIN, -1], "i4"))
    check(Op.REMAINDER, [x, y], a([1, -1, 1, -1, 5, -5, 0, 0, 0], "i4"))
    check(Op.DIVIDE, [a([7, 0], "u4"), a([0, 0], "u4")], a([2**32 - 1, 2**32 - 1], "u4"))
    check(Op.REMAINDER, [a([7, 0], "u4"), a([0, 0], "u4")], a([7, 0], "u4"))
    check(Op.DIVIDE, [a([-128, 200 - 256], "i1"), a([-1, 7], "i1")], a([-128, -8], "i1"))
    check(Op.REMAINDER, [a([-128], "i1"), a([-1], "i1")], a([0], "i1"))
    check(Op.DIVIDE, [a([200], "u1"), a([7], "u1")], a([28], "u1"))
    check(Op.REMAINDER, [a([200], "u1"), a([7], "u1")], a([4], "u1"))
    check(Op.DIVIDE, [a([S64_MIN, S64_MAX], "i8"), a([-1, 0], "i8")], a([S64_MIN, -1], "i8"))


@covers(Op.DIVIDE, Op.REMAINDER)
def test_float_division_and_remainder() -> None:
    f = "f4"
    check(Op.DIVIDE, [a([1.0, -1.0, 0.0, 1.0, 1.0], f), a([0.0, 0.0, 0.0, -0.0, 3.0], f)],
          a([INF, -INF, NAN, -INF, np.float32(1) / np.float32(3)], f))
    check(Op.REMAINDER, [a([-7.5, 7.5, 1.0, INF, 1.0, 5.25], f),
                         a([2.0, -2.0, 0.0, 1.0, INF, -1.5], f)],
          a([-1.5, 1.5, NAN, NAN, 1.0, 0.75], f))
    check(Op.REMAINDER, [a([-7.5], "f2"), a([2.0], "f2")], a([-1.5], "f2"))


@covers(Op.POWER)
def test_integer_power() -> None:
    base = a([2, 3, 1, -1, -1, 0, 0, 2, 2, -2, 5], "i4")
    exponent = a([10, -1, -5, -1, -2, 0, -1, 31, 32, 3, 0], "i4")
    # XLA: a negative exponent gives 1 for base 1 and 0 otherwise, even for base -1.
    check(Op.POWER, [base, exponent], a([1024, 0, 1, 0, 0, 1, 0, S32_MIN, 0, -8, 1], "i4"))
    check(Op.POWER, [a([3, 2, 0], "u1"), a([5, 8, 0], "u1")], a([243, 0, 1], "u1"))
    check(Op.POWER, [a([3], "i8"), a([40], "i8")], a([3**40 % 2**64], "u8").view("i8"))


@covers(Op.POWER)
def test_float_power() -> None:
    f = "f4"
    check(Op.POWER, [a([0.0, -8.0, NAN, 1.0, -2.0, 4.0, 0.25], f),
                     a([-1.0, 1 / 3, 0.0, NAN, 3.0, 0.5, -0.5], f)],
          a([INF, NAN, 1.0, 1.0, -8.0, 2.0, 2.0], f))


# --- shifts and bits ------------------------------------------------------------------------


@covers(Op.SHIFT_LEFT, Op.SHIFT_RIGHT_LOGICAL, Op.SHIFT_RIGHT_ARITHMETIC)
def test_shifts_past_the_width_and_negative_amounts() -> None:
    i = "i4"
    check(Op.SHIFT_LEFT, [a([1, 1, 1, 1, -1], i), a([31, 32, 33, -1, 4], i)],
          a([S32_MIN, 0, 0, 0, -16], i))
    check(Op.SHIFT_RIGHT_LOGICAL, [a([-8, -8, -8, 16, -1], i), a([28, 31, 32, -1, 0], i)],
          a([15, 1, 0, 0, -1], i))
    check(Op.SHIFT_RIGHT_ARITHMETIC, [a([-8, -8, 8, -8, S32_MIN], i), a([1, 40, 40, -1, 31], i)],
          a([-4, -1, 0, -1, -1], i))
    check(Op.SHIFT_LEFT, [a([1, 1, 3], "u1"), a([7, 8, 255], "u1")], a([128, 0, 0], "u1"))
    check(Op.SHIFT_RIGHT_LOGICAL, [a([128, 255], "u1"), a([7, 8], "u1")], a([1, 0], "u1"))
    # Arithmetic shifts fill with the top bit whatever the type's signedness.
    check(Op.SHIFT_RIGHT_ARITHMETIC, [a([128, 64, 200], "u1"), a([1, 9, 200], "u1")],
          a([192, 0, 255], "u1"))
    check(Op.SHIFT_LEFT, [a([1, 1], "i8"), a([63, 64], "i8")], a([S64_MIN, 0], "i8"))
    check(Op.SHIFT_RIGHT_ARITHMETIC, [a([S64_MIN], "i8"), a([2**63 - 1], "i8")], a([-1], "i8"))


@covers(Op.AND, Op.OR, Op.XOR, Op.NOT)
def test_bitwise() -> None:
    check(Op.AND, [a([12, -1], "i4"), a([10, 5], "i4")], a([8, 5], "i4"))
    check(Op.OR, [a([12, S32_MIN], "i4"), a([10, 1], "i4")], a([14, S32_MIN + 1], "i4"))
    check(Op.XOR, [a([12, -1], "i4"), a([10, 0], "i4")], a([6, -1], "i4"))
    check(Op.NOT, [a([12, 0, -1], "i4")], a([-13, -1, 0], "i4"))
    check(Op.NOT, [a([0, 255], "u1")], a([255, 0], "u1"))
    x, y = a([True, True, False, False], "?"), a([True, False, True, False], "?")
    check(Op.AND, [x, y], a([True, False, False, False], "?"))
    check(Op.OR, [x, y], a([True, True, True, False], "?"))
    check(Op.XOR, [x, y], a([False, True, True, False], "?"))
    check(Op.NOT, [x], a([False, False, True, True], "?"))


@covers(Op.POPCNT, Op.CLZ)
@pytest.mark.parametrize("dtype, values, popcnt, clz", [
    ("i1", [-1, 1, 0, -128, 127], [8, 1, 0, 1, 7], [0, 7, 8, 0, 1]),
    ("u1", [255, 128, 3], [8, 1, 2], [0, 0, 6]),
    ("i2", [-1, 1, 240], [16, 1, 4], [0, 15, 8]),
    ("u2", [0, 0x8000], [0, 1], [16, 0]),
    ("i4", [65536, -1, 0], [1, 32, 0], [15, 0, 32]),
    ("u4", [2**31, 1], [1, 1], [0, 31]),
    ("i8", [-1, 1, 2**40], [64, 1, 1], [0, 63, 23]),
    ("u8", [2**64 - 1, 0, 2**63], [64, 0, 1], [0, 64, 0]),
])
def test_popcnt_and_count_leading_zeros(dtype: str, values: list[int], popcnt: list[int],
                                        clz: list[int]) -> None:
    check(Op.POPCNT, [a(values, dtype)], a(popcnt, dtype))
    check(Op.CLZ, [a(values, dtype)], a(clz, dtype))


# --- comparisons, selection -----------------------------------------------------------------


@covers(Op.COMPARE)
def test_float_comparisons_follow_ieee() -> None:
    x = a([NAN, NAN, NAN, -0.0, 1.0, -INF], "f4")
    y = a([NAN, 1.0, INF, 0.0, NAN, -INF], "f4")
    expected = {
        "EQ": [0, 0, 0, 1, 0, 1], "NE": [1, 1, 1, 0, 1, 0], "LT": [0, 0, 0, 0, 0, 0],
        "LE": [0, 0, 0, 1, 0, 1], "GT": [0, 0, 0, 0, 0, 0], "GE": [0, 0, 0, 1, 0, 1],
    }
    for direction, values in expected.items():
        for kind in (None, "FLOAT"):
            attrs = {"direction": direction} | ({"type": kind} if kind else {})
            check(Op.COMPARE, [x, y], a(values, "?"), attrs=attrs)


@covers(Op.COMPARE)
@pytest.mark.parametrize("dtype", ["f2", BF16, "f4", "f8"], ids=["f16", "bf16", "f32", "f64"])
def test_total_order_comparisons(dtype: object) -> None:
    """-NaN < -inf < -1 < -0.0 < +0.0 < 1 < inf < +NaN, and a NaN equals itself."""
    neg_nan = -np.abs(a([NAN], dtype))
    x = np.concatenate([a([NAN, NAN, NAN, -0.0, 1.0, -INF], dtype), neg_nan])
    y = a([NAN, 1.0, INF, 0.0, NAN, -INF, -INF], dtype)
    assert np.signbit(x[-1].astype(np.float32))
    expected = {
        "EQ": [1, 0, 0, 0, 0, 1, 0], "NE": [0, 1, 1, 1, 1, 0, 1], "LT": [0, 0, 0, 1, 1, 0, 1],
        "LE": [1, 0, 0, 1, 1, 1, 1], "GT": [0, 1, 1, 0, 0, 0, 0], "GE": [1, 1, 1, 0, 0, 1, 0],
    }
    for direction, values in expected.items():
        check(Op.COMPARE, [x, y], a(values, "?"),
              attrs={"direction": direction, "type": "TOTALORDER"})


@covers(Op.COMPARE)
def test_integer_comparisons_use_the_type_signedness() -> None:
    check(Op.COMPARE, [a([-1, S32_MIN], "i4"), a([1, S32_MAX], "i4")], a([True, True], "?"),
          attrs={"direction": "LT"})
    check(Op.COMPARE, [a([-1, S32_MIN], "i4"), a([1, S32_MAX], "i4")], a([True, True], "?"),
          attrs={"direction": "LT", "type": "SIGNED"})
    check(Op.COMPARE, [a([2**32 - 1, 2**31], "u4"), a([1, 2**31 - 1], "u4")],
          a([False, False], "?"), attrs={"direction": "LT", "type": "UNSIGNED"})
    check(Op.COMPARE, [a([False, True], "?"), a([True, True], "?")], a([True, False], "?"),
          attrs={"direction": "LT"})


@covers(Op.SELECT)
def test_select_with_scalar_and_array_predicates() -> None:
    on_true, on_false = a([1.0, NAN], "f4"), a([3.0, 4.0], "f4")
    check(Op.SELECT, [a(True, "?"), on_true, on_false], on_true)
    check(Op.SELECT, [a(False, "?"), on_true, on_false], on_false)
    check(Op.SELECT, [a([False, True], "?"), on_true, on_false], a([3.0, NAN], "f4"))
    check(Op.SELECT, [a([True, False], "?"), a([1, 2], "u8"), a([3, 4], "u8")], a([1, 4], "u8"))


@covers(Op.CLAMP)
def test_clamp_with_scalar_and_array_bounds() -> None:
    check(Op.CLAMP, [a(0, "i4"), a([-1, 5, 11], "i4"), a(10, "i4")], a([0, 5, 10], "i4"))
    check(Op.CLAMP, [a(-1.0, "f4"), a([NAN, -2.0, 0.5, 3.0], "f4"), a(1.0, "f4")],
          a([NAN, -1.0, 0.5, 1.0], "f4"))
    check(Op.CLAMP, [a([0, 0, 5], "u2"), a([3, 1, 4], "u2"), a([1, 1, 6], "u2")],
          a([1, 1, 5], "u2"))


# --- rounding, sign, classification ---------------------------------------------------------


@covers(Op.ROUND_NEAREST_AFZ, Op.ROUND_NEAREST_EVEN, Op.FLOOR, Op.CEIL)
def test_rounding() -> None:
    x = a([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.4, -0.0, NAN, INF, 8388609.0], "f4")
    check(Op.ROUND_NEAREST_AFZ, [x],
          a([1, 2, 3, -1, -2, -3, 0, -0.0, -0.0, NAN, INF, 8388609.0], "f4"))
    check(Op.ROUND_NEAREST_EVEN, [x],
          a([0, 2, 2, -0.0, -2, -2, 0, -0.0, -0.0, NAN, INF, 8388609.0], "f4"))
    for dtype in ("f2", BF16, "f8"):
        y = a([2.5, -0.5, -0.25], dtype)
        check(Op.ROUND_NEAREST_AFZ, [y], a([3, -1, -0.0], dtype))
        check(Op.ROUND_NEAREST_EVEN, [y], a([2, -0.0, -0.0], dtype))
    z = a([-1.5, 1.5, -0.0, -0.5, 0.0], "f4")
    check(Op.FLOOR, [z], a([-2, 1, -0.0, -1, 0.0], "f4"))
    check(Op.CEIL, [z], a([-1, 2, -0.0, -0.0, 0.0], "f4"))


@covers(Op.SIGN, Op.IS_FINITE)
def test_sign_and_is_finite() -> None:
    check(Op.SIGN, [a([-0.0, 0.0, NAN, -5.0, INF, -INF, 1e-3], "f4")],
          a([-0.0, 0.0, NAN, -1, 1, -1, 1], "f4"))
    check(Op.SIGN, [a([-0.0, -2.0], BF16)], a([-0.0, -1.0], BF16))
    check(Op.SIGN, [a([-128, 0, 5], "i1")], a([-1, 0, 1], "i1"))
    check(Op.SIGN, [a([0, 200], "u1")], a([0, 1], "u1"))
    check(Op.IS_FINITE, [a([INF, -INF, NAN, 0.0, 3e38], "f4")],
          a([False, False, False, True, True], "?"))
    check(Op.IS_FINITE, [a([65504, INF], "f2")], a([True, False], "?"))


# --- transcendental functions ---------------------------------------------------------------


@covers(Op.EXPONENTIAL, Op.EXPONENTIAL_MINUS_ONE, Op.LOG, Op.LOG_PLUS_ONE, Op.SQRT, Op.RSQRT,
        Op.CBRT, Op.SINE, Op.COSINE, Op.TAN, Op.TANH, Op.LOGISTIC, Op.ERF, Op.ATAN2)
def test_transcendental_special_values() -> None:
    f = "f4"
    check(Op.EXPONENTIAL, [a([0.0, -INF, INF, NAN], f)], a([1.0, 0.0, INF, NAN], f))
    check(Op.EXPONENTIAL_MINUS_ONE, [a([0.0, -0.0, -INF], f)], a([0.0, -0.0, -1.0], f))
    check(Op.LOG, [a([1.0, 0.0, -1.0, INF], f)], a([0.0, -INF, NAN, INF], f))
    check(Op.LOG_PLUS_ONE, [a([0.0, -1.0, -2.0], f)], a([0.0, -INF, NAN], f))
    check(Op.SQRT, [a([4.0, -0.0, -1.0, INF], f)], a([2.0, -0.0, NAN, INF], f))
    check(Op.RSQRT, [a([4.0, 0.0, INF], f)], a([0.5, INF, 0.0], f))
    check(Op.CBRT, [a([-8.0, 27.0, -0.0], f)], a([-2.0, 3.0, -0.0], f))
    check(Op.SINE, [a([0.0, -0.0, INF], f)], a([0.0, -0.0, NAN], f))
    check(Op.COSINE, [a([0.0, INF], f)], a([1.0, NAN], f))
    check(Op.TAN, [a([0.0, -0.0], f)], a([0.0, -0.0], f))
    check(Op.TANH, [a([0.0, INF, -INF, 20.0], f)], a([0.0, 1.0, -1.0, 1.0], f))
    check(Op.LOGISTIC, [a([0.0, INF, -INF], f)], a([0.5, 1.0, 0.0], f))
    check(Op.ERF, [a([0.0, INF, -INF], f)], a([0.0, 1.0, -1.0], f))
    check(Op.ATAN2, [a([1.0, 0.0, -0.0, 0.0, NAN], f), a([1.0, -1.0, -1.0, 1.0, 1.0], f)],
          a([0.7853982, 3.1415927, -3.1415927, 0.0, NAN], f))
    check(Op.EXPONENTIAL, [a([0.0, 12.0], "f2")], a([1.0, INF], "f2"))  # e^12 > 65504


# --- conversions ----------------------------------------------------------------------------


def _convert(x: np.ndarray, to: object) -> Value:
    target = DType.from_numpy(to)
    return run(Op.CONVERT, x, shape=Shape.array(target, x.shape))


@covers(Op.CONVERT)
def test_float_to_int_saturates_and_maps_nan_to_zero() -> None:
    x = a([NAN, INF, -INF, 3e9, -3e9, 2.9, -2.9, -0.5, 2147483520.0, 2147483648.0], "f4")
    assert_same(_convert(x, "i4"), a([0, S32_MAX, S32_MIN, S32_MAX, S32_MIN, 2, -2, 0,
                                      2147483520, S32_MAX], "i4"))
    y = a([NAN, INF, -INF, 3e9, -3e9, 2.9, -2.9, -0.5, 255.9, 256.0], "f4")
    assert_same(_convert(y, "u1"), a([0, 255, 0, 255, 0, 2, 0, 0, 255, 255], "u1"))
    assert_same(_convert(a([1e19, -1e19, 2.0**63 - 1024], "f8"), "i8"),
                a([S64_MAX, S64_MIN, 2**63 - 1024], "i8"))
    assert_same(_convert(a([-1.0, 2.0**64, 1e19], "f4"), "u8"),
                a([0, 2**64 - 1, 9999999980506447872], "u8"))
    assert_same(_convert(a([300, -300, 65504, NAN], "f2"), "i1"), a([127, -128, 127, 0], "i1"))
    assert_same(_convert(a([70000, -1, 1.5], BF16), "u2"), a([65535, 0, 1], "u2"))


@covers(Op.CONVERT)
def test_conversions_round_to_nearest_even_and_wrap() -> None:
    assert_same(_convert(a([65504, 65519, 65520, 2049], "i4"), "f2"),
                a([65504, 65504, INF, 2048], "f2"))
    assert_same(_convert(a([257, 259, 2**24 + 1], "i4"), BF16), a([256, 260, 2**24], BF16))
    assert_same(_convert(a([65520.0, 1e-8], "f4"), "f2"), a([INF, 0.0], "f2"))
    assert_same(_convert(a([1.00390625, 1.01171875], "f4"), BF16), a([1.0, 1.015625], BF16))
    assert_same(_convert(a([2**32 - 1, 2**31], "u4"), "i4"), a([-1, S32_MIN], "i4"))
    assert_same(_convert(a([-1, 256, 257], "i4"), "u1"), a([255, 0, 1], "u1"))
    assert_same(_convert(a([2**53 + 1], "i8"), "f8"), a([2.0**53], "f8"))


@covers(Op.CONVERT)
def test_conversions_to_and_from_pred() -> None:
    assert_same(_convert(a([NAN, -0.0, 0.0, 0.5], "f4"), "?"), a([True, False, False, True], "?"))
    assert_same(_convert(a([0, -5], "i4"), "?"), a([False, True], "?"))
    assert_same(_convert(a([True, False], "?"), "f4"), a([1.0, 0.0], "f4"))
    assert_same(_convert(a([True, False], "?"), "i4"), a([1, 0], "i4"))


@covers(Op.BITCAST_CONVERT)
def test_bitcast_convert() -> None:
    def bitcast(x: np.ndarray, to: object) -> Value:
        return run(Op.BITCAST_CONVERT, x, shape=Shape.array(DType.from_numpy(to), x.shape))

    assert_same(bitcast(a([1.0, -0.0, INF], "f4"), "i4"),
                a([1065353216, S32_MIN, 2139095040], "i4"))
    nan = bitcast(a([0x7FC00001, 1], "u4"), "f4")
    assert isinstance(nan, np.ndarray)
    assert nan.view(np.uint32).tolist() == [0x7FC00001, 1]  # payload and denormal kept
    assert_same(bitcast(a([0x3F80, 0xC000], "u2"), BF16), a([1.0, -2.0], BF16))
    assert_same(bitcast(a([1.0, -2.0], "f2"), "u2"), a([0x3C00, 0xC000], "u2"))
    assert_same(bitcast(a([1.0], "f8"), "u8"), a([0x3FF0000000000000], "u8"))
    assert_same(bitcast(a([-1], "i1"), "u1"), a([255], "u1"))


# --- low precision and denormals ------------------------------------------------------------


def test_low_precision_types_are_kept_through_a_chain() -> None:
    """(x + y) - x evaluated in the element type, never silently in float64."""
    def build(ctx: Ctx, b: ComputationBuilder, ps: list[Instruction]) -> Instruction:
        return b.add(Op.SUBTRACT, [b.add(Op.ADD, ps), ps[0]])

    cases = [("f2", 65504, 32, INF), (BF16, 1.0, 2.0**-8, 0.0), ("f4", 2.0**24, 1.0, 0.0),
             ("f8", 2.0**53, 1.0, 0.0)]
    for dtype, x, y, expected in cases:
        assert_same(run_built(build, a([x], dtype), a([y], dtype)), a([expected], dtype))
    assert_same(run(Op.ADD, a([0.1], "f2"), a([0.2], "f2")), a([0.2998046875], "f2"))


def test_f32_and_f64_denormals_are_flushed_but_not_f16() -> None:
    check(Op.MULTIPLY, [a([1e-30, -1e-30], "f4"), a([1e-10, 1e-10], "f4")], a([0.0, -0.0], "f4"))
    check(Op.LOG, [a([1e-45], "f4")], a([-INF], "f4"))
    check(Op.MULTIPLY, [a([1e-300], "f8"), a([1e-20], "f8")], a([0.0], "f8"))
    check(Op.MULTIPLY, [a([6e-8], "f2"), a([1.0], "f2")], a([6e-8], "f2"))


# --- every element-wise op, every element type: a scalar oracle ----------------------------


def _accepted_dtypes(op: Op) -> list[DType]:
    """The element types the op's shape rule accepts (read from the table, not typed out)."""
    definition = OP_TABLE[op]
    out = []
    for dtype in ARRAY_DTYPES:
        scalar = Shape.scalar(dtype)
        operands = [scalar] * (definition.arity or 2)
        if op is Op.SELECT:
            operands = [Shape.scalar(DType.PRED), scalar, scalar]
        attrs = {"direction": "EQ"} if op is Op.COMPARE else {}
        try:
            definition.infer(operands, attrs, [], scalar, op=op.text)
        except ShapeError:
            continue
        out.append(dtype)
    return out


def _int_samples(dtype: DType) -> list[int]:
    info = np.iinfo(dtype.numpy)
    low, high, bits = int(info.min), int(info.max), dtype.bits
    values = [0, 1, 2, 3, 7, bits - 1, bits, bits + 1, high, high - 1, low, low + 1]
    if dtype.is_signed_int:
        values += [-1, -2, -7]
    return values


FLOAT_SAMPLES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, 0.1, -7.25, 100.0, INF,
                 -INF, NAN]


def _samples(dtype: DType) -> list[object]:
    if dtype.is_pred:
        return [False, True]
    if dtype.is_integer:
        return list(_int_samples(dtype))
    return [float(v) for v in a(FLOAT_SAMPLES, dtype.numpy).astype(np.float64)]


def _wrap(value: int, dtype: DType) -> int:
    bits = dtype.bits
    value &= (1 << bits) - 1
    if dtype.is_signed_int and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def _shift_amount(y: int, dtype: DType) -> int:
    return y & ((1 << dtype.bits) - 1)  # the amount is read as unsigned


def _int_oracle(op: Op, dtype: DType, x: int, y: int = 0) -> int | bool:
    bits = dtype.bits
    low = int(np.iinfo(dtype.numpy).min)
    high = int(np.iinfo(dtype.numpy).max)
    if op is Op.DIVIDE or op is Op.REMAINDER:
        if y == 0:
            return x if op is Op.REMAINDER else (-1 if dtype.is_signed_int else high)
        if x == low and y == -1:
            return 0 if op is Op.REMAINDER else low
        quotient = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
        return quotient if op is Op.DIVIDE else x - quotient * y
    if op is Op.POWER:
        if y < 0:
            return 1 if x == 1 else 0
        return _wrap(pow(x, y, 1 << bits), dtype)
    if op in (Op.SHIFT_LEFT, Op.SHIFT_RIGHT_LOGICAL, Op.SHIFT_RIGHT_ARITHMETIC):
        amount = _shift_amount(y, dtype)
        signed = x - (1 << bits) if x >= 1 << (bits - 1) else x  # the bits read as signed
        if op is Op.SHIFT_RIGHT_ARITHMETIC:
            return _wrap(signed >> min(amount, bits), dtype)
        if amount >= bits:
            return 0
        if op is Op.SHIFT_LEFT:
            return _wrap(x << amount, dtype)
        return _wrap((x & ((1 << bits) - 1)) >> amount, dtype)
    simple: dict[Op, Callable[[], int]] = {
        Op.ADD: lambda: x + y, Op.SUBTRACT: lambda: x - y, Op.MULTIPLY: lambda: x * y,
        Op.MAXIMUM: lambda: max(x, y), Op.MINIMUM: lambda: min(x, y),
        Op.AND: lambda: x & y, Op.OR: lambda: x | y, Op.XOR: lambda: x ^ y, Op.NOT: lambda: ~x,
        Op.ABS: lambda: abs(x), Op.NEGATE: lambda: -x, Op.SIGN: lambda: (x > 0) - (x < 0),
        Op.POPCNT: lambda: bin(x & ((1 << bits) - 1)).count("1"),
        Op.CLZ: lambda: bits - (x & ((1 << bits) - 1)).bit_length(),
    }
    return _wrap(simple[op](), dtype)


def _pred_oracle(op: Op, x: bool, y: bool = False) -> bool:
    return {Op.ADD: x or y, Op.MULTIPLY: x and y, Op.MAXIMUM: x or y, Op.MINIMUM: x and y,
            Op.AND: x and y, Op.OR: x or y, Op.XOR: x != y, Op.NOT: not x}[op]


def _round_afz(x: float) -> float:
    if math.isnan(x) or math.isinf(x):
        return x
    t = math.trunc(x)
    return math.copysign(t + (math.copysign(1, x) if abs(x - t) >= 0.5 else 0), x)


def _round_even(x: float) -> float:
    if math.isnan(x) or math.isinf(x):
        return x
    return math.copysign(round(x), x)


def _is_odd_integer(y: float) -> bool:
    return math.isfinite(y) and y == math.floor(y) and math.fmod(y, 2) != 0


def _pow(x: float, y: float) -> float:
    """C99's pow (Annex F), which XLA's backends call; math.pow raises where C returns."""
    if x == 0 and y < 0:
        return math.copysign(INF, x) if _is_odd_integer(y) else INF
    try:
        return math.pow(x, y)
    except ValueError:  # a negative base with a non-integer exponent
        return NAN
    except OverflowError:
        return -INF if x < 0 and _is_odd_integer(y) else INF


def _float_oracle(op: Op, x: float, y: float = 0.0) -> float:
    """Exact IEEE double results; rounding them to the element type is XLA's answer for the
    ops listed in EXACT_FLOAT_OPS (double rounding is harmless at these precisions)."""
    with np.errstate(all="ignore"):
        fx, fy = np.float64(x), np.float64(y)
        table: dict[Op, Callable[[], float]] = {
            Op.ADD: lambda: fx + fy, Op.SUBTRACT: lambda: fx - fy, Op.MULTIPLY: lambda: fx * fy,
            Op.DIVIDE: lambda: fx / fy,
            Op.REMAINDER: lambda: math.fmod(x, y) if y != 0 and not math.isinf(x) else NAN,
            Op.MAXIMUM: lambda: NAN if math.isnan(x) or math.isnan(y) else max(x, y),
            Op.MINIMUM: lambda: NAN if math.isnan(x) or math.isnan(y) else min(x, y),
            Op.ABS: lambda: abs(x), Op.NEGATE: lambda: -x,
            Op.SIGN: lambda: x if x == 0 or math.isnan(x) else math.copysign(1.0, x),
            Op.FLOOR: lambda: x if math.isinf(x) or math.isnan(x) else math.copysign(
                math.floor(x), x),
            Op.CEIL: lambda: x if math.isinf(x) or math.isnan(x) else math.copysign(
                math.ceil(x), x),
            Op.ROUND_NEAREST_AFZ: lambda: _round_afz(x),
            Op.ROUND_NEAREST_EVEN: lambda: _round_even(x),
            Op.SQRT: lambda: np.sqrt(fx),
            Op.ATAN2: lambda: math.atan2(x, y), Op.CBRT: lambda: np.cbrt(fx),
            Op.COSINE: lambda: np.cos(fx), Op.SINE: lambda: np.sin(fx), Op.TAN: lambda: np.tan(fx),
            Op.TANH: lambda: np.tanh(fx), Op.EXPONENTIAL: lambda: np.exp(fx),
            Op.EXPONENTIAL_MINUS_ONE: lambda: np.expm1(fx), Op.LOG: lambda: np.log(fx),
            Op.LOG_PLUS_ONE: lambda: np.log1p(fx), Op.RSQRT: lambda: 1 / np.sqrt(fx),
            Op.LOGISTIC: lambda: 1 / (1 + np.exp(-fx)), Op.ERF: lambda: math.erf(x),
            Op.POWER: lambda: _pow(x, y),
        }
        return float(table[op]())


EXACT_FLOAT_OPS = frozenset({
    Op.ADD, Op.SUBTRACT, Op.MULTIPLY, Op.DIVIDE, Op.REMAINDER, Op.MAXIMUM, Op.MINIMUM, Op.ABS,
    Op.NEGATE, Op.SIGN, Op.FLOOR, Op.CEIL, Op.ROUND_NEAREST_AFZ, Op.ROUND_NEAREST_EVEN, Op.SQRT,
})
# (rtol, atol) for functions whose last bit differs between libraries.
TOLERANCE = {DType.F16: (4e-3, 1e-3), DType.BF16: (1.6e-2, 1e-2), DType.F32: (2e-6, 1e-6),
             DType.F64: (1e-13, 1e-14)}


def _oracle_array(op: Op, dtype: DType, columns: list[list[object]]) -> np.ndarray:
    out: list[object] = []
    for values in zip(*columns):
        if dtype.is_pred:
            out.append(_pred_oracle(op, *values))  # type: ignore[arg-type]
        elif dtype.is_integer:
            out.append(_int_oracle(op, dtype, *values))  # type: ignore[arg-type]
        else:
            out.append(_float_oracle(op, *values))  # type: ignore[arg-type]
    with np.errstate(over="ignore"):
        return np.array(out, dtype=np.float64 if dtype.is_float else object).astype(dtype.numpy)


def _columns(samples: list[object], arity: int, op: Op) -> list[list[object]]:
    if arity == 1:
        return [samples]
    pairs = [(x, y) for x in samples for y in samples]
    if op in (Op.MAXIMUM, Op.MINIMUM):  # XLA leaves max(-0.0, +0.0) to the backend
        pairs = [(x, y) for x, y in pairs
                 if not (x == 0 and y == 0 and math.copysign(1, x) != math.copysign(1, y))]
    return [[p[0] for p in pairs], [p[1] for p in pairs]]


SIMPLE_ELEMENTWISE = sorted(
    (op for op in ELEMENTWISE_OPS
     if OP_TABLE[op].arity in (1, 2) and op not in (Op.COMPARE, Op.CONVERT, Op.BITCAST_CONVERT,
                                                   Op.IS_FINITE, Op.REDUCE_PRECISION)),
    key=lambda op: op.value)


@pytest.mark.parametrize("op", SIMPLE_ELEMENTWISE, ids=lambda op: op.value)
def test_elementwise_against_scalar_oracle_for_every_accepted_type(op: Op) -> None:
    dtypes = _accepted_dtypes(op)
    assert dtypes, f"{op.value} accepts no element type"
    arity = OP_TABLE[op].arity or 2
    for dtype in dtypes:
        columns = _columns(_samples(dtype), arity, op)
        args = [np.array(c, dtype=np.float64 if dtype.is_float else object).astype(dtype.numpy)
                for c in columns]
        actual = run(op, *args)
        expected = _oracle_array(op, dtype, columns)
        if not dtype.is_float or op in EXACT_FLOAT_OPS:
            assert_same(actual, expected)
            continue
        assert isinstance(actual, np.ndarray) and actual.dtype == dtype.numpy
        rtol, atol = TOLERANCE[dtype]
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=f"{op.value} {dtype.text} on {columns}")


def test_element_types_accepted_follow_xla() -> None:
    floats = {DType.F16, DType.BF16, DType.F32, DType.F64}
    ints = {d for d in ARRAY_DTYPES if d.is_integer}
    assert set(_accepted_dtypes(Op.SINE)) == floats
    assert set(_accepted_dtypes(Op.SHIFT_LEFT)) == ints
    assert set(_accepted_dtypes(Op.AND)) == ints | {DType.PRED}
    assert set(_accepted_dtypes(Op.ADD)) == set(ARRAY_DTYPES)
    assert set(_accepted_dtypes(Op.SUBTRACT)) == set(ARRAY_DTYPES) - {DType.PRED}
    assert set(_accepted_dtypes(Op.DIVIDE)) == set(ARRAY_DTYPES) - {DType.PRED}


@pytest.mark.parametrize("source", ARRAY_DTYPES, ids=lambda d: d.text)
def test_convert_between_every_pair_of_types(source: DType) -> None:
    samples = _samples(source)
    x = np.array(samples, dtype=np.float64 if source.is_float else object).astype(source.numpy)
    for target in ARRAY_DTYPES:
        expected = []
        for v in samples:
            if target.is_pred:
                expected.append(v != 0)
            elif target.is_integer and source.is_float:
                assert isinstance(v, float)
                low, high = int(np.iinfo(target.numpy).min), int(np.iinfo(target.numpy).max)
                # NaN gives 0; everything else truncates and saturates (Python compares a float
                # with an int exactly).
                expected.append(0 if math.isnan(v) else high if v >= high else low if v <= low
                                else math.trunc(v))
            elif target.is_integer:
                expected.append(_wrap(int(v), target))  # type: ignore[call-overload]
            else:
                expected.append(float(v))  # type: ignore[arg-type]
        with np.errstate(over="ignore"):
            want = np.array(expected, dtype=np.float64 if target.is_float else object).astype(
                target.numpy)
        assert_same(_convert(x, target.numpy), want)


@pytest.mark.parametrize("source", [d for d in ARRAY_DTYPES if not d.is_pred],
                         ids=lambda d: d.text)
def test_bitcast_convert_between_every_pair_of_widths(source: DType) -> None:
    x = np.array(_samples(source), dtype=np.float64 if source.is_float else object).astype(
        source.numpy)
    unsigned = np.dtype(f"u{source.itemsize}")
    for target in ARRAY_DTYPES:
        if target.is_pred or target.bits != source.bits:
            continue
        out = run(Op.BITCAST_CONVERT, x, shape=Shape.array(target, x.shape))
        assert isinstance(out, np.ndarray) and out.dtype == target.numpy
        np.testing.assert_array_equal(out.view(unsigned), x.view(unsigned))


# --- data movement ------------------------------------------------------------------------


@covers(Op.BROADCAST)
def test_broadcast_with_unsorted_and_degenerate_dimensions() -> None:
    x = a([[1, 2, 3], [4, 5, 6]], "i4")
    s32 = DType.S32
    check(Op.BROADCAST, [x], a([[1, 4], [2, 5], [3, 6]], "i4"), attrs={"dimensions": (1, 0)},
          shape=Shape.array(s32, (3, 2)))
    check(Op.BROADCAST, [a([1, 2], "i4")], a([[1, 1, 1], [2, 2, 2]], "i4"),
          attrs={"dimensions": (0,)}, shape=Shape.array(s32, (2, 3)))
    check(Op.BROADCAST, [a([1, 2], "i4")], a([[1, 2], [1, 2], [1, 2]], "i4"),
          attrs={"dimensions": (1,)}, shape=Shape.array(s32, (3, 2)))
    check(Op.BROADCAST, [a([7], "i4")], a([7, 7, 7], "i4"), attrs={"dimensions": (0,)},
          shape=Shape.array(s32, (3,)))
    check(Op.BROADCAST, [a(9, "i4")], a([[9, 9]], "i4"), attrs={"dimensions": ()},
          shape=Shape.array(s32, (1, 2)))
    out = run(Op.BROADCAST, x, attrs={"dimensions": (2, 0)}, shape=Shape.array(s32, (3, 4, 2)))
    assert isinstance(out, np.ndarray) and out.shape == (3, 4, 2)
    assert out[2, 1, 0] == 3 and out[0, 3, 1] == 4 and out[1, 0, 1] == 5  # out[i,j,k] = x[k,i]


@covers(Op.RESHAPE, Op.BITCAST, Op.COPY)
def test_reshape_is_row_major() -> None:
    x = a([[1, 2, 3], [4, 5, 6]], "f4")
    for op in (Op.RESHAPE, Op.BITCAST):
        check(op, [x], a([[1, 2], [3, 4], [5, 6]], "f4"), shape=Shape.array(DType.F32, (3, 2)))
        check(op, [x], a([1, 2, 3, 4, 5, 6], "f4"), shape=Shape.array(DType.F32, (6,)))
    check(Op.RESHAPE, [a([5], "i4")], a(5, "i4"), shape=Shape.scalar(DType.S32))
    check(Op.COPY, [x], x)


@covers(Op.TRANSPOSE)
def test_transpose() -> None:
    check(Op.TRANSPOSE, [a([[1, 2, 3], [4, 5, 6]], "i4")], a([[1, 4], [2, 5], [3, 6]], "i4"),
          attrs={"dimensions": (1, 0)})
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    out = run(Op.TRANSPOSE, x, attrs={"dimensions": (2, 0, 1)})
    assert isinstance(out, np.ndarray) and out.shape == (4, 2, 3)
    assert out[3, 1, 2] == 23 and out[1, 0, 2] == 9  # out[i,j,k] = x[j,k,i]


@covers(Op.SLICE)
def test_slice_with_strides() -> None:
    check(Op.SLICE, [np.arange(10, dtype=np.int32)], a([1, 4, 7], "i4"),
          attrs={"slice": (SliceDim(1, 8, 3),)})
    x = np.arange(15, dtype=np.int32).reshape(3, 5)
    check(Op.SLICE, [x], a([[1, 3], [11, 13]], "i4"),
          attrs={"slice": (SliceDim(0, 3, 2), SliceDim(1, 5, 2))})
    check(Op.SLICE, [x], np.zeros((0, 5), np.int32),
          attrs={"slice": (SliceDim(2, 2), SliceDim(0, 5))})


@covers(Op.DYNAMIC_SLICE)
def test_dynamic_slice_clamps_start_indices() -> None:
    x = a([10, 20, 30, 40, 50], "i4")
    sizes = {"dynamic_slice_sizes": (2,)}
    for start, expected in [(a(4, "i4"), [40, 50]), (a(-3, "i4"), [10, 20]),
                            (a(1, "i4"), [20, 30]), (a(2**32 - 1, "u4"), [40, 50]),
                            (a(S64_MIN, "i8"), [10, 20])]:
        check(Op.DYNAMIC_SLICE, [x, start], a(expected, "i4"), attrs=sizes)
    grid = np.arange(12, dtype=np.int32).reshape(3, 4)
    check(Op.DYNAMIC_SLICE, [grid, a(2, "i4"), a(-1, "i4")], a([[4, 5], [8, 9]], "i4"),
          attrs={"dynamic_slice_sizes": (2, 2)})


@covers(Op.DYNAMIC_UPDATE_SLICE)
def test_dynamic_update_slice_clamps_start_indices() -> None:
    x, update = a([1, 2, 3, 4, 5], "f4"), a([8, 9], "f4")
    check(Op.DYNAMIC_UPDATE_SLICE, [x, update, a(4, "i4")], a([1, 2, 3, 8, 9], "f4"))
    check(Op.DYNAMIC_UPDATE_SLICE, [x, update, a(-1, "i4")], a([8, 9, 3, 4, 5], "f4"))
    check(Op.DYNAMIC_UPDATE_SLICE, [x, update, a(1, "u1")], a([1, 8, 9, 4, 5], "f4"))
    grid = np.zeros((3, 3), np.int32)
    check(Op.DYNAMIC_UPDATE_SLICE, [grid, a([[1, 2]], "i4"), a(7, "i4"), a(0, "i4")],
          a([[0, 0, 0], [0, 0, 0], [1, 2, 0]], "i4"))


@covers(Op.CONCATENATE)
def test_concatenate() -> None:
    check(Op.CONCATENATE, [a([[1, 2], [3, 4]], "i4"), a([[5], [6]], "i4")],
          a([[1, 2, 5], [3, 4, 6]], "i4"), attrs={"dimensions": (1,)})
    check(Op.CONCATENATE, [a([1.0], "f2"), a([], "f2"), a([2.0, 3.0], "f2")],
          a([1.0, 2.0, 3.0], "f2"), attrs={"dimensions": (0,)})


@covers(Op.PAD)
def test_pad_with_negative_and_interior_padding() -> None:
    x, zero = a([1, 2, 3], "i4"), a(0, "i4")

    def pad(*dims: tuple[int, int, int]) -> dict[str, object]:
        return {"padding": tuple(PaddingDim(*d) for d in dims)}

    check(Op.PAD, [x, zero], a([0, 1, 2, 3, 0, 0], "i4"), attrs=pad((1, 2, 0)))
    check(Op.PAD, [x, zero], a([2, 3], "i4"), attrs=pad((-1, 0, 0)))
    check(Op.PAD, [x, zero], a([1, 0, 2, 0, 3], "i4"), attrs=pad((0, 0, 1)))
    check(Op.PAD, [x, zero], a([0, 0, 2, 0, 0], "i4"), attrs=pad((-1, -1, 2)))
    check(Op.PAD, [a([[1, 2], [3, 4]], "i4"), a(9, "i4")], a([[9, 9], [1, 9], [3, 9]], "i4"),
          attrs=pad((1, 0, 0), (0, -1, 1)))
    check(Op.PAD, [a([1.0], "f4"), a(NAN, "f4")], a([NAN, 1.0], "f4"), attrs=pad((1, 0, 0)))


@covers(Op.REVERSE)
def test_reverse() -> None:
    x = a([[1, 2, 3], [4, 5, 6]], "i4")
    check(Op.REVERSE, [x], a([[4, 5, 6], [1, 2, 3]], "i4"), attrs={"dimensions": (0,)})
    check(Op.REVERSE, [x], a([[3, 2, 1], [6, 5, 4]], "i4"), attrs={"dimensions": (1,)})
    check(Op.REVERSE, [x], a([[6, 5, 4], [3, 2, 1]], "i4"), attrs={"dimensions": (0, 1)})
    check(Op.REVERSE, [x], x, attrs={"dimensions": ()})


@covers(Op.IOTA)
def test_iota() -> None:
    def iota(dtype: DType, dims: tuple[int, ...], dimension: int) -> Value:
        return run(Op.IOTA, attrs={"iota_dimension": dimension}, shape=Shape.array(dtype, dims))

    assert_same(iota(DType.S32, (2, 3), 1), a([[0, 1, 2], [0, 1, 2]], "i4"))
    assert_same(iota(DType.U8, (3, 2), 0), a([[0, 0], [1, 1], [2, 2]], "u1"))
    assert_same(iota(DType.F32, (4,), 0), a([0.0, 1.0, 2.0, 3.0], "f4"))
    assert_same(iota(DType.BF16, (3,), 0), a([0.0, 1.0, 2.0], BF16))


@covers(Op.CONSTANT, Op.PARAMETER)
def test_constant_and_parameter() -> None:
    literal = a([[1.5, -0.0]], "f2")
    out = run_built(lambda ctx, b, ps: b.constant(literal, DType.F16))
    assert_same(out, literal)
    x = a([1, 2], "u8")
    assert_same(run_built(lambda ctx, b, ps: ps[0], x), x)


# --- reductions -----------------------------------------------------------------------------


def _reduce(x: np.ndarray, init: np.ndarray, dims: tuple[int, ...], op: Op) -> Value:
    dtype = DType.from_numpy(x.dtype)
    return run(Op.REDUCE, x, init, attrs={"dimensions": dims},
               calls=lambda ctx: [ctx.binary(op, dtype)])


@covers(Op.REDUCE)
def test_reduce() -> None:
    x = a([[1, 2, 3], [4, 5, 6]], "f4")
    assert_same(_reduce(x, a(0, "f4"), (1,), Op.ADD), a([6, 15], "f4"))
    assert_same(_reduce(x, a(0, "f4"), (0,), Op.ADD), a([5, 7, 9], "f4"))
    assert_same(_reduce(x, a(0, "f4"), (0, 1), Op.ADD), a(21, "f4"))
    assert_same(_reduce(x, a(10, "f4"), (1,), Op.ADD), a([16, 25], "f4"))  # init counted once
    assert_same(_reduce(x, a(1, "f4"), (), Op.MULTIPLY), x)
    assert_same(_reduce(a([100, 100, 100], "i1"), a(0, "i1"), (0,), Op.ADD), a(44, "i1"))
    assert_same(_reduce(a([[3, -7], [2, 9]], "i4"), a(S32_MIN, "i4"), (1,), Op.MAXIMUM),
                a([3, 9], "i4"))
    flags = a([[True, False], [False, False]], "?")
    assert_same(_reduce(flags, a(False, "?"), (1,), Op.OR), a([True, False], "?"))
    assert_same(_reduce(flags, a(True, "?"), (1,), Op.AND), a([False, False], "?"))


@covers(Op.REDUCE)
def test_reduce_over_an_empty_extent_gives_the_initial_value() -> None:
    assert_same(_reduce(np.zeros((0, 3), np.float32), a(0, "f4"), (0,), Op.ADD),
                a([0, 0, 0], "f4"))
    assert_same(_reduce(np.zeros((2, 0), np.float32), a(-INF, "f4"), (1,), Op.MAXIMUM),
                a([-INF, -INF], "f4"))


@covers(Op.REDUCE)
def test_reduce_with_a_general_reducer() -> None:
    """A reducer that is not one binary op runs through the interpreter (maximum via select)."""
    def reducer(ctx: Ctx) -> list[Computation]:
        def body(b: ComputationBuilder, ps: list[Instruction]) -> Instruction:
            ge = b.add(Op.COMPARE, ps, attrs={"direction": "GE"})
            return b.add(Op.SELECT, [ge, *ps])

        return [ctx.computation("max_by_select", [Shape.scalar(DType.F32)] * 2, body)]

    out = run(Op.REDUCE, a([[1, 3, 2], [6, 4, 5]], "f4"), a(-INF, "f4"),
              attrs={"dimensions": (1,)}, calls=reducer)
    assert_same(out, a([3, 6], "f4"))


def _argmax_reducer(ctx: Ctx, dtype: DType) -> Computation:
    """(value, index) pairs: the larger value wins, the smaller index on ties (as jax)."""
    def body(b: ComputationBuilder, ps: list[Instruction]) -> Instruction:
        acc_value, acc_index, value, index = ps
        greater = b.add(Op.COMPARE, [acc_value, value], attrs={"direction": "GT"})
        equal = b.add(Op.COMPARE, [acc_value, value], attrs={"direction": "EQ"})
        earlier = b.add(Op.COMPARE, [acc_index, index], attrs={"direction": "LT"})
        keep = b.add(Op.OR, [greater, b.add(Op.AND, [equal, earlier])])
        return b.add(Op.TUPLE, [b.add(Op.SELECT, [keep, acc_value, value]),
                                b.add(Op.SELECT, [keep, acc_index, index])])

    scalar, s32 = Shape.scalar(dtype), Shape.scalar(DType.S32)
    return ctx.computation("argmax", [scalar, s32, scalar, s32], body)


@covers(Op.REDUCE)
def test_variadic_reduce_argmax() -> None:
    values = a([[1, 5, 5, 2], [7, 0, 7, -1]], "f4")
    indices = np.broadcast_to(np.arange(4, dtype=np.int32), (2, 4)).copy()
    out = run(Op.REDUCE, values, indices, a(-INF, "f4"), a(0, "i4"),
              attrs={"dimensions": (1,)}, calls=lambda ctx: [_argmax_reducer(ctx, DType.F32)])
    assert_same(out, (a([5, 7], "f4"), a([1, 0], "i4")))


def _window(size: tuple[int, ...], stride: tuple[int, ...] | None = None,
            pad: tuple[tuple[int, int], ...] | None = None, lhs: tuple[int, ...] | None = None,
            rhs: tuple[int, ...] | None = None) -> dict[str, object]:
    rank = len(size)
    w = Window.of(size, stride, pad)
    return {"window": Window(w.size, w.stride, w.pad_low, w.pad_high, lhs or (1,) * rank,
                             rhs or (1,) * rank)}


@covers(Op.REDUCE_WINDOW)
def test_reduce_window_with_stride_padding_and_dilation() -> None:
    x, zero = a([1, 2, 3, 4, 5], "f4"), a(0, "f4")

    def reduce_window(x: np.ndarray, init: np.ndarray, op: Op, **window: object) -> Value:
        return run(Op.REDUCE_WINDOW, x, init, attrs=_window(**window),  # type: ignore[arg-type]
                   calls=lambda ctx: [ctx.binary(op, DType.from_numpy(x.dtype))])

    assert_same(reduce_window(x, zero, Op.ADD, size=(2,), stride=(2,), pad=((1, 0),)),
                a([1, 5, 9], "f4"))
    assert_same(reduce_window(x, zero, Op.ADD, size=(2,), rhs=(2,)), a([4, 6, 8], "f4"))
    assert_same(reduce_window(x, zero, Op.ADD, size=(3,), stride=(2,), lhs=(2,)),
                a([3, 5, 7, 9], "f4"))
    assert_same(reduce_window(x, a(-INF, "f4"), Op.MAXIMUM, size=(2,), pad=((0, 1),)),
                a([2, 3, 4, 5, 5], "f4"))
    assert_same(reduce_window(a([1, 2], "f4"), zero, Op.ADD, size=(3,)), np.zeros(0, np.float32))
    grid = a([[1, 2, 3], [4, 5, 6]], "f4")
    assert_same(reduce_window(grid, a(-INF, "f4"), Op.MAXIMUM, size=(2, 2)), a([[5, 6]], "f4"))
    assert_same(reduce_window(grid, a(-INF, "f4"), Op.MAXIMUM, size=(2, 2), pad=((1, 1), (0, 0))),
                a([[2, 3], [5, 6], [5, 6]], "f4"))
    assert_same(reduce_window(a([1, 2, 3], "i4"), a(0, "i4"), Op.ADD, size=(1,), lhs=(3,)),
                a([1, 0, 0, 2, 0, 0, 3], "i4"))


@covers(Op.REDUCE_WINDOW)
def test_variadic_reduce_window() -> None:
    out = run(Op.REDUCE_WINDOW, a([1, 3, 2], "f4"), a([0, 1, 2], "i4"), a(-INF, "f4"),
              a(0, "i4"), attrs=_window((2,)),
              calls=lambda ctx: [_argmax_reducer(ctx, DType.F32)])
    assert_same(out, (a([3, 3], "f4"), a([1, 1], "i4")))


@covers(Op.DOT)
def test_dot() -> None:
    def dot(lhs: np.ndarray, rhs: np.ndarray, lc: tuple[int, ...], rc: tuple[int, ...],
            lb: tuple[int, ...] = (), rb: tuple[int, ...] = ()) -> Value:
        attrs = {"lhs_contracting_dims": lc, "rhs_contracting_dims": rc,
                 "lhs_batch_dims": lb, "rhs_batch_dims": rb}
        return run_built(lambda ctx, b, ps: b.add(Op.DOT, ps, attrs=attrs,
                                                  shape=_dot_shape(lhs, rhs, attrs)), lhs, rhs)

    m1, m2 = a([[1, 2], [3, 4]], "f4"), a([[5, 6], [7, 8]], "f4")
    assert_same(dot(m1, m2, (1,), (0,)), a([[19, 22], [43, 50]], "f4"))
    assert_same(dot(m1, m2, (0,), (0,)), a([[26, 30], [38, 44]], "f4"))
    assert_same(dot(a([1, 2, 3], "f4"), a([4, 5, 6], "f4"), (0,), (0,)), a(32, "f4"))
    assert_same(dot(a([1, 2], "f4"), a([3, 4], "f4"), (), ()), a([[3, 4], [6, 8]], "f4"))
    assert_same(dot(a([[[1, 2]], [[3, 4]]], "f4"), a([[[5], [6]], [[7], [8]]], "f4"), (2,), (1,),
                    (0,), (0,)), a([[[17]], [[53]]], "f4"))
    assert_same(dot(a([65536, 1], "i4"), a([65536, 2], "i4"), (0,), (0,)), a(2, "i4"))


def _dot_shape(lhs: np.ndarray, rhs: np.ndarray, attrs: dict[str, tuple[int, ...]]) -> Shape:
    lb, lc = attrs["lhs_batch_dims"], attrs["lhs_contracting_dims"]
    rb, rc = attrs["rhs_batch_dims"], attrs["rhs_contracting_dims"]
    dims = [lhs.shape[d] for d in lb]
    dims += [n for i, n in enumerate(lhs.shape) if i not in lb + lc]
    dims += [n for i, n in enumerate(rhs.shape) if i not in rb + rc]
    return Shape.array(DType.from_numpy(lhs.dtype), tuple(dims))


# --- tuples and control flow ----------------------------------------------------------------


@covers(Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.OPT_BARRIER, Op.AFTER_ALL)
def test_tuples() -> None:
    x, y, z = a([1], "i4"), a([2.0], "f4"), a(True, "?")

    def build(ctx: Ctx, b: ComputationBuilder, ps: list[Instruction]) -> Instruction:
        inner = b.add(Op.TUPLE, ps[:2])
        outer = b.add(Op.OPT_BARRIER, [b.add(Op.TUPLE, [inner, ps[2]])])
        first = b.add(Op.GET_TUPLE_ELEMENT, [outer], attrs={"index": 0})
        second = b.add(Op.GET_TUPLE_ELEMENT, [first], attrs={"index": 1})
        return b.add(Op.TUPLE, [second, outer, b.add(Op.AFTER_ALL, [])])

    assert_same(run_built(build, x, y, z), (y, ((x, y), z), None))


def _counting_loop(ctx: Ctx, b: ComputationBuilder, ps: list[Instruction]) -> Instruction:
    """while i < 10: (i, acc) = (i + 1, acc + i)"""
    state = Shape.tuple_of([Shape.scalar(DType.S32)] * 2)

    def condition(cb: ComputationBuilder, cps: list[Instruction]) -> Instruction:
        i = cb.add(Op.GET_TUPLE_ELEMENT, cps, attrs={"index": 0})
        return cb.add(Op.COMPARE, [i, cb.constant(10, DType.S32)], attrs={"direction": "LT"})

    def body(bb: ComputationBuilder, bps: list[Instruction]) -> Instruction:
        i = bb.add(Op.GET_TUPLE_ELEMENT, bps, attrs={"index": 0})
        acc = bb.add(Op.GET_TUPLE_ELEMENT, bps, attrs={"index": 1})
        one = bb.constant(1, DType.S32)
        return bb.add(Op.TUPLE, [bb.add(Op.ADD, [i, one]), bb.add(Op.ADD, [acc, i])])

    calls = [ctx.computation("cond", [state], condition), ctx.computation("body", [state], body)]
    return b.add(Op.WHILE, [b.add(Op.TUPLE, ps)], calls=calls)


@covers(Op.WHILE)
def test_while() -> None:
    assert_same(run_built(_counting_loop, a(0, "i4"), a(0, "i4")), (a(10, "i4"), a(45, "i4")))
    assert_same(run_built(_counting_loop, a(10, "i4"), a(3, "i4")), (a(10, "i4"), a(3, "i4")))


def _branches(ctx: Ctx) -> list[Computation]:
    f32 = Shape.scalar(DType.F32)
    return [ctx.computation("negate_branch", [f32], lambda b, ps: b.add(Op.NEGATE, ps)),
            ctx.computation("double_branch", [f32], lambda b, ps: b.add(Op.ADD, ps * 2)),
            ctx.computation("copy_branch", [f32], lambda b, ps: b.add(Op.COPY, ps))]


@covers(Op.CONDITIONAL)
def test_conditional() -> None:
    x = a(1.5, "f4")

    def pred_build(ctx: Ctx, b: ComputationBuilder, ps: list[Instruction]) -> Instruction:
        return b.add(Op.CONDITIONAL, [ps[0], ps[1], ps[1]], calls=_branches(ctx)[:2])

    assert_same(run_built(pred_build, a(True, "?"), x), a(-1.5, "f4"))
    assert_same(run_built(pred_build, a(False, "?"), x), a(3.0, "f4"))

    def index_build(ctx: Ctx, b: ComputationBuilder, ps: list[Instruction]) -> Instruction:
        return b.add(Op.CONDITIONAL, [ps[0], ps[1], ps[1], ps[1]], calls=_branches(ctx))

    # XLA: an index outside [0, N) runs the last branch.
    for index, expected in [(0, -1.5), (1, 3.0), (2, 1.5), (3, 1.5), (5, 1.5), (-1, 1.5),
                            (S32_MIN, 1.5)]:
        assert_same(run_built(index_build, a(index, "i4"), x), a(expected, "f4"))


@covers(Op.CALL, Op.FUSION)
def test_call_and_fusion() -> None:
    f32_2 = Shape.array(DType.F32, (2,))

    def fused(ctx: Ctx) -> Computation:
        def body(b: ComputationBuilder, ps: list[Instruction]) -> Instruction:
            return b.add(Op.SUBTRACT, [b.add(Op.MULTIPLY, ps), ps[0]])

        return ctx.computation("fused_computation", [f32_2, f32_2], body)

    x, y = a([2, 3], "f4"), a([5, -1], "f4")
    check(Op.CALL, [x, y], a([8, -6], "f4"), calls=lambda ctx: [fused(ctx)])
    check(Op.FUSION, [x, y], a([8, -6], "f4"), attrs={"kind": "kLoop"},
          calls=lambda ctx: [fused(ctx)])


@covers(Op.CUSTOM_CALL)
def test_custom_call_runs_a_registered_library_function() -> None:
    b = ComputationBuilder("main")
    x = b.parameter(0, Shape.array(DType.F32, (2,)))
    b.add(Op.CUSTOM_CALL, [x], attrs={"custom_call_target": "twice"}, shape=x.shape)
    computation = b.build()
    doubled = Interpreter({"twice": lambda inst, ops: np.asarray(ops[0]) * 2}).run(
        computation, [a([1.5, -2], "f4")])
    assert_same(doubled, a([3, -4], "f4"))
    with pytest.raises(InterpreterError, match="no library function for custom-call target "
                                               "'twice'"):
        evaluate(make_module("m", computation), [a([1.5, -2], "f4")])


@pytest.mark.parametrize("op", sorted(UNSUPPORTED, key=lambda op: op.value), ids=str)
def test_unsupported_ops_fail_clearly(op: Op) -> None:
    assert op is Op.RNG_BIT_GENERATOR
    b = ComputationBuilder("main")
    state = b.parameter(0, Shape.array(DType.U64, (2,)))
    b.add(op, [state], shape=Shape.tuple_of([state.shape, Shape.array(DType.U32, (4,))]))
    module = make_module("m", b.build())
    verify(module)
    with pytest.raises(InterpreterError, match="cannot evaluate rng-bit-generator"):
        evaluate(module, [a([1, 2], "u8")])


def test_deeply_nested_calls_fail_clearly() -> None:
    ctx_names = NameUniquer()
    f32 = Shape.scalar(DType.F32)
    b = ComputationBuilder("leaf", ctx_names)
    callee = b.build(b.add(Op.NEGATE, [b.parameter(0, f32)]))
    for depth in range(1000):
        b = ComputationBuilder(f"level{depth}", ctx_names)
        callee = b.build(b.add(Op.CALL, [b.parameter(0, f32)], calls=[callee]))
    module = make_module("deep", callee)
    verify(module)
    with pytest.raises(InterpreterError, match="too deeply"):
        evaluate(module, [a(1, "f4")])


# --- data movement for every element type ---------------------------------------------------


@pytest.mark.parametrize("dtype", ARRAY_DTYPES, ids=lambda d: d.text)
def test_data_movement_keeps_every_element_type(dtype: DType) -> None:
    base = np.arange(6).reshape(2, 3)
    x = (base % 2 == 1) if dtype.is_pred else base.astype(dtype.numpy)
    check(Op.TRANSPOSE, [x], x.T.copy(), attrs={"dimensions": (1, 0)})
    check(Op.RESHAPE, [x], x.reshape(3, 2), shape=Shape.array(dtype, (3, 2)))
    check(Op.BROADCAST, [x], np.broadcast_to(x, (2, 2, 3)).copy(), attrs={"dimensions": (1, 2)},
          shape=Shape.array(dtype, (2, 2, 3)))
    check(Op.SLICE, [x], x[:, 1::2].copy(), attrs={"slice": (SliceDim(0, 2), SliceDim(1, 3, 2))})
    check(Op.REVERSE, [x], x[::-1].copy(), attrs={"dimensions": (0,)})
    check(Op.CONCATENATE, [x, x], np.concatenate([x, x], axis=1), attrs={"dimensions": (1,)})
    check(Op.COPY, [x], x)
    check(Op.DYNAMIC_SLICE, [x, a(5, "i4"), a(1, "i4")], x[1:2, 1:3].copy(),
          attrs={"dynamic_slice_sizes": (1, 2)})
    update = x[:1, :2].copy()
    expected = x.copy()
    expected[1, 1:3] = update
    check(Op.DYNAMIC_UPDATE_SLICE, [x, update, a(1, "i4"), a(9, "i4")], expected)
    pad_value = x[0, 1]
    padded = np.full((2, 5), pad_value, dtype=x.dtype)
    padded[:, 0:5:2] = x
    check(Op.PAD, [x, np.asarray(pad_value)], padded,
          attrs={"padding": (PaddingDim(0, 0), PaddingDim(0, 0, 1))})
    pred = a([[True, False, True], [False, True, False]], "?")
    check(Op.SELECT, [pred, x, x[::-1].copy()], np.where(pred, x, x[::-1]))
    assert_same(run_built(lambda ctx, b, ps: b.add(Op.GET_TUPLE_ELEMENT,
                                                   [b.add(Op.TUPLE, ps)], attrs={"index": 0}),
                          x), x)


# --- completeness ---------------------------------------------------------------------------


def test_every_op_has_hand_checked_values_or_is_documented_unsupported() -> None:
    from tests.ir.test_indexing_ops import COVERED_HERE
    from tests.linalg.test_linalg_ops import COVERED_HERE as LINALG_COVERED

    missing = set(OP_TABLE) - COVERED - COVERED_HERE - LINALG_COVERED - set(UNSUPPORTED)
    assert not missing, f"ops without hand-checked interpreter values: {sorted(missing, key=str)}"
    assert not COVERED & set(UNSUPPORTED)
