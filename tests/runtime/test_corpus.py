"""Every program of the JAX corpus, compiled to C unfused and under every fusion strategy,
returns JAX's outputs (bit-exact for integers and pred, rtol=1e-5 and atol=1e-6 for floats)."""

from __future__ import annotations

import importlib.util

import pytest

from hlofuse.interpreter import flatten_value
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.runtime import compile_cpu

from tests.conftest import CORPUS, assert_matches, load_corpus_case

HAS_STRATEGIES = importlib.util.find_spec("hlofuse.fusion.strategies") is not None
# The module as parsed (every instruction its own kernel), and the named strategies.
STRATEGIES = ["as-parsed", "none", "xla", "xla+relax_concatenate"]


def prepare(text: str, name: str, strategy: str) -> Module:
    module = parse_module(text, f"{name}.hlo")
    if strategy == "as-parsed":
        return module
    if not HAS_STRATEGIES:
        pytest.skip("hlofuse.fusion.strategies is not there yet")
    from hlofuse.fusion.strategies import run_strategy

    return run_strategy(module, strategy, debug=False).module


@pytest.mark.needs_cc
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", CORPUS)
def test_corpus_program_compiled_matches_jax(name: str, strategy: str) -> None:
    text, inputs, expected = load_corpus_case(name)
    executable = compile_cpu(prepare(text, name, strategy))
    assert_matches(flatten_value(executable(*inputs)), expected, f"{name} ({strategy})")
    if strategy == "xla":
        # The Python thunk runner walks the same program kernel by kernel.
        assert_matches(flatten_value(executable.run_thunks(*inputs)), expected,
                       f"{name} ({strategy}, thunk runner)")
