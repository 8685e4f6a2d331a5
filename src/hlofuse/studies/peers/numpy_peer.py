"""NumPy peer: the workload written vectorised over environments, run eagerly step by step."""

from __future__ import annotations

import numpy as np

from hlofuse.studies.peers import workload as w
from hlofuse.studies.peers.registry import Peer
from hlofuse.studies.peers.workload import RolloutResult, Workload

F32 = np.float32


def step_dynamics(
    action: np.ndarray, x: np.ndarray, x_dot: np.ndarray, theta: np.ndarray,
    theta_dot: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One Euler step of every environment in float32; returns the new state and `done`."""
    force = np.where(action, F32(w.FORCE_MAG), F32(-w.FORCE_MAG))
    c, s = np.cos(theta), np.sin(theta)
    temp = (force + F32(w.POLEMASS_LENGTH) * theta_dot * theta_dot * s) / F32(w.TOTAL_MASS)
    denom = F32(w.LENGTH) * (F32(4.0 / 3.0) - F32(w.MASSPOLE) * c * c / F32(w.TOTAL_MASS))
    thetaacc = (F32(w.GRAVITY) * s - c * temp) / denom
    xacc = temp - F32(w.POLEMASS_LENGTH) * thetaacc * c / F32(w.TOTAL_MASS)
    x_new = x + F32(w.TAU) * x_dot
    x_dot_new = x_dot + F32(w.TAU) * xacc
    theta_new = theta + F32(w.TAU) * theta_dot
    theta_dot_new = theta_dot + F32(w.TAU) * thetaacc
    done = (np.abs(x_new) > F32(w.X_THRESHOLD)) | (np.abs(theta_new) > F32(w.THETA_THRESHOLD))
    return x_new, x_dot_new, theta_new, theta_dot_new, done


class NumpyRunner:
    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.env = np.arange(workload.n_envs, dtype=np.uint32)

    def run(self) -> RolloutResult:
        wl = self.workload
        init = wl.initial
        x, x_dot, theta, theta_dot = (init[:, k].copy() for k in range(4))
        episodes = np.zeros(wl.n_envs, dtype=np.int32)
        rewards = np.zeros(wl.n_envs, dtype=np.float32)
        seed = wl.seed
        for t in range(wl.n_steps):
            step = np.uint32(t)
            if wl.deterministic:
                action = w.policy_value(theta, theta_dot) > 0
                reset = (init[:, 0], init[:, 1], init[:, 2], init[:, 3])
            else:
                a0, a1 = w.threefry2x32(seed, 0, self.env, step)
                b0, b1 = w.threefry2x32(seed, 1, self.env, step)
                c0, _ = w.threefry2x32(seed, 2, self.env, step)
                action = (a0 >> np.uint32(31)).astype(bool)
                reset = tuple(w.uniform_reset(bits) for bits in (a1, b0, b1, c0))
            x, x_dot, theta, theta_dot, done = step_dynamics(action, x, x_dot, theta, theta_dot)
            episodes += done
            rewards += F32(1.0)
            x = np.where(done, reset[0], x)
            x_dot = np.where(done, reset[1], x_dot)
            theta = np.where(done, reset[2], theta)
            theta_dot = np.where(done, reset[3], theta_dot)
        states = np.stack([x, x_dot, theta, theta_dot], axis=1)
        return RolloutResult(states, int(episodes.sum()), float(rewards.sum(dtype=np.float64)))


def peers() -> list[Peer]:
    return [
        Peer(
            "numpy",
            "NumPy, vectorised over environments, eager",
            NumpyRunner,
            is_eager=True,
        )
    ]
