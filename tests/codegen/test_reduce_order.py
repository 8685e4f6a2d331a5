"""The order and precision of float sums and products, and reduces that keep every element,
in the interpreter and the compiled code alike (fuzz seeds 3133, 3289, 4292, 4584).

Expected values are what XLA's CPU code gives (JAX 0.10.2, x86-64 Linux, `lax.reduce`):
- an f16 or bf16 add/multiply reducer runs on values of that type: every step rounds, in
  row-major order from the initial value; so does an f32/f64 one over at most 32 elements;
- longer f32/f64 sums have no single XLA order; the reference keeps NumPy's pairwise one;
- a reduce over dimensions of size 1 only, from the reducer's identity, is a reshape (XLA's
  AlgebraicSimplifier): denormals and -0 pass unchanged.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hlofuse.analysis import parallel_loop as pl
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.passes.manager import Pipeline
from hlofuse.passes.simplify import AlgebraicSimplifier
from hlofuse.reference.interpreter import evaluate, flatten_value

from tests.analysis.test_parallel_loop import loop_text, plan_of
from tests.codegen.test_whole_loop import assert_compiled_matches, whole_loop

pytestmark = pytest.mark.needs_cc

STRATEGIES = ("none", "xla")


def _reduce_module(dtype: str, dims: list[int], reduced: list[int], op: str, init: str,
                   out: str | None = None) -> str:
    kept = [d for k, d in enumerate(dims) if k not in reduced]
    shape = f"{dtype}[{','.join(map(str, dims))}]"
    result = f"{dtype}[{','.join(map(str, kept))}]"
    root = f"  ROOT r = {result} reduce(p, c), dimensions={{{','.join(map(str, reduced))}}}, " \
        "to_apply=f"
    if out is not None:
        root = root.replace("ROOT r", "r") + f"\n  ROOT o = {out}[{','.join(map(str, kept))}] " \
            "convert(r)"
    return f"""HloModule m

f {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT s = {dtype}[] {op}(a, b)
}}

ENTRY main {{
  p = {shape} parameter(0)
  c = {dtype}[] constant({init})
{root}
}}
"""


def _bits(x: np.ndarray) -> list[int]:
    x = np.asarray(x)
    return [int(b) for b in x.view(np.dtype(f"u{x.dtype.itemsize}")).ravel()]


def _run_everywhere(text: str, x: np.ndarray) -> np.ndarray:
    """The interpreter's one output, after asserting every strategy gives its bits."""
    from hlofuse.api import compile_module

    (expected,) = [np.asarray(v) for v in flatten_value(evaluate(parse_module(text), [x]))]
    for strategy in STRATEGIES:
        executable = compile_module(parse_module(text), strategy, "cpu")
        (got,) = [np.asarray(v) for v in executable.run_flat([x])]
        assert got.dtype == expected.dtype and got.shape == expected.shape, strategy
        assert _bits(got) == _bits(expected), (strategy, got, expected)
    return expected


def test_f16_product_rounds_every_step() -> None:
    # 2^-24 (the smallest f16 denormal) times -0.5 is a tie that rounds to -0, which no later
    # factor undoes; accumulated in f32 the product would be -2^-13 (seed 3133).
    x = np.array([2**-12, 2**-12, -0.5, 2**12, 1, 1, 1, 1, 1], np.float16)
    result = _run_everywhere(_reduce_module("f16", [9], [0], "multiply", "1"), x)
    assert _bits(result) == [0x8000]


def test_f16_column_sum_rounds_every_step() -> None:
    # 2048 + 1 rounds back to 2048 (ties to even) four times; 1 + 1 + 1 + 1 + 2048 is 2052
    # (seed 4584: a column sum, where the compiled code keeps a block of accumulators).
    x = np.ones((5, 8), np.float16)
    x[0] = 2048
    x[:, 1] = [1, 1, 1, 1, 2048]
    x[:, 2] = [0.1, 0.2, 0.3, 0.4, 0.5]
    result = _run_everywhere(_reduce_module("f16", [5, 8], [0], "add", "0", out="f32"), x)
    np.testing.assert_array_equal(result, [2048, 2052, 1.5, 2048, 2048, 2048, 2048, 2048])


def test_bf16_row_sum_rounds_every_step() -> None:
    x = np.array([[256, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 256]], ml_dtypes.bfloat16)
    result = _run_everywhere(_reduce_module("bf16", [2, 6], [1], "add", "0", out="f32"), x)
    np.testing.assert_array_equal(result, [256, 260])


def test_f64_sum_of_eight_runs_in_index_order() -> None:
    # In order, DBL_MAX and -DBL_MAX cancel before -1e30 is added; NumPy's pairwise order
    # adds -1e30 to -DBL_MAX first and returns 0 (seed 3289).
    big = np.finfo(np.float64).max
    x = np.array([big, 0, -big, -1e30, 0, 0, 0, 0], np.float64)
    assert np.add.reduce(x) == 0
    result = _run_everywhere(_reduce_module("f64", [8], [0], "add", "0"), x)
    assert result == -1e30


