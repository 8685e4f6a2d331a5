"""NumPy element-wise functions on traced arrays, with broadcasting and JAX's type promotion."""

from __future__ import annotations

from typing import Any

import numpy as np

from hlofuse.frontend import primitives as prim
from hlofuse.frontend.dtype_rules import promote, to_dtype
from hlofuse.frontend.eager import eager
from hlofuse.frontend.shape_ops import broadcast_shapes
from hlofuse.frontend.tracer import Tracer, constant, to_tracer, value_type
from hlofuse.frontend.tracing import located
from hlofuse.ir.dtypes import DType
from hlofuse.ir.ops import Op


def promote_operands(name: str, *operands: Any, shape: bool = True) -> list[Tracer]:
    """Operands converted to their common type and, if `shape`, broadcast to one shape."""
    types = [value_type(x, f"{name} operand")[1:] for x in operands]
    dtype, weak = promote(*types)
    xs = [_scalar_constant(x, dtype, weak, name) if _is_python_scalar(x) else
          prim.convert(to_tracer(x, f"{name} operand"), dtype, weak) for x in operands]
    if not shape:
        return xs
    return broadcast_all(name, xs)


def _is_python_scalar(x: object) -> bool:
    return isinstance(x, bool | int | float) and not isinstance(x, np.generic)


def _scalar_constant(x: bool | int | float, dtype: DType, weak: bool, name: str) -> Tracer:
    """A Python scalar made directly in the type it promotes to, as JAX does."""
    if dtype.is_integer and not isinstance(x, bool):
        info = np.iinfo(dtype.numpy)
        if not info.min <= x <= info.max:
            raise OverflowError(located(f"{name}: Python int {x} does not fit in "
                                        f"{dtype.numpy}"))
    return constant(x, dtype, weak and not isinstance(x, bool))


def broadcast_all(name: str, xs: list[Tracer]) -> list[Tracer]:
    out_shape = broadcast_shapes([x.shape for x in xs], name)
    out = []
    for x in xs:
        offset = len(out_shape) - x.ndim
        out.append(prim.broadcast_in_dim(x, out_shape, tuple(range(offset, len(out_shape)))))
    return out


def _check(name: str, x: Tracer, *, allow_float: bool = True, allow_int: bool = True,
           allow_bool: bool = True) -> None:
    dtype = x.hlo_dtype
    ok = (dtype.is_float and allow_float) or (dtype.is_integer and allow_int) or (
        dtype.is_pred and allow_bool)
    if not ok:
        raise TypeError(located(f"{name} does not accept {dtype.numpy} operands"))


def to_inexact(x: Tracer) -> Tracer:
    """Integers and booleans become float32, as JAX's transcendental functions do."""
    if x.hlo_dtype.is_float:
        return x
    return prim.convert(x, DType.F32, x.weak)


def _float_unary(op: Op, name: str) -> Any:
    @eager
    def fn(x: Any) -> Tracer:
        return prim.unary(op, to_inexact(to_tracer(x, f"hnp.{name} operand")))

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Element-wise {name} (integers are computed in float32)."
    return fn


sin = _float_unary(Op.SINE, "sin")
cos = _float_unary(Op.COSINE, "cos")
tan = _float_unary(Op.TAN, "tan")
tanh = _float_unary(Op.TANH, "tanh")
exp = _float_unary(Op.EXPONENTIAL, "exp")
expm1 = _float_unary(Op.EXPONENTIAL_MINUS_ONE, "expm1")
log = _float_unary(Op.LOG, "log")
log1p = _float_unary(Op.LOG_PLUS_ONE, "log1p")
sqrt = _float_unary(Op.SQRT, "sqrt")


@eager
def negative(x: Any) -> Tracer:
    x = to_tracer(x)
    _check("hnp.negative", x, allow_bool=False)
    return prim.unary(Op.NEGATE, x)


@eager
def abs(x: Any) -> Tracer:  # noqa: A001 - NumPy's name
    x = to_tracer(x)
    if x.hlo_dtype.is_pred or x.hlo_dtype.is_unsigned_int:
        return x
    return prim.unary(Op.ABS, x)


absolute = abs


@eager
def sign(x: Any) -> Tracer:
    x = to_tracer(x)
    _check("hnp.sign", x, allow_bool=False)
    return prim.unary(Op.SIGN, x)


def _rounding(op: Op, name: str) -> Any:
    @eager
    def fn(x: Any) -> Tracer:
        x = to_tracer(x)
        if not x.hlo_dtype.is_float:
            return x  # integers are already whole
        return prim.unary(op, x)

    fn.__name__ = fn.__qualname__ = name
    return fn


floor = _rounding(Op.FLOOR, "floor")
ceil = _rounding(Op.CEIL, "ceil")
_round_even = _rounding(Op.ROUND_NEAREST_EVEN, "round")


