"""The generated-code math library: accuracy over dense sweeps, special values, vectorisation.

A C harness (generated from `mathlib.FUNCTIONS`, compiled with the toolchain's flags for
kernels) applies each function to a NumPy array, optionally with FTZ/DAZ set in MXCSR as
XLA's CPU backend runs; a second harness built with only -O3 -march=native (gcc's default
fp-contract and math-errno) is checked on the same sweeps. Errors are measured in ulps of
the result type against NumPy: float64 for the float32 functions (its own error is ~2^-29
float ulp), long double (64-bit significand) for the float64 functions.

The float32 sweep takes every 2039th bit pattern of each sign over all normal floats
(about 2.1 million inputs spread over every exponent) plus dense runs where functions are
hard: next to multiples of pi/2, near 0 and 1, at the overflow and underflow thresholds
of exp. Setting HLOFUSE_MATHLIB_EXHAUSTIVE=1 also runs every one of the 2^32 floats
through a C checker against libm in double (a few minutes per function).
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import subprocess
import zlib
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from hlofuse.codegen import mathlib
from hlofuse.codegen.mathlib import MathFunction
from hlofuse.ir.dtypes import DType
from hlofuse.toolchain.compiler import DEFAULT_FLAGS, Compiler, ToolchainError

pytestmark = pytest.mark.needs_cc

# Neither set has -ffast-math: the kernels' own flags, and the bare minimum.
TOOLCHAIN_FLAGS = [f for f in DEFAULT_FLAGS if f not in ("-shared", "-fPIC", "-fvisibility=hidden")]
BARE_FLAGS = ["-O3", "-march=native"]

F32 = [f for f in mathlib.FUNCTIONS if f.dtype is DType.F32]
F64 = [f for f in mathlib.FUNCTIONS if f.dtype is DType.F64]
F32_UNARY = [f for f in F32 if f.arity == 1]

_HARNESS_PRELUDE = r"""
#include <stdint.h>
#include "hlofuse_math.h"
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
__attribute__((visibility("default"))) int harness_has_mxcsr(void) { return 1; }
/* FTZ (bit 15) and DAZ (bit 6), as XLA's CPU runtime sets them. */
static unsigned harness_enter(int ftz) {
    unsigned old = _mm_getcsr();
    if (ftz) _mm_setcsr(old | 0x8040u);
    return old;
}
static void harness_leave(unsigned old) { _mm_setcsr(old); }
#else
__attribute__((visibility("default"))) int harness_has_mxcsr(void) { return 0; }
static unsigned harness_enter(int ftz) { (void)ftz; return 0; }
static void harness_leave(unsigned old) { (void)old; }
#endif
/* The loops are kept out of line so that no FP work moves across the MXCSR writes. */
#define EXPORT __attribute__((visibility("default")))
#define UNARY(name, T)                                                              \
    __attribute__((noinline)) static void loop_##name(const T *restrict x,           \
                                                      T *restrict y, int64_t n) {    \
        for (int64_t i = 0; i < n; i++) y[i] = name(x[i]);                           \
    }                                                                                \
    EXPORT void apply_##name(const T *x, T *y, int64_t n, int ftz) {                 \
        unsigned old = harness_enter(ftz);                                           \
        loop_##name(x, y, n);                                                        \
        harness_leave(old);                                                          \
    }
#define BINARY(name, T)                                                             \
    __attribute__((noinline)) static void loop_##name(const T *restrict a,           \
                                                      const T *restrict b,           \
                                                      T *restrict y, int64_t n) {    \
        for (int64_t i = 0; i < n; i++) y[i] = name(a[i], b[i]);                     \
    }                                                                                \
    EXPORT void apply_##name(const T *a, const T *b, T *y, int64_t n, int ftz) {     \
        unsigned old = harness_enter(ftz);                                           \
        loop_##name(a, b, y, n);                                                     \
        harness_leave(old);                                                          \
    }
"""


def _ctype(function: MathFunction) -> str:
    return "float" if function.dtype is DType.F32 else "double"


def _np_type(function: MathFunction) -> type[np.floating]:
    return np.float32 if function.dtype is DType.F32 else np.float64


def _compiler() -> list[str]:
    try:
        return list(Compiler.find().command)
    except ToolchainError as e:
        pytest.skip(str(e))


def _compile(source: str, out: Path, extra: list[str], flags: list[str] = TOOLCHAIN_FLAGS) -> str:
    src = out.with_suffix(".c")
    src.write_text(source)
    cmd = [*_compiler(), *flags, f"-I{mathlib.include_dir()}", str(src), "-o", str(out), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr}"
    return proc.stderr


class Harness:
    """Applies header functions to arrays through the compiled harness."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self.has_mxcsr = bool(lib.harness_has_mxcsr())

    def __call__(self, function: MathFunction, *args: np.ndarray, ftz: bool = False) -> np.ndarray:
        if ftz and not self.has_mxcsr:
            pytest.skip("FTZ/DAZ is set through MXCSR, which this target lacks")
        dtype = _np_type(function)
        inputs = [np.ascontiguousarray(a, dtype=dtype) for a in args]
        out = np.empty_like(inputs[0])
        pointers = [a.ctypes.data_as(ctypes.c_void_p) for a in (*inputs, out)]
        getattr(self._lib, f"apply_{function.c_name}")(
            *pointers, ctypes.c_int64(out.size), ctypes.c_int(int(ftz)))
        return out


def _build_harness(directory: Path, flags: list[str]) -> Harness:
    lines = [_HARNESS_PRELUDE]
    for function in mathlib.FUNCTIONS:
        kind = "UNARY" if function.arity == 1 else "BINARY"
        lines.append(f"{kind}({function.c_name}, {_ctype(function)})")
    lib_path = directory / "harness.so"
    _compile("\n".join(lines) + "\n", lib_path, ["-shared", "-fPIC", "-lm"], flags)
    return Harness(ctypes.CDLL(str(lib_path)))


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Harness:
    return _build_harness(tmp_path_factory.mktemp("mathlib"), TOOLCHAIN_FLAGS)


# ------------------------------------------------------------------ error measurement

