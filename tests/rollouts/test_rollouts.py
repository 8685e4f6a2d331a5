"""The rollout corpus (tests/data/rollouts/): batched simulations written in plain JAX, in
JAX's CPU and GPU lowerings, load, verify, print back, and run equal to JAX (integers exactly,
floats within rtol 1e-4 over the 30 steps) on the interpreter and compiled under every
strategy (`make test` compiles a rotation of them, `sampled_strategies`; `-m slow` all)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest

from hlofuse.fusion.strategies import FusionResult
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.ir.verifier import verify
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.native.executable import SharedObjectExecutable as Executable

from tests.conftest import compiled_once

ROLLOUT_DIR = Path(__file__).parent.parent / "data" / "rollouts"
NAMES = sorted(p.name.split(".")[0] for p in ROLLOUT_DIR.glob("*.cpu.hlo"))
FORMS = ("cpu", "gpu")
STRATEGIES = ("none", "xla", "priority", "max")
# Rollouts whose programs index with gather/scatter.
USES_GATHER_SCATTER = {"bandit", "catch", "grid_forage", "jacobi_rope", "spring_chain"}
_BUILT: dict[tuple[str, ...], Executable] = {}


def load(name: str, form: str) -> tuple[Module, list[np.ndarray], list[np.ndarray]]:
    path = ROLLOUT_DIR / f"{name}.{form}.hlo"
    module = parse_module(path.read_text(), str(path))
    data = np.load(ROLLOUT_DIR / f"{name}.npz")
    outputs = [data[f"out{i}"] for i in range(sum(k.startswith("out") for k in data.files))]
    return module, [data["arg0"]], outputs


def assert_close_to_jax(actual: list[np.ndarray], expected: list[np.ndarray], where: str) -> None:
    assert len(actual) == len(expected), f"{where}: {len(actual)} outputs, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        a = np.asarray(a)
        assert a.shape == e.shape and a.dtype == e.dtype, \
            f"{where} out{i}: {a.dtype}{list(a.shape)}, expected {e.dtype}{list(e.shape)}"
        if e.dtype.kind == "f":
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5, err_msg=f"{where} out{i}")
        else:
            np.testing.assert_array_equal(a, e, err_msg=f"{where} out{i}")


# Rollouts stepped by a policy network (issue 32): an MLP of two hidden layers of 64 over each
# lane's observation, its weights shared by the lanes.
MLP_POLICY = {"acrobot_mlp", "pendulum_mlp", "mountain_car_mlp", "mountain_car_continuous_mlp"}


def test_corpus_has_the_issues_programs() -> None:
    assert set(NAMES) >= {"acrobot", "pendulum", "mountain_car", "mountain_car_continuous",
                          "grid_forage", "catch", "bandit", "particles", "rigid_body",
                          "spring_chain", "jacobi_rope"}
    assert set(NAMES) >= MLP_POLICY
    for name in NAMES:
        for form in FORMS:
            assert (ROLLOUT_DIR / f"{name}.{form}.hlo").exists()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", NAMES)
def test_uses_gather_or_scatter_exactly_where_listed(name: str, form: str) -> None:
    text = (ROLLOUT_DIR / f"{name}.{form}.hlo").read_text()
    indexing = re.search(r"\s(gather|scatter)\(", text) is not None
    assert indexing == (name in USES_GATHER_SCATTER)


@pytest.mark.thorough
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", NAMES)
def test_loads_verifies_and_prints_back(name: str, form: str) -> None:
    module, _, _ = load(name, form)
    verify(module)
    text = module_text(module)
    assert module_text(parse_module(text)) == text


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", sorted(MLP_POLICY))
def test_mlp_policy_is_three_products_of_all_lanes_with_shared_weights(name: str,
                                                                       form: str) -> None:
    """vmap of the policy makes each layer one dot of every lane's row, [N, in] x [in, out],
    inside the time loop: [N, obs] x [obs, 64], [N, 64] x [64, 64], [N, 64] x [64, actions]."""
    module, _, _ = load(name, form)
    holding = [c for c in module.computations if any(i.op.text == "dot" for i in c.instructions)]
    assert len(holding) == 1  # the policy, called once per step of the time loop
    dots = [i for i in holding[0].instructions if i.op.text == "dot"]
    assert len(dots) == 3
    rows = {d.operands[0].shape.dims[0] for d in dots}
    assert rows == {8}  # N = 8 lanes, every layer over all of them
    assert [d.shape.dims[1] for d in dots][:2] == [64, 64]
    assert all(len(d.operands[1].shape.dims) == 2 for d in dots)  # weights: no lane dim


def test_cpu_lowering_nests_threefry_loops_and_gpu_lowering_does_not() -> None:
    module, _, _ = load("pendulum", "cpu")
    gpu, _, _ = load("pendulum", "gpu")
    loops = sum(1 for i in module.all_instructions() if i.op.text == "while")
    assert loops > 1
    assert sum(1 for i in gpu.all_instructions() if i.op.text == "while") == 1


@pytest.mark.thorough
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", NAMES)
def test_interpreter_matches_jax(name: str, form: str) -> None:
    module, inputs, expected = load(name, form)
    assert_close_to_jax(flatten_value(evaluate(module, inputs)), expected,
                        f"{name}.{form} (interpreter)")


def _prepare(name: str, form: str, strategy: str) -> Module:
    if strategy == "max":
        return fused_under_max(name, form).module
    from hlofuse.fusion.strategies import run_strategy

    return run_strategy(load(name, form)[0], strategy, debug=False).module


@functools.cache
def fused_under_max(name: str, form: str) -> FusionResult:
    """A rollout fused under `max`, shared by its compile (test_compiled_matches_jax) and the
    time-loop check (test_max_runs_...): the two are one xdist group (`max_group`), so under
    `make test` they run in one process and the passes run once."""
    from hlofuse.fusion.strategies import run_strategy

    return run_strategy(load(name, form)[0], "max", debug=False)


def max_group(name: str, form: str) -> pytest.MarkDecorator:
    return pytest.mark.xdist_group(f"rollout_under_max_{name}.{form}")


def _executable(request: pytest.FixtureRequest, key: tuple[str, str, str]) -> Executable:
    executable: Executable = compiled_once(request, _BUILT, key,
                                           ("name", "form", "strategy"), _prepare)
    return executable


# Under none and priority a rollout compiles to hundreds of kernels (tens of seconds each with
# a cold cache): `make test` compiles them for the smallest rollout, in both lowerings.
SMALLEST = "mountain_car"


def sampled_strategies(index: int, form: str) -> tuple[str, ...]:
    """The strategies `make test` compiles the `index`-th rollout's `form` under: xla and
    max alternate over the programs and lowerings (each program gets both, one per
    lowering), none and priority for the smallest rollout; `-m slow` (`make test-all`)
    compiles the whole product."""
    alternating = ("xla", "max")[(index + FORMS.index(form)) % 2]
    return (alternating, "none", "priority") if NAMES[index] == SMALLEST else (alternating,)


def _compiled_cases() -> list[object]:
    cases: list[object] = []
    for index, name in enumerate(NAMES):
        for form in FORMS:
            for strategy in STRATEGIES:
                marks = [] if strategy in sampled_strategies(index, form) else [pytest.mark.slow]
                if strategy == "max":
                    marks.append(max_group(name, form))
                cases.append(pytest.param(name, form, strategy, marks=marks,
                                          id=f"{name}.{form}-{strategy}"))
    return cases


def test_the_sample_covers_every_strategy_program_and_lowering() -> None:
    sampled = {(name, form, strategy) for index, name in enumerate(NAMES) for form in FORMS
               for strategy in sampled_strategies(index, form)}
    assert {s for _, _, s in sampled} == set(STRATEGIES)
    assert {(n, f) for n, f, _ in sampled} == {(n, f) for n in NAMES for f in FORMS}
    for name in NAMES:
        assert {s for n, _, s in sampled if n == name} >= {"xla", "max"}


@pytest.mark.needs_cc
@pytest.mark.parametrize(("name", "form", "strategy"), _compiled_cases())
def test_compiled_matches_jax(request: pytest.FixtureRequest, name: str, form: str,
                              strategy: str) -> None:
    _, inputs, expected = load(name, form)
    compiled = _executable(request, (name, form, strategy))
    assert_close_to_jax(flatten_value(compiled(*inputs)), expected,
                        f"{name}.{form} ({strategy})")


# Under `max` the time loop of every corpus rollout runs as one kernel (the CPU lowering's
# nested Threefry loops unrolled into it, per-lane gathers, scatters, small dots and the rigid
# body's Cholesky factorisation and solves computed per element, grid_forage's 200-value
# board in loops over the lane's scratch area, the stacked outputs written a row per step, the
# per-step statistics across the lanes reduced per block of lanes and combined after the loop,
# the policy networks' weights read where they lie and their hidden layers computed once per
# step into the block's scratch, the physics-engine-style rollouts' substeps and Jacobi
# iterations, larger than whole-loop fusion unrolls, run as loops in lane code, and the
# implicit pendulum's Newton iterations, as many per lane as it needs to converge, as a loop
# each block of lanes runs until its own lanes have converged).
WHOLE_LOOP_KERNEL = {"acrobot", "bandit", "catch", "grid_forage", "mountain_car",
                     "mountain_car_continuous", "particles", "pendulum", "rigid_body",
                     "reacher_logged", "inventory_logged", "acrobot_mlp", "pendulum_mlp",
                     "mountain_car_mlp", "mountain_car_continuous_mlp", "jacobi_rope",
                     "spring_chain", "implicit_pendulum"}


@pytest.mark.thorough
@pytest.mark.parametrize(("name", "form"), [
    pytest.param(name, form, marks=max_group(name, form), id=f"{name}-{form}")
    for name in NAMES for form in FORMS])
def test_max_runs_the_time_loop_as_one_kernel_or_names_the_refusal(name: str, form: str) -> None:
    fused = fused_under_max(name, form)
    if name in WHOLE_LOOP_KERNEL:
        assert not fused.kernels_per_iteration(), f"{name}.{form}: a loop is left outside"
        return
    refusals = [r for r in fused.decisions.records
                if r.pass_name == "whole-loop-fusion" and r.verdict.value == "no"]
    assert refusals, f"{name}.{form}: neither one kernel nor a logged refusal"
    last = refusals[-1]
    assert last.rule.startswith("whole-loop-") and re.search(r"%[\w.\-]+", last.message)
