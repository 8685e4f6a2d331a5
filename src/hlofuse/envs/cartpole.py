"""Batched CartPole (Gymnasium CartPole-v1 dynamics in float32), written with the front end.

N environments step in lock-step for T steps with a random policy (p = 0.5) and automatic
reset, as fixed in docs/cartpole.md. The study's program variants are options:

- rng: "custom_call" (one opaque custom-call per Threefry use, the study's baseline) or
  "fused" (Threefry as element-wise integer HLO);
- state: "packed" (one (N, 4) array rebuilt with a concatenate each step and read whole by
  two users, the termination test and the reset select, as the study's program was written)
  or "split" (four (N,) arrays). Under XLA's real rules that concatenate is no barrier here:
  its operands fuse into it first, and the fusion merger then merges the resulting fusion
  into both readers (README, "CartPole under xla");
- rollout: "scan" (the whole rollout in one module; `unroll=k` puts k steps in each loop
  iteration) or "python" (a jitted step called T times from Python);
- deterministic: the policy is `theta_dot + 0.5 * theta > 0`, the initial states come from a
  fixed array and a finished environment is reset to its own initial state; no random numbers.

Random numbers are keyed by seed, step and environment: per step, k = fold_in(steps_key, t) is
split into an action key (bernoulli over N) and a reset key (uniform over (4, N), row j being
state component j). Every variant draws the same numbers, so all variants of one seed give the
same results (and the deterministic ones agree up to float32 rounding).

A rollout returns the final states (N, 4), the number of finished episodes, and the sum of the
returns (rewards) of those finished episodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

import numpy as np

import hlofuse.numpy as hnp
from hlofuse import lax, random
from hlofuse.api import jit
from hlofuse.ir.hlo import Module

GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_POLE + MASS_CART
LENGTH = 0.5  # half the pole's length
POLE_MASS_LENGTH = MASS_POLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
RESET_LOW, RESET_HIGH = -0.05, 0.05

RNG_CHOICES = ("custom_call", "fused")
STATE_CHOICES = ("packed", "split")
ROLLOUT_CHOICES = ("scan", "python")


# --- dynamics -------------------------------------------------------------------------------


def dynamics(x: Any, x_dot: Any, theta: Any, theta_dot: Any,
             action: Any) -> tuple[Any, Any, Any, Any]:
    """One Euler step of CartPole-v1; `action` is 1 (push right) or 0 (push left)."""
    force = hnp.where(action, FORCE_MAG, -FORCE_MAG)
    cos_theta = hnp.cos(theta)
    sin_theta = hnp.sin(theta)
    temp = (force + POLE_MASS_LENGTH * theta_dot**2 * sin_theta) / TOTAL_MASS
    theta_acc = (GRAVITY * sin_theta - cos_theta * temp) / (
        LENGTH * (4.0 / 3.0 - MASS_POLE * cos_theta**2 / TOTAL_MASS))
    x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos_theta / TOTAL_MASS
    return (x + TAU * x_dot, x_dot + TAU * x_acc,
            theta + TAU * theta_dot, theta_dot + TAU * theta_acc)


def terminated(x: Any, theta: Any) -> Any:
    return (hnp.abs(x) > X_THRESHOLD) | (hnp.abs(theta) > THETA_THRESHOLD)


# The termination bound of each packed state component: |x| and |theta| are bounded, the
# velocities are not (inf is never exceeded, and |NaN| > bound is false, as in `terminated`).
PACKED_LIMITS = np.array([X_THRESHOLD, np.inf, THETA_THRESHOLD, np.inf], np.float32)


def terminated_packed(packed: Any) -> Any:
    """`terminated` on the packed (N, 4) state, reading it whole: the same decision bit for bit
    (the bounds are the float32 values `terminated` compares with)."""
    return hnp.any(hnp.abs(packed) > PACKED_LIMITS, axis=1)


def deterministic_policy(theta: Any, theta_dot: Any) -> Any:
    return theta_dot + 0.5 * theta > 0


# --- variants -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One program variant of the study."""

    rng: str = "custom_call"
    state: str = "packed"
    rollout: str = "scan"
    unroll: int = 1
    deterministic: bool = False

    def __post_init__(self) -> None:
        for name, choices in (("rng", RNG_CHOICES), ("state", STATE_CHOICES),
                              ("rollout", ROLLOUT_CHOICES)):
            if getattr(self, name) not in choices:
                raise ValueError(f"variant {name} must be one of {', '.join(choices)}, got "
                                 f"{getattr(self, name)!r}")
        if not isinstance(self.unroll, int) or self.unroll < 1:
            raise ValueError(f"variant unroll must be a positive integer, got {self.unroll!r}")
        if self.rollout == "python" and self.unroll != 1:
            raise ValueError("unroll applies to the scan rollout only")

    @property
    def spec(self) -> str:
        """The variant as `rng=...,state=...,rollout=...,unroll=...[,deterministic]`."""
        text = f"rng={self.rng},state={self.state},rollout={self.rollout},unroll={self.unroll}"
        return text + (",deterministic" if self.deterministic else "")

    @property
    def name(self) -> str:
        for name, preset in PRESETS.items():
            if preset == self:
                return name
        return self.spec