def _ulp_errors(result: np.ndarray, reference: np.ndarray, *, ftz: bool) -> np.ndarray:
    """|result - reference| in ulps of the result type; inf where NaN-ness or a zero's sign
    differs. Under FTZ a nonzero reference below the smallest normal may come back as a
    zero of its sign or as the smallest normal."""
    info = np.finfo(result.dtype)
    wide = np.longdouble if result.dtype == np.float64 else np.float64
    ref = reference.astype(wide)
    res = result.astype(wide)
    # inf stands for the first power of two past the largest finite value, and so does any
    # reference beyond it, so results near overflow are measured in ulps like any other.
    past_max = wide(2.0) ** (info.maxexp)
    res = np.clip(res, -past_max, past_max)
    ref_c = np.clip(ref, -past_max, past_max)
    with np.errstate(invalid="ignore", over="ignore"):
        _, exponent = np.frexp(np.abs(ref_c))
        exponent = np.maximum(exponent.astype(np.int64) - 1, info.minexp)
        ulp = np.ldexp(wide(1.0), exponent - (info.nmant))
        err = np.abs(res - ref_c) / ulp
    both_inf = np.isinf(result) & np.isinf(reference) & (np.sign(result) == np.sign(reference))
    err = np.where(both_inf, 0.0, err)
    nan_ref, nan_res = np.isnan(reference), np.isnan(result)
    err = np.where(nan_ref | nan_res, np.where(nan_ref == nan_res, 0.0, np.inf), err)
    zero_ref = reference == 0
    sign_differs = np.signbit(result) != np.signbit(reference)
    err = np.where(zero_ref & (result == 0) & sign_differs, np.inf, err)
    if ftz:
        tiny = (np.abs(reference) < info.tiny) & (reference != 0)
        flushed = ((result == 0) & ~sign_differs) | (np.abs(result) == info.tiny)
        err = np.where(tiny & flushed, 0.0, err)
    return err.astype(np.float64)


def _worst(err: np.ndarray, inputs: np.ndarray) -> str:
    i = int(np.argmax(err))
    return f"max {err[i]:.4f} ulp at x={float(inputs[i])!r}"


# ------------------------------------------------------------------ references

def _logistic64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


_erf64 = np.frompyfunc(math.erf, 1, 1)

_REFERENCES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "exp": np.exp, "expm1": np.expm1,
    "log": np.log, "log1p": np.log1p, "tanh": np.tanh, "logistic": _logistic64,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "cbrt": np.cbrt,
    "erf": lambda x: _erf64(x).astype(x.dtype),
    "floor": np.floor, "ceil": np.ceil,
    # halfway cases away from zero (np.round rounds them to even)
    "round": lambda x: np.copysign(np.floor(np.abs(x) + 0.5), x),
}


def _reference(function: MathFunction, x: np.ndarray) -> np.ndarray:
    wide = np.float64 if function.dtype is DType.F32 else np.longdouble
    with np.errstate(all="ignore"):
        return _REFERENCES[function.name](x.astype(wide))


# ------------------------------------------------------------------ float32 inputs

