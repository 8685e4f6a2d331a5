"""A policy network inside a whole-loop kernel: weights carried unchanged through the loop
are read-only (read where they lie, whatever their size: analysis/parallel_loop.py), and a
product's operands that lane code would otherwise compute again for each of its positions
are computed once per step into the block's scratch (codegen/whole_loop_materialized.py).
Results equal the reference interpreter; the kernel's code stays small."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import hlofuse
import hlofuse.numpy as hnp
from hlofuse import lax
from hlofuse.analysis.parallel_loop import LoopPlan, plan_parallel_loop
from hlofuse.api import compile_module
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.ops import Op
from hlofuse.reference.interpreter import evaluate, flatten_value

pytestmark = pytest.mark.needs_cc

HIDDEN = 64


def _policy_rollout(t: int) -> Any:
    """Lanes step a 4-value state by a two-layer tanh network whose weights are carried in
    the loop (as a params pytree in a `fori_loop` carry is) and never change."""

    def rollout(x0: Any, w1: Any, w2: Any, w3: Any) -> Any:
        def body(_: Any, carry: Any) -> Any:
            x, w1, w2, w3 = carry
            h1 = hnp.tanh(x @ w1)
            h2 = hnp.tanh(h1 @ w2)
            x = x * 0.9 + 0.1 * hnp.tanh(h2 @ w3)
            return x, w1, w2, w3

        return lax.fori_loop(0, t, body, (x0, w1, w2, w3))

    return rollout


def _arguments(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    scale = np.float32(1 / np.sqrt(HIDDEN))
    return [rng.standard_normal((n, 4)).astype(np.float32),
            rng.standard_normal((4, HIDDEN)).astype(np.float32),
            (rng.standard_normal((HIDDEN, HIDDEN)) * scale).astype(np.float32),
            (rng.standard_normal((HIDDEN, 4)) * scale).astype(np.float32)]


def _module(n: int, t: int) -> Module:
    module: Module = hlofuse.jit(_policy_rollout(t)).lower(*_arguments(n)).module
    return module


def _time_loop_plan(module: Module) -> LoopPlan:
    loops = [i for c in module.computations for i in c.instructions if i.op is Op.WHILE]
    assert len(loops) == 1
    plan = plan_parallel_loop(loops[0])
    assert isinstance(plan, LoopPlan), plan.message
    return plan


def test_unchanged_weights_are_read_only_and_small_state_stays_uniform() -> None:
    plan = _time_loop_plan(_module(37, 3))
    shapes = [plan.loop.shape.elements[i].dims for i in plan.read_only]
    # w1 (4 x 64 = 256 values) and w2 (4,096) are read where they lie; w3 is 256 too.
    assert sorted(shapes) == sorted([(4, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, 4)])
    assert not set(plan.read_only) & set(plan.uniform)


@pytest.mark.parametrize("n", [1, 37, 300])
def test_policy_rollout_is_one_kernel_equal_to_the_interpreter(n: int) -> None:
    args = _arguments(n)
    module = _module(n, 5)
    fused = run_strategy(module, "max", debug=False)
    assert not fused.kernels_per_iteration(), "the time loop is left outside a kernel"
    record = [r for r in fused.decisions.records
              if r.pass_name == "whole-loop-fusion" and r.verdict.value == "fuse"]
    assert record and "read-only" in record[-1].message
    compiled = compile_module(module, "max")
    expected = flatten_value(evaluate(module, args))
    actual = flatten_value(compiled(*args))
    for k, (a, e) in enumerate(zip(actual, expected)):
        np.testing.assert_allclose(np.asarray(a), e, rtol=2e-5, atol=2e-6, err_msg=f"out{k}")
    # The weights come back unchanged (copied out, or the same buffer).
    for a, w in zip(actual[1:], args[1:]):
        np.testing.assert_array_equal(np.asarray(a), w)


def test_hidden_layers_are_computed_once_per_step() -> None:
    """Each hidden layer's 64 tanh are computed in one loop over their positions (a few
    positions per pass), not once per position of the next product (4,096 per lane and
    step, and minutes of C compile)."""
    from hlofuse.codegen.whole_loop_materialized import POSITIONS_TOGETHER

    module = _module(48, 3)
    compiled = compile_module(module, "max")
    source = compiled.source()
    whole_loop = source[source.index("(kCustom)"):]
    assert whole_loop.count("tanhf(") <= 3 * POSITIONS_TOGETHER, whole_loop.count("tanhf(")
    assert len(whole_loop.splitlines()) < 2500, len(whole_loop.splitlines())
    # The 64-position sums of the second and third layers are loops over the contracting
    # positions (one per pass of positions), not written out.
    assert len(re.findall(r"for \(int c\d+ = 0; c\d+ < 64; \+\+c\d+\)", whole_loop)) == 2


def test_policy_rollout_on_the_emulated_cuda_target() -> None:
    """The same kernel IR retargeted to CUDA (run through the emulation build)."""
    args = _arguments(37)
    module = _module(37, 4)
    compiled = compile_module(module, "max", "cuda-emulated")
    expected = flatten_value(evaluate(module, args))
    for k, (a, e) in enumerate(zip(flatten_value(compiled(*args)), expected)):
        np.testing.assert_allclose(np.asarray(a), e, rtol=2e-5, atol=2e-6, err_msg=f"out{k}")
