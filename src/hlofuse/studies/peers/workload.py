"""The CartPole workload every peer runs: constants, the shared random scheme, references.

The dynamics, reset and rollout are fixed in docs/cartpole.md. This module fixes
what that document leaves open for the peers: which random bits each step uses, so that every
peer draws exactly the same actions and reset states. The scheme is jax.random's default
(partitionable Threefry-2x32, 20 rounds), the one hlofuse.envs.cartpole's program uses, so
hlofuse's rollout, the JAX peers (which call jax.random itself) and the others agree bit for
bit and do the same amount of random-number work:

    key                    = (0, seed)
    init_key, steps_key    = split(key)          split(k)[i] = threefry(k, (0, i))
    initial states (N, 4)  = uniform(init_key, (4, N), -0.05, 0.05).T
    per step t:  k         = fold_in(steps_key, t) = threefry(steps_key, (0, t))
                 ka, kr    = split(k)
                 action    = bernoulli(ka, 0.5, (N,))
                 reset     = uniform(kr, (4, N), -0.05, 0.05)   row j = state component j
    bits(k, shape)[i]      = y0 ^ y1 of threefry(k, (0, i)), i the flat index
    uniform from bits b    = max(low, (bitcast_f32((b >> 9) | 0x3f800000) - 1) * (high - low)
                                      + low)
    bernoulli(p = 0.5)     = uniform < 0.5, which is exactly b < 2**31

So one environment-step costs one Threefry hash for the action and four for the reset state
(plus three per step for the keys, shared by all environments); a peer may skip the reset
hashes of environments that did not finish, since their values are then unused.

The rollout returns the final states, the number of finished episodes and the sum of the
returns (lengths) of the finished episodes, as hlofuse.envs.cartpole does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4

THREEFRY_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
THREEFRY_PARITY = 0x1BD11BDA
RESET_LOW = -0.05
RESET_HIGH = 0.05
FLOAT_ONE_BITS = 0x3F800000
# The deterministic variant's policy: push right when theta_dot + POLICY_GAIN * theta > 0.
POLICY_GAIN = 0.5


@dataclass(frozen=True, slots=True)
class Workload:
    """One rollout: `initial` is (N, 4) float32; `deterministic` picks the checking variant."""

    initial: np.ndarray
    n_steps: int
    seed: int = 0
    deterministic: bool = False

    def __post_init__(self) -> None:
        if self.initial.ndim != 2 or self.initial.shape[1] != 4:
            raise ValueError(f"initial states must be (N, 4), got {self.initial.shape}")
        if self.initial.dtype != np.float32:
            raise ValueError(f"initial states must be float32, got {self.initial.dtype}")
        if self.n_steps < 0:
            raise ValueError(f"n_steps must be >= 0, got {self.n_steps}")
        if not 0 <= self.seed <= 0xFFFFFFFF:
            raise ValueError(f"seed must fit in 32 bits, got {self.seed}")

    @property
    def n_envs(self) -> int:
        return int(self.initial.shape[0])


@dataclass(frozen=True, slots=True)
class RolloutResult:
    """Final states (N, 4), finished episodes, sum of the returns of the finished episodes."""

    states: np.ndarray
    episodes: int
    return_sum: float


def threefry2x32(
    key0: int | np.ndarray, key1: int | np.ndarray, ctr0: np.ndarray | np.uint32,
    ctr1: np.ndarray | np.uint32,
) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32-20 on uint32 values, element-wise (Random123's reference algorithm)."""
    k0, k1, c0, c1 = np.broadcast_arrays(*(np.asarray(v, np.uint32) for v in
                                           (key0, key1, ctr0, ctr1)))
    ks = (k0, k1, k0 ^ k1 ^ np.uint32(THREEFRY_PARITY))
    # Wrap-around is the algorithm; NumPy warns about it only in scalar arithmetic.
    with np.errstate(over="ignore"):
        x0 = c0 + ks[0]
        x1 = c1 + ks[1]
        for i in range(20):
            r = THREEFRY_ROTATIONS[i % 8]
            x0 = x0 + x1
            x1 = (x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))
            x1 = x1 ^ x0
            if i % 4 == 3:
                s = (i + 1) // 4
                x0 = x0 + ks[s % 3]
                x1 = x1 + ks[(s + 1) % 3] + np.uint32(s)
    return x0, x1


Key = tuple[np.ndarray, np.ndarray]


def split(key: Key) -> tuple[Key, Key]:
    """jax.random.split(key) (two keys), element-wise over arrays of keys."""
    first = threefry2x32(key[0], key[1], np.uint32(0), np.uint32(0))
    second = threefry2x32(key[0], key[1], np.uint32(0), np.uint32(1))
    return first, second


def random_bits(key: Key, counters: np.ndarray) -> np.ndarray:
    """jax.random.bits words at the flat indices `counters` (uint32)."""
    y0, y1 = threefry2x32(key[0], key[1], np.uint32(0), counters)
    return y0 ^ y1


def uniform_from_bits(bits: np.ndarray) -> np.ndarray:
    """Reset values in [-0.05, 0.05) from 32-bit words, as jax.random.uniform makes them."""
    one_to_two = ((bits >> np.uint32(9)) | np.uint32(FLOAT_ONE_BITS)).view(np.float32)
    low = np.float32(RESET_LOW)
    span = np.float32(RESET_HIGH) - low
    return np.maximum(low, (one_to_two - np.float32(1.0)) * span + low)


def action_from_bits(bits: np.ndarray) -> np.ndarray:
    """bernoulli(0.5): uniform(bits) < 0.5, which holds exactly when the top bit is clear."""
    return (bits >> np.uint32(31)) == 0