def _f32_from_bits(bits: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(bits, dtype=np.uint32).view(np.float32)


def _around(center: float, half_width: int) -> np.ndarray:
    """The 2*half_width+1 consecutive floats centred on float32(center)."""
    c = int(np.float32(center).view(np.uint32))
    return _f32_from_bits(np.arange(c - half_width, c + half_width + 1, dtype=np.int64))


def _f32_sweep() -> np.ndarray:
    positive = np.arange(0x00800000, 0x7F800000, 2039, dtype=np.uint32)
    return _f32_from_bits(np.concatenate([positive, positive | 0x80000000]))


def _near_pio2_multiples() -> np.ndarray:
    rng = np.random.default_rng(7)
    ks = np.concatenate([np.arange(1, 2000), rng.integers(2000, 2**40, 3000)]).astype(np.float64)
    # 0x1.f37c8ap+95 is the float closest to a multiple of pi/2, relative to pi/2
    centers = np.concatenate([ks * (np.pi / 2), 2.0 ** np.arange(20, 128),
                              [float.fromhex("0x1.f37c8ap+95")]])
    offsets = np.arange(-16, 17)
    bits = centers.astype(np.float32).view(np.uint32).astype(np.int64)
    bits = (bits[:, None] + offsets[None, :]).ravel()
    return _f32_from_bits(bits[(bits > 0) & (bits < 0x7F800000)])


def _critical_f32(name: str) -> np.ndarray:
    """Dense runs where `name` is hardest, both signs where the function is defined there."""
    near_zero = _f32_from_bits(np.arange(0x00800000, 0x3A800000, 997, dtype=np.uint32))
    runs = [near_zero, -near_zero, _around(1.0, 40000), _around(-1.0, 40000)]
    if name in ("sin", "cos", "tan"):
        near = _near_pio2_multiples()
        runs += [near, -near]
    if name == "erf":
        # the switch between the two approximations, and the saturation to 1
        runs += [_around(0.84375, 20000), _around(-0.84375, 20000), _around(3.92, 20000)]
    if name in ("exp", "expm1", "logistic", "tanh"):
        # exp overflow, smallest normal result, smallest subnormal, rounding to 0;
        # expm1's k switch at +-ln2/2; tanh's saturation; the float forms' largest errors
        # (exp at 59.29, expm1 at 16.99) and expm1's rounding to -1.
        for center in (88.7228, -87.3365, -103.279, -103.972, 0.34657, -0.34657, 9.01, -9.01,
                       59.29, 16.99, -17.33):
            runs.append(_around(center, 20000))
    if name in ("log", "log1p"):
        runs += [_around(-1.0 + 2.0**-12, 30000), _around(2.0**-20, 30000)]
    return np.concatenate(runs)


# ------------------------------------------------------------------ float32 accuracy

@pytest.mark.parametrize("ftz", [False, True], ids=["ieee", "ftz-daz"])
@pytest.mark.parametrize("function", F32_UNARY, ids=[f.c_name for f in F32_UNARY])
def test_f32_error_within_bound_over_the_whole_range(
        harness: Harness, function: MathFunction, ftz: bool) -> None:
    x = np.concatenate([_f32_sweep(), _critical_f32(function.name)])
    err = _ulp_errors(harness(function, x, ftz=ftz), _reference(function, x), ftz=ftz)
    assert err.max() <= function.max_ulp, _worst(err, x)
    assert function.max_ulp <= 2.0  # the issue's bound for float32 on normal inputs


def test_f32_sqrt_is_correctly_rounded(harness: Harness) -> None:
    sqrt = mathlib.lookup("sqrt", DType.F32)
    assert sqrt is not None
    squares = (np.arange(1, 4097, dtype=np.float32) ** 2).astype(np.float32)
    x = np.concatenate([np.abs(_f32_sweep()), squares, _around(2.0, 50000)])
    assert np.array_equal(harness(sqrt, x), np.sqrt(x))


def test_f32_subnormal_inputs_without_daz(harness: Harness) -> None:
    x = _f32_from_bits(np.arange(1, 0x00800000, 331, dtype=np.uint32))
    x = np.concatenate([x, -x])
    for function in F32_UNARY:
        err = _ulp_errors(harness(function, x), _reference(function, x), ftz=False)
        assert err.max() <= function.max_ulp, f"{function.c_name}: {_worst(err, x)}"


def test_daz_reads_subnormal_inputs_as_signed_zero(harness: Harness) -> None:
    x = _f32_from_bits(np.array([1, 0x7FFFFF, 0x80000001, 0x807FFFFF], dtype=np.uint32))
    zeros = np.copysign(np.zeros(4, dtype=np.float32), x)
    for function in F32_UNARY:
        assert_same_values(harness(function, x, ftz=True), harness(function, zeros, ftz=True))


def test_ftz_flushes_subnormal_results(harness: Harness) -> None:
    exp = mathlib.lookup("exp", DType.F32)
    assert exp is not None
    x = np.array([-90.0, -100.0, -103.0], dtype=np.float32)
    assert np.all(harness(exp, x) > 0)
    assert np.all(harness(exp, x, ftz=True) == 0)


def _pow_inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    n = 400_000
    x = np.exp2(rng.uniform(-126, 128, n)).astype(np.float32)
    # exponents that keep x**y in range (with margin on both sides), and arbitrary ones
    log2x = np.log2(x.astype(np.float64))
    with np.errstate(divide="ignore"):
        y_ranged = rng.uniform(-160, 140, n) / np.where(log2x == 0, 1.0, log2x)
    y = np.where(rng.random(n) < 0.8, y_ranged, rng.uniform(-50, 50, n)).astype(np.float32)
    # negative bases with integer exponents, and bases next to 1 with large exponents
    neg = -np.exp2(rng.uniform(-20, 20, 50_000)).astype(np.float32)
    neg_y = rng.integers(-25, 25, 50_000).astype(np.float32)
    near_one = _around(1.0, 25_000)
    near_one_y = rng.uniform(-2**24, 2**24, near_one.size).astype(np.float32)
    return (np.concatenate([x, neg, near_one]).astype(np.float32),
            np.concatenate([y, neg_y, near_one_y]).astype(np.float32))


def _atan2_inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(13)
    n = 500_000
    sign = rng.choice([-1.0, 1.0], (2, n))
    mag = np.exp2(rng.uniform(-126, 128, (2, n)))
    y, x = (sign * mag).astype(np.float32)
    # nearly equal magnitudes, where the reduction through pi/4 happens
    close = rng.uniform(0.5, 2.0, n).astype(np.float32)
    near = (close * np.exp2(rng.uniform(-0.6, 0.6, n))).astype(np.float32)
    return (np.concatenate([y, close, -close]).astype(np.float32),
            np.concatenate([x, near, near]).astype(np.float32))


@pytest.mark.parametrize("ftz", [False, True], ids=["ieee", "ftz-daz"])
def test_f32_pow_error_within_bound(harness: Harness, ftz: bool) -> None:
    function = mathlib.lookup("pow", DType.F32)
    assert function is not None
    x, y = _pow_inputs()
    with np.errstate(all="ignore"):
        reference = np.power(x.astype(np.float64), y.astype(np.float64))
    err = _ulp_errors(harness(function, x, y, ftz=ftz), reference, ftz=ftz)
    assert err.max() <= function.max_ulp, _worst(err, x) + f" y={y[np.argmax(err)]!r}"


@pytest.mark.parametrize("ftz", [False, True], ids=["ieee", "ftz-daz"])
def test_f32_atan2_error_within_bound(harness: Harness, ftz: bool) -> None:
    function = mathlib.lookup("atan2", DType.F32)
    assert function is not None
    y, x = _atan2_inputs()
    reference = np.arctan2(y.astype(np.float64), x.astype(np.float64))
    err = _ulp_errors(harness(function, y, x, ftz=ftz), reference, ftz=ftz)
    assert err.max() <= function.max_ulp, _worst(err, y) + f" x={x[np.argmax(err)]!r}"


@pytest.mark.parametrize("ftz", [False, True], ids=["ieee", "ftz-daz"])
def test_f32_fmod_is_exact(harness: Harness, ftz: bool) -> None:
    """Bit for bit libm's fmodf over magnitudes from denormal to huge, and quotients near
    integers (where the double division may round the wrong way)."""
    function = mathlib.lookup("fmod", DType.F32)
    assert function is not None
    rng = np.random.default_rng(29)
    n = 400_000
    x = (rng.choice([-1.0, 1.0], n) * np.exp2(rng.uniform(-149, 128, n))).astype(np.float32)
    y = (rng.choice([-1.0, 1.0], n) * np.exp2(rng.uniform(-149, 128, n))).astype(np.float32)
    q = rng.integers(1, 1 << 30, n).astype(np.float64)
    near_y = (rng.uniform(0.5, 8.0, n)).astype(np.float32)
    near_x = (q * near_y * (1 + rng.choice([-1, 0, 1], n) * 2.0**-24)).astype(np.float32)
    x, y = np.concatenate([x, near_x]), np.concatenate([y, near_y])
    if ftz:  # the kernels run under DAZ: operands arrive flushed
        tiny = np.finfo(np.float32).tiny
        x = np.where(np.abs(x) < tiny, np.copysign(np.float32(0), x), x).astype(np.float32)
        y = np.where(np.abs(y) < tiny, np.copysign(np.float32(0), y), y).astype(np.float32)
    with np.errstate(all="ignore"):
        expected = np.fmod(x, y)
    got = harness(function, x, y, ftz=ftz)
    # A denormal remainder is not flushed under FTZ either: libm's fmodf works on integers, and
    # XLA's CPU remainder is that fmodf (tests/codegen/test_xla_denormal_semantics.py).
    assert_same_values(got, expected)


# ------------------------------------------------------------------ small-argument forms

SMALL = [f for f in mathlib.SMALL_ARGUMENT_FORMS if f.arity == 1]

_SMALL_HARNESS = r"""
#include <stdint.h>
#include "hlofuse_math.h"
#define EXPORT __attribute__((visibility("default")))
#define LOOP(name, T)                                                                \
    EXPORT void apply_##name(const float *restrict x, T *restrict y, int64_t n) {     \
        for (int64_t i = 0; i < n; i++) y[i] = name(x[i]);                           \
    }
"""


@pytest.fixture(scope="module")
def small_lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """The small-argument forms and their guards over arrays."""
    lines = [_SMALL_HARNESS]
    for name in sorted({f.c_name for f in SMALL} | {f"{f.name}f" for f in SMALL}):
        lines.append(f"LOOP(hlofuse_{name.removeprefix('hlofuse_')}, float)")
    for guard in sorted({f.guard for f in SMALL}):
        lines.append(f"LOOP({guard}, int32_t)")
    path = tmp_path_factory.mktemp("small") / "small.so"
    _compile("\n".join(lines) + "\n", path, ["-shared", "-fPIC", "-lm"])
    return ctypes.CDLL(str(path))


def _apply(lib: ctypes.CDLL, c_name: str, x: np.ndarray, out_type: type = np.float32
           ) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(x.shape, dtype=out_type)
    getattr(lib, f"apply_{c_name}")(x.ctypes.data_as(ctypes.c_void_p),
                                    out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(x.size))
    return out


def _small_inputs(limit: float) -> np.ndarray:
    """The whole-range sweep and the hard cases cut at `limit`, next to multiples of pi/2 up to
    the limit, subnormals, zeros and the limit itself."""
    rng = np.random.default_rng(3)
    ks = np.concatenate([np.arange(1, 5000), rng.integers(5000, int(limit / (np.pi / 2)), 5000)])
    bits = (ks * (np.pi / 2)).astype(np.float32).view(np.uint32).astype(np.int64)
    near = _f32_from_bits((bits[:, None] + np.arange(-16, 17)[None, :]).ravel())
    subnormal = _f32_from_bits(np.arange(0, 0x00800000, 4099, dtype=np.uint32))
    x = np.concatenate([_f32_sweep(), _critical_f32("sin"), near, subnormal,
                        np.array([limit, np.nextafter(np.float32(limit), np.float32(0))],
                                 dtype=np.float32)])
    x = x[np.abs(x) <= limit]
    return np.concatenate([x, -x])


@pytest.mark.parametrize("form", SMALL, ids=[f.c_name for f in SMALL])
def test_small_argument_forms_within_bound_up_to_their_limit(
        small_lib: ctypes.CDLL, form: mathlib.SmallArgumentForm) -> None:
    full = mathlib.lookup(form.name, form.dtype)
    assert full is not None
    x = _small_inputs(form.limit)
    err = _ulp_errors(_apply(small_lib, form.c_name, x), _reference(full, x), ftz=False)
    assert err.max() <= form.max_ulp, _worst(err, x)
    assert form.max_ulp <= 2.0  # the bound float32 functions must keep (issue 7)


@pytest.mark.parametrize("form", SMALL, ids=[f.c_name for f in SMALL])
def test_small_form_agrees_with_the_full_function_inside_the_limit(
        small_lib: ctypes.CDLL, form: mathlib.SmallArgumentForm) -> None:
    """Inside the limit the two differ by at most the sum of their bounds, and mostly not."""
    full = mathlib.lookup(form.name, form.dtype)
    assert full is not None
    x = _small_inputs(form.limit)
    small = _apply(small_lib, form.c_name, x)
    whole = _apply(small_lib, full.c_name, x)
    err = _ulp_errors(small, whole.astype(np.float64), ftz=False)
    assert float(np.max(err)) <= form.max_ulp + full.max_ulp
    assert float(np.mean(small.view(np.uint32) == whole.view(np.uint32))) > 0.9


@pytest.mark.parametrize("form", SMALL, ids=[f.c_name for f in SMALL])
def test_small_argument_guard_is_true_exactly_up_to_the_limit(
        small_lib: ctypes.CDLL, form: mathlib.SmallArgumentForm) -> None:
    limit = np.float32(form.limit)
    inside = np.array([0.0, -0.0, 1e-45, 1.0, limit, -limit], dtype=np.float32)
    above = np.nextafter(limit, np.float32(np.inf))
    outside = np.array([above, -above, 1e30, np.inf, -np.inf, np.nan], dtype=np.float32)
    assert np.all(_apply(small_lib, form.guard, inside, np.int32) != 0)
    assert np.all(_apply(small_lib, form.guard, outside, np.int32) == 0)


_FMOD_HARNESS = r"""
#include <stdint.h>
#include "hlofuse_math.h"
#define EXPORT __attribute__((visibility("default")))
#define LOOP2(name, T)                                                                     \
    EXPORT void apply_##name(const float *restrict x, const float *restrict y,           \
                             T *restrict z, int64_t n) {                                  \
        for (int64_t i = 0; i < n; i++) z[i] = name(x[i], y[i]);                          \
    }
LOOP2(hlofuse_fmodf, float)
LOOP2(hlofuse_fmodf_small, float)
LOOP2(hlofuse_fmodf_is_small, int32_t)
"""


def test_fmod_small_form_is_the_full_function_where_its_guard_holds(tmp_path: Path) -> None:
    """hlofuse_fmodf_small gives hlofuse_fmodf's bits wherever hlofuse_fmodf_is_small holds
    (|x| < |y| 2^28, NaN operands, an infinite y), and the guard fails beyond; with and without
    FTZ/DAZ semantics alike, since both read their operands exactly."""
    path = tmp_path / "fmod.so"
    _compile(_FMOD_HARNESS, path, ["-shared", "-fPIC", "-lm"])
    lib = ctypes.CDLL(str(path))
    rng = np.random.default_rng(11)
    specials = np.array([0.0, -0.0, 1e-45, -1e-45, 1e-40, 1.0, -1.0, 3.0, 2 * np.pi, 1e30,
                         -1e30, 3.4e38, np.inf, -np.inf, np.nan], np.float32)
    x = np.concatenate([np.repeat(specials, specials.size),
                        (rng.standard_normal(20000) * 10.0 ** rng.integers(-3, 12, 20000)),
                        _f32_sweep()[:20000]]).astype(np.float32)
    y = np.concatenate([np.tile(specials, specials.size),
                        (rng.standard_normal(20000) * 10.0 ** rng.integers(-3, 4, 20000)),
                        np.full(20000, 2 * np.pi)]).astype(np.float32)
    x, y = x[:y.size], y[:x.size]

    def apply(name: str, out_type: type) -> np.ndarray:
        out = np.empty(x.shape, dtype=out_type)
        getattr(lib, f"apply_{name}")(x.ctypes.data_as(ctypes.c_void_p),
                                      y.ctypes.data_as(ctypes.c_void_p),
                                      out.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(x.size))
        return out

    guard = apply("hlofuse_fmodf_is_small", np.int32) != 0
    small, whole = apply("hlofuse_fmodf_small", np.float32), apply("hlofuse_fmodf", np.float32)
    np.testing.assert_array_equal(small.view(np.uint32)[guard], whole.view(np.uint32)[guard])
    with np.errstate(invalid="ignore", over="ignore"):
        ratio_small = np.abs(x.astype(np.float64)) < np.abs(y.astype(np.float64)) * 2.0**28
    finite = np.isfinite(x) & np.isfinite(y) & (y != 0)
    assert np.array_equal(guard[finite], ratio_small[finite])
    assert guard[np.isnan(x) | np.isnan(y) | (np.isinf(y) & np.isfinite(x))].all()
    assert guard.mean() > 0.5 and (~guard).sum() > 1000  # both sides are exercised
    # the full function agrees with NumPy's fmod where neither flushes
    normal = finite & (np.abs(x) >= 2.0**-126) & (np.abs(y) >= 2.0**-126) & (whole != 0)
    np.testing.assert_array_equal(whole[normal], np.fmod(x[normal], y[normal]))


def test_sin_and_cos_without_hardware_fma(tmp_path: Path) -> None:
    """Without fma the float sin and cos reduce in double throughout; the same bounds hold."""
    if not re.match(r"(x86_64|amd64)", os.uname().machine, re.IGNORECASE):
        pytest.skip("x86-64-v2 (SSE4.2, no fma) is an x86 target")
    # not -mno-fma: with AVX-512F the compiler still has fma instructions
    flags = [f for f in TOOLCHAIN_FLAGS if not f.startswith("-march")] + ["-march=x86-64-v2"]
    lines = [_SMALL_HARNESS, "LOOP(hlofuse_sinf, float)", "LOOP(hlofuse_cosf, float)",
             "LOOP(hlofuse_sinf_small, float)", "LOOP(hlofuse_trigf_is_small, int32_t)"]
    path = tmp_path / "nofma.so"
    _compile("\n".join(lines) + "\n", path, ["-shared", "-fPIC", "-lm"], flags)
    lib = ctypes.CDLL(str(path))
    x = np.concatenate([_f32_sweep(), _critical_f32("sin")])
    for name in ("sin", "cos"):
        function = mathlib.lookup(name, DType.F32)
        assert function is not None
        err = _ulp_errors(_apply(lib, function.c_name, x), _reference(function, x), ftz=False)
        assert err.max() <= function.max_ulp, f"{name}: {_worst(err, x)}"
    # the small form is then the full function, right everywhere
    assert np.all(_apply(lib, "hlofuse_trigf_is_small", x, np.int32) != 0)
    assert np.array_equal(_apply(lib, "hlofuse_sinf_small", x).view(np.uint32),
                          _apply(lib, "hlofuse_sinf", x).view(np.uint32))


# ------------------------------------------------------------------ float64 accuracy

def _f64_inputs(name: str) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    n = 200_000

    def log_uniform(lo: float, hi: float, size: int = n) -> np.ndarray:
        return np.exp2(rng.uniform(lo, hi, size)) * rng.uniform(1.0, 2.0, size)

    if name in ("sin", "cos", "tan"):
        ks = np.concatenate([np.arange(1, 5000), rng.integers(5000, 2**48, 5000)])
        centers = ks.astype(np.float64) * (np.pi / 2)
        near = (centers.view(np.int64)[:, None] + np.arange(-8, 9)[None, :]).ravel()
        x = np.concatenate([log_uniform(-40, 49), near.view(np.float64)])
    elif name in ("exp", "logistic"):
        x = np.concatenate([log_uniform(-60, 9.47), rng.uniform(-746, 710, n)])
    elif name in ("expm1", "tanh"):
        x = np.concatenate([log_uniform(-60, 9.47), rng.uniform(-1, 1, n)])
    elif name == "log1p":
        x = np.concatenate([log_uniform(-1074, 1023), -log_uniform(-60, -1),
                            -1.0 + log_uniform(-53, -2)])
        return x[(x > -1.0) & np.isfinite(x)]
    else:  # log, sqrt, rsqrt, cbrt: the whole positive range, subnormals included
        x = np.concatenate([log_uniform(-1074, 1023), 1.0 + rng.uniform(-2**-10, 2**-10, n)])
        if name != "cbrt":
            return x[np.isfinite(x)]
    x = x[np.isfinite(x)]
    return np.concatenate([x, -x])


@pytest.mark.parametrize("ftz", [False, True], ids=["ieee", "ftz-daz"])
@pytest.mark.parametrize("function", F64, ids=[f.c_name for f in F64])
def test_f64_error_within_bound(harness: Harness, function: MathFunction, ftz: bool) -> None:
    x = _f64_inputs(function.name)
    if ftz:  # DAZ reads subnormal inputs as zero; leave them to the IEEE run
        x = x[(np.abs(x) >= np.finfo(np.float64).tiny) | (x == 0)]
    err = _ulp_errors(harness(function, x, ftz=ftz), _reference(function, x), ftz=ftz)
    assert err.max() <= function.max_ulp, _worst(err, x)


def test_bounds_hold_with_bare_flags(tmp_path: Path) -> None:
    """gcc's defaults (contraction into fma, -fmath-errno) keep every function in bound."""
    bare = _build_harness(tmp_path, BARE_FLAGS)
    for function in F32_UNARY + F64:
        x = _f32_sweep() if function.dtype is DType.F32 else _f64_inputs(function.name)
        x = x[::3]  # the full sweeps run with the toolchain's flags
        err = _ulp_errors(bare(function, x), _reference(function, x), ftz=False)
        assert err.max() <= function.max_ulp, f"{function.c_name}: {_worst(err, x)}"


def test_f64_sqrt_is_correctly_rounded(harness: Harness) -> None:
    sqrt = mathlib.lookup("sqrt", DType.F64)
    assert sqrt is not None
    rng = np.random.default_rng(5)
    squares = rng.integers(1, 2**26, 100_000).astype(np.float64) ** 2
    x = np.concatenate([_f64_inputs("sqrt"), squares,
                        rng.random(100_000).view(np.uint64).astype(np.float64)])
    x = np.abs(x[np.isfinite(x)])
    assert np.array_equal(harness(sqrt, x), np.sqrt(x))


def test_f64_trig_is_nan_beyond_its_domain(harness: Harness) -> None:
    x = np.array([2.0**50, -2.0**50, 1e300, np.inf], dtype=np.float64)
    for name in ("sin", "cos", "tan"):
        function = mathlib.lookup(name, DType.F64)
        assert function is not None and not function.is_full_range
        assert np.all(np.isnan(harness(function, x)))
        below = np.array([np.nextafter(2.0**50, 0.0)])
        err = _ulp_errors(harness(function, below), _reference(function, below), ftz=False)
        assert err.max() <= function.max_ulp


# ------------------------------------------------------------------ special values

INF, NAN = float("inf"), float("nan")
PI = float(np.pi)

# (name, arguments, expected): compared bit for bit up to the NaN payload, so the sign
# of a zero counts. Each row holds for float32 and, where the header has one, float64.
SPECIAL_VALUES: list[tuple[str, tuple[float, ...], float]] = [
    ("sin", (0.0,), 0.0), ("sin", (-0.0,), -0.0), ("sin", (INF,), NAN), ("sin", (-INF,), NAN),
    ("sin", (NAN,), NAN),
    ("cos", (0.0,), 1.0), ("cos", (-0.0,), 1.0), ("cos", (INF,), NAN), ("cos", (NAN,), NAN),
    ("tan", (0.0,), 0.0), ("tan", (-0.0,), -0.0), ("tan", (-INF,), NAN), ("tan", (NAN,), NAN),
    ("exp", (0.0,), 1.0), ("exp", (-0.0,), 1.0), ("exp", (INF,), INF), ("exp", (-INF,), 0.0),
    ("exp", (NAN,), NAN), ("exp", (1000.0,), INF), ("exp", (-1000.0,), 0.0),
    ("expm1", (0.0,), 0.0), ("expm1", (-0.0,), -0.0), ("expm1", (INF,), INF),
    ("expm1", (-INF,), -1.0), ("expm1", (NAN,), NAN), ("expm1", (-100.0,), -1.0),
    ("log", (0.0,), -INF), ("log", (-0.0,), -INF), ("log", (1.0,), 0.0), ("log", (-1.0,), NAN),
    ("log", (INF,), INF), ("log", (-INF,), NAN), ("log", (NAN,), NAN),
    ("log1p", (0.0,), 0.0), ("log1p", (-0.0,), -0.0), ("log1p", (-1.0,), -INF),
    ("log1p", (-2.0,), NAN), ("log1p", (INF,), INF), ("log1p", (-INF,), NAN),
    ("log1p", (NAN,), NAN),
    ("tanh", (0.0,), 0.0), ("tanh", (-0.0,), -0.0), ("tanh", (INF,), 1.0),
    ("tanh", (-INF,), -1.0), ("tanh", (NAN,), NAN), ("tanh", (30.0,), 1.0),
    ("logistic", (0.0,), 0.5), ("logistic", (INF,), 1.0), ("logistic", (-INF,), 0.0),
    ("logistic", (NAN,), NAN),
    ("sqrt", (0.0,), 0.0), ("sqrt", (-0.0,), -0.0), ("sqrt", (INF,), INF),
    ("sqrt", (-1.0,), NAN), ("sqrt", (-INF,), NAN), ("sqrt", (NAN,), NAN), ("sqrt", (4.0,), 2.0),
    ("rsqrt", (0.0,), INF), ("rsqrt", (-0.0,), -INF), ("rsqrt", (INF,), 0.0),
    ("rsqrt", (-1.0,), NAN), ("rsqrt", (NAN,), NAN), ("rsqrt", (4.0,), 0.5),
    ("cbrt", (0.0,), 0.0), ("cbrt", (-0.0,), -0.0), ("cbrt", (INF,), INF),
    ("cbrt", (-INF,), -INF), ("cbrt", (NAN,), NAN), ("cbrt", (-8.0,), -2.0),
    ("cbrt", (27.0,), 3.0),
    ("erf", (0.0,), 0.0), ("erf", (-0.0,), -0.0), ("erf", (INF,), 1.0), ("erf", (-INF,), -1.0),
    ("erf", (NAN,), NAN), ("erf", (10.0,), 1.0),
    # pow, C99 F.9.4.4
    ("pow", (NAN, 0.0), 1.0), ("pow", (NAN, -0.0), 1.0), ("pow", (1.0, NAN), 1.0),
    ("pow", (1.0, INF), 1.0), ("pow", (-1.0, INF), 1.0), ("pow", (-1.0, -INF), 1.0),
    ("pow", (NAN, 1.0), NAN), ("pow", (2.0, NAN), NAN),
    ("pow", (0.0, -3.0), INF), ("pow", (-0.0, -3.0), -INF), ("pow", (-0.0, -2.0), INF),
    ("pow", (-0.0, -0.5), INF), ("pow", (-0.0, -INF), INF), ("pow", (0.0, 3.0), 0.0),
    ("pow", (-0.0, 3.0), -0.0), ("pow", (-0.0, 2.0), 0.0), ("pow", (-0.0, 0.5), 0.0),
    ("pow", (0.5, -INF), INF), ("pow", (2.0, -INF), 0.0), ("pow", (0.5, INF), 0.0),
    ("pow", (-2.0, INF), INF), ("pow", (-INF, -3.0), -0.0), ("pow", (-INF, -2.0), 0.0),
    ("pow", (-INF, 3.0), -INF), ("pow", (-INF, 2.0), INF), ("pow", (-INF, 0.5), INF),
    ("pow", (INF, -1.0), 0.0), ("pow", (INF, 0.5), INF), ("pow", (-2.0, 0.5), NAN),
    ("pow", (-2.0, 3.0), -8.0), ("pow", (-2.0, -2.0), 0.25), ("pow", (2.0, 200.0), INF),
    ("pow", (2.0, -200.0), 0.0), ("pow", (-2.0, 201.0), -INF), ("pow", (-2.0, -201.0), -0.0),
    # atan2, C99 F.9.1.4
    ("atan2", (0.0, 0.0), 0.0), ("atan2", (-0.0, 0.0), -0.0), ("atan2", (0.0, -0.0), PI),
    ("atan2", (-0.0, -0.0), -PI), ("atan2", (0.0, -1.0), PI), ("atan2", (-0.0, -1.0), -PI),
    ("atan2", (0.0, 1.0), 0.0), ("atan2", (-0.0, 1.0), -0.0), ("atan2", (1.0, 0.0), PI / 2),
    ("atan2", (-1.0, -0.0), -PI / 2), ("atan2", (INF, INF), PI / 4),
    ("atan2", (-INF, INF), -PI / 4), ("atan2", (INF, -INF), 3 * PI / 4),
    ("atan2", (-INF, -INF), -3 * PI / 4), ("atan2", (INF, 5.0), PI / 2),
    ("atan2", (-INF, -5.0), -PI / 2), ("atan2", (1.0, INF), 0.0), ("atan2", (-1.0, INF), -0.0),
    ("atan2", (1.0, -INF), PI), ("atan2", (-1.0, -INF), -PI), ("atan2", (NAN, 1.0), NAN),
    ("atan2", (1.0, NAN), NAN),
    # fmod, C99 F.9.7.1: the sign of x, exact
    ("fmod", (0.0, 1.0), 0.0), ("fmod", (-0.0, 1.0), -0.0), ("fmod", (INF, 1.0), NAN),
    ("fmod", (1.0, 0.0), NAN), ("fmod", (1.0, INF), 1.0), ("fmod", (-1.0, -INF), -1.0),
    ("fmod", (INF, INF), NAN), ("fmod", (NAN, 1.0), NAN), ("fmod", (1.0, NAN), NAN),
    ("fmod", (-7.0, 3.0), -1.0), ("fmod", (7.0, -3.0), 1.0), ("fmod", (-6.0, 3.0), -0.0),
    ("fmod", (3.0e38, 3.0e-37), float(np.fmod(np.float32(3.0e38), np.float32(3.0e-37)))),
    # floor, ceil, round (C99 F.9.6): exact, x's sign kept, halfway cases away from zero
    ("floor", (-0.0,), -0.0), ("floor", (-0.3,), -1.0), ("floor", (0.7,), 0.0),
    ("floor", (-2.0,), -2.0), ("floor", (INF,), INF), ("floor", (-INF,), -INF),
    ("floor", (NAN,), NAN), ("floor", (8388607.5,), 8388607.0),
    ("ceil", (-0.7,), -0.0), ("ceil", (0.3,), 1.0), ("ceil", (-0.0,), -0.0),
    ("ceil", (-8388607.5,), -8388607.0), ("ceil", (INF,), INF), ("ceil", (NAN,), NAN),
    ("round", (0.5,), 1.0), ("round", (-0.5,), -1.0), ("round", (2.5,), 3.0),
    ("round", (-0.3,), -0.0), ("round", (0.49999997,), 0.0), ("round", (8388607.5,), 8388608.0),
    ("round", (-INF,), -INF), ("round", (NAN,), NAN),
]


def assert_same_values(got: np.ndarray, expected: np.ndarray) -> None:
    """Equal bit patterns, except that any NaN matches any NaN."""
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(got), nan), (got, expected)
    assert np.array_equal(got[~nan].view(f"u{got.itemsize}"),
                          expected[~nan].view(f"u{expected.itemsize}")), (got, expected)


