"""XLA's conditional rewrites as `xla-gpu` runs them before fusion: a branch index converted
from a pred becomes the pred (the algebraic simplifier), a two-branch pred conditional with
cheap branches becomes a select of both branches, and a conditional whose branch is known is
that branch (ConditionalSimplifier::TryRemoveConditional)."""

from __future__ import annotations

import numpy as np

from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.passes.computation_deduplicator import ComputationDeduplicator
from hlofuse.passes.conditional_simplifier import ConditionalPredIndex, ConditionalSimplifier
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.decision_log import DecisionLog
from hlofuse.passes.manager import Pipeline
from hlofuse.reference.interpreter import evaluate, flatten_value

PROGRAM = """
HloModule conditionals

minus_one {
  a0 = f32[4] parameter(0)
  one = f32[] constant(1)
  b0 = f32[4] broadcast(one), dimensions={}
  ROOT s0 = f32[4] subtract(a0, b0)
}

sine {
  a1 = f32[4] parameter(0)
  ROOT s1 = f32[4] sine(a1)
}

identity {
  ROOT a2 = f32[4] parameter(0)
}

transposing {
  a3 = f32[4] parameter(0)
  ROOT t3 = f32[4] transpose(a3), dimensions={0}
}

ENTRY e {
  x = f32[4] parameter(0)
  p = pred[] parameter(1)
  i = s32[] convert(p)
  cheap = f32[4] conditional(i, x, x), branch_computations={minus_one, sine}
  empty = f32[4] conditional(p, x, x), true_computation=identity, false_computation=sine
  dear = f32[4] conditional(p, x, x), true_computation=transposing, false_computation=sine
  two = s32[] constant(7)
  known = f32[4] conditional(two, x, x), branch_computations={minus_one, sine}
  ROOT t = (f32[4], f32[4], f32[4], f32[4]) tuple(cheap, empty, dear, known)
}
"""


def _simplify(module: Module) -> tuple[Module, DecisionLog]:
    log = DecisionLog()
    out, _ = Pipeline([ConditionalPredIndex(), ConditionalSimplifier(), DeadCodeElimination()],
                      debug=True, log=log).run(module)
    return out, log


def test_cheap_pred_conditionals_become_selects_and_known_branches_are_inlined() -> None:
    module = parse_module(PROGRAM)
    out, log = _simplify(module)
    entry = {i.name: i for i in out.entry.instructions}
    # The convert is gone: the select reads p itself, true picks branch 1 (sine).
    (select,) = [i for i in out.entry.instructions if i.op.text == "select"]
    assert select.operands[0].op.text == "broadcast" and select.operands[0].operands[0] is \
        entry["p"]
    assert select.operands[1].op.text == "sine" and select.operands[2].op.text == "subtract"
    assert "i" not in entry
    # An empty branch (identity) and an expensive one (a transpose) keep their conditionals.
    conditionals = sorted(i.name for i in out.entry.instructions if i.op.text == "conditional")
    assert conditionals == ["dear", "empty"]
    # Index 7 is out of range for two branches: the last branch runs, inlined.
    root = out.entry.root
    assert root.operands[3].op.text == "sine"
    rules = sorted({r.rule for r in log})
    assert rules == ["known-branch", "pred-index", "select-branches"]
    x = np.array([0.5, -1.0, 2.0, 3.0], np.float32)
    for p in (True, False):
        want = flatten_value(evaluate(module, [x, np.bool_(p)]))
        got = flatten_value(evaluate(out, [x, np.bool_(p)]))
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(w, g)


def test_a_pred_index_conditional_swaps_its_branches() -> None:
    out, _ = Pipeline([ConditionalPredIndex(), DeadCodeElimination()], debug=True).run(
        parse_module(PROGRAM))
    text = module_text(out)
    assert "cheap = f32[4]{0} conditional(p, x, x), true_computation=sine, " \
        "false_computation=minus_one" in text


TWINS = """
HloModule twins

add_one {
  a0 = f32[4] parameter(0)
  one0 = f32[] constant(1)
  b0 = f32[4] broadcast(one0), dimensions={}
  ROOT s0 = f32[4] add(a0, b0), metadata={op_name="add_one"}
}

square {
  a1 = f32[4] parameter(0)
  ROOT m1 = f32[4] multiply(a1, a1)
}

add_one_again {
  a2 = f32[4] parameter(0)
  one2 = f32[] constant(1)
  b2 = f32[4] broadcast(one2), dimensions={}
  ROOT s2 = f32[4] add(a2, b2), metadata={op_name="add_one, again"}
}

square_again {
  a3 = f32[4] parameter(0)
  ROOT m3 = f32[4] multiply(a3, a3)
}

ENTRY e {
  x = f32[4] parameter(0)
  i = s32[] parameter(1)
  first = f32[4] conditional(i, x, x), branch_computations={add_one, square}
  second = f32[4] conditional(i, x, x), branch_computations={add_one_again, square_again}
  ROOT t = (f32[4], f32[4]) tuple(first, second)
}
"""


def test_identical_branches_are_deduplicated_then_copied_per_call_site() -> None:
    """HloComputationDeduplicator merges the second conditional's branches into the first's
    (metadata does not count), and FlattenCallGraph gives the second call site copies of them,
    under fresh instruction names."""
    module = parse_module(TWINS)
    out, _ = Pipeline([ComputationDeduplicator()], debug=True).run(module)
    first, second = (i for i in out.entry.instructions if i.op.text == "conditional")
    assert [c.name for c in first.calls] == ["add_one", "square"]
    assert [c.name for c in second.calls] == ["add_one.clone", "square.clone"]
    copy = second.calls[0]
    assert copy.root.op.text == "add" and copy.root.name not in {"s0", "s2"}
    assert copy.root.metadata == first.calls[0].root.metadata
    assert {c.name for c in out.computations} == {"add_one", "square", "add_one.clone",
                                                  "square.clone", "e"}
