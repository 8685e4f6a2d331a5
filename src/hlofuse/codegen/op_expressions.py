"""Expressions of the element-wise ops, with XLA's semantics rather than C's.

Each handler gets the instruction, its operands' values (cir expressions in register form)
and the language, and returns the result's expression in register form. Integer + - * are
computed in an unsigned type so they wrap instead of being undefined; f16/bf16 are computed in
f32 and rounded after every operation; the helpers named hlofuse_* live in templates.HEADER.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from hlofuse.codegen import cir
from hlofuse.codegen.cir import Binary, Cast, Const, Expr, Select, Unary, call
from hlofuse.codegen.language import Language, literal_float, signed_of, unsigned_of
from hlofuse.codegen.reduce_precision import reduce_precision
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op

Handler = Callable[[Language, Instruction, list[Expr]], Expr]


def _operand_dtype(inst: Instruction, i: int = 0) -> DType:
    return inst.operands[i].dtype


def _wrapping(symbol: str) -> Handler:
    """+ - * : floats round to their type, integers wrap, pred is or/and."""

    def emit(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
        dtype = inst.dtype
        if dtype.is_float:
            return lang.round_to(dtype, Binary(symbol, x[0], x[1]))
        if dtype.is_pred:
            return Binary("|" if symbol == "+" else "&", x[0], x[1])
        wide = lang.wrap_type(dtype)
        return Cast(dtype, Binary(symbol, Cast(wide, x[0]), Cast(wide, x[1])))

    return emit


def _bitwise(symbol: str) -> Handler:
    def emit(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
        return Cast(inst.dtype, Binary(symbol, x[0], x[1]))

    return emit


_NARROW = (DType.F16, DType.BF16)


def _double(x: Expr) -> Expr:
    return Cast(DType.F64, x)


def _float_function(name: str) -> Handler:
    """A math function of one float operand. f16 and bf16 evaluate it in f64 and round once,
    as the reference does; f32 uses the math library, which works in f64 and rounds once."""

    def emit(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
        if inst.dtype in _NARROW:
            return lang.from_double(inst.dtype, lang.call_math(name, DType.F64, _double(x[0])))
        return lang.call_math(name, inst.dtype, x[0])

    return emit


def _float_function2(name: str) -> Handler:
    def emit(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
        if inst.dtype in _NARROW:
            wide = lang.call_math(name, DType.F64, _double(x[0]), _double(x[1]))
            return lang.from_double(inst.dtype, wide)
        return lang.call_math(name, inst.dtype, x[0], x[1])

    return emit


def _divide(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    if inst.dtype.is_float:
        return lang.round_to(inst.dtype, Binary("/", x[0], x[1]))
    return call(f"hlofuse_div_{lang.type_tag(inst.dtype)}", x[0], x[1])


def math_arguments(inst: Instruction, x: list[Expr]) -> list[Expr]:
    """The arguments a float instruction's math function takes from its operands' values
    (the header's small-argument forms take the same: codegen/whole_loop_lanes.py)."""
    if inst.op is Op.REMAINDER and inst.dtype.is_float:
        # XLA's CPU remainder is the C library's fmod, exact on the dividend and the result
        # (no flush); its divisor meets a comparison with zero, so a denormal one reads as 0.
        return [x[0], _flushed(inst.dtype, x[1])]
    return x


def _remainder(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    if inst.dtype.is_float:
        fmod = call(lang.math("fmod", inst.dtype), *math_arguments(inst, x))
        return lang.round_to(inst.dtype, fmod)
    return call(f"hlofuse_rem_{lang.type_tag(inst.dtype)}", x[0], x[1])


def _power(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    """XLA's CPU pow is the C library's pow run under DAZ: its operands are not flushed, but
    glibc reads a subnormal base as +-2^-150 (f32, and bf16 in f32 registers) or +-2^-1075
    (f64); the result is flushed (codegen/mathlib/hlofuse_math.h, hlofuse_pow_cpuf). f16
    values are normal numbers in f32 registers, so f16 is plain pow in f64, rounded once."""
    dtype = inst.dtype
    if dtype is DType.F16:
        return _float_function2("pow")(lang, inst, x)
    if dtype in (DType.F32, DType.BF16):
        return lang.round_to(dtype, call("hlofuse_daz_f", call("hlofuse_pow_cpuf", x[0], x[1])))
    if dtype is DType.F64:
        pow_ = lang.math("pow", DType.F64)
        scaled = Binary("*", call(pow_, call("hlofuse_pow_cpu_base", x[0]), x[1]),
                        call(pow_, lang.literal(DType.F64, 2.0**-75), x[1]))
        plain = call(pow_, x[0], x[1])
        return call("hlofuse_daz_d", Select(call("hlofuse_is_subnormal", x[0]), scaled, plain))
    return call(f"hlofuse_pow_{lang.type_tag(dtype)}", x[0], x[1])


def _flushed(dtype: DType, x: Expr) -> Expr:
    """`x` as XLA's CPU code reads it under DAZ: a subnormal is a zero of its sign (f16 has no
    subnormals in f32 registers)."""
    if dtype is DType.F64:
        return call("hlofuse_daz_d", x)
    if dtype in (DType.F32, DType.BF16):
        return call("hlofuse_daz_f", x)
    return x


def _normal_constant(expr: Expr) -> float | None:
    """The value of a float literal that is a normal, nonzero, finite number of its type (f32
    or f64), else None."""
    if not isinstance(expr, Const) or expr.dtype not in (DType.F32, DType.F64):
        return None
    value = literal_float(expr)
    smallest = 2.0**-126 if expr.dtype is DType.F32 else 2.0**-1022
    return value if math.isfinite(value) and abs(value) >= smallest else None


def _is_positive_zero(expr: Expr) -> bool:
    """A +0.0 literal of f32 or f64 (its f64 bits are all zero)."""
    return isinstance(expr, Const) and expr.dtype in (DType.F32, DType.F64) and \
        int(expr.value) == 0


# f32 operations whose result the hardware computes, so that FTZ (set in every CPU kernel,
# nvcc's -ftz=true for f32 on the GPU) flushes a subnormal result to a zero of its sign.
_FLUSHED_F32_RESULTS = frozenset({Op.ADD, Op.SUBTRACT, Op.MULTIPLY, Op.DIVIDE})


def _flushed_result(inst: Instruction) -> bool:
    """Whether an f32 value is never subnormal: computed by an operation FTZ flushes, or a
    maximum/minimum of two values (which reads them flushed)."""
    if inst.dtype is not DType.F32:
        return False
    if inst.op in (Op.MAXIMUM, Op.MINIMUM):
        return inst.operands[0] is not inst.operands[1]
    return inst.op in _FLUSHED_F32_RESULTS


def _extremum(is_max: bool) -> Handler:
    """XLA's maximum and minimum: NaN wins, -0 < +0, operands read flushed (templates.HEADER,
    hlofuse_max_f); max(x, x) is x itself, unflushed, since LLVM folds it so."""

    def emit(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
        dtype = inst.dtype
        if dtype.is_pred:
            return Binary("|" if is_max else "&", x[0], x[1])
        if inst.op in (Op.MAXIMUM, Op.MINIMUM) and inst.operands[0] is inst.operands[1]:
            return x[0]
        if dtype.is_float:
            which = "max" if is_max else "min"
            suffix = "d" if dtype is DType.F64 else "f"
            for k in (0, 1):
                value, bound = x[k], x[1 - k]
                if is_max and _is_positive_zero(bound):
                    kind = "plain" if _flushed_result(inst.operands[k]) else "flush"
                    return call(f"hlofuse_max_zero_{suffix}_{kind}", value)
                number = _normal_constant(bound)
                if number is not None:
                    # a value beyond a positive bound (max) or below a negative one (min) is
                    # a normal number, and so is a value computed under FTZ: no flush
                    plain = (number > 0) == is_max or _flushed_result(inst.operands[k])
                    kind = "plain" if plain else "flush"
                    return call(f"hlofuse_{which}_{suffix}_{kind}", value, bound)
            return call(f"hlofuse_{which}_{suffix}", x[0], x[1])
        return Select(Binary(">" if is_max else "<", x[0], x[1]), x[0], x[1])

    return emit


def _zero_minus(wide: DType, x: Expr) -> Expr:
    return Binary("-", Cast(wide, cir.Int(0)), Cast(wide, x))


def _abs(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    dtype = inst.dtype
    if dtype.is_float:
        return call(lang.math("fabs", dtype), x[0])
    if dtype.is_unsigned_int:
        return x[0]
    wide = lang.wrap_type(dtype)
    negative = Binary("<", x[0], cir.Int(0))
    return Cast(dtype, Select(negative, _zero_minus(wide, x[0]),
                                                 Cast(wide, x[0])))


def _negate(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    dtype = inst.dtype
    if dtype.is_float:
        return Unary("-", x[0])
    return Cast(dtype, _zero_minus(lang.wrap_type(dtype), x[0]))


def _sign(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    dtype = inst.dtype
    register = lang.register_type(dtype)
    zero = cir.Int(0)
    if dtype.is_float:
        # XLA: copysign(x != 0, x) under DAZ, NaN kept: a subnormal gives a zero of its sign.
        one = lang.literal(dtype, 1)
        flushed = _flushed(dtype, x[0])
        return Select(Binary(">", flushed, zero), one,
                      Select(Binary("<", flushed, zero), Unary("-", one), flushed))
    if dtype.is_unsigned_int:
        return Cast(register, Binary("!=", x[0], zero))
    return Cast(register, Binary("-", Binary(">", x[0], zero), Binary("<", x[0], zero)))


def _not(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    if inst.dtype.is_pred:
        return Cast(DType.PRED, Unary("!", x[0]))
    return Cast(inst.dtype, Unary("~", x[0]))


def _popcnt(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    dtype = inst.dtype
    wide = lang.wrap_type(dtype)
    bits = Cast(wide, Cast(unsigned_of(dtype), x[0]))
    return Cast(dtype, call(lang.bit_function("popcount", wide), bits))


def _clz(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    dtype = inst.dtype
    unsigned = Cast(unsigned_of(dtype), x[0])
    count: Expr
    if dtype.bits == 64:
        count = call(lang.bit_function("clz", DType.U64), Cast(DType.U64, unsigned))
    else:
        count = Binary("-", call(lang.bit_function("clz", DType.U32), Cast(DType.U32, unsigned)),
                       cir.Int(32 - dtype.bits))
    zero = Binary("==", x[0], cir.Int(0))
    return Cast(dtype, Select(zero, cir.Int(dtype.bits), count))


def _shift(helper: str) -> Handler:
    """A shift by a literal amount inside the bit width is C's own shift (the helpers' range
    check folds away then anyway, but only after inlining: a Threefry hash has dozens)."""

    def emit(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
        dtype = inst.dtype
        amount = x[1]
        n = amount.value if isinstance(amount, cir.Const) and amount.dtype.is_integer else None
        if n is None or not 0 <= n < dtype.bits:
            return call(f"hlofuse_{helper}_{lang.type_tag(dtype)}", x[0], x[1])
        unsigned = unsigned_of(dtype)
        if helper == "shl":
            wide = Cast(lang.wrap_type(dtype), Cast(unsigned, x[0]))
            return Cast(dtype, Binary("<<", wide, cir.Int(int(n))))
        if helper == "shrl":
            return Cast(dtype, Binary(">>", Cast(unsigned, x[0]), cir.Int(int(n))))
        return Cast(dtype, Binary(">>", Cast(signed_of(dtype), x[0]), cir.Int(int(n))))

    return emit


_COMPARE_SYMBOLS = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def _compare(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    symbol = _COMPARE_SYMBOLS[str(inst.attrs["direction"])]
    kind = inst.attrs.get("type")
    dtype = _operand_dtype(inst)
    a, b = x
    if kind == "TOTALORDER" and dtype.is_float:
        key = "hlofuse_total_key_d" if dtype is DType.F64 else "hlofuse_total_key_f"
        a, b = call(key, a), call(key, b)
    elif kind == "UNSIGNED" and dtype.is_signed_int:
        a, b = Cast(unsigned_of(dtype), a), Cast(unsigned_of(dtype), b)
    elif kind == "SIGNED" and dtype.is_unsigned_int:
        a, b = Cast(signed_of(dtype), a), Cast(signed_of(dtype), b)
    return Cast(DType.PRED, Binary(symbol, a, b))


def _select(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    return Select(x[0], x[1], x[2])


def _clamp(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    maximum, minimum = _extremum(True), _extremum(False)
    low_bounded = maximum(lang, inst, [x[1], x[0]])
    return minimum(lang, inst, [low_bounded, x[2]])


def _is_finite(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    return Cast(DType.PRED, call(lang.math("isfinite", inst.operands[0].dtype), x[0]))


def _logistic(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    if inst.dtype in _NARROW:
        exp = lang.call_math("exp", DType.F64, Unary("-", _double(x[0])))
        one = lang.literal(DType.F64, 1.0)
        return lang.from_double(inst.dtype, Binary("/", one, Binary("+", one, exp)))
    if lang.has_math("logistic", inst.dtype):
        return lang.call_math("logistic", inst.dtype, x[0])
    one = lang.literal(inst.dtype, 1.0)
    exp = lang.call_math("exp", inst.dtype, Unary("-", x[0]))
    return Binary("/", one, Binary("+", one, exp))


def _rsqrt(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    # 1 / sqrt in f64 and rounded once, as the reference (f32 included) computes it.
    one = lang.literal(DType.F64, 1.0)
    if inst.dtype is DType.F64:
        return Binary("/", one, lang.call_math("sqrt", DType.F64, x[0]))
    operand = _double(call("hlofuse_daz_f", x[0]) if inst.dtype is DType.F32 else x[0])
    return lang.from_double(inst.dtype,
                            Binary("/", one, call(lang.math("sqrt", DType.F64), operand)))


def _erf(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    # The reference evaluates erf in f64 whatever the type, then rounds once.
    if inst.dtype is DType.F64:
        return lang.call_math("erf", DType.F64, x[0])
    if inst.dtype in _NARROW:
        return lang.from_double(inst.dtype, lang.call_math("erf", DType.F64, _double(x[0])))
    return lang.call_math("erf", inst.dtype, x[0])


def convert_expression(lang: Language, source: DType, target: DType, x: Expr) -> Expr:
    """XLA's convert: float->int saturates with NaN->0; ->pred is != 0; exact f16/bf16 rounding."""
    if target is DType.PRED:
        return Cast(DType.PRED, Binary("!=", x, cir.Int(0)))
    if target.is_integer:
        if source.is_float:
            return call(f"hlofuse_sat_{lang.type_tag(target)}", _double(x))
        return Cast(target, x)
    if target is DType.F64:
        return _double(x)
    if target is DType.F32:
        return Cast(DType.F32, x)
    if target is DType.F16:
        if source is DType.F64:
            return call("hlofuse_f16_to_f32", call("hlofuse_f64_to_f16", x))
        return call("hlofuse_round_f16", Cast(DType.F32, x))
    # bf16: the reference goes through f64 and then f32 for integers, through f32 for floats.
    if source.is_integer and source.bits == 64:
        return call("hlofuse_round_bf16", Cast(DType.F32, _double(x)))
    return call("hlofuse_round_bf16", Cast(DType.F32, x))


def _convert(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    return convert_expression(lang, _operand_dtype(inst), inst.dtype, x[0])


def bits_of(lang: Language, dtype: DType, x: Expr) -> Expr:
    """The bits of a register-form value, in the unsigned type of its width."""
    if dtype.is_float and dtype.bits >= 32:
        return call(f"hlofuse_f{dtype.bits}_bits", x)
    return Cast(unsigned_of(dtype), lang.to_storage(dtype, x))


def from_bits(lang: Language, dtype: DType, bits: Expr) -> Expr:
    """The register-form value of `dtype` whose bits (of its width, unsigned) are `bits`.

    A float whose register form can hold a denormal is made from bits the C compiler cannot
    know (templates.HEADER, hlofuse_unseen_zero32), so that it never evaluates arithmetic on
    such a denormal while compiling, in IEEE arithmetic, where the kernel's DAZ reads zero.
    An f16 is widened to a normal f32 and needs no such care."""
    if dtype is DType.PRED:
        return Cast(DType.PRED, Binary("!=", bits, cir.Int(0)))
    if dtype is DType.F32:
        return call("hlofuse_f32_from_unseen_bits", bits)
    if dtype is DType.F64:
        return call("hlofuse_f64_from_unseen_bits", bits)
    if dtype is DType.F16:
        return call("hlofuse_f16_to_f32", bits)
    if dtype is DType.BF16:
        return call("hlofuse_bf16_from_unseen_bits", bits)
    return Cast(dtype, bits)


def _bitcast_convert(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    """Equal widths; a width change reads several operand elements or part of one
    (ElementalEmitter, bitcast_piece and bitcast_joined)."""
    return from_bits(lang, inst.dtype, bits_of(lang, _operand_dtype(inst), x[0]))


def bitcast_piece(lang: Language, source: DType, target: DType, x: Expr, k: Expr) -> Expr:
    """Piece `k` (little-endian: 0 the least significant) of `x`'s bits as a `target`."""
    shift = cir.mul(k, target.bits) if not cir.is_zero(k) else None
    wide = Cast(lang.wrap_type(source), bits_of(lang, source, x))
    shifted = wide if shift is None else Binary(">>", wide, shift)
    return from_bits(lang, target, Cast(unsigned_of(target), shifted))


def bitcast_joined(lang: Language, source: DType, target: DType, pieces: list[Expr]) -> Expr:
    """A `target` whose bits are the `source` values `pieces`, the first least significant."""
    wide = lang.wrap_type(target)
    joined: Expr | None = None
    for k, piece in enumerate(pieces):
        part: Expr = Cast(wide, bits_of(lang, source, piece))
        if k:
            part = Binary("<<", part, cir.Int(k * source.bits))
        joined = part if joined is None else Binary("|", joined, part)
    assert joined is not None
    return from_bits(lang, target, Cast(unsigned_of(target), joined))


ELEMENTWISE: dict[Op, Handler] = {
    Op.ABS: _abs,
    Op.ADD: _wrapping("+"),
    Op.AND: _bitwise("&"),
    Op.ATAN2: _float_function2("atan2"),
    Op.BITCAST_CONVERT: _bitcast_convert,
    Op.CBRT: _float_function("cbrt"),
    Op.CEIL: _float_function("ceil"),
    Op.CLAMP: _clamp,
    Op.CLZ: _clz,
    Op.COMPARE: _compare,
    Op.CONVERT: _convert,
    Op.COSINE: _float_function("cos"),
    Op.DIVIDE: _divide,
    Op.ERF: _erf,
    Op.EXPONENTIAL: _float_function("exp"),
    Op.EXPONENTIAL_MINUS_ONE: _float_function("expm1"),
    Op.FLOOR: _float_function("floor"),
    Op.IS_FINITE: _is_finite,
    Op.LOG: _float_function("log"),
    Op.LOG_PLUS_ONE: _float_function("log1p"),
    Op.LOGISTIC: _logistic,
    Op.MAXIMUM: _extremum(True),
    Op.MINIMUM: _extremum(False),
    Op.MULTIPLY: _wrapping("*"),
    Op.NEGATE: _negate,
    Op.NOT: _not,
    Op.OR: _bitwise("|"),
    Op.POPCNT: _popcnt,
    Op.POWER: _power,
    Op.REMAINDER: _remainder,
    Op.ROUND_NEAREST_AFZ: _float_function("round"),
    Op.ROUND_NEAREST_EVEN: _float_function("rint"),
    Op.RSQRT: _rsqrt,
    Op.SELECT: _select,
    Op.SHIFT_LEFT: _shift("shl"),
    Op.SHIFT_RIGHT_ARITHMETIC: _shift("shra"),
    Op.SHIFT_RIGHT_LOGICAL: _shift("shrl"),
    Op.SIGN: _sign,
    Op.SINE: _float_function("sin"),
    Op.SQRT: _float_function("sqrt"),
    Op.SUBTRACT: _wrapping("-"),
    Op.TAN: _float_function("tan"),
    Op.TANH: _float_function("tanh"),
    Op.XOR: _bitwise("^"),
    Op.REDUCE_PRECISION: reduce_precision,
}
