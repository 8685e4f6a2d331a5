"""The passes of XLA's 2022 GPU pipeline before and at the start of fusion (logistic
expansion, trip-count annotation, tree-reduction rewriting, variadic op splitting) keep every
result the reference interpreter gives, and change the kernel counts the way XLA's do; the
horizontal input fusion pass reports a change only when it changed something."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.analysis.loop_config import known_trip_count, stated_trip_count
from hlofuse.fusion.strategies import run_strategy
from hlofuse.fusion.xla2022.horizontal import HorizontalInputFusion
from hlofuse.fusion.xla2022.tree_reduction import (
    COLUMN_LIMIT,
    ROW_LIMIT,
    TreeReductionRewriter,
    sqrt_of_round_up_to_square,
)
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.ir.verifier import verify
from hlofuse.passes.logistic_expander import LogisticExpander
from hlofuse.passes.trip_count import WhileLoopTripCountAnnotator
from hlofuse.passes.variadic_op_splitter import VariadicOpSplitter
from hlofuse.reference.interpreter import evaluate, flatten_value

REDUCE = """HloModule r

add {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT s = {t}[] add(a, b)
}}

ENTRY main {{
  x = {t}[{dims}] parameter(0)
  zero = {t}[] constant(0)
  ROOT r = {t}[{out}] reduce(x, zero), dimensions={{{reduced}}}, to_apply=add
}}
"""


def _reduce(dims: tuple[int, ...], reduced: tuple[int, ...], dtype: str = "s32") -> str:
    out = ",".join(str(d) for i, d in enumerate(dims) if i not in reduced)
    return REDUCE.format(t=dtype, dims=",".join(map(str, dims)), out=out,
                         reduced=",".join(map(str, reduced)))


def test_thresholds_are_xla_2022s() -> None:
    assert ROW_LIMIT == 16384 and COLUMN_LIMIT == 4096
    assert [sqrt_of_round_up_to_square(k) for k in (1, 4, 5, 16384, 16385, 20000)] == [
        1, 2, 3, 128, 129, 142]


@pytest.mark.parametrize("dims, reduced, reduces", [
    ((20000,), (0,), 2),  # row, padded to 142 * 142
    ((3, 16641), (1,), 2),  # row, 129 * 129: no padding
    ((5000, 8), (0,), 2),  # column over 5000 rows
    ((2, 4100, 3), (1,), 2),  # column with kept dimensions on both sides
    ((12, 5, 40), (0, 2), 2),  # batched row with 12 > 8 batch rows
    ((16384,), (0,), 1),  # fits the tile: unchanged
    ((4096, 3), (0,), 1),  # fits the tile: unchanged
])
def test_tree_reduction_keeps_results(dims: tuple[int, ...], reduced: tuple[int, ...],
                                      reduces: int) -> None:
    module = parse_module(_reduce(dims, reduced))
    rewritten, changed = TreeReductionRewriter().run(module, [])
    verify(rewritten)
    assert changed is (reduces > 1)
    assert sum(i.op is Op.REDUCE for i in rewritten.entry.instructions) == reduces
    x = np.random.default_rng(0).integers(-1000, 1000, dims).astype(np.int32)
    (want,) = flatten_value(evaluate(module, [x]))
    (got,) = flatten_value(evaluate(rewritten, [x]))
    np.testing.assert_array_equal(got, want)


def test_tree_reduction_is_two_kernels_under_xla() -> None:
    module = parse_module(_reduce((20000,), (0,), "f32"))
    assert len(run_strategy(module, "xla-no-tree-reduction").kernels) == 1
    result = run_strategy(module, "xla")
    assert len(result.kernels) == 2 and all(k.kind == "kInput" for k in result.kernels)
    x = np.random.default_rng(1).standard_normal(20000).astype(np.float32)
    (want,) = flatten_value(evaluate(module, [x]))
    (got,) = flatten_value(evaluate(result.module, [x]))
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_logistic_expansion_keeps_results() -> None:
    module = parse_module("""HloModule s
ENTRY main {
  x = f32[64]{0} parameter(0)
  s = f32[64]{0} logistic(x)
  a = f32[64]{0} add(s, x)
  m = f32[64]{0} multiply(s, x)
  ROOT t = (f32[64]{0}, f32[64]{0}) tuple(a, m)
}
""")
    expanded, changed = LogisticExpander().run(module, [])
    assert changed and not any(i.op is Op.LOGISTIC for i in expanded.entry.instructions)
    x = np.linspace(-30, 30, 64, dtype=np.float32)
    want = flatten_value(evaluate(module, [x]))
    got = flatten_value(evaluate(expanded, [x]))
    # The interpreter rounds logistic once (computed in float64); the expansion rounds exp,
    # add and divide each in float32, as XLA's GPU code does: a few ulp apart, no more.
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=5e-7, atol=0)
    # Two kernels unexpanded (logistic is expensive, so it is not duplicated), one expanded.
    assert len(run_strategy(module, "xla-no-logistic-expander").kernels) == 2
    assert len(run_strategy(module, "xla").kernels) == 1


def test_variadic_split_keeps_results() -> None:
    params = "\n".join(f"  p{i} = f32[2]{{0}} parameter({i})" for i in range(300))
    names = ", ".join(f"p{i}" for i in range(300))
    module = parse_module(f"""HloModule v
