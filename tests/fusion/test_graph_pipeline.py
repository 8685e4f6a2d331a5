"""Fusion passes sharing one graph copy decide exactly as passes that each freeze the module
and copy it again: same fused module text, same decision log.

The pipeline keeps a ModuleGraph between consecutive graph passes (`ModuleGraph.normalize`
stands in for the round trip through frozen IR), and the fusion fixed points clean up with
graph CSE and DCE (`fusion/graph_cleanup.py`) instead of the frozen-IR passes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

import pytest

from hlofuse.fusion.graph_cleanup import FusedComputationCse, GraphDce, GraphVariadicOpSplitter
from hlofuse.fusion.module_graph import ModuleGraph
from hlofuse.fusion.strategies import parse_strategy, run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.passes.cse import CommonSubexpressionElimination
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.decision_log import DecisionLog, DecisionSink
from hlofuse.passes.manager import FixedPoint, GraphPass, Pass, Pipeline, Step
from hlofuse.passes.variadic_op_splitter import VariadicOpSplitter

DATA = Path(__file__).resolve().parents[1] / "data"
PROGRAMS = [DATA / "xla_gpu" / f"{name}.before.hlo" for name in
            ("cartpole_rollout", "mountain_car_rollout", "layer_norm", "mlp_grad", "cond",
             "random_bernoulli")] + [DATA / "rollouts" / "catch.gpu.hlo"]


@dataclasses.dataclass(frozen=True)
class _Frozen:
    """A graph pass the pipeline must treat as a frozen-IR pass (round trip every time)."""

    inner: Pass
    name: ClassVar[str] = "frozen"

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        return self.inner.run(module, log)


def _frozen_steps(steps: list[Step]) -> list[Step]:
    """The same steps with module CSE and DCE and every graph pass round-tripping."""

    def one(p: Pass) -> Pass:
        if isinstance(p, FusedComputationCse):
            return CommonSubexpressionElimination(only_fusion_computations=True,
                                                  combine_iotas=p.combine_iotas)
        if isinstance(p, GraphDce):
            return DeadCodeElimination()
        if isinstance(p, GraphVariadicOpSplitter):
            return VariadicOpSplitter(p.max_operands)
        return _Frozen(p) if isinstance(p, GraphPass) else p

    return [dataclasses.replace(s, passes=tuple(one(p) for p in s.passes))
            if isinstance(s, FixedPoint) else one(s) for s in steps]


def _run(module: Module, steps: list[Step]) -> tuple[str, list[str]]:
    log = DecisionLog()
    fused, _ = Pipeline(steps, debug=False, log=log).run(module)
    return module_text(fused), [repr(r) for r in log]


@pytest.mark.parametrize("strategy", ["xla", "xla+relax_concatenate", "priority"])
@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_shared_graphs_decide_as_round_trips(path: Path, strategy: str) -> None:
    module = parse_module(path.read_text())
    steps = parse_strategy(strategy).steps(None)
    assert any(isinstance(p, GraphPass) for s in steps
               for p in (s.passes if isinstance(s, FixedPoint) else (s,)))
    shared_text, shared_log = _run(module, steps)
    frozen_text, frozen_log = _run(module, _frozen_steps(steps))
    assert shared_text == frozen_text
    assert shared_log == frozen_log
    assert len(shared_log) > 0


@pytest.mark.parametrize("strategy", ["xla", "xla+relax_concatenate", "priority", "max",
                                      "xla-gpu"])
@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_passes_decide_the_same_without_a_decision_log(path: Path, strategy: str) -> None:
    # A compile runs the strategy without recording (`Compiled.compile_fusion`).
    module = parse_module(path.read_text())
    logged = run_strategy(module, strategy, debug=False)
    unlogged = run_strategy(module, strategy, debug=False, log_decisions=False)
    assert len(logged.decisions) > 0 and len(unlogged.decisions) == 0
    assert module_text(unlogged.module) == module_text(logged.module)
    assert unlogged.kernels_per_iteration() == logged.kernels_per_iteration()
    with pytest.raises(ValueError, match="without its decision log"):
        unlogged.explain()


CSE_DCE = """
HloModule m

%fused (p0: f32[4], p1: f32[4]) -> f32[4] {
  %p0 = f32[4] parameter(0)
  %p1 = f32[4] parameter(1)
  %a = f32[4] add(%p0, %p1)
  %b = f32[4] add(%p0, %p1)
  %dead = f32[4] subtract(%a, %p1)
  ROOT %m = f32[4] multiply(%a, %b)
}

ENTRY %main (x: f32[4], y: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  %y = f32[4] parameter(1)
  %unused = f32[4] subtract(%x, %y)
  %s = f32[4] subtract(%x, %y)
  ROOT %f = f32[4] fusion(%x, %s), kind=kLoop, calls=%fused
}
"""


def test_graph_cse_and_dce_match_the_frozen_passes() -> None:
    module = parse_module(CSE_DCE)
    with ModuleGraph.from_module(module) as graphs:
        named = graphs.to_module()  # fused parameters under their final names, as graphs give
    for graph_pass, frozen_pass in ((FusedComputationCse(),
                                     CommonSubexpressionElimination(
                                         only_fusion_computations=True)),
                                    (GraphDce(), DeadCodeElimination())):
        on_graphs, changed = graph_pass.run(module)
        frozen, frozen_changed = frozen_pass.run(named)
        assert changed and frozen_changed
        assert module_text(on_graphs) == module_text(frozen)
    after_cse, _ = FusedComputationCse().run(module)
    text = module_text(after_cse)
    assert "\n  b = " not in text and "multiply(a, a)" in text  # fused duplicate merged
    assert text.count("subtract(x, y)") == 2  # CSE leaves the entry alone
    after_dce, _ = GraphDce().run(after_cse)
    text = module_text(after_dce)
    assert "unused" not in text and "dead" not in text and "\n  a = " in text
    # A second run finds nothing left to do.
    assert GraphDce().run(after_dce)[1] is False
    assert FusedComputationCse().run(after_dce)[1] is False


def test_a_concatenate_split_inside_the_fixed_point_decides_as_round_trips() -> None:
    # 300 operands: over XLA's limit of 128 per kernel, so the splitter rewrites it.
    operands = ", ".join(["%e"] * 300)
    module = parse_module(f"""
HloModule wide

ENTRY %main (x: f32[2]) -> f32[600] {{
  %x = f32[2] parameter(0)
  %e = f32[2] exponential(%x)
  %c = f32[600] concatenate({operands}), dimensions={{0}}
  ROOT %n = f32[600] negate(%c)
}}
""")
    steps = parse_strategy("xla").steps(None)
    shared_text, shared_log = _run(module, steps)
    frozen_text, frozen_log = _run(module, _frozen_steps(steps))
    assert shared_text == frozen_text and shared_log == frozen_log
    assert any("concatenate-split" in record for record in shared_log)
