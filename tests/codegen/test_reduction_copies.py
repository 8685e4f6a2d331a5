"""Reductions in a fusion compute the reduced values where they are added, storing no row of
them first (issue 32, probe 44's rollout_gae: the advantages' mean and standard deviation over
[T, N] inside one kLoop fusion copied the producer's values into a malloc'd row before each
pairwise sum, half of that kernel's time).

Float sums over more than 32 elements keep NumPy's pairwise order (the leaves' loops evaluate
the producer; codegen/pairwise_rows.py), so the results equal the interpreter's bit for bit;
the other reduces of a multi-output reduction read their values in order in one loop.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.codegen.kernel_spec import KernelOptions
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c import compile_cpu
from hlofuse.targets.c.build import CompileOptions, generate_c

pytestmark = pytest.mark.needs_cc

# `none` and `max` keep every reduce whole: the reference's order, bit for bit. `xla` splits
# long ones as XLA's TreeReductionRewriter does (another grouping: equal within a tolerance).
EXACT = ("none", "max")
STRATEGIES = (*EXACT, "xla")
MALLOC = re.compile(r"malloc\(\((\d+) \* sizeof")

REDUCERS = """
add {
  add_a = f32[] parameter(0)
  add_b = f32[] parameter(1)
  ROOT add_s = f32[] add(add_a, add_b)
}

addi {
  addi_a = s32[] parameter(0)
  addi_b = s32[] parameter(1)
  ROOT addi_s = s32[] add(addi_a, addi_b)
}

argmax {
  argmax_v = f32[] parameter(0)
  argmax_i = s32[] parameter(1)
  argmax_w = f32[] parameter(2)
  argmax_j = s32[] parameter(3)
  argmax_gt = pred[] compare(argmax_v, argmax_w), direction=GT
  argmax_eq = pred[] compare(argmax_v, argmax_w), direction=EQ
  argmax_lt = pred[] compare(argmax_i, argmax_j), direction=LT
  argmax_tie = pred[] and(argmax_eq, argmax_lt)
  argmax_keep = pred[] or(argmax_gt, argmax_tie)
  argmax_value = f32[] select(argmax_keep, argmax_v, argmax_w)
  argmax_index = s32[] select(argmax_keep, argmax_i, argmax_j)
  ROOT argmax_r = (f32[], s32[]) tuple(argmax_value, argmax_index)
}

