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
        self.reset_counters = np.arange(4 * workload.n_envs, dtype=np.uint32)

    def run(self) -> RolloutResult:
        wl = self.workload
        init = wl.initial
        x, x_dot, theta, theta_dot = (init[:, k].copy() for k in range(4))
        length = np.zeros(wl.n_envs, dtype=np.float32)
        returns = np.zeros(wl.n_envs, dtype=np.float32)
        episodes = np.zeros(wl.n_envs, dtype=np.int32)
        keys = w.step_keys(wl.seed, wl.n_steps)
        for t in range(wl.n_steps):
            if wl.deterministic:
                action = w.policy_value(theta, theta_dot) > 0
                reset = init.T
            else:
                action_bits = w.random_bits((keys.action0[t], keys.action1[t]), self.env)
                action = w.action_from_bits(action_bits)
                reset_bits = w.random_bits((keys.reset0[t], keys.reset1[t]), self.reset_counters)
                reset = w.uniform_from_bits(reset_bits).reshape(4, wl.n_envs)
            x, x_dot, theta, theta_dot, done = step_dynamics(action, x, x_dot, theta, theta_dot)
            length += F32(1.0)
            episodes += done
            returns += np.where(done, length, F32(0.0))
            length = np.where(done, F32(0.0), length)
            x = np.where(done, reset[0], x)
            x_dot = np.where(done, reset[1], x_dot)
            theta = np.where(done, reset[2], theta)
            theta_dot = np.where(done, reset[3], theta_dot)
        states = np.stack([x, x_dot, theta, theta_dot], axis=1)
        return RolloutResult(states, int(episodes.sum()), float(returns.sum(dtype=np.float64)))


def peers() -> list[Peer]:
    return [
        Peer(
            "numpy",
            "NumPy, vectorised over environments, eager",
            NumpyRunner,
            is_eager=True,
        )
    ]