# Each preset changes the baseline in one way, as the study's sequence does; "all" combines
# them. Strategies (e.g. the relaxed concatenate rule) are the compiler's business, not these.
PRESETS: dict[str, Variant] = {
    "baseline": Variant(),
    "fused-rng": Variant(rng="fused"),
    "split-state": Variant(state="split"),
    "unroll10": Variant(unroll=10),
    "all": Variant(rng="fused", state="split", unroll=10),
    "python": Variant(rollout="python"),
    "deterministic": Variant(deterministic=True),
}


def parse_variant(text: str) -> Variant:
    """A preset name or a spec such as `rng=fused,state=split,unroll=10,deterministic`."""
    if text in PRESETS:
        return PRESETS[text]
    known = {f.name for f in fields(Variant)}
    options: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, _, value = part.partition("=")
        if key == "deterministic" and not value:
            options[key] = True
            continue
        if key not in known or not value:
            raise ValueError(f"unknown variant {text!r}: use a preset "
                             f"({', '.join(PRESETS)}) or key=value pairs of "
                             f"{', '.join(sorted(known))}")
        if key == "unroll":
            if not value.isdigit():
                raise ValueError(f"unroll must be a positive integer, got {value!r}")
            options[key] = int(value)
        elif key == "deterministic":
            options[key] = value.lower() in ("1", "true", "yes")
        else:
            options[key] = value
    return Variant(**options)


def all_variants() -> dict[str, Variant]:
    """Every program variant the CLI runs: the presets and their deterministic twins
    (`<preset>-det`), each named."""
    out = dict(PRESETS)
    for name, variant in PRESETS.items():
        # Without random numbers the rng option makes no difference.
        twin = replace(variant, deterministic=True, rng=Variant.rng)
        if twin not in out.values():
            out[f"{name}-det"] = twin
    return out


# --- one step -------------------------------------------------------------------------------


def _state_columns(state: Any, variant: Variant) -> tuple[Any, Any, Any, Any]:
    if variant.state == "packed":
        return state[:, 0], state[:, 1], state[:, 2], state[:, 3]
    return tuple(state)


def _step_randomness(key: Any, t: Any, n_envs: int, impl: str) -> tuple[Any, Any]:
    """(action (N,), reset values (4, N)) of step t."""
    step_key = random.fold_in(key, t, impl=impl)
    keys = random.split(step_key, impl=impl)
    action = random.bernoulli(keys[0], 0.5, (n_envs,), impl=impl)
    reset = random.uniform(keys[1], (4, n_envs), minval=RESET_LOW, maxval=RESET_HIGH, impl=impl)
    return action, reset


def make_step(variant: Variant, n_envs: int) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """The step function `(carry, aux) -> carry`; aux is the steps key, or in the
    deterministic variant the initial states (packed, or a tuple of four columns)."""

    def step(carry: dict[str, Any], aux: Any) -> dict[str, Any]:
        x, x_dot, theta, theta_dot = _state_columns(carry["state"], variant)
        if variant.deterministic:
            action = deterministic_policy(theta, theta_dot)
            reset = aux
        else:
            action, reset = _step_randomness(aux, carry["t"], n_envs, variant.rng)
            reset = reset.T if variant.state == "packed" else tuple(reset)
        new = dynamics(x, x_dot, theta, theta_dot, action)
        if variant.state == "packed":
            # One array rebuilt by concatenation and read whole by the termination test and
            # the reset select, as a JAX program would write it: the study's concatenate with
            # several users (fused into both by XLA's merger, since the dynamics fuse into it).
            packed = hnp.stack(new, axis=1)
            done = terminated_packed(packed)
            state: Any = hnp.where(done[:, None], reset, packed)
        else:
            done = terminated(new[0], new[2])
            state = tuple(hnp.where(done, r, s) for r, s in zip(reset, new))
        length = carry["episode_length"] + 1.0
        return {
            "state": state,
            "t": carry["t"] + 1,
            "episode_length": hnp.where(done, 0.0, length),
            "finished": carry["finished"] + hnp.sum(done),
            "return_sum": carry["return_sum"] + hnp.sum(hnp.where(done, length, 0.0)),
        }

    return step


