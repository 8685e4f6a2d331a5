"""gather, scatter, sort, topk, map and reduce-precision compiled to C == the interpreter, each
alone (a kernel of its own) and fused with its neighbours under the xla strategy."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c import compile_cpu

pytestmark = pytest.mark.needs_cc

GATHER = """HloModule g
ENTRY e {
  x = f32[4,5,6] parameter(0)
  i = s32[4,3,2] parameter(1)
  g = f32[4,3,2,3] gather(x, i), offset_dims={2,3}, collapsed_slice_dims={}, start_index_map={1,2},
      operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2,
      slice_sizes={1,2,3}
  r = f32[4,3,2,3] reshape(g)
  ROOT n = f32[4,3,2,3] negate(r)
}
"""

GATHER_ROWS = """HloModule g2
ENTRY e {
  x = s32[7,3] parameter(0)
  i = s32[5] parameter(1)
  ROOT g = s32[5,3] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0},
      index_vector_dim=1, slice_sizes={1,3}
}
"""

SCATTER = """HloModule s
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  x = f32[6,4] parameter(0)
  i = s32[5,1] parameter(1)
  u = f32[5,4] parameter(2)
  e2 = f32[6,4] exponential(x)
  ROOT s = f32[6,4] scatter(e2, i, u), update_window_dims={1}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
"""

SCATTER_BATCHED = """HloModule sb
replace {
  ra = s8[] parameter(0)
  ROOT rb = s8[] parameter(1)
}
maximum {
  ma = s8[] parameter(0)
  mb = s8[] parameter(1)
  ROOT mc = s8[] maximum(ma, mb)
}
ENTRY e {
  grid = s8[3,4,4] parameter(0)
  i = s32[3,2] parameter(1)
  v = s8[3] parameter(2)
  s1 = s8[3,4,4] scatter(grid, i, v), update_window_dims={}, inserted_window_dims={1,2},
      scatter_dims_to_operand_dims={1,2}, input_batching_dims={0},
      scatter_indices_batching_dims={0}, index_vector_dim=1, to_apply=replace
  ROOT s2 = s8[3,4,4] scatter(s1, i, v), update_window_dims={}, inserted_window_dims={1,2},
      scatter_dims_to_operand_dims={1,2}, input_batching_dims={0},
      scatter_indices_batching_dims={0}, index_vector_dim=1, to_apply=maximum
}
"""

SCATTER_CUSTOM = """HloModule sc
combine {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  m = f32[] multiply(a, b)
  ROOT c = f32[] subtract(m, b)
}
ENTRY e {
  x = f32[8] parameter(0)
  i = s32[6] parameter(1)
  u = f32[6] parameter(2)
  ROOT s = f32[8] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=combine
}
"""

SORT = """HloModule so
less {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT l = pred[] compare(a, b), direction=LT
}
ENTRY e {
  x = f32[3,9] parameter(0)
  k = s32[3,9] iota(), iota_dimension=1
  ROOT srt = (f32[3,9], s32[3,9]) sort(x, k), dimensions={1}, is_stable=true, to_apply=less
}
"""

SORT_AXIS0 = """HloModule so0
greater {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT l = pred[] compare(a, b), direction=GT
}
ENTRY e {
  x = s32[7,3] parameter(0)
  ROOT s = s32[7,3] sort(x), dimensions={0}, to_apply=greater
}
"""

TOPK = """HloModule t
ENTRY e {
  x = f32[4,10] parameter(0)
  ROOT top = (f32[4,3], s32[4,3]) topk(x), k=3, largest=true
}
"""

MAP = """HloModule m
f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  mx = f32[] maximum(a, b)
  ROOT s = f32[] multiply(mx, a)
}
ENTRY e {
  x = f32[5,4] parameter(0)
  y = f32[5,4] parameter(1)
  ROOT m = f32[5,4] map(x, y), dimensions={0,1}, to_apply=f
}
"""

REDUCE_PRECISION = """HloModule rp
ENTRY e {
  x = f32[64] parameter(0)
  a = f32[64] reduce-precision(x), exponent_bits=5, mantissa_bits=10
  b = f32[64] reduce-precision(x), exponent_bits=8, mantissa_bits=7
  c = f32[64] reduce-precision(x), exponent_bits=3, mantissa_bits=0
  ROOT t = (f32[64], f32[64], f32[64]) tuple(a, b, c)
}
"""


def _inputs(module_text: str, rng: np.random.Generator) -> list[np.ndarray]:
    module = parse_module(module_text)
    out: list[np.ndarray] = []
    for p in module.entry.parameters:
        dtype, dims = p.dtype.numpy, p.shape.dims
        if np.dtype(dtype).kind == "f":
            out.append(rng.normal(0, 3, dims).astype(dtype))
        else:  # indices partly out of range: gather clamps, scatter skips
            out.append(rng.integers(-2, 8, dims).astype(dtype))
    return out


CASES = {"gather": GATHER, "gather_rows": GATHER_ROWS, "scatter_add": SCATTER,
         "scatter_batched": SCATTER_BATCHED, "scatter_custom": SCATTER_CUSTOM, "sort": SORT,
         "sort_axis0": SORT_AXIS0, "topk": TOPK, "map": MAP,
         "reduce_precision": REDUCE_PRECISION}


# Cases that compute a transcendental function (everything else is exact).
_APPROXIMATED = frozenset({"scatter_add"})


@pytest.mark.parametrize("strategy", ["none", "xla"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_equals_interpreter(name: str, strategy: str) -> None:
    text = CASES[name]
    inputs = _inputs(text, np.random.default_rng(5))
    if name == "reduce_precision":
        inputs[0][:6] = [np.nan, np.inf, -np.inf, 1e-30, 7e4, -0.0]
    expected = flatten_value(evaluate(parse_module(text), inputs))
    module = run_strategy(parse_module(text), strategy, debug=False).module
    actual = flatten_value(compile_cpu(module)(*inputs))
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == e.dtype and a.shape == e.shape, f"{name} output {k}"
        if name in _APPROXIMATED:
            # exp from the math library (within 1.05 ulp), the interpreter's NumPy within 0.5
            np.testing.assert_array_max_ulp(a, e, maxulp=2)
            continue
        np.testing.assert_array_equal(a, e, err_msg=f"{name} output {k} ({strategy})")


def test_sort_with_a_comparator_that_is_not_an_order_is_refused_by_the_interpreter() -> None:
    # The compiled sort trusts the comparator (as XLA does); the interpreter checks it.
    text = SORT.replace("direction=LT", "direction=LE")
    inputs = [np.zeros((3, 9), np.float32)]
    with pytest.raises(Exception, match="strict weak order"):
        evaluate(parse_module(text), inputs)


def test_convolution_is_refused_naming_the_instruction() -> None:
    text = """HloModule c
ENTRY e {
  x = f32[1,4,4,1] parameter(0)
  w = f32[2,2,1,1] parameter(1)
  ROOT c = f32[1,3,3,1] convolution(x, w), window={size=2x2}, dim_labels=b01f_01io->b01f
}
"""
    with pytest.raises(Exception, match=r"%c\b.*convolution"):
        compile_cpu(parse_module(text))
