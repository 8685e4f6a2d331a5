"""Priority fusion and the `priority` strategy: results equal the unfused module's on the JAX
corpus and random programs, every decision is logged with its rule and estimated gain,
constants come last, the pass reaches a fixed point, injected constants decide, and the
CartPole step loop launches no more kernels than under `xla`."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from hlofuse.envs.cartpole import PRESETS, trace
from hlofuse.fusion.beyond_xla.cost_model import DEFAULT_CONSTANTS, estimate_module
from hlofuse.fusion.beyond_xla.priority import COST_MODEL_LOSS, PriorityFusion
from hlofuse.fusion.strategies import (
    STRATEGIES,
    FusionResult,
    parse_strategy,
    run_strategy,
)
from hlofuse.fusion.xla2022.multi_output import MultiOutputFusion
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.passes.decision_log import COST_MODEL_GAIN, FUSIBLE, DecisionLog
from hlofuse.passes.manager import FixedPoint
from hlofuse.reference.interpreter import evaluate, flatten_value

from tests.conftest import assert_matches, load_corpus_case
from tests.hlo_programs import RandomProgram, programs

STRATEGY = "priority+default_costs"  # deterministic: never the measured constants


def _assert_same(fused: Module, reference: list[np.ndarray], inputs: list[np.ndarray],
                 where: str) -> None:
    actual = flatten_value(evaluate(fused, inputs))
    assert len(actual) == len(reference), where
    for i, (a, b) in enumerate(zip(actual, reference)):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where} out{i}"
        np.testing.assert_array_equal(a, b, err_msg=f"{where} out{i}")


@pytest.mark.thorough
def test_corpus(corpus_case: tuple[str, str, list[np.ndarray], list[np.ndarray]]) -> None:
    name, text, inputs, expected = corpus_case
    module = parse_module(text, f"{name}.hlo")
    reference = flatten_value(evaluate(module, inputs))
    result = run_strategy(module, STRATEGY)  # verifies after every pass
    _assert_same(result.module, reference, inputs, f"{name} under {STRATEGY}")
    assert_matches(flatten_value(evaluate(result.module, inputs)), expected, name)
    _assert_well_logged(result.decisions)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs(program: RandomProgram) -> None:
    reference = flatten_value(evaluate(program.module, program.inputs))
    result = run_strategy(program.module, STRATEGY)
    _assert_same(result.module, reference, program.inputs, STRATEGY)
    alone = PriorityFusion(costs="default").run(program.module)[0]
    _assert_same(alone, reference, program.inputs, "priority-fusion alone")


def _assert_well_logged(log: DecisionLog) -> None:
    """Each fused edge carries the model's gain; each refusal names the rule that refused."""
    for record in log.unique():
        if record.pass_name != PriorityFusion.name:
            continue
        assert record.rule and record.message
        if record.verdict == "fuse":
            assert record.rule in (COST_MODEL_GAIN, FUSIBLE), record
            if record.rule == COST_MODEL_GAIN:
                gain = record.figures["gain_us"]
                assert isinstance(gain, float) and gain >= 0, record
        elif record.rule == COST_MODEL_LOSS:
            gain = record.figures["gain_us"]
            assert isinstance(gain, float) and gain <= 0, record


def test_strategy_is_the_2024_pipeline() -> None:
    assert "priority" in STRATEGIES
    strategy = parse_strategy("priority")
    assert strategy.priority_fusion and strategy.relax_concatenate
    assert not strategy.instruction_fusion and not strategy.fusion_merger
    steps = strategy.steps()
    assert [s.label for s in steps if isinstance(s, FixedPoint)] == [
        "simplification", "fusion", "horizontal fusion"]
    assert steps[1].name == "while-loop-trip-count-annotator"  # type: ignore[union-attr]
    fusion = steps[2]
    assert isinstance(fusion, FixedPoint)
    assert [p.name for p in fusion.passes] == [
        "priority-fusion", "cse", "dce", "multi-output-fusion", "cse", "dce"]
    assert fusion.passes[0] == PriorityFusion(costs="measured")
    assert fusion.passes[3] == MultiOutputFusion(relax_concatenate=True)
    fixed = parse_strategy(STRATEGY).steps()[2]
    assert isinstance(fixed, FixedPoint)
    assert fixed.passes[0] == PriorityFusion(costs="default")


CHAIN = """HloModule m

ENTRY main {
  p0 = f32[64]{0} parameter(0)
  p1 = f32[64]{0} parameter(1)
  two = f32[] constant(2)
  b = f32[64]{0} broadcast(two), dimensions={}
  m = f32[64]{0} multiply(p0, b)
  n = f32[64]{0} negate(m)
  a = f32[64]{0} add(n, p1)
  ROOT e = f32[64]{0} exponential(a)
}
"""


