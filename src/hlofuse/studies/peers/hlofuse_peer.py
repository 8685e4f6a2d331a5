"""The "hlofuse best" slot: hlofuse's own compiled CartPole rollout among the peers.

`HlofuseRunner` runs hlofuse.envs.cartpole's scan rollout, jitted with a strategy and a
backend. Its random scheme is the peers' scheme (workload.py), so it draws the same numbers
and the agreement tests check it like any other peer. `register_hlofuse_peers` adds one
`hlofuse-<strategy>` peer per fusion strategy (except `none`), with `is_hlofuse=True`: the
benchmark's ratios are to the fastest of them at each N. Every one compiles the `baseline`
program, the one a JAX user would write (the opaque RNG call, packed state, no unrolling),
so the strategies are compared on the same input and the rewrites are the compiler's work:
`max` (the RNG expansion, the state split into its columns and whole-loop fusion) and
`priority` (the 2024 pipeline, loop kernels) run by default; the others when named with
--peers. Compiles are cached on disk (hlofuse.compile_cache): a second run loads them.

They join the benchmark only once `jit(..., backend="cpu")` really compiles, which the
architecture's `Compiled.source()` (the generated C) announces; until then the cpu backend
runs the reference interpreter, far too slow to time at N = 16384, and the slot stays empty
with a note. To add another program form or strategy, register one more `Peer` here.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from hlofuse.studies.peers.registry import Peer, PeerRegistry, PeerUnavailable
from hlofuse.studies.peers.workload import RolloutResult, Workload, initial_states

PROGRAM_PRESET = "baseline"
DEFAULT_STRATEGIES = ("max", "priority")
MISSING_NOTE = (
    "hlofuse best: hlofuse's jit does not compile yet (backend 'cpu' still runs the "
    "interpreter); ratios are to the C kernel"
)


def availability() -> str | None:
    if importlib.util.find_spec("hlofuse.envs.cartpole") is None:
        return "hlofuse.envs.cartpole is missing"
    return None


def has_compiled_backend() -> bool:
    from hlofuse import api, targets

    return "cpu" in targets.names(compiled_only=True) and callable(
        getattr(api.Compiled, "source", None))


@dataclass(frozen=True, slots=True)
class HlofuseConfig:
    strategy: str
    backend: str
    preset: str = PROGRAM_PRESET


class HlofuseRunner:
    """hlofuse's scan rollout of one preset; compiled (traced and built) by the first call."""

    def __init__(self, workload: Workload, config: HlofuseConfig) -> None:
        note = availability()
        if note is not None:
            raise PeerUnavailable(note)
        from dataclasses import replace

        from hlofuse import random
        from hlofuse.api import jit
        from hlofuse.envs import cartpole

        variant = replace(cartpole.PRESETS[config.preset], deterministic=workload.deterministic)
        if workload.deterministic:
            self.argument: Any = workload.initial
        else:
            # hlofuse's random rollout draws its initial states from the seed itself.
            if not np.array_equal(workload.initial, initial_states(workload.n_envs, workload.seed)):
                raise ValueError("hlofuse's random rollout starts from initial_states(N, seed)")
            self.argument = random.key(workload.seed)
        program = cartpole.scan_rollout(variant, workload.n_envs, workload.n_steps)
        self.rollout = jit(program, strategy=config.strategy, backend=config.backend)
        self.rollout(self.argument)

    def run(self) -> RolloutResult:
        states, finished, return_sum = self.rollout(self.argument)
        return RolloutResult(np.asarray(states), int(finished), float(return_sum))


def hlofuse_peer(strategy: str, backend: str = "cpu", is_default: bool = True,
                 preset: str = PROGRAM_PRESET) -> Peer:
    return Peer(
        f"hlofuse-{strategy}",
        f"hlofuse, strategy {strategy}, program preset '{preset}', backend {backend}",
        partial(HlofuseRunner, config=HlofuseConfig(strategy, backend, preset)),
        is_hlofuse=True,
        is_default=is_default,
        availability=availability,
    )


def register_hlofuse_peers(registry: PeerRegistry) -> str | None:
    """Register hlofuse's rollout peers; returns a note when there is nothing to register."""
    if availability() is not None or not has_compiled_backend():
        return MISSING_NOTE
    from hlofuse.fusion.strategies import STRATEGIES

    for strategy in STRATEGIES:
        if strategy != "none":
            registry.register_peer(
                hlofuse_peer(strategy, is_default=strategy in DEFAULT_STRATEGIES))
    return None