def test_f32_sum_starts_from_the_initial_value() -> None:
    # 1e8 + 5 + 5 + 5, one step at a time (f32 spacing 8 there): 1e8 + 24; 15 added to 1e8
    # at the end would give 1e8 + 16.
    x = np.array([[5, 5, 5]], np.float32)
    result = _run_everywhere(_reduce_module("f32", [1, 3], [1], "add", "1e8"), x)
    assert result[0] - np.float32(1e8) == 24


def test_long_f32_sum_keeps_the_pairwise_order() -> None:
    # Over 32 elements: NumPy's pairwise order (eight partial sums), where DBL_MAX and
    # -DBL_MAX meet in one partial sum and -1e30 survives; in index order it would be lost.
    big = np.finfo(np.float32).max
    x = np.zeros(40, np.float32)
    x[0], x[1], x[8] = big, -1e30, -big
    result = _run_everywhere(_reduce_module("f32", [40], [0], "add", "0"), x)
    assert result == np.float32(-1e30)


@pytest.mark.parametrize("op,init", [("maximum", "-inf"), ("add", "0")])
def test_reduce_of_size_one_dimensions_keeps_denormals_and_zero_signs(op: str, init: str
                                                                       ) -> None:
    x = np.array([[1e-40, -1e-40, -0.0, 3.0]], np.float32)
    result = _run_everywhere(_reduce_module("f32", [1, 4], [0], op, init), x)
    assert _bits(result) == [0x000116C2, 0x800116C2, 0x80000000, 0x40400000]


def test_reduce_of_size_one_dimensions_from_another_value_keeps_it() -> None:
    # HLO's meaning: the initial value takes part (XLA would drop it, assuming the identity).
    x = np.array([[1.0, 5.0, -0.0]], np.float32)
    result = _run_everywhere(_reduce_module("f32", [1, 3], [0], "maximum", "4"), x)
    np.testing.assert_array_equal(result, [4, 5, 4])


def test_simplifier_makes_a_reduce_from_the_identity_a_reshape() -> None:
    text = """HloModule m

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p0 = f32[3,1,4]{2,1,0} parameter(0)
  zero = f32[] constant(0)
  one = f32[] constant(1)
  unit = f32[3,4]{1,0} reduce(p0, zero), dimensions={1}, to_apply=add
  other = f32[3,4]{1,0} reduce(p0, one), dimensions={1}, to_apply=add
  real = f32[3]{0} reduce(unit, zero), dimensions={1}, to_apply=add
  ROOT t = (f32[3,4]{1,0}, f32[3,4]{1,0}, f32[3]{0}) tuple(unit, other, real)
}
"""
    result, changed = Pipeline([AlgebraicSimplifier()]).run(parse_module(text))
    printed = module_text(result)
    assert changed and "f32[3,4]{1,0} reshape(p0)" in printed
    assert "other = f32[3,4]{1,0} reduce(" in printed and "real = f32[3]{0} reduce(" in printed
    denormal = np.full((3, 1, 4), 2.938736e-39, np.float32)
    unit, other, real = flatten_value(evaluate(parse_module(text), [denormal]))
    assert _bits(unit) == _bits(denormal)
    assert np.all(np.asarray(other) == 1) and not np.asarray(real).any()  # flushed by adds


ONE_LANE_SUM = """
  x = f32[1]{0} get-tuple-element(p), index=1
  acc = f32[] get-tuple-element(p), index=2
  half = f32[1]{0} constant({0.5})
  y = f32[1]{0} multiply(x, half)
  total = f32[] reshape(y)
  acc1 = f32[] add(acc, total)
  ROOT t = (s32[], f32[1]{0}, f32[]) tuple(next, y, acc1)"""


def test_one_lane_loop_accumulates_through_a_reshape() -> None:
    # With one lane, the simplifier leaves the sum over the lanes as a reshape to a scalar.
    text = loop_text(ONE_LANE_SUM, "(s32[], f32[1]{0}, f32[])")
    plan = plan_of(text)
    assert isinstance(plan, pl.LoopPlan)
    (acc,) = plan.accumulators
    assert (acc.element, acc.op, [r.name for r in acc.reduces]) == (2, Op.ADD, ["total"])
    module = parse_module(text)
    inputs = [np.array(0, np.int32), np.array([8.0], np.float32), np.array(1.0, np.float32)]
    _, y, total = assert_compiled_matches(whole_loop(module), inputs, module)
    assert y.tolist() == [0.25] and total == 1 + 4 + 2 + 1 + 0.5 + 0.25