def test_constants_last_and_fixed_point() -> None:
    log = DecisionLog()
    fused, changed = PriorityFusion(costs="default").run(parse_module(CHAIN), log)
    assert changed
    records = [r for r in log.records if r.pass_name == PriorityFusion.name]
    fused_producers = [r.producer for r in records if r.verdict == "fuse"]
    # a into e, m into n, then the (m, n) fusion into the (a, e) one, b, and the constant
    # only after the queue is empty
    assert fused_producers[:2] == ["a", "m"] and fused_producers[3:] == ["b", "two"]
    assert sum(1 for i in fused.entry.instructions if i.op.text == "fusion") == 1
    again, changed_again = PriorityFusion(costs="default").run(fused, DecisionLog())
    assert not changed_again and again is fused


def test_priorities_order_the_fusions() -> None:
    """The producer that saves most goes first: the 4 MiB negate before the 64-element one."""
    module = parse_module("""HloModule m

ENTRY main {
  big = f32[1024,1024]{1,0} parameter(0)
  small = f32[64]{0} parameter(1)
  nb = f32[1024,1024]{1,0} negate(big)
  ab = f32[1024,1024]{1,0} abs(nb)
  ns = f32[64]{0} negate(small)
  as = f32[64]{0} abs(ns)
  ROOT t = (f32[1024,1024]{1,0}, f32[64]{0}) tuple(ab, as)
}
""")
    log = DecisionLog()
    PriorityFusion(costs="default").run(module, log)
    order = [r.producer for r in log.records if r.verdict == "fuse"]
    assert order == ["nb", "ns"]
    gains = [r.figures["gain_us"] for r in log.records if r.verdict == "fuse"]
    assert gains[0] > gains[1] > 0


EXPENSIVE = """HloModule m

ENTRY main {
  p0 = f32[1024]{0} parameter(0)
  p1 = f32[1024,64]{1,0} parameter(1)
  e = f32[1024]{0} exponential(p0)
  b1 = f32[1024,64]{1,0} broadcast(e), dimensions={0}
  a1 = f32[1024,64]{1,0} add(p1, b1)
  b2 = f32[1024,64]{1,0} broadcast(e), dimensions={0}
  a2 = f32[1024,64]{1,0} multiply(p1, b2)
  ROOT t = (f32[1024,64]{1,0}, f32[1024,64]{1,0}) tuple(a1, a2)
}
"""


def test_injected_constants_decide() -> None:
    """Recomputing exp per broadcast element is a loss at the measured transcendental cost;
    on a machine where exp is as cheap as an add and calls are dear, it is a gain."""
    def decisions(pass_: PriorityFusion) -> set[tuple[str, str]]:
        log = DecisionLog()
        pass_.run(parse_module(EXPENSIVE), log)
        return {(r.rule, r.verdict) for r in log.records if r.producer == "e"}

    assert decisions(PriorityFusion(costs="default")) == {(COST_MODEL_LOSS, "no")}
    cheap = dataclasses.replace(DEFAULT_CONSTANTS, transcendental_ops=1.0, call_overhead=1e-3,
                                source="injected")
    assert decisions(PriorityFusion(constants=cheap)) == {(COST_MODEL_GAIN, "fuse")}


@functools.cache
def _cartpole_step(preset: str, strategy: str) -> FusionResult:
    return run_strategy(trace(PRESETS[preset], 64, 5), strategy, debug=False)


@pytest.mark.parametrize("preset", ["baseline", "deterministic"])
def test_cartpole_step_kernels(preset: str) -> None:
    """The step loop launches fewer kernels than under `xla`."""
    xla, priority = _cartpole_step(preset, "xla"), _cartpole_step(preset, STRATEGY)
    (loop,) = priority.kernels_per_iteration()
    assert priority.kernels_per_iteration()[loop] < xla.kernels_per_iteration()[loop]


# `xla` follows XLA's 2022 rules and merges the packed state's concatenate fusion, dynamics
# included, into both readers (the termination test and the reset select), as priority fusion
# does; with that, the model estimates priority fusion's step faster (2.2 vs 2.7 us).
@pytest.mark.parametrize("preset", ["baseline", "deterministic"])
def test_cartpole_step_estimated_faster_than_xla(preset: str) -> None:
    """The model estimates priority fusion's step loop faster than `xla`'s (the report's
    figures come from the same calls)."""
    xla, priority = _cartpole_step(preset, "xla"), _cartpole_step(preset, STRATEGY)
    (loop,) = priority.kernels_per_iteration()
    _, xla_time = estimate_module(xla.module)
    _, priority_time = estimate_module(priority.module)
    assert priority_time[loop] < xla_time[loop]


@pytest.mark.needs_cc
@pytest.mark.parametrize("name", ["reductions", "softmax", "layer_norm", "dynamic_slice_update",
                                  "cartpole_rollout_deterministic"])
def test_compiled_corpus_program(name: str) -> None:
    """The C emitter compiles what priority fusion builds (reductions inside kernels, reduce
    into reduce, duplicated producers) to JAX's results."""
    from hlofuse.targets.c import compile_cpu

    text, inputs, expected = load_corpus_case(name)
    fused = run_strategy(parse_module(text), STRATEGY, debug=False).module
    assert_matches(flatten_value(compile_cpu(fused)(*inputs)), expected, f"{name} ({STRATEGY})")
