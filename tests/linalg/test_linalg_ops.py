"""`cholesky`, `triangular-solve` and the LAPACK/cuSOLVER custom calls end to end: text round
trip in XLA's spelling, shape errors with line and column, the reference routines against
NumPy's linear algebra, compiled C against the interpreter, fusion as XLA classifies them,
and clear refusals."""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest

from hlofuse.cli.errors import UsageError, load_module
from hlofuse.ir.linalg import LINALG_CALLS, Routine, parse_backend_config
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import HloParseError, parse_module
from hlofuse.ir.printer import module_text
from hlofuse.ir.verifier import verify
from hlofuse.reference import linalg_numerics as ref
from hlofuse.reference.interpreter import InterpreterError, evaluate, flatten_value
from hlofuse.runtime.target import CodegenError
from hlofuse.targets.c import compile_cpu

RNG: np.random.Generator  # every test's own: _draws_of_this_test_alone sets it


@pytest.fixture(autouse=True)
def _draws_of_this_test_alone(request: pytest.FixtureRequest) -> None:
    """Each test draws from a seed of its own name: its matrices do not depend on which tests
    a worker ran before it (pytest-xdist orders them differently run to run)."""
    global RNG
    RNG = np.random.default_rng(zlib.crc32(request.node.name.encode()))

# Ops this file checks by hand (read by the interpreter's completeness test in tests/ir).
COVERED_HERE = frozenset({Op.CHOLESKY, Op.TRIANGULAR_SOLVE})
TRANSPOSES = ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT")


def _solve_text(t: str, batch: tuple[int, ...], n: int, r: int, left: bool, lower: bool,
                transpose: str, unit: bool) -> str:
    a = ",".join(map(str, (*batch, n, n)))
    b_dims = (*batch, n, r) if left else (*batch, r, n)
    b = ",".join(map(str, b_dims))
    attrs = []
    if left:
        attrs.append("left_side=true")
    if lower:
        attrs.append("lower=true")
    if unit:
        attrs.append("unit_diagonal=true")
    attrs.append(f"transpose_a={transpose}")
    return (f"HloModule solve\n\nENTRY main {{\n  a = {t}[{a}] parameter(0)\n"
            f"  b = {t}[{b}] parameter(1)\n"
            f"  ROOT x = {t}[{b}] triangular-solve(a, b), {', '.join(attrs)}\n}}\n")


def _cholesky_text(t: str, dims: tuple[int, ...], lower: bool) -> str:
    shape = ",".join(map(str, dims))
    attr = ", lower=true" if lower else ""
    return (f"HloModule chol\n\nENTRY main {{\n  a = {t}[{shape}] parameter(0)\n"
            f"  ROOT l = {t}[{shape}] cholesky(a){attr}\n}}\n")


def _spd(batch: tuple[int, ...], n: int, dtype: type) -> np.ndarray:
    x = RNG.standard_normal((*batch, n, n))
    return (x @ np.swapaxes(x, -1, -2) + n * np.eye(n)).astype(dtype)


def _triangular(batch: tuple[int, ...], n: int, dtype: type) -> np.ndarray:
    return (RNG.standard_normal((*batch, n, n)) + 3 * n * np.eye(n)).astype(dtype)


def _numpy_solve(a: np.ndarray, b: np.ndarray, left: bool, lower: bool, transpose: str,
                 unit: bool) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    tri = np.tril(a64) if lower else np.triu(a64)
    if unit:
        n = a.shape[-1]
        tri[..., np.arange(n), np.arange(n)] = 1.0
    op = np.swapaxes(tri, -1, -2) if transpose != "NO_TRANSPOSE" else tri
    if left:
        return np.linalg.solve(op, b64)
    return np.swapaxes(np.linalg.solve(np.swapaxes(op, -1, -2), np.swapaxes(b64, -1, -2)),
                       -1, -2)


