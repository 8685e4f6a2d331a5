"""Fusion passes sharing one graph copy decide exactly as passes that each freeze the module
and copy it again: same fused module text, same decision log.

The pipeline keeps a ModuleGraph between consecutive graph passes (`ModuleGraph.normalize`
stands in for the round trip through frozen IR), and the fusion fixed points clean up with
graph CSE and DCE (`fusion/graphs/cleanup.py`) instead of the frozen-IR passes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

import pytest

from hlofuse.fusion.graphs.cleanup import FusedComputationCse, GraphDce, GraphVariadicOpSplitter
from hlofuse.fusion.graphs.module_graph import ModuleGraph
from hlofuse.fusion.strategies import parse_strategy, run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.passes.cse import CommonSubexpressionElimination
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.decision_log import DecisionLog, DecisionRecord, DecisionSink
from hlofuse.passes.manager import FixedPoint, GraphPass, Pass, Pipeline, Step
from hlofuse.passes.variadic_op_splitter import VariadicOpSplitter

DATA = Path(__file__).resolve().parents[1] / "data"
PROGRAMS = [DATA / "xla_gpu" / f"{name}.before.hlo" for name in
            ("cartpole_rollout", "mountain_car_rollout", "layer_norm", "mlp_grad", "cond",
             "random_bernoulli")] + [DATA / "rollouts" / "catch.gpu.hlo"]
# The small programs under every strategy, and cartpole_rollout (a loop) under the first, are
# the fast tier; the large programs under every strategy take a minute, a sweep (thorough).
FAST = {"layer_norm", "mlp_grad", "cond"}


def _cases(strategies: tuple[str, ...]) -> list[object]:
    return [pytest.param(path, strategy, id=f"{path.stem}-{strategy}",
                         marks=() if path.stem.removesuffix(".before") in FAST or (
                             path.stem == "cartpole_rollout.before" and strategy == strategies[0])
                         else pytest.mark.thorough)
            for path in PROGRAMS for strategy in strategies]


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


@pytest.mark.parametrize(("path", "strategy"), _cases(("xla", "xla+relax_concatenate",
                                                       "priority")))
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


# xla-gpu on the small programs only: its cost model makes it slow on the rollouts.
@pytest.mark.parametrize(("path", "strategy"), _cases(("xla", "xla+relax_concatenate",
                                                       "priority", "max"))
                         + [pytest.param(DATA / "xla_gpu" / f"{name}.before.hlo", "xla-gpu",
                                         id=f"{name}.before-xla-gpu")
                            for name in ("layer_norm", "mlp_grad", "cond")])
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


def _operands(names: list[str], count: int) -> str:
    return ", ".join(f"%{names[i % len(names)]}" for i in range(count))


def _wide_concatenates(n: int) -> str:
    """Wide concatenates in the entry (one reading another, names `concatenate.N` in use, a
    layout), in a loop body, in a called computation's root, and in a fused computation
    (which the splitter leaves alone)."""
    loop = 'op_name="loop" source_file="a.py" source_line=3'
    entry = 'op_name="c1" source_file="b.py" source_line=12'
    a, b, c, d = 2 * n, 2 * (n + 1), 4 * n - 2, f"f32[3,{2 * n}]"
    result = f"(f32[2], f32[{b}], f32[{a}], f32[{a}], f32[{c}], {d})"
    in_body = _operands(["e", "v"], n)
    in_callee = _operands(["ez", "z"], n + 1)
    in_fusion = _operands(["fe", "fp"], n)
    first = _operands(["concatenate.7", "r", "x", "r"], n)
    second = _operands(["x", "concatenate.7"], n - 1)
    return f"""
HloModule wide

