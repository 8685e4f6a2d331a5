"""Running front-end functions outside `jit`: each call is traced and evaluated on its own.

`hnp.sin(np.ones(3))` outside a jitted function works as in JAX: the call is traced into a
one-off module whose parameters are the NumPy array arguments (everything else is fixed) and
evaluated by the reference interpreter. It is slow; jit is the way to run programs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from hlofuse.frontend import pytree
from hlofuse.frontend.dtype_rules import AbstractValue, to_dtype
from hlofuse.frontend.staging import trace_module
from hlofuse.frontend.tracing import is_tracing

F = TypeVar("F", bound=Callable[..., Any])


def eager(fn: F) -> F:
    """Trace `fn` into the current trace, or run it on the spot when nothing is traced."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if is_tracing():
            return fn(*args, **kwargs)
        return run_eagerly(fn, args, kwargs)

    return wrapper  # type: ignore[return-value]


def run_eagerly(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # The interpreter is the reference evaluator one layer up; imported here only, so tracing
    # itself never depends on it.
    from hlofuse.reference.interpreter import evaluate, flatten_value

    leaves, treedef = pytree.flatten((args, kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, np.ndarray | np.generic)]
    arrays = [np.asarray(leaves[i]) for i in positions]
    avals = [AbstractValue(a.shape, to_dtype(a.dtype)) for a in arrays]
    arrays = [a.astype(v.dtype.numpy, copy=False) for a, v in zip(arrays, avals)]

    def call(*dynamic: Any) -> Any:
        full = list(leaves)
        for i, value in zip(positions, dynamic):
            full[i] = value
        call_args, call_kwargs = treedef.unflatten(full)
        return fn(*call_args, **call_kwargs)

    in_tree = pytree.flatten((tuple(arrays), {}))[1]
    traced = trace_module(call, in_tree, avals, fn.__name__)
    outputs = flatten_value(evaluate(traced.module, arrays))
    return traced.out_tree.unflatten(outputs)
