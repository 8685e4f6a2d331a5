"""Step logs in the TPU's whole-loop kernel (targets/tpu/whole_loop_logs.py): a uniform value
logged a slice per step at any T, a row per block in SMEM, equal to the reference interpreter
under `tpu-interpret` and lowered to Mosaic without a chip."""

from __future__ import annotations

import numpy as np
import pytest

import hlofuse
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.targets.tpu import whole_loop, whole_loop_uniform
from hlofuse.targets.tpu.listing import lower_for_tpu, wide_block_indices
from hlofuse.targets.tpu.program import kernel_structs, plan_kernels, uses_wide_types

from tests.codegen.test_whole_loop_step_logs import (
    KEY,
    PROGRAM,
    assert_matches_interpreter,
    logged_rollout,
)


@pytest.mark.parametrize("tables", [False, True])
def test_logs_over_several_blocks_match_the_interpreter(
        monkeypatch: pytest.MonkeyPatch, tables: bool) -> None:
    """[T] f32 and s32 logs and a [T, 2] one beside a sum across the lanes, T = 200, over
    three blocks of 8 x 128 lanes (each block writes its own row; the first is the log), with
    the step's uniform values computed in the kernel or before it (whole_loop_uniform.py)."""
    monkeypatch.setattr(whole_loop, "BLOCK_ROWS", 8)
    monkeypatch.setattr(whole_loop_uniform, "TABLE_MIN_BLOCKS", 2 if tables else 32)
    x0 = np.linspace(0, 1, 2100, dtype=np.float32)
    module = hlofuse.jit(logged_rollout(2100, 200)).lower(KEY, x0).module
    kernels = plan_kernels(run_strategy(module, "max", debug=False).module, interpret=True)
    lanes = [k for k in kernels if k.lanes is not None]
    assert len(lanes) == 1 and lanes[0].lanes is not None and lanes[0].lanes.grid == 3
    assert_matches_interpreter(module, [KEY, x0], "tpu-interpret")


def test_logs_at_any_uniform_position_match_the_interpreter() -> None:
    module = parse_module(PROGRAM.replace("64]", "256]"))
    kernels = plan_kernels(run_strategy(module, "max", debug=False).module, interpret=True)
    assert sum(k.lanes is not None for k in kernels) == 1  # the loop is one lane kernel
    args = [np.zeros(256, np.float32), np.full(100, 5.0, np.float32)]
    assert_matches_interpreter(module, args, "tpu-interpret")


def test_a_kernel_with_logs_lowers_for_the_tpu() -> None:
    x0 = np.zeros(1024, np.float32)
    module = hlofuse.jit(logged_rollout(1024, 200)).lower(KEY, x0).module
    fused = run_strategy(module, "max", debug=False).module
    lanes = [k for k in plan_kernels(fused, interpret=True) if k.lanes is not None]
    assert len(lanes) == 1
    text = lower_for_tpu(lanes[0], kernel_structs(lanes[0]), uses_wide_types(fused))
    assert "scf.while" in text and not wide_block_indices(text)
