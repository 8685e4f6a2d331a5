"""Cholesky factorisations and triangular solves inside a whole-loop kernel's lane code: the
loop becomes one kernel whose results are those of the runtime's library routines bit for
bit, and the interpreter's within rounding."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hlofuse.analysis import parallel_loop as pl
from hlofuse.analysis.parallel_loop_refusals import OPAQUE_OP, Refusal
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import flatten_value

from tests.analysis.test_parallel_loop import loop_text
from tests.codegen.test_whole_loop import assert_compiled_matches, compile_cpu, whole_loop

pytestmark = pytest.mark.needs_cc

N = 19  # blocks of 8 lanes and a tail of 3
LOWER_LEFT = "left_side=true, lower=true, transpose_a=NO_TRANSPOSE"


def the_loop(module: Module) -> Instruction:
    return next(i for i in module.entry.instructions if i.op is Op.WHILE)


def assert_equal_to_the_library(module: Module, inputs: list[np.ndarray], lanes: int = 8
                                ) -> list[np.ndarray]:
    """The whole-loop kernel against the interpreter (within rounding) and against the
    unfused module, whose factorisations and solves are library calls (exactly)."""
    fused = whole_loop(module, lanes=lanes)
    actual = assert_compiled_matches(fused, inputs, module)
    library = flatten_value(compile_cpu(module)(*inputs))
    for k, (a, e) in enumerate(zip(actual, library)):
        np.testing.assert_array_equal(a, e, err_msg=f"out{k}")
    return actual


def solve_module(left: bool, lower: bool, transpose: bool, unit: bool, n: int = N,
                 t: str = "f32") -> Module:
    """b <- 0.5 * solve(A, b) + 0.25 * b each step, for one attribute combination."""
    b_dims = f"{n},4,2" if left else f"{n},2,4"
    state = f"(s32[], {t}[{n},4,4]{{2,1,0}}, {t}[{b_dims}]{{2,1,0}})"
    attrs = (f"left_side={str(left).lower()}, lower={str(lower).lower()}, "
             f"unit_diagonal={str(unit).lower()}, "
             f"transpose_a={'TRANSPOSE' if transpose else 'NO_TRANSPOSE'}")
    return parse_module(loop_text(f"""
  am = {t}[{n},4,4]{{2,1,0}} get-tuple-element(p), index=1
  bm = {t}[{b_dims}]{{2,1,0}} get-tuple-element(p), index=2
  x = {t}[{b_dims}]{{2,1,0}} triangular-solve(am, bm), {attrs}
  half = {t}[] constant(0.5)
  quarter = {t}[] constant(0.25)
  halves = {t}[{b_dims}]{{2,1,0}} broadcast(half), dimensions={{}}
  quarters = {t}[{b_dims}]{{2,1,0}} broadcast(quarter), dimensions={{}}
  xh = {t}[{b_dims}]{{2,1,0}} multiply(x, halves)
  bq = {t}[{b_dims}]{{2,1,0}} multiply(bm, quarters)
  bnew = {t}[{b_dims}]{{2,1,0}} add(xh, bq)
  ROOT r = {state} tuple(next, am, bnew)""", state))


def solve_inputs(left: bool, n: int = N, dtype: type = np.float32) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    a = rng.standard_normal((n, 4, 4)) + 4.0 * np.eye(4)
    b = rng.standard_normal((n, 4, 2) if left else (n, 2, 4))
    return [np.asarray(0, np.int32), a.astype(dtype), b.astype(dtype)]


# Each attribute both ways in the default tier; every combination with -m slow.
_DEFAULT_SOLVES = {(True, True, False, False), (True, False, True, True),
                   (False, True, True, False), (False, False, False, True)}


@pytest.mark.parametrize("left,lower,transpose,unit", [
    pytest.param(*combo, marks=() if combo in _DEFAULT_SOLVES else pytest.mark.slow)
    for combo in itertools.product([True, False], repeat=4)])
def test_triangular_solve_in_lane_code_is_one_kernel_equal_to_the_library(
        left: bool, lower: bool, transpose: bool, unit: bool) -> None:
    module = solve_module(left, lower, transpose, unit)
    plan = pl.plan_parallel_loop(the_loop(module))
    assert isinstance(plan, pl.LoopPlan), plan
    assert_equal_to_the_library(module, solve_inputs(left))


def test_f64_solve_with_one_lane() -> None:
    module = solve_module(True, True, True, False, n=1, t="f64")
    assert_equal_to_the_library(module, solve_inputs(True, n=1, dtype=np.float64), lanes=1)


def ffi_call(name: str, shape: str, operand: str, target: str, layout: str,
             config: str = "{}", aliased: bool = True) -> str:
    """One line of HLO: a typed-FFI custom call with one batch dimension, as JAX emits it."""
    alias = ", output_to_operand_aliasing={{0}: (0, {})}" if aliased else ""
    return (f'  {name} = {shape} custom-call({operand}), custom_call_target="{target}", '
            f"operand_layout_constraints={{{layout}}}{alias}, "
            f'api_version=API_VERSION_TYPED_FFI, frontend_attributes={{num_batch_dims="1"}}, '
            f"backend_config={config}")


def potrf_module(lower: bool, n: int = N) -> Module:
    """LAPACK's potrf (the custom call JAX's CPU lowering emits) and XLA's `cholesky` of the
    same per-lane matrix: the factor, info and the opcode's factor kept as loop state; the
    matrix grows by 0.1 * I per step (indefinite ones stay so for a few steps)."""
    uplo = 76 if lower else 85
    state = (f"(s32[], f32[{n},4,4]{{2,1,0}}, f32[{n},4,4]{{2,1,0}}, s32[{n}]{{0}}, "
             f"f32[{n},4,4]{{2,1,0}})")
    lower_text = str(lower).lower()
    return parse_module(loop_text(f"""
  m = f32[{n},4,4]{{2,1,0}} get-tuple-element(p), index=1
{ffi_call("call", f"(f32[{n},4,4]{{1,2,0}}, s32[{n}]{{0}})", "m", "lapack_spotrf_ffi",
          f"f32[{n},4,4]{{1,2,0}}", f"{{uplo = {uplo} : ui8}}")}
  factor = f32[{n},4,4]{{2,1,0}} get-tuple-element(call), index=0
  info = s32[{n}]{{0}} get-tuple-element(call), index=1
  xla = f32[{n},4,4]{{2,1,0}} cholesky(m), lower={lower_text}
  ii = s32[4,4]{{1,0}} iota(), iota_dimension=0
  jj = s32[4,4]{{1,0}} iota(), iota_dimension=1
  diagonal = pred[4,4]{{1,0}} compare(ii, jj), direction=EQ
  tenth = f32[] constant(0.1)
  zero = f32[] constant(0)
  tenths = f32[4,4]{{1,0}} broadcast(tenth), dimensions={{}}
  zeros = f32[4,4]{{1,0}} broadcast(zero), dimensions={{}}
  eye = f32[4,4]{{1,0}} select(diagonal, tenths, zeros)
  eyes = f32[{n},4,4]{{2,1,0}} broadcast(eye), dimensions={{1,2}}
  mnew = f32[{n},4,4]{{2,1,0}} add(m, eyes)
  ROOT r = {state} tuple(next, mnew, factor, info, xla)""", state))


def potrf_inputs(n: int = N) -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((n, 4, 4))
    m = x @ np.swapaxes(x, -1, -2) + 0.5 * np.eye(4)
    m[2, 3, 3] = -0.35  # the last pivot is negative for the first steps: info 4, NaNs
    m[5, 0, 0] = -1.0  # never positive definite here: info 1
    return [np.asarray(0, np.int32), m.astype(np.float32), np.zeros((n, 4, 4), np.float32),
            np.zeros(n, np.int32), np.zeros((n, 4, 4), np.float32)]


@pytest.mark.parametrize("lower", [True, False])
def test_potrf_and_cholesky_in_lane_code_with_info_and_nans(lower: bool) -> None:
    module = potrf_module(lower)
    outputs = assert_equal_to_the_library(module, potrf_inputs())
    _, _, factor, info, xla = outputs
    assert info[5] == 1 and info[0] == 0
    assert np.isnan(xla[5]).all() and not np.isnan(xla[0]).any()
    # LAPACK keeps the other triangle of the input; XLA's cholesky zeroes it.
    other = np.triu(np.ones((4, 4), bool), 1) if lower else np.tril(np.ones((4, 4), bool), -1)
    assert (xla[0][other] == 0).all() and (factor[0][other] != 0).any()


def test_a_solution_read_at_a_computed_position() -> None:
    """The step reads row i % 4 of the solution (a dynamic slice at the loop counter): lane
    code picks it from a local array of the lane's results."""
    n = 11
    state = f"(s32[], f32[{n},4,4]{{2,1,0}}, f32[{n},4,1]{{2,1,0}}, f32[{n},1,1]{{2,1,0}})"
    module = parse_module(loop_text(f"""
  am = f32[{n},4,4]{{2,1,0}} get-tuple-element(p), index=1
  bm = f32[{n},4,1]{{2,1,0}} get-tuple-element(p), index=2
  x = f32[{n},4,1]{{2,1,0}} triangular-solve(am, bm), {LOWER_LEFT}
  four = s32[] constant(4)
  row = s32[] remainder(i, four)
  zero = s32[] constant(0)
  picked = f32[{n},1,1]{{2,1,0}} dynamic-slice(x, zero, row, zero), dynamic_slice_sizes={{{n},1,1}}
  ROOT r = {state} tuple(next, am, x, picked)""", state))
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((n, 4, 4)) + 4 * np.eye(4)).astype(np.float32)
    inputs = [np.asarray(0, np.int32), a, rng.standard_normal((n, 4, 1)).astype(np.float32),
              np.zeros((n, 1, 1), np.float32)]
    assert_equal_to_the_library(module, inputs, lanes=4)


