"""What the rollout fuzzer found or generates, as HLO text: a time loop over lanes whose step
runs a loop with no trip count at all (each lane halves its value until it is zero; vmap runs it
until every lane is done, the finished ones kept by a select), which whole-loop fusion must make
one kernel (the finished lanes masked) or refuse by a named rule, never answer wrongly or hang
(issue 32, "Bad input"); and rollout seeds whose plan is open (rollout_cases/)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse.analysis.parallel_loop_refusals import (
    DATA_DEPENDENT_TRIP_COUNT,
    NESTED_CONTROL_FLOW,
)
from hlofuse.api import compile_module
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.passes.decision_log import Verdict
from hlofuse.reference.interpreter import evaluate, flatten_value

# vmap of `while x != 0: x >>= 1; count += 1` inside a time loop of 5 steps over 8 lanes; each
# step then stirs the lane's value with the step counter so that the next step halves anew.
HALVING = """
HloModule halving_rollout

any_nonzero {
  a = pred[] parameter(0)
  b = pred[] parameter(1)
  ROOT o = pred[] or(a, b)
}

halving_cond {
  hp = (u32[8]{0}, s32[8]{0}) parameter(0)
  hx = u32[8]{0} get-tuple-element(hp), index=0
  zeros = u32[8]{0} constant({0, 0, 0, 0, 0, 0, 0, 0})
  nonzero = pred[8]{0} compare(hx, zeros), direction=NE
  false = pred[] constant(false)
  ROOT any = pred[] reduce(nonzero, false), dimensions={0}, to_apply=any_nonzero
}

halving_body {
  bp = (u32[8]{0}, s32[8]{0}) parameter(0)
  bx = u32[8]{0} get-tuple-element(bp), index=0
  bc = s32[8]{0} get-tuple-element(bp), index=1
  bzeros = u32[8]{0} constant({0, 0, 0, 0, 0, 0, 0, 0})
  live = pred[8]{0} compare(bx, bzeros), direction=NE
  ones = u32[8]{0} constant({1, 1, 1, 1, 1, 1, 1, 1})
  halved = u32[8]{0} shift-right-logical(bx, ones)
  nx = u32[8]{0} select(live, halved, bx)
  cones = s32[8]{0} constant({1, 1, 1, 1, 1, 1, 1, 1})
  counted = s32[8]{0} add(bc, cones)
  nc = s32[8]{0} select(live, counted, bc)
  ROOT bt = (u32[8]{0}, s32[8]{0}) tuple(nx, nc)
}

time_cond {
  tp = (s32[], u32[8]{0}, s32[8]{0}) parameter(0)
  t = s32[] get-tuple-element(tp), index=0
  steps = s32[] constant(5)
  ROOT more = pred[] compare(t, steps), direction=LT
}

time_body {
  sp = (s32[], u32[8]{0}, s32[8]{0}) parameter(0)
  st = s32[] get-tuple-element(sp), index=0
  sx = u32[8]{0} get-tuple-element(sp), index=1
  sc = s32[8]{0} get-tuple-element(sp), index=2
  start = (u32[8]{0}, s32[8]{0}) tuple(sx, sc)
  halving = (u32[8]{0}, s32[8]{0}) while(start), condition=halving_cond, body=halving_body
  hc = s32[8]{0} get-tuple-element(halving), index=1
  one = s32[] constant(1)
  nt = s32[] add(st, one)
  stir = u32[] convert(nt)
  stirs = u32[8]{0} broadcast(stir), dimensions={}
  golden1 = u32[] constant(2654435761)
  golden = u32[8]{0} broadcast(golden1), dimensions={}
  lanes = u32[8]{0} iota(), iota_dimension=0
  mixed = u32[8]{0} add(stirs, lanes)
  fresh = u32[8]{0} multiply(mixed, golden)
  ROOT out = (s32[], u32[8]{0}, s32[8]{0}) tuple(nt, fresh, hc)
}

