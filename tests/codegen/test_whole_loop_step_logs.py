"""Step logs inside a whole-loop kernel (analysis/step_logs.py, codegen/whole_loop_step_logs.py):
a value the lanes share, computed once per step (an epsilon schedule, a regime drawn from the
step's key) and stacked over T by `lax.scan`, is written one slice per uniform step into a
buffer of the kernel's own, at any T, equal to the reference interpreter; the loop stays
one kernel. A log the loop reads back is uniform state, refused by name past 64 values."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import hlofuse
import hlofuse.numpy as hnp
from hlofuse import lax
from hlofuse import random as hrandom
from hlofuse.api import compile_module
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.passes.decision_log import DecisionRecord
from hlofuse.reference.interpreter import evaluate, flatten_value

pytestmark = pytest.mark.needs_cc

KEY = np.array([0, 7], np.uint32)


def logged_rollout(n: int, t: int) -> Any:
    """Walkers under an epsilon-greedy-like rule, logging per step: epsilon ([T] f32), a
    regime drawn from the step's key ([T] s32), both with the step as a pair ([T, 2] f32),
    and the walkers' sum across the lanes ([T], a per-step reduction)."""

    def rollout(key: Any, x0: Any) -> Any:
        def body(carry: Any, step: Any) -> Any:
            x, eps = carry
            k = hrandom.fold_in(key, step)
            regime = (hrandom.bits(k) >> 29).astype(np.int32)  # 0..7, Threefry on the step key
            explore = hrandom.uniform(hrandom.fold_in(k, 1), (n,)) < eps
            x = hnp.where(explore, x * 0.5, x + regime.astype(np.float32) * 0.125)
            eps = hnp.maximum(eps * 0.98, 0.05)
            log = {"eps": eps, "regime": regime,
                   "pair": hnp.stack([eps, step.astype(np.float32)]), "total": hnp.sum(x)}
            return (x, eps), log

        return lax.scan(body, (x0, hnp.array(1.0, np.float32)), hnp.arange(t))

    return rollout


def _module(fn: Any, *args: Any) -> Module:
    module: Module = hlofuse.jit(fn).lower(*args).module
    return module


def _whole_loop_record(module: Module) -> DecisionRecord:
    fused = run_strategy(module, "max", debug=False)
    assert not fused.kernels_per_iteration(), fused.kernels_per_iteration()  # one kernel
    found = [r for r in fused.decisions.records if r.pass_name == "whole-loop-fusion"
             and r.figures.get("step_logs")]
    assert len(found) == 1, [r.message for r in fused.decisions.records]
    return found[0]


def assert_matches_interpreter(module: Module, args: list[Any], backend: str = "cpu",
                               one_kernel: bool = True) -> None:
    """The compiled results equal the interpreter's; with `one_kernel`, the loop is one
    whole-loop kernel (no loop left launching its body's kernels)."""
    if one_kernel:
        per_loop = run_strategy(module, "max", debug=False).kernels_per_iteration()
        assert not per_loop, per_loop
    expected = flatten_value(evaluate(module, args))
    actual = flatten_value(compile_module(module, "max", backend=backend)(*args))
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        a = np.asarray(a)
        assert a.dtype == e.dtype and a.shape == e.shape, f"out{k}"
        if e.dtype.kind == "f":  # the per-lane sums are reassociated by blocks
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5, err_msg=f"out{k}")
        else:
            np.testing.assert_array_equal(a, e, err_msg=f"out{k}")


@pytest.mark.parametrize("n,t", [(256, 200), (37, 200), (3, 70)])
def test_logs_of_uniform_values_match_the_interpreter(n: int, t: int) -> None:
    x0 = np.linspace(0, 1, n, dtype=np.float32)
    module = _module(logged_rollout(n, t), KEY, x0)
    expected = flatten_value(evaluate(module, [KEY, x0]))
    assert len(set(np.asarray(expected[2]).tolist())) > 1  # the regimes differ by step
    assert_matches_interpreter(module, [KEY, x0])


def test_a_long_rollout_with_logs_is_one_kernel() -> None:
    x0 = np.zeros(256, np.float32)
    record = _whole_loop_record(_module(logged_rollout(256, 200), KEY, x0))
    assert record.figures["lanes"] == 256
    assert record.figures["step_logs"] == 3  # epsilon, the regime, the pair
    assert record.figures["step_reductions"] == 1  # the sum across the lanes
    assert "logged a slice per step" in record.message


