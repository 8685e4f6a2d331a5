"""while_loop, fori_loop, scan, cond, switch and select, against plain Python loops."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
import pytest

import hlofuse
import hlofuse.numpy as hnp
from hlofuse import lax

X = np.array([0.5, -1.0, 2.0], np.float32)
XS = np.arange(12, dtype=np.float32).reshape(6, 2)
Carry = namedtuple("Carry", ["total", "count"])


def test_while_loop_with_a_pytree_carry() -> None:
    def f(x: Any) -> Any:
        return lax.while_loop(lambda c: c.count < 5,
                              lambda c: Carry(c.total * 2.0 + x, c.count + 1),
                              Carry(x, 0))

    out = hlofuse.jit(f)(X)
    assert isinstance(out, Carry)
    expected = X.copy()
    for _ in range(5):
        expected = expected * 2 + X
    np.testing.assert_allclose(out.total, expected)
    assert out.count == 5 and out.count.dtype == np.int32


def test_fori_loop_static_and_traced_bounds() -> None:
    def f(x: Any, n: Any) -> Any:
        static = lax.fori_loop(2, 7, lambda i, c: c + i * x, hnp.zeros_like(x))
        traced = lax.fori_loop(0, n, lambda i, c: c + i * x, hnp.zeros_like(x))
        unrolled = lax.fori_loop(2, 7, lambda i, c: c + i * x, hnp.zeros_like(x), unroll=2)
        return static, traced, unrolled

    static, traced, unrolled = hlofuse.jit(f)(X, np.int32(4))
    np.testing.assert_allclose(static, 20 * X)
    np.testing.assert_allclose(traced, 6 * X)
    np.testing.assert_allclose(unrolled, 20 * X)


@pytest.mark.parametrize("unroll", [1, 2, 4, 6, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_matches_a_python_loop(unroll: Any, reverse: bool) -> None:
    def f(xs: Any, x0: Any) -> Any:
        def step(c: Any, x: Any) -> Any:
            new = c * 0.5 + x["a"] * x["b"]
            return new, {"sum": hnp.sum(new), "x": x["a"]}

        return lax.scan(step, x0, {"a": xs, "b": xs + 1.0}, reverse=reverse, unroll=unroll)

    carry, ys = hlofuse.jit(f)(XS, np.ones(2, np.float32))
    c = np.ones(2, np.float32)
    sums, xs_seen = [None] * 6, [None] * 6
    for t in (reversed(range(6)) if reverse else range(6)):
        c = c * 0.5 + XS[t] * (XS[t] + 1)
        sums[t], xs_seen[t] = c.sum(), XS[t]
    np.testing.assert_allclose(carry, c, rtol=1e-6)
    np.testing.assert_allclose(ys["sum"], np.array(sums), rtol=1e-6)
    np.testing.assert_array_equal(ys["x"], np.array(xs_seen))


def test_scan_with_length_only_and_no_outputs() -> None:
    out = hlofuse.jit(lambda x: lax.scan(lambda c, _: (c + 1, None), x, length=5, unroll=3))(X)
    carry, ys = out
    np.testing.assert_allclose(carry, X + 5)
    assert ys is None


def test_weak_carry_widens_as_in_jax() -> None:
    # The initial 0 is a weak int; the body makes it float32, so the carry becomes float32.
    out = hlofuse.jit(lambda x: lax.fori_loop(0, 3, lambda i, c: c + x[0], 0))(X)
    assert out.dtype == np.float32 and out == pytest.approx(1.5)


def test_nested_loops_capture_outer_values() -> None:
    def f(x: Any, y: Any) -> Any:
        def outer(i: Any, acc: Any) -> Any:
            inner = lax.fori_loop(0, 3, lambda j, a: a + y * j, acc)  # y: two levels up
            return inner + x * i
        return lax.fori_loop(0, 4, outer, hnp.zeros_like(x))

    out = hlofuse.jit(f)(X, np.float32(2.0))
    np.testing.assert_allclose(out, 4 * 3 * 2.0 + 6 * X)


def test_cond_and_switch() -> None:
    def f(p: Any, i: Any, x: Any) -> Any:
        a = lax.cond(p, lambda v: v + 1.0, lambda v: v * 2.0, x)
        b = lax.cond(x[0] > 0, lambda: x.sum(), lambda: -x.sum())  # no operands, closures
        c = lax.switch(i, [lambda v: v, lambda v: v + 10.0, lambda v: -v], x)
        return a, b, c

    fn = hlofuse.jit(f)
    a, b, c = fn(np.bool_(True), np.int32(1), X)
    np.testing.assert_allclose(a, X + 1)
    assert b == pytest.approx(X.sum())
    np.testing.assert_allclose(c, X + 10)
    a, _, c = fn(np.bool_(False), np.int32(7), X)  # an out-of-range index is clamped
    np.testing.assert_allclose(a, X * 2)
    np.testing.assert_allclose(c, -X)
    _, _, c = fn(np.bool_(False), np.int32(-4), X)
    np.testing.assert_allclose(c, X)


def test_select_is_strict_but_exact() -> None:
    out = hlofuse.jit(lambda p, a, b: lax.select(p, a, b))(X > 0, X, -X)
    np.testing.assert_array_equal(out, np.abs(X))
    with pytest.raises(TypeError, match="same shape and type"):
        hlofuse.jit(lambda a: lax.select(a > 0, a, a.astype(hnp.int32)))(X)


def test_loop_body_errors_name_the_problem() -> None:
    with pytest.raises(TypeError, match="carry has shape"):
        hlofuse.jit(lambda x: lax.while_loop(lambda c: c[0] < 1, lambda c: c[:2], x))(X)
    with pytest.raises(TypeError, match="boolean scalar"):
        hlofuse.jit(lambda x: lax.while_loop(lambda c: c, lambda c: c, x))(X)
    with pytest.raises(TypeError, match="structure"):
        hlofuse.jit(lambda x: lax.while_loop(lambda c: c[0][0] < 1, lambda c: c[0], (x, x)))(X)
    with pytest.raises(TypeError, match="pair"):
        hlofuse.jit(lambda x: lax.scan(lambda c, _: c, x, length=2))(X)
    with pytest.raises(TypeError, match="differ in type"):
        hlofuse.jit(lambda x: lax.cond(True, lambda: x, lambda: x.astype(hnp.int32)))(X)
