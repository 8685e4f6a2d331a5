"""XLA's unique ids of the instructions its passes re-create (`xla_gpu/ids.py`): a broadcast
that XLA's simplifier re-creates when it folds the reshape or broadcast under it, and the
variadic reduces that XLA's ReductionLayoutNormalizer re-creates after every other pass."""

from __future__ import annotations

import pytest

from hlofuse.fusion.graphs.graph import Node
from hlofuse.fusion.strategies import run_strategy
from hlofuse.fusion.xla_gpu import priority as gpu_priority
from hlofuse.fusion.xla_gpu.ids import (
    InstructionIds,
    NoteRecreatedBroadcasts,
    RecordInstructionIds,
)
from hlofuse.ir.parser import parse_module
from hlofuse.passes.arithmetic_identities import ArithmeticIdentities
from hlofuse.passes.cse import CommonSubexpressionElimination
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.manager import FixedPoint, Pipeline
from hlofuse.passes.simplify import AlgebraicSimplifier

# `b` broadcasts a reshape of a reshape that the simplifier folds away: `b` reads `x` after
# it, as XLA's new broadcast does (HandleBroadcast elides the reshape under it). `c` reads an
# add that CSE replaces by an equal one: XLA re-points `c`, which keeps its id. `d` is left
# alone.
FOLDED = """
HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  r1 = f32[4,1] reshape(x)
  r2 = f32[4] reshape(r1)
  b = f32[4,3] broadcast(r2), dimensions={0}
  s1 = f32[4] add(y, y)
  s2 = f32[4] add(y, y)
  c = f32[4,3] broadcast(s2), dimensions={0}
  d = f32[4,3] broadcast(y), dimensions={0}
  bc = f32[4,3] add(b, c)
  ROOT t = (f32[4,3], f32[4,3], f32[4]) tuple(bc, d, s1)
}
"""


def _simplified(text: str) -> InstructionIds:
    ids = InstructionIds()
    noted = NoteRecreatedBroadcasts(ids)
    steps = (ArithmeticIdentities(), noted, AlgebraicSimplifier(), noted,
             CommonSubexpressionElimination(combine_iotas=True), noted,
             DeadCodeElimination(), noted)
    Pipeline([RecordInstructionIds(ids), FixedPoint(steps)]).run(parse_module(text))
    return ids


def test_a_broadcast_whose_reshape_is_folded_into_it_is_a_new_instruction() -> None:
    ids = _simplified(FOLDED)
    assert "b" not in ids.ranks and "b" in ids.recreated
    assert ids.ranks["c"] == 7 and "c" not in ids.recreated
    assert ids.ranks["d"] == 8 and "d" not in ids.recreated


# An argmax: a reduce of two inputs, fused with its producers. XLA re-creates it after the
# Triton GEMM rewriter, so it has the largest id of the computation's instructions.
ARGMAX = """
HloModule m
max_index {
  a = f32[] parameter(0)
  i = s32[] parameter(1)
  b = f32[] parameter(2)
  j = s32[] parameter(3)
  ge = pred[] compare(a, b), direction=GE
  v = f32[] select(ge, a, b)
  k = s32[] select(ge, i, j)
  ROOT t = (f32[], s32[]) tuple(v, k)
}
ENTRY e {
  x = f32[8,64] parameter(0)
  e = f32[8,64] exponential(x)
  n = f32[8,64] negate(e)
  iota = s32[8,64] iota(), iota_dimension=1
  lo = f32[] constant(-inf)
  zero = s32[] constant(0)
  r = (f32[8], s32[8]) reduce(n, iota, lo, zero), dimensions={1}, to_apply=max_index
  ROOT index = s32[8] get-tuple-element(r), index=1
}
"""


def _priority_ranks(monkeypatch: pytest.MonkeyPatch, text: str) -> dict[str, int]:
    """The rank priority fusion gives each instruction of the computation holding `r`, by
    name, under xla-gpu."""
    orders: list[dict[Node, int]] = []
    init = gpu_priority._GpuPriorityFuser.__init__

    def recording(self: gpu_priority._GpuPriorityFuser, *args: object,
                  **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        orders.append(dict(self.order))

    monkeypatch.setattr(gpu_priority._GpuPriorityFuser, "__init__", recording)
    run_strategy(parse_module(text), "xla-gpu+device=h100", debug=True)
    (order,) = [o for o in orders if any(n.name == "r" for n in o)]
    return {node.name: rank for node, rank in order.items()}


def test_a_variadic_reduce_ranks_after_every_other_instruction(
        monkeypatch: pytest.MonkeyPatch) -> None:
    by_name = _priority_ranks(monkeypatch, ARGMAX)
    assert by_name["r"] == max(by_name.values())
    assert by_name["e"] < by_name["n"] < by_name["r"]


# rollout_reacher_logged's shapes: `limits` broadcasts a constant of two elements (an op of
# the text, `max.9` in XLA, id 867 of 1078), `half` a scalar one (a splat constant: its
# broadcast comes right after the constant); a reshape that is a bitcast, a Threefry uniform's
# bitcast-convert of one width, and an add that reads each.
STAGES = """
HloModule m
ENTRY e {
  x = f32[8,2] parameter(0)
  bits = u32[8,2] parameter(1)
  v = f32[16] parameter(2)
  c = f32[2] constant({0.2, -3.14})
  limits = f32[8,2] broadcast(c), dimensions={1}
  h = f32[] constant(0.5)
  half = f32[8,2] broadcast(h), dimensions={}
  clipped = f32[8,2] maximum(x, limits)
  scaled = f32[8,2] multiply(clipped, half)
  u = f32[8,2] bitcast-convert(bits)
  from_u = f32[8,2] add(u, scaled)
  r = f32[8,2] reshape(v)
  from_r = f32[8,2] add(r, from_u)
  ROOT t = (f32[8,2], f32[8,2]) tuple(from_r, limits)
}
"""


def test_only_a_splat_constants_broadcast_ranks_with_the_constants() -> None:
    ids = InstructionIds()
    ids.record(parse_module(STAGES))
    assert ids.ranks["half"] == ids.ranks["h"] + 1
    assert ids.ranks["limits"] > ids.ranks["x"] and ids.ranks["limits"] > ids.ranks["half"]
    assert ids.ranks["limits"] < ids.ranks["clipped"]


def test_layout_normalisations_bitcasts_rank_in_xlas_stages(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The reshape the module had is ReshapeDecomposer's bitcast (stage 1); the bitcast the
    simplifier makes of the bitcast-convert after layout normalisation comes after it
    (stage 3), as XLA's `bitcast.52` (1071) follows `bitcast.3`-`bitcast.27` (1047-1069) in
    rollout_reacher_logged."""
    by_name = _priority_ranks(monkeypatch, STAGES)
    (made,) = [n for n in by_name if n.startswith("bitcast")]
    assert by_name["from_r"] < by_name["r"] < by_name[made]
