"""The "hlofuse best" slot: where hlofuse's own compiled CartPole rollout joins the peers.

To plug it in, register one `Peer` per strategy worth showing (for example `hlofuse-max`)
with `is_hlofuse=True` in `register_hlofuse_peers`. Its factory gets the `Workload` (initial
states (N, 4) float32, steps, seed, `deterministic`) and compiles; its runner's `run()` does
the whole rollout under the shared random scheme of workload.py (and the deterministic
variant when asked) and returns a `RolloutResult`. The benchmark then takes the fastest
`is_hlofuse` peer at each N as the denominator of every ratio, and the agreement test in
tests/studies/test_peers.py checks it like every other peer.
"""

from __future__ import annotations

import importlib.util

from hlofuse.studies.peers.registry import PeerRegistry

MISSING_NOTE = (
    "hlofuse best: no compiled hlofuse CartPole yet (needs hlofuse.envs.cartpole and "
    "hlofuse.api); ratios are to the C kernel"
)


def hlofuse_backend_exists() -> bool:
    try:
        return all(
            importlib.util.find_spec(name) is not None
            for name in ("hlofuse.envs", "hlofuse.envs.cartpole", "hlofuse.api")
        )
    except ModuleNotFoundError:
        return False


def register_hlofuse_peers(registry: PeerRegistry) -> str | None:
    """Register hlofuse's rollout peers; returns a note when there is nothing to register."""
    del registry  # nothing to register until hlofuse compiles the CartPole rollout
    if not hlofuse_backend_exists():
        return MISSING_NOTE
    return (
        "hlofuse best: hlofuse.envs.cartpole exists but no peer adapter is registered in "
        "studies/peers/hlofuse_peer.py yet; ratios are to the C kernel"
    )
