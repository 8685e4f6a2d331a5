"""jit: caching per signature, static arguments, pytrees, lowering and compiled objects."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
import pytest

import hlofuse
import hlofuse.numpy as hnp
from hlofuse.api import Compiled, compile_module
from hlofuse.ir.parser import parse_module

Params = namedtuple("Params", ["w", "b"])
X = np.arange(6, dtype=np.float32).reshape(2, 3)


def test_jit_traces_once_per_signature() -> None:
    calls = []

    def f(x: Any, y: Any) -> Any:
        calls.append(1)
        return x * y

    fn = hlofuse.jit(f)
    fn(X, 2.0)
    fn(X + 1, 3.0)  # same shapes and types: cached
    assert len(calls) == 1 and fn.cache_size == 1
    fn(X, 2)  # a weak int instead of a weak float
    fn(X[0], 2.0)  # another shape
    fn(X.astype(np.int32), 2)  # another dtype
    assert len(calls) == 4 and fn.cache_size == 4


def test_static_arguments_by_position_and_name() -> None:
    def f(x: Any, n: int, *, scale: float = 1.0) -> Any:
        for _ in range(n):  # Python control flow on a static value is fine
            x = x * scale
        return x

    fn = hlofuse.jit(f, static_argnums=1, static_argnames="scale")
    np.testing.assert_allclose(fn(X, 3, scale=2.0), X * 8)
    np.testing.assert_allclose(fn(X, 1, scale=2.0), X * 2)
    np.testing.assert_allclose(fn(X, 3, scale=2.0), X * 8)
    assert fn.cache_size == 2
    by_name = hlofuse.jit(f, static_argnames=("n", "scale"))
    np.testing.assert_allclose(by_name(X, n=2, scale=3.0), X * 9)


def test_pytrees_in_and_out() -> None:
    def f(params: Params, batch: dict[str, Any]) -> Any:
        y = batch["x"] @ params.w + params.b
        return {"y": y, "stats": [hnp.mean(y), hnp.max(y)], "none": None,
                "out": Params(w=params.w.T, b=params.b * 0)}

    params = Params(w=np.ones((3, 2), np.float32), b=np.array([1.0, -1.0], np.float32))
    out = hlofuse.jit(f)(params, {"x": X})
    expected = X @ params.w + params.b
    np.testing.assert_allclose(out["y"], expected)
    assert isinstance(out["stats"], list) and out["none"] is None
    assert out["stats"][1] == expected.max()
    assert isinstance(out["out"], Params) and out["out"].w.shape == (2, 3)


def test_keyword_arguments_are_traced_too() -> None:
    fn = hlofuse.jit(lambda x, *, shift: x + shift)
    np.testing.assert_allclose(fn(X, shift=np.float32(1.5)), X + 1.5)


def test_outputs_are_fresh_arrays() -> None:
    x = X.copy()
    out = hlofuse.jit(lambda a: a)(x)
    out[0, 0] = 100.0
    assert x[0, 0] == 0.0


def test_constant_outputs_and_python_scalar_inputs() -> None:
    out = hlofuse.jit(lambda x, s: (3, x * s, s))(X, True)
    assert out[0] == 3 and out[0].dtype == np.int32
    assert out[2].dtype == np.bool_ and out[1].dtype == np.float32


def test_lower_as_text_and_compile() -> None:
    fn = hlofuse.jit(lambda x, n: hnp.sum(x) * n, static_argnums=1)
    lowered = fn.lower(X, 4)
    text = lowered.as_text()
    assert text.startswith("HloModule jit__lambda_, entry_computation_layout={(f32[2,3]{1,0})")
    assert parse_module(text) is not None
    compiled = lowered.compile()
    assert isinstance(compiled, Compiled)
    assert compiled.strategy == "xla" and compiled.backend == "cpu"
    assert compiled(X) == pytest.approx(X.sum() * 4)  # dynamic arguments only
    assert compiled.hlo() == text and compiled.module is lowered.module
    with pytest.raises(TypeError, match="compiled for arguments"):
        compiled(X[0])


def test_compile_module_runs_parsed_hlo() -> None:
    module = parse_module("""
HloModule m
ENTRY main {
  a = f32[3] parameter(0)
  b = f32[3] parameter(1)
  s = f32[3] add(a, b)
  ROOT t = (f32[3], f32[3]) tuple(s, a)
}
""")
    compiled = compile_module(module, strategy="none")
    total, first = compiled(np.ones(3, np.float32), np.full(3, 2, np.float32))
    np.testing.assert_array_equal(total, [3, 3, 3])
    np.testing.assert_array_equal(first, [1, 1, 1])


def test_decorator_forms_and_nesting() -> None:
    @hlofuse.jit
    def inner(x: Any) -> Any:
        return hnp.exp(x)

    @hlofuse.jit(strategy="none")
    def outer(x: Any) -> Any:
        return inner(x) + 1.0  # nested jit is inlined into the outer trace

    np.testing.assert_allclose(outer(X), np.exp(X) + 1, rtol=1e-6)
    assert outer.strategy == "none"
    assert "exponential" in outer.lower(X).as_text()
    assert hlofuse.jit(inner).__name__ == "inner"
