"""Every strategy's fused module verifies after every pass and computes what the unfused module
computes, bit for bit (same interpreter, same element-wise semantics), on the JAX corpus and on
random programs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value

from tests.conftest import CORPUS, assert_matches, load_corpus_case
from tests.hlo_programs import RandomProgram, programs

# A sweep: every corpus program and random programs under every strategy (make test only).
pytestmark = pytest.mark.thorough

STRATEGIES = ("none", "xla", "xla+relax_concatenate")
# Each pass left out once: they must also be correct on their own.
ABLATIONS = ("xla-no-merger", "xla-no-multi-output", "xla-no-horizontal", "xla-no-duplication",
             "none+instruction-fusion+horizontal-loop")


def _assert_same(fused: Module, reference: list[np.ndarray], inputs: list[np.ndarray],
                 where: str, source: Module | None = None) -> None:
    """Bit for bit, except that logistic-expander (as XLA's LogisticExpander) rewrites
    logistic as 1/(1+exp(-x)), whose roundings may differ from the reference's single rounding
    by an ulp or two; later ops carry those differences on and sum them (a reduce of several
    logistics was 3 ulp off), so such a program's floats are compared relative to their size."""
    actual = flatten_value(evaluate(fused, inputs))
    assert len(actual) == len(reference), where
    has_logistic = source is not None and any(
        i.op is Op.LOGISTIC for i in source.all_instructions())
    for i, (a, b) in enumerate(zip(actual, reference)):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where} out{i}"
        if has_logistic and a.dtype.kind == "f":
            # a few ulp of the type, relative to the largest value (what the sums carry)
            tolerance = 8 * float(np.finfo(b.dtype).eps)
            scale = float(np.max(np.abs(b), initial=1.0))
            np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance * scale,
                                       err_msg=f"{where} out{i}")
            continue
        np.testing.assert_array_equal(a, b, err_msg=f"{where} out{i}")


def _fusions(module: Module) -> int:
    return sum(1 for i in module.all_instructions() if i.op is Op.FUSION)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_corpus(corpus_case: tuple[str, str, list[np.ndarray], list[np.ndarray]],
                strategy: str) -> None:
    name, text, inputs, expected = corpus_case
    module = parse_module(text, f"{name}.hlo")
    reference = flatten_value(evaluate(module, inputs))
    result = run_strategy(module, strategy)  # debug: verifies after every pass
    _assert_same(result.module, reference, inputs, f"{name} under {strategy}", module)
    assert_matches(flatten_value(evaluate(result.module, inputs)), expected, name)
    if strategy == "none":
        assert _fusions(result.module) == 0
        # Nothing fused; the only records are the trip-count annotation's (every strategy
        # annotates counted loops, as XLA does).
        assert all(r.pass_name == "while-loop-trip-count-annotator"
                   for r in result.decisions.records)


def test_xla_launches_fewer_kernels_than_none() -> None:
    for name in CORPUS:
        module = parse_module(load_corpus_case(name)[0])
        unfused = run_strategy(module, "none", debug=False)
        fused = run_strategy(module, "xla", debug=False)
        assert len(fused.kernels) <= len(unfused.kernels), name
    big = parse_module(load_corpus_case("elementwise_math")[0])
    assert len(run_strategy(big, "xla").kernels) == 1


@pytest.mark.parametrize("strategy", ABLATIONS)
@pytest.mark.parametrize("name", ["cartpole_rollout_deterministic", "softmax", "mlp_grad",
                                  "cond", "dynamic_slice_update", "reductions", "argmax"])
def test_corpus_with_passes_left_out(name: str, strategy: str) -> None:
    text, inputs, _ = load_corpus_case(name)
    module = parse_module(text)
    reference = flatten_value(evaluate(module, inputs))
    _assert_same(run_strategy(module, strategy).module, reference, inputs, f"{name} {strategy}")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs(program: RandomProgram) -> None:
    reference = flatten_value(evaluate(program.module, program.inputs))
    for strategy in STRATEGIES:
        result = run_strategy(program.module, strategy)
        _assert_same(result.module, reference, program.inputs, strategy, program.module)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_steps=20))
def test_random_programs_with_passes_left_out(program: RandomProgram) -> None:
    reference = flatten_value(evaluate(program.module, program.inputs))
    for strategy in ABLATIONS:
        result = run_strategy(program.module, strategy)
        _assert_same(result.module, reference, program.inputs, strategy, program.module)
