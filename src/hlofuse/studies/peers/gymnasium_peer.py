"""Gymnasium peer: its own vectorised CartPole (`CartPoleVectorEnv`), stepped from Python.

What a Gymnasium user gets, with two differences from the fixed workload that belong to
Gymnasium and are kept: the environment computes in float64, and it resets the step *after*
an episode ends (its `NEXT_STEP` autoreset mode), drawing reset states from its own
generator (PCG64, seeded with the workload's seed). Actions come from the shared
counter-based scheme (workload.py), so the policy costs what it costs the other eager peers.
Truncation is switched off (the workload has none). Gymnasium reports no episode lengths, so
the runner counts them itself to give the same outputs as the other peers.

The deterministic variant drives the same `step` for the dynamics and does the reset itself:
after each step, finished environments get their initial state back and Gymnasium's pending
reset is cleared, so the env's own dynamics are what the check compares.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from hlofuse.studies.peers import workload as w
from hlofuse.studies.peers.registry import Peer, PeerUnavailable
from hlofuse.studies.peers.workload import RolloutResult, Workload

NO_TRUNCATION = 2**31 - 1


def availability() -> str | None:
    if importlib.util.find_spec("gymnasium") is None:
        return "gymnasium is not installed (pip install -e '.[dev]')"
    try:
        from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv  # noqa: F401
    except ImportError:
        return "this gymnasium has no CartPoleVectorEnv (needs gymnasium >= 1.0)"
    return None


class GymnasiumRunner:
    def __init__(self, workload: Workload) -> None:
        note = availability()
        if note is not None:
            raise PeerUnavailable(note)
        from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

        self.workload = workload
        self.env: Any = CartPoleVectorEnv(
            num_envs=workload.n_envs, max_episode_steps=NO_TRUNCATION
        )
        self.env_index = np.arange(workload.n_envs, dtype=np.uint32)

    def run(self) -> RolloutResult:
        wl = self.workload
        env = self.env
        env.reset(seed=wl.seed)
        # Start from the workload's states, as every peer does; Gymnasium keeps (4, N) float64.
        env.state = wl.initial.T.astype(np.float64)
        keys = w.step_keys(wl.seed, wl.n_steps)
        length = np.zeros(wl.n_envs, dtype=np.int64)
        episodes = 0
        return_sum = 0.0
        for t in range(wl.n_steps):
            if wl.deterministic:
                action = w.policy_value(env.state[2], env.state[3]) > 0
            else:
                bits = w.random_bits((keys.action0[t], keys.action1[t]), self.env_index)
                action = w.action_from_bits(bits)
            _, reward, terminated, _, _ = env.step(action.astype(np.int64))
            length += reward.astype(np.int64)
            episodes += int(terminated.sum())
            return_sum += float(length[terminated].sum())
            length[terminated] = 0
            if wl.deterministic:
                env.state[:, terminated] = wl.initial[terminated].T
                env.prev_done[:] = False
        states = np.asarray(env.state.T, dtype=np.float32)
        return RolloutResult(states, episodes, return_sum)


def peers() -> list[Peer]:
    return [
        Peer(
            "gymnasium",
            "Gymnasium CartPoleVectorEnv (float64, next-step autoreset), eager",
            GymnasiumRunner,
            is_eager=True,
            availability=availability,
        )
    ]
