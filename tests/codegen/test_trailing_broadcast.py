"""A layer's bias, broadcast along the trailing dimension of [rows, width] and added before an
activation, is read through a loop nest (contiguously, once per inner position), not at the
flat index modulo the width: that read is a gather, and gcc left the whole loop scalar, the
activation's math function included (a [4096, 32] bias + tanh ran 16x slower than the same
tanh without the bias). A nest shares only its outer loop among the threads, so an array of
few rows keeps the flat loop."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c import compile_cpu
from hlofuse.targets.c.build import generate_c

from tests.codegen.test_whole_loop_vectorises import _assert_vectorised


def program(rows: int, width: int) -> str:
    shape = f"f32[{rows},{width}]"
    return f"""
HloModule bias_tanh

ENTRY main {{
  x = {shape} parameter(0)
  b = f32[{width}] parameter(1)
  bb = {shape} broadcast(b), dimensions={{1}}
  h = {shape} add(x, bb)
  ROOT t = {shape} tanh(h)
}}
"""


@pytest.mark.needs_cc
@pytest.mark.parametrize(("rows", "width"), [(4096, 32), (100, 5), (8, 64)])
def test_a_bias_and_tanh_equal_the_interpreter(rows: int, width: int) -> None:
    module = parse_module(program(rows, width))
    rng = np.random.default_rng(rows + width)
    inputs = [rng.standard_normal((rows, width)).astype(np.float32),
              rng.standard_normal(width).astype(np.float32)]
    (expected,) = flatten_value(evaluate(module, inputs))
    fused = run_strategy(module, "xla", debug=False)
    (actual,) = flatten_value(compile_cpu(fused.module)(*inputs))
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=2e-6, atol=1e-7)


@pytest.mark.needs_cc
def test_the_bias_is_read_contiguously_and_the_loop_vectorises(tmp_path: Path) -> None:
    fused = run_strategy(parse_module(program(4096, 32)), "xla", debug=False)
    source = generate_c(fused.module).source.text
    assert "% 32" not in source, "the bias read at the flat index modulo the width"
    lines = source.split("\n")
    loops = [k + 1 for k, line in enumerate(lines)
             if re.match(r"\s*for \(int64_t i\d+ = ", line)]
    assert len(loops) == 2, "a nest over rows and the width"
    _assert_vectorised(tmp_path, source, loops)


def test_few_rows_keep_the_flat_loop_the_threads_share() -> None:
    fused = run_strategy(parse_module(program(8, 4096)), "xla", debug=False)
    assert "% 4096" in generate_c(fused.module).source.text