def _special_cases() -> Iterator[tuple[MathFunction, tuple[float, ...], float]]:
    for name, args, expected in SPECIAL_VALUES:
        for dtype in (DType.F32, DType.F64):
            function = mathlib.lookup(name, dtype)
            if function is not None:
                yield function, args, expected


@pytest.mark.parametrize("ftz", [False, True], ids=["ieee", "ftz-daz"])
def test_special_values_are_exact(harness: Harness, ftz: bool) -> None:
    failures = []
    for function, args, expected in _special_cases():
        dtype = _np_type(function)
        got = harness(function, *(np.array([a], dtype=dtype) for a in args), ftz=ftz)
        want = np.array([expected], dtype=dtype)
        if not (np.isnan(got[0]) and np.isnan(want[0])) and got.view(f"u{got.itemsize}")[0] != \
                want.view(f"u{want.itemsize}")[0]:
            failures.append(f"{function.c_name}{args} = {got[0]!r}, expected {want[0]!r}")
    assert not failures, "\n".join(failures)


def test_special_value_table_covers_every_function() -> None:
    named = {name for name, _, _ in SPECIAL_VALUES}
    assert {f.name for f in mathlib.FUNCTIONS} <= named


# ------------------------------------------------------------------ vectorisation

@pytest.mark.parametrize("flags", [TOOLCHAIN_FLAGS, BARE_FLAGS], ids=["toolchain", "bare"])
def test_every_function_vectorises_without_fast_math(tmp_path: Path, flags: list[str]) -> None:
    """Each `y[i] = f(x[i])` loop is reported vectorised by gcc; a libm call is not."""
    version = subprocess.run([*_compiler(), "--version"], capture_output=True, text=True,
                             check=False)
    if "gcc" not in version.stdout.lower() and "free software" not in version.stdout.lower():
        pytest.skip("-fopt-info-vec-optimized is a gcc option")
    assert not any("fast-math" in f for f in flags)
    lines = ["#include <math.h>", '#include "hlofuse_math.h"']
    loop_line: dict[int, str] = {}
    for function in mathlib.FUNCTIONS:
        t = _ctype(function)
        args = "x[i]" if function.arity == 1 else "x[i], z[i]"
        lines.append(f"void loop_{function.c_name}(const {t} *restrict x, const {t} *restrict z,"
                     f" {t} *restrict y, long n) {{ for (long i = 0; i < n; i++) "
                     f"y[i] = {function.c_name}({args}); }}")
        loop_line[len(lines)] = function.c_name
    for form in mathlib.SMALL_ARGUMENT_FORMS:
        for c_name, t in ((form.c_name, "float"), (form.guard, "int")):
            if c_name in loop_line.values():
                continue
            args = "x[i]" if form.arity == 1 else "x[i], z[i]"
            lines.append(f"void loop_{c_name}(const float *restrict x, const float *restrict z,"
                         f" {t} *restrict y, long n) "
                         f"{{ for (long i = 0; i < n; i++) y[i] = {c_name}({args}); }}")
            loop_line[len(lines)] = c_name
    lines.append("void loop_libm_sinf(const float *restrict x, float *restrict y, long n) "
                 "{ for (long i = 0; i < n; i++) y[i] = sinf(x[i]); }")
    libm_line = len(lines)
    report = _compile("\n".join(lines) + "\n", tmp_path / "loops.o",
                      ["-c", "-fopt-info-vec-optimized"], flags)
    vectorised = {int(m) for m in re.findall(r"loops\.c:(\d+):\d+: optimized: loop vectorized",
                                             report)}
    missing = [name for line, name in loop_line.items() if line not in vectorised]
    assert not missing, f"not vectorised: {missing}\n{report}"
    assert libm_line not in vectorised  # the check can tell a scalar loop apart