def test_hand_checked_values() -> None:
    chol = parse_module(_cholesky_text("f64", (2, 2), True))
    # [[4, 2], [2, 5]] = L L^T with L = [[2, 0], [1, 2]].
    np.testing.assert_array_equal(evaluate(chol, [np.array([[4.0, 2.0], [2.0, 5.0]])]),
                                  [[2.0, 0.0], [1.0, 2.0]])
    upper = parse_module(_cholesky_text("f64", (2, 2), False))
    np.testing.assert_array_equal(evaluate(upper, [np.array([[4.0, 2.0], [2.0, 5.0]])]),
                                  [[2.0, 1.0], [0.0, 2.0]])
    solve = parse_module(_solve_text("f64", (), 2, 1, True, True, "NO_TRANSPOSE", False))
    # [[2, 0], [1, 1]] x = [2, 3]: x = [1, 2]; the upper entry 9 is never read.
    a = np.array([[2.0, 9.0], [1.0, 1.0]])
    np.testing.assert_array_equal(evaluate(solve, [a, np.array([[2.0], [3.0]])]),
                                  [[1.0], [2.0]])
    right = parse_module(_solve_text("f64", (), 2, 1, False, True, "TRANSPOSE", True))
    # x A^T = b with A = [[1, 0], [1, 1]] (unit diagonal): [x0, x0 + x1] = [5, 3].
    np.testing.assert_array_equal(evaluate(right, [a, np.array([[5.0, 3.0]])]), [[5.0, -2.0]])


SOLVE_CASES = list(itertools.product((True, False), (True, False), TRANSPOSES, (False, True)))


@pytest.mark.parametrize(("left", "lower", "transpose", "unit"), SOLVE_CASES)
def test_triangular_solve_prints_back_and_matches_numpy(left: bool, lower: bool,
                                                         transpose: str, unit: bool) -> None:
    for t, dtype, tol in (("f32", np.float32, 2e-5), ("f64", np.float64, 1e-12)):
        text = _solve_text(t, (2, 3), 5, 2, left, lower, transpose, unit)
        module = parse_module(text)
        verify(module)
        assert module_text(parse_module(module_text(module))) == module_text(module)
        line = module_text(module).splitlines()[-2].strip()
        assert line.startswith("ROOT x = ") and f"transpose_a={transpose}" in line
        assert ("left_side=true" in line) == left and ("lower=true" in line) == lower
        a = _triangular((2, 3), 5, dtype)
        b = RNG.standard_normal((2, 3, 5, 2) if left else (2, 3, 2, 5)).astype(dtype)
        got = evaluate(module, [a, b])
        assert isinstance(got, np.ndarray) and got.dtype == dtype
        np.testing.assert_allclose(got, _numpy_solve(a, b, left, lower, transpose, unit),
                                   rtol=tol, atol=tol)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize(("t", "dtype"), [("f32", np.float32), ("f64", np.float64)])
