"""What the fusion graph keeps up to date to stay linear in program size gives the answers a
full recount gives: the indexes of special and calling nodes, the post order kept through
`normalize`, and the emission counts of one operand (`indexing.emitted_in`) against a whole
`IndexingEvaluation`."""

from __future__ import annotations

from pathlib import Path

import pytest

from hlofuse.fusion.graphs.graph import SPECIAL_OPS, Graph
from hlofuse.fusion.graphs.module_graph import ModuleGraph
from hlofuse.fusion.legality.emission_counts import IndexingEvaluation, emitted_in
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module

DATA = Path(__file__).resolve().parents[1] / "data"
# The two larger programs are thorough (a second or more each under a strategy).
PROGRAMS = [pytest.param(DATA / "xla_gpu" / f"{name}.before.hlo", id=f"{name}.before",
                         marks=pytest.mark.thorough if name in ("mountain_car_rollout",
                                                                "random_bernoulli") else ())
            for name in ("cartpole_rollout", "mountain_car_rollout", "layer_norm",
                         "random_bernoulli")]


def _fused(path: Path, strategy: str) -> ModuleGraph:
    result = run_strategy(parse_module(path.read_text()), strategy, debug=False)
    return ModuleGraph.from_module(result.module)


def _check_indexes(graph: Graph) -> None:
    assert list(graph.special_nodes) == [n for n in graph.nodes if n.op in SPECIAL_OPS]
    assert list(graph.calling_nodes) == [n for n in graph.nodes if n.calls]


@pytest.mark.parametrize("strategy", ["xla+relax_concatenate", "priority"])
@pytest.mark.parametrize("path", PROGRAMS)
def test_one_operand_counts_equal_a_whole_evaluation(path: Path, strategy: str) -> None:
    with _fused(path, strategy) as graphs:
        asked = 0
        for graph in graphs.graphs:
            for fusion in [n for n in graph.nodes if n.is_fusion]:
                whole = IndexingEvaluation(fusion)
                # Asked in both orders: the counts kept between questions must not depend on
                # which operand came first.
                for operands in (fusion.operands, list(reversed(fusion.operands))):
                    fusion.memo.clear()
                    for operand in operands:
                        assert emitted_in(fusion, operand) == whole.emitted(operand)
                        asked += 1
        assert asked > 0


@pytest.mark.parametrize("path", PROGRAMS)
def test_node_indexes_follow_fusion_and_normalizing(path: Path) -> None:
    with _fused(path, "xla") as graphs:
        for graph in graphs.graphs:
            _check_indexes(graph)
        graphs.normalize()
        for graph in graphs.graphs:
            _check_indexes(graph)
            # The post order kept through normalizing is the one a fresh walk gives.
            kept = graph.post_order()
            assert kept == list(graph.nodes)
            assert kept == graph._compute_post_order()
        # A graph that normalizing left alone is unchanged by a second normalize.
        before = {g.name: (list(g.nodes), [list(n.users) for n in g.nodes])
                  for g in graphs.graphs}
        graphs.normalize()
        after = {g.name: (list(g.nodes), [list(n.users) for n in g.nodes])
                 for g in graphs.graphs}
        assert after == before