@eager
def round(x: Any, decimals: int = 0) -> Tracer:  # noqa: A001 - NumPy's name
    """Round half to even, as NumPy does."""
    if decimals == 0:
        return _round_even(x)
    x = to_inexact(to_tracer(x))
    factor = constant(10.0**decimals, x.hlo_dtype)
    factor = prim.broadcast_in_dim(factor, x.shape, ())
    scaled = _round_even(prim.binary(Op.MULTIPLY, x, factor))
    return prim.binary(Op.DIVIDE, scaled, factor)


around = round


def _arith(op: Op, name: str, bool_op: Op | None = None) -> Any:
    @eager
    def fn(x: Any, y: Any) -> Tracer:
        a, b = promote_operands(f"hnp.{name}", x, y)
        if a.hlo_dtype.is_pred:
            if bool_op is None:
                raise TypeError(located(f"hnp.{name} does not accept boolean operands"))
            return prim.binary(bool_op, a, b)
        return prim.binary(op, a, b)

    fn.__name__ = fn.__qualname__ = name
    return fn


add = _arith(Op.ADD, "add", Op.OR)
subtract = _arith(Op.SUBTRACT, "subtract")
multiply = _arith(Op.MULTIPLY, "multiply", Op.AND)
maximum = _arith(Op.MAXIMUM, "maximum", Op.OR)
minimum = _arith(Op.MINIMUM, "minimum", Op.AND)


@eager
def true_divide(x: Any, y: Any) -> Tracer:
    a, b = promote_operands("hnp.true_divide", x, y)
    return prim.binary(Op.DIVIDE, to_inexact(a), to_inexact(b))


divide = true_divide


def _zeros_like(x: Tracer, value: object = 0) -> Tracer:
    return prim.full(x.shape, value, x.hlo_dtype)


@eager
def remainder(x: Any, y: Any) -> Tracer:
    """x - floor(x / y) * y: the sign follows the divisor, as in NumPy."""
    a, b = promote_operands("hnp.remainder", x, y)
    _check("hnp.remainder", a, allow_bool=False)
    rem = prim.binary(Op.REMAINDER, a, b)
    if a.hlo_dtype.is_unsigned_int:
        return rem
    zero = _zeros_like(rem)
    nonzero = prim.compare(rem, zero, "NE")
    signs_differ = prim.compare(prim.compare(rem, zero, "LT"), prim.compare(b, zero, "LT"), "NE")
    fix = prim.binary(Op.AND, signs_differ, nonzero)
    return prim.select(fix, prim.binary(Op.ADD, rem, b), rem)


mod = remainder


@eager
def floor_divide(x: Any, y: Any) -> Tracer:
    a, b = promote_operands("hnp.floor_divide", x, y)
    _check("hnp.floor_divide", a, allow_bool=False)
    if a.hlo_dtype.is_unsigned_int:
        return prim.binary(Op.DIVIDE, a, b)
    if a.hlo_dtype.is_integer:
        quotient = prim.binary(Op.DIVIDE, a, b)
        zero = _zeros_like(a)
        signs_differ = prim.compare(prim.unary(Op.SIGN, a), prim.unary(Op.SIGN, b), "NE")
        inexact = prim.compare(prim.binary(Op.REMAINDER, a, b), zero, "NE")
        fix = prim.binary(Op.AND, signs_differ, inexact)
        one = _zeros_like(a, 1)
        return prim.select(fix, prim.binary(Op.SUBTRACT, quotient, one), quotient)
    # (x - fmod(x, y)) / y is exact; step down where fmod's sign differs from y's, as NumPy.
    rem = prim.binary(Op.REMAINDER, a, b)
    quotient = prim.binary(Op.DIVIDE, prim.binary(Op.SUBTRACT, a, rem), b)
    zero = _zeros_like(a)
    signs_differ = prim.compare(prim.unary(Op.SIGN, b), prim.unary(Op.SIGN, rem), "NE")
    fix = prim.binary(Op.AND, prim.compare(rem, zero, "NE"), signs_differ)
    quotient = prim.select(fix, prim.binary(Op.SUBTRACT, quotient, _zeros_like(a, 1)), quotient)
    return prim.unary(Op.ROUND_NEAREST_AFZ, quotient)


def _integer_pow(x: Tracer, n: int) -> Tracer:
    """x ** n by repeated squaring, as JAX lowers a constant integer exponent."""
    if n == 0:
        return _zeros_like(x, 1)
    base = x
    if n < 0:
        if not x.hlo_dtype.is_float:
            raise ValueError(located("hnp.power: integers cannot be raised to a negative "
                                     "integer power"))
        base = prim.binary(Op.DIVIDE, _zeros_like(x, 1), x)
        n = -n
    result: Tracer | None = None
    while n:
        if n & 1:
            result = base if result is None else prim.binary(Op.MULTIPLY, result, base)
        n >>= 1
        if n:
            base = prim.binary(Op.MULTIPLY, base, base)
    assert result is not None
    return result