def test_matrices_whose_rows_are_the_lanes_are_refused() -> None:
    """A solve with the lanes along the matrix's rows mixes lanes: refused with the rule and
    the instruction."""
    state = "(s32[], f32[8,8]{1,0}, f32[8,2]{1,0})"
    module = parse_module(loop_text("""
  am = f32[8,8]{1,0} get-tuple-element(p), index=1
  bm = f32[8,2]{1,0} get-tuple-element(p), index=2
  x = f32[8,2]{1,0} triangular-solve(am, bm), """ + LOWER_LEFT + """
  ROOT r = (s32[], f32[8,8]{1,0}, f32[8,2]{1,0}) tuple(next, am, x)""", state))
    plan = pl.plan_parallel_loop(the_loop(module))
    assert isinstance(plan, Refusal)
    assert plan.rule == "whole-loop-cross-lane-access"
    assert "%x" in plan.message


def test_a_large_factorisation_stays_a_library_call() -> None:
    """Above the work limit (here a 24x24 Cholesky) lane code does not unroll it: the loop is
    refused as opaque, naming the instruction."""
    state = "(s32[], f32[4,24,24]{2,1,0})"
    module = parse_module(loop_text("""
  m = f32[4,24,24]{2,1,0} get-tuple-element(p), index=1
  l = f32[4,24,24]{2,1,0} cholesky(m), lower=true
  ROOT r = (s32[], f32[4,24,24]{2,1,0}) tuple(next, l)""", state))
    plan = pl.plan_parallel_loop(the_loop(module), max_state_elements_per_lane=1000)
    assert isinstance(plan, Refusal)
    assert plan.rule == OPAQUE_OP and "%l" in plan.message


