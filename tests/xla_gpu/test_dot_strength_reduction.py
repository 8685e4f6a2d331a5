"""XLA's GPU DotStrengthReduction as `xla-gpu` runs it before fusion: a small dot with a
vector operand becomes a multiply of broadcast operands and a sum over the contracting
dimensions; dots of two matrices stay."""

from __future__ import annotations

import numpy as np

from hlofuse.ir.parser import parse_module
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.decision_log import DecisionLog
from hlofuse.passes.dot_strength_reduction import DotDecomposer, DotStrengthReduction
from hlofuse.passes.manager import Pipeline
from hlofuse.passes.simplify import AlgebraicSimplifier
from hlofuse.reference.interpreter import evaluate, flatten_value

PROGRAM = """
HloModule dots
ENTRY e {
  a = f32[4,3,5] parameter(0)
  v = f32[5] parameter(1)
  m = f32[5,7] parameter(2)
  mv = f32[4,3] dot(a, v), lhs_contracting_dims={2}, rhs_contracting_dims={0}
  vm = f32[7] dot(v, m), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  mm = f32[4,3,7] dot(a, m), lhs_contracting_dims={2}, rhs_contracting_dims={0}
  ROOT t = (f32[4,3], f32[7], f32[4,3,7]) tuple(mv, vm, mm)
}
"""


def test_small_vector_dots_become_multiply_and_reduce() -> None:
    module = parse_module(PROGRAM)
    log = DecisionLog()
    out, _ = Pipeline([DotStrengthReduction(), DeadCodeElimination()], debug=True,
                      log=log).run(module)
    mv, vm, mm = out.entry.root.operands
    assert mv.op.text == "reduce" and mv.ints("dimensions") == (2,)
    product = mv.operands[0]
    assert product.op.text == "multiply"
    # The rhs vector is broadcast over the lhs's non-contracting dimensions (0, 1).
    broadcast = product.operands[1]
    assert broadcast.op.text == "broadcast" and broadcast.ints("dimensions") == (2,)
    assert broadcast.shape.dims == (4, 3, 5)
    # v . m: the lhs vector gets m's non-contracting dimension before its contracting one,
    # m is transposed to (non-contracting, contracting) order.
    assert vm.op.text == "reduce"
    lhs, rhs = vm.operands[0].operands
    assert lhs.op.text == "broadcast" and lhs.shape.dims == (7, 5)
    assert rhs.op.text == "transpose" and rhs.ints("dimensions") == (1, 0)
    assert mm.op.text == "dot"
    assert [r.rule for r in log] == ["dot-to-reduce", "dot-to-reduce"]
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((4, 3, 5), (5,), (5, 7))]
    for want, got in zip(flatten_value(evaluate(module, args)),
                         flatten_value(evaluate(out, args)), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_non_canonical_dot_is_canonicalised_and_a_transpose_before_it_cancels() -> None:
    """DotDecomposer: dot(transpose(a), m) contracting the transposed dimension 1 has two
    non-contracting lhs dimensions; canonicalised, the lhs is transposed back (the two
    transposes cancel in the simplifier) and reshaped to [12, 5]."""
    module = parse_module("""
HloModule decompose
ENTRY e {
  a = f32[4,3,5] parameter(0)
  m = f32[5,7] parameter(1)
  t = f32[4,5,3] transpose(a), dimensions={0,2,1}
  ROOT d = f32[4,3,7] dot(t, m), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""")
    log = DecisionLog()
    out, _ = Pipeline([DotDecomposer(), AlgebraicSimplifier(), DeadCodeElimination()],
                      debug=True, log=log).run(module)
    root = out.entry.root
    assert root.op.text == "reshape" and root.shape.dims == (4, 3, 7)
    dot = root.operands[0]
    assert dot.op.text == "dot" and dot.shape.dims == (12, 7)
    lhs = dot.operands[0]
    assert lhs.op.text == "reshape" and lhs.operands[0] is out.entry.parameters[0]
    assert not any(i.op.text == "transpose" for i in out.entry.instructions)
    assert [r.rule for r in log if r.pass_name == "dot-decomposer"] == ["canonical-dot"]
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((4, 3, 5), (5, 7))]
    for want, got in zip(flatten_value(evaluate(module, args)),
                         flatten_value(evaluate(out, args)), strict=True):
        np.testing.assert_array_equal(got, want)
