"""A vectorisable math library for generated C kernels: the header `hlofuse_math.h`.

The header is self-contained C (it includes only <stdint.h>); every function is
`static inline`, calls nothing and branches nowhere, so gcc -O3 -march=native
vectorises a loop such as ``for (i...) y[i] = hlofuse_sinf(x[i]);`` without
-ffast-math. libm's functions never vectorise there: they are calls, and even
`sqrtf` stays scalar while -fmath-errno (the default) is on.

Functions (float32 name / float64 name):

    sin       hlofuse_sinf      hlofuse_sin        f64: |x| < 2^50, NaN beyond
    cos       hlofuse_cosf      hlofuse_cos        f64: |x| < 2^50, NaN beyond
    tan       hlofuse_tanf      hlofuse_tan        f64: |x| < 2^50, NaN beyond
    exp       hlofuse_expf      hlofuse_exp
    expm1     hlofuse_expm1f    hlofuse_expm1
    log       hlofuse_logf      hlofuse_log
    log1p     hlofuse_log1pf    hlofuse_log1p
    tanh      hlofuse_tanhf     hlofuse_tanh
    logistic  hlofuse_logisticf hlofuse_logistic   1 / (1 + exp(-x))
    sqrt      hlofuse_sqrtf     hlofuse_sqrt       correctly rounded; see below
    rsqrt     hlofuse_rsqrtf    hlofuse_rsqrt      1 / sqrt(x); see below
    cbrt      hlofuse_cbrtf     hlofuse_cbrt
    pow       hlofuse_powf      -                  (x, y), C99 special cases
    atan2     hlofuse_atan2f    -                  (y, x), C99 special cases
    erf       hlofuse_erff      -
    floor     hlofuse_floorf    hlofuse_floor      exact; from rint, which vectorises
    ceil      hlofuse_ceilf     hlofuse_ceil       exact
    round     hlofuse_roundf    hlofuse_round      exact; halfway cases away from zero

float32 functions compute in double and round once, so they are within ~0.5 ulp over
the whole float range, tan included (its reduction modulo pi/2 is exact for every float),
except sin, cos, exp, expm1, log and tanh: log computes in float (fdlibm's logf, within
0.84 ulp, twice as fast as in double); sin and cos compute in float (a Cody-Waite reduction
with fma, then minimax polynomials) for |x| <= 2^18 and take the exact double reduction
beyond, within 0.9 ulp everywhere; exp and expm1 compute in float (a two-piece ln2
reduction, a minimax polynomial, the scale by 2^n in two steps), within 1.05 and 1.43 ulp
(a recurrent policy's sigmoid gates and elu twice as fast); tanh computes in float (e / (e
+ 2) with e = expm1(2|x|), one path for every argument), within 1.72 ulp (a policy
network's tanh layer is then four times as fast as in double: eight lanes to a vector and
half the instructions of a two-branch form). On a target without hardware fma all five
compute in double throughout. float64
functions are within 1 to 2.5 ulp (`max_ulp`); hlofuse_sin, _cos and _tan are accurate
for |x| < 2^50 only and return NaN beyond. Special values follow C99 Annex F (NaN in, NaN
out; sin(inf) = NaN; exp(-inf) = 0; log(0) = -inf; log(-1) = NaN; tanh(+-inf) = +-1; signed
zeros kept where C99 keeps them). f16 and bf16 values, held as float in registers, use the
float32 functions.
`MathFunction.max_ulp` is the bound the tests assert, measured against NumPy (float64
reference for float32, long double for float64), with and without FTZ/DAZ.

The functions do not depend on the FTZ/DAZ bits: under DAZ a subnormal float input
reads as a signed zero (as it would for any instruction), under FTZ a subnormal result
flushes to zero. pow and fmod are the exceptions, as the C library's are (they read bits with
integer operations): hlofuse_powf and hlofuse_fmodf read their operands exactly, and
hlofuse_fmodf writes a subnormal remainder unflushed. XLA's CPU code calls the C library's
powf under DAZ, where glibc reads a subnormal base as +-2^-150: `hlofuse_pow_cpuf` computes
that (and `hlofuse_is_subnormal`, `hlofuse_pow_cpu_base` let a caller of the C library's
float64 pow do the same), so that compiled kernels give XLA's answers.

`SMALL_ARGUMENT_FORMS` lists faster forms accurate only for small arguments (sin and cos
in float arithmetic, without a large-argument path; fmod with the last step of its long
division only, exact while |x| < |y| 2^28),
with the guard saying where they hold; a caller that can take the rare large argument
separately uses them (the whole-loop kernel does: the full functions run only in a step
where some lane's argument is beyond the limit).

`recommended` says whether a kernel should call the header's function rather than the
libm spelling: not for sqrt and rsqrt, since the toolchain compiles with -fno-math-errno,
under which gcc turns sqrtf/sqrt into the (correctly rounded, vectorised) hardware
instruction, faster than any software version; not for the float64 trigonometric
functions, whose domain is limited. Every function uses fma where the target has it;
the float64 ones need it to vectorise.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from hlofuse.ir.dtypes import DType

HEADER_NAME = "hlofuse_math.h"


@dataclass(frozen=True, slots=True)
class MathFunction:
    """One function of the header.

    `name` is the generic spelling used by `CLanguage.float_math` ("sin", "exp", ...);
    `max_ulp` is the error bound the tests assert over the whole domain, with and
    without FTZ/DAZ; `is_full_range` is False where the function is accurate only on
    part of its domain; `recommended` and `note` are explained in the module docstring.
    """

    name: str
    dtype: DType
    c_name: str
    libm_name: str
    arity: int
    max_ulp: float
    is_full_range: bool = True
    recommended: bool = True
    note: str = ""


_HARDWARE_SQRT = "with -fno-math-errno (the toolchain's flags) sqrt vectorises in hardware"
_TRIG_LIMIT = "accurate for |x| < 2^50; NaN beyond"


def _f32(name: str, max_ulp: float, *, arity: int = 1, libm: str = "",
         note: str = "") -> MathFunction:
    return MathFunction(name, DType.F32, f"hlofuse_{name}f", libm or f"{name}f", arity, max_ulp,
                        recommended=not note, note=note)


def _f64(name: str, max_ulp: float, *, libm: str = "", note: str = "") -> MathFunction:
    return MathFunction(name, DType.F64, f"hlofuse_{name}", libm or name, 1, max_ulp,
                        is_full_range=note != _TRIG_LIMIT, recommended=not note, note=note)


# Measured maxima (tests/codegen/test_mathlib.py sweeps, toolchain flags): every float32
# function 0.5001 ulp or less but exp, 1.048, expm1, 1.423 (every float, in float
# arithmetic where the target has fma), log, 0.835 (every positive float, in float), and
# tanh, 1.717 (every float up to 10); the small-argument
# forms of sin and cos 0.8923 and 0.8939 (every float up to their limit, with
# HLOFUSE_MATHLIB_EXHAUSTIVE=1); float64 sin 0.75, cos 0.78, tan 1.95, exp 0.81, expm1 1.41,
# log 0.67, log1p 1.44, tanh 2.18, logistic 1.59, sqrt 0.5, rsqrt 0.5005, cbrt 0.5.
FUNCTIONS: tuple[MathFunction, ...] = (
    _f32("sin", 0.51),
    _f32("cos", 0.51),
    _f32("tan", 0.51),
    _f32("exp", 1.05),
    _f32("expm1", 1.43),
    _f32("log", 0.84),
    _f32("log1p", 0.51),
    _f32("tanh", 1.72),
    _f32("logistic", 0.51, libm="1/(1+expf(-x))"),
    _f32("sqrt", 0.5, note=_HARDWARE_SQRT),
    _f32("rsqrt", 0.51, libm="1/sqrtf", note=_HARDWARE_SQRT),
    _f32("cbrt", 0.51),
    _f32("pow", 0.51, arity=2),
    _f32("atan2", 0.51, arity=2),
    _f32("erf", 0.51),
    _f32("fmod", 0.0, arity=2),
    _f32("floor", 0.0),
    _f32("ceil", 0.0),
    _f32("round", 0.0),
    _f64("sin", 1.0, note=_TRIG_LIMIT),
    _f64("cos", 1.0, note=_TRIG_LIMIT),
    _f64("tan", 2.5, note=_TRIG_LIMIT),
    _f64("exp", 1.0),
    _f64("expm1", 2.0),
    _f64("log", 1.0),
    _f64("log1p", 2.0),
    _f64("tanh", 2.5),
    _f64("logistic", 2.0, libm="1/(1+exp(-x))"),
    _f64("sqrt", 0.5, note=_HARDWARE_SQRT),
    _f64("rsqrt", 1.0, libm="1/sqrt", note=_HARDWARE_SQRT),
    _f64("cbrt", 1.0),
    _f64("floor", 0.0),
    _f64("ceil", 0.0),
    _f64("round", 0.0),
)


def flushed_by_hardware() -> frozenset[tuple[str, DType]]:
    """(name, F32) of the float32 functions of one argument that kernels call instead of libm's.

    Under the DAZ and FTZ bits each reads a subnormal argument as a signed zero and flushes a
    subnormal result, as a hand-written flush around the call would
    (tests/codegen/test_mathlib.py), so a kernel running with the bits set calls them bare.
    """
    return frozenset((f.name, f.dtype) for f in FUNCTIONS
                     if f.dtype is DType.F32 and f.arity == 1 and f.recommended)


@dataclass(frozen=True, slots=True)
class SmallArgumentForm:
    """A faster form of a function, accurate for arguments of magnitude at most `limit`.

    `guard` is a C function of the `arity` arguments, nonzero exactly where `c_name` is
    accurate (for sin and cos never for NaN); elsewhere `c_name` gives an unspecified value and
    the caller must use the full function. `max_ulp` is the bound the tests assert inside the
    limit. For fmod the limit is on |x| / |y|, and the form is exact: the same bits as the full
    function wherever the guard holds, special cases included.
    """

    name: str
    dtype: DType
    c_name: str
    guard: str
    limit: float
    max_ulp: float
    arity: int = 1


SMALL_ARGUMENT_FORMS: tuple[SmallArgumentForm, ...] = (
    SmallArgumentForm("sin", DType.F32, "hlofuse_sinf_small", "hlofuse_trigf_is_small",
                      2.0**18, 0.9),
    SmallArgumentForm("cos", DType.F32, "hlofuse_cosf_small", "hlofuse_trigf_is_small",
                      2.0**18, 0.9),
    SmallArgumentForm("fmod", DType.F32, "hlofuse_fmodf_small", "hlofuse_fmodf_is_small",
                      2.0**28, 0.0, arity=2),
)


def small_argument_form(name: str, dtype: DType) -> SmallArgumentForm | None:
    """The small-argument form of `name` ("sin", ...) on `dtype`, if the header has one."""
    for form in SMALL_ARGUMENT_FORMS:
        if form.name == name and form.dtype is dtype:
            return form
    return None


def header_path() -> Path:
    """The installed header; pass its directory to the C compiler with -I."""
    return Path(str(resources.files(__name__).joinpath(HEADER_NAME)))


def include_dir() -> Path:
    return header_path().parent


_FUNCTION_MACRO = "#define HLOFUSE_MATH_FN static inline"


def header_text(function_qualifier: str = "") -> str:
    """The header's text; `function_qualifier`: what a target adds to the qualifiers of every
    function it defines (`HLOFUSE_MATH_FN`, e.g. CUDA's `__host__ __device__`)."""
    text = header_path().read_text(encoding="utf-8")
    if not function_qualifier:
        return text
    lines = text.splitlines(keepends=True)
    for k, line in enumerate(lines):
        if line.startswith(_FUNCTION_MACRO):
            lines[k] = f"{_FUNCTION_MACRO} {function_qualifier}{line[len(_FUNCTION_MACRO):]}"
    return "".join(lines)


def lookup(name: str, dtype: DType) -> MathFunction | None:
    """The function computing `name` ("sin", "pow", ...) on `dtype`, if the header has one."""
    for function in FUNCTIONS:
        if function.name == name and function.dtype is dtype:
            return function
    return None


def c_names(*, recommended_only: bool = True) -> dict[tuple[str, DType], str]:
    """(generic name, dtype) -> C name, for an emitter to prefer over libm's spelling."""
    return {(f.name, f.dtype): f.c_name for f in FUNCTIONS if f.recommended or not recommended_only}