def lu_module(target: str, n: int = N, rows: int = 4, columns: int = 4) -> Module:
    """getrf (LAPACK's or cuSOLVER's call) of the per-lane matrix and the permutation of its
    pivots, kept as loop state; the matrix's first column grows by 1 each step, so a lane whose
    first column starts at zero meets a zero pivot (info) in the first step only."""
    k = min(rows, columns)
    mat = f"f32[{n},{rows},{columns}]{{2,1,0}}"
    column_major = f"f32[{n},{rows},{columns}]{{1,2,0}}"
    state = f"(s32[], {mat}, {mat}, s32[{n},{k}]{{1,0}}, s32[{n}]{{0}}, s32[{n},{rows}]{{1,0}})"
    return parse_module(loop_text(f"""
  m = {mat} get-tuple-element(p), index=1
{ffi_call("call", f"({column_major}, s32[{n},{k}]{{1,0}}, s32[{n}]{{0}})", "m", target,
          column_major)}
  lu = {mat} get-tuple-element(call), index=0
  pivots = s32[{n},{k}]{{1,0}} get-tuple-element(call), index=1
  info = s32[{n}]{{0}} get-tuple-element(call), index=2
  onei = s32[] constant(1)
  ones = s32[{n},{k}]{{1,0}} broadcast(onei), dimensions={{}}
  zero_based = s32[{n},{k}]{{1,0}} subtract(pivots, ones)
{ffi_call("perm", f"s32[{n},{rows}]{{1,0}}", "zero_based", "cu_lu_pivots_to_permutation",
          f"s32[{n},{k}]{{1,0}}", aliased=False)}
  cc = s32[{rows},{columns}]{{1,0}} iota(), iota_dimension=1
  zeroi = s32[] constant(0)
  zerois = s32[{rows},{columns}]{{1,0}} broadcast(zeroi), dimensions={{}}
  first = pred[{rows},{columns}]{{1,0}} compare(cc, zerois), direction=EQ
  onef = f32[] constant(1)
  zerof = f32[] constant(0)
  onefs = f32[{rows},{columns}]{{1,0}} broadcast(onef), dimensions={{}}
  zerofs = f32[{rows},{columns}]{{1,0}} broadcast(zerof), dimensions={{}}
  column = f32[{rows},{columns}]{{1,0}} select(first, onefs, zerofs)
  columns = {mat} broadcast(column), dimensions={{1,2}}
  mnew = {mat} add(m, columns)
  ROOT r = {state} tuple(next, mnew, lu, pivots, info, perm)""", state))


