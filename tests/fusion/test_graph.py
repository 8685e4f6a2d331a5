"""The mutable fusion graph: lossless conversion, XLA's post order, fusion surgery."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.fusion.graphs.fusing import (
    create_fusion,
    fuse_instruction,
    fuse_into_multi_output,
    merge_fusion,
)
from hlofuse.fusion.graphs.module_graph import ModuleGraph
from hlofuse.ir.builder import NameUniquer
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.ir.verifier import verify
from hlofuse.reference.interpreter import evaluate, flatten_value

from tests.conftest import CORPUS, load_corpus_case

SMALL = """HloModule m

ENTRY main {
  p0 = f32[4]{0} parameter(0)
  p1 = f32[4]{0} parameter(1)
  a = f32[4]{0} add(p0, p1), metadata={source_file="f.py" source_line=1}
  b = f32[4]{0} multiply(a, p1)
  c = f32[4]{0} negate(a)
  ROOT t = (f32[4]{0}, f32[4]{0}) tuple(b, c)
}
"""


def test_round_trip_is_lossless() -> None:
    for name in CORPUS:
        module = parse_module(load_corpus_case(name)[0])
        again = ModuleGraph.from_module(module).to_module()
        verify(again)
        assert module_text(again) == module_text(module), name


def test_post_order_follows_xla() -> None:
    graph = ModuleGraph.from_module(parse_module(SMALL))
    assert graph.entry is not None
    # DFS from the user-less root, first operand first
    assert [n.name for n in graph.entry.post_order()] == ["p0", "p1", "a", "b", "c", "t"]
    reach = graph.entry.reachability()
    nodes = {n.name: n for n in graph.entry.nodes}
    assert reach.is_reachable(nodes["a"], nodes["t"]) and not reach.is_reachable(nodes["b"],
                                                                                 nodes["c"])
    assert not reach.is_connected(nodes["b"], nodes["c"])


def test_names_follow_xla() -> None:
    names = NameUniquer(bare_first=True)
    names.reserve("add.3")
    assert [names.unique("fusion"), names.unique("fusion"), names.unique("add.3")] == [
        "fusion", "fusion.1", "add"]
    names.reserve("fusion.3")
    assert [names.unique("fusion"), names.unique("fusion")] == ["fusion.2", "fusion.4"]
    assert "fusion.3" in names and "fusion.5" not in names


def test_parser_style_names_continue_after_the_highest_reserved() -> None:
    names = NameUniquer()
    names.reserve("add.7")
    assert [names.unique("add"), names.unique("add.2"), names.unique("mul")] == [
        "add.8", "add.9", "mul.0"]


def test_duplicating_a_producer_clones_it_under_a_new_name() -> None:
    module = parse_module(SMALL)
    inputs = [np.arange(4, dtype=np.float32), np.ones(4, np.float32)]
    graph = ModuleGraph.from_module(module)
    assert graph.entry is not None
    nodes = {n.name: n for n in graph.entry.nodes}
    f1 = create_fusion(nodes["b"], "kLoop")
    fuse_instruction(f1, nodes["a"])
    f2 = create_fusion(nodes["c"], "kLoop")
    fuse_instruction(f2, nodes["a"])
    graph.entry.remove(nodes["a"])
    fused = graph.to_module()
    verify(fused)
    text = module_text(fused)
    assert "a = f32[4]{0} add(" in text and "a.clone = f32[4]{0} add(" in text
    assert text.count('source_line=1') == 2  # both copies keep the user's line
    np.testing.assert_array_equal(flatten_value(evaluate(fused, inputs))[0],
                                  flatten_value(evaluate(module, inputs))[0])


def test_multi_output_fusion_redirects_users() -> None:
    module = parse_module(SMALL)
    inputs = [np.arange(4, dtype=np.float32), np.full(4, 2, np.float32)]
    graph = ModuleGraph.from_module(module)
    assert graph.entry is not None
    nodes = {n.name: n for n in graph.entry.nodes}
    fusion = create_fusion(nodes["b"], "kLoop")
    fuse_into_multi_output(fusion, nodes["a"])
    graph.entry.remove(nodes["a"])
    fused = graph.to_module()
    verify(fused)
    assert fusion.shape.is_tuple and len(fusion.shape.elements) == 2
    for got, want in zip(flatten_value(evaluate(fused, inputs)),
                         flatten_value(evaluate(module, inputs))):
        np.testing.assert_array_equal(got, want)


PRODUCER = """HloModule m

fused_producer {
  q0 = f32[4]{0} parameter(0)
  q1 = f32[4]{0} parameter(1)
  s = f32[4]{0} subtract(q0, q1), metadata={source_file="f.py" source_line=2}
  e = f32[4]{0} exponential(s)
  ROOT m = f32[4]{0} multiply(e, s)
}

