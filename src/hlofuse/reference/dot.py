"""Reference semantics of dot: integer dots wrap, float dots sum in XLA's CPU order.

Part of the reference interpreter (`reference/interpreter.py` registers `HANDLERS`).

XLA's CPU backend computes a dot too small for a library call (its naive loop and its tiled
LLVM IR GEMM, `service/cpu/dot_op_emitter.cc`) one result element at a time: an accumulator
that starts at +0 and takes lhs * rhs for each contracting position in ascending order, the
multiply and the add marked contractable, which LLVM fuses into one fused multiply-add. The
single rounding decides the special values: with an accumulator at -inf, a finite product too
large for the type still adds to -inf (a separate multiply would overflow to +inf, and
-inf + inf is NaN), and a product that overflows on its own may come back into range.
The runtime's dot (`hlofuse_rt.c`) and lane code's small dots (`codegen/dot_elemental.py`)
use the same order and fma, so this is the reference for both. (XLA hands some larger dots
and some vector products to libraries whose order differs; those differ from this order in
the last bits, within the fuzzer's tolerance for dots.)

Operands and each step's result are flushed as XLA's CPU code runs (DAZ/FTZ); f16 and bf16
dots compute in f32 and round once at the end, as the compiled code does.
"""

from __future__ import annotations

import math
import string
from fractions import Fraction

import numpy as np

from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op
from hlofuse.reference.common import Runner, Value, as_array, flush_denormals

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
# Veltkamp's splitting constant for f64 (2**27 + 1): a = hi + lo with 26-bit halves.
_SPLIT = 134217729.0
# Where the f64 error-free transformations below are exact: no overflow in the split or the
# product, no underflow in the product's rounding error.
_F64_SAFE_OPERAND = 2.0**500
_F64_SAFE_MAX = 2.0**1000
_F64_SAFE_MIN = 2.0**-900


