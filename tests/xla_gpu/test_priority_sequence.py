"""xla-gpu's priority fusion against XLA's own sequence of fusions (the `fusion` steps of
XLA's priority_fusion_dump.txt for mountain_car_rollout, stored next to the corpus), and the
parts of XLA's bookkeeping that decide it: `absl::Duration * double` and the incremental
priority updates from cached run times (`priority_fusion.cc`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hlofuse.fusion import gpu_priority
from hlofuse.fusion.gpu_model import scale_duration
from hlofuse.fusion.graph import Node
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module

DATA = Path(__file__).parents[1] / "data" / "xla_gpu"
# Rounds (one dequeued producer each, bitcasts and constants left out) in which xla-gpu fuses
# the producer XLA fuses: 389 with priorities recomputed from current times and the overlap
# rounded exactly, 423 with XLA's cached times and its Duration scaling; round 424 is the
# stacked keys' concatenate, which XLA prices with its concatenate emitter's launch.
SAME_ROUNDS = 423


def _key(node: Node) -> str:
    return node.fused_root.name if node.is_fusion else node.name


def _xla_rounds(text: str) -> list[str]:
    """XLA's dequeued producers, a fusion named by its root (the consumer it was made from)."""
    roots: dict[str, str] = {}
    producers: list[str] = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        fusion, producer, consumer = line.split()
        if fusion != consumer and fusion not in roots:
            roots[fusion] = roots.get(consumer, consumer)
        name = re.sub(r"\.0$", "", roots.get(producer, producer))
        if name.startswith(("bitcast", "constant")):
            continue
        if not producers or producers[-1] != name:
            producers.append(name)
    return producers


def test_absl_duration_scaling() -> None:
    """ScaleDouble goes through seconds: 130 ticks * 0.95 is 123 ticks, not 123.5 rounded up;
    a nanosecond count is scaled from 4 ticks."""
    assert scale_duration(130, 0.95) == 123
    assert scale_duration(100, 0.95) == 95
    assert scale_duration(4, 32.5) == 130
    assert scale_duration(4, 1.125) == 5
    assert scale_duration(4_000_000_001, 2.0) == 8_000_000_002


@pytest.mark.thorough
def test_mountain_car_follows_xlas_fusion_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    before = (DATA / "mountain_car_rollout.before.hlo").read_text()
    xla = _xla_rounds((DATA / "mountain_car_rollout.h100.priority_fusion.txt").read_text())
    known = set(re.findall(r"%?([\w.\-]+) = ", before))
    ours: list[str] = []
    fuse = gpu_priority._GpuPriorityFuser.fuse

    def recording(self: gpu_priority._GpuPriorityFuser, producer: Node, consumer: Node) -> Node:
        if producer.op.text not in ("bitcast", "reshape", "constant"):
            name = _key(producer)
            if not ours or ours[-1] != name:
                ours.append(name)
        return fuse(self, producer, consumer)

    monkeypatch.setattr(gpu_priority._GpuPriorityFuser, "fuse", recording)
    run_strategy(parse_module(before), "xla-gpu+device=h100", debug=False)
    same = 0
    for theirs, mine in zip(xla, ours):
        # Instructions the simplifiers create are named apart by the two compilers.
        if theirs != mine and (theirs in known or mine in known):
            break
        same += 1
    assert same >= SAME_ROUNDS, (same, xla[same:same + 4], ours[same:same + 4])
