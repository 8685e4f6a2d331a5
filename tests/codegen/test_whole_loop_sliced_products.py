"""A product read through slices (a recurrent cell's gates: h [32] x U [32, 96], the result
sliced into three gates of 32) is computed once per step into the block's scratch by a loop
over its 32 contracting positions, a register tile of sums a pass, as a product read whole
is (codegen/whole_loop_scratch_values.py, `looped_product`). Before, a product of 32 or
fewer contracting positions was written out as chains of multiply-adds inside each gate's
pass (a GRU policy's rollout 1.6x slower; this program's C 3.7 times as long)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.codegen.product_tiles import best_tile
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c.build import generate_c

LANES = 256
GATES = f"""
HloModule sliced_product

body {{
  p = (s32[], f32[{LANES},32], f32[32,96]) parameter(0)
  t = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  t1 = s32[] add(t, one)
  h = f32[{LANES},32] get-tuple-element(p), index=1
  u = f32[32,96] get-tuple-element(p), index=2
  g = f32[{LANES},96] dot(h, u), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  gr = f32[{LANES},32] slice(g), slice={{[0:{LANES}], [0:32]}}
  gz = f32[{LANES},32] slice(g), slice={{[0:{LANES}], [32:64]}}
  gn = f32[{LANES},32] slice(g), slice={{[0:{LANES}], [64:96]}}
  r = f32[{LANES},32] logistic(gr)
  z = f32[{LANES},32] logistic(gz)
  rn = f32[{LANES},32] multiply(r, gn)
  n = f32[{LANES},32] tanh(rn)
  d = f32[{LANES},32] subtract(h, n)
  zd = f32[{LANES},32] multiply(z, d)
  h1 = f32[{LANES},32] add(n, zd)
  ROOT out = (s32[], f32[{LANES},32], f32[32,96]) tuple(t1, h1, u)
}}

cond {{
  q = (s32[], f32[{LANES},32], f32[32,96]) parameter(0)
  step = s32[] get-tuple-element(q), index=0
  five = s32[] constant(5)
  ROOT lt = pred[] compare(step, five), direction=LT
}}

ENTRY main {{
  h0 = f32[{LANES},32] parameter(0)
  u0 = f32[32,96] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[{LANES},32], f32[32,96]) tuple(zero, h0, u0)
  loop = (s32[], f32[{LANES},32], f32[32,96]) while(init), condition=cond, body=body
  ROOT final = f32[{LANES},32] get-tuple-element(loop), index=1
}}
"""


def _source() -> str:
    return generate_c(run_strategy(parse_module(GATES, "sliced_product"), "max").module
                      ).source.text


def test_the_sliced_product_is_one_looped_product_in_scratch() -> None:
    source = _source()
    assert "HLOFUSE_WIDE_VECTORS void" in source  # the loop is one whole-loop kernel
    # The product's 96 positions kept for the block's lanes, read by the three gates.
    scratch = re.findall(r"float (v\d+)\[96\]\[\d+\];", source)
    assert len(scratch) == 1
    # Computed by a loop over the 32 contracting positions reading the state h there...
    loops = re.findall(r"for \(int (c\d+) = 0; c\d+ < 32; \+\+c\d+\)", source)
    assert loops
    assert re.search(rf"s1\[{loops[0]}\]\[l\]", source)
    # ...in passes of the register tile the model picks (not the 8 positions of a value).
    tile = best_tile(96, 1)
    assert tile.positions != 8
    assert re.search(rf"q\d+ < {96 - 96 % tile.positions}; q\d+ \+= {tile.positions}\)",
                     source)
    # No gate's pass writes the product out: 32 x 96 multiply-adds, each once.
    assert source.count("fmaf(") < 400


@pytest.mark.needs_cc
def test_the_gates_compute_the_interpreters_values() -> None:
    module = parse_module(GATES, "sliced_product")
    rng = np.random.default_rng(0)
    h0 = rng.uniform(-1, 1, (LANES, 32)).astype(np.float32)
    u0 = rng.uniform(-0.3, 0.3, (32, 96)).astype(np.float32)
    (actual,) = compile_module(module, "max", "cpu").run_flat([h0, u0])
    (expected,) = flatten_value(evaluate(module, [h0, u0]))
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=1e-5, atol=1e-6)
