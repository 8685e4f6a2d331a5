"""JAX peers: `jit` of one step called from Python, and the whole rollout in `lax.scan`.

The scan peers come in the study's program forms: the state packed into one (N, 4) array,
rebuilt by stacking every step, or split into four arrays; and the scan unrolled by 1 or 10.
Random numbers come from jax.random itself (fold_in, split, bernoulli, uniform), which is the
shared scheme of workload.py; on CPU JAX lowers its Threefry to element-wise integer HLO, so
XLA can fuse it with the dynamics. Compilation is ahead of time (`lower(...).compile()`),
through JAX's persistent compilation cache (in hlofuse's cache directory unless JAX is told
another): the unrolled scans take 5-10 s each to compile, a second run loads them.
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
# Per-environment counters carried through the rollout: episode length, sum of the returns of
# finished episodes, finished episodes. Summed once at the end.
Counters = tuple[Any, Any, Any]


# Compilations shorter than this are not worth a cache entry.
CACHE_MIN_COMPILE_S = 0.5


def availability() -> str | None:
    if importlib.util.find_spec("jax") is None:
        return "jax is not installed (pip install -e '.[dev]')"
    return None


def use_compilation_cache() -> None:
    """Turn on JAX's persistent compilation cache, in `<hlofuse cache>/jax-peers` unless a
    directory is set already (JAX_COMPILATION_CACHE_DIR or jax.config)."""
    import jax

    if jax.config.jax_compilation_cache_dir:  # type: ignore[attr-defined]  # declared at run time
        return
    from hlofuse.toolchain.cache import CacheError, ensure_cache_dir

    try:
        root = ensure_cache_dir()
    except CacheError:
        return  # compiling every time is slower, not wrong
    jax.config.update("jax_compilation_cache_dir", str(root / "jax-peers"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_S)


def cartpole_step(
    state: State, counters: Counters, init: State, steps_key: Any, t: Any, deterministic: bool
) -> tuple[State, Counters]:
    """One step of every environment with auto-reset and episode bookkeeping."""
    import jax
    import jax.numpy as jnp

    f32 = jnp.float32
    x, x_dot, theta, theta_dot = state
    if deterministic:
        action = theta_dot + f32(w.POLICY_GAIN) * theta > 0
        reset = init
    else:
        ka, kr = jax.random.split(jax.random.fold_in(steps_key, t))
        action = jax.random.bernoulli(ka, 0.5, x.shape)
        values = jax.random.uniform(
            kr, (4, x.shape[0]), minval=w.RESET_LOW, maxval=w.RESET_HIGH
        )
        reset = (values[0], values[1], values[2], values[3])
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
    length, returns, episodes = counters
    length = length + f32(1.0)
    counters = (
        jnp.where(done, f32(0.0), length),
        returns + jnp.where(done, length, f32(0.0)),
        episodes + done,
    )
    return (new[0], new[1], new[2], new[3]), counters


def unpack(state: Any) -> State:
    return state[:, 0], state[:, 1], state[:, 2], state[:, 3]


def zero_counters(n: int) -> Counters:
    import jax.numpy as jnp

    return jnp.zeros(n, jnp.float32), jnp.zeros(n, jnp.float32), jnp.zeros(n, jnp.int32)


def steps_key_of(seed: Any) -> Any:
    import jax

    return jax.random.split(jax.random.PRNGKey(seed))[1]


@dataclass(frozen=True, slots=True)
class ScanForm:
    """How the scan peer writes the program: packed (N, 4) or split state, and the unroll."""

    is_packed: bool
    unroll: int


def scan_rollout(
    form: ScanForm, deterministic: bool, n_steps: int
) -> Callable[[Any, Any], tuple[Any, Any, Any]]:
    """(initial (N, 4), seed) -> (final (N, 4), episodes, return sum), the loop in lax.scan."""
    import jax
    import jax.numpy as jnp

    def rollout(initial: Any, seed: Any) -> tuple[Any, Any, Any]:
        init = unpack(initial)
        steps_key = steps_key_of(seed)

        def body(carry: Any, t: Any) -> tuple[Any, None]:
            state, counters = carry
            split = unpack(state) if form.is_packed else state
            new, counters = cartpole_step(split, counters, init, steps_key, t, deterministic)
            out = jnp.stack(new, axis=1) if form.is_packed else new
            return (out, counters), None

        start = initial if form.is_packed else init
        steps = jnp.arange(n_steps, dtype=jnp.uint32)
        carry = (start, zero_counters(initial.shape[0]))
        (final, counters), _ = jax.lax.scan(body, carry, steps, unroll=form.unroll)
        states = final if form.is_packed else jnp.stack(final, axis=1)
        return states, counters[2].sum(), counters[1].sum()

    return rollout


class ScanRunner:
    def __init__(self, workload: Workload, form: ScanForm) -> None:
        note = availability()
        if note is not None:
            raise PeerUnavailable(note)
        import jax
        import jax.numpy as jnp

        use_compilation_cache()
        self.initial = jnp.asarray(workload.initial)
        self.seed = jnp.uint32(workload.seed)
        rollout = scan_rollout(form, workload.deterministic, workload.n_steps)
        self.compiled = jax.jit(rollout).lower(self.initial, self.seed).compile()

    def run(self) -> RolloutResult:
        states, episodes, returns = self.compiled(self.initial, self.seed)
        return RolloutResult(np.asarray(states), int(episodes), float(returns))


class JitStepRunner:
    """A jitted step on the packed state, called once per step from Python."""

    def __init__(self, workload: Workload) -> None:
        note = availability()
        if note is not None:
            raise PeerUnavailable(note)
        import jax
        import jax.numpy as jnp

        use_compilation_cache()
        self.workload = workload
        self.initial = jnp.asarray(workload.initial)
        self.steps_key = jax.jit(steps_key_of)(jnp.uint32(workload.seed))
        self.zeros = zero_counters(workload.n_envs)

        def step(carry: Any, initial: Any, steps_key: Any, t: Any) -> Any:
            state, counters = carry
            new, counters = cartpole_step(
                unpack(state), counters, unpack(initial), steps_key, t, workload.deterministic
            )
            return jnp.stack(new, axis=1), counters

        def totals(counters: Counters) -> tuple[Any, Any]:
            return counters[2].sum(), counters[1].sum()

        carry = (self.initial, self.zeros)
        t0 = jnp.uint32(0)
        self.step = jax.jit(step).lower(carry, self.initial, self.steps_key, t0).compile()
        self.totals = jax.jit(totals).lower(self.zeros).compile()

    def run(self) -> RolloutResult:
        carry = (self.initial, self.zeros)
        for t in range(self.workload.n_steps):
            carry = self.step(carry, self.initial, self.steps_key, np.uint32(t))
        states, counters = carry
        episodes, returns = self.totals(counters)
        return RolloutResult(np.asarray(states), int(episodes), float(returns))


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
