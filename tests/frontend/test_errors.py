"""Bad input: clear errors that name the operation, the shapes or types, and the user's line."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import hlofuse
import hlofuse.numpy as hnp
from hlofuse.frontend.tracing import (
    TracerArrayConversionError,
    TracerBoolConversionError,
    TracerIntegerConversionError,
    UnexpectedTracerError,
)

X3 = np.ones(3, np.float32)
X4 = np.ones(4, np.float32)


def test_shape_mismatch_names_op_shapes_and_line() -> None:
    def f(x: Any, y: Any) -> Any:
        return x + y

    line = f"{__file__}:{f.__code__.co_firstlineno + 1}"
    with pytest.raises(ValueError) as info:
        hlofuse.jit(f)(X3, X4)
    message = str(info.value)
    assert "hnp.add" in message and "(3,)" in message and "(4,)" in message
    assert message.endswith(f"(at {line})")


@pytest.mark.parametrize("fn, pattern", [
    (lambda x: hnp.matmul(x, x[:2]), r"hnp.matmul: shapes \(3,\) and \(2,\) do not align"),
    (lambda x: hnp.reshape(x, (2, 2)), r"cannot reshape \(3,\)"),
    (lambda x: hnp.concatenate([x, x[None]]), r"hnp.concatenate: shapes \(3,\) and \(1, 3\)"),
    (lambda x: hnp.squeeze(x), None),
    (lambda x: hnp.sum(x, axis=2), r"axis 2 is out of bounds"),
    (lambda x: x[5], r"index 5 is out of bounds for axis 0 with size 3"),
    (lambda x: x[0, 0], r"too many indices"),
    (lambda x: x.at[1:].set(X4), r"does not fit the indexed region"),
    (lambda x: hnp.broadcast_to(x, (2, 4)), r"cannot be broadcast"),
])
def test_shape_errors(fn: Any, pattern: str | None) -> None:
    if pattern is None:  # squeezing a (3,) array keeps it
        assert hlofuse.jit(fn)(X3).shape == (3,)
        return
    with pytest.raises((ValueError, IndexError), match=pattern) as info:
        hlofuse.jit(fn)(X3)
    assert f"(at {__file__}:" in str(info.value)


@pytest.mark.parametrize("fn, pattern", [
    (lambda x: x & 1, r"hnp.bitwise_and does not accept float32"),
    (lambda x: x << 2, r"hnp.left_shift does not accept float32"),
    (lambda x: -(x > 0), r"hnp.negative does not accept bool"),
    (lambda x: (x > 0) - (x < 0), r"hnp.subtract does not accept boolean"),
    (lambda x: x + "a", r"expected an array or a number, got str"),
    (lambda x: x + [1, 2, 3], r"convert it with hnp.asarray"),
    (lambda x: x.astype("U3"), r"'U3' is not a supported dtype"),
])
def test_type_errors(fn: Any, pattern: str) -> None:
    with pytest.raises(TypeError, match=pattern) as info:
        hlofuse.jit(fn)(X3)
    assert "(at " in str(info.value)


def test_python_control_flow_on_traced_values_explains() -> None:
    def branchy(x: Any) -> Any:
        if x[0] > 0:  # not allowed while tracing
            return x
        return -x

    with pytest.raises(TracerBoolConversionError) as info:
        hlofuse.jit(branchy)(X3)
    message = str(info.value)
    assert "hlofuse.lax.cond" in message and "hnp.where" in message
    assert f"{__file__}:{branchy.__code__.co_firstlineno + 1}" in message
    with pytest.raises(TypeError, match="static_argnums"):
        hlofuse.jit(lambda x: int(x[0]))(X3)
    with pytest.raises(TracerIntegerConversionError):
        hlofuse.jit(lambda x: range(x[0]))(X3)
    with pytest.raises(TracerBoolConversionError):
        hlofuse.jit(lambda x: bool(x.sum()))(X3)


def test_numpy_on_traced_values_points_to_hnp() -> None:
    with pytest.raises(TracerArrayConversionError, match="hlofuse.numpy"):
        hlofuse.jit(lambda x: np.asarray(x))(X3)
    with pytest.raises(TracerArrayConversionError, match="hlofuse.numpy has no cumsum"):
        hlofuse.jit(lambda x: np.cumsum(x))(X3)
    with pytest.raises(TracerArrayConversionError, match="numpy.add.reduce"):
        hlofuse.jit(lambda x: np.add.reduce(x))(X3)


def test_numpy_ufuncs_and_scalars_on_traced_values_use_hnp() -> None:
    out = hlofuse.jit(lambda x: (np.sin(x), np.float32(2) * x, np.int32(1) + x,
                                 x < np.float32(0), np.sum(x, axis=0)))(X3)
    np.testing.assert_allclose(out[0], np.sin(X3))
    assert out[4] == 3
    np.testing.assert_array_equal(out[1], 2 * X3)
    assert out[2].dtype == np.float32 and out[3].dtype == np.bool_


def test_unsupported_functions_are_named() -> None:
    with pytest.raises(NotImplementedError, match=r"hlofuse.numpy.cumsum is not implemented"):
        hlofuse.jit(lambda x: hnp.cumsum(x))(X3)
    with pytest.raises(NotImplementedError, match=r"\.cumsum"):
        hlofuse.jit(lambda x: x.cumsum())(X3)
    with pytest.raises(NotImplementedError, match="advanced indexing"):
        hlofuse.jit(lambda x: x[np.array([0, 2]), np.array([1, 0])])(X3)
    with pytest.raises(AttributeError):
        hnp.not_a_numpy_function  # noqa: B018


def test_non_array_arguments_need_static() -> None:
    def f(x: Any, mode: Any) -> Any:
        return x * 2

    with pytest.raises(TypeError) as info:
        hlofuse.jit(f)(X3, "double")
    message = str(info.value)
    assert "argument 1 (mode) is a str, not an array" in message
    assert "static_argnums=(1,)" in message and f"(at {__file__}:" in message
    assert hlofuse.jit(f, static_argnums=1)(X3, "double").shape == (3,)
    with pytest.raises(TypeError, match="static_argnames=\\('mode',\\)"):
        hlofuse.jit(f)(X3, mode=object())
    with pytest.raises(TypeError, match="must be hashable"):
        hlofuse.jit(f, static_argnames="mode")(X3, mode=np.ones(2))


def test_escaped_tracers_are_reported() -> None:
    leaked = []

    def f(x: Any) -> Any:
        leaked.append(x * 2)
        return x

    hlofuse.jit(f)(X3)
    with pytest.raises(UnexpectedTracerError, match="return them as outputs"):
        hlofuse.jit(lambda y: y + leaked[0])(X3)


def test_jit_options_are_validated() -> None:
    with pytest.raises(ValueError, match="backend must be one of"):
        hlofuse.jit(lambda x: x, backend="no-such-backend")
    with pytest.raises(ValueError, match="strategy must be a name"):
        hlofuse.jit(lambda x: x, strategy="")
    with pytest.raises(TypeError, match="jit needs a function"):
        hlofuse.jit(3)  # type: ignore[arg-type]


def test_error_messages_are_single_located_sentences() -> None:
    with pytest.raises(ValueError) as info:
        hlofuse.jit(lambda x: x + X4)(X3)
    assert re.search(r"\(at .+:\d+\)$", str(info.value))
    assert "\n" not in str(info.value)


def test_a_failed_trace_leaves_no_trace_behind() -> None:
    from hlofuse import lax
    from hlofuse.frontend.tracing import is_tracing

    with pytest.raises(ValueError):
        hlofuse.jit(lambda x: lax.fori_loop(0, 2, lambda i, c: c + X4, x))(X3)
    assert not is_tracing()
    np.testing.assert_array_equal(hlofuse.jit(lambda x: x * 2)(X3), 2 * X3)
