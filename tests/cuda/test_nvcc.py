"""The generated CUDA compiles with nvcc for sm_80 and sm_90 (object files only: no GPU here).

A few corpus programs by default; every corpus program and every CartPole variant in the
thorough tier (about two minutes of nvcc on two cores)."""

from __future__ import annotations

import pytest

from hlofuse.envs import cartpole
from hlofuse.studies.cartpole_study import SEQUENCE, is_available
from hlofuse.targets.cuda.compile import compile_check, generate_cuda
from hlofuse.toolchain.compiler import NvccNotFound, _find_nvcc, find_nvcc

from tests.conftest import CORPUS
from tests.cuda.conftest import fused_corpus, needs_nvcc

QUICK = ["layer_norm", "cond", "random_uniform", "dynamic_slice_update", "argmax", "reductions"]


@needs_nvcc
@pytest.mark.parametrize("name", QUICK)
def test_corpus_cuda_compiles(name: str) -> None:
    compile_check(generate_cuda(fused_corpus(name)))


@needs_nvcc
# The full nvcc sweeps take minutes: `pytest -m slow` runs them (make test runs QUICK).
@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in CORPUS if n not in QUICK])
def test_every_corpus_program_cuda_compiles(name: str) -> None:
    compile_check(generate_cuda(fused_corpus(name)))


STEPS = [s for s in SEQUENCE if s.is_default]


@needs_nvcc
@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS, ids=[s.name for s in STEPS])
def test_cartpole_variant_cuda_compiles(step: object) -> None:
    from hlofuse.fusion.strategies import run_strategy
    from hlofuse.studies.cartpole_study import StudyStep

    assert isinstance(step, StudyStep)
    if not is_available(step.strategy):
        pytest.skip(f"strategy {step.strategy} not available")
    module = cartpole.trace(step.variant, 16384, 100, 0)
    compile_check(generate_cuda(run_strategy(module, step.strategy, debug=False).module))


def test_missing_nvcc_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVCC", "/nonexistent/nvcc")
    _find_nvcc.cache_clear()
    with pytest.raises(NvccNotFound, match="needs nvcc"):
        find_nvcc()
    _find_nvcc.cache_clear()


@needs_nvcc
def test_nvcc_version_is_in_the_key() -> None:
    assert "release" in find_nvcc().version
