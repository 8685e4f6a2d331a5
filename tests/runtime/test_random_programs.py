"""Random programs (tests/hlo_programs.py) compiled under every strategy == the interpreter:
exact for integers and pred, rtol=1e-5 and atol=1e-6 for f32 (one unit in the last place for
f16, where libm and NumPy's own transcendental loops may round differently)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from hlofuse.fusion.strategies import run_strategy
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c import compile_cpu

from tests.codegen.test_ops import assert_same
from tests.hlo_programs import RandomProgram, programs

STRATEGIES = ("as-parsed", "none", "xla", "xla+relax_concatenate")


@pytest.mark.needs_cc
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_steps=16))
def test_random_programs_compiled_match_the_interpreter(program: RandomProgram) -> None:
    expected = flatten_value(evaluate(program.module, program.inputs))
    for strategy in STRATEGIES:
        module = program.module
        if strategy != "as-parsed":
            module = run_strategy(module, strategy, debug=False).module
        actual = flatten_value(compile_cpu(module)(*program.inputs))
        assert len(actual) == len(expected)
        for k, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{strategy} output {k}")
