"""On the TPU (marker `tpu`): the tiled reductions and the in-place dynamic-update-slices,
tested in interpret mode elsewhere, compiled by Mosaic and run on the chip, equal to the
reference interpreter (sums within rtol 1e-5, grouped differently; updates exactly)."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.reference.interpreter import evaluate, flatten_value

from tests.tpu.test_interpret import assert_close
from tests.tpu.test_tiled_reduce import CASES, assert_tiled_and_equal, random_input, reduce_module
from tests.tpu.test_update_in_place import _inputs, scan_module, update_module

pytestmark = pytest.mark.tpu


@pytest.mark.parametrize(("dims", "reduced", "op", "dtype"), CASES,
                         ids=[f"{c[2]}-{c[3]}-{'x'.join(map(str, c[0]))}-{c[1]}" for c in CASES])
def test_tiled_reductions_on_the_chip(dims: tuple[int, ...], reduced: tuple[int, ...], op: str,
                                      dtype: str) -> None:
    module = reduce_module(dims, reduced, op, dtype)
    assert_tiled_and_equal(module, [random_input(dims, dtype)], "xla", backend="tpu")


@pytest.mark.parametrize("start", [0, 517, 1023, 5000, -3], ids=lambda s: f"start{s}")
def test_row_updates_in_place_on_the_chip(start: int) -> None:
    module = update_module(1024, 256, 1)
    inputs = _inputs(1024, 256, 1, start)
    compiled = compile_module(module, "xla", "tpu")
    plans = compiled.executable.kernel_plans  # type: ignore[union-attr]
    assert [k.layout for k in plans].count("in-place") == 1, [(k.name, k.reason) for k in plans]
    assert_close(compiled.run_flat(inputs), flatten_value(evaluate(module, inputs)), 0)


@pytest.mark.parametrize("strategy", ["none", "xla"])
def test_a_scan_writes_its_rows_in_place_on_the_chip(strategy: str) -> None:
    module = scan_module(200, 4096)
    inputs = [np.random.default_rng(1).standard_normal(4096).astype(np.float32)]
    compiled = compile_module(module, strategy, "tpu")
    plans = compiled.executable.kernel_plans  # type: ignore[union-attr]
    assert [k.layout for k in plans].count("in-place") == 1
    assert_close(compiled.run_flat(inputs), flatten_value(evaluate(module, inputs)), 0)
