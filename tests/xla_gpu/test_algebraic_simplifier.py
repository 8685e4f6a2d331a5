"""Rules of XLA's algebraic simplifier that `arithmetic-identities` applies for `xla-gpu`,
text in, text out: a broadcast sinks below an element-wise op of broadcasts
(`AlgebraicSimplifierVisitor::TryToSinkBroadcastAfterElementwiseOps`, called from
HandleBroadcast), a slice of a reshape's leading rows becomes a reshape of a slice
(`TryToReorderSliceAndReshape`, called from HandleSlice), and a concatenate with a broadcast
scalar becomes a pad (HandleConcatenate), and a product of a product with constants multiplies
the constants once (HandleMultiply)."""

from __future__ import annotations

import numpy as np

from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.passes.arithmetic_identities import ArithmeticIdentities
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.decision_log import DecisionLog, DecisionRecord
from hlofuse.passes.simplify import AlgebraicSimplifier

# `m` and `n`: random_uniform's Threefry counter (XLA's `broadcast.1` of a `u64[4]` product);
# the broadcast of the iota stays a broadcast, its user sinks first. `lt` compares two
# broadcasts of one shape along the same dimension; `twos` adds scalar broadcasts. Left
# alone: `sel` (its pred operand broadcasts another element type), `mixed` (the operands
# broadcast along different dimensions), `keep` (its broadcast of an iota has no element-wise
# user, so it becomes an iota).
BEFORE = """
HloModule m
ENTRY e {
  i = u64[4] iota(), iota_dimension=0
  bi = u64[4,8] broadcast(i), dimensions={0}
  c = u64[] constant(8)
  bc = u64[4,8] broadcast(c), dimensions={}
  m = u64[4,8] multiply(bi, bc)
  n = u64[4,8] not(m)
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  z = f32[8] parameter(2)
  p = pred[4] parameter(3)
  s1 = f32[] parameter(4)
  bx = f32[4,8] broadcast(x), dimensions={0}
  by = f32[4,8] broadcast(y), dimensions={0}
  bz = f32[4,8] broadcast(z), dimensions={1}
  bp = pred[4,8] broadcast(p), dimensions={0}
  bs = f32[4,8] broadcast(s1), dimensions={}
  lt = pred[4,8] compare(bx, by), direction=LT
  sel = f32[4,8] select(bp, bx, by)
  mixed = f32[4,8] add(bx, bz)
  twos = f32[4,8] add(bs, bs)
  j = s32[3] iota(), iota_dimension=0
  keep = s32[3,2] broadcast(j), dimensions={0}
  ROOT r = (u64[4,8], pred[4,8], f32[4,8], f32[4,8], f32[4,8], s32[3,2]) tuple(n, lt, sel, mixed, twos, keep)
}
"""

AFTER = """\
HloModule m, entry_computation_layout={(f32[4]{0}, f32[4]{0}, f32[8]{0}, pred[4]{0}, f32[])->(u64[4,8]{1,0}, pred[4,8]{1,0}, f32[4,8]{1,0}, f32[4,8]{1,0}, f32[4,8]{1,0}, /*index=5*/s32[3,2]{1,0})}

ENTRY e {
  i = u64[4]{0} iota(), iota_dimension=0
  c = u64[] constant(8)
  broadcast.0 = u64[4]{0} broadcast(c), dimensions={}
  m.0 = u64[4]{0} multiply(i, broadcast.0)
  n.0 = u64[4]{0} not(m.0)
  broadcast.2 = u64[4,8]{1,0} broadcast(n.0), dimensions={0}
  x = f32[4]{0} parameter(0)
  y = f32[4]{0} parameter(1)
  z = f32[8]{0} parameter(2)
  p = pred[4]{0} parameter(3)
  s1 = f32[] parameter(4)
  bx = f32[4,8]{1,0} broadcast(x), dimensions={0}
  by = f32[4,8]{1,0} broadcast(y), dimensions={0}
  bz = f32[4,8]{1,0} broadcast(z), dimensions={1}
  bp = pred[4,8]{1,0} broadcast(p), dimensions={0}
  lt.0 = pred[4]{0} compare(x, y), direction=LT
  broadcast.3 = pred[4,8]{1,0} broadcast(lt.0), dimensions={0}
  sel = f32[4,8]{1,0} select(bp, bx, by)
  mixed = f32[4,8]{1,0} add(bx, bz)
  twos.0 = f32[] add(s1, s1)
  broadcast.4 = f32[4,8]{1,0} broadcast(twos.0), dimensions={}
  iota.0 = s32[3,2]{1,0} iota(), iota_dimension=0
  ROOT r = (u64[4,8]{1,0}, pred[4,8]{1,0}, f32[4,8]{1,0}, f32[4,8]{1,0}, f32[4,8]{1,0}, /*index=5*/s32[3,2]{1,0}) tuple(broadcast.2, broadcast.3, sel, mixed, broadcast.4, iota.0)
}
"""


