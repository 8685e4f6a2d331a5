"""XLA's GPU cost analysis as xla-gpu's model counts it: utilisation-weighted flops and reads
(FusionCalculateUtilizations with repeated input accesses counted), the reads a fused kernel
shares (GetSharedOperandBytesAccessed) and the reduction emitter's launch dimensions."""

from __future__ import annotations

from hlofuse.fusion.graphs.graph import Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph
from hlofuse.fusion.legality.properties import current_xla_rules
from hlofuse.fusion.xla_gpu.devices import device
from hlofuse.fusion.xla_gpu.launch_dimensions import (
    kernel_concatenate,
    kernel_launch,
    kernel_reduction,
    reduction_launch,
)
from hlofuse.fusion.xla_gpu.performance_model import (
    GpuCostModel,
    consumer_utilisation,
    duration_ticks,
    fused_operand_reads,
    operand_reads,
    xla_flops,
    xla_utilisation,
)
from hlofuse.ir.parser import parse_module

# A one-element key broadcast into two places of a 256-element kernel, as Threefry's key
# schedule does: XLA reads (and recomputes) the key once per element per place.
KEY_BROADCAST = """
HloModule m
fused {
  k = u32[1] parameter(0)
  x = u32[256] parameter(1)
  r = u32[] reshape(k)
  b1 = u32[256] broadcast(r), dimensions={}
  s = u32[256] add(x, b1)
  b2 = u32[256] broadcast(r), dimensions={}
  ROOT t = u32[256] xor(s, b2)
}
ENTRY e {
  key = u32[1] parameter(0)
  bits = u32[256] parameter(1)
  ROOT f = u32[256] fusion(key, bits), kind=kLoop, calls=fused
}
"""

SHARED_OPERAND = """
HloModule m
ENTRY e {
  p = f32[1024] parameter(0)
  q = f32[1024] parameter(1)
  a = f32[1024] add(p, q)
  ROOT m = f32[1024] multiply(a, p)
}
"""

ADD = """
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
"""

REDUCTIONS = "HloModule m\n" + ADD + """
ENTRY e {
  v = f32[256] parameter(0)
  w = f32[8,4] parameter(1)
  c = f32[64,100] parameter(2)
  z = f32[] constant(0)
  e = f32[256] exponential(v)
  row = f32[] reduce(e, z), dimensions={0}, to_apply=add
  short = f32[8] reduce(w, z), dimensions={1}, to_apply=add
  column = f32[100] reduce(c, z), dimensions={0}, to_apply=add
  ROOT t = (f32[], f32[8], f32[100]) tuple(row, short, column)
}
"""


def _nodes(graph_nodes: list[Node]) -> dict[str, Node]:
    return {n.name: n for n in graph_nodes}


def test_a_broadcast_key_is_read_and_counted_once_per_element_per_place() -> None:
    with ModuleGraph.from_module(parse_module(KEY_BROADCAST)) as graphs, current_xla_rules():
        entry = graphs.entry
        assert entry is not None
        nodes = _nodes(list(entry.nodes))
        fusion = nodes["f"]
        use = xla_utilisation(fusion)
        # Each broadcast reads its one element 256 times; add and xor cost 3 flops each.
        assert use.parameters == {0: 512.0, 1: 1.0}
        assert xla_flops(fusion) == 2 * 256 * 3
        assert operand_reads(fusion, nodes["key"]) == 512.0
        assert operand_reads(fusion, nodes["bits"]) == 256.0


def test_a_fused_producer_costs_its_flops_times_the_consumers_utilisation() -> None:
    with ModuleGraph.from_module(parse_module(SHARED_OPERAND)) as graphs, current_xla_rules():
        entry = graphs.entry
        assert entry is not None
        nodes = _nodes(list(entry.nodes))
        producer, consumer = nodes["a"], nodes["m"]
        assert consumer_utilisation(consumer, producer) == 1.0
        model = GpuCostModel(device("h100"))
        fused = model.fused_profile(producer, consumer)
        # f32 add: 7 flops per element, multiply: 3 (sm_90 profiles).
        assert fused.operations == xla_flops(producer) + xla_flops(consumer) == 1024 * (7 + 3)
        # p is read by both at the same elements: once in the fused kernel.
        assert fused_operand_reads(producer, consumer) == {nodes["p"]: 1024.0,
                                                            nodes["q"]: 1024.0}


def test_reductions_launch_what_the_reduction_emitter_launches() -> None:
    with ModuleGraph.from_module(parse_module(REDUCTIONS)) as graphs, current_xla_rules():
        entry = graphs.entry
        assert entry is not None
        nodes = _nodes(list(entry.nodes))
        # A 256-element row: 16 elements per thread, one warp.
        assert reduction_launch(nodes["row"]) == (1, 32)
        # Rows of 4: eight rows per warp.
        assert reduction_launch(nodes["short"]) == (1, 32)
        # A column reduction: 32x32 threads per block, a block per 32 kept columns.
        assert reduction_launch(nodes["column"]) == (4, 1024)
        model = GpuCostModel(device("h100"))
        assert kernel_reduction(nodes["row"]) is nodes["row"]
        assert kernel_reduction(nodes["row"], nodes["e"]) is nodes["row"]
        assert kernel_reduction(nodes["e"]) is None
        assert model.launch(model.profile(nodes["row"])) == (1, 32)
        assert model.launch(model.fused_profile(nodes["e"], nodes["row"])) == (1, 32)
        assert model.launch(model.profile(nodes["e"])) == (2, 128)


