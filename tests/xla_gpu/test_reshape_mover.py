"""XLA's ReshapeMover (xla/hlo/transforms/simplifiers/reshape_mover.cc), which gpu_compiler.cc
runs in its "simplification" fixed point with `reshape_of_1d_broadcast_is_cheap`, as
`reshape-mover` does for `xla-gpu`: text in, text out."""

from __future__ import annotations

import numpy as np

from hlofuse.fusion.xla_gpu.while_simplify import GPU_LOOP_SIMPLIFICATION
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.passes.constant_folding import ConstantFolding
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.reshape_mover import ReshapeMover, common_factors
from hlofuse.passes.simplify import AlgebraicSimplifier
from hlofuse.reference.interpreter import evaluate, flatten_value

# `cv`..`b5`: mountain_car_rollout's Threefry key words (XLA's `convert_element_type.6`,
# `shift_right_logical.123`, `broadcast_in_dim.4/5`): a dynamic-slice squeezed to a scalar,
# converted and shifted, then reshaped back to one element. `cv` moves above its squeeze
# (`sq` has no other user); `sh` waits, as its reshape operand appears only with this pass.
# `sum` adds two equal transposes and moves; `prod` multiplies by a broadcast of a scalar,
# which any transpose leaves trivial, but its other operand is no rearrange yet. Left alone:
# `keep` (its other operand is a parameter) and `n` (its reshape `rw` is also a result).
BEFORE = """
HloModule m
ENTRY e {
  v = s32[50] parameter(0)
  i = s32[] parameter(1)
  ds = s32[1] dynamic-slice(v, i), dynamic_slice_sizes={1}
  sq = s32[] reshape(ds)
  cv = u32[] convert(sq)
  c = u32[] constant(32)
  sh = u32[] shift-right-logical(cv, c)
  b4 = u32[1] reshape(sh)
  b5 = u32[1] reshape(cv)
  x = f32[2,3] parameter(2)
  y = f32[2,3] parameter(3)
  tx = f32[3,2] transpose(x), dimensions={1,0}
  ty = f32[3,2] transpose(y), dimensions={1,0}
  s = f32[] parameter(4)
  bs = f32[3,2] broadcast(s), dimensions={}
  sum = f32[3,2] add(tx, ty)
  prod = f32[3,2] multiply(sum, bs)
  z = f32[6] parameter(5)
  rx = f32[6] reshape(x)
  keep = f32[6] add(rx, z)
  w = u32[1] parameter(6)
  rw = u32[] reshape(w)
  n = u32[] not(rw)
  ROOT r = (u32[1], u32[1], f32[3,2], f32[6], u32[], u32[]) tuple(b4, b5, prod, keep, rw, n)
}
"""

AFTER = """\
HloModule m, entry_computation_layout={(s32[50]{0}, s32[], f32[2,3]{1,0}, f32[2,3]{1,0}, f32[], /*index=5*/f32[6]{0}, u32[1]{0})->(u32[1]{0}, u32[1]{0}, f32[3,2]{1,0}, f32[6]{0}, u32[], /*index=5*/u32[])}

ENTRY e {
  v = s32[50]{0} parameter(0)
  i = s32[] parameter(1)
  ds = s32[1]{0} dynamic-slice(v, i), dynamic_slice_sizes={1}
  cv.0 = u32[1]{0} convert(ds)
  reshape.0 = u32[] reshape(cv.0)
  c = u32[] constant(32)
  sh = u32[] shift-right-logical(reshape.0, c)
  b4 = u32[1]{0} reshape(sh)
  b5 = u32[1]{0} reshape(reshape.0)
  x = f32[2,3]{1,0} parameter(2)
  y = f32[2,3]{1,0} parameter(3)
  tx = f32[3,2]{1,0} transpose(x), dimensions={1,0}
  ty = f32[3,2]{1,0} transpose(y), dimensions={1,0}
  s = f32[] parameter(4)
  bs = f32[3,2]{1,0} broadcast(s), dimensions={}
  transpose.0 = f32[2,3]{1,0} transpose(tx), dimensions={1,0}
  transpose.1 = f32[2,3]{1,0} transpose(ty), dimensions={1,0}
  sum.0 = f32[2,3]{1,0} add(transpose.0, transpose.1)
  transpose.2 = f32[3,2]{1,0} transpose(sum.0), dimensions={1,0}
  prod = f32[3,2]{1,0} multiply(transpose.2, bs)
  z = f32[6]{0} parameter(5)
  rx = f32[6]{0} reshape(x)
  keep = f32[6]{0} add(rx, z)
  w = u32[1]{0} parameter(6)
  rw = u32[] reshape(w)
  n = u32[] not(rw)
  ROOT r = (u32[1]{0}, u32[1]{0}, f32[3,2]{1,0}, f32[6]{0}, u32[], /*index=5*/u32[]) tuple(b4, b5, prod, keep, rw, n)
}
"""