def root_keys(seed: int) -> tuple[Key, Key]:
    """(init_key, steps_key) of a seed."""
    key = (np.asarray(0, np.uint32), np.asarray(seed & 0xFFFFFFFF, np.uint32))
    return split(key)


@dataclass(frozen=True, slots=True)
class StepKeys:
    """The action and reset keys of steps 0..T-1, four uint32 arrays of shape (T,)."""

    action0: np.ndarray
    action1: np.ndarray
    reset0: np.ndarray
    reset1: np.ndarray


def step_keys(seed: int, n_steps: int) -> StepKeys:
    """Every step's (ka, kr) = split(fold_in(steps_key, t)), computed for all t at once."""
    _, steps_key = root_keys(seed)
    t = np.arange(n_steps, dtype=np.uint32)
    folded = threefry2x32(steps_key[0], steps_key[1], np.uint32(0), t)
    ka, kr = split(folded)
    return StepKeys(ka[0], ka[1], kr[0], kr[1])


def draw_step(keys: StepKeys, t: int, n_envs: int) -> tuple[np.ndarray, np.ndarray]:
    """(actions (N,) bool, reset states (N, 4) float32) of step t."""
    env = np.arange(n_envs, dtype=np.uint32)
    action = action_from_bits(random_bits((keys.action0[t], keys.action1[t]), env))
    counters = np.arange(4 * n_envs, dtype=np.uint32)
    reset = uniform_from_bits(random_bits((keys.reset0[t], keys.reset1[t]), counters))
    return action, reset.reshape(4, n_envs).T


def initial_states(n_envs: int, seed: int = 0) -> np.ndarray:
    """The random variant's initial states: uniform(init_key, (4, N)).T."""
    init_key, _ = root_keys(seed)
    counters = np.arange(4 * n_envs, dtype=np.uint32)
    values = uniform_from_bits(random_bits(init_key, counters))
    return np.ascontiguousarray(values.reshape(4, n_envs).T)


def deterministic_initial_states(n_envs: int) -> np.ndarray:
    """Fixed initial states for the checking variant, some close to a threshold.

    A third start near the x or theta limit so that episodes end (and reset to their own
    initial state) within a few steps; the rest start near upright.
    """
    i = np.arange(n_envs, dtype=np.float64)
    states = np.stack(
        [
            0.04 * np.sin(1.7 * i + 0.3),
            0.04 * np.cos(2.3 * i + 0.1),
            0.04 * np.sin(3.1 * i + 0.7),
            0.04 * np.cos(0.9 * i + 1.1),
        ],
        axis=1,
    )
    near_x = i % 3 == 1
    states[near_x, 0] = 2.3 + 0.01 * (i[near_x] % 7)
    states[near_x, 1] = 1.5
    near_theta = i % 3 == 2
    states[near_theta, 2] = 0.17 + 0.003 * (i[near_theta] % 5)
    states[near_theta, 3] = 0.4
    return states.astype(np.float32)


def policy_value(theta: np.ndarray, theta_dot: np.ndarray) -> np.ndarray:
    """The deterministic policy's decision value; action 1 where it is > 0."""
    return theta_dot + POLICY_GAIN * theta


@dataclass(frozen=True, slots=True)
class ReferenceRollout:
    """The float64 reference's result and how far it ever came to a decision boundary.

    `margin` is the smallest distance of any policy value from 0 and of any |x|, |theta| from
    its threshold: float32 peers agree with the reference only while that stays well above
    float32 rounding, so tests assert it before comparing.
    """

    result: RolloutResult
    margin: float


def reference_rollout(workload: Workload) -> ReferenceRollout:
    """The rollout in float64 NumPy, written for clarity: the oracle every peer is checked on."""
    if not workload.deterministic:
        raise ValueError("the float64 reference runs the deterministic variant only")
    init = workload.initial.astype(np.float64)
    x, x_dot, theta, theta_dot = (init[:, k].copy() for k in range(4))
    length = np.zeros(workload.n_envs, dtype=np.int64)
    episodes = 0
    return_sum = 0.0
    margin = math.inf
    for _ in range(workload.n_steps):
        value = policy_value(theta, theta_dot)
        margin = min(margin, float(np.min(np.abs(value), initial=math.inf)))
        force = np.where(value > 0, FORCE_MAG, -FORCE_MAG)
        c, s = np.cos(theta), np.sin(theta)
        temp = (force + POLEMASS_LENGTH * theta_dot**2 * s) / TOTAL_MASS
        thetaacc = (GRAVITY * s - c * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * c**2 / TOTAL_MASS))
        xacc = temp - POLEMASS_LENGTH * thetaacc * c / TOTAL_MASS
        x, x_dot = x + TAU * x_dot, x_dot + TAU * xacc
        theta, theta_dot = theta + TAU * theta_dot, theta_dot + TAU * thetaacc
        x_gap = np.abs(np.abs(x) - X_THRESHOLD)
        theta_gap = np.abs(np.abs(theta) - THETA_THRESHOLD)
        margin = min(margin, float(np.min(x_gap, initial=math.inf)))
        margin = min(margin, float(np.min(theta_gap, initial=math.inf)))
        done = (np.abs(x) > X_THRESHOLD) | (np.abs(theta) > THETA_THRESHOLD)
        length += 1
        episodes += int(done.sum())
        return_sum += float(length[done].sum())
        length[done] = 0
        x = np.where(done, init[:, 0], x)
        x_dot = np.where(done, init[:, 1], x_dot)
        theta = np.where(done, init[:, 2], theta)
        theta_dot = np.where(done, init[:, 3], theta_dot)
    states = np.stack([x, x_dot, theta, theta_dot], axis=1)
    return ReferenceRollout(RolloutResult(states, episodes, return_sum), margin)
