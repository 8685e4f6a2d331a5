"""What xla-gpu's priority fusion takes from XLA to order equal priorities and to price
kernels in XLA's own arithmetic: unique ids in creation order (`gpu_ids.py`), times in whole
quarter nanoseconds, the concatenate's flops, the reads a fused kernel shares."""

from __future__ import annotations

from hlofuse.fusion.gpu_devices import device
from hlofuse.fusion.gpu_ids import creation_order
from hlofuse.fusion.gpu_model import (
    GpuCostModel,
    duration_ticks,
    fused_operand_reads,
    kernel_launch,
    xla_flops,
)
from hlofuse.fusion.graph import Node
from hlofuse.fusion.module_graph import ModuleGraph
from hlofuse.fusion.properties import current_xla_rules
from hlofuse.ir.parser import parse_module

# The order XLA's translation creates a computation's instructions in: parameters, the
# tuple parameter's elements, constants by their uniquer number (a splat constant's broadcast
# right after it), then the rest in text order.
CREATION = """
HloModule m
ENTRY e {
  t = (f32[4], f32[4]) parameter(0)
  a = f32[4] get-tuple-element(t), index=1
  constant.9 = f32[] constant(2)
  broadcast.9 = f32[4] broadcast(constant.9), dimensions={}
  m = f32[4] multiply(a, broadcast.9)
  b = f32[4] get-tuple-element(t), index=0
  constant.3 = f32[] constant(1)
  broadcast.3 = f32[4] broadcast(constant.3), dimensions={}
  s = f32[4] add(b, broadcast.3)
  ROOT r = f32[4] add(m, s)
}
"""

# Two 2x1 keys stacked along dimension 1 (Threefry's key pair), and a consumer.
CONCAT = """
HloModule m
ENTRY e {
  k0 = u32[2,1] parameter(0)
  k1 = u32[2,1] parameter(1)
  c = u32[2,2] concatenate(k0, k1), dimensions={1}
  ROOT n = u32[2,2] not(c)
}
"""

# `p` is read by the producer and the consumer; `q` only by the consumer.
SHARED = """
HloModule m
ENTRY e {
  p = f32[1024] parameter(0)
  q = f32[1024] parameter(1)
  a = f32[1024] negate(p)
  ROOT m = f32[1024] add(a, q)
}
"""

def _nodes(graphs: ModuleGraph) -> dict[str, Node]:
    assert graphs.entry is not None
    return {n.name: n for n in graphs.entry.nodes}


def test_creation_order_follows_xlas_translation() -> None:
    module = parse_module(CREATION)
    order = [i.name for i in creation_order(module.entry)]
    assert order == ["t", "b", "a", "constant.3", "broadcast.3", "constant.9", "broadcast.9",
                     "m", "s", "r"]


def test_durations_are_whole_quarter_nanoseconds() -> None:
    assert duration_ticks(1e-6) == 4000
    assert duration_ticks(0.125e-9) == 1  # a half tick rounds away from zero
    assert duration_ticks(0.1e-9) == 0
    with ModuleGraph.from_module(parse_module(SHARED)) as graphs, current_xla_rules():
        nodes = _nodes(graphs)
        model = GpuCostModel(device("h100"))
        for node in (nodes["a"], nodes["m"]):
            ticks = model.time(node) * 4e9
            assert abs(ticks - round(ticks)) < 1e-6


def test_a_concatenate_along_a_minor_dimension_costs_400_flops() -> None:
    with ModuleGraph.from_module(parse_module(CONCAT)) as graphs, current_xla_rules():
        nodes = _nodes(graphs)
        # Dimension 1, the first operand one wide (not a multiple of 32): 400 per element.
        assert xla_flops(nodes["c"]) == 400 * 4
        # Along dimension 0 a compare and a branch: 6 per element.
        model = GpuCostModel(device("h100"))
        fused = model.fused_profile(nodes["c"], nodes["n"])
        assert fused.operations == 400 * 4 + 3 * 4  # u32 not: XLA's default 3 flops
        # The concatenate emitter's launch is not modelled: the loop estimate stands.
        assert kernel_launch(nodes["c"]) is None
        assert model.launch(model.profile(nodes["c"])) == (1, 4)


def test_a_concatenate_of_rows_costs_6_flops_per_element() -> None:
    module = parse_module(CONCAT.replace("u32[2,1]", "u32[1,2]").replace(
        "dimensions={1}", "dimensions={0}"))
    with ModuleGraph.from_module(module) as graphs, current_xla_rules():
        assert xla_flops(_nodes(graphs)["c"]) == 6 * 4


def test_only_the_producers_operands_are_shared() -> None:
    with ModuleGraph.from_module(parse_module(SHARED)) as graphs, current_xla_rules():
        nodes = _nodes(graphs)
        reads = fused_operand_reads(nodes["a"], nodes["m"])
        assert reads == {nodes["p"]: 1024.0, nodes["q"]: 1024.0}