def _initial_carry(variant: Variant, n_envs: int, aux: Any) -> tuple[dict[str, Any], Any]:
    """(carry, step aux) at t = 0 from the rollout's input (a key or the initial states)."""
    states: Any
    if variant.deterministic:
        packed = hnp.asarray(aux)
        states = packed
        if variant.state == "split":
            states = (packed[:, 0], packed[:, 1], packed[:, 2], packed[:, 3])
        step_aux = states
    else:
        init_key, step_aux = random.split(aux, impl=variant.rng)
        values = random.uniform(init_key, (4, n_envs), minval=RESET_LOW, maxval=RESET_HIGH,
                                impl=variant.rng)
        states = values.T if variant.state == "packed" else tuple(values)
    carry = {
        "state": states,
        "t": hnp.zeros((), hnp.int32),
        "episode_length": hnp.zeros((n_envs,)),
        "finished": hnp.zeros((), hnp.int32),
        "return_sum": hnp.zeros(()),
    }
    return carry, step_aux


def _outputs(carry: dict[str, Any], variant: Variant) -> tuple[Any, Any, Any]:
    state = carry["state"]
    if variant.state == "split":
        state = hnp.stack(state, axis=1)
    return state, carry["finished"], carry["return_sum"]


# --- rollouts -------------------------------------------------------------------------------


class RolloutResult(NamedTuple):
    states: np.ndarray  # (N, 4) float32
    finished: int  # finished episodes
    return_sum: float  # sum of the returns of the finished episodes


def initial_states(n_envs: int, seed: int = 0) -> np.ndarray:
    """The fixed initial states of the deterministic variant: uniform in [-0.05, 0.05)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(RESET_LOW, RESET_HIGH, (n_envs, 4)).astype(np.float32)


def _check_sizes(n_envs: int, n_steps: int) -> None:
    if not isinstance(n_envs, int) or n_envs < 1:
        raise ValueError(f"the number of environments must be a positive integer, got {n_envs!r}")
    if not isinstance(n_steps, int) or n_steps < 0:
        raise ValueError(f"the number of steps must be a non-negative integer, got {n_steps!r}")


def scan_rollout(variant: Variant, n_envs: int, n_steps: int) -> Callable[[Any], Any]:
    """The whole rollout as one function of the key (or the initial states)."""
    step = make_step(variant, n_envs)

    def cartpole_rollout(aux: Any) -> tuple[Any, Any, Any]:
        carry, step_aux = _initial_carry(variant, n_envs, aux)
        carry, _ = lax.scan(lambda c, _: (step(c, step_aux), None), carry, None,
                            length=n_steps, unroll=variant.unroll)
        return _outputs(carry, variant)

    return cartpole_rollout


def _rollout_input(variant: Variant, n_envs: int, seed: int,
                   init: np.ndarray | None) -> np.ndarray:
    if not variant.deterministic:
        return random.key(seed)
    states = initial_states(n_envs, seed) if init is None else np.asarray(init, np.float32)
    if states.shape != (n_envs, 4):
        raise ValueError(f"initial states must have shape ({n_envs}, 4), got {states.shape}")
    return states


def rollout(variant: Variant, n_envs: int, n_steps: int, seed: int = 0,
            init: np.ndarray | None = None, *, strategy: str = "xla",
            backend: str = "interpreter") -> RolloutResult:
    """Run a rollout of `variant`: N environments, T steps, from `seed` (random variants) or
    from `init` (deterministic; default `initial_states(N, seed)`)."""
    _check_sizes(n_envs, n_steps)
    aux = _rollout_input(variant, n_envs, seed, init)
    if variant.rollout == "scan":
        fn = jit(scan_rollout(variant, n_envs, n_steps), strategy=strategy, backend=backend)
        states, finished, return_sum = fn(aux)
    else:
        start = jit(lambda a: _initial_carry(variant, n_envs, a), strategy=strategy,
                    backend=backend)
        step = jit(make_step(variant, n_envs), strategy=strategy, backend=backend)
        carry, step_aux = start(aux)
        for _ in range(n_steps):
            carry = step(carry, step_aux)
        state = carry["state"]
        states = state if variant.state == "packed" else np.stack(state, axis=1)
        finished, return_sum = carry["finished"], carry["return_sum"]
    return RolloutResult(np.asarray(states), int(finished), float(return_sum))


def trace(variant: Variant, n_envs: int, n_steps: int, seed: int = 0) -> Module:
    """The traced HLO module of `variant`: the whole rollout (scan) or the step (python)."""
    _check_sizes(n_envs, n_steps)
    aux = _rollout_input(variant, n_envs, seed, None)
    if variant.rollout == "scan":
        return jit(scan_rollout(variant, n_envs, n_steps)).lower(aux).module
    start = jit(lambda a: _initial_carry(variant, n_envs, a))
    carry, step_aux = start(aux)
    return jit(make_step(variant, n_envs)).lower(carry, step_aux).module


def instruction_count(module: Module) -> int:
    return sum(len(c.instructions) for c in module.computations)