@eager
def power(x: Any, y: Any) -> Tracer:
    if isinstance(y, int) and not isinstance(y, bool):
        base = to_tracer(x, "hnp.power operand")
        _check("hnp.power", base, allow_bool=False)
        return _integer_pow(base, y)
    a, b = promote_operands("hnp.power", x, y)
    _check("hnp.power", a, allow_bool=False)
    return prim.binary(Op.POWER, a, b)


@eager
def square(x: Any) -> Tracer:
    return power(x, 2)


@eager
def clip(x: Any, a_min: Any = None, a_max: Any = None) -> Tracer:
    """minimum(maximum(x, a_min), a_max), as JAX writes it."""
    out = to_tracer(x)
    if a_min is not None:
        out = maximum(out, a_min)
    if a_max is not None:
        out = minimum(out, a_max)
    return out


def _comparison(direction: str, name: str) -> Any:
    @eager
    def fn(x: Any, y: Any) -> Tracer:
        a, b = promote_operands(f"hnp.{name}", x, y)
        return prim.compare(a, b, direction)

    fn.__name__ = fn.__qualname__ = name
    return fn


equal = _comparison("EQ", "equal")
not_equal = _comparison("NE", "not_equal")
less = _comparison("LT", "less")
less_equal = _comparison("LE", "less_equal")
greater = _comparison("GT", "greater")
greater_equal = _comparison("GE", "greater_equal")


def to_bool(x: Any, name: str) -> Tracer:
    t = to_tracer(x, f"{name} operand")
    if t.hlo_dtype.is_pred:
        return t
    return prim.compare(t, _zeros_like(t), "NE")


@eager
def where(condition: Any, x: Any = None, y: Any = None) -> Tracer:
    if x is None or y is None:
        raise NotImplementedError(located("hnp.where with one argument (nonzero) is not "
                                          "implemented: its result shape depends on values"))
    a, b = promote_operands("hnp.where", x, y, shape=False)
    pred, a, b = broadcast_all("hnp.where", [to_bool(condition, "hnp.where"), a, b])
    return prim.select(pred, a, b)


def _logical(op: Op, name: str) -> Any:
    @eager
    def fn(x: Any, y: Any) -> Tracer:
        a, b = broadcast_all(f"hnp.{name}", [to_bool(x, f"hnp.{name}"),
                                             to_bool(y, f"hnp.{name}")])
        return prim.binary(op, a, b)

    fn.__name__ = fn.__qualname__ = name
    return fn


logical_and = _logical(Op.AND, "logical_and")
logical_or = _logical(Op.OR, "logical_or")
logical_xor = _logical(Op.XOR, "logical_xor")


@eager
def logical_not(x: Any) -> Tracer:
    return prim.unary(Op.NOT, to_bool(x, "hnp.logical_not"))


def _bitwise(op: Op, name: str) -> Any:
    @eager
    def fn(x: Any, y: Any) -> Tracer:
        a, b = promote_operands(f"hnp.{name}", x, y)
        _check(f"hnp.{name}", a, allow_float=False)
        return prim.binary(op, a, b)

    fn.__name__ = fn.__qualname__ = name
    return fn


bitwise_and = _bitwise(Op.AND, "bitwise_and")
bitwise_or = _bitwise(Op.OR, "bitwise_or")
bitwise_xor = _bitwise(Op.XOR, "bitwise_xor")


@eager
def invert(x: Any) -> Tracer:
    x = to_tracer(x)
    _check("hnp.invert", x, allow_float=False)
    return prim.unary(Op.NOT, x)


bitwise_not = invert


@eager
def left_shift(x: Any, y: Any) -> Tracer:
    a, b = promote_operands("hnp.left_shift", x, y)
    _check("hnp.left_shift", a, allow_float=False, allow_bool=False)
    return prim.binary(Op.SHIFT_LEFT, a, b)


@eager
def right_shift(x: Any, y: Any) -> Tracer:
    """Arithmetic for signed integers, logical for unsigned ones, as in NumPy."""
    a, b = promote_operands("hnp.right_shift", x, y)
    _check("hnp.right_shift", a, allow_float=False, allow_bool=False)
    op = Op.SHIFT_RIGHT_LOGICAL if a.hlo_dtype.is_unsigned_int else Op.SHIFT_RIGHT_ARITHMETIC
    return prim.binary(op, a, b)


@eager
def astype(x: Any, dtype: Any) -> Tracer:
    return prim.convert(to_tracer(x), to_dtype(dtype))


@eager
def isfinite(x: Any) -> Tracer:
    x = to_tracer(x)
    if not x.hlo_dtype.is_float:
        return prim.full(x.shape, True, DType.PRED)
    return prim.unary(Op.IS_FINITE, x)
