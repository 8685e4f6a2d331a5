"""NumPy reference semantics of HLO element-wise operations, following XLA, not NumPy.

Element types are preserved (f32 stays f32), integers wrap, shifts past the bit width give 0 (or
the sign for arithmetic shifts), integer division by zero gives -1 (all bits set) and x % 0 gives
x, INT_MIN / -1 gives INT_MIN, and float comparisons follow IEEE. f16, bf16 and f32 transcendental
functions are computed in f64 and rounded once: results are then (almost always) correctly
rounded and the same on every machine, where NumPy's own f32 kernels differ between CPUs by an
ulp or two. XLA's approximations are within a few ulp of these.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

Array = np.ndarray
_LOW_PRECISION = ("float16", "bfloat16")
_WIDENED = ("float16", "bfloat16", "float32")  # transcendental functions run in float64


def _quiet(fn: Callable[..., Array]) -> Callable[..., Array]:
    def wrapped(*args: Array, **kwargs: object) -> Array:
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    wrapped.__name__ = fn.__name__
    return wrapped


def quieted(x: Array) -> Array:
    """`x` with every NaN made quiet (the top mantissa bit set), sign and payload kept, as an
    arithmetic operation on a NaN operand leaves it on x86."""
    if x.dtype.kind != "f" and x.dtype.name != "bfloat16":
        return x
    x = np.asarray(x)
    bits = x.dtype.itemsize * 8
    mantissa = {16: 10 if x.dtype.name == "float16" else 7, 32: 23, 64: 52}[bits]
    unsigned = np.dtype(f"u{x.dtype.itemsize}")
    quiet_bit = np.array(1 << (mantissa - 1), unsigned)
    with np.errstate(invalid="ignore"):
        nan = np.isnan(x.astype(np.float32) if bits == 16 else x)
    return np.where(nan, (x.view(unsigned) | quiet_bit).view(x.dtype), x).astype(x.dtype)


def _first_nan(result: Array, *operands: Array) -> Array:
    """Where `result` is NaN because an operand was, that operand's NaN (the first NaN one,
    quieted), as XLA's CPU code returns it: sign and payload carried through."""
    out = result
    for operand in reversed(operands):
        operand = np.broadcast_to(operand, result.shape)
        with np.errstate(invalid="ignore"):
            pick = np.isnan(out.astype(np.float64)) & np.isnan(operand.astype(np.float64))
        out = np.where(pick, quieted(operand).astype(result.dtype), out)
    return out.astype(result.dtype)


def _float_math(ufunc: Callable[[Array], Array]) -> Callable[[Array], Array]:
    """A transcendental function that keeps the operand's float type; a NaN operand comes back
    quieted with its sign and payload (NumPy's functions may drop the sign: tanh does)."""

    @_quiet
    def apply(x: Array) -> Array:
        if x.dtype.name in _WIDENED:
            y = np.asarray(ufunc(x.astype(np.float64))).astype(x.dtype)
        else:
            y = np.asarray(ufunc(x)).astype(x.dtype)
        return _first_nan(y, x)

    return apply


def _logistic(x: Array) -> Array:
    return 1 / (1 + np.exp(-x))


def _rsqrt(x: Array) -> Array:
    return 1 / np.sqrt(x)


_erf = np.vectorize(math.erf, otypes=[np.float64])

sine = _float_math(np.sin)
cosine = _float_math(np.cos)
tan = _float_math(np.tan)
tanh = _float_math(np.tanh)
exponential = _float_math(np.exp)
exponential_minus_one = _float_math(np.expm1)
log = _float_math(np.log)
log_plus_one = _float_math(np.log1p)
logistic = _float_math(_logistic)
sqrt = _float_math(np.sqrt)
rsqrt = _float_math(_rsqrt)
cbrt = _float_math(np.cbrt)
erf = _float_math(lambda x: _erf(x.astype(np.float64)))
floor = _float_math(np.floor)
ceil = _float_math(np.ceil)
round_nearest_even = _float_math(np.rint)


@_quiet
def round_nearest_afz(x: Array) -> Array:
    truncated = np.trunc(x)
    fraction = x - truncated  # exact
    # Adding a +0.0 would turn round(-0.4) = -0.0 into +0.0; only add where rounding away.
    away = np.abs(fraction) >= 0.5
    return np.where(away, truncated + np.sign(x), truncated).astype(x.dtype)


