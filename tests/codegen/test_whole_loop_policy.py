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
from hlofuse.fusion.beyond_xla.whole_loop import WholeLoopFusion
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.ops import Op
from hlofuse.passes.manager import Pipeline
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c import compile_cpu
from hlofuse.targets.c.build import generate_c

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
    # positions (one in the loop over passes of positions, one in a pass of what the passes
    # leave), not written out.
    contracting = re.findall(r"for \(int c\d+ = 0; c\d+ < 64; \+\+c\d+\)", whole_loop)
    assert 2 <= len(contracting) <= 4, contracting


def test_policy_rollout_on_the_emulated_cuda_target() -> None:
    """The same kernel IR retargeted to CUDA (run through the emulation build)."""
    args = _arguments(37)
    module = _module(37, 4)
    compiled = compile_module(module, "max", "cuda-emulated")
    expected = flatten_value(evaluate(module, args))
    for k, (a, e) in enumerate(zip(flatten_value(compiled(*args)), expected)):
        np.testing.assert_allclose(np.asarray(a), e, rtol=2e-5, atol=2e-6, err_msg=f"out{k}")


def _network_scan(t: int) -> Any:
    """A network stepped over a state of one array, its layers' weights and biases closed
    over by the step (so the loop passes them through): the biases' hidden width is the state's
    most common dimension, and the lanes must still be the batch."""

    def rollout(params: list[tuple[Any, Any]], obs: Any) -> Any:
        def step(x: Any, _: Any) -> tuple[Any, None]:
            for w, b in params[:-1]:
                x = hnp.tanh(x @ w + b)
            w, b = params[-1]
            return hnp.tanh(x @ w + b), None

        return lax.scan(step, obs, None, length=t)[0]

    return rollout


def test_a_network_scan_with_biases_is_one_kernel_over_the_batch() -> None:
    rng = np.random.default_rng(5)
    sizes = (4, HIDDEN, HIDDEN, 4)
    params = [((rng.standard_normal((m, k)) / np.sqrt(m)).astype(np.float32),
               (0.1 * rng.standard_normal(k)).astype(np.float32))
              for m, k in zip(sizes[:-1], sizes[1:])]
    obs = rng.uniform(-1, 1, (40, 4)).astype(np.float32)
    module = hlofuse.jit(_network_scan(6)).lower(params, obs).module
    plan = _time_loop_plan(module)
    assert plan.size == 40 and len(plan.per_lane) == 1
    fused = run_strategy(module, "max", debug=False)
    assert not fused.kernels_per_iteration(), "the time loop is left outside a kernel"
    flat = [a for layer in params for a in layer] + [obs]
    got = compile_module(module, "max").run_flat(flat)
    want = flatten_value(evaluate(module, flat))
    np.testing.assert_allclose(np.asarray(got[0]), want[0], rtol=2e-5, atol=2e-6)


# A time loop over 8 lanes whose step runs a network on a uniform observation (one
# environment's policy, lanes that only read its output): uniform code computes the products,
# which were written out term by term (and again for the lanes' input table).
UNIFORM_NETWORK = """
HloModule uniform_network

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

cond {
  cp = STATE parameter(0)
  ci = s32[] get-tuple-element(cp), index=0
  n = s32[] constant(6)
  ROOT lt = pred[] compare(ci, n), direction=LT
}

body {
  p = STATE parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  next = s32[] add(i, one)
  x = f32[8]{0} get-tuple-element(p), index=1
  obs = f32[1,4]{1,0} get-tuple-element(p), index=2
  w1 = f32[4,16]{1,0} get-tuple-element(p), index=3
  w2 = f32[16,16]{1,0} get-tuple-element(p), index=4
  d1 = f32[1,16]{1,0} dot(obs, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  h1 = f32[1,16]{1,0} tanh(d1)
  d2 = f32[1,16]{1,0} dot(h1, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  h2 = f32[1,16]{1,0} tanh(d2)
  nobs = f32[1,4]{1,0} slice(h2), slice={[0:1], [0:4]}
  zero = f32[] constant(0)
  total = f32[] reduce(h2, zero), dimensions={0,1}, to_apply=add_f32
  half = f32[] constant(0.5)
  scaled = f32[] multiply(total, half)
  spread = f32[8]{0} broadcast(scaled), dimensions={}
  nx = f32[8]{0} add(x, spread)
  ROOT t = STATE tuple(next, nx, nobs, w1, w2)
}

ENTRY main {
  x0 = f32[8]{0} parameter(0)
  obs0 = f32[1,4]{1,0} parameter(1)
  w10 = f32[4,16]{1,0} parameter(2)
  w20 = f32[16,16]{1,0} parameter(3)
  start = s32[] constant(0)
  init = STATE tuple(start, x0, obs0, w10, w20)
  loop = STATE while(init), condition=cond, body=body
  rx = f32[8]{0} get-tuple-element(loop), index=1
  robs = f32[1,4]{1,0} get-tuple-element(loop), index=2
  ROOT r = (f32[8]{0}, f32[1,4]{1,0}) tuple(rx, robs)
}
""".replace("STATE", "(s32[], f32[8]{0}, f32[1,4]{1,0}, f32[4,16]{1,0}, f32[16,16]{1,0})")


