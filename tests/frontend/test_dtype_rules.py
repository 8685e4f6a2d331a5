"""Type promotion follows JAX with 64-bit types disabled, weak types included."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import hlofuse
import hlofuse.numpy as hnp
from hlofuse.frontend.dtype_rules import canonical, promote, to_dtype
from hlofuse.ir.dtypes import DType

STRONG = [np.bool_, np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32, np.float16,
          ml_dtypes.bfloat16, np.float32]
# A Python scalar stands for a weakly typed operand.
OPERANDS = [*STRONG, int, float]


def _example(kind: object) -> object:
    if kind is int:
        return 3
    if kind is float:
        return 2.5
    return np.ones((2,), dtype=kind)


def _jax_type(x: object, y: object) -> tuple[np.dtype, bool]:
    out = jax.eval_shape(jnp.add, x, y)
    return np.dtype(out.dtype), bool(out.weak_type)


def _hlofuse_type(x: object, y: object) -> tuple[np.dtype, bool]:
    arrays = [a for a in (x, y) if isinstance(a, np.ndarray)]

    def f(*a: object) -> object:
        it = iter(a)
        return hnp.add(*(next(it) if isinstance(v, np.ndarray) else v for v in (x, y)))

    lowered = hlofuse.jit(f).lower(*arrays)
    (aval,) = lowered.traced.out_avals
    return aval.dtype.numpy, aval.weak


@pytest.mark.parametrize("a, b", list(itertools.combinations_with_replacement(OPERANDS, 2)))
def test_add_promotes_like_jax(a: object, b: object) -> None:
    x, y = _example(a), _example(b)
    if not isinstance(x, np.ndarray) and not isinstance(y, np.ndarray):
        y = np.asarray(y, np.float32)  # two Python scalars: give the trace one array
    assert _hlofuse_type(x, y) == _jax_type(x, y)


def test_64_bit_types_are_narrowed() -> None:
    assert canonical(DType.F64) is DType.F32
    assert canonical(DType.S64) is DType.S32
    assert canonical(DType.U64) is DType.U32
    assert to_dtype(np.float64) is DType.F32
    assert to_dtype(float) is DType.F32 and to_dtype(int) is DType.S32
    assert promote((DType.U32, False), (DType.S32, False)) == (DType.S32, False)  # via s64


def test_weak_scalars_keep_the_array_type() -> None:
    def f(x: object) -> object:
        return x * 2.0, x + 1, x > 0.5

    out = hlofuse.jit(f)(np.ones(2, np.float16))
    assert [o.dtype for o in out] == [np.float16, np.float16, np.bool_]
    ints = hlofuse.jit(lambda x: (x * 2, x * 2.5))(np.ones(2, np.int8))
    assert ints[0].dtype == np.int8 and ints[1].dtype == np.float32


def test_jit_arguments_are_canonicalised() -> None:
    out = hlofuse.jit(lambda x, s: x + s)(np.ones(3, np.float64), 1.5)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.full(3, 2.5, np.float32))
