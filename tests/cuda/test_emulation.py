"""The CUDA backend's source, built as C++ against cuda_emulation.h and run on the CPU, equals
JAX's outputs (corpus) and the reference interpreter (CartPole): kernel indexing, the grid
shares, reductions and the host driver's loops and copies are checked without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse import random
from hlofuse.api import compile_module, jit
from hlofuse.envs import cartpole
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.studies.cartpole_study import SEQUENCE, is_available
from hlofuse.targets.cuda.compile import compile_cuda

from tests.conftest import CORPUS, assert_matches, load_corpus_case
from tests.cuda.conftest import fused_corpus


@pytest.mark.needs_cc
@pytest.mark.parametrize("strategy", ["xla", "none"])
@pytest.mark.parametrize("name", CORPUS)
def test_corpus_emulated_matches_jax(name: str, strategy: str) -> None:
    _, inputs, expected = load_corpus_case(name)
    executable = compile_cuda(fused_corpus(name, strategy), emulate=True)
    assert executable.emulated
    assert_matches(flatten_value(executable(*inputs)), expected, f"{name} (cuda emulated)")
    # A second call reuses the device buffers allocated by the first.
    assert_matches(flatten_value(executable(*inputs)), expected, f"{name} (second call)")


# `all` unrolls the loop body ten times: its emulated build takes half a minute.
STEPS = [pytest.param(s, id=s.name, marks=[pytest.mark.thorough] if s.name == "all" else [])
         for s in SEQUENCE if s.is_default]


@pytest.mark.needs_cc
@pytest.mark.parametrize("step", STEPS)
def test_cartpole_variant_emulated_matches_interpreter(step: object) -> None:
    from hlofuse.studies.cartpole_study import StudyStep

    assert isinstance(step, StudyStep)
    if not is_available(step.strategy):
        pytest.skip(f"strategy {step.strategy} not available")
    n_envs = 16 if step.name == "all" else 64  # `all` unrolls: its emulated build is slow
    module = cartpole.trace(step.variant, n_envs, 30, 0)
    want = flatten_value(evaluate(module, [random.key(0)]))
    got = compile_module(module, step.strategy, "cuda-emulated").run_flat([random.key(0)])
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=0, atol=1e-5)
    assert int(got[1]) == int(want[1])  # episodes finished: exactly
    assert float(got[2]) == pytest.approx(float(want[2]), abs=1e-4)


@pytest.mark.needs_cc
def test_jit_backend_cuda_emulated() -> None:
    def f(x: np.ndarray) -> np.ndarray:
        import hlofuse.numpy as hnp

        return hnp.sum(hnp.exp(x) * 2.0, axis=1)

    x = np.linspace(-1, 1, 4 * 4096, dtype=np.float32).reshape(4, 4096)
    got = jit(f, backend="cuda-emulated")(x)
    np.testing.assert_allclose(got, np.sum(np.exp(x) * 2.0, axis=1), rtol=1e-5)


@pytest.mark.needs_cc
@pytest.mark.parametrize("n_envs", [1000, 4099])
def test_whole_loop_kernel_is_a_grid_and_exact(n_envs: int) -> None:
    """`max`'s whole-loop kernel (one thread per environment, the partial sums combined by
    the last thread to finish: tests/filecheck/codegen-cuda/whole-loop-grid-*.hlo), with N
    not a multiple of the CUDA block, gives the interpreter's results bit for bit."""
    from hlofuse.studies.cartpole_study import known_steps

    step = known_steps()["max"]
    if not is_available(step.strategy):
        pytest.skip("max not available")
    module = cartpole.trace(step.variant, n_envs, 60, 0)
    compiled = compile_module(module, step.strategy, "cuda-emulated")
    want = flatten_value(evaluate(module, [random.key(0)]))
    got = compiled.run_flat([random.key(0)])
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    assert int(got[1]) == int(want[1]) and float(got[2]) == float(want[2])


@pytest.mark.needs_cc
def test_debug_build_checks_every_launch() -> None:
    _, inputs, expected = load_corpus_case("fori_loop")
    # What the debug build adds after each launch: codegen-cuda/full-source-runtime.hlo.
    executable = compile_cuda(fused_corpus("fori_loop"), emulate=True, debug=True)
    assert_matches(flatten_value(executable(*inputs)), expected, "fori_loop (debug)")


@pytest.mark.needs_cc
def test_profile_times_each_launch_with_cuda_events() -> None:
    """The per-kernel profile records a pair of CUDA events around each launch and copy (in
    the emulation, events read a host clock): every kernel of the loop body is counted once
    per trip and run, with a positive time, and the kernels' time fits in the wall time."""
    _, inputs, expected = load_corpus_case("fori_loop")
    executable = compile_cuda(fused_corpus("fori_loop"), emulate=True)
    profile = executable.profile(*inputs, repeat=3)
    called = [r for r in profile.rows if r.calls]
    assert called and profile.runs == 3
    assert all(r.calls % 3 == 0 and r.total_s > 0 for r in called)
    assert max(r.calls for r in called) > 3  # the loop body's kernels: once per trip
    assert 0 < profile.kernel_s <= profile.wall_s
    assert_matches(flatten_value(executable(*inputs)), expected, "fori_loop (after profiling)")
