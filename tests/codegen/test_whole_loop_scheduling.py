"""Whole-loop kernels are compiled with gcc's scheduling before register allocation unless a
straight-line block is too long for it (the pass's time grows with a block's square)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.codegen import cir
from hlofuse.codegen.cir_walks import longest_straight_run
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c.build import generate_c
from hlofuse.targets.c.language import C
from hlofuse.targets.cuda.language import CUDA


def _statements(n: int) -> list[cir.Stmt]:
    return [cir.Assign(cir.Var(f"x{k}"), cir.Int(k)) for k in range(n)]


def test_longest_straight_run_counts_within_each_statement_list() -> None:
    body: list[cir.Stmt] = [
        *_statements(2),
        cir.For("i", cir.Int(0), cir.Int(4), body=_statements(3)),
        cir.Comment("not an instruction"),
        *_statements(4),
        cir.If(cir.Var("p"), then=_statements(6), otherwise=_statements(1)),
        *_statements(1),
    ]
    assert longest_straight_run(body) == 6
    assert longest_straight_run(_statements(5)) == 5
    assert longest_straight_run([]) == 0


def _whole_loop(statements: int) -> cir.Function:
    return cir.Function("kernel", [], _statements(statements), cir.Linkage.KERNEL,
                        cir.Tuning.WHOLE_LOOP)


def test_a_whole_loop_kernel_is_scheduled_up_to_the_block_limit() -> None:
    language = dataclasses.replace(C, scheduled_block_limit=10)
    assert '"schedule-insns", "sched-pressure"' in language.qualifier(_whole_loop(10))
    unscheduled = language.qualifier(_whole_loop(11))
    assert "schedule-insns" not in unscheduled
    assert '"ira-region=one"' in unscheduled  # the rest of the whole loop's options stay
    other = cir.Function("part", [], _statements(3), cir.Linkage.PART,
                         cir.Tuning.VECTOR_LOOPS)
    assert "schedule-insns" not in language.qualifier(other)
    assert "schedule-insns" not in CUDA.qualifier(_whole_loop(1))


def test_a_math_header_call_weighs_as_the_operations_it_inlines() -> None:
    """A call of hlofuse_logf is tens of inlined operations: ten of them in a block of ten
    statements exceed a limit ten plain statements stay within."""
    from hlofuse.targets.c.language import INLINED_MATH_STATEMENTS

    language = dataclasses.replace(C, scheduled_block_limit=10 * INLINED_MATH_STATEMENTS)
    calls: list[cir.Stmt] = [cir.Assign(cir.Var(f"y{k}"), cir.call("hlofuse_logf", cir.Var("x")))
                             for k in range(10)]
    plain = cir.Function("kernel", [], _statements(10), cir.Linkage.KERNEL,
                         cir.Tuning.WHOLE_LOOP)
    math = cir.Function("kernel", [], calls, cir.Linkage.KERNEL, cir.Tuning.WHOLE_LOOP)
    assert "schedule-insns" in language.qualifier(plain)
    assert "schedule-insns" not in language.qualifier(math)


# A rollout of 64 lanes whose step takes a square root and a division per lane: one whole-loop
# kernel, short enough to be scheduled.
ROLLOUT = """
HloModule scheduled_rollout

body {
  p = (s32[], f32[64]) parameter(0)
  t = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  t1 = s32[] add(t, one)
  x = f32[64] get-tuple-element(p), index=1
  half = f32[] constant(0.5)
  halves = f32[64] broadcast(half), dimensions={}
  sq = f32[64] multiply(x, x)
  shifted = f32[64] add(sq, halves)
  root = f32[64] sqrt(shifted)
  ratio = f32[64] divide(halves, shifted)
  x1 = f32[64] add(root, ratio)
  ROOT out = (s32[], f32[64]) tuple(t1, x1)
}

cond {
  q = (s32[], f32[64]) parameter(0)
  step = s32[] get-tuple-element(q), index=0
  n = s32[] constant(50)
  ROOT lt = pred[] compare(step, n), direction=LT
}

ENTRY main {
  x0 = f32[64] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[64]) tuple(zero, x0)
  loop = (s32[], f32[64]) while(init), condition=cond, body=body
  ROOT final = f32[64] get-tuple-element(loop), index=1
}
"""


@pytest.mark.usefixtures("large_whole_loops")
@pytest.mark.needs_cc
def test_a_scheduled_whole_loop_kernel_computes_the_interpreters_values() -> None:
    module = parse_module(ROLLOUT, "scheduled_rollout")
    source = generate_c(run_strategy(module, "max").module).source.text
    assert "whole loop" in source and '"schedule-insns", "sched-pressure"' in source
    x0 = np.linspace(-2.0, 2.0, 64, dtype=np.float32)
    compiled = compile_module(module, "max", "cpu")
    (actual,) = compiled.run_flat([x0])
    (expected,) = flatten_value(evaluate(module, [x0]))
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=1e-6)
