"""`max`'s if-conversion: a `lax.switch` on a value all lanes share (JAX lowers it to a
conditional on an s32 index) inside a time loop. Its branches are cheap, so every branch runs
and a chain of selects on the index picks the result; the loop is then one kernel. XLA's
own ConditionalSimplifier (select_chains off, `xla-gpu`) keeps such a conditional."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.passes.conditional_simplifier import ConditionalSimplifier
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.manager import Pipeline
from hlofuse.reference.interpreter import evaluate, flatten_value

# Reduced from a rollout whose dynamics are picked per step by `lax.switch(regime, ...)`:
# the state [4, 2] advances by one of three cheap updates, the regime read from the loop.
PROGRAM = """
HloModule switch_in_loop

calm {
  c.p = f32[4,2] parameter(0)
  c.k = f32[] constant(0.5)
  c.b = f32[4,2] broadcast(c.k), dimensions={}
  ROOT c.r = f32[4,2] add(c.p, c.b)
}

windy {
  w.p = f32[4,2] parameter(0)
  w.k = f32[] constant(1.5)
  w.b = f32[4,2] broadcast(w.k), dimensions={}
  ROOT w.r = f32[4,2] multiply(w.p, w.b)
}

icy {
  i.p = f32[4,2] parameter(0)
  ROOT i.r = f32[4,2] negate(i.p)
}

body {
  b.s = (s32[], f32[4,2], s32[]) parameter(0)
  b.t = s32[] get-tuple-element(b.s), index=0
  b.x = f32[4,2] get-tuple-element(b.s), index=1
  b.regime = s32[] get-tuple-element(b.s), index=2
  b.next = f32[4,2] conditional(b.regime, b.x, b.x, b.x), branch_computations={calm, windy, icy}
  b.one = s32[] constant(1)
  b.t1 = s32[] add(b.t, b.one)
  b.r1 = s32[] add(b.regime, b.one)
  b.three = s32[] constant(3)
  b.r2 = s32[] remainder(b.r1, b.three)
  ROOT b.out = (s32[], f32[4,2], s32[]) tuple(b.t1, b.next, b.r2)
}

cond {
  c.s = (s32[], f32[4,2], s32[]) parameter(0)
  c.t = s32[] get-tuple-element(c.s), index=0
  c.n = s32[] constant(7)
  ROOT c.lt = pred[] compare(c.t, c.n), direction=LT
}

ENTRY e {
  x = f32[4,2] parameter(0)
  regime = s32[] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[4,2], s32[]) tuple(zero, x, regime)
  loop = (s32[], f32[4,2], s32[]) while(init), condition=cond, body=body
  ROOT y = f32[4,2] get-tuple-element(loop), index=1
}
"""

X = np.arange(8, dtype=np.float32).reshape(4, 2) - 3.0


def _chained(select_chains: bool) -> str:
    out, _ = Pipeline([ConditionalSimplifier(select_chains=select_chains),
                       DeadCodeElimination()], debug=True).run(parse_module(PROGRAM))
    return module_text(out)


def test_xlas_simplifier_keeps_a_conditional_on_an_s32_index() -> None:
    assert " conditional(" in _chained(select_chains=False)


# -1 and 5 are out of range: the conditional runs its last branch, and so must the chain.
@pytest.mark.parametrize("regime", [-1, 0, 1, 2, 5])
def test_a_cheap_s32_conditional_becomes_a_select_chain_with_the_same_results(
        regime: int) -> None:
    text = _chained(select_chains=True)
    assert " conditional(" not in text
    assert text.count(" select(") == 2 and text.count("direction=EQ") == 2
    args = [X, np.int32(regime)]
    expected = flatten_value(evaluate(parse_module(PROGRAM), args))
    actual = flatten_value(evaluate(parse_module(text), args))
    np.testing.assert_array_equal(actual[0], expected[0])


def test_max_makes_a_loop_holding_a_cheap_switch_one_kernel() -> None:
    fused = run_strategy(parse_module(PROGRAM), "max", debug=True)
    assert not fused.kernels_per_iteration(), fused.explain()
    assert " conditional(" not in module_text(fused.module)
