"""JAX's indexing idioms in the front end: x[idx], x.at[idx].set/add/..., take,
take_along_axis, sort and argsort trace to gather, scatter and sort, and give NumPy's values
(JAX's rules out of range: reads clamp, updates are dropped)."""

from __future__ import annotations

import numpy as np
import pytest

import hlofuse
import hlofuse.numpy as hnp

RNG = np.random.default_rng(12)
X = RNG.standard_normal((5, 7)).astype(np.float32)
IDX = np.array([0, 4, -1, 2, 2], np.int32)
J = np.array([[6, 0], [3, 1]], np.int32)


def interpreted(fn):  # type: ignore[no-untyped-def]
    return hlofuse.jit(fn, backend="interpreter")


def test_array_index_reads_are_gathers() -> None:
    f = interpreted(lambda x, i, j: (x[i], x[:, j], x[..., i], hnp.take(x, j, axis=1),
                                     hnp.take(x, i)))
    out = f(X, IDX, J)
    np.testing.assert_array_equal(out[0], X[IDX])
    np.testing.assert_array_equal(out[1], X[:, J])
    np.testing.assert_array_equal(out[2], X[..., IDX])
    np.testing.assert_array_equal(out[3], np.take(X, J, axis=1))
    np.testing.assert_array_equal(out[4], np.take(X, IDX))
    assert " gather(" in f.lower(X, IDX, J).as_text()


def test_out_of_range_reads_clamp_and_updates_drop() -> None:
    far = np.array([9, -9], np.int32)  # -9 wraps to -2, still out of range: clamped to 0
    f = interpreted(lambda x, i: (x[i], x.at[i].set(100.0)))
    read, written = f(X, far)
    np.testing.assert_array_equal(read, X[[4, 0]])
    np.testing.assert_array_equal(written, X)


def test_array_index_updates_are_scatters() -> None:
    f = interpreted(lambda x, i, j: (x.at[i].set(1.0), x.at[:, j].add(2.0),
                                     x.at[i].max(x[0:5]), x.at[i].multiply(-1.0)))
    set_, add, max_, mul = f(X, IDX, J)
    expected = X.copy()
    expected[IDX] = 1.0
    np.testing.assert_array_equal(set_, expected)
    expected = X.copy()
    np.add.at(expected, (slice(None), J), 2.0)  # repeated indices accumulate
    np.testing.assert_allclose(add, expected)
    expected = X.copy()
    np.maximum.at(expected, IDX, X[0:5])
    np.testing.assert_array_equal(max_, expected)
    expected = X.copy()
    np.multiply.at(expected, IDX, -1.0)
    np.testing.assert_array_equal(mul, expected)


def test_take_along_axis_sort_and_argsort() -> None:
    x = X.copy()
    x[1, 3] = np.nan  # sorts last, as in JAX
    f = interpreted(lambda x: (hnp.take_along_axis(x, hnp.argsort(x, axis=1), axis=1),
                               hnp.sort(x, axis=0), hnp.argsort(x, axis=0), hnp.sort(x[0])))
    along, sorted0, order0, row = f(x)
    np.testing.assert_array_equal(along, np.sort(x, axis=1))
    np.testing.assert_array_equal(sorted0, np.sort(x, axis=0))
    np.testing.assert_array_equal(order0, np.argsort(x, axis=0, kind="stable"))
    np.testing.assert_array_equal(row, np.sort(x[0]))


def test_eager_calls_outside_jit() -> None:
    np.testing.assert_array_equal(hnp.take(X, J, axis=1), np.take(X, J, axis=1))
    np.testing.assert_array_equal(hnp.argsort(IDX), np.argsort(IDX, kind="stable"))


def test_two_index_arrays_are_refused_with_a_hint() -> None:
    with pytest.raises(NotImplementedError, match="one integer array among full slices"):
        interpreted(lambda x, i: x[i, i])(X, IDX)


def test_compiled_backend_emits_gather_and_sort() -> None:
    def f(x, i):  # type: ignore[no-untyped-def]
        return hnp.sort(x[i])

    compiled = hlofuse.jit(f, backend="cpu")(X, IDX)
    np.testing.assert_array_equal(np.asarray(compiled), np.asarray(interpreted(f)(X, IDX)))
