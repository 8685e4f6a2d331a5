"""`from_jax`: run a JAX function on hlofuse, lowered by JAX and compiled by hlofuse.

Per argument signature (pytree structure, shapes, dtypes, weak types and static values) the
function is lowered with `jax.jit(fn, ...).lower(*args)`, its HLO text is parsed by hlofuse's
parser and compiled through `compile_module`, the path `hlofuse.jit` takes. JAX only traces
and lowers here: nothing runs on XLA. JAX is an optional extra (`pip install 'hlofuse[jax]'`)
and is imported on first use.

JAX lowers with its global configuration (x64 off by default: float64 inputs become float32
parameters, as they would under `jax.jit`); inputs are converted to the parameter's type as
JAX converts them. Unused arguments are kept (`keep_unused=True`) so that parameters and
argument leaves correspond one to one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hlofuse.api import (
    DEFAULT_STRATEGY,
    Compiled,
    check_backend,
    check_strategy,
    compile_module,
    default_backend,
)
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.runtime.profile import Profile

JAX_EXTRA = "pip install 'hlofuse[jax]'"


class JaxNotInstalledError(ImportError):
    """from_jax was used where JAX cannot be imported."""


def _jax() -> Any:
    try:
        import jax
    except ImportError as e:
        raise JaxNotInstalledError(
            f"hlofuse.from_jax needs JAX, which is not installed ({e}); install the 'jax' "
            f"extra: {JAX_EXTRA}") from None
    return jax


class JaxLowered:
    """One argument signature of a `from_jax` function: JAX's HLO text and hlofuse's module."""

    def __init__(self, text: str, module: Module, out_tree: Any, strategy: str,
                 backend: str) -> None:
        self.text = text
        self.module = module
        self.out_tree = out_tree
        self.strategy = strategy
        self.backend = backend

    def as_text(self) -> str:
        """The HLO text JAX lowered (with its debug-info tables)."""
        return self.text

    def compile(self) -> Compiled:
        return compile_module(self.module, self.strategy, self.backend)


class JaxFunction:
    """A JAX function compiled by hlofuse once per argument signature (see `from_jax`)."""

    def __init__(self, fn: Callable[..., Any], strategy: str, backend: str | None,
                 static_argnums: int | Sequence[int], static_argnames: str | Sequence[str]):
        if not callable(fn):
            raise TypeError(f"from_jax needs a function, got {type(fn).__name__}")
        self.fn = fn
        self.strategy = check_strategy(strategy)
        self.backend = check_backend(backend if backend is not None else default_backend())
        self.name = getattr(fn, "__name__", "fn")
        self.static_argnums = ((static_argnums,) if isinstance(static_argnums, int)
                               else tuple(static_argnums))
        self.static_argnames = ((static_argnames,) if isinstance(static_argnames, str)
                                else tuple(static_argnames))
        self._jitted: Any = None
        self._cache: dict[Any, tuple[JaxLowered, Compiled]] = {}
        functools.update_wrapper(self, fn, updated=())

    def _jit(self) -> Any:
        if self._jitted is None:
            jax = _jax()
            self._jitted = jax.jit(self.fn, static_argnums=self.static_argnums,
                                   static_argnames=self.static_argnames, keep_unused=True)
        return self._jitted

    def _static_positions(self, n_args: int) -> set[int]:
        return {i % n_args if i < 0 else i for i in self.static_argnums if -n_args <= i < n_args}

    def _split(self, args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> tuple[list[Any], Any, tuple[Any, ...]]:
        """(dynamic leaves in parameter order, their tree, hashable static values)."""
        jax = _jax()
        static_pos = self._static_positions(len(args))
        statics: list[Any] = []
        for i in sorted(static_pos):
            statics.append(("#", i, self._hashable(args[i], f"#{i}")))
        for key in sorted(kwargs):
            if key in self.static_argnames:
                statics.append(("=", key, self._hashable(kwargs[key], key)))
        dyn_args = tuple(a for i, a in enumerate(args) if i not in static_pos)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        leaves, tree = jax.tree_util.tree_flatten((dyn_args, dyn_kwargs))
        return leaves, tree, tuple(statics)

    def _hashable(self, value: Any, where: str) -> Any:
        try:
            hash(value)
        except TypeError:
            raise TypeError(f"from_jax({self.name}): static argument {where} must be hashable, "
                            f"got {type(value).__name__}") from None
        return value

    def _signature(self, leaves: list[Any]) -> tuple[Any, ...]:
        """Each leaf's shape, dtype and weak type, as JAX tells signatures apart."""
        out: list[tuple[object, ...]] = []
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, bool | int | float | complex) and not isinstance(leaf,
                                                                                 np.generic):
                out.append(("weak", type(leaf).__name__))
                continue
            try:
                array = leaf if hasattr(leaf, "shape") and hasattr(leaf, "dtype") \
                    else np.asarray(leaf)
            except Exception:  # noqa: BLE001 - anything np.asarray refuses
                array = None
            if array is None or np.dtype(getattr(array, "dtype", object)).kind in "OSUV":
                raise TypeError(f"from_jax({self.name}): argument leaf {i} is a "
                                f"{type(leaf).__name__}, not an array; pass an array or mark "
                                "the argument static")
            out.append((tuple(array.shape), str(array.dtype),
                        bool(getattr(array, "weak_type", False))))
        return tuple(out)

    def _lowered(self, args: tuple[Any, ...], kwargs: dict[str, Any]
                 ) -> tuple[JaxLowered, Compiled, list[Any]]:
        leaves, tree, statics = self._split(args, kwargs)
        key = (tree, self._signature(leaves), statics)
        found = self._cache.get(key)
        if found is None:
            lowered = self._jit().lower(*args, **kwargs)
            text = lowered.as_text(dialect="hlo", debug_info=True)
            module = parse_module(text, f"<from_jax({self.name})>")
            jax_lowered = JaxLowered(text, module, lowered.out_tree, self.strategy,
                                     self.backend)
            found = (jax_lowered, jax_lowered.compile())
            self._cache[key] = found
        return found[0], found[1], leaves

    def _arrays(self, module: Module, leaves: list[Any]) -> list[np.ndarray]:
        params = module.entry.parameters
        if len(params) != len(leaves):
            raise TypeError(f"from_jax({self.name}): JAX lowered {len(params)} parameters for "
                            f"{len(leaves)} argument leaves (tokens or effects are not "
                            "supported)")
        arrays = []
        for leaf, param in zip(leaves, params):
            array = np.asarray(leaf)
            want = param.shape.dtype.numpy
            # JAX converts an argument to the lowered type (e.g. float64 -> float32 with x64
            # off); the same conversion here.
            arrays.append(np.asarray(array.astype(want, copy=False), order="C"))
        return arrays

    def lower(self, *args: Any, **kwargs: Any) -> JaxLowered:
        """JAX's lowering for these arguments, parsed (`.as_text()`, `.module`,
        `.compile()`)."""
        return self._lowered(args, kwargs)[0]

    def compiled(self, *args: Any, **kwargs: Any) -> Compiled:
        """The hlofuse program for these arguments (`.explain()`, `.fused_hlo()`,
        `.kernels`, `.graph(path)`, `.source()`)."""
        return self._lowered(args, kwargs)[1]

    def explain(self, *args: Any, as_dict: bool = False, **kwargs: Any) -> str | dict[str, Any]:
        return self.compiled(*args, **kwargs).explain(as_dict=as_dict)

    def fused_hlo(self, *args: Any, **kwargs: Any) -> str:
        return self.compiled(*args, **kwargs).fused_hlo()

    def profile(self, *args: Any, repeat: int = 1, **kwargs: Any) -> Profile:
        lowered, compiled, leaves = self._lowered(args, kwargs)
        return compiled.profile(*self._arrays(lowered.module, leaves), repeat=repeat)

    def graph(self, path: str | Path, *args: Any, **kwargs: Any) -> Path:
        """Write the fusion graph for these arguments (.dot, .svg or .html; see
        `Compiled.graph`)."""
        return self.compiled(*args, **kwargs).graph(path)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        lowered, compiled, leaves = self._lowered(args, kwargs)
        outputs = compiled.run_flat(self._arrays(lowered.module, leaves))
        jax = _jax()
        if any(isinstance(leaf, jax.Array) for leaf in leaves):
            outputs = [jax.numpy.asarray(o) for o in outputs]
        return jax.tree_util.tree_unflatten(lowered.out_tree, outputs)

    @property
    def cache_size(self) -> int:
        return len(self._cache)

    def __repr__(self) -> str:
        return f"<from_jax {self.name} strategy={self.strategy} backend={self.backend}>"


def from_jax(fn: Callable[..., Any] | None = None, *, strategy: str = DEFAULT_STRATEGY,
             backend: str | None = None, static_argnums: int | Sequence[int] = (),
             static_argnames: str | Sequence[str] = ()) -> Any:
    """Run the JAX function `fn` on hlofuse: lowered by JAX per argument signature, fused by
    `strategy` and run on `backend` ("cpu" compiles to C, "interpreter" evaluates).

    Arguments and results are pytrees as under `jax.jit`; results are NumPy arrays, or JAX
    arrays when any argument was one. `static_argnums`/`static_argnames` as in `jax.jit`.
    Usable as `@from_jax` or `@from_jax(strategy=...)`.
    """
    if fn is None:
        return functools.partial(from_jax, strategy=strategy, backend=backend,
                                 static_argnums=static_argnums, static_argnames=static_argnames)
    return JaxFunction(fn, strategy, backend, static_argnums, static_argnames)