def test_broadcasts_sink_below_element_wise_ops_of_broadcasts() -> None:
    module, changed = ArithmeticIdentities().run(parse_module(BEFORE))
    assert changed
    module, _ = DeadCodeElimination().run(module)
    assert module_text(module) == AFTER
    again, changed = ArithmeticIdentities().run(module)
    assert not changed and again is module


def test_the_rewrite_keeps_the_values() -> None:
    import numpy as np

    from hlofuse.reference.interpreter import evaluate, flatten_value

    before = parse_module(BEFORE)
    after, _ = ArithmeticIdentities().run(before)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32),
            rng.standard_normal(8).astype(np.float32), rng.random(4) < 0.5,
            np.float32(1.5)]
    for want, got in zip(flatten_value(evaluate(before, args)),
                         flatten_value(evaluate(after, args)), strict=True):
        np.testing.assert_array_equal(want, got)


# Threefry's `random.split` as JAX writes it: two keys stacked (`stack`), a row taken and
# squeezed (`key`), and its two words sliced (`first`, `second`). `first` cuts the squeezed
# row's leading element, so it moves below the reshape, and with `simplify`'s slice-of-slice
# and slice-of-concatenate rules reaches `a`, the piece it came from, as in XLA's pre-fusion
# graph of random_bernoulli; `second` starts at 1 and stays. `head` takes the first two rows
# of `p` through a flattening reshape; `odd` takes 8 of 24 elements, not whole rows of the
# minor dimension (6), and stays.
SLICES = """
HloModule m
ENTRY e {
  a = u32[2] parameter(0)
  b = u32[2] parameter(1)
  ra = u32[2,1] reshape(a)
  rb = u32[2,1] reshape(b)
  stack = u32[2,2] concatenate(ra, rb), dimensions={1}
  row = u32[1,2] slice(stack), slice={[0:1], [0:2]}
  key = u32[2] reshape(row)
  first = u32[1] slice(key), slice={[0:1]}
  second = u32[1] slice(key), slice={[1:2]}
  p = f32[4,6] parameter(2)
  flat = f32[24] reshape(p)
  head = f32[12] slice(flat), slice={[0:12]}
  odd = f32[8] slice(flat), slice={[0:8]}
  ROOT r = (u32[1], u32[1], f32[12], f32[8]) tuple(first, second, head, odd)
}
"""

SLICES_AFTER = """\
HloModule m, entry_computation_layout={(u32[2]{0}, u32[2]{0}, f32[4,6]{1,0})->(u32[1]{0}, u32[1]{0}, f32[12]{0}, f32[8]{0})}

ENTRY e {
  a = u32[2]{0} parameter(0)
  b = u32[2]{0} parameter(1)
  ra = u32[2,1]{1,0} reshape(a)
  rb = u32[2,1]{1,0} reshape(b)
  stack = u32[2,2]{1,0} concatenate(ra, rb), dimensions={1}
  row = u32[1,2]{1,0} slice(stack), slice={[0:1], [0:2]}
  key = u32[2]{0} reshape(row)
  slice.2 = u32[1]{0} slice(a), slice={[0:1]}
  second = u32[1]{0} slice(key), slice={[1:2]}
  p = f32[4,6]{1,0} parameter(2)
  flat = f32[24]{0} reshape(p)
  head.0 = f32[2,6]{1,0} slice(p), slice={[0:2], [0:6]}
  reshape.1 = f32[12]{0} reshape(head.0)
  odd = f32[8]{0} slice(flat), slice={[0:8]}
  ROOT r = (u32[1]{0}, u32[1]{0}, f32[12]{0}, f32[8]{0}) tuple(slice.2, second, reshape.1, odd)
}
"""


def test_a_slice_of_leading_rows_moves_below_the_reshape() -> None:
    module = parse_module(SLICES)
    for _ in range(4):  # the simplification fixed point, as xla-gpu runs it
        module, _ = ArithmeticIdentities().run(module)
        module, _ = AlgebraicSimplifier().run(module)
        module, _ = DeadCodeElimination().run(module)
    assert module_text(module) == SLICES_AFTER
    rules = {r.rule for r in _log(SLICES)}
    assert rules == {"slice-of-reshape"}


