"""The launch dimensions xla-gpu's GPU model gives a reduction kernel: the reduction emitter's
(MlirRowReductionFusion, MlirColumnReductionFusion), not one thread per output element."""

from __future__ import annotations

from hlofuse.fusion.gpu_devices import device
from hlofuse.fusion.gpu_model import GpuCostModel, kernel_reduction, reduction_launch
from hlofuse.fusion.graph import Node
from hlofuse.fusion.module_graph import ModuleGraph
from hlofuse.fusion.properties import current_xla_rules
from hlofuse.ir.parser import parse_module

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
