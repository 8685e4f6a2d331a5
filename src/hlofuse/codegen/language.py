"""What a code-generation target tells the emitters: the types values are held in, the
spellings of math functions and runtime helpers, literals, and how it prints the codegen IR
(`cir.py`).

Emitters build `cir` nodes, whose types are hlofuse dtypes (`cir.Type`), and ask a `Language`
only for decisions and names; the target's table spells every type and prints every
expression, statement and function. A target implements this protocol in its own folder
(`targets/c/language.py`: C + OpenMP; `targets/cuda/language.py`: CUDA C++), as PyTorch
Inductor's `CppOverrides`/`TritonOverrides` give each backend its own op spellings.

Values live in "register" form while a kernel computes: f16 and bf16 are held in f32 (already
rounded to their precision), pred as 0/1 in 8 bits. Memory holds the "storage" form: an
element of dtype d is a `d` in memory (a target spells f16's storage as it likes: 16 bits).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np

from hlofuse.codegen import cir
from hlofuse.codegen.cir import Expr
from hlofuse.ir.dtypes import DType


class Language(Protocol):
    """The spellings and printer of one target's source language."""

    @property
    def name(self) -> str:
        """The language's name in messages ("C", "CUDA")."""
        ...
    @property
    def index_type(self) -> cir.Type: ...
    @property
    def vector_math(self) -> Mapping[tuple[str, DType], str]: ...
    @property
    def dot_routines(self) -> Mapping[DType, str]: ...
    @property
    def has_linalg_library(self) -> bool:
        """Whether the runtime has the linear-algebra routines kernels call."""
        ...

    # types
    def register_type(self, dtype: DType) -> DType:
        """The dtype a value of `dtype` is held in while a kernel computes."""
        ...
    def wrap_type(self, dtype: DType) -> DType:
        """Where integer + - * of `dtype` wrap around without undefined behaviour."""
        ...
    def pointer(self, dtype: DType, const: bool, restrict: bool = True) -> cir.Pointer: ...
    def type_tag(self, dtype: DType) -> str: ...
    def type_name(self, t: cir.Type) -> str:
        """The spelling of a type (for text a target writes around the printed IR)."""
        ...

    # values
    def literal(self, dtype: DType, value: object) -> cir.Const: ...
    def load(self, dtype: DType, pointer: Expr, index: Expr) -> Expr: ...
    def to_storage(self, dtype: DType, value: Expr) -> Expr: ...
    def round_to(self, dtype: DType, expr: Expr) -> Expr: ...
    def from_double(self, dtype: DType, expr: Expr) -> Expr: ...
    def math(self, name: str, dtype: DType) -> str: ...
    def bit_function(self, name: str, dtype: DType) -> str:
        """The spelling of a bit count ("popcount", "clz") of an unsigned 32- or 64-bit
        integer."""
        ...
    def has_math(self, name: str, dtype: DType) -> bool: ...
    def call_math(self, name: str, dtype: DType, *arguments: Expr) -> Expr: ...

    def lane_language(self) -> Language:
        """The language of a whole-loop kernel's lane code with vector lanes (this one, or a
        variant whose register types vectorise better)."""
        ...

    # printing
    def expr(self, e: Expr) -> str: ...
    def top(self, e: Expr) -> str: ...
    def statements(self, stmts: list[cir.Stmt], depth: int) -> list[str]: ...
    def function(self, f: cir.Function) -> str: ...


_UNSIGNED = {8: DType.U8, 16: DType.U16, 32: DType.U32, 64: DType.U64}
_SIGNED = {8: DType.S8, 16: DType.S16, 32: DType.S32, 64: DType.S64}


def unsigned_of(dtype: DType) -> DType:
    """The unsigned integer type of `dtype`'s width: bit manipulation happens there."""
    return _UNSIGNED[dtype.bits]


def signed_of(dtype: DType) -> DType:
    """The signed integer type of `dtype`'s width."""
    return _SIGNED[dtype.bits]


def literal(dtype: DType, value: object) -> cir.Const:
    """An exact literal of `dtype` in register form (floats kept as the bits of an f64)."""
    if dtype is DType.PRED:
        return cir.Const(dtype, 1 if bool(value) else 0)
    if dtype.is_integer:
        return cir.Const(dtype, int(value))  # type: ignore[call-overload]
    as_float = np.asarray(value, dtype=dtype.numpy).astype(np.float64)
    return cir.Const(dtype, int(as_float.view(np.uint64)))


def literal_float(const: cir.Const) -> float:
    """The value of a float literal (`literal` keeps floats as the bits of an f64)."""
    return float(np.asarray(int(const.value), np.uint64).view(np.float64))
