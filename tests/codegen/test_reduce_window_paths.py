"""Reduce-windows compile both ways equal to the interpreter: windows of at most the emitter's
written-out limit with a literal offset per window position, larger ones as window loops;
padding known at compile time, padding tested at run time, and dilated operands."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.codegen.emitter_types import UNROLL_ELEMENTS
from hlofuse.ir.parser import parse_module

pytestmark = pytest.mark.needs_cc


def _program(in_dims: tuple[int, int], out_dims: tuple[int, int], window: str) -> str:
    return f"""HloModule window
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
ENTRY main {{
  x = f32[{in_dims[0]},{in_dims[1]}] parameter(0)
  init = f32[] constant(0.5)
  ROOT r = f32[{out_dims[0]},{out_dims[1]}] reduce-window(x, init), window={{{window}}},
      to_apply=add
}}
"""


# Window positions either side of the kernels' written-out limit (UNROLL_ELEMENTS = 16).
@pytest.mark.parametrize("in_dims,out_dims,window,positions", [
    ((6, 30), (6, 30), "size=1x6 pad=0_0x5_0", 6),  # a cumulative sum, written out
    ((6, 30), (6, 30), "size=1x20 pad=0_0x19_0", 20),  # looped
    ((5, 7), (9, 13), "size=3x7 pad=1_1x2_4 lhs_dilate=2x2", 21),  # looped, dilated
    ((5, 7), (9, 12), "size=3x3 pad=1_1x1_0 lhs_dilate=2x2", 9),  # written out, dilated
])
def test_reduce_window_equals_the_interpreter(in_dims: tuple[int, int],
                                              out_dims: tuple[int, int], window: str,
                                              positions: int) -> None:
    assert UNROLL_ELEMENTS == 16  # the cases straddle it
    text = _program(in_dims, out_dims, window)
    x = np.random.default_rng(positions).normal(size=in_dims).astype(np.float32)
    expected = np.asarray(compile_module(parse_module(text), "none", "interpreter")(x))
    actual = np.asarray(compile_module(parse_module(text), "xla")(x))
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)