def _two_sum_error(s: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """x + y - s exactly, for s = fl(x + y) (Knuth's TwoSum, finite values)."""
    z = s - x
    return (x - (s - z)) + (y - z)


def _round_to_odd(s: np.ndarray, error: np.ndarray) -> np.ndarray:
    """s = fl(v) and error = v - s: v rounded to odd (the neighbour with an odd last bit
    when inexact), so that one more rounding to a much narrower type is correct."""
    even = (s.view(np.uint64) & 1) == 0
    fix = np.isfinite(s) & (error != 0) & even
    if not fix.any():
        return s
    return np.where(fix, np.nextafter(s, np.copysign(np.inf, error)), s)


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a * b + c with one rounding, for float32 arrays (broadcast): the product of two f32
    is exact in f64, and the f64 sum rounded to odd rounds correctly to f32."""
    with np.errstate(all="ignore"):
        p = a.astype(_F64) * b.astype(_F64)
        c64 = np.broadcast_to(c.astype(_F64), p.shape)
        s = p + c64
        error = _two_sum_error(s, p, c64)
        return _round_to_odd(s, error).astype(_F32)


def fma_f64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """a * b + c with one rounding, for float64 arrays (broadcast): Boldo and Melquiond's
    emulation (exact product by Dekker's algorithm, the low parts summed rounded to odd) where
    it is exact, exact rationals for the few finite elements of extreme magnitude."""
    a, b, c = np.broadcast_arrays(a.astype(_F64), b.astype(_F64), c.astype(_F64))
    with np.errstate(all="ignore"):
        p = a * b
        t = _SPLIT * a
        a_hi = t - (t - a)
        a_lo = a - a_hi
        t = _SPLIT * b
        b_hi = t - (t - b)
        b_lo = b - b_hi
        p_error = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
        high = c + p
        low = _two_sum_error(high, c, p)
        v = low + p_error
        v = _round_to_odd(v, _two_sum_error(v, low, p_error))
        result = high + v
        operands_finite = np.isfinite(a) & np.isfinite(b)
        # A finite product added to an infinite (or NaN) accumulator is the accumulator; an
        # infinite or NaN operand gives what the separate operations give.
        special = np.where(operands_finite, c, p + c)
        finite = operands_finite & np.isfinite(c)
        result = np.where(finite, result, special)
        safe = (np.abs(a) < _F64_SAFE_OPERAND) & (np.abs(b) < _F64_SAFE_OPERAND) \
            & (np.abs(p) < _F64_SAFE_MAX) & (np.abs(c) < _F64_SAFE_MAX) \
            & ((np.abs(p) > _F64_SAFE_MIN) | (p == 0))
    for index in zip(*np.nonzero(finite & ~safe), strict=True):
        result[index] = _exact_fma(float(a[index]), float(b[index]), float(c[index]))
    return result


def _exact_fma(a: float, b: float, c: float) -> float:
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        return a * b + c  # the sign of an exact zero as IEEE gives it
    try:
        return float(exact)  # correctly rounded (integer true division)
    except OverflowError:
        return math.inf if exact > 0 else -math.inf


def float_dot(lhs: np.ndarray, rhs: np.ndarray, dims: tuple[tuple[int, ...], ...],
              result: np.dtype) -> np.ndarray:
    """The dot of float arrays in XLA's CPU order; dims = (lhs batch, lhs contracting, rhs
    batch, rhs contracting)."""
    lb, lc, rb, rc = dims
    lf = tuple(d for d in range(lhs.ndim) if d not in lb + lc)
    rf = tuple(d for d in range(rhs.ndim) if d not in rb + rc)
    batch = tuple(lhs.shape[d] for d in lb)
    m = math.prod(lhs.shape[d] for d in lf)
    k = math.prod(lhs.shape[d] for d in lc)
    n = math.prod(rhs.shape[d] for d in rf)
    compute = _F64 if result == _F64 else _F32
    fma = fma_f64 if compute == _F64 else fma_f32
    # f16 operands widen to normal f32 numbers; bf16 denormals stay f32 denormals (DAZ).
    a = flush_denormals(lhs.transpose(lb + lf + lc).astype(compute))
    b = flush_denormals(rhs.transpose(rb + rc + rf).astype(compute))
    a = a.reshape(math.prod(batch), m, k)
    b = b.reshape(math.prod(batch), k, n)
    acc = np.zeros((math.prod(batch), m, n), compute)
    for position in range(k):
        acc = flush_denormals(fma(a[:, :, position, None], b[:, None, position, :], acc))
    out_shape = batch + tuple(lhs.shape[d] for d in lf) + tuple(rhs.shape[d] for d in rf)
    with np.errstate(over="ignore"):  # f32 beyond f16's range rounds to inf, as in C
        return np.asarray(acc.reshape(out_shape).astype(result), order="C")


def _dot(self: Runner, inst: Instruction, ops: list[Value]) -> Value:
    dtype = np.dtype(inst.dtype.numpy)
    lhs, rhs = as_array(ops[0]), as_array(ops[1])
    lb, rb = inst.ints("lhs_batch_dims"), inst.ints("rhs_batch_dims")
    lc, rc = inst.ints("lhs_contracting_dims"), inst.ints("rhs_contracting_dims")
    if dtype.kind == "f" or dtype.name == "bfloat16":
        return float_dot(lhs, rhs, (lb, lc, rb, rc), dtype)
    lhs, rhs = lhs.astype(dtype), rhs.astype(dtype)
    letters = iter(string.ascii_letters)
    lhs_sub = [next(letters) for _ in range(lhs.ndim)]
    rhs_sub = [next(letters) for _ in range(rhs.ndim)]
    for x, y in zip(lb + lc, rb + rc, strict=True):
        rhs_sub[y] = lhs_sub[x]
    out = [lhs_sub[d] for d in lb]
    out += [lhs_sub[d] for d in range(lhs.ndim) if d not in lb + lc]
    out += [rhs_sub[d] for d in range(rhs.ndim) if d not in rb + rc]
    spec = f"{''.join(lhs_sub)},{''.join(rhs_sub)}->{''.join(out)}"
    if dtype == np.bool_:
        result = np.einsum(spec, lhs.astype(np.int64), rhs.astype(np.int64)) != 0
    else:
        with np.errstate(all="ignore"):
            result = np.einsum(spec, lhs, rhs)
    return np.asarray(np.asarray(result).astype(dtype), order="C")


HANDLERS = {Op.DOT: _dot}
