"""Dynamic-update-slice kernels run in place (`in-place`: the operand aliased to the output,
the clamped starts prefetched to SMEM, only the update's block written), equal to the
reference interpreter exactly in interpret mode, and lower to Mosaic without a TPU."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.tpu.listing import lower_for_tpu, pallas_listing
from hlofuse.targets.tpu.program import kernel_structs, plan_kernels

from tests.tpu.test_interpret import assert_close


def update_module(rows: int, lanes: int, update_rows: int, start: str = "parameter") -> Module:
    """`dynamic-update-slice(p, u * 2, t, 0)` of p: f32[rows, lanes] (the update computed in
    the kernel under fusion); `start` "parameter" (t an s32 input) or a constant's literal."""
    t_line = "t = s32[] parameter(2)" if start == "parameter" else f"t = s32[] constant({start})"
    return parse_module(f"""HloModule m
ENTRY e {{
  p = f32[{rows},{lanes}] parameter(0)
  u = f32[{update_rows},{lanes}] parameter(1)
  {t_line}
  two = f32[] constant(2)
  b = f32[{update_rows},{lanes}] broadcast(two), dimensions={{}}
  m = f32[{update_rows},{lanes}] multiply(u, b)
  z = s32[] constant(0)
  ROOT d = f32[{rows},{lanes}] dynamic-update-slice(p, m, t, z)
}}""", "m")


def _inputs(rows: int, lanes: int, update_rows: int, start: int | None) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((rows, lanes)).astype(np.float32),
              rng.standard_normal((update_rows, lanes)).astype(np.float32)]
    return inputs if start is None else [*inputs, np.int32(start)]


def _in_place(module: Module, strategy: str) -> list[object]:
    fused = run_strategy(module, strategy, debug=False).module
    return [k for k in plan_kernels(fused, True) if k.layout == "in-place"]


@pytest.mark.parametrize("strategy", ["none", "xla", "priority"])
@pytest.mark.parametrize("start", [0, 517, 1023, 5000, -3], ids=lambda s: f"start{s}")
def test_a_row_update_is_in_place_and_exact(strategy: str, start: int) -> None:
    """One row of [1024, 256] at the start, the middle, the last row, and starts clamped
    from past either end: exactly the interpreter's result."""
    module = update_module(1024, 256, 1)
    inputs = _inputs(1024, 256, 1, start)
    compiled = compile_module(module, strategy, "tpu-interpret")
    plans = compiled.executable.kernel_plans  # type: ignore[union-attr]
    assert [k.layout for k in plans].count("in-place") == 1, [(k.name, k.reason) for k in plans]
    assert_close(compiled.run_flat(inputs), flatten_value(evaluate(module, inputs)), 0)


def test_an_aligned_block_at_a_constant_start_is_written_whole() -> None:
    """Eight rows at constant row 16: the block is the update itself, the operand not read
    (memory space ANY), only aliased."""
    module = update_module(1024, 256, 8, start="16")
    [kernel] = _in_place(module, "xla")
    assert kernel.update.block == (8, 256) and not any(kernel.update.selected)
    inputs = _inputs(1024, 256, 8, None)
    got = compile_module(module, "xla", "tpu-interpret").run_flat(inputs)
    assert_close(got, flatten_value(evaluate(module, inputs)), 0)


def test_unplaceable_updates_keep_the_old_path_and_say_why() -> None:
    """Three rows at a dynamic start (a block places an update at multiples of its length
    only) stay an XLA operation, and the listing says why."""
    module = update_module(1024, 256, 3)
    fused = run_strategy(module, "xla", debug=False).module
    kernels = plan_kernels(fused, True)
    assert not any(k.layout == "in-place" for k in kernels)
    listing = pallas_listing(kernels)
    assert "not in place: dimension 0: an update of 3 at a dynamic start" in listing
    inputs = _inputs(1024, 256, 3, 700)
    got = compile_module(module, "xla", "tpu-interpret").run_flat(inputs)
    assert_close(got, flatten_value(evaluate(module, inputs)), 0)


T, N = 48, 256


def scan_module(steps: int = T, lanes: int = N) -> Module:
    """A loop writing row t of its f32[steps, lanes] output each step (x = x / 2 + 1)."""
    carry = f"(s32[], f32[{lanes}], f32[{steps},{lanes}])"
    return parse_module(f"""HloModule scan
cond {{
  cs = {carry} parameter(0)
  ct = s32[] get-tuple-element(cs), index=0
  cn = s32[] constant({steps})
  ROOT lt = pred[] compare(ct, cn), direction=LT
}}
body {{
  s = {carry} parameter(0)
  t = s32[] get-tuple-element(s), index=0
  x = f32[{lanes}] get-tuple-element(s), index=1
  out = f32[{steps},{lanes}] get-tuple-element(s), index=2
  h = f32[] constant(0.5)
  hb = f32[{lanes}] broadcast(h), dimensions={{}}
  one = f32[] constant(1)
  ob = f32[{lanes}] broadcast(one), dimensions={{}}
  x2 = f32[{lanes}] multiply(x, hb)
  x3 = f32[{lanes}] add(x2, ob)
  row = f32[1,{lanes}] reshape(x3)
  z = s32[] constant(0)
  out2 = f32[{steps},{lanes}] dynamic-update-slice(out, row, t, z)
  c1 = s32[] constant(1)
  t2 = s32[] add(t, c1)
  ROOT r = {carry} tuple(t2, x3, out2)
}}
ENTRY e {{
  x0 = f32[{lanes}] parameter(0)
  zero = f32[] constant(0)
  out0 = f32[{steps},{lanes}] broadcast(zero), dimensions={{}}
  t0 = s32[] constant(0)
  init = {carry} tuple(t0, x0, out0)
  w = {carry} while(init), condition=cond, body=body
  ROOT o = f32[{steps},{lanes}] get-tuple-element(w), index=2
}}""", "scan")


