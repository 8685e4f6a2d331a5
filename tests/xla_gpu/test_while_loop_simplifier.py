"""XLA's while-loop simplifier and arithmetic identities (run by `xla-gpu` before fusion):
each rewrite of the loop state is logged with its rule id, and the rewritten programs compute
what the reference interpreter computes on the original."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.passes.arithmetic_identities import ArithmeticIdentities
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.decision_log import DecisionLog
from hlofuse.passes.manager import FixedPoint, Pipeline
from hlofuse.passes.simplify import AlgebraicSimplifier
from hlofuse.passes.while_loop_simplifier import WhileLoopSimplifier
from hlofuse.reference.interpreter import evaluate, flatten_value

DATA = Path(__file__).parents[1] / "data" / "xla_gpu"
JAX_DATA = Path(__file__).parents[1] / "data" / "jax"
ROLLOUT_DATA = Path(__file__).parents[1] / "data" / "rollouts"

# State: (i, j, k, x, y, dead). i counts from 0 by 1 (the trip counter); j and k advance by
# constants (j += 1 from 0, k += 3 from 5); y starts as the same `a` as x but passes through
# while x changes (no repeat); x' = x * y + j + k; dead' = dead + 1 is read by nothing.
LOOP = """
HloModule loop_state

body {
  p = (s32[], s32[], s32[], s32[4], s32[4], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  j = s32[] get-tuple-element(p), index=1
  k = s32[] get-tuple-element(p), index=2
  x = s32[4] get-tuple-element(p), index=3
  y = s32[4] get-tuple-element(p), index=4
  dead = s32[] get-tuple-element(p), index=5
  one = s32[] constant(1)
  three = s32[] constant(3)
  i2 = s32[] add(i, one)
  j2 = s32[] add(j, one)
  k2 = s32[] add(three, k)
  jk = s32[] add(j, k)
  b = s32[4] broadcast(jk), dimensions={}
  xy = s32[4] multiply(x, y)
  x2 = s32[4] add(xy, b)
  dead2 = s32[] add(dead, one)
  ROOT t = (s32[], s32[], s32[], s32[4], s32[4], s32[]) tuple(i2, j2, k2, x2, y, dead2)
}

cond {
  q = (s32[], s32[], s32[], s32[4], s32[4], s32[]) parameter(0)
  qi = s32[] get-tuple-element(q), index=0
  n = s32[] constant(6)
  ROOT lt = pred[] compare(qi, n), direction=LT
}

ENTRY main {
  a = s32[4] parameter(0)
  zero = s32[] constant(0)
  five = s32[] constant(5)
  init = (s32[], s32[], s32[], s32[4], s32[4], s32[]) tuple(zero, zero, five, a, a, zero)
  w = (s32[], s32[], s32[], s32[4], s32[4], s32[]) while(init), condition=cond, body=body
  wx = s32[4] get-tuple-element(w), index=3
  wj = s32[] get-tuple-element(w), index=1
  ROOT r = (s32[4], s32[]) tuple(wx, wj)
}
"""

# Two elements start as the same instruction and pass through: one is a repeat.
REPEATED = """
HloModule repeated

body {
  p = (s32[], f32[3], f32[3], f32[3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f32[3] get-tuple-element(p), index=1
  b = f32[3] get-tuple-element(p), index=2
  c = f32[3] get-tuple-element(p), index=3
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ab = f32[3] multiply(a, b)
  c2 = f32[3] add(c, ab)
  ROOT t = (s32[], f32[3], f32[3], f32[3]) tuple(i2, a, b, c2)
}

cond {
  q = (s32[], f32[3], f32[3], f32[3]) parameter(0)
  qi = s32[] get-tuple-element(q), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(qi, n), direction=LT
}

ENTRY main {
  v = f32[3] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[3], f32[3], f32[3]) tuple(zero, v, v, v)
  w = (s32[], f32[3], f32[3], f32[3]) while(init), condition=cond, body=body
  wc = f32[3] get-tuple-element(w), index=3
  wb = f32[3] get-tuple-element(w), index=2
  ROOT r = (f32[3], f32[3]) tuple(wc, wb)
}
"""


def _simplify(module: Module) -> tuple[Module, DecisionLog]:
    log = DecisionLog()
    step = FixedPoint((WhileLoopSimplifier(), ArithmeticIdentities(), AlgebraicSimplifier(),
                       DeadCodeElimination()), label="while loops")
    simplified, _ = Pipeline([step], debug=True, log=log).run(module)
    return simplified, log


def _arguments(module: Module, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    found = []
    for param in module.entry.parameters:
        dtype = param.shape.dtype.numpy
        dims = param.shape.dims
        if np.issubdtype(dtype, np.floating):
            found.append(rng.uniform(-1, 1, dims).astype(dtype))
        elif dtype == np.bool_:
            found.append(rng.integers(0, 2, dims).astype(dtype))
        else:
            found.append(rng.integers(0, 7, dims).astype(dtype))
    return found


def _assert_same_results(before: Module, after: Module,
                         arguments: list[np.ndarray] | None = None, exact: bool = True) -> None:
    """Bit for bit, or (`exact=False`, the whole xla-gpu pipeline) to float rounding: XLA's
    simplifier reassociates sums with constants and multiplies by a constant's inverse where
    the program divides (`constant-sum`, `divide-by-constant`), as xla-gpu does."""
    arguments = _arguments(before) if arguments is None else arguments
    want = flatten_value(evaluate(before, arguments))
    got = flatten_value(evaluate(after, arguments))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def _loop_shapes(module: Module) -> list[str]:
    return [i.shape.text(False) for c in module.computations for i in c.instructions
            if i.op.text == "while"]


def test_induction_variables_merge_and_dead_state_goes() -> None:
    module = parse_module(LOOP)
    simplified, log = _simplify(module)
    rules = [(d.pass_name, d.rule) for d in log]
    assert ("while-loop-simplifier", "merged-induction-variables") in rules
    assert ("while-loop-simplifier", "dead-state") in rules
    assert ("arithmetic-identities", "identity-operand") in rules
    # j (index 1) is read after the loop, so it stays, passed through and computed from the
    # counter; k is read only through j + k, merged; `dead` is gone.
    (shape,) = _loop_shapes(simplified)
    assert shape.count("s32[]") < 5
    _assert_same_results(module, simplified)
    # x after 6 steps, by hand: x' = x * x + j + k with j = t, k = 5 + 3t.
    a = _arguments(module)[0].astype(np.int64)
    x = a.copy()
    for t in range(6):
        x = x * a + t + 5 + 3 * t
    got = flatten_value(evaluate(simplified, [_arguments(module)[0]]))
    np.testing.assert_array_equal(got[0], x.astype(np.int32))
    assert int(got[1]) == 6


def test_repeated_pass_through_state_is_read_once() -> None:
    module = parse_module(REPEATED)
    simplified, log = _simplify(module)
    assert any(d.rule == "repeated-state" for d in log)
    (shape,) = _loop_shapes(simplified)
    assert shape.count("f32[3]") == 2
    _assert_same_results(module, simplified)


# cartpole_fori_rollout takes seconds under xla-gpu and the interpreter: thorough.
@pytest.mark.parametrize("name", ["fori_loop", "scan_cumsum", "while_loop",
                                  pytest.param("cartpole_fori_rollout",
                                               marks=pytest.mark.thorough)])
def test_xla_gpu_keeps_the_results_of_corpus_loops(name: str) -> None:
    """On the corpus's stored inputs where it has them (a Collatz loop on random inputs may
    never end), and JAX's stored outputs agree too."""
    module = parse_module((DATA / f"{name}.before.hlo").read_text())
    fused = run_strategy(module, "xla-gpu", debug=True).module
    stored = JAX_DATA / f"{name}.npz"
    arguments = None
    if stored.exists():
        with np.load(stored) as data:
            arguments = [data[f"arg{i}"] for i in range(len(module.entry.parameters))]
            outputs = [data[f"out{i}"] for i in range(sum(k.startswith("out") for k in data.files))]
        got = flatten_value(evaluate(fused, arguments))
        for g, w in zip(got, outputs, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    _assert_same_results(module, fused, arguments, exact=False)


# XLA's GPU pipeline runs SimplifyFPConversions (excess precision allowed, XLA's default):
# convert_types' f32 -> f16 -> f32 round trips are removed, so its results are f32's, not
# JAX's CPU ones; xla-gpu does what XLA does (tests/xla_gpu/test_fp_conversions.py).
EXCESS_PRECISION = {"convert_types"}


@pytest.mark.thorough
@pytest.mark.parametrize("name", [
    pytest.param(p.stem, marks=pytest.mark.xfail(
        strict=True, reason="XLA's SimplifyFPConversions keeps f32 precision"))
    if p.stem in EXCESS_PRECISION else p.stem
    for p in sorted(JAX_DATA.glob("*.npz")) if (DATA / f"{p.stem}.before.hlo").exists()])
def test_xla_gpu_keeps_the_results_of_the_jax_corpus(name: str) -> None:
    """Every program of the JAX corpus, through the whole xla-gpu pipeline, gives JAX's
    stored outputs."""
    module = parse_module((DATA / f"{name}.before.hlo").read_text())
    fused = run_strategy(module, "xla-gpu", debug=True).module
    with np.load(JAX_DATA / f"{name}.npz") as data:
        arguments = [data[f"arg{i}"] for i in range(len(module.entry.parameters))]
        outputs = [data[f"out{i}"] for i in range(sum(k.startswith("out") for k in data.files))]
    got = flatten_value(evaluate(fused, arguments))
    assert len(got) == len(outputs)
    for g, w in zip(got, outputs, strict=True):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


# Two rollouts (a Threefry-heavy one and one with gather/scatter) in `make test`, all of them
# with -m slow: the interpreter runs each in seconds.
_QUICK_ROLLOUTS = {"pendulum", "catch"}


@pytest.mark.thorough
@pytest.mark.parametrize("env", [
    pytest.param(env, marks=() if env in _QUICK_ROLLOUTS else (pytest.mark.slow,))
    for env in sorted(p.name.removesuffix(".gpu.hlo") for p in ROLLOUT_DATA.glob("*.gpu.hlo"))
    # those whose XLA input is stored (test_corpus_agreement lists the ones not yet stored)
    if (DATA / f"rollout_{env}.before.hlo").exists()])
def test_xla_gpu_keeps_the_results_of_the_rollout_corpus(env: str) -> None:
    """The rollout corpus (as XLA was given it) through xla-gpu computes what the reference
    interpreter computes on it."""
    module = parse_module((DATA / f"rollout_{env}.before.hlo").read_text())
    fused = run_strategy(module, "xla-gpu", debug=True).module
    with np.load(ROLLOUT_DATA / f"{env}.npz") as data:
        arguments = [data["arg0"]]
    _assert_same_results(module, fused, arguments, exact=False)


def test_fori_loop_state_matches_xla() -> None:
    """XLA merges fori_loop's two counters (its optimised loop carries 4 elements)."""
    module = parse_module((DATA / "fori_loop.before.hlo").read_text())
    fused = run_strategy(module, "xla-gpu", debug=True).module
    xla = parse_module((DATA / "fori_loop.h100.hlo").read_text())
    assert len(_loop_shapes(fused)) == 1
    assert _loop_shapes(fused)[0].count(",") == _loop_shapes(xla)[0].count(",")


def test_multi_output_shapes_may_be_bitcasts_of_each_other() -> None:
    from hlofuse.fusion.xla_gpu.multi_output import is_reshape_or_transpose_bitcast
    from hlofuse.ir.dtypes import DType
    from hlofuse.ir.shapes import Shape

    def shape(dims: tuple[int, ...], layout: tuple[int, ...] | None = None) -> Shape:
        made = Shape.array(DType.F32, dims)
        return made if layout is None else dataclasses.replace(made, layout=layout)

    assert is_reshape_or_transpose_bitcast(shape((3, 2)), shape((1, 6)))
    assert is_reshape_or_transpose_bitcast(shape((4, 6), (0, 1)), shape((6, 4)))
    assert not is_reshape_or_transpose_bitcast(shape((3, 2)), shape((2, 4)))
    assert not is_reshape_or_transpose_bitcast(shape((4, 6), (0, 1)), shape((4, 6)))


def test_compiled_multi_output_kernel_of_bitcast_shapes_matches_the_reference() -> None:
    """The kernel that writes f32[3,2] and f32[1,6] outputs in one loop, compiled to C."""
    from hlofuse.targets.c import compile_cpu

    module = parse_module((DATA / "dynamic_slice_update.before.hlo").read_text())
    fused = run_strategy(module, "xla-gpu", debug=True).module
    assert any(i.op.text == "fusion" and i.shape.is_tuple
               for c in fused.computations for i in c.instructions)
    with np.load(JAX_DATA / "dynamic_slice_update.npz") as data:
        arguments = [data[f"arg{i}"] for i in range(len(module.entry.parameters))]
    want = flatten_value(evaluate(module, arguments))
    result = compile_cpu(fused)(*arguments)
    got = list(result) if isinstance(result, tuple | list) else [result]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), w)