def test_element_wise_ops_move_above_their_reshapes_and_transposes() -> None:
    module, changed = ReshapeMover().run(parse_module(BEFORE))
    assert changed
    module, _ = DeadCodeElimination().run(module)
    assert module_text(module) == AFTER


# With the simplifier and constant folding (the rest of XLA's fixed point), the key words are
# computed on u32[1] with no reshape left, as in XLA's graph before fusion
# (`convert_element_type.0` and `shift_right_logical.0` of u32[1] in
# mountain_car_rollout.h100.before_multi_output_fusion.hlo).
KEY_WORDS = """
HloModule m
ENTRY e {
  v = s32[50] parameter(0)
  i = s32[] parameter(1)
  ds = s32[1] dynamic-slice(v, i), dynamic_slice_sizes={1}
  sq = s32[] reshape(ds)
  cv = u32[] convert(sq)
  c = u32[] constant(32)
  sh = u32[] shift-right-logical(cv, c)
  b4 = u32[1] reshape(sh)
  b5 = u32[1] reshape(cv)
  ROOT r = (u32[1], u32[1]) tuple(b4, b5)
}
"""

KEY_WORDS_AFTER = """\
HloModule m, entry_computation_layout={(s32[50]{0}, s32[])->(u32[1]{0}, u32[1]{0})}

ENTRY e {
  v = s32[50]{0} parameter(0)
  i = s32[] parameter(1)
  ds = s32[1]{0} dynamic-slice(v, i), dynamic_slice_sizes={1}
  cv.0 = u32[1]{0} convert(ds)
  constant.0 = u32[1]{0} constant({32})
  sh.0 = u32[1]{0} shift-right-logical(cv.0, constant.0)
  ROOT r = (u32[1]{0}, u32[1]{0}) tuple(sh.0, cv.0)
}
"""


def test_the_key_words_lose_their_reshapes_in_the_fixed_point() -> None:
    module = parse_module(KEY_WORDS)
    passes = (ReshapeMover(), AlgebraicSimplifier(), ConstantFolding(), DeadCodeElimination())
    for _ in range(10):
        changed = False
        for p in passes:
            module, did = p.run(module)
            changed |= did
        if not changed:
            break
    assert module_text(module) == KEY_WORDS_AFTER


def test_xla_gpu_runs_the_reshape_mover_with_its_loop_simplification() -> None:
    assert any(isinstance(p, ReshapeMover) for p in GPU_LOOP_SIMPLIFICATION)


def test_common_factors_follows_xla() -> None:
    assert common_factors((2, 3), (2, 3)) == [(0, 0), (1, 1), (2, 2)]
    assert common_factors((2, 3, 4), (6, 4)) == [(0, 0), (2, 1), (3, 2)]
    assert common_factors((1,), ()) == [(0, 0), (1, 0)]
    assert common_factors((4, 1, 6), (4, 6)) == [(0, 0), (1, 1), (2, 1), (3, 2)]


def test_the_move_keeps_the_values() -> None:
    before = parse_module(BEFORE)
    after, _ = ReshapeMover().run(before)
    rng = np.random.default_rng(0)
    args = [rng.integers(-2**31, 2**31 - 1, 50, dtype=np.int32), np.int32(7),
            rng.standard_normal((2, 3)).astype(np.float32),
            rng.standard_normal((2, 3)).astype(np.float32), np.float32(1.5),
            rng.standard_normal(6).astype(np.float32),
            rng.integers(0, 2**32 - 1, 1, dtype=np.uint32)]
    for want, got in zip(flatten_value(evaluate(before, args)),
                         flatten_value(evaluate(after, args)), strict=True):
        np.testing.assert_array_equal(want, got)
