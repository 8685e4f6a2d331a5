"""An element repeated along one more small dimension (a key per lane broadcast to the lane's
three draws) is read once per row of a loop nest, not at the flat index divided by the count:
that read is a gather, which gcc does not emit on every CPU, and the loop stayed scalar."""

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


def program(repeats: int, dtype: str = "u32") -> str:
    """A generator-like mix of a [4096, repeats] array with a key per row."""
    shape = f"{dtype}[4096,{repeats}]"
    if dtype == "u32":
        last = f"""c = u32[] constant(13)
  cs = {shape} broadcast(c), dimensions={{}}
  rotated = {shape} shift-left(mixed, cs)
  ROOT out = {shape} xor(rotated, keys)"""
    else:
        last = f"ROOT out = {shape} multiply(mixed, keys)"
    return f"""
HloModule repeated_broadcast

ENTRY main {{
  key = {dtype}[4096] parameter(0)
  x = {shape} parameter(1)
  keys = {shape} broadcast(key), dimensions={{0}}
  mixed = {shape} add(x, keys)
  {last}
}}
"""


def _inputs(repeats: int, dtype: str) -> list[np.ndarray]:
    rng = np.random.default_rng(repeats)
    if dtype == "u32":
        return [rng.integers(0, 2**32, 4096, dtype=np.uint32),
                rng.integers(0, 2**32, (4096, repeats), dtype=np.uint32)]
    return [rng.standard_normal(4096).astype(np.float32),
            rng.standard_normal((4096, repeats)).astype(np.float32)]


@pytest.mark.needs_cc
@pytest.mark.parametrize(("repeats", "dtype"), [(3, "u32"), (4, "u32"), (3, "f32"), (16, "f32")])
def test_a_repeated_element_equals_the_interpreter(repeats: int, dtype: str) -> None:
    module = parse_module(program(repeats, dtype))
    inputs = _inputs(repeats, dtype)
    (expected,) = flatten_value(evaluate(module, inputs))
    fused = run_strategy(module, "xla", debug=False)
    (actual,) = flatten_value(compile_cpu(fused.module)(*inputs))
    np.testing.assert_array_equal(np.asarray(actual), expected)


@pytest.mark.needs_cc
@pytest.mark.parametrize("repeats", [3, 4])
def test_the_loop_reads_the_element_once_a_row_and_vectorises(tmp_path: Path,
                                                               repeats: int) -> None:
    fused = run_strategy(parse_module(program(repeats)), "xla", debug=False)
    source = generate_c(fused.module).source.text
    assert not re.search(rf"/ {repeats}\)", source), "an index divided by the count"
    lines = source.split("\n")
    loops = [k + 1 for k, line in enumerate(lines)
             if re.match(r"\s*for \(int64_t i\d+ = ", line)]
    assert loops, "no loop over the rows"
    _assert_vectorised(tmp_path, source, loops)