def _log(text: str) -> list[DecisionRecord]:
    log = DecisionLog()
    ArithmeticIdentities().run(parse_module(text), log)
    return list(log)


# rollout_mountain_car_continuous stacks a column with a column of zeros (`stack.17`); `both`
# concatenates two broadcast scalars (the first one counts: padding low); `three` has three
# operands and stays a concatenate.
CONCATS = """
HloModule m
ENTRY e {
  x = f32[8,1] parameter(0)
  z = f32[] constant(0)
  bz = f32[8,1] broadcast(z), dimensions={}
  high = f32[8,2] concatenate(x, bz), dimensions={1}
  o = f32[] constant(1)
  bo = f32[8,3] broadcast(o), dimensions={}
  both = f32[8,4] concatenate(bo, bz), dimensions={1}
  three = f32[8,3] concatenate(x, bz, x), dimensions={1}
  ROOT r = (f32[8,2], f32[8,4], f32[8,3]) tuple(high, both, three)
}
"""


def test_a_concatenate_with_a_broadcast_scalar_is_a_pad() -> None:
    """AlgebraicSimplifierVisitor::HandleConcatenate: a concatenate of two operands one of
    which broadcasts a scalar pads the other with that scalar (XLA's `loop_pad_fusion` of
    rollout_mountain_car_continuous)."""
    module, changed = ArithmeticIdentities().run(parse_module(CONCATS))
    assert changed
    high, both, three = module.entry.root.operands
    assert high.op.text == "pad" and high.operands[0].name == "x"
    assert [(d.low, d.high) for d in high.attrs["padding"]] == [(0, 0), (0, 1)]
    assert high.operands[1].name == "z"
    assert both.op.text == "pad" and both.operands[0].name == "bz"
    assert [(d.low, d.high) for d in both.attrs["padding"]] == [(0, 0), (3, 0)]
    assert both.operands[1].name == "o"
    assert three.op.text == "concatenate"
    assert {r.rule for r in _log(CONCATS)} == {"concatenate-as-pad"}


# rollout_rigid_body's `mul.20`: a normal sample times sqrt(2) (`mul.19`), times 2. `ints`
# multiplies by full-shape constants, the inner product's constant first; `kept` has its
# broadcast factor first and stays (XLA matches broadcasts in one operand order only).
PRODUCTS = """
HloModule m
ENTRY e {
  x = f32[8,5] parameter(0)
  r2 = f32[] constant(1.41421354)
  b1 = f32[8,5] broadcast(r2), dimensions={}
  mul.19 = f32[8,5] multiply(x, b1)
  two = f32[] constant(2)
  b2 = f32[8,5] broadcast(two), dimensions={}
  mul.20 = f32[8,5] multiply(mul.19, b2)
  k = s32[3] parameter(1)
  c3 = s32[3] constant({1, 2, 3})
  c4 = s32[3] constant({4, 5, 6})
  inner = s32[3] multiply(c3, k)
  ints = s32[3] multiply(c4, inner)
  kept = f32[8,5] multiply(b2, mul.19)
  ROOT t = (f32[8,5], s32[3], f32[8,5]) tuple(mul.20, ints, kept)
}
"""


def test_a_product_of_a_product_with_constants_multiplies_the_constants_once() -> None:
    """AlgebraicSimplifierVisitor::HandleMultiply, "(A * C1) * C2 => A * (C1 * C2)": XLA's
    `loop_select_subtract_fusion` of rollout_rigid_body multiplies by 2.82842708."""
    module, changed = ArithmeticIdentities().run(parse_module(PRODUCTS))
    assert changed
    product, ints, kept = module.entry.root.operands
    assert product.op.text == "multiply" and product.operands[0].name == "x"
    factor = product.operands[1]
    assert factor.op.text == "broadcast" and factor.shape.dims == (8, 5)
    assert float(factor.operands[0].attrs["literal"]) == float(
        np.float32(1.41421354) * np.float32(2))
    assert ints.op.text == "multiply" and ints.operands[0].name == "k"
    assert ints.operands[1].attrs["literal"].tolist() == [4, 10, 18]
    assert kept.name == "kept" and kept.operands[1].name == "mul.19"
    assert {r.rule for r in _log(PRODUCTS)} == {"constant-product"}