maxi {
  maxi_a = s32[] parameter(0)
  maxi_b = s32[] parameter(1)
  ROOT maxi_s = s32[] maximum(maxi_a, maxi_b)
}
"""


def normalised(t: int, n: int) -> str:
    """(x - mean(x)) / (std(x) + 1e-8) over the whole [t, n] array, x = a * b + c, with the
    mean and variance reduced inside the fusion that writes the result (as JAX's advantage
    normalisation lowers)."""
    shape = f"f32[{t},{n}]"
    return f"""HloModule normalised
{REDUCERS}
ENTRY e {{
  a = {shape} parameter(0)
  b = {shape} parameter(1)
  c = {shape} parameter(2)
  ab = {shape} multiply(a, b)
  x = {shape} add(ab, c)
  zero = f32[] constant(0)
  count = f32[] constant({t * n})
  sum = f32[] reduce(x, zero), dimensions={{0,1}}, to_apply=add
  mean = f32[] divide(sum, count)
  meanb = {shape} broadcast(mean), dimensions={{}}
  d = {shape} subtract(x, meanb)
  sq = {shape} multiply(d, d)
  ssq = f32[] reduce(sq, zero), dimensions={{0,1}}, to_apply=add
  var = f32[] divide(ssq, count)
  sd = f32[] sqrt(var)
  eps = f32[] constant(1e-08)
  den = f32[] add(sd, eps)
  denb = {shape} broadcast(den), dimensions={{}}
  ROOT y = {shape} divide(d, denb)
}}
"""


def row_reductions(shape: str, dims: str, out: str) -> str:
    """A multi-output reduction fusion: the sum of a * b + c and of its square over `dims`,
    and an integer count and maximum of the same rows."""
    return f"""HloModule rows
{REDUCERS}
ENTRY e {{
  a = {shape} parameter(0)
  b = {shape} parameter(1)
  c = {shape} parameter(2)
  ab = {shape} multiply(a, b)
  x = {shape} add(ab, c)
  sq = {shape} multiply(x, x)
  zero = f32[] constant(0)
  s = {out} reduce(x, zero), dimensions={{{dims}}}, to_apply=add
  s2 = {out} reduce(sq, zero), dimensions={{{dims}}}, to_apply=add
  ROOT t = ({out}, {out}) tuple(s, s2)
}}
"""


def integer_rows(shape: str, dims: str, out: str) -> str:
    return f"""HloModule integer_rows
{REDUCERS}
ENTRY e {{
  a = {shape} parameter(0)
  b = {shape} parameter(1)
  x = {shape} multiply(a, b)
  zero = s32[] constant(0)
  low = s32[] constant(-1000000)
  s = {out} reduce(x, zero), dimensions={{{dims}}}, to_apply=addi
  m = {out} reduce(x, low), dimensions={{{dims}}}, to_apply=maxi
  ROOT t = ({out}, {out}) tuple(s, m)
}}
"""


def _bits(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    return x.view(np.dtype(f"u{x.dtype.itemsize}"))


def _assert_matches_interpreter(text: str, args: list[np.ndarray],
                                strategies: tuple[str, ...] = STRATEGIES) -> list[np.ndarray]:
    expected = [np.asarray(v) for v in flatten_value(evaluate(parse_module(text), args))]
    for strategy in strategies:
        got = compile_module(parse_module(text), strategy, "cpu").run_flat(args)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype and g.shape == e.shape, strategy
            if strategy in EXACT or e.dtype.kind != "f":
                np.testing.assert_array_equal(_bits(g), _bits(e), err_msg=strategy)
            else:
                np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=strategy)
    return expected


def _assert_no_stored_rows(text: str, elements: int,
                           strategies: tuple[str, ...] = STRATEGIES) -> None:
    """No kernel allocates an array of the reduced values or calls the stored-row sum."""
    for strategy in strategies:
        fused = run_strategy(parse_module(text), strategy, debug=False).module
        source = generate_c(fused).source.text
        assert "hlofuse_pairwise_f32(" not in source, strategy
        assert "hlofuse_pairwise_f64(" not in source, strategy
        sizes = [int(m) for m in MALLOC.findall(source)]
        assert all(size < elements for size in sizes), (strategy, sizes)


def _inputs(shape: tuple[int, ...], count: int, dtype: type = np.float32) -> list[np.ndarray]:
    rng = np.random.default_rng(45)
    if dtype is np.int32:
        return [rng.integers(-1000, 1000, shape).astype(np.int32) for _ in range(count)]
    return [rng.standard_normal(shape).astype(dtype) for _ in range(count)]


@pytest.mark.parametrize("t, n", [(50, 1024), (7, 301)])
def test_whole_array_mean_and_variance_sum_the_producer_where_computed(t: int, n: int) -> None:
    # 7 x 301 = 2107 elements: leaves of unequal lengths (NumPy's halves are multiples of 8).
    text = normalised(t, n)
    (y,) = _assert_matches_interpreter(text, _inputs((t, n), 3))
    assert abs(float(np.mean(y))) < 1e-3 and abs(float(np.std(y)) - 1) < 1e-3
    _assert_no_stored_rows(text, t * n)


@pytest.mark.parametrize("shape, dims, out", [
    ((64, 300), "1", "f32[64]"),  # rows along the minor dimension, split across threads
    ((40, 3, 50), "0,2", "f32[3]"),  # rows gathered across dimensions, still pairwise
    ((300, 5), "0", "f32[5]"),  # columns: the reference sums them one after another
    ((2000,), "0", "f32[]"),
])
def test_row_sums_of_a_producer_store_no_rows(shape: tuple[int, ...], dims: str,
                                              out: str) -> None:
    text = row_reductions(f"f32[{','.join(map(str, shape))}]", dims, out)
    s, s2 = _assert_matches_interpreter(text, _inputs(shape, 3))
    assert np.all(s2 > 0) and s.shape == s2.shape
    _assert_no_stored_rows(text, int(np.prod(shape)))


def test_f64_sum_of_a_producer() -> None:
    # Every f32 of the program made f64, its `add` reducer included.
    text = row_reductions("f32[33,200]", "1", "f32[33]").replace("f32", "f64")
    args = _inputs((33, 200), 3, np.float64)
    _assert_matches_interpreter(text, args)
    _assert_no_stored_rows(text, 33 * 200)


@pytest.mark.parametrize("shape, dims, out", [
    ((16, 500), "1", "s32[16]"),
    ((40, 3, 50), "0,2", "s32[3]"),
])
def test_integer_reductions_of_a_producer_store_no_rows(shape: tuple[int, ...], dims: str,
                                                         out: str) -> None:
    text = integer_rows(f"s32[{','.join(map(str, shape))}]", dims, out)
    args = _inputs(shape, 2, np.int32)
    s, m = _assert_matches_interpreter(text, args)
    product = (args[0].astype(np.int64) * args[1]).astype(np.int32)
    axes = tuple(int(d) for d in dims.split(","))
    np.testing.assert_array_equal(m, product.max(axis=axes))
    _assert_no_stored_rows(text, int(np.prod(shape)))


def test_gumbel_argmax_and_sum_of_the_same_rows() -> None:
    # One multi-output reduction fusion (written fused: no strategy forms this one) with a
    # variadic reduce, accumulated one value after another from values computed a chunk
    # ahead, and a pairwise sum over the same rows of 100, sharing the two logs.
    text = f"""HloModule gumbel
{REDUCERS}
fused_gumbel {{
  u = f32[48,100] parameter(0)
  l1 = f32[48,100] log(u)
  n1 = f32[48,100] negate(l1)
  l2 = f32[48,100] log(n1)
  g = f32[48,100] negate(l2)
  iota = s32[48,100] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  izero = s32[] constant(0)
  zero = f32[] constant(0)
  best = (f32[48], s32[48]) reduce(g, iota, ninf, izero), dimensions={{1}}, to_apply=argmax
  s = f32[48] reduce(g, zero), dimensions={{1}}, to_apply=add
  ROOT t = ((f32[48], s32[48]), f32[48]) tuple(best, s)
}}

ENTRY e {{
  p = f32[48,100] parameter(0)
  ROOT f = ((f32[48], s32[48]), f32[48]) fusion(p), kind=kInput, calls=fused_gumbel
}}
"""
    u = np.random.default_rng(45).uniform(0.01, 0.99, (48, 100)).astype(np.float32)
    # The logs are the math library's (within 0.84 ulp of log), so the sums are NumPy's to a
    # rounding; reduced where computed, they are the stored rows' sums bit for bit.
    v, i, s = _assert_matches_interpreter(text, [u], ("xla",))
    fused = run_strategy(parse_module(text), "none", debug=False).module
    where_computed = flatten_value(compile_cpu(fused)(u))
    stored = flatten_value(compile_cpu(fused, CompileOptions(
        kernel=KernelOptions(store_reduced_rows=True)))(u))
    for a, b in zip(where_computed, stored):
        np.testing.assert_array_equal(_bits(np.asarray(a)), _bits(np.asarray(b)))
    g = -np.log(-np.log(u))
    np.testing.assert_array_equal(i, np.argmax(g, axis=1))
    np.testing.assert_allclose(s, g.sum(axis=1), rtol=1e-4, atol=1e-3)
    _assert_no_stored_rows(text, 48 * 100, ("none",))
