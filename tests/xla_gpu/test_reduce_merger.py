"""XLA's merge of a reduce of a reduce (`AlgebraicSimplifierVisitor::HandleReduce`,
`MergeReduces`), as `xla-gpu` runs it: HLO text in, HLO text out, values the reference
interpreter's; and the estimate of minatar_rollout's board sum, which decides XLA's first
priority-fusion round there."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse.fusion.graphs.graph import Node
from hlofuse.fusion.strategies import run_strategy
from hlofuse.fusion.xla_gpu import performance_model as pm
from hlofuse.fusion.xla_gpu.ids import InstructionIds
from hlofuse.fusion.xla_gpu.reduce_merger import ReduceMerger, merged_dimensions
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.decision_log import DecisionLog
from hlofuse.passes.manager import Pass, Pipeline

from tests.xla_gpu.test_gather_scatter import _same_values, _text

DATA = Path(__file__).parents[1] / "data" / "xla_gpu"

# minatar_rollout's board sum (jnp.sum over the last dimensions, then over the batch), with
# a second sum whose reducer is another computation of the same kind, a max of a sum (not
# merged: different reducers), a sum with another initial value, and an inner sum that is
# also an output (kept for that user).
REDUCES = """
HloModule reduces
sum_a {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}
sum_b {
  x = s32[] parameter(0)
  y = s32[] parameter(1)
  ROOT t = s32[] add(y, x)
}
max_s {
  p = s32[] parameter(0)
  q = s32[] parameter(1)
  ROOT m = s32[] maximum(p, q)
}
ENTRY e {
  board = s8[64,2,10,10] parameter(0)
  wide = s32[64,2,10,10] convert(board)
  zero = s32[] constant(0)
  zero2 = s32[] constant(0)
  one = s32[] constant(1)
  rows = s32[64] reduce(wide, zero), dimensions={1,2,3}, to_apply=sum_a
  total = s32[] reduce(rows, zero2), dimensions={0}, to_apply=sum_b
  cells = s32[64,10] reduce(wide, zero), dimensions={1,2}, to_apply=sum_a
  peak = s32[10] reduce(cells, zero), dimensions={0}, to_apply=max_s
  shifted = s32[64] reduce(cells, one), dimensions={1}, to_apply=sum_a
  ROOT r = (s32[], s32[10], s32[64], s32[64]) tuple(total, peak, shifted, rows)
}
"""


def _run(module: Module, ids: InstructionIds | None = None) -> tuple[Module, DecisionLog]:
    log = DecisionLog()
    passes: list[Pass] = [ReduceMerger(ids), DeadCodeElimination()]
    out, _ = Pipeline(passes, debug=True, log=log).run(module)
    return out, log


def test_a_reduce_of_a_reduce_is_one_reduce() -> None:
    """XLA's per-pass dump of minatar_rollout after "algsimp": `reduce_sum.15 = s32[]
    reduce(convert_element_type.14, constant.101), dimensions={0,1,2,3},
    to_apply=region_4.4`: the outer reduce's name and reducer, the inner's operand; the
    initial values are two constants of one value (Identical), the reducers two additions
    with their parameters in either order (ReductionComputationsEquivalent)."""
    module = parse_module(REDUCES)
    ids = InstructionIds()
    ids.record(module)
    out, log = _run(module, ids)
    total, peak, shifted, rows = out.entry.root.operands
    assert _text(total) == ("total = s32[] reduce(wide, zero2), dimensions={0,1,2,3}, "
                            "to_apply=sum_b")
    assert "total" not in ids.ranks and "rows" in ids.ranks  # a new instruction to XLA
    # A max of sums and a sum from another initial value stay two reduces.
    assert peak.operands[0].name == "cells" and shifted.operands[0].name == "cells"
    # The inner reduce stays for its other user.
    assert rows.name == "rows" and rows.operands[0].name == "wide"
    assert [r.rule for r in log.records if r.rule == "reduce-of-reduce"] == [
        "reduce-of-reduce"]
    rng = np.random.default_rng(0)
    _same_values(module, out, [rng.integers(-128, 128, (64, 2, 10, 10)).astype(np.int8)])


def test_the_outer_dimensions_map_into_the_inner_operand() -> None:
    """MergeReduces shifts each outer dimension past every inner reduced dimension at or
    below it, then merges the two sorted lists."""
    assert merged_dimensions((1, 2, 3), (0,)) == (0, 1, 2, 3)
    assert merged_dimensions((1,), (1,)) == (1, 2)
    assert merged_dimensions((0, 2), (0, 1)) == (0, 1, 2, 3)
    assert merged_dimensions((3,), (0, 2)) == (0, 2, 3)


@pytest.mark.thorough
def test_minatar_board_sum_is_priced_as_xla_prices_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the two sums one reduce of the whole board (12,800 elements, one block of the row
    reduction emitter), the first fusion of minatar_rollout's priority fusion is XLA's:
    `convert_element_type.14` into the board sum, 1.2095 us fused and 2.83075 us unfused in
    XLA's priority-fusion log (hlofuse estimated 1.02625 and 2.1205 for the two reduces)."""
    seen: dict[str, tuple[float, float, float]] = {}
    fused_entry = pm.GpuCostModel._fused_entry

    def watch(self: pm.GpuCostModel, producer: Node, consumer: Node
              ) -> tuple[tuple[object, ...], object, float]:
        entry = fused_entry(self, producer, consumer)
        if producer.name == "convert_element_type.14" and consumer.name == "reduce_sum.15":
            seen["pair"] = (entry[2], self.time(producer), self.time(consumer))
        return entry

    monkeypatch.setattr(pm.GpuCostModel, "_fused_entry", watch)
    run_strategy(parse_module((DATA / "minatar_rollout.before.hlo").read_text()),
                 "xla-gpu+device=h100", debug=False)
    fused, producer, consumer = seen["pair"]
    assert round(fused * 1e6, 5) == 1.2095
    assert round((producer + consumer) * 1e6, 5) == 2.83075
