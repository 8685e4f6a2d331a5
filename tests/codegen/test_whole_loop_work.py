"""A whole-loop kernel that computes little in all (a known, small number of trips over a few
elements) and runs once a run is compiled as a small kernel: -Og, no simd pragmas
(codegen/whole_loop_work.py); one of unknown trip count, past the budget, or launched where it
may run many times keeps the whole-loop kernel's tuning. Either way it computes the
interpreter's values."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.codegen.whole_loop_work import SMALL_WHOLE_LOOP_WORK, total_work
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.runtime.program import KernelThunk, build_program, walk
from hlofuse.targets.c.build import CCodegen, generate_c

WHOLE_LOOP = "HLOFUSE_WIDE_VECTORS void"
SMALL = '__attribute__((optimize("Og")))'


def rollout(lanes: int, steps: int, bound: str = "constant") -> str:
    """A loop of `steps` trips over `lanes` lanes, each taking a square root, a division and a
    bit of integer work per trip; with bound="parameter", its trip count is an input."""
    limit = (f"  n = s32[] constant({steps})" if bound == "constant"
             else "  n = s32[] get-tuple-element(q), index=2")
    return f"""
HloModule small_loops

body {{
  p = (s32[], f32[{lanes}], s32[]) parameter(0)
  t = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  t1 = s32[] add(t, one)
  x = f32[{lanes}] get-tuple-element(p), index=1
  half = f32[] constant(0.5)
  halves = f32[{lanes}] broadcast(half), dimensions={{}}
  sq = f32[{lanes}] multiply(x, x)
  shifted = f32[{lanes}] add(sq, halves)
  root = f32[{lanes}] sqrt(shifted)
  ratio = f32[{lanes}] divide(halves, shifted)
  x1 = f32[{lanes}] add(root, ratio)
  bound = s32[] get-tuple-element(p), index=2
  ROOT out = (s32[], f32[{lanes}], s32[]) tuple(t1, x1, bound)
}}

cond {{
  q = (s32[], f32[{lanes}], s32[]) parameter(0)
  step = s32[] get-tuple-element(q), index=0
{limit}
  ROOT lt = pred[] compare(step, n), direction=LT
}}

ENTRY main {{
  x0 = f32[{lanes}] parameter(0)
  steps = s32[] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[{lanes}], s32[]) tuple(zero, x0, steps)
  loop = (s32[], f32[{lanes}], s32[]) while(init), condition=cond, body=body
  ROOT final = f32[{lanes}] get-tuple-element(loop), index=1
}}
"""


def _loop_work(text: str) -> int | None:
    module = parse_module(text)
    (loop,) = [i for i in module.entry.instructions if i.op is Op.WHILE]
    return total_work(loop)


def test_the_work_counts_every_trip_of_every_element() -> None:
    small = _loop_work(rollout(64, 5))
    assert small is not None
    # Ten times the trips, ten times the work; four times the lanes, four times the arrays'.
    assert _loop_work(rollout(64, 50)) == 10 * small
    longer = _loop_work(rollout(256, 5))
    assert longer is not None and 3 * small < longer <= 4 * small
    assert _loop_work(rollout(64, 5, bound="parameter")) is None


@pytest.mark.parametrize(("lanes", "steps", "bound", "small"), [
    (64, 5, "constant", True),
    (4096, 400, "constant", False),  # far past the budget
    (64, 5, "parameter", False),  # trip count unknown: compiled for speed
])
def test_a_whole_loop_kernel_is_small_only_when_its_whole_run_is(
        lanes: int, steps: int, bound: str, small: bool) -> None:
    text = rollout(lanes, steps, bound)
    work = _loop_work(text)
    assert (work is not None and work <= SMALL_WHOLE_LOOP_WORK) == small
    source = generate_c(run_strategy(parse_module(text), "max").module).source.text
    assert "whole loop" in source  # one whole-loop kernel either way
    assert (WHOLE_LOOP in source) == (not small)
    kernel = source[source.index("whole loop"):]
    assert ("#pragma omp simd" in kernel) == (not small)
    assert (SMALL in kernel.splitlines()[1]) == small


@pytest.mark.needs_cc
@pytest.mark.parametrize("bound", ["constant", "parameter"])
def test_small_and_large_whole_loop_kernels_compute_the_interpreters_values(bound: str) -> None:
    module = parse_module(rollout(64, 5, bound))
    x0 = np.linspace(-2.0, 2.0, 64, dtype=np.float32)
    inputs = [x0, np.array(5, np.int32)]
    (actual,) = compile_module(module, "max", "cpu").run_flat(inputs)
    (expected,) = flatten_value(evaluate(module, inputs))
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=1e-6)


def test_a_whole_loop_kernel_launched_inside_a_loop_keeps_its_tuning() -> None:
    """The runtime marks the kernels of the program's top level as run once; the same kernel
    launched in a loop's body (every trip of that loop runs it) is compiled for speed."""
    fused = run_strategy(parse_module(rollout(64, 5)), "max").module
    (thunk,) = [t for t in walk(build_program(fused).thunks)
                if isinstance(t, KernelThunk) and t.spec.own_emitter]
    codegen = CCodegen()
    once = codegen.emit(dataclasses.replace(thunk.spec, runs_once=True))
    repeated = codegen.emit(dataclasses.replace(thunk.spec, runs_once=False))
    assert once.is_small and SMALL in once.code and "#pragma omp simd" not in once.code
    assert not repeated.is_small and WHOLE_LOOP in repeated.code
    assert "#pragma omp simd" in repeated.code
