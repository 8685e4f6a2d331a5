"""own-row-gather: `x[jnp.arange(n), a]` as a batched gather, and the loop it lets whole-loop
fusion run per lane."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.fusion.beyond_xla.whole_loop import WholeLoopFusion
from hlofuse.fusion.strategies import parse_strategy, run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.passes.decision_log import DecisionLog
from hlofuse.passes.manager import Pipeline
from hlofuse.passes.own_row_gather import OwnRowGather
from hlofuse.reference.interpreter import evaluate, flatten_value

from tests.analysis.test_parallel_loop import loop_text

GATHER_ATTRS = ("offset_dims={}, collapsed_slice_dims={0,1}, index_vector_dim=1, "
                "slice_sizes={1,1}")
# What JAX lowers `x[jnp.arange(8), a]` to: the lane numbers wrapped as negative indices
# would be, reshaped to a column, beside the column of `a`.
ROWS_BY_POSITION = """HloModule m

ENTRY main {
  x = f32[8,3]{1,0} parameter(0)
  a = s32[8]{0} parameter(1)
  iota = s32[8]{0} iota(), iota_dimension=0
  zero = s32[] constant(0)
  zeros = s32[8]{0} broadcast(zero), dimensions={}
  negative = pred[8]{0} compare(iota, zeros), direction=LT
  n = s32[] constant(8)
  ns = s32[8]{0} broadcast(n), dimensions={}
  wrapped = s32[8]{0} add(iota, ns)
  rows = s32[8]{0} select(negative, wrapped, iota)
  row_column = s32[8,1]{1,0} reshape(rows)
  a_column = s32[8,1]{1,0} reshape(a)
  indices = s32[8,2]{1,0} concatenate(%s), dimensions={1}
  ROOT g = f32[8]{0} gather(x, indices), start_index_map={%s}, ATTRS
}
""".replace("ATTRS", GATHER_ATTRS)


def run_pass(module: Module) -> tuple[Module, bool, DecisionLog]:
    log = DecisionLog()
    out, changed = Pipeline([OwnRowGather()], log=log).run(module)
    return out, changed, log


def gather_of(module: Module) -> object:
    return next(i for i in module.entry.instructions if i.op is Op.GATHER)


def values(module: Module, *args: np.ndarray) -> list[np.ndarray]:
    return [np.asarray(v) for v in flatten_value(evaluate(module, list(args)))]


@pytest.mark.parametrize("order,index_map,batched_map", [
    ("row_column, a_column", "0,1", (1,)),
    ("a_column, row_column", "1,0", (1,)),
])
def test_the_position_leaves_the_index_vector_as_a_batching_pair(
        order: str, index_map: str, batched_map: tuple[int, ...]) -> None:
    module = parse_module(ROWS_BY_POSITION % (order, index_map))
    out, changed, log = run_pass(module)
    assert changed
    gather = gather_of(out)
    assert gather.ints("operand_batching_dims") == (0,)
    assert gather.ints("start_indices_batching_dims") == (0,)
    assert gather.ints("start_index_map") == batched_map
    assert gather.ints("collapsed_slice_dims") == (1,)
    assert gather.operands[1].shape.dims == (8, 1)
    assert [r.rule for r in log] == ["position-index-batched"]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((8, 3)).astype(np.float32)
    a = rng.integers(-1, 4, 8).astype(np.int32)  # out of range clamps the same either way
    expected = values(module, x, a)
    assert np.array_equal(expected[0], x[np.arange(8), np.clip(a, 0, 2)])
    assert np.array_equal(values(out, x, a)[0], expected[0])


def test_an_index_that_is_not_the_position_stays() -> None:
    # 7 - iota reads the rows in reverse: other lanes' rows.
    text = ROWS_BY_POSITION % ("row_column, a_column", "0,1")
    text = text.replace("rows = s32[8]{0} select(negative, wrapped, iota)",
                        "seven = s32[] constant(7)\n  sevens = s32[8]{0} broadcast(seven), "
                        "dimensions={}\n  rows = s32[8]{0} subtract(sevens, iota)")
    _, changed, _ = run_pass(parse_module(text))
    assert not changed


def test_a_select_that_is_not_the_negative_wrap_stays() -> None:
    text = (ROWS_BY_POSITION % ("row_column, a_column", "0,1")).replace(
        "direction=LT", "direction=GT")
    _, changed, _ = run_pass(parse_module(text))
    assert not changed


# A loop whose step reads each lane's own row of a per-lane table by position: refused as
# reading other lanes' values before the rewrite, one kernel after it.
TABLE_LOOP = loop_text("""
  q = f32[8,3]{1,0} get-tuple-element(p), index=1
  state = s32[8]{0} get-tuple-element(p), index=2
  iota = s32[8]{0} iota(), iota_dimension=0
  row_column = s32[8,1]{1,0} reshape(iota)
  s_column = s32[8,1]{1,0} reshape(state)
  indices = s32[8,2]{1,0} concatenate(row_column, s_column), dimensions={1}
  seen = f32[8]{0} gather(q, indices), start_index_map={0,1}, ATTRS
  seen_rows = f32[8,3]{1,0} broadcast(seen), dimensions={0}
  q1 = f32[8,3]{1,0} add(q, seen_rows)
  one_s = s32[8]{0} broadcast(one), dimensions={}
  s1 = s32[8]{0} add(state, one_s)
  three = s32[] constant(3)
  threes = s32[8]{0} broadcast(three), dimensions={}
  s2 = s32[8]{0} remainder(s1, threes)
  ROOT t = (s32[], f32[8,3]{1,0}, s32[8]{0}) tuple(next, q1, s2)""",
                       "(s32[], f32[8,3]{1,0}, s32[8]{0})").replace("ATTRS", GATHER_ATTRS)


def custom_fusions(module: Module) -> int:
    return sum(i.op is Op.FUSION and i.attrs.get("kind") == "kCustom"
               for i in module.all_instructions())


def test_whole_loop_fusion_runs_the_loop_per_lane_after_the_rewrite() -> None:
    module = parse_module(TABLE_LOOP)
    rng = np.random.default_rng(3)
    args = [np.int32(0), rng.standard_normal((8, 3)).astype(np.float32),
            rng.integers(0, 3, 8).astype(np.int32)]
    want = values(module, *args)
    for strategy in ("priority+whole_loop+default_costs", "none+whole_loop"):
        fused = run_strategy(module, parse_strategy(strategy)).module
        assert custom_fusions(fused) == 1, strategy
        for got, expected in zip(values(fused, *args), want):
            np.testing.assert_array_equal(got, expected)


def test_without_the_rewrite_whole_loop_fusion_refuses_the_loop() -> None:
    log = DecisionLog()
    fused, _ = Pipeline([WholeLoopFusion()], log=log).run(parse_module(TABLE_LOOP))
    assert custom_fusions(fused) == 0
    assert any("reads values of other lanes" in r.message for r in log)


def test_the_c_target_runs_the_loop_as_one_kernel() -> None:
    from hlofuse.api import compile_module

    module = parse_module(TABLE_LOOP)
    rng = np.random.default_rng(11)
    args = [np.int32(0), rng.standard_normal((8, 3)).astype(np.float32),
            rng.integers(0, 3, 8).astype(np.int32)]
    compiled = compile_module(module, "max", "cpu")
    assert custom_fusions(compiled.fusion.module) == 1
    for got, expected in zip(compiled.run_flat(args), values(module, *args)):
        np.testing.assert_array_equal(np.asarray(got), expected)


def test_a_sorted_promise_is_dropped_with_the_position() -> None:
    # (row, a) pairs sorted with the row leading leave `a` in any order.
    text = (ROWS_BY_POSITION % ("row_column, a_column", "0,1")).replace(
        "slice_sizes={1,1}", "slice_sizes={1,1}, indices_are_sorted=true")
    out, changed, _ = run_pass(parse_module(text))
    assert changed and "indices_are_sorted" not in gather_of(out).attrs


@pytest.mark.parametrize("backend", ["cpu", "tpu-interpret"])
def test_the_batched_form_runs_outside_a_loop_too(backend: str) -> None:
    if backend == "tpu-interpret":
        pytest.importorskip("jax.experimental.pallas", reason="JAX with Pallas is not installed")
    from hlofuse.api import compile_module

    module = parse_module(ROWS_BY_POSITION % ("row_column, a_column", "0,1"))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 3)).astype(np.float32)
    a = rng.integers(-2, 5, 8).astype(np.int32)
    compiled = compile_module(module, "max", backend)
    assert any(i.op is Op.GATHER and i.ints("operand_batching_dims") == (0,)
               for i in compiled.fusion.module.all_instructions())
    got = compiled.run_flat([x, a])
    np.testing.assert_array_equal(np.asarray(got[0]), values(module, x, a)[0])


def test_an_iota_that_wraps_in_its_type_is_not_a_position() -> None:
    # An s8 iota over 200 rows wraps past 127 (XLA then clamps those rows' starts to 0), so
    # it reads other lanes' rows; as a u8 it holds every row and is the position.
    def rows_of(dtype: str) -> str:
        text = ROWS_BY_POSITION % ("row_column, a_column", "0,1")
        text = text.replace("f32[8,3]", "f32[200,3]").replace("s32[8", "s32[200")
        text = text.replace("f32[8]{0}", "f32[200]{0}").replace("pred[8]", "pred[200]")
        text = text.replace("constant(8)", "constant(200)")
        return text.replace("  iota = s32[200]{0} iota(), iota_dimension=0",
                            f"  narrow = {dtype}[200]{{0}} iota(), iota_dimension=0\n"
                            "  iota = s32[200]{0} convert(narrow)")

    assert not run_pass(parse_module(rows_of("s8")))[1]
    assert run_pass(parse_module(rows_of("u8")))[1]