# `sum`: jacobi_rope's uniform sample, `(u - 1) + (-0.5)` (the subtraction becomes the
# addition of -1 first); `ints` adds full-shape constants, the inner sum's constant first;
# `kept` has its broadcast constant first and stays (XLA matches broadcasts in one operand
# order only); `const` adds to a sum of a constant and a constant, which is no sum with a
# non-constant.
SUMS = """
HloModule m
ENTRY e {
  u = f32[8] parameter(0)
  one = f32[] constant(1)
  b1 = f32[8] broadcast(one), dimensions={}
  sub.12 = f32[8] subtract(u, b1)
  half = f32[] constant(-0.5)
  b2 = f32[8] broadcast(half), dimensions={}
  sum = f32[8] add(sub.12, b2)
  k = s32[3] parameter(1)
  c3 = s32[3] constant({1, 2, 3})
  c4 = s32[3] constant({4, 5, 6})
  inner = s32[3] add(c3, k)
  ints = s32[3] add(c4, inner)
  kept = f32[8] add(b2, sub.12)
  c5 = s32[3] add(c3, c4)
  const = s32[3] add(c5, c4)
  ROOT t = (f32[8], s32[3], f32[8], s32[3]) tuple(sum, ints, kept, const)
}
"""


def test_a_sum_of_a_sum_with_constants_adds_the_constants_once() -> None:
    """AlgebraicSimplifierVisitor::HandleAdd, "(A + C1) + C2 => A + (C1 + C2)": XLA's
    rollout_jacobi_rope adds -1.5 to the sample's bits (`add.523` of `broadcast.76`)."""
    module, changed = ArithmeticIdentities().run(parse_module(SUMS))
    assert changed
    summed, ints, kept, const = module.entry.root.operands
    assert summed.op.text == "add" and summed.operands[0].name == "u"
    addend = summed.operands[1]
    assert addend.op.text == "broadcast" and addend.shape.dims == (8,)
    assert float(addend.operands[0].attrs["literal"]) == -1.5
    assert ints.op.text == "add" and ints.operands[0].name == "k"
    assert ints.operands[1].attrs["literal"].tolist() == [5, 7, 9]
    assert kept.name == "kept" and kept.operands[0].name == "b2"
    assert const.name == "const" and const.operands[0].name == "c5"
    assert {r.rule for r in _log(SUMS)} == {"subtract-constant", "constant-sum"}



# `half`: jacobi_rope's `div.11` by a broadcast 2; `full` divides by a full-shape constant;
# `ints` is an integer division and `folded` a constant's, both left alone.
DIVIDES = """
HloModule m
ENTRY e {
  x = f32[8] parameter(0)
  two = f32[] constant(2)
  b = f32[8] broadcast(two), dimensions={}
  half = f32[8] divide(x, b)
  c = f32[2] constant({4, 0.1})
  y = f32[2] parameter(1)
  full = f32[2] divide(y, c)
  k = s32[8] parameter(2)
  three = s32[] constant(3)
  b3 = s32[8] broadcast(three), dimensions={}
  ints = s32[8] divide(k, b3)
  folded = f32[2] divide(c, c)
  ROOT t = (f32[8], f32[2], s32[8], f32[2]) tuple(half, full, ints, folded)
}
"""


def test_a_division_by_a_constant_multiplies_by_its_inverse() -> None:
    """AlgebraicSimplifierVisitor::HandleDivide, "A / Const => A * (1 / Const)" for
    floating-point types: XLA's rollout_jacobi_rope multiplies by 0.5 where it divided by 2
    (`multiply.4`, op name `vmap()/div`)."""
    module, changed = ArithmeticIdentities().run(parse_module(DIVIDES))
    assert changed
    half, full, ints, folded = module.entry.root.operands
    assert half.op.text == "multiply" and half.operands[0].name == "x"
    assert half.operands[1].op.text == "broadcast"
    assert float(half.operands[1].operands[0].attrs["literal"]) == 0.5
    assert half.metadata == parse_module(DIVIDES).entry.root.operands[0].metadata
    assert full.op.text == "multiply"
    inverse = full.operands[1].attrs["literal"]
    assert inverse.dtype == np.float32
    assert inverse.tolist() == [np.float32(0.25), np.float32(1) / np.float32(0.1)]
    assert ints.name == "ints" and folded.name == "folded"
    assert {r.rule for r in _log(DIVIDES)} == {"divide-by-constant"}
