"""PyTorch peers: the step written with tensors, run eagerly and under `torch.compile`.

PyTorch on CPU has no uint32 arithmetic (add and shifts are not implemented for it), so
Threefry runs on int32, whose addition wraps the same way; right shifts are arithmetic on
int32, so the logical shift is a shift followed by a mask. The bits are those of the shared
scheme (workload.py; the per-step keys are computed for all steps at once with NumPy at the
start of each rollout); the agreement test checks it. The compiled peer compiles one step
(`dynamic=True`, so one compilation serves every N) and calls it from Python each step, as a
PyTorch user would; a Python loop over 1000 steps inside the compiled function would be
unrolled by Dynamo into one huge graph.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from hlofuse.runtime.target import first_line
from hlofuse.studies.peers import workload as w
from hlofuse.studies.peers.registry import Peer, PeerUnavailable
from hlofuse.studies.peers.workload import RolloutResult, Workload

Tensor = Any
StepFn = Callable[..., tuple[Tensor, ...]]


def availability() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (pip install -e '.[peers]')"
    return None


def as_int32(value: int) -> int:
    """The int32 with the same 32 bits as the unsigned `value`."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def shift_right_logical(x: Tensor, r: int) -> Tensor:
    return (x >> r) & ((1 << (32 - r)) - 1)


def threefry2x32(k0: Tensor, k1: Tensor, c0: Tensor | int, c1: Tensor) -> tuple[Tensor, Tensor]:
    """Threefry-2x32-20 on int32 tensors holding uint32 bits."""
    ks = (k0, k1, k0 ^ k1 ^ as_int32(w.THREEFRY_PARITY))
    x0 = c0 + ks[0]
    x1 = c1 + ks[1]
    for i in range(20):
        r = w.THREEFRY_ROTATIONS[i % 8]
        x0 = x0 + x1
        x1 = (x1 << r) | shift_right_logical(x1, 32 - r)
        x1 = x1 ^ x0
        if i % 4 == 3:
            s = (i + 1) // 4
            x0 = x0 + ks[s % 3]
            x1 = x1 + ks[(s + 1) % 3] + s
    return x0, x1


def random_bits(k0: Tensor, k1: Tensor, counters: Tensor) -> Tensor:
    y0, y1 = threefry2x32(k0, k1, 0, counters)
    return y0 ^ y1


def uniform_reset(bits: Tensor) -> Tensor:
    import torch

    one_to_two = (shift_right_logical(bits, 9) | w.FLOAT_ONE_BITS).view(torch.float32)
    span = float(np.float32(w.RESET_HIGH) - np.float32(w.RESET_LOW))
    return ((one_to_two - 1.0) * span + w.RESET_LOW).clamp_min(w.RESET_LOW)


def cartpole_step(
    x: Tensor, x_dot: Tensor, theta: Tensor, theta_dot: Tensor, length: Tensor,
    returns: Tensor, episodes: Tensor, ix: Tensor, ix_dot: Tensor, itheta: Tensor,
    itheta_dot: Tensor, env: Tensor, reset_counters: Tensor, key: Tensor, deterministic: bool,
) -> tuple[Tensor, ...]:
    """One step of every environment with auto-reset; `key` is the step's (ka0, ka1, kr0, kr1).

    Returns the new state and the new per-environment counters (length, returns, episodes).
    """
    import torch

    if deterministic:
        action = theta_dot + w.POLICY_GAIN * theta > 0
        reset = (ix, ix_dot, itheta, itheta_dot)
    else:
        action = random_bits(key[0], key[1], env) >= 0  # top bit clear: uniform < 0.5
        values = uniform_reset(random_bits(key[2], key[3], reset_counters)).view(4, -1)
        reset = (values[0], values[1], values[2], values[3])
    force = torch.where(action, w.FORCE_MAG, -w.FORCE_MAG)
    c, s = torch.cos(theta), torch.sin(theta)
    temp = (force + w.POLEMASS_LENGTH * theta_dot * theta_dot * s) / w.TOTAL_MASS
    denom = w.LENGTH * (4.0 / 3.0 - w.MASSPOLE * c * c / w.TOTAL_MASS)
    thetaacc = (w.GRAVITY * s - c * temp) / denom
    xacc = temp - w.POLEMASS_LENGTH * thetaacc * c / w.TOTAL_MASS
    x_new = x + w.TAU * x_dot
    x_dot_new = x_dot + w.TAU * xacc
    theta_new = theta + w.TAU * theta_dot
    theta_dot_new = theta_dot + w.TAU * thetaacc
    done = (x_new.abs() > w.X_THRESHOLD) | (theta_new.abs() > w.THETA_THRESHOLD)
    length = length + 1.0
    return (
        torch.where(done, reset[0], x_new),
        torch.where(done, reset[1], x_dot_new),
        torch.where(done, reset[2], theta_new),
        torch.where(done, reset[3], theta_dot_new),
        torch.where(done, 0.0, length),
        returns + torch.where(done, length, 0.0),
        episodes + done.to(torch.int32),
    )


class TorchRunner:
    """Runs the step from Python; `compiled` wraps it in torch.compile first."""

    def __init__(self, workload: Workload, compiled: bool) -> None:
        note = availability()
        if note is not None:
            raise PeerUnavailable(note)
        import torch

        self.workload = workload
        self.init = [torch.from_numpy(workload.initial[:, k].copy()) for k in range(4)]
        n = workload.n_envs
        self.env = torch.arange(n, dtype=torch.int32)
        self.reset_counters = torch.arange(4 * n, dtype=torch.int32)
        step = partial(cartpole_step, deterministic=workload.deterministic)
        self.step: StepFn = step
        if compiled:
            self.step = torch.compile(step, dynamic=True, fullgraph=True)
            try:
                self.run_steps(1)  # compiles; failures surface here, not in the timing
            except Exception as e:  # torch raises many types; the note keeps the first line
                raise PeerUnavailable(f"torch.compile failed: {first_line(e)}") from e

    def key_table(self, n_steps: int) -> Tensor:
        """(T, 4) int32: every step's action and reset key words."""
        import torch

        keys = w.step_keys(self.workload.seed, n_steps)
        table = np.stack([keys.action0, keys.action1, keys.reset0, keys.reset1], axis=1)
        return torch.from_numpy(table.view(np.int32))

    def run_steps(self, n_steps: int) -> RolloutResult:
        import torch

        n = self.workload.n_envs
        state = [t.clone() for t in self.init]
        counters = [torch.zeros(n), torch.zeros(n), torch.zeros(n, dtype=torch.int32)]
        keys = self.key_table(n_steps)
        with torch.no_grad():
            for t in range(n_steps):
                *state, length, returns, episodes = self.step(
                    *state, *counters, *self.init, self.env, self.reset_counters, keys[t]
                )
                counters = [length, returns, episodes]
        states = torch.stack(state, dim=1).numpy()
        return RolloutResult(
            np.asarray(states), int(counters[2].sum()), float(counters[1].double().sum())
        )

    def run(self) -> RolloutResult:
        return self.run_steps(self.workload.n_steps)


def peers() -> list[Peer]:
    return [
        Peer(
            "torch-eager",
            "PyTorch eager, split state, step called from Python",
            partial(TorchRunner, compiled=False),
            is_eager=True,
            availability=availability,
        ),
        Peer(
            "torch-compile",
            "torch.compile of one step (inductor, dynamic shapes), called from Python",
            partial(TorchRunner, compiled=True),
            is_eager=True,
            availability=availability,
        ),
    ]
