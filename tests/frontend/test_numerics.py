"""hlofuse.numpy functions, jitted and run on the interpreter, against NumPy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import hlofuse
import hlofuse.numpy as hnp

RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal((3, 4)).astype(np.float32)
POS = (np.abs(A) + 0.5).astype(np.float32)
UNIT = np.clip(A / 4, -0.9, 0.9).astype(np.float32)
N = RNG.integers(-20, 20, (3, 4)).astype(np.int32)
J = RNG.integers(1, 6, (3, 4)).astype(np.int32)
U = RNG.integers(0, 2**32, (3, 4), dtype=np.uint64).astype(np.uint32)
BOOL = A > 0


def _check(fn: Callable[..., Any], ref: Callable[..., Any], *args: np.ndarray,
           rtol: float = 2e-6) -> None:
    got = hlofuse.jit(fn)(*args)
    want = ref(*args)
    got_leaves = got if isinstance(got, tuple | list) else [got]
    want_leaves = want if isinstance(want, tuple | list) else [want]
    for g, w in zip(got_leaves, want_leaves, strict=True):
        w = np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-6)
        else:
            np.testing.assert_array_equal(g, w)


UNARY = [
    ("sin", A), ("cos", A), ("tan", UNIT), ("tanh", A), ("exp", A), ("log", POS),
    ("log1p", POS), ("expm1", A), ("sqrt", POS), ("abs", A), ("abs", N), ("sign", A),
    ("sign", N), ("floor", A * 3), ("ceil", A * 3), ("round", A * 3), ("negative", N),
    ("negative", A), ("logical_not", BOOL), ("invert", N), ("invert", U), ("isfinite", A),
    ("square", A),
]


@pytest.mark.parametrize("name, x", UNARY, ids=[f"{n}-{x.dtype}" for n, x in UNARY])
def test_unary(name: str, x: np.ndarray) -> None:
    _check(getattr(hnp, name), getattr(np, name), x)


def test_round_is_half_to_even() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4], np.float32)
    _check(hnp.round, np.round, x)


BINARY = [
    ("add", A, B), ("subtract", A, B), ("multiply", N, J), ("true_divide", A, POS),
    ("true_divide", N, J), ("floor_divide", N, J), ("floor_divide", N, -J),
    ("floor_divide", A, POS), ("floor_divide", -A, POS), ("remainder", N, J),
    ("remainder", N, -J), ("remainder", A, POS), ("remainder", -A, POS), ("power", POS, A),
    ("maximum", A, B), ("minimum", N, J), ("equal", N, J), ("not_equal", A, B),
    ("less", A, B), ("less_equal", N, J), ("greater", A, B), ("greater_equal", N, J),
    ("logical_and", BOOL, A < 0.5), ("logical_or", BOOL, A < -0.5),
    ("logical_xor", BOOL, A < 0.5), ("bitwise_and", N, J), ("bitwise_or", U, U >> 3),
    ("bitwise_xor", N, J), ("left_shift", J, J), ("right_shift", N, J),
    ("right_shift", U, J.astype(np.uint32)),
]


@pytest.mark.parametrize("name, x, y", BINARY,
                         ids=[f"{n}-{x.dtype}-{y.dtype}" for n, x, y in BINARY])
def test_binary(name: str, x: np.ndarray, y: np.ndarray) -> None:
    _check(getattr(hnp, name), getattr(np, name), x, y)


def test_operators_broadcast_like_numpy() -> None:
    row = A[0]
    col = A[:, :1]
    _check(lambda a, r, c: (a + r, a * c, r - c, a / 2, 2 ** a, -a, a ** 3, a // 0.7, a % 0.7,
                            abs(a), a @ a.T, 1.5 - a),
           lambda a, r, c: (a + r, a * c, r - c, a / 2, 2 ** a, -a, a ** 3, a // 0.7, a % 0.7,
                            abs(a), a @ a.T, 1.5 - a), A, row, col, rtol=1e-5)


def test_integer_powers_multiply() -> None:
    _check(lambda a, i: (a**0, a**1, a**5, a**-2, i**3), lambda a, i: (
        np.ones_like(a), a, a**5, a**-2.0, i**3), A, N, rtol=1e-5)


def test_where_clip_and_comparisons_with_scalars() -> None:
    _check(lambda a, i: (hnp.where(a > 0, a, 0.0), hnp.clip(a, -0.5, 0.5), hnp.clip(i, 0),
                         a > 0.25, hnp.where(i, 1, 2)),
           lambda a, i: (np.where(a > 0, a, 0.0), np.clip(a, -0.5, 0.5), np.clip(i, 0, None),
                         a > 0.25, np.where(i, 1, 2).astype(np.int32)), A, N)


REDUCTIONS = ["sum", "mean", "max", "min", "prod", "argmax", "argmin", "all", "any"]


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("axis, keepdims", [(None, False), (0, False), (1, True), (-1, False),
                                            ((0, 1), True)])
def test_reductions(name: str, axis: Any, keepdims: bool) -> None:
    if name.startswith("arg") and isinstance(axis, tuple):
        pytest.skip("NumPy's argmax takes one axis")
    x = A > 0 if name in ("all", "any") else A
    _check(lambda a: getattr(hnp, name)(a, axis=axis, keepdims=keepdims),
           lambda a: getattr(np, name)(a, axis=axis, keepdims=keepdims), x, rtol=1e-5)


def test_reduction_types_follow_jax() -> None:
    out = hlofuse.jit(lambda b, i8, u8, i: (hnp.sum(b), hnp.sum(i8), hnp.sum(u8), hnp.mean(i),
                                          hnp.argmax(i)))(
        BOOL, N.astype(np.int8), J.astype(np.uint8), N)
    assert [o.dtype for o in out] == [np.int32, np.int32, np.uint32, np.float32, np.int32]
    assert out[0] == BOOL.sum() and out[3] == pytest.approx(N.mean())


def test_argmax_prefers_the_first_of_ties_and_nans() -> None:
    x = np.array([[1.0, 3.0, 3.0], [np.nan, 2.0, np.nan]], np.float32)
    _check(lambda a: (hnp.argmax(a, axis=1), hnp.argmin(a, axis=1)),
           lambda a: (np.argmax(a, axis=1), np.argmin(a, axis=1)), x)


def test_products() -> None:
    v = A[0]
    batch = np.random.default_rng(130).standard_normal((2, 3, 4)).astype(np.float32)
    _check(lambda a, v, b: (hnp.dot(a, v), hnp.dot(v, v), hnp.matmul(b, a.T), v @ a.T,
                            a.T @ a[:, 0], hnp.vdot(a, a)),
           lambda a, v, b: (np.dot(a, v), np.dot(v, v), np.matmul(b, a.T), v @ a.T, a.T @ a[:, 0],
                            np.vdot(a, a)), A, v, batch, rtol=1e-5)


def test_shape_functions() -> None:
    _check(lambda a: (hnp.reshape(a, (4, -1)), a.reshape(2, 6), a.T, hnp.transpose(a, (1, 0)),
                      hnp.expand_dims(a, (0, 2)), hnp.squeeze(a[None, :, None, :]),
                      hnp.broadcast_to(a[0], (5, 4)), hnp.ravel(a), a.flatten(),
                      hnp.concatenate([a, a * 2], axis=1), hnp.stack([a, a], axis=-1),
                      *hnp.split(a, 2, axis=1), *hnp.split(a, [1, 2])),
           lambda a: (np.reshape(a, (4, -1)), a.reshape(2, 6), a.T, np.transpose(a, (1, 0)),
                      np.expand_dims(a, (0, 2)), np.squeeze(a[None, :, None, :]),
                      np.broadcast_to(a[0], (5, 4)), np.ravel(a), a.flatten(),
                      np.concatenate([a, a * 2], axis=1), np.stack([a, a], axis=-1),
                      *np.split(a, 2, axis=1), *np.split(a, [1, 2])), A)


def test_creation_functions() -> None:
    _check(lambda a: (hnp.zeros((2, 3)), hnp.ones(4, hnp.int32), hnp.full((2,), 7),
                      hnp.full((2, 2), 1.5, hnp.float16), hnp.arange(5), hnp.arange(2, 9, 3),
                      hnp.arange(3.0), hnp.zeros_like(a), hnp.ones_like(a, dtype=hnp.uint8),
                      hnp.full_like(a, 3), hnp.asarray([[1, 2], [3, 4]]), a.astype(hnp.int32)),
           lambda a: (np.zeros((2, 3), np.float32), np.ones(4, np.int32),
                      np.full((2,), 7, np.int32), np.full((2, 2), 1.5, np.float16),
                      np.arange(5, dtype=np.int32), np.arange(2, 9, 3, dtype=np.int32),
                      np.arange(3.0, dtype=np.float32), np.zeros_like(a),
                      np.ones_like(a, dtype=np.uint8), np.full_like(a, 3),
                      np.array([[1, 2], [3, 4]], np.int32), a.astype(np.int32)), A)


INDICES = [0, -1, (slice(None), 0), slice(1, 3), (slice(None, None, 2),), (None, 1),
           (Ellipsis, 2), (1, Ellipsis, None), (slice(None, None, -1), slice(3, 0, -2)),
           (slice(5, 9),), ()]


@pytest.mark.parametrize("index", INDICES, ids=[repr(i) for i in INDICES])
def test_basic_indexing(index: Any) -> None:
    _check(lambda a: a[index], lambda a: a[index], A)


def test_traced_integer_indices_wrap_and_clamp() -> None:
    fn = hlofuse.jit(lambda a, i: (a[i], a[:, i]))
    for i in (0, 2, -1, -3):
        row, col = fn(A, np.int32(i))
        np.testing.assert_array_equal(row, A[i])
        np.testing.assert_array_equal(col, A[:, i])
    row, _ = fn(A, np.int32(7))  # out of range: clamped, as XLA's dynamic-slice does
    np.testing.assert_array_equal(row, A[-1])


UPDATES = [(1, "set"), ((slice(None), 2), "add"), ((slice(None, None, 2), slice(1, 4, 2)), "set"),
           ((slice(None, None, -1), 0), "multiply"), ((0, slice(1, 3)), "max"), (-1, "min")]


@pytest.mark.parametrize("index, mode", UPDATES, ids=[f"{m}{i!r}" for i, m in UPDATES])
def test_at_updates(index: Any, mode: str) -> None:
    def reference(a: np.ndarray, v: np.ndarray) -> np.ndarray:
        out = a.copy()
        region = out[index]
        value = np.broadcast_to(v[: region.shape[-1]] if region.ndim else v[0], region.shape)
        ops = {"set": lambda r, w: w, "add": np.add, "multiply": np.multiply,
               "max": np.maximum, "min": np.minimum}
        out[index] = ops[mode](region, value)
        return out

    v = np.arange(1, 5, dtype=np.float32)
    got = hlofuse.jit(lambda a, v: getattr(a.at[index], mode)(
        v[: a[index].shape[-1]] if a[index].ndim else v[0]))(A, v)
    np.testing.assert_allclose(got, reference(A, v), rtol=1e-6)


def test_at_with_a_traced_index() -> None:
    got = hlofuse.jit(lambda a, i: (a.at[i].set(0.0), a.at[i, 1].add(10.0), a.at[i].get()))(
        A, np.int32(-2))
    want = A.copy()
    want[-2] = 0
    np.testing.assert_array_equal(got[0], want)
    want = A.copy()
    want[-2, 1] += 10
    np.testing.assert_allclose(got[1], want)
    np.testing.assert_array_equal(got[2], A[-2])


def test_functions_run_eagerly_outside_jit() -> None:
    np.testing.assert_allclose(hnp.sin(A), np.sin(A), rtol=2e-6)
    np.testing.assert_array_equal(hnp.arange(4), np.arange(4))
    assert hnp.sum(N).dtype == np.int32 and hnp.sum(N) == N.sum()