@_quiet
def abs_(x: Array) -> Array:
    return np.abs(x).astype(x.dtype)


@_quiet
def negate(x: Array) -> Array:
    if x.dtype.kind == "u":
        return (np.zeros_like(x) - x).astype(x.dtype)
    return np.negative(x)


@_quiet
def sign(x: Array) -> Array:
    if x.dtype.kind == "u":
        return (x != 0).astype(x.dtype)
    one = np.ones((), x.dtype)
    return np.where(x > 0, one, np.where(x < 0, -one, x)).astype(x.dtype)


def is_finite(x: Array) -> Array:
    return np.isfinite(x)


def not_(x: Array) -> Array:
    if x.dtype == np.bool_:
        return np.logical_not(x)
    return np.invert(x)


def popcnt(x: Array) -> Array:
    unsigned = x.view(np.dtype(f"u{x.dtype.itemsize}"))
    return np.bitwise_count(unsigned).astype(x.dtype)


def count_leading_zeros(x: Array) -> Array:
    bits = x.dtype.itemsize * 8
    unsigned = x.view(np.dtype(f"u{x.dtype.itemsize}")).astype(np.uint64)
    count = np.full(x.shape, bits, dtype=np.int64)
    for position in range(bits):
        is_set = ((unsigned >> np.uint64(position)) & np.uint64(1)) == 1
        count = np.where(is_set, bits - 1 - position, count)
    return count.astype(x.dtype)


add = _quiet(lambda x, y: np.add(x, y).astype(x.dtype))
subtract = _quiet(lambda x, y: np.subtract(x, y).astype(x.dtype))
atan2 = _float_math(lambda x: x)  # replaced below; keeps the signature table simple


@_quiet
def multiply(x: Array, y: Array) -> Array:
    if x.dtype == np.bool_:
        return np.logical_and(x, y)
    return np.multiply(x, y).astype(x.dtype)


@_quiet
def _atan2(y: Array, x: Array) -> Array:
    if y.dtype.name in _WIDENED:
        r = np.arctan2(y.astype(np.float64), x.astype(np.float64)).astype(y.dtype)
    else:
        r = np.arctan2(y, x).astype(y.dtype)
    return _first_nan(r, x, y)  # XLA's CPU atan2 returns x's NaN when both are


atan2 = _atan2


