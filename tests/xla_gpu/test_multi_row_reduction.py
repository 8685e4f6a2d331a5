"""XLA's MultiRowReductionFusion launch (`reduction.cc`), GpuHloCostAnalysis's reads of a
reduce's initial value (`HandleReduce`), HloCostAnalysis's reduce-window flops and the hero
of a reduction to a scalar, as xla-gpu prices them: HLO text in, launch dimensions and XLA's
own priority-fusion figures out."""

from __future__ import annotations

import pytest

from hlofuse.fusion.graphs.graph import Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph
from hlofuse.fusion.legality.properties import current_xla_rules
from hlofuse.fusion.xla_gpu.devices import device
from hlofuse.fusion.xla_gpu.launch_dimensions import (
    kernel_io_bits,
    kernel_launch,
    kernel_reduction,
    multi_row_launch,
    reduction_launch,
)
from hlofuse.fusion.xla_gpu.performance_model import (
    GpuCostModel,
    duration_ticks,
    operand_reads,
    reduce_window_count,
    xla_flops,
)
from hlofuse.ir.parser import parse_module

# rollout_reacher_logged's distance to the target: the square of a difference of two
# coordinates summed per environment, then its square root; and rows of other lengths.
ROWS = """
HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
add_u8 {
  a = u8[] parameter(0)
  b = u8[] parameter(1)
  ROOT c = u8[] add(a, b)
}
ENTRY e {
  d = f32[8,2] parameter(0)
  zero = f32[] constant(0)
  sq = f32[8,2] multiply(d, d)
  dist2 = f32[8] reduce(sq, zero), dimensions={1}, to_apply=add
  dist = f32[8] sqrt(dist2)
  many = f32[65536,4] parameter(1)
  sums = f32[65536] reduce(many, zero), dimensions={1}, to_apply=add
  bytes = u8[4096,16] parameter(2)
  none = u8[] constant(0)
  counts = u8[4096] reduce(bytes, none), dimensions={1}, to_apply=add_u8
  wide = f32[8,64] parameter(3)
  long = f32[8] reduce(wide, zero), dimensions={1}, to_apply=add
  odd = f32[8,6] parameter(4)
  short = f32[8] reduce(odd, zero), dimensions={1}, to_apply=add
  ROOT t = (f32[8], f32[65536], u8[4096], f32[8], f32[8]) tuple(dist, sums, counts, long, short)
}
"""
H100_CORES = 132


def _nodes(graph_nodes: list[Node]) -> dict[str, Node]:
    return {n.name: n for n in graph_nodes}


def test_rows_of_a_power_of_two_run_several_to_a_block() -> None:
    """MultiRowReductionFusion: a warp reduces rows of up to 32 vectors; the vector halves
    while there are fewer blocks than cores. Rows of 2 floats (8 of them): one block of
    8 x 2 threads, not rounded up to a warp; 65,536 rows of 4 floats keep vectors of 2
    (512 blocks of 128 x 2 threads); rows of 16 bytes (u8 in and out) take vectors of 8 at
    first, halved down to 1 for 4096 rows (32, 64 and 128 blocks are fewer than H100's 132
    cores, 256 blocks of 16 x 16 threads are not); rows of 64
    floats do not fit a warp once the vector is 1, and rows of 6 are no power of two: the row
    emitter runs those."""
    with ModuleGraph.from_module(parse_module(ROWS)) as graphs, current_xla_rules():
        entry = graphs.entry
        assert entry is not None
        nodes = _nodes(list(entry.nodes))
        assert kernel_io_bits(nodes["dist2"]) == (32, 32)
        assert reduction_launch(nodes["dist2"]) == (1, 16)
        assert kernel_launch(nodes["dist"], nodes["dist2"]) == (1, 16)
        assert multi_row_launch(nodes["sums"], (32, 32), H100_CORES) == (512, 256)
        assert kernel_io_bits(nodes["counts"]) == (8, 8)
        assert multi_row_launch(nodes["counts"], (8, 8), H100_CORES) == (256, 256)
        assert multi_row_launch(nodes["long"], (32, 32), H100_CORES) is None
        assert multi_row_launch(nodes["short"], (32, 32), H100_CORES) is None
        assert reduction_launch(nodes["short"]) == (1, 256)  # 8 rows of a warp each