def test_cholesky_matches_numpy_and_zeroes_the_other_triangle(lower: bool, t: str,
                                                             dtype: type) -> None:
    module = parse_module(_cholesky_text(t, (3, 2, 4, 4), lower))
    assert ("lower=true" in module_text(module)) == lower
    a = _spd((3, 2), 4, dtype)
    got = evaluate(module, [a])
    assert isinstance(got, np.ndarray)
    want = np.linalg.cholesky(a.astype(np.float64))
    if not lower:
        want = np.swapaxes(want, -1, -2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_cholesky_of_an_indefinite_matrix_is_nan_as_in_xla() -> None:
    module = parse_module(_cholesky_text("f32", (3, 3, 3), True))
    a = _spd((3,), 3, np.float32)
    a[1, 2, 2] = -5.0  # the last pivot negative: only this matrix fails
    got = evaluate(module, [a])
    assert isinstance(got, np.ndarray)
    assert np.isnan(got[1]).all()
    assert np.isfinite(got[0]).all() and np.isfinite(got[2]).all()


@pytest.mark.parametrize(("text", "message"), [
    (_cholesky_text("f32", (3, 4), True), "cholesky operand must be batched square matrices"),
    (_cholesky_text("s32", (4, 4), True), "must be floating point"),
    (_cholesky_text("f32", (4,), True), "rank >= 2"),
    (_solve_text("f32", (2,), 4, 3, True, True, "NO_TRANSPOSE", False).replace(
        "b = f32[2,4,3]", "b = f32[2,5,3]").replace("x = f32[2,4,3]", "x = f32[2,5,3]"),
     "must have 4 rows"),
    (_solve_text("f32", (2,), 4, 3, True, True, "NO_TRANSPOSE", False).replace(
        "a = f32[2,4,4]", "a = f32[3,4,4]"), "differ in their batch dimensions"),
    (_solve_text("f32", (), 4, 3, True, True, "NO_TRANSPOSE", False).replace(
        "transpose_a=NO_TRANSPOSE", "transpose_a=SIDEWAYS"), "bad value 'SIDEWAYS'"),
])
def test_bad_shapes_are_errors_with_line_and_column(text: str, message: str) -> None:
    with pytest.raises(HloParseError) as caught:
        parse_module(text, "bad.hlo")
    assert message in str(caught.value)
    assert str(caught.value).startswith("bad.hlo:")
    assert caught.value.line >= 3


# --- custom calls ---------------------------------------------------------------------------

_POTRF = """HloModule potrf

ENTRY main {
  a = f32[2,3,3]{1,2,0} parameter(0)
  c = (f32[2,3,3]{1,2,0}, s32[2]{0}) custom-call(a), custom_call_target="lapack_spotrf_ffi", \
operand_layout_constraints={f32[2,3,3]{1,2,0}}, api_version=API_VERSION_TYPED_FFI, \
backend_config={uplo = 76 : ui8}
  ROOT r = f32[2,3,3]{1,2,0} get-tuple-element(c), index=0
}
"""


def test_the_table_names_every_lapack_call_jax_emits() -> None:
    for letter in "sd":
        for routine in ("potrf", "trsm", "getrf", "geqrf", "orgqr", "syevd", "gesdd", "gesvd"):
            assert f"lapack_{letter}{routine}_ffi" in LINALG_CALLS
    assert LINALG_CALLS["cusolver_gesvdj_ffi"].routine is Routine.GESVDJ
    assert parse_backend_config("{diag = 85 : ui8, lower = true}") == {"diag": 85,
                                                                       "lower": True}


def test_potrf_keeps_the_other_triangle_and_reports_info() -> None:
    module = parse_module(_POTRF.replace("ROOT r = f32[2,3,3]{1,2,0} get-tuple-element(c), "
                                         "index=0", "ROOT r = (f32[2,3,3]{1,2,0}, s32[2]{0}) "
                                         "tuple(c)").replace("  c = ", "  ROOT c = ")
                          .replace("  ROOT r = (f32[2,3,3]{1,2,0}, s32[2]{0}) tuple(c)\n", ""))
    a = _spd((2,), 3, np.float32)
    a[1, 1, 1] = -1.0
    factor, info = flatten_value(evaluate(module, [a]))
    np.testing.assert_array_equal(info, [0, 2])
    # Entries near zero differ by float32 rounding of the larger ones: an absolute bound too.
    np.testing.assert_allclose(np.tril(factor[0]), np.linalg.cholesky(a[0].astype(np.float64)),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.triu(factor[0], 1), np.triu(a[0], 1))


@pytest.mark.parametrize(("old", "new", "message"), [
    ("uplo = 76", "uplo = 88", "needs backend_config uplo = 76 ('L') or 85 ('U'), got 88"),
    ("s32[2]{0}) custom-call", "s32[3]{0}) custom-call", "info (result 1) must be s32[2]"),
    ("custom-call(a)", "custom-call(a, a)", "takes 1 operand(s), got 2"),
])
def test_malformed_custom_calls_are_errors_with_the_line(tmp_path: object, old: str, new: str,
                                                          message: str) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    path = tmp_path / "bad.hlo"
    path.write_text(_POTRF.replace(old, new))
    with pytest.raises(UsageError) as caught:
        load_module(str(path))
    assert message in str(caught.value)
    assert f"{path}:5:" in str(caught.value)


def test_an_unknown_custom_call_target_is_refused_by_name() -> None:
    module = parse_module(_POTRF.replace("lapack_spotrf_ffi", "lapack_zhetrd_ffi"))
    verify(module)
    with pytest.raises(InterpreterError, match="lapack_zhetrd_ffi"):
        evaluate(module, [_spd((2,), 3, np.float32)])


@pytest.mark.needs_cc
def test_an_unknown_custom_call_target_is_refused_by_the_compiler() -> None:
    module = parse_module(_POTRF.replace("lapack_spotrf_ffi", "lapack_zhetrd_ffi"))
    with pytest.raises(CodegenError, match="lapack_zhetrd_ffi"):
        compile_cpu(module)


# --- reference routines against NumPy ------------------------------------------------------


def test_getrf_reconstructs_with_its_pivots_and_flags_singular_matrices() -> None:
    a = RNG.standard_normal((4, 5, 5))
    a[3, :, 2] = 0.0  # a zero column: U[2, 2] is exactly zero
    lu, pivots, info = ref.getrf(a)
    np.testing.assert_array_equal(info, [0, 0, 0, 3])
    for b in range(3):
        perm = ref.pivots_to_permutation(pivots[b:b + 1] - 1, 5)[0]
        lower = np.tril(lu[b], -1) + np.eye(5)
        np.testing.assert_allclose(lower @ np.triu(lu[b]), a[b][perm], atol=1e-12)


@pytest.mark.parametrize("shape", [(3, 6, 4), (2, 4, 4)])
def test_geqrf_and_orgqr_give_q_and_r(shape: tuple[int, int, int]) -> None:
    a = RNG.standard_normal(shape)
    r, tau = ref.geqrf(a)
    q = ref.orgqr(r, tau)
    np.testing.assert_allclose(q @ np.triu(r[:, :shape[2], :]), a, atol=1e-12)
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(
        np.eye(shape[2]), (shape[0], shape[2], shape[2])), atol=1e-12)


