"""Where priority fusion's machine constants come from: injected, the defaults, or the
measured ones the caller passes to the strategy explicitly, built from the probe's figures by
`constants_from_figures`."""

from __future__ import annotations

import dataclasses

import pytest

from hlofuse.cli import UsageError
from hlofuse.cli.opt import run_opt
from hlofuse.fusion.beyond_xla.cost_model import (
    DEFAULT_CONSTANTS,
    MachineConstants,
    constants_from_figures,
)
from hlofuse.fusion.beyond_xla.priority import PriorityFusion
from hlofuse.fusion.strategies import parse_strategy, run_strategy
from hlofuse.ir.parser import parse_module

from tests.fusion.test_priority import EXPENSIVE

FIGURES = {"threads": 4.0, "call_overhead": 3e-9, "parallel_overhead": 2e-6, "op_rate": 5e10,
           "transcendental_ops": 150.0, "divide_ops": 8.0, "cache_bandwidth": 8e10,
           "memory_bandwidth": 6e9, "parallel_memory_bandwidth": 1.2e10}


def test_constants_from_figures() -> None:
    constants = constants_from_figures({**FIGURES, "cache_bytes": float(1 << 20)})
    assert constants.source == "measured"
    assert constants.threads == 4 and isinstance(constants.threads, int)
    assert constants.op_rate == 5e10
    assert constants.transcendental_ops == 150.0
    assert constants.parallel_memory_bandwidth == 1.2e10
    assert constants.cache_bytes == 1 << 20
    assert constants.parallel_min_elements == DEFAULT_CONSTANTS.parallel_min_elements
    assert constants_from_figures(FIGURES).cache_bytes == DEFAULT_CONSTANTS.cache_bytes
    # all threads never stream slower than one
    slow = constants_from_figures({**FIGURES, "parallel_memory_bandwidth": 1e9})
    assert slow.parallel_memory_bandwidth == 6e9
    assert constants_from_figures(None) is DEFAULT_CONSTANTS


def test_the_strategy_passes_measured_constants_to_priority_fusion() -> None:
    faster = dataclasses.replace(DEFAULT_CONSTANTS, op_rate=2 * DEFAULT_CONSTANTS.op_rate)
    priority = parse_strategy("priority")
    assert priority.measures_costs
    [fusion] = [s for s in priority.steps(faster) if getattr(s, "label", "") == "fusion"]
    assert fusion.passes[0] == PriorityFusion(costs="measured", constants=faster)
    assert fusion.passes[0].machine() is faster
    fixed = parse_strategy("priority+default_costs")
    assert not fixed.measures_costs and not parse_strategy("xla").measures_costs
    [fusion] = [s for s in fixed.steps(faster) if getattr(s, "label", "") == "fusion"]
    assert fusion.passes[0].machine() is DEFAULT_CONSTANTS
    # Without measured constants nothing is looked up behind the caller's back.
    assert PriorityFusion(costs="measured").machine() is DEFAULT_CONSTANTS


def test_measured_constants_reach_priority_fusion_through_run_strategy() -> None:
    """Recomputing exp per broadcast element is a loss at the default constants, a gain on a
    machine where exp is as cheap as an add and calls are dear: the constants the caller
    passes decide."""
    def verdicts(**constants: MachineConstants) -> set[tuple[str, str]]:
        result = run_strategy(parse_module(EXPENSIVE), "priority", debug=False, **constants)
        return {(r.rule, r.verdict) for r in result.decisions
                if r.pass_name == "priority-fusion" and r.producer == "e"}

    assert verdicts() == {("cost-model-loss", "no")}
    cheap = dataclasses.replace(DEFAULT_CONSTANTS, transcendental_ops=1.0, call_overhead=1e-3,
                                source="injected")
    assert verdicts(constants=cheap) == {("cost-model-gain", "fuse")}


def test_importing_the_api_registers_nothing() -> None:
    import hlofuse.api
    from hlofuse.fusion.beyond_xla import cost_model

    assert not hasattr(cost_model, "set_measured_provider")
    assert not hasattr(cost_model, "measured_constants")
    assert hlofuse.api.strategy_constants("xla") is None


def test_pass_knobs_choose_the_constants() -> None:
    injected = MachineConstants(1, 1e-9, 0.0, 1e9, 10.0, 2.0, 1e9, 1e9, 1e10, 1 << 20,
                                source="injected")
    assert PriorityFusion(constants=injected).machine() is injected
    assert PriorityFusion(costs="default").machine() is DEFAULT_CONSTANTS
    with pytest.raises(ValueError, match="costs of priority-fusion takes measured or default"):
        PriorityFusion(costs="fast")
    module = parse_module("HloModule m\n\nENTRY main {\n  ROOT p = f32[2]{0} parameter(0)\n}\n")
    with pytest.raises(UsageError, match="costs of priority-fusion"):
        run_opt(module, "priority-fusion{costs=fast}", None)
