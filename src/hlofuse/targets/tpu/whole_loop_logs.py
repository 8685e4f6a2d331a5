"""Step logs in the TPU's whole-loop kernel (whole_loop.py): a uniform value written one slice
per step into a [T] (or [T, k]) element nothing in the loop reads (analysis/step_logs.py: an
epsilon schedule, a regime drawn from the step's key).

Each block has a row of its own in SMEM (an output of (grid, 1, positions) words, as the
per-step reductions' tables are laid out: whole_loop_steps.py), filled with the element's
initial value before the time loop and written at every step, at the slice's clamped
position, with the step's uniform values (the same in every block). No two blocks write one
row; after the kernel the first block's row is the element.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from hlofuse.analysis.step_logs import StepLog
from hlofuse.ir.shapes import Shape
from hlofuse.targets.tpu.lane_values import LaneValues, static_positions, strides
from hlofuse.targets.tpu.lane_words import from_word, narrowed, to_word, word
from hlofuse.targets.tpu.lax_ops import BLOCK_ZERO, Value
from hlofuse.targets.tpu.whole_loop_steps import clamped_starts


def log_words(logs: Sequence[StepLog]) -> int:
    """SMEM words the logs take: a block's row and the initial value's input each (within
    whole_loop.STEP_TABLE_WORDS, with the per-step reductions' tables)."""
    return 2 * sum(log.update.shape.num_elements for log in logs)


def log_inputs(logs: Sequence[StepLog], inits: Sequence[Value]) -> list[Value]:
    """Each log's initial value, flattened words (an SMEM input)."""
    return [to_word(jnp.asarray(inits[log.element]), log.update.shape.dtype).reshape(-1)
            for log in logs]


def log_outputs(logs: Sequence[StepLog], grid: int
                ) -> tuple[list[jax.ShapeDtypeStruct], list[pl.BlockSpec]]:
    """Each log's (grid, 1, positions) rows in SMEM, a row per block (the grid dimension a
    squeezed third one, as whole_loop_steps.table_outputs explains)."""
    shapes = [jax.ShapeDtypeStruct((grid, 1, log.update.shape.num_elements),
                                   word(log.update.shape.dtype)) for log in logs]
    specs = [pl.BlockSpec((None, 1, s.shape[2]), lambda i: (i, BLOCK_ZERO, BLOCK_ZERO),
                          memory_space=pltpu.SMEM) for s in shapes]
    return shapes, specs


def start_logs(inputs: Sequence[Any], rows: Sequence[Any]) -> None:
    """The block's rows start as the initial values."""
    for source, row in zip(inputs, rows):
        def copy(p: Value, carry: None, source: Any = source, row: Any = row) -> None:
            row[BLOCK_ZERO, p] = source[p]

        lax.fori_loop(np.int32(0), np.int32(source.shape[0]), copy, None)


def write_logs(values: LaneValues, logs: Sequence[StepLog], rows: Sequence[Any]) -> None:
    """This step's slice of each log at its clamped start, in the block's row."""
    for log, row in zip(logs, rows):
        shape: Shape = log.update.shape
        starts = clamped_starts(values, log)
        for p in static_positions(log.value.shape.dims):
            flat: Any = np.int32(0)
            for start, offset, stride in zip(starts, p, strides(shape.dims)):
                flat = flat + (start + np.int32(offset)) * np.int32(stride)
            row[BLOCK_ZERO, flat] = to_word(values.value(log.value, p), shape.dtype)


def finish_logs(logs: Sequence[StepLog], outputs: Sequence[Value]) -> dict[int, Value]:
    """Each log element: the first block's row."""
    out = {}
    for log, rows in zip(logs, outputs):
        shape = log.update.shape
        out[log.element] = narrowed(from_word(rows[0, 0].reshape(shape.dims), shape.dtype),
                                    shape.dtype)
    return out
