"""Step logs in a whole-loop kernel (analysis/step_logs.py): a uniform value written one slice
per step into a [T] (or [T, k]) element that nothing in the loop reads.

The element lives in a local buffer `lg<k>`, filled with its initial value before the loop.
Each uniform step, before its new uniform state is committed (the slice and its position
read the step's old state), writes the slice at its clamped position; the uniform steps run
in order, so a slot two steps write ends with the later value, as in the reference. After
every block is done the buffer goes to the element's output, once. In the C kernel the
uniform steps run on one thread; in CUDA every thread runs the same uniform steps into its
own buffer and the thread that runs the kernel's `AfterAll` writes its copy out: no two
threads write one output, and no block's lanes ever wait for the log.
"""

from __future__ import annotations

import functools

from hlofuse.analysis.parallel_loop import LoopPlan
from hlofuse.codegen import cir
from hlofuse.codegen.elemental import ElementalEmitter
from hlofuse.codegen.emitter_types import Index
from hlofuse.codegen.whole_loop_elements import copy, element_indices, element_of, store_at
from hlofuse.codegen.whole_loop_lane_code import LaneCode


def step_log_names(plan: LoopPlan) -> list[str]:
    """The kernel's own names for the logs' buffers."""
    return [f"lg{k}" for k in range(len(plan.step_logs))]


class StepLogs(LaneCode):
    """The step-log parts of the whole-loop emitter (whole_loop.py calls them)."""

    def _declare_step_logs(self) -> None:
        """Each log's buffer holding its initial value (read now: an output may share the
        initial value's buffer, and no block has written anything yet)."""
        for k, log in enumerate(self.plan.step_logs):
            shape = self.loop.shape.elements[log.element]
            self.body.declare(self._register_type(shape.dtype), f"lg{k}",
                              dims=(shape.num_elements,))
            self._each_element(self.uniform_em, self.init[log.element], store_at(f"lg{k}"))

    def _write_step_logs(self, em: ElementalEmitter) -> None:
        """In a uniform step: each log's slice at the position the step writes it."""
        for k, log in enumerate(self.plan.step_logs):
            dims = self.loop.shape.elements[log.element].dims
            sizes = log.value.shape.dims
            starts = em.clamped_starts(log.update, log.starts, dims, sizes)
            for index in element_indices(sizes):
                offsets = index.multi or ()
                at = tuple(cir.add(start, offset) for start, offset in zip(starts, offsets))
                position = em.linear_of(Index(dims, None, at, None))
                self.body.assign(cir.load(f"lg{k}", position), em.array_value(log.value, index))

    def _output_step_logs(self) -> None:
        """After every block: each log's buffer to its output."""
        for k, log in enumerate(self.plan.step_logs):
            shape = self.loop.shape.elements[log.element]
            storage = functools.partial(self.lang.to_storage, shape.dtype)
            self._copy_loop(shape.num_elements, copy(store_at(self.outputs[log.element]),
                                                     element_of(f"lg{k}"), storage))
