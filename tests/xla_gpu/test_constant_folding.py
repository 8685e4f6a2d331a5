"""XLA's HloConstantFolding as `xla-gpu` runs it before fusion: an instruction with a constant
operand and otherwise only broadcast constants and iotas becomes a constant; broadcasts, iotas
and instructions without a constant operand stay."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.passes.constant_folding import ConstantFolding
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.decision_log import DecisionLog
from hlofuse.passes.manager import Pipeline
from hlofuse.reference.interpreter import evaluate, flatten_value

DATA = Path(__file__).parents[1] / "data" / "xla_gpu"

# reduce(broadcast(c), 0) folds (the sum of eight 1.5s); the broadcast alone, the iota alone
# and add(iota, broadcast(c)) (no operand is a constant) stay; add(iota, c) folds.
PROGRAM = """
HloModule folding

sum {
  lhs = f32[] parameter(0)
  rhs = f32[] parameter(1)
  ROOT s = f32[] add(lhs, rhs)
}

ENTRY e {
  x = f32[] parameter(0)
  c = f32[] constant(1.5)
  zero = f32[] constant(0)
  b = f32[8] broadcast(c), dimensions={}
  r = f32[] reduce(b, zero), dimensions={0}, to_apply=sum
  y = f32[] add(x, r)
  i = s32[4] iota(), iota_dimension=0
  two = s32[] constant(2)
  bt = s32[4] broadcast(two), dimensions={}
  kept = s32[4] add(i, bt)
  ct = s32[4] constant({1, 1, 1, 1})
  folded = s32[4] add(i, ct)
  ROOT t = (f32[], f32[8], s32[4], s32[4]) tuple(y, b, kept, folded)
}
"""


def _fold(module: Module) -> tuple[Module, DecisionLog]:
    log = DecisionLog()
    folded, _ = Pipeline([ConstantFolding(), DeadCodeElimination()], debug=True,
                         log=log).run(module)
    return folded, log


def _entry_ops(module: Module) -> dict[str, str]:
    return {i.name: i.op.text for i in module.entry.instructions}


def test_a_reduce_of_a_broadcast_constant_folds_and_the_broadcast_stays() -> None:
    module = parse_module(PROGRAM)
    folded, log = _fold(module)
    folded_names = sorted(r.producer for r in log if r.rule == "folded-constant")
    assert folded_names == ["folded", "r"]
    ops = _entry_ops(folded)
    assert "r" not in ops and "folded" not in ops
    assert ops["b"] == "broadcast" and ops["i"] == "iota" and ops["kept"] == "add"
    y = next(i for i in folded.entry.instructions if i.name == "y")
    constant = y.operands[1]
    assert constant.op.text == "constant"
    np.testing.assert_array_equal(constant.attrs["literal"], np.float32(12.0))
    x = np.float32(0.25)
    want = flatten_value(evaluate(module, [x]))
    got = flatten_value(evaluate(folded, [x]))
    assert len(want) == len(got) == 4
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(g, w)
    assert float(np.asarray(got[0])) == 12.25
    np.testing.assert_array_equal(got[3], np.array([1, 2, 3, 4], np.int32))


def test_nothing_to_fold_leaves_the_module_as_it_is() -> None:
    module = parse_module(PROGRAM.replace("c = f32[] constant(1.5)",
                                          "c = f32[] parameter(1)")
                          .replace("ct = s32[4] constant({1, 1, 1, 1})",
                                   "ct = s32[4] broadcast(two), dimensions={}"))
    folded, log = _fold(module)
    assert [r for r in log if r.rule == "folded-constant"] == []
    assert _entry_ops(folded) == _entry_ops(module)


# xla-gpu on the whole rollout: seconds.
@pytest.mark.thorough
def test_cartpole_rollout_sums_its_constant_reward_before_fusion_as_xla_does() -> None:
    """The rollout's reward is `sum(broadcast(1.0))` per step; XLA's optimised HLO adds a
    constant to the running total, and so does xla-gpu, with no reduction kernel for it."""
    module = parse_module((DATA / "cartpole_rollout.before.hlo").read_text())
    result = run_strategy(module, "xla-gpu")
    assert any(r.rule == "folded-constant" and r.producer == "reduce_sum.15"
               for r in result.decisions)
    names = {i.name for c in result.module.computations for i in c.instructions}
    assert "reduce_sum.15" not in names
