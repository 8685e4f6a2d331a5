"""A value the lanes share, computed once per step (a regime drawn for the step, a
schedule), stacked over T by `lax.scan` (a dynamic-update-slice of a uniform [T] element at
the step's counter).

Held as uniform state, such an element was limited to 64 values (`whole-loop-state-too-large`
past it: a rollout logging it was one kernel at the corpus's T = 30 and dozens of kernels a
step at the benchmark's T = 200; probe 43). It is now a step log (analysis/step_logs.py),
written a slice per step and never held as state, at any T."""

from __future__ import annotations

from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module

PROGRAM = """
HloModule uniform_step_log

body {
  s = (s32[], f32[256], f32[], f32[T]) parameter(0)
  t = s32[] get-tuple-element(s), index=0
  x = f32[256] get-tuple-element(s), index=1
  u = f32[] get-tuple-element(s), index=2
  log = f32[T] get-tuple-element(s), index=3
  half = f32[] constant(0.5)
  one = f32[] constant(1)
  uh = f32[] multiply(u, half)
  u1 = f32[] add(uh, one)
  ub = f32[256] broadcast(u1), dimensions={}
  x1 = f32[256] add(x, ub)
  u1r = f32[1] reshape(u1)
  log1 = f32[T] dynamic-update-slice(log, u1r, t)
  i1 = s32[] constant(1)
  t1 = s32[] add(t, i1)
  ROOT out = (s32[], f32[256], f32[], f32[T]) tuple(t1, x1, u1, log1)
}

cond {
  cs = (s32[], f32[256], f32[], f32[T]) parameter(0)
  ct = s32[] get-tuple-element(cs), index=0
  n = s32[] constant(T)
  ROOT lt = pred[] compare(ct, n), direction=LT
}

ENTRY e {
  x0 = f32[256] parameter(0)
  z = s32[] constant(0)
  u0 = f32[] constant(0)
  zf = f32[] constant(0)
  l0 = f32[T] broadcast(zf), dimensions={}
  init = (s32[], f32[256], f32[], f32[T]) tuple(z, x0, u0, l0)
  w = (s32[], f32[256], f32[], f32[T]) while(init), condition=cond, body=body
  xs = f32[256] get-tuple-element(w), index=1
  ls = f32[T] get-tuple-element(w), index=3
  ROOT r = (f32[256], f32[T]) tuple(xs, ls)
}
"""


def _kernels_per_step(steps: int) -> dict[str, int]:
    text = PROGRAM.replace("T]", f"{steps}]").replace("constant(T)", f"constant({steps})")
    return run_strategy(parse_module(text), "max", debug=True).kernels_per_iteration()


def test_a_uniform_step_log_over_a_short_run_is_one_kernel() -> None:
    assert not _kernels_per_step(30)


def test_a_uniform_step_log_over_a_long_run_is_one_kernel() -> None:
    assert not _kernels_per_step(200)