def test_logs_run_in_the_cuda_emulation() -> None:
    x0 = np.linspace(0, 1, 50, dtype=np.float32)
    assert_matches_interpreter(_module(logged_rollout(50, 120), KEY, x0), [KEY, x0],
                               "cuda-emulated")


# A while loop writing a uniform value at positions other than the step's own: backwards
# from the end (slot 2T-1-2t of a [2T] buffer of -1s, every other slot left as it was), and
# at t / 2, where two steps write each slot and the later one must win.
PROGRAM = """
HloModule odd_positions

body {
  s = (s32[], f32[64], s32[400], f32[100]) parameter(0)
  t = s32[] get-tuple-element(s), index=0
  x = f32[64] get-tuple-element(s), index=1
  back = s32[400] get-tuple-element(s), index=2
  halves = f32[100] get-tuple-element(s), index=3
  one = s32[] constant(1)
  two = s32[] constant(2)
  last = s32[] constant(399)
  twice = s32[] multiply(t, two)
  at = s32[] subtract(last, twice)
  squared = s32[] multiply(t, t)
  sq1 = s32[1] reshape(squared)
  back1 = s32[400] dynamic-update-slice(back, sq1, at)
  half = s32[] divide(t, two)
  tf = f32[] convert(t)
  tf1 = f32[1] reshape(tf)
  halves1 = f32[100] dynamic-update-slice(halves, tf1, half)
  tb = f32[64] broadcast(tf), dimensions={}
  x1 = f32[64] add(x, tb)
  t1 = s32[] add(t, one)
  ROOT out = (s32[], f32[64], s32[400], f32[100]) tuple(t1, x1, back1, halves1)
}

cond {
  cs = (s32[], f32[64], s32[400], f32[100]) parameter(0)
  ct = s32[] get-tuple-element(cs), index=0
  n = s32[] constant(200)
  ROOT lt = pred[] compare(ct, n), direction=LT
}

ENTRY e {
  x0 = f32[64] parameter(0)
  z = s32[] constant(0)
  m1 = s32[] constant(-1)
  b0 = s32[400] broadcast(m1), dimensions={}
  h0 = f32[100] parameter(1)
  init = (s32[], f32[64], s32[400], f32[100]) tuple(z, x0, b0, h0)
  ROOT w = (s32[], f32[64], s32[400], f32[100]) while(init), condition=cond, body=body
}
"""


@pytest.mark.parametrize("backend", ["cpu", "cuda-emulated"])
def test_logs_written_at_any_uniform_position_match_the_interpreter(backend: str) -> None:
    module = parse_module(PROGRAM)
    args = [np.zeros(64, np.float32), np.full(100, 5.0, np.float32)]
    assert_matches_interpreter(module, args, backend)
    record = _whole_loop_record(module)
    assert record.figures["step_logs"] == 2


def test_a_log_the_loop_reads_back_is_refused_by_name() -> None:
    """Reading the log (the previous step's entry) makes it uniform state again: past 64
    values the loop is refused as `whole-loop-state-too-large`, and still computes."""
    text = PROGRAM.replace(
        "  tb = f32[64] broadcast(tf), dimensions={}",
        "  z0 = s32[] constant(0)\n  prev = f32[1] dynamic-slice(halves, z0), "
        "dynamic_slice_sizes={1}\n  prev0 = f32[] reshape(prev)\n"
        "  tp = f32[] add(tf, prev0)\n  tb = f32[64] broadcast(tp), dimensions={}")
    module = parse_module(text)
    fused = run_strategy(module, "max", debug=False)
    refusals = [r for r in fused.decisions.records if r.pass_name == "whole-loop-fusion"]
    # (the refusal over the 64 lanes, after the first candidate's: the log's 100 values)
    assert any("over 64 lanes, whole-loop-state-too-large: uniform loop element 3" in r.message
               for r in refusals), [r.message for r in refusals]
    args = [np.zeros(64, np.float32), np.full(100, 5.0, np.float32)]
    assert_matches_interpreter(module, args, one_kernel=False)