def lu_inputs(rows: int = 4, columns: int = 4, n: int = N) -> list[np.ndarray]:
    rng = np.random.default_rng(13)
    m = rng.standard_normal((n, rows, columns)).astype(np.float32)
    m[3, :, 0] = 0.0  # a zero column: a zero pivot in the first step (info 1)
    m[4, 1, 2] = np.nan
    k = min(rows, columns)
    return [np.asarray(0, np.int32), m, np.zeros_like(m), np.zeros((n, k), np.int32),
            np.zeros(n, np.int32), np.zeros((n, rows), np.int32)]


@pytest.mark.parametrize("target", ["lapack_sgetrf_ffi", "cusolver_getrf_ffi"])
def test_lu_with_pivots_and_their_permutation_in_lane_code(target: str) -> None:
    module = lu_module(target)
    inputs = lu_inputs()
    inputs[0] = np.asarray(4, np.int32)  # the last step only: lane 3's column is still zero
    outputs = assert_equal_to_the_library(module, inputs)
    _, _, _, pivots, info, perm = outputs
    assert info[3] == 1 and info[0] == 0
    assert (np.sort(perm, axis=1) == np.arange(4)).all()
    assert (pivots >= 1).all() and (pivots <= 4).all()


@pytest.mark.parametrize("rows,columns", [(5, 3), (3, 5)])
def test_lu_of_rectangular_matrices_in_lane_code(rows: int, columns: int) -> None:
    module = lu_module("lapack_sgetrf_ffi", rows=rows, columns=columns)
    assert_equal_to_the_library(module, lu_inputs(rows, columns))