def test_a_reduce_reads_its_initial_value_once_per_result_element() -> None:
    """GpuHloCostAnalysis::HandleReduce: the initial value's bytes accessed are the result's
    elements times its size, its utilisation that element count."""
    with ModuleGraph.from_module(parse_module(ROWS)) as graphs, current_xla_rules():
        entry = graphs.entry
        assert entry is not None
        nodes = _nodes(list(entry.nodes))
        assert operand_reads(nodes["dist2"], nodes["zero"]) == 8.0
        assert operand_reads(nodes["sums"], nodes["zero"]) == 65536.0
        assert operand_reads(nodes["dist2"], nodes["sq"]) == 16.0


@pytest.mark.parametrize(("producer", "consumer", "fused", "unfused"), [
    # XLA's priority-fusion log of rollout_reacher_logged: mul.31 into reduce_sum.37, then
    # reduce_sum.37 into sqrt.1 (us_fused, us_unfused).
    ("sq", "dist2", 1.00175, 2.0035),
    ("dist2", "dist", 1.0105, 2.02075),
])
def test_the_distance_is_priced_as_xla_prices_it(producer: str, consumer: str, fused: float,
                                                 unfused: float) -> None:
    with ModuleGraph.from_module(parse_module(ROWS)) as graphs, current_xla_rules():
        entry = graphs.entry
        assert entry is not None
        nodes = _nodes(list(entry.nodes))
        model = GpuCostModel(device("h100"))
        first, second = nodes[producer], nodes[consumer]
        assert duration_ticks(model.fused_time(first, second)) == round(fused * 4000)
        assert (duration_ticks(model.time(first)) + duration_ticks(model.time(second))
                == round(unfused * 4000))


# rollout_reacher_logged's angle sum (a reduce-window over pairs, padded in front), a scan
# written as a reduce-window padded on both sides, and the negated total reward.
WINDOWS = """
HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY e {
  a = f32[8,2] parameter(0)
  zero = f32[] constant(0)
  pairs = f32[8,2] reduce-window(a, zero), window={size=1x2 pad=0_0x1_0}, to_apply=add
  c = f32[8,2] cosine(pairs)
  b = f32[4,8] parameter(1)
  scan = f32[4,8] reduce-window(b, zero), window={size=1x15 pad=0_0x7_7}, to_apply=add
  d = f32[8] parameter(2)
  total = f32[] reduce(d, zero), dimensions={0}, to_apply=add
  reward = f32[] negate(total)
  ROOT t = (f32[8,2], f32[4,8], f32[]) tuple(c, scan, reward)
}
"""


def test_a_reduce_window_applies_its_reducer_once_less_than_its_window() -> None:
    """HloCostAnalysis::HandleReduceWindow: (window - 1) reductions per output element, 16
    additions of 7 flops for the pairs; a scan (one windowed dimension padded by its length
    less one on both sides) output / length + length - 1 = 11. XLA prices the pairs at
    1.002 us alone and 1.25025 us fused into the cosine (priority-fusion log: 3.49375 us
    unfused with cos.3 and sin.3, 2.49525 fused)."""
    with ModuleGraph.from_module(parse_module(WINDOWS)) as graphs, current_xla_rules():
        entry = graphs.entry
        assert entry is not None
        nodes = _nodes(list(entry.nodes))
        assert reduce_window_count(nodes["pairs"]) == 16
        assert xla_flops(nodes["pairs"]) == 16 * 7
        assert reduce_window_count(nodes["scan"]) == 4 + 7
        model = GpuCostModel(device("h100"))
        assert duration_ticks(model.time(nodes["pairs"])) == 4008
        assert duration_ticks(model.fused_time(nodes["pairs"], nodes["c"])) == 5001


def test_a_unary_op_on_a_reduction_to_a_scalar_keeps_it_the_hero() -> None:
    """XLA's FindNonTrivialHero walks through any op of one operand (IsIntermediate), a
    scalar one too: the negated sum is a reduction kernel, so XLA fuses rollout_reacher_
    logged's `reduce_sum.39` into `negate.5` (1.00175 us)."""
    with ModuleGraph.from_module(parse_module(WINDOWS)) as graphs, current_xla_rules():
        entry = graphs.entry
        assert entry is not None
        nodes = _nodes(list(entry.nodes))
        assert kernel_reduction(nodes["reward"], nodes["total"]) is nodes["total"]