def test_header_is_self_contained_and_warning_free(tmp_path: Path) -> None:
    source = '#include "hlofuse_math.h"\nfloat f(float x) { return hlofuse_sinf(x); }\n'
    report = _compile(source, tmp_path / "alone.o",
                      ["-c", "-Wall", "-Wextra", "-Wshadow", "-Wconversion", "-pedantic"])
    assert "warning" not in report, report


# ------------------------------------------------------------------ the Python listing

def test_listing_matches_the_header() -> None:
    defined = set(re.findall(r"HLOFUSE_MATH_FN \w+ (hlofuse_[a-z0-9]+)\(", mathlib.header_text()))
    assert defined == {f.c_name for f in mathlib.FUNCTIONS}
    helpers = set(re.findall(r"HLOFUSE_MATH_FN \w+ (hlofuse_[a-z0-9_]+)\(", mathlib.header_text()))
    for form in mathlib.SMALL_ARGUMENT_FORMS:
        assert {form.c_name, form.guard} <= helpers
        assert mathlib.small_argument_form(form.name, form.dtype) is form
        assert mathlib.lookup(form.name, form.dtype) is not None
    limit = re.search(r"#define HLOFUSE_TRIGF_SMALL_LIMIT (0x1p\d+)f", mathlib.header_text())
    assert limit is not None
    assert all(f.limit == float.fromhex(limit.group(1)) for f in mathlib.SMALL_ARGUMENT_FORMS
               if f.name in ("sin", "cos"))
    assert "a >= b * 0x1p28" in mathlib.header_text()  # fmod's: |x| < |y| 2^28
    fmod = mathlib.small_argument_form("fmod", DType.F32)
    assert fmod is not None and fmod.limit == 2.0**28
    assert mathlib.small_argument_form("exp", DType.F32) is None