ENTRY main {
  p0 = f32[4]{0} parameter(0)
  p1 = f32[4]{0} parameter(1)
  f = f32[4]{0} fusion(p0, p1), kind=kLoop, calls=fused_producer
  u = f32[4]{0} negate(f)
  v = f32[4]{0} add(f, p1)
  ROOT t = (f32[4]{0}, f32[4]{0}) tuple(u, v)
}
"""


@pytest.mark.parametrize("last", [False, True])
def test_merging_into_the_last_user_moves_the_body_as_a_copy_would(last: bool) -> None:
    module = parse_module(PRODUCER)
    inputs = [np.linspace(0, 1, 4, dtype=np.float32), np.ones(4, np.float32)]

    def merged(move: bool) -> tuple[str, list[str]]:
        graph = ModuleGraph.from_module(module)
        assert graph.entry is not None
        nodes = {n.name: n for n in graph.entry.nodes}
        producer = nodes["f"]
        consumers = [create_fusion(nodes["u"], "kLoop"), create_fusion(nodes["v"], "kLoop")]
        merge_fusion(consumers[0], producer)
        body = producer.fused
        merge_fusion(consumers[1], producer, last=move and last)
        moved = [n for n in body.nodes if n.op is not Op.PARAMETER]
        graph.entry.remove(producer)
        users = [f"{n.name}:{[u.name for u in n.users]}" for c in consumers
                 for n in c.fused.post_order()]
        fused = graph.to_module()
        verify(fused)
        for got, want in zip(flatten_value(evaluate(fused, inputs)),
                             flatten_value(evaluate(module, inputs)), strict=True):
            np.testing.assert_array_equal(got, want)
        assert not moved if move and last else len(moved) == 3
        return module_text(fused), users

    assert merged(True) == merged(False)


@pytest.mark.thorough
def test_a_fusion_pass_leaves_no_cycles_for_the_collector() -> None:
    """Released graphs are freed by reference counting: left to the cycle collector, the
    graphs of one compile cost more to collect than the passes took to build them."""
    import gc

    from hlofuse.fusion.strategies import run_strategy

    module = parse_module(load_corpus_case("cartpole_rollout")[0])
    run_strategy(module, "xla")  # imports and one-time caches first
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        fused = run_strategy(module, "xla")
        assert gc.collect() == 0
    finally:
        if was_enabled:
            gc.enable()
    assert fused.kernels


def test_the_source_lines_of_a_growing_fusion_follow_its_post_order() -> None:
    module = parse_module(SMALL.replace("b = f32[4]{0} multiply(a, p1)",
                                        'b = f32[4]{0} multiply(a, p1), metadata={'
                                        'source_file="g.py" source_line=2}'))
    with ModuleGraph.from_module(module) as graphs:
        assert graphs.entry is not None
        nodes = {n.name: n for n in graphs.entry.nodes}
        fusion = create_fusion(nodes["b"], "kLoop")
        assert fusion.source_locations() == ("g.py:2",)
        fuse_instruction(fusion, nodes["a"])
        # a is computed before b inside the kernel: its line comes first.
        assert fusion.source_locations() == ("f.py:1", "g.py:2")
        assert fusion.fused.location_count == 2
    assert graphs.graphs == []  # released


def test_the_reachability_map_updated_after_each_fusion_equals_a_rebuilt_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Multi-output fusion updates its map through the grown fusion instead of rebuilding it;
    after every update each pair of live nodes must answer as a freshly built map does."""
    from hlofuse.fusion.graphs.graph import Graph, Node, Reachability
    from hlofuse.fusion.strategies import run_strategy

    update = Reachability.update_after_fusion
    checked = [0]

    def checked_update(self: Reachability, graph: Graph, fusion: Node) -> None:
        update(self, graph, fusion)
        fresh = graph.reachability()
        nodes = list(graph.nodes)
        for a in nodes:
            assert self.is_present(a)
            for b in nodes:
                assert self.is_reachable(a, b) == fresh.is_reachable(a, b), (a, b)
        checked[0] += 1

    monkeypatch.setattr(Reachability, "update_after_fusion", checked_update)
    # Corpus programs with sibling and producer-consumer multi-output fusions (the rollouts
    # and random-number programs have more, but take longer to check pair by pair).
    for name in ("adam_update", "compare_select_clamp", "convert_types", "integer_bits",
                 "special_floats", "softmax", "while_loop", "cond"):
        text, _, _ = load_corpus_case(name)
        run_strategy(parse_module(text), "xla", debug=False)
    assert checked[0] >= 50