@pytest.mark.parametrize(("strategy", "kernels"), [("none", 8), ("xla", 5), ("priority", 5)])
def test_a_scan_writes_its_output_a_row_per_step_in_place(strategy: str, kernels: int) -> None:
    """A loop writing row t of its [T, N] output each step: the row's kernel is in place,
    every kernel a pallas_call (no XLA operation, no copy of the output), the result exact."""
    module = scan_module()
    inputs = [np.random.default_rng(1).standard_normal(N).astype(np.float32)]
    compiled = compile_module(module, strategy, "tpu-interpret")
    plans = compiled.executable.kernel_plans  # type: ignore[union-attr]
    assert len(plans) == kernels and all(k.mode == "pallas" for k in plans), \
        [(k.name, k.layout, k.reason) for k in plans]
    assert [k.layout for k in plans].count("in-place") == 1
    assert_close(compiled.run_flat(inputs), flatten_value(evaluate(module, inputs)), 0)


@pytest.mark.parametrize("module", [update_module(1024, 256, 1), update_module(1000, 200, 1),
                                    update_module(1024, 256, 8, start="16")],
                         ids=["row", "row-of-200", "aligned-block"])
def test_in_place_kernels_lower_to_mosaic(module: Module) -> None:
    """Lowered for the TPU without one: one prefetched scalar array, the output's block an
    update-sized window; the pallas_call aliases the operand (input 1, after the starts) to
    its output."""
    for strategy in ("none", "xla"):
        kernels = _in_place(module, strategy)
        assert kernels, strategy
        for kernel in kernels:
            text = lower_for_tpu(kernel, kernel_structs(kernel))
            assert "scalar_prefetch = 1" in text
            block = ", ".join(map(str, kernel.update.block))
            assert f"window_bounds = array<i64: {block}>" in text
            jaxpr = jax.make_jaxpr(lambda *a, k=kernel: k(*a))(*kernel_structs(kernel))
            [call] = [e for e in jaxpr.eqns if e.primitive.name == "pallas_call"]
            assert tuple(call.params["input_output_aliases"]) == \
                ((1 + kernel.update.operand, 0),)


WRAPPED = """HloModule wrapped
ENTRY e {
  p = f32[30,8] parameter(0)
  u = pred[8] parameter(1)
  t = s32[] parameter(2)
  zero = s32[] constant(0)
  n = s32[] constant(30)
  negative = pred[] compare(t, zero), direction=LT
  wrapped = s32[] add(t, n)
  start = s32[] select(negative, wrapped, t)
  f = f32[8] convert(u)
  row = f32[1,8] reshape(f)
  ROOT d = f32[30,8] dynamic-update-slice(p, row, start, zero)
}"""


@pytest.mark.parametrize("start", [-1, 5, 29, 40])
def test_a_start_computed_from_scalars_and_rows_tiles_do_not_divide(start: int) -> None:
    """JAX's wrap of a negative start (a select on the scalar) is evaluated before the call;
    30 rows are no whole number of 8-row tiles, so the block is the whole dimension: in
    place under `xla`, exact."""
    module = parse_module(WRAPPED, "wrapped")
    [kernel] = _in_place(module, "xla")
    assert kernel.update.block == (30, 8) and -1 in kernel.update.starts
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((30, 8)).astype(np.float32), rng.random(8) < 0.5,
              np.int32(start)]
    got = compile_module(module, "xla", "tpu-interpret").run_flat(inputs)
    assert_close(got, flatten_value(evaluate(module, inputs)), 0)
    assert lower_for_tpu(kernel, kernel_structs(kernel))


# A rollout in interpret mode (about 20 s): thorough (make test), not make fast.
@pytest.mark.thorough
def test_the_rollout_corpus_logs_its_rows_in_place() -> None:
    """acrobot's logged rows ([30, 8] a row per step, the start wrapped by JAX): two in-place
    kernels under `xla`, every Pallas kernel lowering, the rollout equal to the
    interpreter."""
    from pathlib import Path

    from tests.tpu.test_interpret import load_npz_case
    from tests.tpu.test_lowering import assert_every_kernel_lowers

    module, inputs = load_npz_case(Path(__file__).parent.parent / "data" / "rollouts" /
                                   "acrobot.cpu.hlo")
    assert len(_in_place(module, "xla")) == 2
    assert assert_every_kernel_lowers(run_strategy(module, "xla", debug=False).module) > 0
    compiled = compile_module(module, "xla", "tpu-interpret")
    assert_close(compiled.run_flat(inputs), flatten_value(evaluate(module, inputs)), 1e-4)