def test_c_names_leave_out_functions_libm_does_better() -> None:
    names = mathlib.c_names()
    assert names[("sin", DType.F32)] == "hlofuse_sinf"
    assert ("sqrt", DType.F32) not in names and ("sin", DType.F64) not in names
    assert ("sin", DType.F64) in mathlib.c_names(recommended_only=False)
    assert mathlib.lookup("pow", DType.F64) is None


# ------------------------------------------------------------------ constants

def _pi_scaled(bits: int) -> int:
    """floor(pi * 2^bits), from Machin's formula in integer arithmetic."""
    guard = bits + 64

    def arctan_inv(n: int) -> int:
        total, term, k, sign = 0, (1 << guard) // n, 1, 1
        while term:
            total += sign * (term // k)
            term //= n * n
            k, sign = k + 2, -sign
        return total

    return (16 * arctan_inv(5) - 4 * arctan_inv(239)) >> 64


def test_two_over_pi_pieces_match_the_binary_expansion() -> None:
    two_over_pi = (1 << 801) // _pi_scaled(400)  # 2/pi * 2^400, truncated
    text = mathlib.header_text()
    body = text[text.index("hlofuse__reduce_pio2_f(double ax) {"):]
    body = body[:body.index("\n}\n")]
    pieces = re.findall(r"(\d+)\.0 \* 0x1p-(\d+)\)", body)
    assert len(pieces) == 7
    for i, (value, shift) in enumerate(pieces):
        assert int(shift) == 29 * (i + 1)
        assert int(value) == (two_over_pi >> (400 - int(shift))) & ((1 << 29) - 1)


def test_pi_over_two_pieces_sum_to_pi_over_two() -> None:
    text = mathlib.header_text()
    body = text[text.index("hlofuse__reduce_pio2_d"):]
    pieces = [float.fromhex(h) for h in re.findall(r"p\d = (-?0x[0-9a-f.]+p[-+]\d+)", body)[:4]]
    total = sum((Fraction(p) for p in pieces), Fraction(0))
    half_pi = Fraction(_pi_scaled(300), 1 << 301)
    assert abs(total - half_pi) < Fraction(1, 1 << 210)


# ------------------------------------------------------------------ exhaustive (opt-in)

_EXHAUSTIVE_SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "hlofuse_math.h"
static double ref_logistic(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_rsqrt(double x) { return 1.0 / sqrt(x); }
static double ulp_error(float y, double ref) {
    if (isnan(ref) || isnan(y)) return isnan(ref) && isnan(y) ? 0.0 : INFINITY;
    if (ref == 0.0 && y == 0.0) return !signbit(ref) == !signbit(y) ? 0.0 : INFINITY;
    /* inf, and any reference beyond the float range, stand for 2^128 */
    double yd = fabs((double)y) > 0x1p128 ? copysign(0x1p128, (double)y) : (double)y;
    double r = fabs(ref) > 0x1p128 ? copysign(0x1p128, ref) : ref;
    int e;
    frexp(fabs(r), &e);
    e = e - 1 < -126 ? -126 : e - 1;
    return fabs(yd - r) / ldexp(1.0, e - 23);
}
static float x[1 << 16], y[1 << 16];
int main(void) {
    double worst = 0.0;
    uint32_t worst_bits = 0;
    for (uint64_t start = 0; start < (1ull << 32); start += 1u << 16) {
        for (uint32_t i = 0; i < (1u << 16); i++) {
            uint32_t b = (uint32_t)(start + i);
            memcpy(&x[i], &b, 4);
        }
        for (int i = 0; i < (1 << 16); i++) y[i] = FUNC(x[i]);
        for (uint32_t i = 0; i < (1u << 16); i++) {
            double err = ulp_error(y[i], REF((double)x[i]));
            if (err > worst) { worst = err; memcpy(&worst_bits, &x[i], 4); }
        }
    }
    printf("%.6f %u\n", worst, worst_bits);
    return 0;
}
"""

_EXHAUSTIVE_REFS = {"sin": "sin", "cos": "cos", "tan": "tan", "exp": "exp", "expm1": "expm1",
                    "log": "log", "log1p": "log1p", "tanh": "tanh", "logistic": "ref_logistic",
                    "sqrt": "sqrt", "rsqrt": "ref_rsqrt", "cbrt": "cbrt", "erf": "erf"}


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("HLOFUSE_MATHLIB_EXHAUSTIVE"),
                    reason="set HLOFUSE_MATHLIB_EXHAUSTIVE=1 to check all 2^32 floats")
@pytest.mark.parametrize("function", F32_UNARY, ids=[f.c_name for f in F32_UNARY])
def test_f32_exhaustive(tmp_path: Path, function: MathFunction) -> None:
    exe = tmp_path / "exhaustive"
    _compile(_EXHAUSTIVE_SOURCE, exe, [f"-DFUNC={function.c_name}",
                                       f"-DREF={_EXHAUSTIVE_REFS[function.name]}", "-lm"])
    worst, bits = subprocess.run([str(exe)], capture_output=True, text=True,
                                 check=True).stdout.split()
    x = np.array([int(bits)], dtype=np.uint32).view(np.float32)[0]
    print(f"{function.c_name}: max {float(worst):.4f} ulp over all floats, at x={x!r}")
    assert float(worst) <= function.max_ulp, f"{float(worst)} ulp at x={x!r}"


_ROUNDING = """
HloModule rounding

ENTRY e {
  x = f32[4096] parameter(0)
  f = f32[4096] floor(x)
  c = f32[4096] ceil(x)
  r = f32[4096] round-nearest-afz(x)
  fc = f32[4096] add(f, c)
  ROOT s = f32[4096] add(fc, r)
}
"""


@pytest.mark.needs_cc
def test_kernels_round_with_the_header_and_vectorise(tmp_path: Path) -> None:
    """floor, ceil and round-nearest-afz take the header's functions: the C library's stayed
    scalar, and so did a whole-loop kernel's lane loop holding one (a Poisson draw's floor
    kept a rollout's lane loop scalar, 4.7x slower)."""
    from hlofuse.api import compile_module
    from hlofuse.ir.parser import parse_module
    from hlofuse.reference.interpreter import evaluate, flatten_value
    from hlofuse.targets.c.build import generate_c

    from tests.codegen.test_whole_loop_vectorises import _assert_vectorised

    module = parse_module(_ROUNDING)
    source = generate_c(module).source.text
    for name in ("hlofuse_floorf(", "hlofuse_ceilf(", "hlofuse_roundf("):
        assert name in source
    lines = source.split("\n")
    loops = [k + 1 for k, line in enumerate(lines) if re.match(r"\s*for \(int64_t i\d+ = ", line)
             and any(f"hlofuse_{f}f(" in lines[k + 2] for f in ("floor", "ceil", "round"))]
    assert len(loops) == 3
    _assert_vectorised(tmp_path, source, loops)
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-10, 10, 4000), np.arange(-24, 24) / 4.0,
                        [np.inf, -np.inf, np.nan, -0.0, 0.0, 0.49999997, -0.49999997,
                         8388607.5, -8388607.5, 3e38, -3e38, 1e-40, -1e-40],
                        rng.uniform(-1, 1, 4096 - 4000 - 48 - 13)]).astype(np.float32)
    got = np.asarray(flatten_value(compile_module(module, "none")(x))[0])
    want = flatten_value(evaluate(module, [x]))[0]
    np.testing.assert_array_equal(got, want)