# rollout_rigid_body's loop body: a step's reward written into row i of the f32[30,8] history
# (XLA's fusion.7, after its bitcast was fused) and the subtract computing it (sub.8).
DUS_ROW = """
HloModule m
fused_dus {
  p0 = f32[30,8] parameter(0)
  p1 = s32[] parameter(1)
  p2 = f32[8] parameter(2)
  zero = s32[] constant(0)
  row = f32[1,8] bitcast(p2)
  ROOT update = f32[30,8] dynamic-update-slice(p0, row, p1, zero)
}
ENTRY e {
  buf = f32[30,8] parameter(0)
  i = s32[] parameter(1)
  a = f32[8] parameter(2)
  b = f32[8] parameter(3)
  s = f32[8] subtract(a, b)
  f = f32[30,8] fusion(buf, i, s), kind=kLoop, calls=fused_dus
  r = f32[1,8] bitcast(s)
  z = s32[] constant(0)
  d = f32[30,8] dynamic-update-slice(buf, r, i, z)
  ROOT t = (f32[30,8], f32[30,8]) tuple(f, d)
}
"""


def test_a_dynamic_update_slice_is_priced_in_place() -> None:
    """The base of a dynamic-update-slice aliases its output: XLA's cost analysis reads none
    of it (HandleDynamicUpdateSlice; a fusion's root: FusionProcessOutputBytesAccessed zeroes
    its utilisation), and before buffer assignment the in-place emitter is assumed, which
    launches over the update (InPlaceDynamicUpdateSliceFusion). XLA's priority-fusion dump of
    rollout_rigid_body prices sub.8 with its consumer fusion.7 at 2.00225 us apart and at
    1.00175 us fused."""
    with ModuleGraph.from_module(parse_module(DUS_ROW)) as graphs, current_xla_rules():
        entry = graphs.entry
        assert entry is not None
        nodes = _nodes(list(entry.nodes))
        fusion, bare, sub = nodes["f"], nodes["d"], nodes["s"]
        assert xla_utilisation(fusion).parameters[0] == 0.0
        assert operand_reads(fusion, nodes["buf"]) == operand_reads(bare, nodes["buf"]) == 0.0
        assert kernel_launch(fusion) == kernel_launch(bare) == (1, 8)
        assert kernel_launch(fusion, sub) == (1, 8)
        model = GpuCostModel(device("h100"))
        assert duration_ticks(model.time(sub)) + duration_ticks(model.time(fusion)) == 8009
        assert duration_ticks(model.fused_time(sub, fusion)) == 4007


# rollout_jacobi_rope's observation: the cos and sin halves stacked along the minor dimension
# (`stack.17`, a concatenate of two [8,10,1]) and a select of it, as a producer fusion and its
# consumer; `two` has a second concatenate in its kernel, `out` a reduce after the
# concatenate.
STACK_SELECT = """
HloModule m
fused_stack {
  cos = f32[8,10,1] parameter(0)
  sin = f32[8,10,1] parameter(1)
  ROOT stack.17 = f32[8,10,2] concatenate(cos, sin), dimensions={2}
}
fused_two {
  a = f32[8,10,2] parameter(0)
  x = f32[8,10,1] parameter(1)
  cc = f32[8,10,2] concatenate(x, x), dimensions={2}
  ROOT sum2 = f32[8,10,2] add(a, cc)
}
ENTRY e {
  p = pred[8,10,2] parameter(0)
  c = f32[8,10,1] parameter(1)
  s = f32[8,10,1] parameter(2)
  old = f32[8,10,2] parameter(3)
  stack = f32[8,10,2] fusion(c, s), kind=kInput, calls=fused_stack
  select_n.5 = f32[8,10,2] select(p, stack, old)
  two = f32[8,10,2] fusion(stack, s), kind=kLoop, calls=fused_two
  zero = f32[] constant(0)
  out = f32[8,10] reduce(stack, zero), dimensions={2}, to_apply=sum
  ROOT t = (f32[8,10,2], f32[8,10,2], f32[8,10]) tuple(select_n.5, two, out)
}
sum {
  l = f32[] parameter(0)
  r = f32[] parameter(1)
  ROOT plus = f32[] add(l, r)
}
"""


def test_a_concatenate_behind_a_select_runs_the_concatenate_emitter() -> None:
    """FindNonTrivialHero's wider search (FindHero, ir_emission_utils.cc): through element-wise
    ops of up to three operands, the only concatenate is the hero, so the select fused with
    the stacking runs XLA's concatenate emitter, launched over one [8,10,1] operand: XLA's
    priority-fusion log prices stack.17 fused into select_n.5 at 1.20525 us, its own kernel's
    time plus the select's compute; with the loop emitter's launch it would be 1.06425 us.
    Two concatenates on the way, or a reduce, leave the loop emitter."""
    with ModuleGraph.from_module(parse_module(STACK_SELECT)) as graphs, current_xla_rules():
        entry = graphs.entry
        assert entry is not None
        nodes = _nodes(list(entry.nodes))
        stack, select = nodes["stack"], nodes["select_n.5"]
        assert kernel_concatenate(select, stack) is not None
        assert kernel_concatenate(select, stack) is kernel_concatenate(stack)
        assert kernel_launch(select, stack) == kernel_launch(stack) == (1, 80)
        assert kernel_concatenate(select) is None  # the concatenate is outside the kernel
        assert kernel_concatenate(nodes["two"], stack) is None
        assert kernel_concatenate(nodes["out"], stack) is None
        model = GpuCostModel(device("h100"))
        assert duration_ticks(model.time(stack)) == 4812
        assert duration_ticks(model.fused_time(stack, select)) == 4821
