"""What xla-gpu's priority fusion takes from XLA to order equal priorities and to price
kernels in XLA's own arithmetic: unique ids in creation order (`gpu_ids.py`), times in whole
quarter nanoseconds, the concatenate's flops and launch, the reads a fused kernel shares; and
the simplifier rules and CSE of today's XLA that `xla-gpu` runs before fusion."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.fusion.graphs.cleanup import FusedComputationCse
from hlofuse.fusion.graphs.graph import Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph
from hlofuse.fusion.legality.properties import current_xla_rules
from hlofuse.fusion.strategies import parse_strategy
from hlofuse.fusion.xla_gpu.devices import device
from hlofuse.fusion.xla_gpu.ids import creation_order
from hlofuse.fusion.xla_gpu.launch_dimensions import kernel_launch, kernel_reduction
from hlofuse.fusion.xla_gpu.performance_model import (
    GpuCostModel,
    duration_ticks,
    fused_operand_reads,
    xla_flops,
)
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.passes.arithmetic_identities import ArithmeticIdentities
from hlofuse.passes.cse import CommonSubexpressionElimination
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.manager import FixedPoint

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

SIMPLIFY = """
HloModule m
ENTRY e {
  x = f32[8] parameter(0)
  lo = f32[] constant(-2)
  hi = f32[] constant(2)
  blo = f32[8] broadcast(lo), dimensions={}
  bhi = f32[8] broadcast(hi), dimensions={}
  mx = f32[8] maximum(x, blo)
  cl = f32[8] minimum(bhi, mx)
  one = f32[] constant(1)
  bone = f32[8] broadcast(one), dimensions={}
  sub = f32[8] subtract(cl, bone)
  i = s32[4] iota(), iota_dimension=0
  bi = s32[4,8] broadcast(i), dimensions={0}
  ROOT t = (f32[8], s32[4,8]) tuple(sub, bi)
}
"""

IOTAS = """
HloModule m
ENTRY e {
  i = u32[8] iota(), iota_dimension=0
  j = u32[8] iota(), iota_dimension=0
  s = u32[8] add(i, j)
  k = u32[8] iota(), iota_dimension=0
  l = u32[8] iota(), iota_dimension=0
  c = u32[] constant(3)
  b = u32[8] broadcast(c), dimensions={}
  m = u32[8] multiply(k, b)
  n = u32[8] multiply(l, b)
  ROOT t = (u32[8], u32[8], u32[8], u32[8]) tuple(s, m, n, k)
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
        # The concatenate emitter launches one thread per element of the largest operand.
        assert kernel_launch(nodes["c"]) == (1, 2)
        assert model.launch(model.profile(nodes["c"])) == (1, 2)
        assert kernel_launch(nodes["n"], nodes["c"]) == (1, 2)
        assert kernel_launch(nodes["n"]) is None  # alone, `not` is a loop kernel


# Five keys stacked: more operands than the concatenate emitter takes.
CONCAT5 = """
HloModule m
ENTRY e {
  k0 = u32[2,1] parameter(0)
  k1 = u32[2,3] parameter(1)
  c2 = u32[2,5] concatenate(k0, k1, k0), dimensions={1}
  c5 = u32[2,5] concatenate(k0, k0, k0, k0, k0), dimensions={1}
  ROOT t = (u32[2,5], u32[2,5]) tuple(c2, c5)
}
"""


def test_the_concatenate_emitter_takes_at_most_four_operands() -> None:
    """UseConcatenateFusion; ConcatenateFusion::launch_dimensions launches the loop
    emitter's grid over the operand largest along the concatenated dimension."""
    with ModuleGraph.from_module(parse_module(CONCAT5)) as graphs, current_xla_rules():
        nodes = _nodes(graphs)
        assert kernel_launch(nodes["c2"]) == (1, 6)  # k1: 2 x 3 elements
        assert kernel_launch(nodes["c5"]) is None


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


def test_min_max_become_a_clamp_and_a_constant_subtraction_an_addition() -> None:
    module, changed = ArithmeticIdentities().run(parse_module(SIMPLIFY))
    assert changed
    ops = {i.name: i for i in module.entry.instructions}
    root = module.entry.root
    sub = root.operands[0]
    assert sub.op is Op.ADD
    clamp = sub.operands[0]
    assert clamp.op is Op.CLAMP and clamp.operands[1] is ops["x"]
    negated = sub.operands[1].operands[0].attrs["literal"]
    assert isinstance(negated, np.ndarray) and negated.shape == () and float(negated) == -1.0
    iota = root.operands[1]
    assert iota.op is Op.IOTA and iota.attrs["iota_dimension"] == 0


def test_todays_cse_compares_identical_iotas_as_one_operand() -> None:
    """HloCSE::Run: an instruction reading two identical iotas reads the first twice, and
    instructions that differ only in which identical iota they read are merged; the iotas
    themselves are not (XLA keeps random_uniform's two u64[4] iotas apart)."""
    module, changed = CommonSubexpressionElimination(combine_iotas=True).run(
        parse_module(IOTAS))
    assert changed
    s, m, n, k = module.entry.root.operands
    assert s.operands[0] is s.operands[1] and s.operands[0].name == "i"
    assert m is n and m.operands[0].name == "k"
    assert k.name == "k"
    assert sum(i.op is Op.IOTA for i in module.entry.instructions) == 4
    _, unchanged = CommonSubexpressionElimination().run(parse_module(IOTAS))
    assert not unchanged


# Two Threefry counters inside one fused computation, as priority fusion leaves them: each
# reads its own clone of the same iota (mountain_car_rollout's Threefry kernels hold 24).
FUSED_IOTAS = """
HloModule m
fused {
  p = u32[8] parameter(0)
  i = u64[8] iota(), iota_dimension=0
  ci = u32[8] convert(i)
  a = u32[8] add(ci, p)
  j = u64[8] iota(), iota_dimension=0
  cj = u32[8] convert(j)
  b = u32[8] add(cj, p)
  ROOT x = u32[8] xor(a, b)
}
ENTRY e {
  q = u32[8] parameter(0)
  ROOT f = u32[8] fusion(q), kind=kLoop, calls=fused
}
"""


def test_cse_after_fusion_compares_identical_iotas_as_one_operand() -> None:
    """XLA's GPU fusion pipeline runs today's HloCSE (only_fusion_computations) after priority
    fusion: the two converts of identical iotas are one, so are the adds, and the unused iota
    goes (what joins mountain_car_rollout's two Threefry kernels in multi-output fusion). The
    graph pass of xla-gpu's fusion fixed point and the frozen pass agree; without
    `combine_iotas` (XLA 2022's HloCSE, the `xla` strategy) nothing is merged."""
    for cse in (FusedComputationCse(combine_iotas=True),
                CommonSubexpressionElimination(only_fusion_computations=True,
                                               combine_iotas=True)):
        merged, changed = cse.run(parse_module(FUSED_IOTAS))
        assert changed
        merged, _ = DeadCodeElimination().run(merged)
        fused = next(c for c in merged.computations if c.name == "fused")
        ops = [i.op for i in fused.instructions]
        assert ops.count(Op.IOTA) == 1 and ops.count(Op.CONVERT) == 1
        assert ops.count(Op.ADD) == 1
        root = fused.root
        assert root.operands[0] is root.operands[1]
    _, unchanged = FusedComputationCse().run(parse_module(FUSED_IOTAS))
    assert not unchanged
    for strategy, combines in (("xla-gpu", True), ("xla", False), ("priority", False)):
        fusion = next(s for s in parse_strategy(strategy).steps()
                      if isinstance(s, FixedPoint) and s.label == "fusion")
        assert FusedComputationCse(combine_iotas=combines) in fusion.passes, strategy


# A row sum and an unfused negation of it.
REDUCED = """
HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p = f32[64,256] parameter(0)
  z = f32[] constant(0)
  r = f32[64] reduce(p, z), dimensions={1}, to_apply=add
  ROOT n = f32[64] negate(r)
}
"""


def test_the_hero_walk_stays_inside_the_kernel() -> None:
    """FindNonTrivialHero walks the fusion's instructions only: alone, the negation of a
    reduction is a loop kernel; with the reduction fused into it, the reduction is its
    hero."""
    with ModuleGraph.from_module(parse_module(REDUCED)) as graphs, current_xla_rules():
        nodes = _nodes(graphs)
        assert kernel_reduction(nodes["n"]) is None
        assert kernel_launch(nodes["n"]) is None
        assert kernel_reduction(nodes["n"], nodes["r"]) is nodes["r"]


# rollout_mountain_car_mlp's argmax over three actions: a reduce of the values and their
# indices, which XLA runs with the loop emitter (rows of 3 are no tiled reduction).
ARGMAX_OF_THREE = """
HloModule m
argmax {
  a = f32[] parameter(0)
  i = s32[] parameter(1)
  b = f32[] parameter(2)
  j = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  ne = pred[] compare(a, a), direction=NE
  either = pred[] or(gt, ne)
  v = f32[] select(either, a, b)
  eq = pred[] compare(a, b), direction=EQ
  lt = pred[] compare(i, j), direction=LT
  tie = pred[] and(eq, lt)
  first = pred[] or(either, tie)
  k = s32[] select(first, i, j)
  ROOT t = (f32[], s32[]) tuple(v, k)
}
ENTRY e {
  x = f32[8,3] parameter(0)
  iota = s32[8,3] iota(), iota_dimension=1
  lo = f32[] constant(-inf)
  zero = s32[] constant(0)
  r = (f32[8], s32[8]) reduce(x, iota, lo, zero), dimensions={1}, to_apply=argmax
  ROOT index = s32[8] get-tuple-element(r), index=1
}
"""


def test_a_variadic_reduce_launches_one_thread_per_element_of_its_first_result() -> None:
    """LoopFusion's GetIndexShape: 8 threads, not 16; XLA's priority-fusion log of
    rollout_mountain_car_mlp prices this reduce at 1.01425 us (launch included): 432 flops
    on 8 threads (28 flops/ns) and 3 ns of memory."""
    with ModuleGraph.from_module(parse_module(ARGMAX_OF_THREE)) as graphs, \
            current_xla_rules():
        nodes = _nodes(graphs)
        assert kernel_launch(nodes["r"]) == (1, 8)
        assert GpuCostModel(device("h100")).time(nodes["r"]) == pytest.approx(1.01425e-6,
                                                                             abs=1e-12)