ENTRY main {
  x0 = u32[8]{0} parameter(0)
  c0 = s32[8]{0} parameter(1)
  zero = s32[] constant(0)
  init = (s32[], u32[8]{0}, s32[8]{0}) tuple(zero, x0, c0)
  loop = (s32[], u32[8]{0}, s32[8]{0}) while(init), condition=time_cond, body=time_body
  x = u32[8]{0} get-tuple-element(loop), index=1
  c = s32[8]{0} get-tuple-element(loop), index=2
  ROOT r = (u32[8]{0}, s32[8]{0}) tuple(x, c)
}
"""
INPUTS = [np.array([0, 1, 2, 3, 255, 2**31, 2**32 - 1, 12345], np.uint32),
          np.zeros(8, np.int32)]


def test_halving_loop_is_made_one_kernel_or_refused_by_a_named_rule() -> None:
    fused = run_strategy(parse_module(HALVING), "max", debug=False)
    verdicts = [r for r in fused.decisions
                if r.pass_name == "whole-loop-fusion" and r.producer == "loop"]
    assert verdicts, "whole-loop fusion did not consider the time loop"
    for record in verdicts:
        if record.verdict != Verdict.FUSE:  # refused: by the rule for it, naming the loop
            assert record.rule in (NESTED_CONTROL_FLOW, DATA_DEPENDENT_TRIP_COUNT), record
            assert record.message.startswith("%loop") and "halving" in record.message, record


def test_halving_loop_counts_each_lane_bits() -> None:
    x, counts = flatten_value(evaluate(parse_module(HALVING), INPUTS))
    # The counts: the bit lengths of the inputs, then of the four stirred values.
    stirred = [((t + 1 + lane) * 2654435761) % 2**32 for t in range(4) for lane in range(8)]
    want = [int(v).bit_length() for v in INPUTS[0]]
    for t in range(4):
        want = [w + stirred[t * 8 + lane].bit_length() for lane, w in enumerate(want)]
    assert counts.tolist() == want
    assert x.tolist() == [((5 + lane) * 2654435761) % 2**32 for lane in range(8)]


@pytest.mark.needs_cc
@pytest.mark.parametrize("strategy", ["none", "xla", "priority", "max"])
def test_halving_loop_compiled_equals_the_interpreter(strategy: str) -> None:
    module = parse_module(HALVING)
    want = flatten_value(evaluate(module, INPUTS))
    got = compile_module(module, strategy, "cpu").run_flat(INPUTS)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


CASES = Path(__file__).parent / "rollout_cases"


# Rollout seeds (the generator at commit a37ab16) whose time loop `max` planned over a small
# dimension that is not the lanes, with the rollout's state uniform code: answers equal, but the
# C was huge. A plan that leaves more elements of the state's most common dimension to uniform
# code than its lanes hold is refused now (analysis/parallel_loop.py), and the batch's own
# refusal logged. Seed 1011: 7 lanes (an MLP 4-4-8-2, per-lane keys, a 4-trip substep loop, a
# u8[7,3] state logged by its maximum across the lanes) planned over 2 (the PRNG key's length),
# no per-lane element: 18,100 lines of C, 31 CPU s in the C compiler. Seed 1218: 16 lanes
# planned over 3, one per-lane element: 137,600 lines of C, a compile past the fuzzer's 180 s.
SMALL_PLANS = {"seed1011_two_lanes.hlo": 7, "seed1218_three_lanes.hlo": 16}


@pytest.mark.parametrize(("name", "lanes"), SMALL_PLANS.items())
def test_time_loop_is_planned_over_its_lanes_or_refused(name: str, lanes: int) -> None:
    module = parse_module((CASES / name).read_text())
    fused = run_strategy(module, "max+default_costs", debug=False)
    (record,) = [r for r in fused.decisions if r.pass_name == "whole-loop-fusion"
                 and r.computation == module.entry.name]
    if record.verdict == Verdict.FUSE:
        assert record.figures["lanes"] == lanes, record.message
        assert int(record.figures["per_lane_elements"]) > 0, record.message
    else:
        assert record.rule.startswith("whole-loop-cross-lane-"), record.message
