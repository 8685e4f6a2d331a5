"""Spellings of the C + OpenMP target: types, literals, loads and stores, loops, pragmas.

Emitters ask a `CLanguage` how to write things and never spell C themselves, so a CUDA
language can subclass it and override fields (qualifiers, loop headers), not logic.

Values live in "register" form while a kernel computes: f16 and bf16 are held as `float`
(already rounded to their precision), pred as a 0/1 `uint8_t`. Memory holds the "storage"
form: f16 and bf16 as their 16 bits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from hlofuse.ir.dtypes import DType

_STORAGE = MappingProxyType({
    DType.PRED: "uint8_t",
    DType.S8: "int8_t",
    DType.S16: "int16_t",
    DType.S32: "int32_t",
    DType.S64: "int64_t",
    DType.U8: "uint8_t",
    DType.U16: "uint16_t",
    DType.U32: "uint32_t",
    DType.U64: "uint64_t",
    DType.F16: "uint16_t",
    DType.BF16: "uint16_t",
    DType.F32: "float",
    DType.F64: "double",
})

# f32 spelling, f64 spelling. f16 and bf16 compute with the f32 function and round.
_FLOAT_MATH = MappingProxyType({
    "exp": ("expf", "exp"), "expm1": ("expm1f", "expm1"), "log": ("logf", "log"),
    "log1p": ("log1pf", "log1p"), "sin": ("sinf", "sin"), "cos": ("cosf", "cos"),
    "tan": ("tanf", "tan"), "tanh": ("tanhf", "tanh"), "sqrt": ("sqrtf", "sqrt"),
    "cbrt": ("cbrtf", "cbrt"), "floor": ("floorf", "floor"), "ceil": ("ceilf", "ceil"),
    "round": ("roundf", "round"), "rint": ("rintf", "rint"), "fabs": ("fabsf", "fabs"),
    "fmod": ("fmodf", "fmod"), "pow": ("powf", "pow"), "atan2": ("atan2f", "atan2"),
    "isfinite": ("isfinite", "isfinite"), "erf": ("erff", "erf"),
})


def _vectorisable_math() -> Mapping[tuple[str, DType], str]:
    """The math library's functions that kernels should call instead of libm's."""
    from hlofuse.codegen.mathlib import FUNCTIONS

    return MappingProxyType({(f.name, f.dtype): f.c_name for f in FUNCTIONS if f.recommended})


@dataclass(frozen=True)
class CLanguage:
    """C11 with OpenMP, as compiled by gcc or clang."""

    storage_types: Mapping[DType, str] = field(default_factory=lambda: _STORAGE)
    float_math: Mapping[str, tuple[str, str]] = field(default_factory=lambda: _FLOAT_MATH)
    # Branch-free functions of codegen/mathlib (within ~0.5 ulp for f32) that vectorise, where
    # libm's are calls that keep a loop scalar; keyed by (name, f32 or f64).
    vector_math: Mapping[tuple[str, DType], str] = field(default_factory=_vectorisable_math)
    index_type: str = "int64_t"
    restrict: str = "restrict"
    kernel_qualifier: str = "static __attribute__((noinline))"
    # Small kernels gain nothing from -O3 vectorisation but cost most of the compile time.
    small_kernel_attribute: str = '__attribute__((optimize("O1")))'
    export_qualifier: str = "__attribute__((visibility(\"default\")))"
    parallel_region: str = "#pragma omp parallel"
    parallel_for: str = "#pragma omp for schedule(static)"
    parallel_for_collapse: str = "#pragma omp for schedule(static) collapse({n})"
    simd_reduction: str = "#pragma omp simd reduction({op}:{var})"
    simd: str = "#pragma omp simd"
    # gcc's jump threading duplicates the branches of several selects on one predicate until
    # if-conversion gives up and a simd loop stays scalar; every kernel with vector loops
    # turns it off.
    no_jump_threading: str = '__attribute__((optimize("no-thread-jumps")))'
    ftz_begin: str = "HLOFUSE_FTZ_BEGIN"
    ftz_end: str = "HLOFUSE_FTZ_END"

    # --- types ------------------------------------------------------------------------

    def storage_type(self, dtype: DType) -> str:
        try:
            return self.storage_types[dtype]
        except KeyError:
            raise ValueError(f"no C type for element type {dtype.text}") from None

    def register_type(self, dtype: DType) -> str:
        if dtype in (DType.F16, DType.BF16):
            return "float"
        return self.storage_type(dtype)

    def unsigned_type(self, dtype: DType) -> str:
        """The unsigned type of the same width: bit manipulation happens there."""
        return {8: "uint8_t", 16: "uint16_t", 32: "uint32_t", 64: "uint64_t"}[dtype.bits]

    def signed_type(self, dtype: DType) -> str:
        return {8: "int8_t", 16: "int16_t", 32: "int32_t", 64: "int64_t"}[dtype.bits]

    def wrap_type(self, dtype: DType) -> str:
        """Where integer + - * wrap without undefined behaviour (no promotion to int)."""
        return "uint64_t" if dtype.bits == 64 else "uint32_t"

    def pointer(self, dtype: DType, const: bool, restrict: bool = True) -> str:
        qualifier = "const " if const else ""
        r = f"{self.restrict} " if restrict else ""
        return f"{qualifier}{self.storage_type(dtype)} *{r}"

    def type_tag(self, dtype: DType) -> str:
        """Suffix of the per-type helper functions in the header (hlofuse_div_s32, ...)."""
        return dtype.text

    # --- memory -----------------------------------------------------------------------

    def load(self, dtype: DType, pointer: str, index: str) -> str:
        element = f"{pointer}[{index}]"
        if dtype is DType.F16:
            return f"hlofuse_f16_to_f32({element})"
        if dtype is DType.BF16:
            return f"hlofuse_bf16_to_f32({element})"
        return element

    def to_storage(self, dtype: DType, value: str) -> str:
        if dtype is DType.F16:
            return f"hlofuse_f32_to_f16({value})"
        if dtype is DType.BF16:
            return f"hlofuse_f32_to_bf16({value})"
        return value

    def round_to(self, dtype: DType, expr: str) -> str:
        """A freshly computed float value rounded to `dtype`'s precision (register form)."""
        if dtype is DType.F16:
            return f"hlofuse_round_f16({expr})"
        if dtype is DType.BF16:
            return f"hlofuse_round_bf16({expr})"
        return expr

    def from_double(self, dtype: DType, expr: str) -> str:
        """A double rounded once to `dtype` (register form), as the reference rounds the
        transcendental functions it evaluates in f64 (bf16 goes through f32 there)."""
        if dtype is DType.F16:
            return f"hlofuse_f16_to_f32(hlofuse_f64_to_f16({expr}))"
        if dtype is DType.BF16:
            return f"hlofuse_round_bf16((float)({expr}))"
        if dtype is DType.F32:
            return f"hlofuse_daz_f((float)({expr}))"
        return expr

    def math(self, name: str, dtype: DType) -> str:
        width = DType.F64 if dtype is DType.F64 else DType.F32
        vectorised = self.vector_math.get((name, width))
        if vectorised is not None:
            return vectorised
        f32_name, f64_name = self.float_math[name]
        return f64_name if dtype is DType.F64 else f32_name

    def has_math(self, name: str, dtype: DType) -> bool:
        """Whether `math(name)` exists as a function (logistic has no libm spelling)."""
        width = DType.F64 if dtype is DType.F64 else DType.F32
        return (name, width) in self.vector_math or name in self.float_math

    def call_math(self, name: str, dtype: DType, *arguments: str) -> str:
        """A libm call with denormal inputs and results flushed (f32/f64; the reference
        models XLA's DAZ/FTZ, which libm's integer bit tricks would otherwise escape)."""
        if dtype not in (DType.F32, DType.F64):
            return f"{self.math(name, dtype)}({', '.join(arguments)})"
        flush = "hlofuse_daz_d" if dtype is DType.F64 else "hlofuse_daz_f"
        inner = ", ".join(f"{flush}({a})" for a in arguments)
        return f"{flush}({self.math(name, dtype)}({inner}))"

    # --- literals ---------------------------------------------------------------------

    def literal(self, dtype: DType, value: object) -> str:
        """An exact C literal in register form."""
        if dtype is DType.PRED:
            return "1" if bool(value) else "0"
        if dtype.is_integer:
            return self.int_literal(dtype, int(value))  # type: ignore[call-overload]
        return self.float_literal(dtype, value)

    def int_literal(self, dtype: DType, number: int) -> str:
        ctype = self.storage_type(dtype)
        if dtype.is_unsigned_int:
            return f"(({ctype}){number}ULL)"
        if number == -(1 << 63):
            return "INT64_MIN"
        return f"(({ctype}){number}LL)"

    def float_literal(self, dtype: DType, value: object) -> str:
        as_float = float(np.asarray(value, dtype=dtype.numpy).astype(np.float64))
        if dtype is DType.F64:
            bits = int(np.asarray(as_float, np.float64).view(np.uint64))
            if not math.isfinite(as_float):
                return f"hlofuse_f64_from_bits({bits}ULL)"
            return as_float.hex()
        bits = int(np.asarray(as_float, np.float64).astype(np.float32).view(np.uint32))
        if not math.isfinite(as_float):
            return f"hlofuse_f32_from_bits({bits}u)"
        return as_float.hex() + "f"

    def index_literal(self, number: int) -> str:
        return f"{number}" if -(1 << 31) < number < (1 << 31) else f"{number}LL"


C = CLanguage()
