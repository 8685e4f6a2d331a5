"""JAX peers: `jit` of one step called from Python, and the whole rollout in `lax.scan`.

The scan peers come in the study's program forms: the state packed into one (N, 4) array,
rebuilt by stacking every step, or split into four arrays; and the scan unrolled by 1 or 10.
Threefry is written here as uint32 array arithmetic (the shared scheme of workload.py), which
is also how JAX lowers its own Threefry on CPU, so XLA can fuse it with the dynamics.
Compilation is ahead of time (`lower(...).compile()`) and reported separately.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from hlofuse.studies.peers import workload as w
from hlofuse.studies.peers.registry import Peer, PeerUnavailable
from hlofuse.studies.peers.workload import RolloutResult, Workload

State = tuple[Any, Any, Any, Any]


def availability() -> str | None:
    if importlib.util.find_spec("jax") is None:
        return "jax is not installed (pip install -e '.[dev]')"
    return None


def threefry2x32(jnp: Any, key0: Any, key1: int, c0: Any, c1: Any) -> tuple[Any, Any]:
    """Threefry-2x32-20 on uint32 arrays (same algorithm as workload.threefry2x32)."""
    k0 = jnp.asarray(key0, jnp.uint32)
    k1 = jnp.uint32(key1)
    ks = (k0, k1, k0 ^ k1 ^ jnp.uint32(w.THREEFRY_PARITY))
    x0 = c0 + ks[0]
    x1 = c1 + ks[1]
    for i in range(20):
        r = w.THREEFRY_ROTATIONS[i % 8]
        x0 = x0 + x1
        x1 = (x1 << jnp.uint32(r)) | (x1 >> jnp.uint32(32 - r))
        x1 = x1 ^ x0
        if i % 4 == 3:
            s = (i + 1) // 4
            x0 = x0 + ks[s % 3]
            x1 = x1 + ks[(s + 1) % 3] + jnp.uint32(s)
    return x0, x1


def uniform_reset(jnp: Any, bits: Any) -> Any:
    f = (bits >> jnp.uint32(8)).astype(jnp.float32) * jnp.float32(w.UNIFORM_SCALE)
    return f * jnp.float32(w.RESET_SPAN) + jnp.float32(w.RESET_LOW)


def cartpole_step(
    jnp: Any, state: State, init: State, seed: Any, step: Any, deterministic: bool
) -> tuple[State, Any]:
    """One step of every environment with auto-reset; returns the new state and `done`."""
    f32 = jnp.float32
    x, x_dot, theta, theta_dot = state
    if deterministic:
        action = theta_dot + f32(w.POLICY_GAIN) * theta > 0
        reset = init
    else:
        env = jnp.arange(x.shape[0], dtype=jnp.uint32)
        step32 = jnp.broadcast_to(jnp.asarray(step, jnp.uint32), env.shape)
        a0, a1 = threefry2x32(jnp, seed, 0, env, step32)
        b0, b1 = threefry2x32(jnp, seed, 1, env, step32)
        c0, _ = threefry2x32(jnp, seed, 2, env, step32)
        action = (a0 >> jnp.uint32(31)) == 1
        reset = tuple(uniform_reset(jnp, bits) for bits in (a1, b0, b1, c0))
    force = jnp.where(action, f32(w.FORCE_MAG), f32(-w.FORCE_MAG))
    c, s = jnp.cos(theta), jnp.sin(theta)
    temp = (force + f32(w.POLEMASS_LENGTH) * theta_dot * theta_dot * s) / f32(w.TOTAL_MASS)
    denom = f32(w.LENGTH) * (f32(4.0 / 3.0) - f32(w.MASSPOLE) * c * c / f32(w.TOTAL_MASS))
    thetaacc = (f32(w.GRAVITY) * s - c * temp) / denom
    xacc = temp - f32(w.POLEMASS_LENGTH) * thetaacc * c / f32(w.TOTAL_MASS)
    x = x + f32(w.TAU) * x_dot
    x_dot = x_dot + f32(w.TAU) * xacc
    theta = theta + f32(w.TAU) * theta_dot
    theta_dot = theta_dot + f32(w.TAU) * thetaacc
    done = (jnp.abs(x) > f32(w.X_THRESHOLD)) | (jnp.abs(theta) > f32(w.THETA_THRESHOLD))
    new = tuple(jnp.where(done, r, v) for r, v in zip(reset, (x, x_dot, theta, theta_dot)))
    return (new[0], new[1], new[2], new[3]), done


def unpack(state: Any) -> State:
    return state[:, 0], state[:, 1], state[:, 2], state[:, 3]


@dataclass(frozen=True, slots=True)
class ScanForm:
    """How the scan peer writes the program: packed (N, 4) or split state, and the unroll."""

    is_packed: bool
    unroll: int


def scan_rollout(
    form: ScanForm, deterministic: bool, n_steps: int
) -> Callable[[Any, Any], tuple[Any, Any, Any]]:
    """(initial (N, 4), seed) -> (final (N, 4), episodes, reward sum), the loop in lax.scan."""
    import jax
    import jax.numpy as jnp

    def rollout(initial: Any, seed: Any) -> tuple[Any, Any, Any]:
        init = unpack(initial)
        n = initial.shape[0]
        counters = (jnp.zeros(n, jnp.int32), jnp.zeros(n, jnp.float32))

        def body(carry: Any, step: Any) -> tuple[Any, None]:
            state, (episodes, rewards) = carry
            split = unpack(state) if form.is_packed else state
            new, done = cartpole_step(jnp, split, init, seed, step, deterministic)
            out = jnp.stack(new, axis=1) if form.is_packed else new
            return (out, (episodes + done, rewards + jnp.float32(1.0))), None

        start = initial if form.is_packed else init
        steps = jnp.arange(n_steps, dtype=jnp.uint32)
        (final, (episodes, rewards)), _ = jax.lax.scan(
            body, (start, counters), steps, unroll=form.unroll
        )
        states = final if form.is_packed else jnp.stack(final, axis=1)
        return states, episodes.sum(), rewards.sum()

    return rollout


class ScanRunner:
    def __init__(self, workload: Workload, form: ScanForm) -> None:
        note = availability()
        if note is not None:
            raise PeerUnavailable(note)
        import jax
        import jax.numpy as jnp

        self.initial = jnp.asarray(workload.initial)
        self.seed = jnp.uint32(workload.seed)
        rollout = scan_rollout(form, workload.deterministic, workload.n_steps)
        self.compiled = jax.jit(rollout).lower(self.initial, self.seed).compile()

    def run(self) -> RolloutResult:
        states, episodes, rewards = self.compiled(self.initial, self.seed)
        return RolloutResult(np.asarray(states), int(episodes), float(rewards))


class JitStepRunner:
    """A jitted step on the packed state, called once per step from Python."""

    def __init__(self, workload: Workload) -> None:
        note = availability()
        if note is not None:
            raise PeerUnavailable(note)
        import jax
        import jax.numpy as jnp

        self.workload = workload
        self.initial = jnp.asarray(workload.initial)
        self.seed = jnp.uint32(workload.seed)
        n = workload.n_envs
        self.zeros = (jnp.zeros(n, jnp.int32), jnp.zeros(n, jnp.float32))

        def step(carry: Any, initial: Any, seed: Any, t: Any) -> Any:
            state, (episodes, rewards) = carry
            new, done = cartpole_step(
                jnp, unpack(state), unpack(initial), seed, t, workload.deterministic
            )
            return jnp.stack(new, axis=1), (episodes + done, rewards + jnp.float32(1.0))

        carry = (self.initial, self.zeros)
        self.step = jax.jit(step).lower(carry, self.initial, self.seed, 0).compile()
        self.totals = jax.jit(partial(totals, jnp)).lower(self.zeros).compile()

    def run(self) -> RolloutResult:
        carry = (self.initial, self.zeros)
        for t in range(self.workload.n_steps):
            carry = self.step(carry, self.initial, self.seed, t)
        states, counters = carry
        episodes, rewards = self.totals(counters)
        return RolloutResult(np.asarray(states), int(episodes), float(rewards))


def totals(jnp: Any, counters: tuple[Any, Any]) -> tuple[Any, Any]:
    return counters[0].sum(), counters[1].sum()


def peers() -> list[Peer]:
    result = [
        Peer(
            "jax-jit-step",
            "JAX jit of one step (packed state), called from Python each step",
            JitStepRunner,
            is_eager=True,
            availability=availability,
        )
    ]
    for is_packed in (True, False):
        for unroll in (1, 10):
            form = ScanForm(is_packed, unroll)
            layout = "packed" if is_packed else "split"
            result.append(
                Peer(
                    f"jax-scan-{layout}-u{unroll}",
                    f"JAX jit of the whole rollout in lax.scan, {layout} state, unroll {unroll}",
                    partial(ScanRunner, form=form),
                    availability=availability,
                )
            )
    return result
