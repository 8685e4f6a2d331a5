"""Strategies as data: parsing names and modifiers, the pipelines they build, run_strategy."""

from __future__ import annotations

import pytest

from hlofuse.fusion.strategies import STRATEGIES, StrategyError, parse_strategy, run_strategy
from hlofuse.fusion.xla2022.fusion_merger import FusionMerger
from hlofuse.fusion.xla2022.horizontal import HorizontalInputFusion, HorizontalLoopFusion
from hlofuse.fusion.xla2022.instruction_fusion import InstructionFusion
from hlofuse.fusion.xla2022.multi_output import MultiOutputFusion
from hlofuse.ir.parser import parse_module
from hlofuse.passes.manager import FixedPoint

from tests.fusion.test_barriers import PACKED_STEP_LOOP


def _pass_types(strategy: str) -> list[type]:
    types: list[type] = []
    for step in parse_strategy(strategy).steps():
        inner = step.passes if isinstance(step, FixedPoint) else (step,)
        types += [type(p) for p in inner]
    return types


def test_named_strategies() -> None:
    assert {"none", "xla", "priority"} <= set(STRATEGIES)
    none = parse_strategy("none")
    assert not none.fuses and none.simplify
    xla = parse_strategy("xla")
    assert xla.fuses and not xla.relax_concatenate
    fusion = [InstructionFusion, FusionMerger, MultiOutputFusion, HorizontalLoopFusion,
              HorizontalInputFusion]
    types = _pass_types("xla")
    assert [t for t in types if t in fusion] == fusion
    assert not set(fusion) & set(_pass_types("none"))


def test_xla_pipeline_is_the_2022_order() -> None:
    steps = parse_strategy("xla").steps()
    assert [s.label if isinstance(s, FixedPoint) else s.name for s in steps] == [
        "logistic-expander", "simplification", "while-loop-trip-count-annotator",
        "tree reduction", "fusion", "horizontal fusion"]
    fusion_step = steps[4]
    assert isinstance(fusion_step, FixedPoint)
    names = [p.name for p in fusion_step.passes]
    assert names == ["variadic-op-splitter", "instruction-fusion", "fusion-merger",
                     "multi-output-fusion", "cse", "dce"]


@pytest.mark.parametrize("text, field, value", [
    ("xla+relax_concatenate", "relax_concatenate", True),
    ("xla+relax-concatenate", "relax_concatenate", True),
    ("xla-no-merger", "fusion_merger", False),
    ("xla-no-multi-output", "multi_output", False),
    ("xla-no-mof", "multi_output", False),
    ("xla-no-horizontal-loop", "horizontal_loop", False),
    ("xla-no-duplication", "duplication", False),
    ("xla-no-instruction-fusion", "instruction_fusion", False),
    ("xla-no-simplify", "simplify", False),
    ("none+instruction-fusion", "instruction_fusion", True),
    ("xla-no-logistic-expander", "logistic_expansion", False),
    ("xla-no-trip-count", "trip_count", False),
    ("xla-no-tree-reduction", "tree_reduction", False),
    ("xla-no-variadic-op-splitter", "variadic_split", False),
    ("none+tree-reduction", "tree_reduction", True),
])
def test_modifiers(text: str, field: str, value: bool) -> None:
    strategy = parse_strategy(text)
    assert getattr(strategy, field) is value
    assert strategy.name == text


def test_combined_modifiers() -> None:
    strategy = parse_strategy("xla-no-horizontal+relax_concatenate-no-merger")
    assert not strategy.horizontal_loop and not strategy.horizontal_input
    assert strategy.relax_concatenate and not strategy.fusion_merger
    assert strategy.instruction_fusion and strategy.multi_output
    relaxed = [p for p in _pass_types(strategy.name) if p is InstructionFusion]
    assert relaxed


@pytest.mark.parametrize("text, message", [
    ("", "empty strategy"),
    ("tvm", "unknown strategy 'tvm'"),
    ("xla+turbo", "unknown modifier 'turbo'"),
    ("xla-no-relax_concatenate", "is a knob"),
])
def test_bad_strategies(text: str, message: str) -> None:
    with pytest.raises(StrategyError, match=message):
        parse_strategy(text)


def test_run_strategy_result() -> None:
    module = parse_module(PACKED_STEP_LOOP)
    result = run_strategy(module, "xla")
    assert result.strategy.name == "xla"
    assert result.decisions.records
    assert result.kernels_per_iteration() == {"loop": len(result.kernels)}
    unfused = run_strategy(module, "none")
    # No fusion decisions: only the trip-count annotation's record of the counted loop.
    assert [(r.pass_name, r.rule) for r in unfused.decisions.records] == [
        ("while-loop-trip-count-annotator", "trip-count-annotated")]
    assert len(unfused.kernels) > len(result.kernels)
    assert all(not k.is_fusion for k in unfused.kernels)
