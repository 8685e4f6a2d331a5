"""Every program of the JAX corpus, compiled to C unfused and under every fusion strategy,
returns JAX's outputs (bit-exact for integers and pred, rtol=1e-5 and atol=1e-6 for floats)."""

from __future__ import annotations

import importlib.util

import pytest

from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import flatten_value
from hlofuse.targets.c import compile_many
from hlofuse.targets.native.executable import SharedObjectExecutable as Executable

from tests.conftest import CORPUS, assert_matches, load_corpus_case, under_xdist

HAS_STRATEGIES = importlib.util.find_spec("hlofuse.fusion.strategies") is not None
# The module as parsed (every instruction its own kernel), and the named strategies.
STRATEGIES = ["as-parsed", "none", "xla", "xla+relax_concatenate"]
_BUILT: dict[tuple[str, str], Executable] = {}


def prepare(name: str, strategy: str) -> Module:
    module = parse_module(load_corpus_case(name)[0], f"{name}.hlo")
    if strategy == "as-parsed":
        return module
    from hlofuse.fusion.strategies import run_strategy

    return run_strategy(module, strategy, debug=False).module


def executable(request: pytest.FixtureRequest, name: str, strategy: str) -> Executable:
    """Compiled once for every selected test of this file, two compilers at a time (under
    pytest-xdist, only the one asked for: a worker runs some of the tests, the workers are
    the parallelism)."""
    if (name, strategy) not in _BUILT:
        wanted = [(name, strategy)] if under_xdist() else [
            (item.callspec.params["name"], item.callspec.params["strategy"])
            for item in request.session.items
            if item.module is request.module and hasattr(item, "callspec")]
        wanted = [w for w in wanted if w not in _BUILT and (HAS_STRATEGIES or w[1] == "as-parsed")]
        built = compile_many([prepare(n, s) for n, s in wanted])
        _BUILT.update(zip(wanted, built))
    return _BUILT[name, strategy]


@pytest.mark.needs_cc
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", CORPUS)
def test_corpus_program_compiled_matches_jax(request: pytest.FixtureRequest, name: str,
                                             strategy: str) -> None:
    if strategy != "as-parsed" and not HAS_STRATEGIES:
        pytest.skip("hlofuse.fusion.strategies is not there yet")
    _, inputs, expected = load_corpus_case(name)
    compiled = executable(request, name, strategy)
    assert_matches(flatten_value(compiled(*inputs)), expected, f"{name} ({strategy})")
    if strategy == "xla":
        # The Python thunk runner walks the same program kernel by kernel.
        assert_matches(flatten_value(compiled.run_thunks(*inputs)), expected,
                       f"{name} ({strategy}, thunk runner)")
