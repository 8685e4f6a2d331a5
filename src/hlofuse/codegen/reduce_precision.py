"""reduce-precision as XLA's elemental emitter writes it: round the mantissa to nearest even
by integer addition on the float's bits, then saturate exponents above the reduced range to
infinity and flush those below it to zero, keeping NaNs."""

from __future__ import annotations

from hlofuse.codegen import cir
from hlofuse.codegen.cir import Binary, Cast, Expr, Select
from hlofuse.codegen.emitter_types import UnsupportedInstruction
from hlofuse.codegen.language import Language, unsigned_of
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction

# (exponent bits, mantissa bits, total bits) of the register forms bits are taken from.
_LAYOUT = {DType.F16: (5, 10, 16), DType.F32: (8, 23, 32), DType.F64: (11, 52, 64)}
_WIDTH = {16: DType.F16, 32: DType.F32, 64: DType.F64}


def _u(value: int, bits: int) -> Expr:
    literal = cir.Int(value) if value < 2**63 else cir.Int(value - 2**64)
    return Cast(unsigned_of(_WIDTH[bits]), literal)


def reduce_precision(lang: Language, inst: Instruction, x: list[Expr]) -> Expr:
    dtype = inst.dtype
    exponent_bits = inst.attrs["exponent_bits"]
    mantissa_bits = inst.attrs["mantissa_bits"]
    assert isinstance(exponent_bits, int) and isinstance(mantissa_bits, int)
    register = dtype
    if dtype is DType.BF16:  # bf16 is f32 with a shorter mantissa: its values round alike
        register, exponent_bits, mantissa_bits = DType.F32, min(exponent_bits, 8), min(
            mantissa_bits, 7)
    if register not in _LAYOUT:
        raise UnsupportedInstruction(
            f"%{inst.name}: reduce-precision of {dtype.text} has no C code (f16, f32, f64, "
            "bf16)")
    src_exponent, src_mantissa, total = _LAYOUT[register]
    value = x[0]
    # An f16 register holds an f16 value exactly: its bits are its storage form.
    bits: Expr = (cir.call("hlofuse_f32_to_f16", value) if register is DType.F16
                  else cir.call(f"hlofuse_f{total}_bits", value))
    if mantissa_bits < src_mantissa:
        shift = src_mantissa - mantissa_bits
        last_bit = 1 << shift
        bias = Binary("+", Binary(">>", Binary("&", bits, _u(last_bit, total)), cir.Int(shift)),
                      _u((1 << (shift - 1)) - 1, total))
        truncation = (~(last_bit - 1)) & ((1 << total) - 1)
        bits = Binary("&", Binary("+", bits, bias), _u(truncation, total))
        bits = Cast(unsigned_of(_WIDTH[total]), bits)
    if exponent_bits < src_exponent:
        sign = _u(1 << (total - 1), total)
        exponent_mask = ((1 << src_exponent) - 1) << src_mantissa
        exponent_bias = (1 << (src_exponent - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        exponent = Binary("&", bits, _u(exponent_mask, total))
        overflow = Binary(">", exponent, _u((exponent_bias + reduced_bias) << src_mantissa, total))
        underflow = Binary("<=", exponent,
                           _u((exponent_bias - reduced_bias) << src_mantissa, total))
        signed_zero = Binary("&", bits, sign)
        bits = Select(overflow, Binary("|", signed_zero, _u(exponent_mask, total)),
                      Select(underflow, signed_zero, bits))
        bits = Cast(unsigned_of(_WIDTH[total]), bits)
    result: Expr = (cir.call("hlofuse_f16_to_f32", bits) if register is DType.F16
                    else cir.call(f"hlofuse_f{total}_from_bits", bits))
    is_nan = Binary("!=", value, value)
    kept = value if mantissa_bits > 0 else lang.literal(register, float("nan"))
    result = Select(is_nan, kept, result)
    if dtype is DType.BF16:
        result = lang.round_to(dtype, result)
    return result