def test_syevd_and_svd_match_numpy_up_to_sign() -> None:
    a = _spd((3,), 4, np.float64)
    v, w, info = ref.syevd(a, True, True)
    np.testing.assert_allclose(w, np.linalg.eigvalsh(a), rtol=1e-12)
    np.testing.assert_allclose(v @ (w[..., None] * np.swapaxes(v, -1, -2)), a, atol=1e-10)
    s, u, vt, info = ref.svd(RNG.standard_normal((2, 5, 3)), True)
    assert u.shape == (2, 5, 5) and vt.shape == (2, 3, 3) and not info.any()


# --- compiled C against the interpreter -----------------------------------------------------


def _many_solves_module(t: str) -> str:
    """Every triangular-solve attribute combination and both Cholesky triangles, one module."""
    lines = [f"  a = {t}[4,5,5] parameter(0)", f"  b = {t}[4,5,3] parameter(1)",
             f"  c = {t}[4,3,5] parameter(2)", f"  s = {t}[4,5,5] parameter(3)"]
    roots = []
    for i, (left, lower, transpose, unit) in enumerate(SOLVE_CASES):
        attrs = [*(["left_side=true"] if left else []), *(["lower=true"] if lower else []),
                 *(["unit_diagonal=true"] if unit else []), f"transpose_a={transpose}"]
        shape = "[4,5,3]" if left else "[4,3,5]"
        lines.append(f"  x{i} = {t}{shape} triangular-solve(a, {'b' if left else 'c'}), "
                     + ", ".join(attrs))
        roots.append(f"x{i}")
    lines.append(f"  l0 = {t}[4,5,5] cholesky(s), lower=true")
    lines.append(f"  l1 = {t}[4,5,5] cholesky(s)")
    lines.append(f"  l2 = {t}[4,5,5] cholesky(a), lower=true")  # not positive definite
    roots += ["l0", "l1", "l2"]
    shapes = ", ".join(f"{t}[4,5,3]" if i < len(SOLVE_CASES) and SOLVE_CASES[i][0]
                       else f"{t}[4,3,5]" if i < len(SOLVE_CASES) else f"{t}[4,5,5]"
                       for i in range(len(roots)))
    lines.append(f"  ROOT out = ({shapes}) tuple({', '.join(roots)})")
    return "HloModule many\n\nENTRY main {\n" + "\n".join(lines) + "\n}\n"


@pytest.mark.needs_cc
@pytest.mark.parametrize(("t", "dtype", "tol"), [("f32", np.float32, 1e-4),
                                                 ("f64", np.float64, 1e-11)])
def test_compiled_opcodes_match_the_interpreter(t: str, dtype: type, tol: float) -> None:
    module = parse_module(_many_solves_module(t))
    a = _triangular((4,), 5, dtype)
    a[0] = -np.abs(a[0])  # negative diagonal: its Cholesky is NaN, the solves are fine
    inputs = [a, RNG.standard_normal((4, 5, 3)).astype(dtype),
              RNG.standard_normal((4, 3, 5)).astype(dtype), _spd((4,), 5, dtype)]
    expected = flatten_value(evaluate(module, inputs))
    actual = flatten_value(compile_cpu(module)(*inputs))
    assert np.isnan(expected[-1][0]).all()
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_cholesky_and_triangular_solve_are_never_fused() -> None:
    from hlofuse.fusion.strategies import run_strategy

    text = """HloModule m

ENTRY main {
  a = f32[8,4,4] parameter(0)
  b = f32[8,4,2] parameter(1)
  two = f32[] constant(2)
  twos = f32[8,4,4] broadcast(two), dimensions={}
  scaled = f32[8,4,4] multiply(a, twos)
  l = f32[8,4,4] cholesky(scaled), lower=true
  x = f32[8,4,2] triangular-solve(l, b), left_side=true, lower=true, transpose_a=NO_TRANSPOSE
  ROOT y = f32[8,4,2] negate(x)
}
"""
    for strategy in ("xla", "priority", "max"):
        fused = run_strategy(parse_module(text), strategy, debug=False)
        ops = {i.op.text for i in fused.module.entry.instructions}
        assert {"cholesky", "triangular-solve"} <= ops, strategy
        refused = [r for r in fused.decisions.records
                   if r.verdict.value == "no" and r.producer_op == "cholesky"]
        assert refused or strategy != "xla"


