"""The CartPole workload every peer runs: constants, the shared random scheme, references.

The dynamics, reset and rollout are fixed in shared/design/cartpole.md. This module fixes the
one thing that document leaves open for the peers: which counter-based random bits each
environment-step uses, so that every peer draws exactly the same actions and reset states.

Random scheme (Threefry-2x32 with 20 rounds, as in Random123 and JAX):

    block_j = threefry2x32(key=(seed, j), counter=(env, step))      j = 0, 1, 2
    action      = block_0.w0 >> 31                                   (p = 0.5)
    reset x     = u(block_0.w1)    reset x_dot     = u(block_1.w0)
    reset theta = u(block_1.w1)    reset theta_dot = u(block_2.w0)   (block_2.w1 unused)
    u(w)        = float32(w >> 8) * 2**-24 * 0.1 - 0.05             in [-0.05, 0.05)

The initial states are the reset draws of step 2**32 - 1 (the step before step 0), made once
by `initial_states` and handed to every peer, so no peer needs a second scheme for them.
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
# Reset values: u(w) = (w >> 8) * UNIFORM_SCALE * RESET_SPAN + RESET_LOW.
UNIFORM_SCALE = 2.0**-24
RESET_LOW = -0.05
RESET_SPAN = 0.1
INITIAL_STEP = 0xFFFFFFFF
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
    """Final states (N, 4), finished episodes (all environments), sum of rewards."""

    states: np.ndarray
    episodes: int
    reward_sum: float


def threefry2x32(
    key0: int, key1: int, ctr0: np.ndarray | np.uint32, ctr1: np.ndarray | np.uint32
) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32-20 on uint32 counters, element-wise (Random123's reference algorithm)."""
    k0, k1 = np.uint32(key0), np.uint32(key1)
    ks = (k0, k1, np.uint32(k0 ^ k1 ^ np.uint32(THREEFRY_PARITY)))
    c0, c1 = np.broadcast_arrays(np.asarray(ctr0, np.uint32), np.asarray(ctr1, np.uint32))
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


def uniform_reset(bits: np.ndarray) -> np.ndarray:
    """Reset values in [-0.05, 0.05) from 32-bit words, in float32 as every peer computes it."""
    f = (bits >> np.uint32(8)).astype(np.float32) * np.float32(UNIFORM_SCALE)
    return f * np.float32(RESET_SPAN) + np.float32(RESET_LOW)


def draw_step(seed: int, step: int, n_envs: int) -> tuple[np.ndarray, np.ndarray]:
    """(actions (N,) int, reset states (N, 4) float32) of one step under the shared scheme."""
    env = np.arange(n_envs, dtype=np.uint32)
    step_ctr = np.full(n_envs, step & 0xFFFFFFFF, dtype=np.uint32)
    a0, a1 = threefry2x32(seed, 0, env, step_ctr)
    b0, b1 = threefry2x32(seed, 1, env, step_ctr)
    c0, _ = threefry2x32(seed, 2, env, step_ctr)
    actions = (a0 >> np.uint32(31)).astype(np.int64)
    reset = np.stack([uniform_reset(w) for w in (a1, b0, b1, c0)], axis=1)
    return actions, reset


def initial_states(n_envs: int, seed: int = 0) -> np.ndarray:
    """The random variant's initial states: the reset draws of the step before step 0."""
    return draw_step(seed, INITIAL_STEP, n_envs)[1]


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
    episodes = 0
    reward_sum = 0.0
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
        episodes += int(done.sum())
        reward_sum += float(x.size)
        x = np.where(done, init[:, 0], x)
        x_dot = np.where(done, init[:, 1], x_dot)
        theta = np.where(done, init[:, 2], theta)
        theta_dot = np.where(done, init[:, 3], theta_dot)
    states = np.stack([x, x_dot, theta, theta_dot], axis=1)
    return ReferenceRollout(RolloutResult(states, episodes, reward_sum), margin)
