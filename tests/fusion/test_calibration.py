"""Where priority fusion's machine constants come from: injected, the defaults, or the
measured ones the layer above registers (`cost_model.set_measured_provider`), built from the
probe's figures by `constants_from_figures`."""

from __future__ import annotations

import dataclasses

import pytest

from hlofuse.cli import UsageError
from hlofuse.fusion import cost_model
from hlofuse.fusion.commands import run_opt
from hlofuse.fusion.cost_model import (
    DEFAULT_CONSTANTS,
    MachineConstants,
    constants_from_figures,
    measured_constants,
    set_measured_provider,
)
from hlofuse.fusion.priority import PriorityFusion
from hlofuse.ir.parser import parse_module

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


def test_measured_constants_come_from_the_registered_provider() -> None:
    faster = dataclasses.replace(DEFAULT_CONSTANTS, op_rate=2 * DEFAULT_CONSTANTS.op_rate)
    previous = set_measured_provider(lambda: faster)
    try:
        assert measured_constants() is faster
        assert PriorityFusion(costs="measured").machine() is faster
        assert PriorityFusion(costs="default").machine() is DEFAULT_CONSTANTS
        set_measured_provider(None)
        assert measured_constants() is DEFAULT_CONSTANTS
    finally:
        set_measured_provider(previous)
    assert cost_model.measured_constants is measured_constants


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