%body (p: (s32[], f32[2])) -> (s32[], f32[2]) {{
  %p = (s32[], f32[2]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %v = f32[2] get-tuple-element(%p), index=1
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  %e = f32[2] exponential(%v)
  %cat = f32[{a}] concatenate({in_body}), dimensions={{0}}, metadata={{{loop}}}
  %s = f32[2] slice(%cat), slice={{[3:5]}}
  ROOT %t = (s32[], f32[2]) tuple(%i2, %s)
}}

%cond (q: (s32[], f32[2])) -> pred[] {{
  %q = (s32[], f32[2]) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %ten = s32[] constant(10)
  ROOT %lt = pred[] compare(%j, %ten), direction=LT
}}

%callee (z: f32[2]) -> f32[{b}] {{
  %z = f32[2] parameter(0)
  %ez = f32[2] exponential(%z)
  ROOT %concatenate = f32[{b}] concatenate({in_callee}), dimensions={{0}}
}}

%fused_body (fp: f32[2]) -> f32[{a}] {{
  %fp = f32[2] parameter(0)
  %fe = f32[2] exponential(%fp)
  ROOT %concatenate.3 = f32[{a}] concatenate({in_fusion}), dimensions={{0}}
}}

ENTRY %main (x: f32[2], y: f32[3,2]) -> {result} {{
  %x = f32[2] parameter(0)
  %y = f32[3,2]{{0,1}} parameter(1)
  %concatenate.7 = f32[2] sine(%x), metadata={{op_name="sin" source_file="b.py" source_line=9}}
  %zero = s32[] constant(0)
  %init = (s32[], f32[2]) tuple(%zero, %x)
  %w = (s32[], f32[2]) while(%init), condition=%cond, body=%body
  %r = f32[2] get-tuple-element(%w), index=1
  %cl = f32[{b}] call(%r), to_apply=%callee
  %fu = f32[{a}] fusion(%x), kind=kLoop, calls=%fused_body
  %c1 = f32[{a}] concatenate({first}), dimensions={{0}}, metadata={{{entry}}}
  %c2 = f32[{c}] concatenate(%c1, {second}), dimensions={{0}}
  %n1 = f32[{a}] negate(%c1)
  %c3 = {d}{{0,1}} concatenate({_operands(["y"], n)}), dimensions={{1}}
  ROOT %out = {result} tuple(%r, %cl, %fu, %n1, %c2, %c3)
}}
"""


def _graph_state(graphs: ModuleGraph) -> list[object]:
    """Everything later passes read of a graph copy: graphs, nodes in list order with their
    operands and users in order, roots, parameters, and the name uniquers."""
    state: list[object] = [[g.name for g in graphs.graphs], sorted(graphs.names.names_in_use()),
                           sorted(graphs.computation_names.names_in_use())]
    for graph in graphs.graphs:
        state.append((graph.name, graph.is_fusion, graph.root.name,
                      [p.name for p in graph.params]))
        state.extend((n.name, n.op, n.shape, dict(n.attrs), n.metadata, n.extra,
                      [o.name for o in n.operands], [u.name for u in n.users],
                      [c.name for c in n.calls]) for n in graph.nodes)
    return state


@pytest.mark.parametrize("limit", [2, 3, 7, 128])
@pytest.mark.parametrize("n", [129, 256, 257, 600])
def test_the_graph_split_leaves_the_graphs_as_the_frozen_round_trip(n: int, limit: int) -> None:
    module = parse_module(_wide_concatenates(n))
    # The module as a graph copy freezes it (instructions in post order): what the round trip
    # hands the frozen pass.
    with ModuleGraph.from_module(module) as graphs:
        frozen_in = graphs.to_module()
    frozen_log: list[DecisionRecord] = []
    frozen, frozen_changed = VariadicOpSplitter(limit).run(frozen_in, frozen_log)
    graph_log: list[DecisionRecord] = []
    with ModuleGraph.from_module(module) as graphs:
        changed = GraphVariadicOpSplitter(limit).run_on_graphs(graphs, graph_log)
        with ModuleGraph.from_module(frozen) as reloaded:
            assert _graph_state(graphs) == _graph_state(reloaded)
            assert module_text(graphs.to_module()) == module_text(reloaded.to_module())
            graphs.normalize()
            reloaded.normalize()
            assert _graph_state(graphs) == _graph_state(reloaded)
    assert changed is frozen_changed is True
    assert graph_log == frozen_log
    assert len(graph_log) == 5  # entry, loop body, callee; not the fused computation


def test_the_graph_split_names_as_the_frozen_pass_after_fused_names_change() -> None:
    # A fused instruction that shares a top-level name is renamed when the copy is frozen
    # (`concatenate.50.clone` -> `concatenate.50`); the new concatenates are numbered after it.
    operands = _operands(["e", "x", "concatenate.50.clone"], 400)
    module = parse_module(f"""
HloModule renamed

%fused_body (fp: f32[2]) -> f32[2] {{
  %fp = f32[2] parameter(0)
  %fx = f32[2] exponential(%fp)
  ROOT %fe = f32[2] negate(%fx)
}}

ENTRY %main (x: f32[2]) -> f32[800] {{
  %x = f32[2] parameter(0)
  %concatenate.50.clone = f32[2] sine(%x)
  %e = f32[2] fusion(%x), kind=kLoop, calls=%fused_body
  ROOT %c = f32[800] concatenate({operands}), dimensions={{0}}
}}
""")
    results = []
    for in_place in (True, False):
        with ModuleGraph.from_module(module) as graphs:
            for graph in graphs.graphs:
                for node in graph.nodes:
                    if node.name == "fx":
                        node.name = "concatenate.50.clone"
            if in_place:
                GraphVariadicOpSplitter().run_on_graphs(graphs)
            else:
                graphs.reload(VariadicOpSplitter().run(graphs.to_module())[0])
            results.append((module_text(graphs.to_module()), _graph_state(graphs)))
    assert results[0] == results[1]
    assert "concatenate.50 = f32[2]{0} exponential" in results[0][0]
    assert "concatenate.51 = f32[256]" in results[0][0]


@pytest.mark.parametrize("strategy", ["xla", "xla+relax_concatenate", "xla-gpu"])
def test_wide_concatenates_in_loops_and_calls_decide_as_round_trips(strategy: str) -> None:
    module = parse_module(_wide_concatenates(300))
    steps = parse_strategy(strategy).steps(None)
    shared_text, shared_log = _run(module, steps)
    frozen_text, frozen_log = _run(module, _frozen_steps(steps))
    assert shared_text == frozen_text and shared_log == frozen_log
    assert sum("concatenate-split" in record for record in shared_log) == 5
