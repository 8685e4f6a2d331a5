"""C expressions of the element-wise ops, with XLA's semantics rather than C's.

Each handler gets the instruction, its operands' values in register form and the language,
and returns an expression in register form of the result type. Integer + - * are computed in
an unsigned type so they wrap instead of being undefined; f16/bf16 are computed in f32 and
rounded after every operation; the helpers named hlofuse_* live in templates.HEADER.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from hlofuse.codegen.language import CLanguage
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op

Handler = Callable[[CLanguage, Instruction, list[str]], str]


def _operand_dtype(inst: Instruction, i: int = 0) -> DType:
    return inst.operands[i].dtype


def _wrapping(symbol: str) -> Handler:
    """+ - * : floats round to their type, integers wrap, pred is or/and."""

    def emit(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
        dtype = inst.dtype
        if dtype.is_float:
            return lang.round_to(dtype, f"({x[0]} {symbol} {x[1]})")
        if dtype.is_pred:
            return f"({x[0]} | {x[1]})" if symbol == "+" else f"({x[0]} & {x[1]})"
        wide = lang.wrap_type(dtype)
        return f"(({lang.storage_type(dtype)})(({wide}){x[0]} {symbol} ({wide}){x[1]}))"

    return emit


def _bitwise(symbol: str) -> Handler:
    def emit(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
        return f"(({lang.storage_type(inst.dtype)})({x[0]} {symbol} {x[1]}))"

    return emit


_NARROW = (DType.F16, DType.BF16)


def _float_function(name: str) -> Handler:
    """A math function of one float operand. f16 and bf16 evaluate it in f64 and round once,
    as the reference does; f32 uses the math library, which works in f64 and rounds once."""

    def emit(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
        if inst.dtype in _NARROW:
            return lang.from_double(inst.dtype,
                                    lang.call_math(name, DType.F64, f"(double){x[0]}"))
        return lang.call_math(name, inst.dtype, x[0])

    return emit


def _float_function2(name: str) -> Handler:
    def emit(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
        if inst.dtype in _NARROW:
            wide = lang.call_math(name, DType.F64, f"(double){x[0]}", f"(double){x[1]}")
            return lang.from_double(inst.dtype, wide)
        return lang.call_math(name, inst.dtype, x[0], x[1])

    return emit


def _divide(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    if inst.dtype.is_float:
        return lang.round_to(inst.dtype, f"({x[0]} / {x[1]})")
    return f"hlofuse_div_{lang.type_tag(inst.dtype)}({x[0]}, {x[1]})"


def _remainder(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    if inst.dtype.is_float:
        return lang.round_to(inst.dtype, lang.call_math("fmod", inst.dtype, x[0], x[1]))
    return f"hlofuse_rem_{lang.type_tag(inst.dtype)}({x[0]}, {x[1]})"


def _power(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    if inst.dtype.is_float:
        return _float_function2("pow")(lang, inst, x)
    return f"hlofuse_pow_{lang.type_tag(inst.dtype)}({x[0]}, {x[1]})"


def _extremum(is_max: bool) -> Handler:
    def emit(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
        dtype = inst.dtype
        if dtype.is_pred:
            return f"({x[0]} | {x[1]})" if is_max else f"({x[0]} & {x[1]})"
        if dtype.is_float:
            which = "max" if is_max else "min"
            suffix = "d" if dtype is DType.F64 else "f"
            return f"hlofuse_{which}_{suffix}({x[0]}, {x[1]})"
        symbol = ">" if is_max else "<"
        return f"({x[0]} {symbol} {x[1]} ? {x[0]} : {x[1]})"

    return emit


def _abs(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    dtype = inst.dtype
    if dtype.is_float:
        return f"{lang.math('fabs', dtype)}({x[0]})"
    if dtype.is_unsigned_int:
        return x[0]
    wide = lang.wrap_type(dtype)
    return (f"(({lang.storage_type(dtype)})({x[0]} < 0 ? ({wide})0 - ({wide}){x[0]} : "
            f"({wide}){x[0]}))")


def _negate(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    dtype = inst.dtype
    if dtype.is_float:
        return f"(-{x[0]})"
    wide = lang.wrap_type(dtype)
    return f"(({lang.storage_type(dtype)})(({wide})0 - ({wide}){x[0]}))"


def _sign(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    dtype = inst.dtype
    ctype = lang.register_type(dtype)
    if dtype.is_float:
        one = lang.literal(dtype, 1)
        return f"({x[0]} > 0 ? {one} : {x[0]} < 0 ? -{one} : {x[0]})"
    if dtype.is_unsigned_int:
        return f"(({ctype})({x[0]} != 0))"
    return f"(({ctype})(({x[0]} > 0) - ({x[0]} < 0)))"


def _not(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    if inst.dtype.is_pred:
        return f"((uint8_t)!{x[0]})"
    return f"(({lang.storage_type(inst.dtype)})~{x[0]})"


def _popcnt(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    dtype = inst.dtype
    builtin = "__builtin_popcountll" if dtype.bits == 64 else "__builtin_popcount"
    wide = lang.wrap_type(dtype)
    return f"(({lang.storage_type(dtype)}){builtin}(({wide})({lang.unsigned_type(dtype)}){x[0]}))"


def _clz(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    dtype = inst.dtype
    ctype = lang.storage_type(dtype)
    unsigned = f"({lang.unsigned_type(dtype)}){x[0]}"
    if dtype.bits == 64:
        count = f"__builtin_clzll((uint64_t){unsigned})"
    else:
        count = f"(__builtin_clz((uint32_t){unsigned}) - {32 - dtype.bits})"
    return f"(({ctype})({x[0]} == 0 ? {dtype.bits} : {count}))"


_INT_LITERAL = re.compile(r"^\(\([a-z0-9_]+\)(-?[0-9]+)U?LL\)$")


def _shift(helper: str) -> Handler:
    """A shift by a literal amount inside the bit width is C's own shift (the helpers' range
    check folds away then anyway, but only after inlining: a Threefry hash has dozens)."""

    def emit(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
        dtype = inst.dtype
        amount = _INT_LITERAL.match(x[1])
        if amount is None or not 0 <= int(amount.group(1)) < dtype.bits:
            return f"hlofuse_{helper}_{lang.type_tag(dtype)}({x[0]}, {x[1]})"
        n, ctype, unsigned = amount.group(1), lang.storage_type(dtype), lang.unsigned_type(dtype)
        if helper == "shl":
            return f"(({ctype})(({lang.wrap_type(dtype)})({unsigned}){x[0]} << {n}))"
        if helper == "shrl":
            return f"(({ctype})(({unsigned}){x[0]} >> {n}))"
        return f"(({ctype})(({lang.signed_type(dtype)}){x[0]} >> {n}))"

    return emit


_COMPARE_SYMBOLS = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def _compare(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    symbol = _COMPARE_SYMBOLS[str(inst.attrs["direction"])]
    kind = inst.attrs.get("type")
    dtype = _operand_dtype(inst)
    a, b = x
    if kind == "TOTALORDER" and dtype.is_float:
        key = "hlofuse_total_key_d" if dtype is DType.F64 else "hlofuse_total_key_f"
        a, b = f"{key}({a})", f"{key}({b})"
    elif kind == "UNSIGNED" and dtype.is_signed_int:
        a, b = f"({lang.unsigned_type(dtype)}){a}", f"({lang.unsigned_type(dtype)}){b}"
    elif kind == "SIGNED" and dtype.is_unsigned_int:
        a, b = f"({lang.signed_type(dtype)}){a}", f"({lang.signed_type(dtype)}){b}"
    return f"((uint8_t)({a} {symbol} {b}))"


def _select(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    return f"({x[0]} ? {x[1]} : {x[2]})"


def _clamp(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    maximum, minimum = _extremum(True), _extremum(False)
    low_bounded = maximum(lang, inst, [x[1], x[0]])
    return minimum(lang, inst, [low_bounded, x[2]])


def _is_finite(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    return f"((uint8_t)isfinite({x[0]}))"


def _logistic(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    if inst.dtype in _NARROW:
        exp = lang.call_math("exp", DType.F64, f"-(double){x[0]}")
        return lang.from_double(inst.dtype, f"(1.0 / (1.0 + {exp}))")
    if lang.has_math("logistic", inst.dtype):
        return lang.call_math("logistic", inst.dtype, x[0])
    one = "1.0" if inst.dtype is DType.F64 else "1.0f"
    exp = lang.call_math("exp", inst.dtype, f"-{x[0]}")
    return f"({one} / ({one} + {exp}))"


def _rsqrt(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    # 1 / sqrt in f64 and rounded once, as the reference (f32 included) computes it.
    if inst.dtype is DType.F64:
        return f"(1.0 / {lang.call_math('sqrt', DType.F64, x[0])})"
    operand = f"(double)hlofuse_daz_f({x[0]})" if inst.dtype is DType.F32 else f"(double){x[0]}"
    return lang.from_double(inst.dtype, f"(1.0 / sqrt({operand}))")


def _erf(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    # The reference evaluates erf in f64 whatever the type, then rounds once.
    if inst.dtype is DType.F64:
        return lang.call_math("erf", DType.F64, x[0])
    if inst.dtype in _NARROW:
        return lang.from_double(inst.dtype, lang.call_math("erf", DType.F64, f"(double){x[0]}"))
    return lang.call_math("erf", inst.dtype, x[0])


def convert_expression(lang: CLanguage, source: DType, target: DType, x: str) -> str:
    """XLA's convert: float->int saturates with NaN->0; ->pred is != 0; exact f16/bf16 rounding."""
    if target is DType.PRED:
        return f"((uint8_t)({x} != 0))"
    if target.is_integer:
        if source.is_float:
            return f"hlofuse_sat_{lang.type_tag(target)}((double){x})"
        return f"(({lang.storage_type(target)}){x})"
    if target is DType.F64:
        return f"((double){x})"
    if target is DType.F32:
        return f"((float){x})"
    if target is DType.F16:
        if source is DType.F64:
            return f"hlofuse_f16_to_f32(hlofuse_f64_to_f16({x}))"
        return f"hlofuse_round_f16((float){x})"
    # bf16: the reference goes through f64 and then f32 for integers, through f32 for floats.
    if source.is_integer and source.bits == 64:
        return f"hlofuse_round_bf16((float)(double){x})"
    return f"hlofuse_round_bf16((float){x})"


def _convert(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    return convert_expression(lang, _operand_dtype(inst), inst.dtype, x[0])


def _bitcast_convert(lang: CLanguage, inst: Instruction, x: list[str]) -> str:
    source, target = _operand_dtype(inst), inst.dtype
    bits = f"({lang.unsigned_type(source)}){lang.to_storage(source, x[0])}"
    if source.is_float and source.bits >= 32:
        bits = f"hlofuse_f{source.bits}_bits({x[0]})"
    if target is DType.PRED:
        return f"((uint8_t)({bits} != 0))"
    if target is DType.F32:
        return f"hlofuse_f32_from_bits({bits})"
    if target is DType.F64:
        return f"hlofuse_f64_from_bits({bits})"
    if target is DType.F16:
        return f"hlofuse_f16_to_f32({bits})"
    if target is DType.BF16:
        return f"hlofuse_bf16_to_f32({bits})"
    return f"(({lang.storage_type(target)}){bits})"


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
}
