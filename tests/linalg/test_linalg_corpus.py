"""The linear-algebra corpus (tests/data/linalg/): JAX programs using jnp.linalg and
jax.scipy.linalg, in JAX's CPU lowering (LAPACK custom calls) and GPU lowering (cuSOLVER
calls and `triangular-solve`) and, where it has no custom calls, TPU lowering (`cholesky`,
`triangular-solve`), load, verify, print back, and run equal to JAX on the
interpreter and compiled under every strategy. `rollout_rigid_body` is a 25-step rollout
that factorises and solves every body's mass matrix each step.

Tolerances follow from the condition number stored with each program: a backward-stable
routine's relative error is a small multiple of eps * cond. Eigenvectors and singular vectors
are compared up to the sign of each vector, and the columns of a full u beyond min(m, n) (any
orthonormal completion is right) through orthogonality only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.ir.verifier import verify
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.native.executable import SharedObjectExecutable as Executable

from tests.conftest import compiled_once

DATA = Path(__file__).parent.parent / "data" / "linalg"
STEMS = sorted(p.name[: -len(".npz")] for p in DATA.glob("*.npz"))
FORMS = ("cpu", "gpu")
# (stem, form) of every stored lowering: the TPU lowering of the programs it writes with the
# `cholesky` and `triangular-solve` opcodes only.
CASES = [(stem, form) for stem in STEMS for form in (*FORMS, "tpu")
         if (DATA / f"{stem}.{form}.hlo").exists()]
STRATEGIES = ("none", "xla", "priority", "max")
DEFAULT_STRATEGIES = ("xla", "max")
_BUILT: dict[tuple[str, ...], Executable] = {}


def load(stem: str, form: str) -> tuple[Module, list[np.ndarray], list[np.ndarray], float]:
    path = DATA / f"{stem}.{form}.hlo"
    module = parse_module(path.read_text(), str(path))
    data = np.load(DATA / f"{stem}.npz")
    count = sum(k.startswith("arg") for k in data.files)
    outputs = [data[f"out{i}"] for i in range(sum(k.startswith("out") for k in data.files))]
    return module, [data[f"arg{i}"] for i in range(count)], outputs, float(data["cond"])


def _align_columns(got: np.ndarray, want: np.ndarray, count: int) -> np.ndarray:
    """`got` with each of its first `count` columns negated where that matches `want` better."""
    dots = np.einsum("...ij,...ij->...j", got[..., :count], want[..., :count])
    signs = np.where(dots < 0, -1.0, 1.0)
    aligned = got.astype(np.float64).copy()
    aligned[..., :count] *= signs[..., None, :]
    return aligned


def _close(got: np.ndarray, want: np.ndarray, tol: float, where: str) -> None:
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"{where}: NaNs differ"
    scale = max(1.0, float(np.nanmax(np.abs(want), initial=0.0)))
    error = float(np.nanmax(np.abs(got - want), initial=0.0)) / scale
    assert error <= tol, f"{where}: error {error:.3g} above {tol:.3g}"


def _orthonormal_columns(q: np.ndarray, tol: float, where: str) -> None:
    gram = np.swapaxes(q, -1, -2).astype(np.float64) @ q.astype(np.float64)
    _close(gram, np.broadcast_to(np.eye(q.shape[-1]), gram.shape), tol, where)


def assert_equal_to_jax(stem: str, actual: list[np.ndarray], expected: list[np.ndarray],
                        cond: float, where: str) -> None:
    assert len(actual) == len(expected), f"{where}: {len(actual)} outputs"
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype, f"{where}: {a.dtype}{a.shape}"
    eps = float(np.finfo(expected[0].dtype).eps)
    tol = 64 * eps * max(cond, 1.0)
    name = stem.split(".")[0]
    if name == "eigh":
        w, v = actual
        _close(w, expected[0], tol, f"{where} eigenvalues")
        n = v.shape[-1]
        _close(_align_columns(v, expected[1], n), expected[1], 8 * tol, f"{where} eigenvectors")
        return
    if name.startswith("svd"):
        u, s, vt = actual
        k = s.shape[-1]
        _close(s, expected[1], tol, f"{where} singular values")
        _close(_align_columns(u, expected[0], k)[..., :k], expected[0][..., :k], 8 * tol,
               f"{where} u")
        vt_t = np.swapaxes(vt, -1, -2)
        _close(_align_columns(vt_t, np.swapaxes(expected[2], -1, -2), k)[..., :k],
               np.swapaxes(expected[2], -1, -2)[..., :k], 8 * tol, f"{where} v")
        _orthonormal_columns(u, 8 * tol, f"{where} u orthonormal")
        _orthonormal_columns(vt_t, 8 * tol, f"{where} v orthonormal")
        return
    if name.startswith("rollout_"):
        # As the rollout corpus compares: 25 steps of dynamics amplify rounding.
        for i, (a, e) in enumerate(zip(actual, expected)):
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5, err_msg=f"{where} out{i}")
        return
    for i, (a, e) in enumerate(zip(actual, expected)):
        _close(a, e, tol, f"{where} out{i}")


def test_corpus_covers_the_issues_programs() -> None:
    names = {stem.split(".")[0] for stem in STEMS}
    assert names >= {"cholesky", "solve", "inv", "qr", "eigh", "svd", "cho_solve",
                     "solve_triangular_lower", "solve_triangular_upper_trans",
                     "rollout_rigid_body"}
    for stem in STEMS:
        for form in FORMS:
            assert (DATA / f"{stem}.{form}.hlo").exists()
    assert {stem.split(".", 1)[1] for stem in STEMS} == {
        "f32.one", "f32.batch", "f64.one", "f64.batch"}


def test_cpu_lowering_calls_lapack_and_gpu_lowering_cusolver() -> None:
    cpu = (DATA / "cholesky.f32.batch.cpu.hlo").read_text()
    gpu = (DATA / "cholesky.f32.batch.gpu.hlo").read_text()
    assert 'custom_call_target="lapack_spotrf_ffi"' in cpu
    assert 'custom_call_target="cusolver_potrf_ffi"' in gpu
    assert " triangular-solve(" in (DATA / "solve.f64.one.gpu.hlo").read_text()
    tpu = (DATA / "cho_solve.f64.batch.tpu.hlo").read_text()
    assert " cholesky(" in tpu and " triangular-solve(" in tpu and "custom-call" not in tpu
    assert 'custom_call_target="lapack_dtrsm_ffi"' in (DATA / "solve.f64.one.cpu.hlo").read_text()


@pytest.mark.parametrize(("stem", "form"), CASES)
def test_loads_verifies_and_prints_back(stem: str, form: str) -> None:
    module, _, _, _ = load(stem, form)
    verify(module)
    text = module_text(module)
    assert module_text(parse_module(text)) == text


@pytest.mark.parametrize(("stem", "form"), CASES)
def test_interpreter_matches_jax(stem: str, form: str) -> None:
    module, inputs, expected, cond = load(stem, form)
    actual = flatten_value(evaluate(module, inputs))
    assert_equal_to_jax(stem, actual, expected, cond, f"{stem}.{form} (interpreter)")


def test_indefinite_cholesky_is_nan_only_where_jax_says() -> None:
    _, _, expected, _ = load("cholesky_indefinite.f32.batch", "cpu")
    # JAX keeps the upper triangle zero (tril after the call): NaN fills the lower one.
    nan_matrices = np.isnan(np.tril(expected[0])).sum(axis=(-1, -2)) == 10
    assert nan_matrices[0] and not nan_matrices[1:].any()


def _prepare(stem: str, form: str, strategy: str) -> Module:
    from hlofuse.fusion.strategies import run_strategy

    return run_strategy(load(stem, form)[0], strategy, debug=False).module


def _executable(request: pytest.FixtureRequest, key: tuple[str, str, str]) -> Executable:
    executable: Executable = compiled_once(request, _BUILT, key,
                                           ("stem", "form", "strategy"), _prepare)
    return executable


def _in_default_tier(stem: str, form: str, strategy: str) -> bool:
    """`make test` compiles each program's f32 batched case under max (and its CPU lowering
    under xla too) and its f64 single-matrix CPU case under max: every custom call and
    opcode in both precisions, at a quarter of the compile time. -m slow runs every case."""
    if stem.endswith(".f32.batch"):
        return strategy == "max" or (strategy == "xla" and form == "cpu")
    if stem.endswith(".f64.one"):
        return strategy == "max" and form == "cpu"
    return False


def _compiled_cases() -> list[object]:
    cases: list[object] = []
    for stem, form in CASES:
        for strategy in STRATEGIES:
            default = strategy in DEFAULT_STRATEGIES and _in_default_tier(stem, form, strategy)
            marks = [pytest.mark.thorough if default else pytest.mark.slow]
            cases.append(pytest.param(stem, form, strategy, marks=marks,
                                      id=f"{stem}.{form}-{strategy}"))
    return cases


@pytest.mark.needs_cc
@pytest.mark.parametrize(("stem", "form", "strategy"), _compiled_cases())
def test_compiled_matches_jax(request: pytest.FixtureRequest, stem: str, form: str,
                              strategy: str) -> None:
    _, inputs, expected, cond = load(stem, form)
    compiled = _executable(request, (stem, form, strategy))
    actual = flatten_value(compiled(*inputs))
    assert_equal_to_jax(stem, actual, expected, cond, f"{stem}.{form} ({strategy})")