ENTRY main {{
{params}
  ROOT c = f32[600]{{0}} concatenate({names}), dimensions={{0}}
}}
""")
    split, changed = VariadicOpSplitter().run(module, [])
    verify(split)
    concats = [i for i in split.entry.instructions if i.op is Op.CONCATENATE]
    assert changed and all(len(c.operands) <= 128 for c in concats)
    # 300 = 128 + 128 + 44: two groups, the 44 left carried on, then one concatenate of the
    # two groups and those 44.
    assert sorted(len(c.operands) for c in concats) == [46, 128, 128]
    args = [np.full(2, i, np.float32) for i in range(300)]
    np.testing.assert_array_equal(flatten_value(evaluate(split, args))[0],
                                  flatten_value(evaluate(module, args))[0])


COUNTED = """HloModule c

body {
  s = (s32[], f32[4]{0}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[4]{0} get-tuple-element(s), index=1
  two = s32[] constant(2)
  i2 = s32[] add(i, two)
  x2 = f32[4]{0} multiply(x, x)
  ROOT out = (s32[], f32[4]{0}) tuple(i2, x2)
}

cond {
  c = (s32[], f32[4]{0}) parameter(0)
  ci = s32[] get-tuple-element(c), index=0
  n = s32[] constant(7)
  ROOT lt = pred[] compare(ci, n), direction=LE
}

ENTRY main {
  x0 = f32[4]{0} parameter(0)
  one = s32[] constant(1)
  init = (s32[], f32[4]{0}) tuple(one, x0)
  ROOT loop = (s32[], f32[4]{0}) while(init), condition=cond, body=body
}
"""


def test_trip_count_annotation_and_kernel_count() -> None:
    module = parse_module(COUNTED)
    annotated, changed = WhileLoopTripCountAnnotator().run(module, [])
    assert changed
    (loop,) = [i for i in annotated.entry.instructions if i.op is Op.WHILE]
    assert known_trip_count(loop) == 4  # i = 1, 3, 5, 7
    assert WhileLoopTripCountAnnotator().run(annotated, [])[1] is False
    x = np.array([1.0, 0.5, -1.0, 2.0], np.float32)
    for a, b in zip(flatten_value(evaluate(annotated, [x])), flatten_value(evaluate(module, [x]))):
        np.testing.assert_array_equal(a, b)
    # The condition's compare is no kernel once the trip count is known.
    assert run_strategy(module, "xla").kernels_per_iteration() == {"loop": 2}
    assert run_strategy(module, "xla-no-trip-count").kernels_per_iteration() == {"loop": 3}


def test_known_trip_count_reads_xla_spelling_only() -> None:
    from hlofuse.ir.attrs import RawAttr

    def config(text: str) -> tuple[tuple[str, RawAttr], ...]:
        return (("backend_config", RawAttr(text)),)

    assert stated_trip_count(config('{"known_trip_count":{"n":"12"}}')) == 12
    assert stated_trip_count(config('{"known_trip_count":{"n":"-1"}}')) is None
    assert stated_trip_count(config('{"known_trip_count":{}}')) is None
    assert stated_trip_count(config("not json")) is None
    assert stated_trip_count(()) is None


TWO_REDUCTIONS = """HloModule h

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[64,32]{1,0} parameter(0)
  y = f32[16,32]{1,0} parameter(1)
  zero = f32[] constant(0)
  rx = f32[64]{0} reduce(x, zero), dimensions={1}, to_apply=add
  ry = f32[16]{0} reduce(y, zero), dimensions={1}, to_apply=add
  ROOT t = (f32[64]{0}, f32[16]{0}) tuple(rx, ry)
}
"""


def test_horizontal_input_fusion_reports_change_only_when_fusing() -> None:
    """Two reductions over different shapes cannot share a kernel: the first run wraps them
    into fusions (a change), the second finds nothing to do and says so, so the fixed point
    around it stops after two rounds instead of 25."""
    module = parse_module(TWO_REDUCTIONS)
    wrapped, changed = HorizontalInputFusion().run(module, [])
    assert changed
    assert HorizontalInputFusion().run(wrapped, [])[1] is False
