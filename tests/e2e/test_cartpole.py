"""CartPole written with the front end: Gymnasium's dynamics, and every variant agreeing."""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import hlofuse
from hlofuse.analysis.graph import users
from hlofuse.envs import cartpole as cp
from hlofuse.ir.ops import Op
from hlofuse.ir.verifier import verify

N_STATES = 10_000


def _random_states(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    high = np.array([2.4, 2.5, 0.21, 3.0])
    states = rng.uniform(-high, high, (n, 4)).astype(np.float32)
    actions = rng.integers(0, 2, n).astype(np.int32)
    return states, actions


def _gym_steps(states: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    env = CartPoleEnv()
    env.reset(seed=0)
    out = np.empty(states.shape, np.float64)
    done = np.empty(len(states), bool)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, (state, action) in enumerate(zip(states, actions)):
            env.state = state.astype(np.float64)
            env.steps_beyond_terminated = None
            _, _, terminated, _, _ = env.step(int(action))
            out[i] = env.state
            done[i] = terminated
    return out, done


def _near_threshold(states: np.ndarray) -> np.ndarray:
    return (np.abs(np.abs(states[:, 0]) - cp.X_THRESHOLD) < 1e-5) | (
        np.abs(np.abs(states[:, 2]) - cp.THETA_THRESHOLD) < 1e-5)


def test_one_step_matches_gymnasium() -> None:
    states, actions = _random_states(N_STATES, 0)

    def step(s: Any, a: Any) -> Any:
        new = cp.dynamics(s[:, 0], s[:, 1], s[:, 2], s[:, 3], a)
        return new, cp.terminated(new[0], new[2])

    new, done = hlofuse.jit(step)(states, actions)
    new = np.stack(new, axis=1)
    assert new.dtype == np.float32
    want, want_done = _gym_steps(states, actions)
    np.testing.assert_allclose(new, want, rtol=0, atol=1e-5)
    decided = ~_near_threshold(want)
    assert decided.mean() > 0.99
    np.testing.assert_array_equal(done[decided], want_done[decided])
    assert 0.05 < want_done.mean() < 0.95  # both outcomes are exercised


def test_deterministic_step_matches_gymnasium() -> None:
    """One step of the deterministic variant's own step function (policy and reset included)."""
    states, _ = _random_states(N_STATES, 1)
    initial = cp.initial_states(N_STATES, 5)
    variant = cp.PRESETS["deterministic"]
    carry = {"state": states, "t": np.int32(0), "episode_length": np.zeros(N_STATES, np.float32),
             "finished": np.int32(0), "return_sum": np.float32(0)}
    out = hlofuse.jit(cp.make_step(variant, N_STATES))(carry, initial)
    policy = (states[:, 3] + 0.5 * states[:, 2] > 0).astype(np.int32)
    want, want_done = _gym_steps(states, policy)
    decided = ~_near_threshold(want)
    done = np.asarray(out["state"] == initial).all(axis=1) & (out["episode_length"] == 0)
    np.testing.assert_array_equal(done[decided], want_done[decided])
    live = decided & ~want_done
    np.testing.assert_allclose(out["state"][live], want[live], rtol=0, atol=1e-5)
    assert out["finished"] == int(want_done[decided].sum() + done[~decided].sum())


@pytest.mark.thorough
@pytest.mark.parametrize("deterministic", [False, True], ids=["random", "deterministic"])
def test_all_variants_agree(deterministic: bool) -> None:
    n_envs, n_steps = 6, 40
    results = {}
    for name, variant in cp.all_variants().items():
        if variant.deterministic != deterministic:
            continue
        results[name] = cp.rollout(variant, n_envs, n_steps, seed=3)
    assert len(results) == (5 if deterministic else 6)
    reference = next(iter(results.values()))
    assert reference.finished > 0 or deterministic
    for name, result in results.items():
        np.testing.assert_allclose(result.states, reference.states, atol=1e-5, err_msg=name)
        assert result.finished == reference.finished, name
        assert result.return_sum == reference.return_sum, name


def test_random_rollout_statistics_are_plausible() -> None:
    result = cp.rollout(cp.PRESETS["baseline"], 16, 60, seed=0)
    # A random policy keeps the pole up for about 22 steps on average.
    assert 20 <= result.finished <= 80
    assert result.return_sum / result.finished == pytest.approx(22, rel=0.5)
    assert np.all(np.abs(result.states[:, 0]) <= cp.X_THRESHOLD)
    assert np.all(np.abs(result.states[:, 2]) <= cp.THETA_THRESHOLD)


def test_deterministic_rollout_resets_to_the_initial_states() -> None:
    init = np.zeros((3, 4), np.float32)
    init[:, 2] = [0.19, -0.2, 0.0]  # two poles start falling past the threshold:
    init[:, 3] = [2.0, -2.0, 0.0]  # they end every step and restart where they began
    result = cp.rollout(cp.PRESETS["deterministic"], 3, 30, init=init)
    assert result.finished == 60 and result.return_sum == 60
    np.testing.assert_array_equal(result.states[:2], init[:2])
    assert np.abs(result.states[2]).max() < 0.05
    for variant in (cp.parse_variant("state=split,deterministic"),
                    cp.parse_variant("rollout=python,deterministic")):
        other = cp.rollout(variant, 3, 30, init=init)
        np.testing.assert_allclose(other.states, result.states, atol=1e-6)


@pytest.mark.parametrize("name", list(cp.all_variants()))
def test_every_variant_traces_and_verifies(name: str) -> None:
    module = cp.trace(cp.all_variants()[name], 4, 20)
    verify(module)
    variant = cp.all_variants()[name]
    ops = [i.op for i in module.all_instructions()]
    has_custom_call = Op.CUSTOM_CALL in ops
    assert has_custom_call == (variant.rng == "custom_call" and not variant.deterministic)
    assert (Op.WHILE in ops) == (variant.rollout == "scan")


def _loop_body(module: Any) -> Any:
    (loop,) = [i for i in module.entry.instructions if i.op is Op.WHILE]
    return loop.calls[1]


def test_packed_state_is_one_concatenate_read_by_several_users() -> None:
    module = cp.trace(cp.PRESETS["baseline"], 4, 10)
    body = _loop_body(module)
    concatenates = [i for i in body.instructions
                    if i.op is Op.CONCATENATE and i.shape.dims == (4, 4)]
    assert len(concatenates) == 1
    # Read whole by two users, the termination test (|state| > bounds) and the reset select:
    # the study's concatenate with several users, which slice forwarding cannot remove.
    readers = users(body)[concatenates[0]]
    assert sorted(r.op.text for r in readers) == ["abs", "select"]
    assert all(r.shape.dims == (4, 4) for r in readers)


def test_packed_termination_test_is_the_split_one_bit_for_bit() -> None:
    """`terminated_packed` (|state| > [x bound, inf, theta bound, inf], any over the row) and
    `terminated` decide alike on values at, next to and past the bounds, infinities and NaN."""
    def around(bound: float) -> list[np.float32]:
        b = np.float32(bound)
        return [b, np.nextafter(b, np.float32(0)), np.nextafter(b, np.float32(np.inf))]

    specials = [np.float32(v) for v in (0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e-30)]
    x_values = [v * s for v in around(cp.X_THRESHOLD) for s in (1, -1)] + specials
    theta_values = [v * s for v in around(cp.THETA_THRESHOLD) for s in (1, -1)] + specials
    rng = np.random.default_rng(0)
    grid = np.array([(x, v, t, w) for x in x_values for t in theta_values
                     for v, w in [rng.choice(specials, 2)]], np.float32)

    def both(states: Any) -> Any:
        return cp.terminated_packed(states), cp.terminated(states[:, 0], states[:, 2])

    for backend in ("interpreter", "cpu"):
        packed, split = hlofuse.jit(both, backend=backend)(grid)
        np.testing.assert_array_equal(packed, split, err_msg=backend)
    want = (np.abs(grid[:, 0]) > np.float32(cp.X_THRESHOLD)) | (
        np.abs(grid[:, 2]) > np.float32(cp.THETA_THRESHOLD))
    np.testing.assert_array_equal(packed, want)
    assert 0 < want.sum() < len(want)


def test_split_state_has_no_state_concatenate() -> None:
    body = _loop_body(cp.trace(cp.PRESETS["split-state"], 4, 10))
    assert not [i for i in body.instructions if i.op is Op.CONCATENATE and i.shape.dims == (4, 4)]


def test_unroll_puts_k_steps_in_the_loop_body() -> None:
    base = _loop_body(cp.trace(cp.PRESETS["baseline"], 4, 20))
    unrolled = _loop_body(cp.trace(cp.PRESETS["unroll10"], 4, 20))
    count = [sum(1 for i in body.instructions if i.op is Op.COSINE) for body in (base, unrolled)]
    assert count == [1, 10]


def test_instructions_record_cartpole_source_lines() -> None:
    module = cp.trace(cp.PRESETS["fused-rng"], 4, 10)
    (cosine,) = [i for i in module.all_instructions() if i.op is Op.COSINE]
    assert cosine.metadata is not None and cosine.metadata.source_file == cp.__file__
    source = open(cp.__file__).read().splitlines()
    assert "hnp.cos(theta)" in source[cosine.metadata.source_line - 1]


def test_variant_parsing() -> None:
    assert cp.parse_variant("baseline") == cp.Variant()
    v = cp.parse_variant("rng=fused,state=split,unroll=10")
    assert v == cp.PRESETS["all"] and v.name == "all"
    assert cp.parse_variant(v.spec) == v
    assert cp.parse_variant("deterministic,state=split") == replace(
        cp.Variant(), state="split", deterministic=True)
    for bad in ("rng=philox", "unroll=0", "unroll=x", "colour=red", "rollout=python,unroll=2"):
        with pytest.raises(ValueError):
            cp.parse_variant(bad)
