"""A pass over a value's positions (the lanes inside, a few positions a pass) reads the loop
state at the pass's positions: one row for every lane, so a plain load, not the select over
the rows that a position computed per lane needs (codegen/body.py,
`of_sequential_counters`). A gated recurrent layer, h' = W2 tanh(W1 h + h) + tanh(W1 h + h),
reads h that way; with the select its pass ran scalar (a GRU policy's rollout 3.7x slower)."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c.build import generate_c

GATED = """
HloModule gated_state

body {
  p = (s32[], f32[64,32], f32[32,32], f32[32,32]) parameter(0)
  t = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  t1 = s32[] add(t, one)
  h = f32[64,32] get-tuple-element(p), index=1
  w1 = f32[32,32] get-tuple-element(p), index=2
  w2 = f32[32,32] get-tuple-element(p), index=3
  d1 = f32[64,32] dot(h, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a = f32[64,32] add(d1, h)
  g = f32[64,32] tanh(a)
  d2 = f32[64,32] dot(g, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  h1 = f32[64,32] add(d2, g)
  ROOT out = (s32[], f32[64,32], f32[32,32], f32[32,32]) tuple(t1, h1, w1, w2)
}

cond {
  q = (s32[], f32[64,32], f32[32,32], f32[32,32]) parameter(0)
  step = s32[] get-tuple-element(q), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(step, n), direction=LT
}

ENTRY main {
  h0 = f32[64,32] parameter(0)
  wa = f32[32,32] parameter(1)
  wb = f32[32,32] parameter(2)
  zero = s32[] constant(0)
  init = (s32[], f32[64,32], f32[32,32], f32[32,32]) tuple(zero, h0, wa, wb)
  loop = (s32[], f32[64,32], f32[32,32], f32[32,32]) while(init), condition=cond, body=body
  ROOT final = f32[64,32] get-tuple-element(loop), index=1
}
"""


@pytest.mark.usefixtures("large_whole_loops")
def test_a_pass_reads_the_state_at_its_positions_with_plain_loads() -> None:
    module = parse_module(GATED, "gated_state")
    source = generate_c(run_strategy(module, "max").module).source.text
    assert "HLOFUSE_WIDE_VECTORS void" in source  # the loop is one whole-loop kernel
    assert "+= 8) {" in source  # the hidden layer computed in passes over its positions
    assert "== 1) ? s" not in source  # no select over the state's rows


@pytest.mark.needs_cc
def test_the_gated_layer_computes_the_interpreters_values() -> None:
    module = parse_module(GATED, "gated_state")
    rng = np.random.default_rng(0)
    h0 = rng.uniform(-1, 1, (64, 32)).astype(np.float32)
    w1, w2 = (rng.uniform(-0.2, 0.2, (32, 32)).astype(np.float32) for _ in range(2))
    (actual,) = compile_module(module, "max", "cpu").run_flat([h0, w1, w2])
    (expected,) = flatten_value(evaluate(module, [h0, w1, w2]))
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=1e-5, atol=1e-5)