def test_a_product_with_a_converted_pred_becomes_a_select() -> None:
    """XLA's HandleMultiply: convert(p) * A (either order) is select(p, A, 0); a product with a
    converted integer stays."""
    module = parse_module("""
HloModule mask
ENTRY e {
  a = f32[2,3] parameter(0)
  p = pred[2,3] parameter(1)
  n = s32[2,3] parameter(2)
  cp = f32[2,3] convert(p)
  cn = f32[2,3] convert(n)
  masked = f32[2,3] multiply(a, cp)
  scaled = f32[2,3] multiply(cn, a)
  ROOT t = (f32[2,3], f32[2,3]) tuple(masked, scaled)
}
""")
    log = DecisionLog()
    out, _ = Pipeline([ArithmeticIdentities(), DeadCodeElimination()], debug=True,
                      log=log).run(module)
    masked, scaled = out.entry.root.operands
    assert masked.op.text == "select" and [o.name for o in masked.operands[:2]] == ["p", "a"]
    zeros = masked.operands[2]
    assert zeros.op.text == "broadcast" and zeros.operands[0].op.text == "constant"
    assert scaled.op.text == "multiply"
    assert [r.rule for r in log] == ["pred-product-select"]
    a = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    p = np.array([[True, False, True], [False, False, True]])
    n = np.arange(6, dtype=np.int32).reshape(2, 3)
    for want, got in zip(flatten_value(evaluate(module, [a, p, n])),
                         flatten_value(evaluate(out, [a, p, n])), strict=True):
        np.testing.assert_array_equal(want, got)
