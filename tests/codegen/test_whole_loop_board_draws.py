"""A board game's step inside a whole-loop kernel: each lane holds an 8 x 8 board, draws a
cell by `argmax(gumbel + logits)` over its 64 cells (the categorical draw of `jax.random`
over free cells), and reads the board flattened (`board.reshape(n, 64)`).

Written out cell by cell, the draw's Threefry evaluation and two logarithms were repeated 64
times in the kernel's source (34,000 lines, 31 s of gcc); the value the reduction reads is
now computed in a loop over the cells into scratch. The flattened board was read at
`((cell + 64 * lane) / 8) % 8`, which kept gcc from vectorising the loop over the lanes
(a gather); the reshape keeps the lane's own index now."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hlofuse
import hlofuse.numpy as hnp
from hlofuse import lax
from hlofuse import random as hrandom
from hlofuse.api import compile_module
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c.build import generate_c

from tests.codegen.test_whole_loop_vectorises import _assert_vectorised

pytestmark = pytest.mark.needs_cc

KEY = np.array([0, 11], np.uint32)


def _board_game(n: int, t: int) -> Any:
    """Each step a lane's cells age by one, a drawn free cell is stamped, and the lanes log
    how many cells are occupied."""

    def rollout(key: Any, board0: Any) -> Any:
        def body(board: Any, step: Any) -> Any:
            k = hrandom.fold_in(key, step)
            u = hrandom.uniform(k, (n, 64), minval=1e-6, maxval=1.0)
            gumbel = -hnp.log(-hnp.log(u))
            flat = board.reshape(n, 64)
            logits = hnp.where(flat == 0, 0.0, -1e9)
            cell = hnp.argmax(gumbel + logits, axis=1)
            aged = hnp.maximum(flat - 1, 0)
            stamped = hnp.where(hnp.arange(64)[None, :] == cell[:, None], 5, aged)
            return stamped.reshape(n, 8, 8), hnp.sum(stamped > 0)

        return lax.scan(body, board0, hnp.arange(t))

    return rollout


def _module(n: int, t: int, board0: np.ndarray) -> Module:
    module: Module = hlofuse.jit(_board_game(n, t)).lower(KEY, board0).module
    return module


def _boards(n: int) -> np.ndarray:
    return np.random.default_rng(3).integers(0, 3, (n, 8, 8)).astype(np.int32)


@pytest.mark.parametrize("n", [3, 40])
def test_a_categorical_draw_over_a_board_equals_the_interpreter(n: int) -> None:
    board0 = _boards(n)
    module = _module(n, 9, board0)
    assert not run_strategy(module, "max", debug=False).kernels_per_iteration()
    compiled = compile_module(module, "max")
    for k, (a, e) in enumerate(zip(flatten_value(compiled(KEY, board0)),
                                   flatten_value(evaluate(module, [KEY, board0])))):
        np.testing.assert_array_equal(np.asarray(a), e, err_msg=f"out{k}")


def _whole_loop_source(n: int) -> str:
    fused = run_strategy(_module(n, 9, _boards(n)), "max", debug=False)
    source: str = generate_c(fused.module).source.text
    return source[source.index("(kCustom)"):]


def test_the_draws_cells_are_computed_in_a_loop_not_written_out() -> None:
    source = _whole_loop_source(64)
    # Threefry's rotations by 13 bits (several an evaluation): the step's key and a pass of
    # the draw's loop, not an evaluation per cell (12,483 of them written out before).
    rotations = len(re.findall(r"<< 13\)", source))
    assert 0 < rotations < 64, rotations


def test_the_lane_loops_reading_the_flattened_board_vectorise(tmp_path: Path) -> None:
    fused = run_strategy(_module(64, 9, _boards(64)), "max", debug=False)
    source = generate_c(fused.module).source.text
    lines = source.split("\n")
    start = next(k for k, line in enumerate(lines) if "(kCustom)" in line)
    loops = [k + 2 for k, line in enumerate(lines)
             if k > start and line.strip() == "#pragma omp simd"]
    assert loops
    _assert_vectorised(tmp_path, source, loops)