@pytest.mark.parametrize("backend", ["cpu", "cuda-emulated"])
def test_products_of_uniform_code_are_loops(backend: str) -> None:
    """The uniform step's and the lane-input table's products are loops over their positions
    and contracting positions (4 fused multiply-adds in the source, not 2 x 320), with the
    results of the written-out sums."""
    from hlofuse.ir.parser import parse_module

    module = parse_module(UNIFORM_NETWORK)
    rng = np.random.default_rng(7)
    args = [rng.standard_normal(8).astype(np.float32),
            rng.uniform(-1, 1, (1, 4)).astype(np.float32),
            rng.standard_normal((4, 16)).astype(np.float32),
            (rng.standard_normal((16, 16)) / 4).astype(np.float32)]
    compiled = compile_module(module, "max", backend)
    assert not compiled.kernels_per_iteration()
    if backend == "cpu":
        assert compiled.source().count("fmaf(") <= 8, compiled.source().count("fmaf(")
    got = compiled.run_flat(args)
    want = flatten_value(evaluate(module, args))
    for k, (a, e) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(np.asarray(a), e, rtol=2e-5, atol=2e-6, err_msg=f"out{k}")


def _few_outputs_rollout(t: int) -> Any:
    """A network whose last product has few outputs (a value head, a few logits) feeding back
    through a small product: the few outputs' sums are computed for several parts of the
    lane block in one pass."""

    def rollout(x0: Any, w1: Any, w2: Any, w3: Any, w4: Any) -> Any:
        def body(_: Any, carry: Any) -> Any:
            x = carry
            h2 = hnp.tanh(hnp.tanh(x @ w1) @ w2)
            return x * 0.9 + 0.1 * (hnp.tanh(h2 @ w3) @ w4)

        return lax.fori_loop(0, t, body, x0)

    return rollout


@pytest.mark.parametrize(("lanes", "outputs", "parts"), [(64, 1, 4), (64, 3, 2), (16, 1, 1)])
def test_few_output_sums_interleave_parts_of_the_block(lanes: int, outputs: int,
                                                       parts: int) -> None:
    rng = np.random.default_rng(outputs)
    scale = np.float32(1 / np.sqrt(HIDDEN))
    n = 200  # a last block of fewer lanes than the others
    args = [rng.standard_normal((n, 4)).astype(np.float32),
            rng.standard_normal((4, HIDDEN)).astype(np.float32),
            (rng.standard_normal((HIDDEN, HIDDEN)) * scale).astype(np.float32),
            (rng.standard_normal((HIDDEN, outputs)) * scale).astype(np.float32),
            rng.standard_normal((outputs, 4)).astype(np.float32)]
    module = hlofuse.jit(_few_outputs_rollout(5)).lower(*args).module
    fused, _ = Pipeline([WholeLoopFusion(lanes=lanes)]).run(module)
    source = generate_c(fused).source.text
    whole_loop = source[source.index("(kCustom)"):]
    assert f"blocks of {lanes} lanes" in whole_loop
    offsets = set(re.findall(r"\]\[\(l \+ (\d+)\)\] = sum", whole_loop))
    assert offsets == {str(g * lanes // parts) for g in range(1, parts)}, offsets
    expected = flatten_value(evaluate(module, args))
    for a, e in zip(flatten_value(compile_cpu(fused)(*args)), expected):
        np.testing.assert_allclose(np.asarray(a), e, rtol=2e-5, atol=2e-6)
