"""Nested loops inside a whole-loop kernel (codegen/whole_loop_nested.py): a physics engine's
substeps, a solver's iterations and loops inside those run as loops in lane code, stepped by
the block's lanes together, whatever their trip count. Results equal the reference
interpreter; the kernel's code does not grow with the trip count."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import hlofuse
import hlofuse.numpy as hnp
from hlofuse import lax
from hlofuse.api import compile_module
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.reference.interpreter import evaluate, flatten_value

pytestmark = pytest.mark.needs_cc


def _substeps(substeps: int, steps: int = 6) -> Any:
    """Lanes of a damped oscillator in 3 dimensions, each step `substeps` semi-implicit Euler
    substeps in a fori_loop, then a kick from the step counter."""

    def rollout(x0: Any, v0: Any) -> Any:
        def substep(_: Any, xv: Any) -> Any:
            x, v = xv
            v = v + 0.01 * (-4.0 * hnp.sin(x) - 0.3 * v)
            return x + 0.01 * v, v

        def step(i: Any, xv: Any) -> Any:
            x, v = lax.fori_loop(0, substeps, substep, xv)
            return x, v + 0.001 * i.astype(hnp.float32)

        return lax.fori_loop(0, steps, step, (x0, v0))

    return rollout


def _lanes(n: int, width: int = 3, seed: int = 5) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, width)).astype(np.float32),
            rng.standard_normal((n, width)).astype(np.float32)]


def _module(program: Any, args: list[np.ndarray]) -> Module:
    module: Module = hlofuse.jit(program).lower(*args).module
    return module


def _check(module: Module, args: list[np.ndarray], backend: str = "cpu") -> str:
    """One kernel for the time loop, equal to the interpreter; the compiled source."""
    fused = run_strategy(module, "max", debug=False)
    assert not fused.kernels_per_iteration(), "a loop is left outside the kernel"
    compiled = compile_module(module, "max", backend)
    expected = flatten_value(evaluate(module, args))
    actual = flatten_value(compiled(*args))
    for k, (a, e) in enumerate(zip(actual, expected)):
        np.testing.assert_allclose(np.asarray(a), e, rtol=2e-5, atol=2e-6, err_msg=f"out{k}")
    source: str = compiled.source()
    return source


def _whole_loop_source(source: str) -> str:
    return source[source.index("(kCustom)"):]


@pytest.mark.parametrize("n", [1, 37, 300])
def test_substeps_run_as_a_loop_in_lane_code(n: int) -> None:
    args = _lanes(n)
    source = _check(_module(_substeps(100), args), args)
    assert "a nested loop" in _whole_loop_source(source)


@pytest.mark.parametrize("scale", [1.0, 3.0e5])
def test_substep_math_uses_the_small_argument_forms_with_a_check(scale: float) -> None:
    """The substeps' sin runs in its small-argument form, each iteration checking first
    whether a lane's argument is beyond the form's limit (2^18), then computing the full
    function for the block: angles of a few radians and of 3e5 both equal the interpreter."""
    args = _lanes(37)
    args[0] = (args[0] * np.float32(scale)).astype(np.float32)
    source = _whole_loop_source(_check(_module(_substeps(100), args), args))
    nested = source[source.index("a nested loop"):]
    assert "hlofuse_sinf_small(" in nested and "hlofuse_trigf_is_small(" in nested


def test_code_does_not_grow_with_the_trip_count() -> None:
    args = _lanes(16)
    short = _whole_loop_source(_check(_module(_substeps(80), args), args))
    long = _whole_loop_source(compile_module(_module(_substeps(5000), args), "max").source())
    assert len(long.splitlines()) == len(short.splitlines())


def _changing_trip_count(n_iterations_from_step: bool) -> Any:
    """A solver whose iteration count grows with the step (uniform, not constant), and whose
    carry holds a uniform relaxation factor that changes every iteration."""

    def rollout(x0: Any, target: Any) -> Any:
        def iterate(_: Any, carry: Any) -> Any:
            x, relax = carry
            return x + relax * (target - x * x * 0.1), relax * 0.9

        def step(i: Any, x: Any) -> Any:
            upper = i + 3 if n_iterations_from_step else 70
            x, _ = lax.fori_loop(0, upper, iterate, (x, hnp.float32(0.5)))
            return x

        return lax.fori_loop(0, 5, step, x0)

    return rollout


@pytest.mark.parametrize("from_step", [True, False])
def test_trip_count_from_the_step_and_a_changing_uniform_carry(from_step: bool) -> None:
    args = _lanes(23)
    _check(_module(_changing_trip_count(from_step), args), args)


def _doubly_nested(inner: int, outer: int) -> Any:
    """Substeps whose every substep runs a fixed-point iteration of its own."""

    def rollout(x0: Any, v0: Any) -> Any:
        def fixed_point(_: Any, y: Any) -> Any:
            return 0.5 * (y + hnp.cos(y))

        def substep(_: Any, xv: Any) -> Any:
            x, v = xv
            y = lax.fori_loop(0, inner, fixed_point, x)
            v = v + 0.02 * (y - x)
            return x + 0.02 * v, v

        def step(_: Any, xv: Any) -> Any:
            return lax.fori_loop(0, outer, substep, xv)

        return lax.fori_loop(0, 4, step, (x0, v0))

    return rollout


def test_a_loop_nested_in_a_nested_loop() -> None:
    args = _lanes(19)
    source = _whole_loop_source(_check(_module(_doubly_nested(70, 65), args), args))
    assert source.count("a nested loop") == 2


def test_large_per_lane_elements_in_the_nested_loop() -> None:
    """80 values per lane: computed in passes over the positions, lanes inside."""
    args = _lanes(9, width=80)
    _check(_module(_substeps(90, steps=3), args), args)


def test_nested_loop_on_the_emulated_cuda_target() -> None:
    args = _lanes(37)
    _check(_module(_substeps(70, steps=3), args), args, "cuda-emulated")


def test_a_per_lane_trip_count_is_refused_naming_the_rule() -> None:
    """A nested while that runs until every lane has converged reads all lanes in its
    condition: the time loop is refused (the rule named), and the program still runs."""

    def rollout(x0: Any, v0: Any) -> Any:
        def step(_: Any, x: Any) -> Any:
            def unconverged(y: Any) -> Any:
                return hnp.any(hnp.abs(y - hnp.cos(y)) > 1e-4)

            return lax.while_loop(unconverged, lambda y: 0.5 * (y + hnp.cos(y)), x)

        return lax.fori_loop(0, 3, step, x0 + v0)

    args = _lanes(11)
    module = _module(rollout, args)
    fused = run_strategy(module, "max", debug=False)
    refusals = [r for r in fused.decisions.records
                if r.pass_name == "whole-loop-fusion" and r.verdict.value == "no"]
    assert refusals and refusals[-1].rule.startswith("whole-loop-")
    compiled = compile_module(module, "max")
    np.testing.assert_allclose(flatten_value(compiled(*args))[0],
                               flatten_value(evaluate(module, args))[0], rtol=1e-5)


def _until_converged(masked: bool) -> Any:
    """Each lane solves y = cos(y) + x by fixed-point iteration until its own residual is
    small, in the form jax.vmap gives a while_loop: the condition asks whether any lane
    wants another iteration, the body moves only the lanes that do (masked) or every lane."""

    def rollout(x0: Any, v0: Any) -> Any:
        def wants(carry: Any) -> Any:
            y, x, k = carry
            return hnp.any(hnp.abs(y - hnp.cos(y) - x) > 1e-5, axis=1) & (k < 200)

        def iterate(carry: Any) -> Any:
            y, x, k = carry
            again = wants(carry)
            if not masked:
                return 0.5 * (y + hnp.cos(y) + x), x, k + 1
            return (hnp.where(again[:, None], 0.5 * (y + hnp.cos(y) + x), y), x,
                    hnp.where(again, k + 1, k))

        def step(_: Any, x: Any) -> Any:
            k0 = hnp.zeros(x.shape[:1], hnp.int32)
            y, _, k = lax.while_loop(lambda c: hnp.any(wants(c)), iterate, (x, x, k0))
            return 0.9 * x + 0.1 * y + 0.01 * k[:, None].astype(hnp.float32)

        return lax.fori_loop(0, 4, step, 0.3 * x0 + v0)

    return rollout


@pytest.mark.parametrize("n", [1, 37, 300])
def test_per_lane_trip_counts_of_a_masked_loop_stop_per_block(n: int) -> None:
    """Lanes converge after different numbers of iterations; each block stops when its own
    lanes have (the further iterations of other blocks leave them unchanged)."""
    args = _lanes(n, width=2)
    module = _module(_until_converged(True), args)
    source = _whole_loop_source(_check(module, args))
    assert "a nested loop" in source
    decisions = run_strategy(module, "max", debug=False).decisions.records
    fused = [r for r in decisions if r.pass_name == "whole-loop-fusion"
             and r.verdict.value == "fuse"]
    assert fused[-1].figures["nested_loops"] == 1
    # (One lane is all there is: its loop's condition is the lane's own.)
    assert ("per-lane trip counts" in fused[-1].message) == (n > 1)


def test_an_unmasked_loop_waiting_for_every_lane_is_refused() -> None:
    args = _lanes(21, width=2)
    module = _module(_until_converged(False), args)
    fused = run_strategy(module, "max", debug=False)
    refusals = [r for r in fused.decisions.records
                if r.pass_name == "whole-loop-fusion" and r.verdict.value == "no"]
    assert refusals[-1].rule == "whole-loop-data-dependent-trip-count"
    assert "finished" in refusals[-1].message
    compiled = compile_module(module, "max")
    np.testing.assert_allclose(flatten_value(compiled(*args))[0],
                               flatten_value(evaluate(module, args))[0], rtol=1e-5)


def _relax_rods(keep: str) -> Any:
    """Each lane relaxes a rod of 8 cells (its neighbours' mean) until its own change is
    small, masked as jax.vmap masks a while_loop. Concat forwarding splits the masking select
    over the pieces of the shifted rod, so each piece keeps its own slice of the old rod
    (`keep="own"`); `keep="rotated"` keeps a finished lane's cells rotated instead, which
    changes a lane that has finished."""

    def rollout(x0: Any, v0: Any) -> Any:
        def wants(carry: Any) -> Any:
            u, change, k = carry
            return (change > 1e-4) & (k < 40)

        def sweep(carry: Any) -> Any:
            u, _, k = carry
            again = wants(carry)
            left = hnp.concatenate([u[:, :1], u[:, :-1]], axis=1)
            right = hnp.concatenate([u[:, 1:], u[:, -1:]], axis=1)
            new = 0.5 * (left + right)
            if keep == "own":
                moved = hnp.where(again[:, None], new, u)
            else:
                moved = hnp.concatenate(
                    [hnp.where(again[:, None], new[:, :7], u[:, 1:]),
                     hnp.where(again[:, None], new[:, 7:], u[:, :1])], axis=1)
            change = hnp.where(again, hnp.max(hnp.abs(new - u), axis=1), carry[1])
            return moved, change, hnp.where(again, k + 1, k)

        def step(_: Any, u: Any) -> Any:
            start = (u, hnp.ones(u.shape[:1], hnp.float32), hnp.zeros(u.shape[:1], hnp.int32))
            relaxed, _, k = lax.while_loop(lambda c: hnp.any(wants(c)), sweep, start)
            return relaxed + 0.1 * hnp.sin(u) + 0.001 * k[:, None].astype(hnp.float32)

        return lax.fori_loop(0, 3, step, x0 * v0)

    return rollout


@pytest.mark.parametrize("n", [5, 70])
def test_a_masked_loop_whose_select_is_split_over_a_concatenate(n: int) -> None:
    args = _lanes(n, width=8)
    module = _module(_relax_rods("own"), args)
    source = _whole_loop_source(_check(module, args))
    assert "a nested loop" in source


@pytest.mark.parametrize("backend", ["cuda-emulated", "tpu-interpret"])
def test_a_split_masked_loop_on_the_other_targets(backend: str) -> None:
    if backend == "tpu-interpret":
        pytest.importorskip("jax")
    args = _lanes(5, width=8)
    _check(_module(_relax_rods("own"), args), args, backend)


def test_a_split_select_keeping_another_slice_of_the_old_value_is_refused() -> None:
    args = _lanes(23, width=8)
    module = _module(_relax_rods("rotated"), args)
    refusals = [r for r in run_strategy(module, "max", debug=False).decisions.records
                if r.pass_name == "whole-loop-fusion" and r.verdict.value == "no"]
    assert refusals[-1].rule == "whole-loop-data-dependent-trip-count"
    assert "finished" in refusals[-1].message
    compiled = compile_module(module, "max")
    np.testing.assert_allclose(flatten_value(compiled(*args))[0],
                               flatten_value(evaluate(module, args))[0], rtol=1e-5)


def test_a_nested_loop_holding_the_lanes_along_another_dimension() -> None:
    """The nested loop carries the state transposed (lanes second): each lane's part is
    read along the dimension its initial value holds the lanes."""

    def rollout(x0: Any, v0: Any) -> Any:
        def relax(_: Any, xt: Any) -> Any:
            return xt + 0.05 * (hnp.cos(xt) - xt)

        def step(_: Any, x: Any) -> Any:
            return lax.fori_loop(0, 70, relax, x.T).T * 0.99 + 0.01

        return lax.fori_loop(0, 3, step, x0 + v0)

    args = _lanes(29)
    _check(_module(rollout, args), args)


def test_a_nested_loop_only_uniform_values_need_is_refused_naming_it() -> None:
    """A nested loop over a uniform value (a schedule computed by iteration) whose result the
    step counter's update needs: only lane code runs nested loops, so the time loop is
    refused with the nested loop named, and the program still runs."""

    def rollout(x0: Any, v0: Any) -> Any:
        def step(carry: Any) -> Any:
            i, x = carry
            skip = lax.fori_loop(0, 80, lambda _, s: (s * 3 + 1) % 7, i)
            return i + 1 + skip % 2, x * 0.9 + v0

        return lax.while_loop(lambda c: c[0] < 6, step, (hnp.int32(0), x0))

    args = _lanes(13)
    module = _module(rollout, args)
    fused = run_strategy(module, "max", debug=False)
    refusals = [r for r in fused.decisions.records
                if r.pass_name == "whole-loop-fusion" and r.verdict.value == "no"]
    assert refusals[-1].rule == "whole-loop-nested-control-flow", refusals[-1].message
    compiled = compile_module(module, "max")
    for a, e in zip(flatten_value(compiled(*args)), flatten_value(evaluate(module, args))):
        np.testing.assert_allclose(np.asarray(a), e, rtol=1e-5)


# A nested loop whose body scatters, into the lane's column i of the step, a value computed
# from its column j (`x.at[i].add(f(x[j]))`, a contact solver's impulse): lane code writes
# each position of the scatter's result as "its update where the index lands on it, else
# the old value", and the update, read from the nested loop's state, is computed once before
# those branches rather than again inside each (4 times here; a 4-ball contact model's two
# scatters per array nested that 36 times, 1.9 MB of C).
NESTED_SCATTER = """HloModule nested_scatter
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
inner_cond {
  ic = (s32[], f32[8,4]) parameter(0)
  ik = s32[] get-tuple-element(ic), index=0
  trips = s32[] constant(40)
  ROOT lt = pred[] compare(ik, trips), direction=LT
}
inner_body {
  ib = (s32[], f32[8,4]) parameter(0)
  n_k = s32[] get-tuple-element(ib), index=0
  n_x = f32[8,4] get-tuple-element(ib), index=1
  n_one = s32[] constant(1)
  n_four = s32[] constant(4)
  n_zero = s32[] constant(0)
  n_i = s32[] remainder(n_k, n_four)
  n_k1 = s32[] add(n_k, n_one)
  n_j = s32[] remainder(n_k1, n_four)
  n_col = f32[8,1] dynamic-slice(n_x, n_zero, n_j), dynamic_slice_sizes={8,1}
  n_sq = f32[8,1] multiply(n_col, n_col)
  n_onef = f32[] constant(1)
  n_ones = f32[8,1] broadcast(n_onef), dimensions={}
  n_sum = f32[8,1] add(n_sq, n_ones)
  n_root = f32[8,1] sqrt(n_sum)
  n_tenth = f32[] constant(0.1)
  n_tenths = f32[8,1] broadcast(n_tenth), dimensions={}
  n_update = f32[8,1] multiply(n_root, n_tenths)
  n_flat = f32[8] reshape(n_update)
  n_at = s32[8,1] broadcast(n_i), dimensions={}
  n_x2 = f32[8,4] scatter(n_x, n_at, n_flat), update_window_dims={}, inserted_window_dims={1},
      scatter_dims_to_operand_dims={1}, input_batching_dims={0},
      scatter_indices_batching_dims={0}, index_vector_dim=1, to_apply=add
  ROOT it = (s32[], f32[8,4]) tuple(n_k1, n_x2)
}
cond {
  cs = (s32[], f32[8,4]) parameter(0)
  ct = s32[] get-tuple-element(cs), index=0
  three = s32[] constant(3)
  ROOT lt3 = pred[] compare(ct, three), direction=LT
}
body {
  s = (s32[], f32[8,4]) parameter(0)
  o_t = s32[] get-tuple-element(s), index=0
  o_x = f32[8,4] get-tuple-element(s), index=1
  o_zero = s32[] constant(0)
  o_init = (s32[], f32[8,4]) tuple(o_zero, o_x)
  o_w = (s32[], f32[8,4]) while(o_init), condition=inner_cond, body=inner_body
  o_x2 = f32[8,4] get-tuple-element(o_w), index=1
  o_half = f32[] constant(0.5)
  o_halves = f32[8,4] broadcast(o_half), dimensions={}
  o_x3 = f32[8,4] multiply(o_x2, o_halves)
  o_one = s32[] constant(1)
  o_t1 = s32[] add(o_t, o_one)
  ROOT o_r = (s32[], f32[8,4]) tuple(o_t1, o_x3)
}
ENTRY e {
  x0 = f32[8,4] parameter(0)
  start = s32[] constant(0)
  state = (s32[], f32[8,4]) tuple(start, x0)
  ROOT loop = (s32[], f32[8,4]) while(state), condition=cond, body=body
}
"""


def test_a_nested_loops_scatter_computes_its_update_once() -> None:
    from hlofuse.ir.parser import parse_module

    x0 = np.random.default_rng(2).standard_normal((8, 4)).astype(np.float32)
    source = _whole_loop_source(_check(parse_module(NESTED_SCATTER), [x0]))
    nested = source[source.index("a nested loop"):]
    assert nested.count("sqrtf(") == 1
