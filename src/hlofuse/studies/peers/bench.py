"""Measure every peer on the same workload, side by side in one run; the table, JSON and plot.

For each (peer, N): build (compile) and time it, run once to warm up, then time `repeats`
whole rollouts and keep the median; when the warm-up says those would take longer than
`budget_s`, fewer (at least one), so that one slow peer cannot take over the run.
env-steps/s = N * steps / median seconds. The metric is per step, so a rollout's length
adapts: compiled peers run `steps` steps, eager peers (Python drives every step) run
`eager_steps`, and at large N either runs fewer, so that one rollout is at most `max_work`
(`max_eager_work`) environment-steps, and never fewer than `min_steps`; every peer at one N
compiled alike runs the same length. At each N the reference is the fastest hlofuse peer
("hlofuse best"), or the fastest C kernel while hlofuse has none, and every record carries
its ratio to that reference.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from hlofuse.studies.peers.registry import Peer, PeerRegistry, PeerUnavailable
from hlofuse.studies.peers.workload import Workload, initial_states

C_REFERENCE_PEERS = ("c", "c-scalar")
VERSIONED_PACKAGES = ("numpy", "jax", "jaxlib", "torch", "gymnasium", "rich", "matplotlib")
PRELIMINARY_NOTE = (
    "Preliminary: measured on a machine shared with other work; figures are noisy."
)


@dataclass(frozen=True, slots=True)
class BenchConfig:
    envs: tuple[int, ...] = (1, 64, 1024, 16384)
    steps: int = 1000
    eager_steps: int = 100
    repeats: int = 5
    seed: int = 0
    budget_s: float = 1.5
    max_work: int = 1 << 22  # env-steps of one compiled rollout, at most (0: no limit)
    max_eager_work: int = 1 << 20  # the same for eager peers
    min_steps: int = 20

    def rollout_steps(self, is_eager: bool, n_envs: int) -> int:
        """Steps of one rollout of a peer at N = n_envs (see the module docstring)."""
        steps, work = (self.eager_steps, self.max_eager_work) if is_eager else (
            self.steps, self.max_work)
        if work > 0:
            steps = min(steps, max(self.min_steps, work // n_envs))
        return steps


@dataclass(frozen=True, slots=True)
class Measurement:
    """One peer at one N. `ratio` is env_steps_per_s over the reference's at that N (None
    when no reference peer ran)."""

    peer: str
    envs: int
    steps: int
    repeats: int
    seconds: float
    env_steps_per_s: float
    compile_s: float
    episodes: int
    return_sum: float
    reference: str | None = None
    ratio: float | None = None


@dataclass(frozen=True, slots=True)
class Skip:
    peer: str
    note: str


@dataclass(frozen=True, slots=True)
class BenchResult:
    config: BenchConfig
    records: tuple[Measurement, ...]
    skipped: tuple[Skip, ...]
    notes: tuple[str, ...]
    machine: dict[str, object]


def measure(peer: Peer, workload: Workload, repeats: int, budget_s: float) -> Measurement:
    """Build, warm up and time one peer on one workload."""
    start = time.perf_counter()
    runner = peer.factory(workload)
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    result = runner.run()
    warm_up_s = time.perf_counter() - start
    repeats = max(1, min(repeats, int(budget_s / warm_up_s) if warm_up_s > 0 else repeats))
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = runner.run()
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    rate = workload.n_envs * workload.n_steps / median if median > 0 else float("inf")
    return Measurement(
        peer=peer.name,
        envs=workload.n_envs,
        steps=workload.n_steps,
        repeats=repeats,
        seconds=median,
        env_steps_per_s=rate,
        compile_s=compile_s,
        episodes=result.episodes,
        return_sum=result.return_sum,
    )


def with_ratios(records: Sequence[Measurement], registry: PeerRegistry) -> list[Measurement]:
    """Each record with its reference at that N and its ratio to it."""
    out = []
    for n in sorted({r.envs for r in records}):
        at_n = [r for r in records if r.envs == n]
        hlofuse = [r for r in at_n if r.peer in registry and registry[r.peer].is_hlofuse]
        candidates = hlofuse or [r for r in at_n if r.peer in C_REFERENCE_PEERS]
        best = max(candidates, key=lambda r: r.env_steps_per_s, default=None)
        for r in at_n:
            if best is None:
                out.append(r)
                continue
            name = best.peer if hlofuse else f"{best.peer} (C kernel, no hlofuse peer)"
            ratio = r.env_steps_per_s / best.env_steps_per_s
            out.append(replace(r, reference=name, ratio=ratio))
    return out


def run_bench(
    registry: PeerRegistry,
    selected: Sequence[str],
    config: BenchConfig,
    on_task: Callable[[str], None] = lambda label: None,
    on_done: Callable[[], None] = lambda: None,
) -> BenchResult:
    """Measure the selected peers at every N; `on_task`/`on_done` drive a progress display."""
    records: list[Measurement] = []
    skipped: list[Skip] = []
    inits = {n: initial_states(n, config.seed) for n in config.envs}
    for name in selected:
        peer = registry[name]
        note = peer.availability()
        if note is not None:
            skipped.append(Skip(name, note))
            for _ in config.envs:
                on_done()
            continue
        for n in config.envs:
            on_task(f"{name} N={n}")
            steps = config.rollout_steps(peer.is_eager, n)
            workload = Workload(inits[n], steps, seed=config.seed)
            try:
                records.append(measure(peer, workload, config.repeats, config.budget_s))
            except PeerUnavailable as e:
                skipped.append(Skip(name, str(e)))
                for _ in config.envs[config.envs.index(n) :]:
                    on_done()
                break
            on_done()
    return BenchResult(
        config=config,
        records=tuple(with_ratios(records, registry)),
        skipped=tuple(skipped),
        notes=tuple(registry.notes),
        machine=machine_description(),
    )


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_title(machine: dict[str, object]) -> str:
    """The machine a result was measured on, in a few words: CPU model and usable cores."""
    cores = machine.get("usable_cores") or machine.get("cores")
    return f"{machine.get('cpu', 'unknown CPU')}" + (f", {cores} cores" if cores else "")


def machine_description() -> dict[str, object]:
    from hlofuse.toolchain import Compiler, ToolchainError

    versions: dict[str, str] = {}
    for package in VERSIONED_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        cc: str | None = Compiler.find().version
    except ToolchainError:
        cc = None
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cc": cc,
        "versions": versions,
        "jax_devices": _jax_devices(),
    }


def _jax_devices() -> list[str] | None:
    """The devices JAX's peers ran on (a TPU or GPU where JAX finds one, else the CPU): only
    when JAX was imported by a peer, so that a run without JAX peers never loads it."""
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    try:
        return [str(d) for d in jax.devices()]
    except RuntimeError:
        return None


def result_json(result: BenchResult) -> dict[str, object]:
    return {
        "preliminary": PRELIMINARY_NOTE,
        "machine": result.machine,
        "config": asdict(result.config),
        "records": [asdict(r) for r in result.records],
        "skipped": [asdict(s) for s in result.skipped],
        "notes": list(result.notes),
    }


def write_json_file(data: object, path: Path) -> None:
    """`data` as indented JSON, replacing `path` at once: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def write_json(result: BenchResult, path: Path) -> None:
    write_json_file(result_json(result), path)


def write_plot(result: BenchResult, path: Path) -> None:
    """env-steps/s against N for every peer, log axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 6))
    peers = list(dict.fromkeys(r.peer for r in result.records))
    palette = plt.get_cmap("tab20")  # qualitative: its N entries are distinct colours
    colors = [palette(i) for i in range(palette.N)]
    markers = "osD^v<>ph*"
    for i, name in enumerate(peers):
        rows = sorted((r for r in result.records if r.peer == name), key=lambda r: r.envs)
        # hlofuse thick, the C kernels dashed: the two lines every ratio is read against.
        is_hlofuse = name.startswith("hlofuse")
        ax.plot(
            [r.envs for r in rows], [r.env_steps_per_s for r in rows],
            "--" if name in C_REFERENCE_PEERS else "-",
            marker=markers[i % len(markers)], color=colors[i % len(colors)],
            linewidth=3 if is_hlofuse else 1.5, label=name,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("environments N")
    ax.set_ylabel("env-steps/s")
    ax.set_title(f"CartPole peers: measured on {machine_title(result.machine)}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