_BAD_NUMBERS = """HloModule bad_numbers

ENTRY main {
  a = f32[3,4,4] parameter(0)
  p = (f32[3,4,4]{1,2,0}, s32[3]{0}) custom-call(a), custom_call_target="lapack_spotrf_ffi", \
backend_config={uplo = 85 : ui8}
  lu = (f32[3,4,4]{1,2,0}, s32[3,4]{1,0}, s32[3]{0}) custom-call(a), \
custom_call_target="lapack_sgetrf_ffi", backend_config={}
  e = (f32[3,4,4]{1,2,0}, f32[3,4]{1,0}, s32[3]{0}) custom-call(a), \
custom_call_target="lapack_ssyevd_ffi", backend_config={mode = 86 : ui8, uplo = 76 : ui8}
  s = (f32[3,4,4]{1,2,0}, f32[3,4]{1,0}, f32[3,4,4]{1,2,0}, f32[3,4,4]{1,2,0}, s32[3]{0}) \
custom-call(a), custom_call_target="lapack_sgesdd_ffi", backend_config={mode = 65 : ui8}
  p1 = s32[3] get-tuple-element(p), index=1
  lu1 = s32[3,4] get-tuple-element(lu), index=1
  lu2 = s32[3] get-tuple-element(lu), index=2
  e1 = f32[3,4] get-tuple-element(e), index=1
  e2 = s32[3] get-tuple-element(e), index=2
  s1 = f32[3,4] get-tuple-element(s), index=1
  s4 = s32[3] get-tuple-element(s), index=4
  ROOT out = (s32[3], s32[3,4], s32[3], f32[3,4], s32[3], f32[3,4], s32[3]) \
tuple(p1, lu1, lu2, e1, e2, s1, s4)
}
"""


def _bad_inputs() -> np.ndarray:
    a = _spd((3,), 4, np.float32)
    a[0, 2, :] = 0.0  # singular, and potrf fails at pivot 3
    a[0, :, 2] = 0.0
    a[1, 1, 3] = a[1, 3, 1] = np.nan  # not finite: eigen- and singular values NaN, info 1
    return a


def test_bad_numbers_give_lapacks_info_not_a_crash() -> None:
    p_info, pivots, lu_info, w, e_info, s, s_info = flatten_value(
        evaluate(parse_module(_BAD_NUMBERS), [_bad_inputs()]))
    assert p_info[0] == 3 and p_info[2] == 0
    assert lu_info[0] == 3 and lu_info[2] == 0 and pivots.min() >= 1
    np.testing.assert_array_equal(e_info, [0, 1, 0])
    np.testing.assert_array_equal(s_info, [0, 1, 0])
    assert np.isnan(w[1]).all() and np.isnan(s[1]).all() and np.isfinite(w[2]).all()


@pytest.mark.needs_cc
def test_bad_numbers_compile_to_the_interpreters_results() -> None:
    module = parse_module(_BAD_NUMBERS)
    inputs = [_bad_inputs()]
    expected = flatten_value(evaluate(module, inputs))
    actual = flatten_value(compile_cpu(module)(*inputs))
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_cuda_backend_refuses_linear_algebra_by_name() -> None:
    from hlofuse.targets.cuda.compile import generate_cuda

    module = parse_module(_POTRF)
    with pytest.raises(CodegenError, match="lapack_spotrf_ffi has no CUDA routine"):
        generate_cuda(module)


def test_empty_batches_evaluate() -> None:
    module = parse_module(_cholesky_text("f32", (0, 3, 3), True))
    got = evaluate(module, [np.zeros((0, 3, 3), np.float32)])
    assert isinstance(got, np.ndarray) and got.shape == (0, 3, 3)


def test_fusion_names_cholesky_a_library_call() -> None:
    from hlofuse.fusion.strategies import run_strategy

    text = _cholesky_text("f32", (8, 3, 3), True).replace(
        "  ROOT l = f32[8,3,3] cholesky(a), lower=true",
        "  l = f32[8,3,3] cholesky(a), lower=true\n  ROOT y = f32[8,3,3] negate(l)")
    fused = run_strategy(parse_module(text), "xla", debug=False)
    refusals = [r for r in fused.decisions.records
                if r.verdict.value == "no" and r.producer_op == "cholesky"]
    assert refusals and refusals[0].rule == "library-call"
    assert "library call (cuSOLVER in XLA)" in refusals[0].message