def _int_limits(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


@_quiet
def divide(x: Array, y: Array) -> Array:
    if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
        return np.divide(x, y).astype(x.dtype)
    return _int_divide(x, y, want_remainder=False)


@_quiet
def remainder(x: Array, y: Array) -> Array:
    if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
        if x.dtype.name in _LOW_PRECISION:
            return np.fmod(x.astype(np.float32), y.astype(np.float32)).astype(x.dtype)
        return np.fmod(x, y).astype(x.dtype)
    return _int_divide(x, y, want_remainder=True)


def _int_divide(x: Array, y: Array, want_remainder: bool) -> Array:
    """C-style truncating division with XLA's answers for /0 and INT_MIN / -1."""
    x, y = np.broadcast_arrays(x, y)
    dtype = x.dtype
    xs = x.astype(object).ravel()
    ys = y.astype(object).ravel()
    low, high = _int_limits(dtype)
    out = []
    for a, b in zip(xs, ys):
        a, b = int(a), int(b)
        if b == 0:
            out.append(a if want_remainder else (-1 if dtype.kind == "i" else high))
            continue
        quotient = abs(a) // abs(b)
        if (a < 0) != (b < 0):
            quotient = -quotient
        rem = a - quotient * b
        if not want_remainder and quotient > high:  # INT_MIN / -1 overflows back to INT_MIN
            quotient = low
        out.append(rem if want_remainder else quotient)
    return np.array(out, dtype=object).reshape(x.shape).astype(dtype)


@_quiet
def maximum(x: Array, y: Array) -> Array:
    if x.dtype == np.bool_:
        return np.logical_or(x, y)
    return np.maximum(x, y).astype(x.dtype)


@_quiet
def minimum(x: Array, y: Array) -> Array:
    if x.dtype == np.bool_:
        return np.logical_and(x, y)
    return np.minimum(x, y).astype(x.dtype)


def _is_subnormal(x: Array, smallest_normal: float) -> Array:
    magnitude = np.abs(x.astype(np.float64))
    return (magnitude != 0) & (magnitude < smallest_normal)


@_quiet
def power(x: Array, y: Array) -> Array:
    """XLA's CPU pow: the C library's pow run under DAZ (operands unflushed; flushing the
    result is the caller's, as for every op). glibc normalises a subnormal base by multiplying
    it by 2^23 (2^52 for f64), which DAZ flushes, so a subnormal base reads as +-2^-150 for
    f32 and bf16 (computed in f32) and +-2^-1075 for f64, its sign kept; the exponent is read
    exactly. f16 has no subnormals once in f32. Measured against XLA: tests/fuzz/corpus,
    wrong-none-seed235 and -seed453."""
    if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
        x, y = np.broadcast_arrays(x, y)
        if x.dtype.name in _WIDENED:
            base = x.astype(np.float64)
            if x.dtype.name != "float16":
                read_as = np.copysign(2.0**-150, base)
                base = np.where(_is_subnormal(x, 2.0**-126), read_as, base)
            r = np.power(base, y.astype(np.float64)).astype(x.dtype)
        else:
            r = np.power(x, y).astype(x.dtype)
            subnormal = _is_subnormal(x, 2.0**-1022)
            if subnormal.any():
                # +-2^-1075 is no double: pow(+-2^-1000, y) * pow(2^-75, y) is its power.
                scaled = np.power(np.copysign(2.0**-1000, x), y) * np.power(2.0**-75, y)
                r = np.where(subnormal, scaled, r).astype(x.dtype)
        return _first_nan(r, x, y)
    return _int_power(x, y)


def _int_power(x: Array, y: Array) -> Array:
    """Exponentiation by squaring with wrap-around; a negative exponent gives 1 if x == 1, else 0
    (XLA's evaluator and CPU emitter agree: (-1) ** -1 is 0, not -1)."""
    x, y = np.broadcast_arrays(x, y)
    dtype = x.dtype
    result = np.ones(x.shape, dtype)
    base = x.copy()
    exponent = y.astype(np.int64) if dtype.kind == "i" else y.astype(np.uint64)
    negative = exponent < 0
    exponent = np.where(negative, 0, exponent)
    for _ in range(dtype.itemsize * 8):
        odd = (exponent & 1) == 1
        result = np.where(odd, result * base, result).astype(dtype)
        base = (base * base).astype(dtype)
        exponent = exponent >> 1
    if dtype.kind == "i":
        neg_result = (x == 1).astype(dtype)
        result = np.where(negative, neg_result, result)
    return result.astype(dtype)


def and_(x: Array, y: Array) -> Array:
    return np.bitwise_and(x, y)


def or_(x: Array, y: Array) -> Array:
    return np.bitwise_or(x, y)


def xor(x: Array, y: Array) -> Array:
    return np.bitwise_xor(x, y)


def _shift_amount(x: Array, y: Array) -> tuple[Array, Array | None]:
    """The shift amounts in x's type, and where they reach past its width (None: nowhere,
    as in almost every shift, whose amount is a constant below the width)."""
    bits = x.dtype.itemsize * 8
    amount = y.view(np.dtype(f"u{y.dtype.itemsize}")).astype(np.uint64)
    too_far = amount >= bits
    if not too_far.any():
        return amount.astype(x.dtype), None
    return np.where(too_far, 0, amount).astype(x.dtype), too_far


def shift_left(x: Array, y: Array) -> Array:
    amount, too_far = _shift_amount(x, y)
    shifted = np.left_shift(x, amount).astype(x.dtype)
    if too_far is None:
        return np.asarray(shifted)
    return np.where(too_far, np.zeros((), x.dtype), shifted).astype(x.dtype)


def shift_right_logical(x: Array, y: Array) -> Array:
    unsigned_type = np.dtype(f"u{x.dtype.itemsize}")
    amount, too_far = _shift_amount(x, y)
    shifted = np.right_shift(x.view(unsigned_type), amount.view(unsigned_type)).view(x.dtype)
    if too_far is None:
        return np.asarray(shifted)
    return np.where(too_far, np.zeros((), x.dtype), shifted).astype(x.dtype)


def shift_right_arithmetic(x: Array, y: Array) -> Array:
    signed_type = np.dtype(f"i{x.dtype.itemsize}")
    amount, too_far = _shift_amount(x, y)
    signed = x.view(signed_type)
    shifted = np.right_shift(signed, amount.view(signed_type))
    if too_far is None:
        return np.asarray(shifted).view(x.dtype)
    sign_fill = np.where(signed < 0, np.array(-1, signed_type), np.array(0, signed_type))
    return np.where(too_far, sign_fill, shifted).astype(signed_type).view(x.dtype)


def _total_order_key(x: Array) -> Array:
    """Map floats to signed integers whose order is XLA's total order (-NaN < -inf < -0 < +0).

    Sign-magnitude to two's complement: a negative float's magnitude bits are flipped, so -0.0
    becomes -1 (just below +0.0 = 0) and larger magnitudes become more negative.
    """
    width = x.dtype.itemsize
    signed = x.view(np.dtype(f"i{width}")).astype(np.int64)
    magnitude_mask = (1 << (width * 8 - 1)) - 1
    return np.where(signed < 0, -(signed & magnitude_mask) - 1, signed)


_DIRECTIONS: dict[str, Callable[[Array, Array], Array]] = {
    "EQ": np.equal,
    "NE": np.not_equal,
    "LT": np.less,
    "LE": np.less_equal,
    "GT": np.greater,
    "GE": np.greater_equal,
}


@_quiet
def compare(x: Array, y: Array, direction: str, kind: str | None = None) -> Array:
    fn = _DIRECTIONS[direction]
    if kind == "TOTALORDER":
        return fn(_total_order_key(x), _total_order_key(y))
    if kind == "UNSIGNED" and x.dtype.kind == "i":
        unsigned_type = np.dtype(f"u{x.dtype.itemsize}")
        return fn(x.view(unsigned_type), y.view(unsigned_type))
    if kind == "SIGNED" and x.dtype.kind == "u":
        signed_type = np.dtype(f"i{x.dtype.itemsize}")
        return fn(x.view(signed_type), y.view(signed_type))
    return fn(x, y)


def select(pred: Array, on_true: Array, on_false: Array) -> Array:
    return np.where(pred, on_true, on_false).astype(on_true.dtype)


@_quiet
def clamp(low: Array, x: Array, high: Array) -> Array:
    return np.minimum(np.maximum(x, low), high).astype(x.dtype)


@_quiet
def convert(x: Array, target: np.dtype) -> Array:
    """XLA's convert: float to int saturates and maps NaN to 0; to pred means != 0."""
    if target == np.bool_:
        return x != 0
    is_float_source = x.dtype.kind == "f" or x.dtype.name == "bfloat16"
    if target.kind in "iu" and is_float_source:
        low, high = _int_limits(target)
        wide = x.astype(np.float64)
        wide = np.where(np.isnan(wide), 0.0, np.trunc(wide))
        below, above = wide <= low, wide >= high
        inside = np.clip(wide, low, high)
        out = np.where(below | above, 0, inside).astype(target)
        out = np.where(below, np.array(low, target), out)
        return np.where(above, np.array(high, target), out).astype(target)
    if x.dtype.name == "bfloat16" or target.name == "bfloat16":
        if x.dtype.kind in "iub" and target.name == "bfloat16":
            return x.astype(np.float64).astype(np.float32).astype(target)
    return x.astype(target)


def bitcast_convert(x: Array, target: np.dtype) -> Array:
    """The bytes reinterpreted in memory order (little-endian, as XLA's CPU backend): a wider
    target absorbs the last dimension, a narrower one adds a last dimension."""
    source_size, target_size = x.dtype.itemsize, np.dtype(target).itemsize
    if target_size > source_size:
        shape = x.shape[:-1]
    elif target_size < source_size:
        shape = (*x.shape, source_size // target_size)
    else:
        shape = x.shape
    # ascontiguousarray makes 0-d arrays 1-d; the reshape gives the result's shape.
    data = np.ascontiguousarray(x)
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    return data.view(target).reshape(shape)
