"""Whole-loop fusion of a loop whose lanes gather from and scatter into their own rows and run
a nested loop of constant trip count: one kernel under `max`, equal to the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c import compile_cpu

PROGRAM = """HloModule lanes
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
inner_cond {
  ic = (s32[], f32[8]) parameter(0)
  ik = s32[] get-tuple-element(ic), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(ik, three), direction=LT
}
inner_body {
  ib = (s32[], f32[8]) parameter(0)
  k = s32[] get-tuple-element(ib), index=0
  v = f32[8] get-tuple-element(ib), index=1
  one_k = s32[] constant(1)
  k2 = s32[] add(k, one_k)
  half = f32[8] constant({0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5})
  ones = f32[8] constant({1, 1, 1, 1, 1, 1, 1, 1})
  vh = f32[8] multiply(v, half)
  v2 = f32[8] add(vh, ones)
  ROOT it = (s32[], f32[8]) tuple(k2, v2)
}
cond {
  cs = (s32[], f32[8,4], s32[8,1]) parameter(0)
  i = s32[] get-tuple-element(cs), index=0
  five = s32[] constant(5)
  ROOT lt5 = pred[] compare(i, five), direction=LT
}
body {
  s = (s32[], f32[8,4], s32[8,1]) parameter(0)
  i0 = s32[] get-tuple-element(s), index=0
  grid = f32[8,4] get-tuple-element(s), index=1
  pos = s32[8,1] get-tuple-element(s), index=2
  g = f32[8] gather(grid, pos), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1},
      operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=1,
      slice_sizes={1,1}
  zero = s32[] constant(0)
  init = (s32[], f32[8]) tuple(zero, g)
  w = (s32[], f32[8]) while(init), condition=inner_cond, body=inner_body
  u = f32[8] get-tuple-element(w), index=1
  grid2 = f32[8,4] scatter(grid, pos, u), update_window_dims={}, inserted_window_dims={1},
      scatter_dims_to_operand_dims={1}, input_batching_dims={0},
      scatter_indices_batching_dims={0}, index_vector_dim=1, to_apply=add
  one = s32[] constant(1)
  four = s32[] constant(4)
  ones8 = s32[8,1] broadcast(one), dimensions={}
  fours = s32[8,1] broadcast(four), dimensions={}
  moved = s32[8,1] add(pos, ones8)
  pos2 = s32[8,1] remainder(moved, fours)
  i1 = s32[] add(i0, one)
  ROOT t = (s32[], f32[8,4], s32[8,1]) tuple(i1, grid2, pos2)
}
ENTRY e {
  grid0 = f32[8,4] parameter(0)
  pos0 = s32[8,1] parameter(1)
  start = s32[] constant(0)
  state = (s32[], f32[8,4], s32[8,1]) tuple(start, grid0, pos0)
  ROOT loop = (s32[], f32[8,4], s32[8,1]) while(state), condition=cond, body=body
}
"""


def test_lane_gather_scatter_and_nested_loop_fuse_whole() -> None:
    fused = run_strategy(parse_module(PROGRAM), "max", debug=True)
    records = [r for r in fused.decisions.records if r.pass_name == "whole-loop-fusion"]
    outer = [r for r in records if r.producer == "loop"]
    assert outer and outer[-1].verdict.value == "fuse", [r.message for r in records]
    assert not fused.kernels_per_iteration()  # no loop left outside a kernel


@pytest.mark.needs_cc
def test_lane_gather_scatter_and_nested_loop_equal_the_interpreter() -> None:
    rng = np.random.default_rng(3)
    grid = rng.normal(size=(8, 4)).astype(np.float32)
    pos = rng.integers(-1, 5, size=(8, 1)).astype(np.int32)  # some out of range
    expected = flatten_value(evaluate(parse_module(PROGRAM), [grid, pos]))
    module = run_strategy(parse_module(PROGRAM), "max", debug=False).module
    actual = flatten_value(compile_cpu(module)(grid, pos))
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)


# Lanes gather their own rows at indices that do not depend on the loop state: a constant
# different per row (vmap of `x[i]` with `i` a per-row constant; `jax.random.choice` reads the
# last of each row's cumulative sums so) and indices computed from the step counter, the
# same in every lane (`jnp.take(x, k)` with `k` drawn from the shared key).
UNIFORM_INDICES = """HloModule uniform_indices
cond {
  cs = (s32[], f32[8,4]) parameter(0)
  i = s32[] get-tuple-element(cs), index=0
  five = s32[] constant(5)
  ROOT lt5 = pred[] compare(i, five), direction=LT
}
body {
  s = (s32[], f32[8,4]) parameter(0)
  i0 = s32[] get-tuple-element(s), index=0
  grid = f32[8,4] get-tuple-element(s), index=1
  fixed = s32[8,1] constant({{3}, {0}, {1}, {2}, {3}, {3}, {0}, {1}})
  g = f32[8,1] gather(grid, fixed), offset_dims={1}, collapsed_slice_dims={},
      start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0},
      index_vector_dim=1, slice_sizes={1,1}
  four = s32[] constant(4)
  k = s32[] remainder(i0, four)
  ks = s32[8,1] broadcast(k), dimensions={}
  h = f32[8] gather(grid, ks), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1},
      operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=1,
      slice_sizes={1,1}
  gb = f32[8,4] broadcast(g), dimensions={0,1}
  hb = f32[8,4] broadcast(h), dimensions={0}
  half = f32[] constant(0.5)
  halves = f32[8,4] broadcast(half), dimensions={}
  mixed = f32[8,4] add(gb, hb)
  scaled = f32[8,4] multiply(mixed, halves)
  grid2 = f32[8,4] add(grid, scaled)
  one = s32[] constant(1)
  i1 = s32[] add(i0, one)
  ROOT t = (s32[], f32[8,4]) tuple(i1, grid2)
}
ENTRY e {
  grid0 = f32[8,4] parameter(0)
  start = s32[] constant(0)
  state = (s32[], f32[8,4]) tuple(start, grid0)
  ROOT loop = (s32[], f32[8,4]) while(state), condition=cond, body=body
}
"""


def test_lanes_gathering_at_indices_the_state_does_not_set_fuse_whole() -> None:
    fused = run_strategy(parse_module(UNIFORM_INDICES), "max", debug=True)
    records = [r for r in fused.decisions.records if r.pass_name == "whole-loop-fusion"]
    assert records and records[-1].verdict.value == "fuse", [r.message for r in records]
    assert not fused.kernels_per_iteration()


@pytest.mark.needs_cc
def test_lanes_gathering_at_indices_the_state_does_not_set_equal_the_interpreter() -> None:
    grid = np.random.default_rng(5).normal(size=(8, 4)).astype(np.float32)
    expected = flatten_value(evaluate(parse_module(UNIFORM_INDICES), [grid]))
    module = run_strategy(parse_module(UNIFORM_INDICES), "max", debug=False).module
    actual = flatten_value(compile_cpu(module)(grid))
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)


# Lanes gather, at an index of their own, from a value lane code computes (a cumulative sum
# of a product with weights the lanes share: `jax.random.choice`'s searchsorted over the
# cumulative probabilities of a policy's softmax). Read at the computed start, the sum's
# window tested each position against the padding with a branch (the weights' loads at a
# computed position may not run unconditionally), which kept gcc from vectorising the lane
# loop; read at each start and selected, no branch is left.
GATHER_FROM_COMPUTED = """HloModule gather_computed
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
cond {
  cs = (s32[], f32[8,5], s32[8,1], f32[5,20]) parameter(0)
  ct = s32[] get-tuple-element(cs), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(ct, three), direction=LT
}
body {
  s = (s32[], f32[8,5], s32[8,1], f32[5,20]) parameter(0)
  t = s32[] get-tuple-element(s), index=0
  x = f32[8,5] get-tuple-element(s), index=1
  p = s32[8,1] get-tuple-element(s), index=2
  w = f32[5,20] get-tuple-element(s), index=3
  y = f32[8,20] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  zero = f32[] constant(0)
  cum = f32[8,20] reduce-window(y, zero), window={size=1x20 pad=0_0x19_0}, to_apply=add
  g = f32[8,1] gather(cum, p), offset_dims={1}, collapsed_slice_dims={},
      start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0},
      index_vector_dim=1, slice_sizes={1,1}
  gb = f32[8,5] broadcast(g), dimensions={0,1}
  tenth = f32[] constant(0.1)
  tenths = f32[8,5] broadcast(tenth), dimensions={}
  step = f32[8,5] multiply(gb, tenths)
  x2 = f32[8,5] subtract(x, step)
  one = s32[] constant(1)
  ones = s32[8,1] broadcast(one), dimensions={}
  five = s32[] constant(20)
  fives = s32[8,1] broadcast(five), dimensions={}
  moved = s32[8,1] add(p, ones)
  p2 = s32[8,1] remainder(moved, fives)
  t1 = s32[] add(t, one)
  ROOT r = (s32[], f32[8,5], s32[8,1], f32[5,20]) tuple(t1, x2, p2, w)
}
ENTRY e {
  x0 = f32[8,5] parameter(0)
  p0 = s32[8,1] parameter(1)
  w0 = f32[5,20] parameter(2)
  start = s32[] constant(0)
  state = (s32[], f32[8,5], s32[8,1], f32[5,20]) tuple(start, x0, p0, w0)
  ROOT loop = (s32[], f32[8,5], s32[8,1], f32[5,20]) while(state), condition=cond, body=body
}
"""


@pytest.mark.needs_cc
def test_lanes_gathering_from_a_computed_value_select_among_its_positions() -> None:
    import re

    from hlofuse.api import compile_module

    rng = np.random.default_rng(1)
    args = [rng.standard_normal((8, 5)).astype(np.float32),
            rng.integers(-1, 21, (8, 1)).astype(np.int32),
            rng.standard_normal((5, 20)).astype(np.float32)]
    compiled = compile_module(parse_module(GATHER_FROM_COMPUTED), "max", "cpu")
    kernel = compiled.source()[compiled.source().index("(kCustom)"):]
    assert not re.search(r"if \(\(\(j\d+ >= 0\) && \(j\d+ < 20\)\)\)", kernel)
    expected = flatten_value(evaluate(parse_module(GATHER_FROM_COMPUTED), args))
    for a, e in zip(flatten_value(compiled(*args)), expected):
        np.testing.assert_allclose(np.asarray(a), e, rtol=1e-5, atol=1e-6)
