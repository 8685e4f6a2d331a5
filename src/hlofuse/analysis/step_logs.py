"""Per-step logs of uniform values in a parallel loop: a value the lanes share, computed once
per step (an epsilon schedule, a regime drawn from the step's key, the step counter itself),
that `lax.scan` stacks over the T steps into a [T] (or [T, k]) output.

A uniform loop element is a step log when the body's only use of it is one
dynamic-update-slice writing a slice of at most MAX_SLICE_ELEMENTS values, with a value and
start indices that do not depend on the lanes' state, and the condition never reads it.
Nothing in the loop then reads what the element holds: each step's write only has to land
in the element, in step order. The kernel keeps it in a buffer of its own, written one slice
per uniform step (the step's clamped position, whatever uniform index computes it: the
writes are made in step order, so a later step writing the same slot wins as in the
reference), and hands it out after the loop. Held as uniform state instead, every step would
copy the whole element (and a [T] element would be limited to
parallel_loop.DEFAULT_MAX_UNIFORM_ELEMENTS values). A per-step reduction across the lanes
(step_reductions.py) is the same shape with a value computed from the lanes; it is found
first.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from hlofuse.analysis.lane_classification import LaneClassification
from hlofuse.analysis.step_reductions import SliceWrite, written_a_slice_a_step
from hlofuse.ir.hlo import Instruction

# Values one step writes: computed by uniform code as a small uniform value is.
MAX_SLICE_ELEMENTS = 64
# Values of a log element: the kernel keeps the element in a local buffer until the loop
# ends (8 bytes a value in the C kernel's stack frame, a thread's local memory in CUDA).
MAX_LOG_ELEMENTS = 8192


@dataclass(frozen=True, slots=True)
class StepLog(SliceWrite):
    """A uniform loop element written one slice per step with a uniform value."""


def find_step_logs(lanes: LaneClassification, taken: Collection[int]) -> list[StepLog]:
    """The loop's step logs among its uniform elements not in `taken` (accumulated or
    reduced over the lanes), after `lanes.classify()`."""
    out = []
    for i, shape in enumerate(lanes.loop.shape.elements):
        if i in lanes.per_lane or i in taken or not shape.dims:
            continue
        if shape.num_elements > MAX_LOG_ELEMENTS:
            continue
        update = _written_slice(lanes, i)
        if update is not None:
            out.append(StepLog(i, update))
    return out


def _written_slice(lanes: LaneClassification, element: int) -> Instruction | None:
    """The body's dynamic-update-slice of element `element` when it is the element's only
    use, the slice and its position are free of the lanes' state, and nothing else (the
    condition included) reads the element."""
    update = written_a_slice_a_step(lanes, element)
    if update is None or any(o is update.operands[0] for o in update.operands[1:]):
        return None
    if update.operands[1].shape.num_elements > MAX_SLICE_ELEMENTS:
        return None
    if any(id(o) in lanes.dependent for o in update.operands[1:]):
        return None  # computed from the lanes: a per-step reduction, or refused as one
    return update
