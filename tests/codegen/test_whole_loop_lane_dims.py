"""Whole-loop kernels whose per-lane elements hold the lanes along any dimension, and whose
stacked outputs (a `scan`'s ys: one slice written per step at a uniform position) are written
straight to the output: planned as such, and equal to the interpreter when compiled."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.analysis import parallel_loop as pl
from hlofuse.analysis.parallel_loop_refusals import STATE_TOO_LARGE, Refusal
from hlofuse.analysis.whole_loop_config import read_recorded_plan
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module

from tests.analysis.test_parallel_loop import loop_text
from tests.codegen.test_whole_loop import assert_compiled_matches, whole_loop

pytestmark = pytest.mark.needs_cc


def the_loop(module: Module) -> Instruction:
    return next(i for i in module.entry.instructions if i.op is Op.WHILE)


def stacked(n: int, t: int, steps: int) -> Module:
    """x[N] <- x * 0.5 + i per step; ys[T, N] row i <- x (a scan's stacked output), flags
    [T, N] row i <- x > 1; `steps` iterations (rows past them keep their initial value)."""
    state = f"(s32[], f32[{n}]{{0}}, f32[{t},{n}]{{1,0}}, pred[{t},{n}]{{1,0}})"
    return parse_module(loop_text(f"""
  x = f32[{n}]{{0}} get-tuple-element(p), index=1
  ys = f32[{t},{n}]{{1,0}} get-tuple-element(p), index=2
  flags = pred[{t},{n}]{{1,0}} get-tuple-element(p), index=3
  half = f32[] constant(0.5)
  halves = f32[{n}]{{0}} broadcast(half), dimensions={{}}
  fi = f32[] convert(i)
  fis = f32[{n}]{{0}} broadcast(fi), dimensions={{}}
  scaled = f32[{n}]{{0}} multiply(x, halves)
  xnew = f32[{n}]{{0}} add(scaled, fis)
  row = f32[1,{n}]{{1,0}} reshape(xnew)
  zero = s32[] constant(0)
  ys2 = f32[{t},{n}]{{1,0}} dynamic-update-slice(ys, row, i, zero)
  onef = f32[] constant(1)
  ones = f32[{n}]{{0}} broadcast(onef), dimensions={{}}
  big = pred[{n}]{{0}} compare(xnew, ones), direction=GT
  flag_row = pred[1,{n}]{{1,0}} reshape(big)
  flags2 = pred[{t},{n}]{{1,0}} dynamic-update-slice(flags, flag_row, i, zero)
  ROOT r = {state} tuple(next, xnew, ys2, flags2)""", state, condition=f"""
  ci = s32[] get-tuple-element(cp), index=0
  limit = s32[] constant({steps})
  ROOT lt = pred[] compare(ci, limit), direction=LT"""))


def stacked_inputs(n: int, t: int) -> list[np.ndarray]:
    rng = np.random.default_rng(n * 100 + t)
    return [np.asarray(0, np.int32), rng.standard_normal(n).astype(np.float32),
            rng.standard_normal((t, n)).astype(np.float32), rng.random((t, n)) < 0.5]


@pytest.mark.parametrize("n,t,steps", [
    (37, 12, 12),  # 37 lanes: blocks of 8 and a tail of 5
    (16, 16, 16),  # T = N: the lanes are the dimension the row covers whole
    (8, 20, 7),  # fewer steps than rows: the rest keeps the initial value
    (1, 5, 5),  # one lane
])
def test_stacked_outputs_are_streamed_and_match(n: int, t: int, steps: int) -> None:
    module = stacked(n, t, steps)
    plan = pl.plan_parallel_loop(the_loop(module))
    assert isinstance(plan, pl.LoopPlan), plan
    assert [s.element for s in plan.streamed] == [2, 3]
    assert all(s.lane_dim == 1 for s in plan.streamed)
    assert plan.per_lane == (1,)
    fused = whole_loop(module, lanes=8)
    assert_compiled_matches(fused, stacked_inputs(n, t), module)


def test_a_stacked_output_read_by_the_step_is_held_not_streamed() -> None:
    """Reading the element (here: the row of the step) makes it state the lane holds; with
    T = 2000 values per lane, over the limit, the refusal names the size."""
    n, t = 8, 2000
    state = f"(s32[], f32[{n}]{{0}}, f32[{t},{n}]{{1,0}})"
    module = parse_module(loop_text(f"""
  x = f32[{n}]{{0}} get-tuple-element(p), index=1
  ys = f32[{t},{n}]{{1,0}} get-tuple-element(p), index=2
  zero = s32[] constant(0)
  prev = f32[1,{n}]{{1,0}} dynamic-slice(ys, i, zero), dynamic_slice_sizes={{1,{n}}}
  xrow = f32[1,{n}]{{1,0}} reshape(x)
  row = f32[1,{n}]{{1,0}} multiply(prev, xrow)
  ys2 = f32[{t},{n}]{{1,0}} dynamic-update-slice(ys, row, i, zero)
  ROOT r = {state} tuple(next, x, ys2)""", state))
    plan = pl.plan_parallel_loop(the_loop(module))
    assert isinstance(plan, Refusal)
    assert plan.rule == STATE_TOO_LARGE
    assert "2000 values per" in plan.message
    planned = pl.plan_parallel_loop(the_loop(module), max_state_elements_per_lane=2000)
    assert isinstance(planned, pl.LoopPlan) and planned.per_lane == (1, 2)
    assert planned.streamed == ()


def test_lanes_along_the_second_dimension() -> None:
    """State f32[3, N] (a struct of arrays): each lane holds a column."""
    n = 21
    state = f"(s32[], f32[3,{n}]{{1,0}}, f32[{n}]{{0}})"
    module = parse_module(loop_text(f"""
  xs = f32[3,{n}]{{1,0}} get-tuple-element(p), index=1
  w = f32[{n}]{{0}} get-tuple-element(p), index=2
  top = f32[1,{n}]{{1,0}} slice(xs), slice={{[0:1], [0:{n}]}}
  topv = f32[{n}]{{0}} reshape(top)
  wb = f32[3,{n}]{{1,0}} broadcast(w), dimensions={{1}}
  rolled = f32[3,{n}]{{1,0}} reverse(xs), dimensions={{0}}
  mixed = f32[3,{n}]{{1,0}} multiply(rolled, wb)
  c = f32[] constant(0.25)
  cs = f32[3,{n}]{{1,0}} broadcast(c), dimensions={{}}
  xsnew = f32[3,{n}]{{1,0}} add(mixed, cs)
  wnew = f32[{n}]{{0}} add(w, topv)
  ROOT r = {state} tuple(next, xsnew, wnew)""", state))
    plan = pl.plan_parallel_loop(the_loop(module))
    assert isinstance(plan, pl.LoopPlan), plan
    assert dict(plan.lane_dims) == {1: 1, 2: 0}
    fused = whole_loop(module, lanes=4)
    rng = np.random.default_rng(3)
    inputs = [np.asarray(0, np.int32), rng.standard_normal((3, n)).astype(np.float32),
              rng.standard_normal(n).astype(np.float32) * 0.5]
    assert_compiled_matches(fused, inputs, module, float_accumulators=False)


def test_the_recorded_plan_keeps_the_lane_dimensions() -> None:
    module = stacked(8, 12, 12)
    fused = whole_loop(module, lanes=4)
    fusion = next(i for i in fused.entry.instructions if i.op is Op.FUSION)
    config = next(raw.text for key, raw in fusion.extra if key == "backend_config")
    assert read_recorded_plan(config) == (8, {1: 0, 2: 1, 3: 1})


@pytest.mark.parametrize("n", [1, 19])
def test_small_dots_run_in_lane_code(n: int) -> None:
    """A per-lane matrix times the lane's vector (batch dimension 0 on both sides) and the
    lanes' rows times one uniform matrix (lanes along the lhs free dimension): lane code
    computes both element by element; the loop is one kernel, equal to the interpreter
    (same accumulation order as the library dot)."""
    state = f"(s32[], f32[{n},3]{{1,0}}, f32[{n},3,3]{{2,1,0}})"
    module = parse_module(loop_text(f"""
  x = f32[{n},3]{{1,0}} get-tuple-element(p), index=1
  m = f32[{n},3,3]{{2,1,0}} get-tuple-element(p), index=2
  mx = f32[{n},3]{{1,0}} dot(m, x), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, \
rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}
  w = f32[3,3]{{1,0}} constant({{{{0.5, 0.25, 0}}, {{0, 0.5, 0.25}}, {{0.25, 0, 0.5}}}})
  xw = f32[{n},3]{{1,0}} dot(mx, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT r = {state} tuple(next, xw, m)""", state))
    plan = pl.plan_parallel_loop(the_loop(module))
    assert isinstance(plan, pl.LoopPlan), plan
    fused = whole_loop(module, lanes=8)
    rng = np.random.default_rng(n)
    inputs = [np.asarray(0, np.int32), rng.standard_normal((n, 3)).astype(np.float32),
              rng.standard_normal((n, 3, 3)).astype(np.float32) * 0.7]
    assert_compiled_matches(fused, inputs, module)


def test_a_dot_over_the_lanes_is_refused() -> None:
    """x . x sums over the lanes (x kept per lane: the uniform limit is below its size)."""
    n = 8
    state = f"(s32[], f32[{n}]{{0}}, f32[{n}]{{0}})"
    module = parse_module(loop_text(f"""
  x = f32[{n}]{{0}} get-tuple-element(p), index=1
  xx = f32[] dot(x, x), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
  sb = f32[{n}]{{0}} broadcast(xx), dimensions={{}}
  y = f32[{n}]{{0}} add(x, sb)
  ROOT r = {state} tuple(next, y, x)""", state))
    plan = pl.plan_parallel_loop(the_loop(module), max_uniform_elements=4)
    assert isinstance(plan, Refusal)
    assert plan.rule == "whole-loop-cross-lane-reduce" and "dot" in plan.message


def scratch_board(n: int) -> Module:
    """A per-lane s8[2,8,8] board (128 values per lane, computed in loops over the lane's
    scratch area): each step marks the agent's cell and moves the agent; a lane whose agent
    reaches column 7 resets its board to a pattern that takes many operations to compute
    (a deferred select whose predicate is one value per lane)."""
    board = f"s8[{n},2,8,8]{{3,2,1,0}}"
    state = f"(s32[], {board}, s32[{n}]{{0}})"
    ops = "\n".join(f"  h{k + 1} = s32[{n},2,8,8]{{3,2,1,0}} {op}(h{k}, c{k})"
                    for k, op in enumerate(["multiply", "add", "xor", "multiply", "add",
                                            "xor", "multiply", "add", "xor", "multiply",
                                            "add", "xor", "multiply", "add", "xor",
                                            "multiply", "add", "xor"]))
    consts = "\n".join(f"  k{k} = s32[] constant({(k * 7919 + 13) % 251 + 3})\n"
                       f"  c{k} = s32[{n},2,8,8]{{3,2,1,0}} broadcast(k{k}), dimensions={{}}"
                       for k in range(18))
    return parse_module(loop_text(f"""
  bd = {board} get-tuple-element(p), index=1
  col = s32[{n}]{{0}} get-tuple-element(p), index=2
  cols = s32[{n},2,8,8]{{3,2,1,0}} broadcast(col), dimensions={{0}}
  cell = s32[{n},2,8,8]{{3,2,1,0}} iota(), iota_dimension=3
  row = s32[{n},2,8,8]{{3,2,1,0}} iota(), iota_dimension=2
  here = pred[{n},2,8,8]{{3,2,1,0}} compare(cell, cols), direction=EQ
  ones8 = s8[] constant(1)
  ones = {board} broadcast(ones8), dimensions={{}}
  marked = {board} add(bd, ones)
  stepped = {board} select(here, marked, bd)
  onei = s32[] constant(1)
  onesi = s32[{n}]{{0}} broadcast(onei), dimensions={{}}
  moved = s32[{n}]{{0}} add(col, onesi)
  seven = s32[] constant(7)
  sevens = s32[{n}]{{0}} broadcast(seven), dimensions={{}}
  done = pred[{n}]{{0}} compare(moved, sevens), direction=GE
  zeroi = s32[] constant(0)
  zeros = s32[{n}]{{0}} broadcast(zeroi), dimensions={{}}
  colnew = s32[{n}]{{0}} select(done, zeros, moved)
  lane = s32[{n},2,8,8]{{3,2,1,0}} iota(), iota_dimension=0
  steps = s32[{n},2,8,8]{{3,2,1,0}} broadcast(i), dimensions={{}}
  h0a = s32[{n},2,8,8]{{3,2,1,0}} add(lane, steps)
  h0b = s32[{n},2,8,8]{{3,2,1,0}} multiply(h0a, row)
  h0 = s32[{n},2,8,8]{{3,2,1,0}} add(h0b, cell)
{consts}
{ops}
  mask3 = s32[] constant(3)
  masks = s32[{n},2,8,8]{{3,2,1,0}} broadcast(mask3), dimensions={{}}
  small = s32[{n},2,8,8]{{3,2,1,0}} and(h18, masks)
  fresh = {board} convert(small)
  dones = pred[{n},2,8,8]{{3,2,1,0}} broadcast(done), dimensions={{0}}
  bdnew = {board} select(dones, fresh, stepped)
  ROOT r = {state} tuple(next, bdnew, colnew)""", state, condition="""
  ci = s32[] get-tuple-element(cp), index=0
  limit = s32[] constant(23)
  ROOT lt = pred[] compare(ci, limit), direction=LT"""))


@pytest.mark.parametrize("n,lanes", [(37, 8), (1, 1)])
def test_large_per_lane_state_runs_in_the_lanes_scratch_area(n: int, lanes: int) -> None:
    module = scratch_board(n)
    plan = pl.plan_parallel_loop(the_loop(module))
    assert isinstance(plan, pl.LoopPlan), plan
    assert plan.per_lane == (1, 2) and plan.elements_per_lane(1) == 128
    fused = whole_loop(module, lanes=lanes)
    rng = np.random.default_rng(n)
    inputs = [np.asarray(0, np.int32),
              rng.integers(-3, 4, (n, 2, 8, 8)).astype(np.int8),
              rng.integers(0, 7, n).astype(np.int32)]
    board, _ = assert_compiled_matches(fused, inputs, module)[1:]
    assert (board != inputs[1]).any()
