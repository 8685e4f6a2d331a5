"""Peers as data: what each one is called, how it is built for a workload, and the registry.

A peer's `factory` takes a `Workload` and returns a `Runner` whose `run()` performs the whole
rollout from the workload's initial states and returns the result as NumPy values. Building
(tracing, compiling, loading) happens in the factory, so `run()` is what gets timed. A factory
raises `PeerUnavailable` when something it needs is missing; `availability` says so earlier,
without building anything.

The registry is an ordinary object built by `default_registry()`, not module state. hlofuse's
own compiled rollout joins it through `register_peer` with `is_hlofuse=True`; the benchmark
takes the fastest such peer at each N as "hlofuse best", the denominator of every ratio.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from hlofuse.studies.peers.workload import RolloutResult, Workload


class PeerUnavailable(Exception):
    """A peer cannot run here; the message says what is missing."""


class Runner(Protocol):
    def run(self) -> RolloutResult: ...


PeerFactory = Callable[[Workload], Runner]


def always_available() -> str | None:
    return None


@dataclass(frozen=True, slots=True)
class Peer:
    """One way to run the workload.

    `is_eager` peers pay interpreter or dispatch overhead on every step, so the benchmark runs
    them for fewer steps (the metric is per step). `availability` returns None when the peer
    can run, else a one-line note saying why not. Peers that are not `is_default` run only
    when named with --peers.
    """

    name: str
    description: str
    factory: PeerFactory
    is_eager: bool = False
    is_hlofuse: bool = False
    is_default: bool = True
    availability: Callable[[], str | None] = always_available


@dataclass(slots=True)
class PeerRegistry:
    """Peers by name, in registration order, and notes about peers that could not join."""

    peers: dict[str, Peer] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def register_peer(self, peer: Peer) -> None:
        if peer.name in self.peers:
            raise ValueError(f"peer {peer.name!r} is registered twice")
        self.peers[peer.name] = peer

    def __iter__(self) -> Iterator[Peer]:
        return iter(self.peers.values())

    def __contains__(self, name: object) -> bool:
        return name in self.peers

    def __getitem__(self, name: str) -> Peer:
        return self.peers[name]

    def names(self) -> list[str]:
        return list(self.peers)

    def default_names(self) -> list[str]:
        return [p.name for p in self.peers.values() if p.is_default]


def default_registry() -> PeerRegistry:
    """Every built-in peer, then hlofuse's compiled rollout where it exists."""
    from hlofuse.studies.peers import (
        c_peer,
        cuda_peer,
        gymnasium_peer,
        hlofuse_peer,
        jax_peer,
        numpy_peer,
        torch_peer,
    )

    registry = PeerRegistry()
    for module in (numpy_peer, gymnasium_peer, jax_peer, torch_peer, c_peer, cuda_peer):
        for peer in module.peers():
            registry.register_peer(peer)
    note = hlofuse_peer.register_hlofuse_peers(registry)
    if note is not None:
        registry.notes.append(note)
    return registry
