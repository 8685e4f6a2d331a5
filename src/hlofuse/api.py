"""`jit`, `compile_module` and `Compiled`: trace a Python function, compile its module, run it.

Tracing (hlofuse.frontend) and compiling stay apart: `jit` traces with the front end and hands
the module to `compile_module`, the one place where a module becomes something executable.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hlofuse import targets
from hlofuse.compile_cache import cached_executable, strategy_constants
from hlofuse.frontend import pytree
from hlofuse.frontend.dtype_rules import AbstractValue, python_scalar_type, to_dtype
from hlofuse.frontend.staging import TracedModule, trace_module
from hlofuse.frontend.tracer import Tracer
from hlofuse.frontend.tracing import is_tracing, located
from hlofuse.fusion.kernels import Kernel
from hlofuse.fusion.strategies import FusionResult, parse_strategy, run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.limits import check_limits
from hlofuse.ir.printer import module_text
from hlofuse.ir.verifier import verify
from hlofuse.passes.manager import gc_paused
from hlofuse.reference.interpreter import coerce_argument, flatten_value
from hlofuse.runtime.profile import Profile
from hlofuse.runtime.target import Executable, TargetUnavailable

DEFAULT_STRATEGY = "xla"
_STRATEGY_NAME = re.compile(r"^[a-z][a-z0-9_+\-]*$")
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

FlatFn = Callable[[Sequence[np.ndarray]], list[np.ndarray]]


def check_strategy(strategy: object) -> str:
    if not isinstance(strategy, str) or not _STRATEGY_NAME.match(strategy):
        raise ValueError(f"strategy must be a name such as 'xla' or 'none', got {strategy!r}")
    parse_strategy(strategy)  # raises ValueError naming what is wrong
    return strategy


def check_backend(backend: object) -> str:
    if not isinstance(backend, str) or backend not in targets.names():
        raise ValueError(f"backend must be one of {', '.join(targets.names())}, got "
                         f"{backend!r}")
    return backend


_default_backend = os.environ.get("HLOFUSE_BACKEND", "cpu")


def default_backend() -> str:
    """The backend `jit` uses when none is given: "cpu", or $HLOFUSE_BACKEND."""
    return _default_backend


def set_default_backend(backend: str) -> None:
    global _default_backend
    _default_backend = check_backend(backend)


def _executable(compiled: Compiled) -> tuple[FlatFn, Executable | None]:
    """The fused module as a function of flat arrays on the compiled's target (from the
    compiled-program cache when the target keeps programs and it holds this one: then no pass
    runs), and the executable when the target compiles (None for the interpreter)."""
    target = targets.get(compiled.backend)
    reason = target.unavailable()
    if reason is not None:
        raise TargetUnavailable(f"backend {target.name}: {reason}")
    executable = cached_executable(target, compiled.module, compiled.strategy,
                                   compiled.compile_fusion)
    if not target.is_compiled:
        def interpret(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
            return flatten_value(executable(*arrays))  # type: ignore[arg-type]

        return interpret, None

    def run(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        # Kernels index their operands densely; any strided view is copied once here.
        dense = [np.asarray(a, order="C") for a in arrays]
        return flatten_value(executable(*dense))  # type: ignore[arg-type]

    return run, executable


class Compiled:
    """An executable module. With a traced signature it takes the traced function's (dynamic)
    arguments and returns its output pytree; without one, one array per entry parameter and
    the module's result (an array or a tuple)."""

    def __init__(self, module: Module, strategy: str, backend: str,
                 signature: TracedModule | None = None) -> None:
        self.module = module
        self.strategy = strategy
        self.backend = backend
        self.signature = signature
        self._fusion: FusionResult | None = None
        self._unlogged: FusionResult | None = None  # the compile's, without decisions
        with gc_paused():
            self._run, self.executable = _executable(self)

    @property
    def fusion(self) -> FusionResult:
        """The strategy's result with its decision log (run now, logging, when the compile
        ran it without the log or the executable came from the cache)."""
        if self._fusion is None:
            verify(self.module)
            with gc_paused():
                self._fusion = run_strategy(self.module, self.strategy, debug=False,
                                            constants=strategy_constants(self.strategy))
        return self._fusion

    def compile_fusion(self) -> FusionResult:
        """The strategy's fused module for compiling: the same passes, the same decisions,
        none recorded (`fusion` records them when asked, for explain and the graph)."""
        if self._fusion is not None:
            return self._fusion
        if self._unlogged is None:
            verify(self.module)
            with gc_paused():
                self._unlogged = run_strategy(self.module, self.strategy, debug=False,
                                              constants=strategy_constants(self.strategy),
                                              log_decisions=False)
        return self._unlogged

    def kernels_per_iteration(self) -> dict[str, int]:
        """Kernels launched per iteration of each while loop (saved with a cached executable,
        so asking does not run the strategy again)."""
        if self._fusion is None and self.executable is not None:
            saved = self.executable.facts.get("kernels_per_iteration")
            if isinstance(saved, dict):
                return {str(k): int(v) for k, v in saved.items()}
        return self.compile_fusion().kernels_per_iteration()

    def hlo(self) -> str:
        """The module as HLO text, before fusion."""
        return module_text(self.module)

    def fused_hlo(self) -> str:
        """The module after the strategy's passes: fusion instructions as XLA prints them."""
        return module_text(self.compile_fusion().module)

    @property
    def kernels(self) -> list[Kernel]:
        return self.compile_fusion().kernels

    def explain(self, as_dict: bool = False) -> str | dict[str, Any]:
        """The kernels and every blocked fusion edge grouped by rule (see `hlofuse explain`)."""
        return self.fusion.explain_dict() if as_dict else self.fusion.explain()

    def graph(self, path: str | os.PathLike[str], *, collapse: bool | None = None,
              engine: str = "auto") -> Path:
        """Write the fusion graph (kernels as boxes, blocked edges in red with their rule) to
        `path`: .dot, .svg or .html, by its suffix (see hlofuse.visualize). Returns the path."""
        from hlofuse.visualize import write_graph

        return write_graph(self.fusion, os.fspath(path), collapse=collapse, engine=engine)

    def _compiled(self, what: str) -> Executable:
        if self.executable is None:
            raise ValueError(f"{what} needs backend='cpu'; this function runs on the "
                             f"{self.backend} backend")
        return self.executable

    def source(self) -> str:
        """The generated C source."""
        return self._compiled("source()").source()

    def profile(self, *args: Any, repeat: int = 1) -> Profile:
        """Run with per-kernel timing: calls, total and median time, bytes, share of the run."""
        executable = self._compiled("profile()")
        if self.signature is not None:
            arrays, _, _ = canonical_arguments((args, {}), "profiled function")
            return executable.profile(*arrays, repeat=repeat)
        return executable.profile(*args, repeat=repeat)

    def run_flat(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        # Copies, so that an output never aliases an input the caller may change.
        return [np.array(a, copy=True) for a in self._run(arrays)]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.signature is None:
            if kwargs:
                raise TypeError("a compiled module takes its arguments by position")
            params = self.module.entry.parameters
            if len(args) != len(params):
                raise TypeError(f"{self.module.name} takes {len(params)} argument(s), got "
                                f"{len(args)}")
            arrays = [coerce_argument(a, p.shape, i) for i, (a, p) in enumerate(zip(args,
                                                                                   params))]
            outputs = self.run_flat(arrays)
            return tuple(outputs) if self.module.result_shape.is_tuple else outputs[0]
        sig = self.signature
        arrays, avals, in_tree = canonical_arguments((args, kwargs), "compiled function")
        if in_tree != sig.in_tree or tuple(avals) != sig.in_avals:
            raise TypeError(located(
                f"compiled for arguments {_describe(sig.in_tree, sig.in_avals)}, called with "
                f"{_describe(in_tree, avals)}"))
        return sig.out_tree.unflatten(self.run_flat(arrays))

    def __repr__(self) -> str:
        return (f"<Compiled {self.module.name} strategy={self.strategy} "
                f"backend={self.backend}>")


def compile_module(module: Module, strategy: str = DEFAULT_STRATEGY,
                   backend: str | None = None, *,
                   signature: TracedModule | None = None) -> Compiled:
    """Verify `module` and make it executable under `strategy` on `backend`. A module the
    compiled-program cache holds is not verified again: its text was, when it was compiled."""
    chosen = check_backend(backend if backend is not None else default_backend())
    check_limits(module)  # a module beyond a resource limit is refused before any work
    return Compiled(module, check_strategy(strategy), chosen, signature)


def _describe(tree: pytree.TreeDef, avals: Sequence[AbstractValue]) -> str:
    return f"{tree} of " + ", ".join(a.text() for a in avals)


def _canonical_leaf(value: object, where: str) -> tuple[np.ndarray, AbstractValue]:
    """An argument as a NumPy array of its canonical type (64-bit types narrowed)."""
    if isinstance(value, bool | int | float) and not isinstance(value, np.generic):
        dtype, weak = python_scalar_type(value)
        if dtype.is_integer and not _INT32_MIN <= value <= _INT32_MAX:
            raise OverflowError(f"{where}: Python int {value} does not fit in int32")
        return np.asarray(value, dtype.numpy), AbstractValue((), dtype, weak)
    if isinstance(value, np.ndarray | np.generic):
        array = np.asarray(value)
        try:
            dtype = to_dtype(array.dtype)
        except TypeError:
            raise TypeError(f"{where}: arrays of dtype {array.dtype} are not supported") from None
        return array.astype(dtype.numpy, copy=False), AbstractValue(array.shape, dtype)
    raise TypeError(f"{where} is a {type(value).__name__}, not an array")


def canonical_arguments(tree: Any, what: str) -> tuple[list[np.ndarray], list[AbstractValue],
                                                       pytree.TreeDef]:
    leaves, treedef = pytree.flatten_with_paths(tree)
    arrays, avals = [], []
    for path, leaf in leaves:
        array, aval = _canonical_leaf(leaf, f"{what}: argument {path}")
        arrays.append(array)
        avals.append(aval)
    return arrays, avals, treedef


class Lowered:
    """A traced function's module before compilation (`jit(f).lower(*args)`)."""

    def __init__(self, traced: TracedModule, strategy: str, backend: str) -> None:
        self.traced = traced
        self.strategy = strategy
        self.backend = backend

    @property
    def module(self) -> Module:
        return self.traced.module

    def as_text(self) -> str:
        return module_text(self.traced.module)

    def compile(self) -> Compiled:
        return compile_module(self.traced.module, self.strategy, self.backend,
                              signature=self.traced)


class JitFunction:
    """A function traced to HLO on first call per argument signature, then compiled and run."""

    def __init__(self, fn: Callable[..., Any], strategy: str, backend: str | None,
                 static_argnums: int | Sequence[int], static_argnames: str | Sequence[str]):
        if not callable(fn):
            raise TypeError(f"jit needs a function, got {type(fn).__name__}")
        self.fn = fn
        self.strategy = check_strategy(strategy)
        self.backend = check_backend(backend if backend is not None else default_backend())
        self.name = getattr(fn, "__name__", "fn")
        nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
        self._params = _positional_names(fn)
        self.static_argnums = frozenset(nums) | {self._params.index(n) for n in names
                                                 if n in self._params}
        self.static_argnames = frozenset(names) | {self._params[i] for i in nums
                                                   if 0 <= i < len(self._params)}
        self._cache: dict[Any, Compiled] = {}
        # One compile per signature however many threads call at once: the first traces and
        # compiles under the lock, the others wait for it and reuse its result.
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn, updated=())

    def _split(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """(dynamic args, dynamic kwargs, hashable statics, function of the dynamic ones)."""
        statics: list[tuple[str, int | str, Any]] = []
        for i, value in enumerate(args):
            if i in self.static_argnums:
                statics.append(("#", i, self._hashable(value, f"#{i}")))
        for key in sorted(kwargs):
            if key in self.static_argnames:
                statics.append(("=", key, self._hashable(kwargs[key], key)))
        dyn_args = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self.static_argnames}
        fn = self.fn

        def call(*d_args: Any, **d_kwargs: Any) -> Any:
            it = iter(d_args)
            full = [a if i in self.static_argnums else next(it) for i, a in enumerate(args)]
            merged = {k: v for k, v in kwargs.items() if k in self.static_argnames}
            merged.update(d_kwargs)
            return fn(*full, **merged)

        return dyn_args, dyn_kwargs, tuple(statics), call

    def _hashable(self, value: Any, where: str) -> Any:
        try:
            hash(value)
        except TypeError:
            raise TypeError(located(f"jit({self.name}): static argument {where} must be "
                                    f"hashable, got {type(value).__name__}")) from None
        return value

    def _check_dynamic(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Non-array leaves in arguments that are not static get an error naming them."""
        named = [(f"{i}" + (f" ({self._params[i]})" if i < len(self._params) else ""), a,
                  f"static_argnums=({i},)") for i, a in enumerate(args)
                 if i not in self.static_argnums]
        named += [(f"{k!r}", v, f"static_argnames=({k!r},)") for k, v in kwargs.items()
                  if k not in self.static_argnames]
        for where, value, hint in named:
            for path, leaf in pytree.flatten_with_paths(value)[0]:
                if not isinstance(leaf, np.ndarray | np.generic | bool | int | float):
                    raise TypeError(located(
                        f"jit({self.name}): argument {where}{path} is a {type(leaf).__name__}, "
                        f"not an array; pass an array, or mark the argument static with "
                        f"{hint}"))

    def _prepare(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        self._check_dynamic(args, kwargs)
        dyn_args, dyn_kwargs, statics, call = self._split(args, kwargs)
        try:
            arrays, avals, in_tree = canonical_arguments((dyn_args, dyn_kwargs),
                                                         f"jit({self.name})")
        except (TypeError, OverflowError) as e:
            raise type(e)(located(str(e))) from None
        return arrays, avals, in_tree, statics, call

    def _trace(self, call: Callable[..., Any], in_tree: pytree.TreeDef,
               avals: list[AbstractValue]) -> TracedModule:
        with gc_paused():
            return trace_module(call, in_tree, avals, self.name)

    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        _, avals, in_tree, _, call = self._prepare(args, kwargs)
        return Lowered(self._trace(call, in_tree, avals), self.strategy, self.backend)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if is_tracing() or _has_tracer((args, kwargs)):
            return self.fn(*args, **kwargs)  # inside another trace: inline
        arrays, avals, in_tree, statics, call = self._prepare(args, kwargs)
        key = (in_tree, tuple(avals), statics)
        compiled = self._cache.get(key)
        if compiled is None:
            with self._lock:
                compiled = self._cache.get(key)
                if compiled is None:
                    traced = self._trace(call, in_tree, avals)
                    compiled = compile_module(traced.module, self.strategy, self.backend,
                                              signature=traced)
                    self._cache[key] = compiled
        assert compiled.signature is not None
        return compiled.signature.out_tree.unflatten(compiled.run_flat(arrays))

    @property
    def cache_size(self) -> int:
        return len(self._cache)

    def __repr__(self) -> str:
        return f"<jit {self.name} strategy={self.strategy} backend={self.backend}>"


def _has_tracer(tree: Any) -> bool:
    return any(isinstance(leaf, Tracer) for leaf in pytree.flatten(tree)[0])


def _positional_names(fn: Callable[..., Any]) -> list[str]:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in parameters if p.kind in kinds]


def jit(fn: Callable[..., Any] | None = None, *, strategy: str = DEFAULT_STRATEGY,
        backend: str | None = None, static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = ()) -> Any:
    """Trace `fn` to an HLO module per argument signature, compile it, and run it.

    Arguments are NumPy arrays and Python scalars (weakly typed), in any pytree of tuples,
    lists, dicts and namedtuples; arguments named in `static_argnums`/`static_argnames` are
    fixed Python values that the trace may depend on. Usable as `@jit` or `@jit(...)`.
    """
    if fn is None:
        return functools.partial(jit, strategy=strategy, backend=backend,
                                 static_argnums=static_argnums, static_argnames=static_argnames)
    return JitFunction(fn, strategy, backend, static_argnums, static_argnames)
