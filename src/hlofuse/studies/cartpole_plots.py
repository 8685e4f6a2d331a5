"""The CartPole study's plots: speedup over the baseline per step, env-steps/s against N."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

from hlofuse.studies.formatting import format_rate

if TYPE_CHECKING:
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure

    from hlofuse.studies.cartpole_study import StudyResult


def _figure() -> Figure:
    from matplotlib.figure import Figure  # no pyplot: files only, never a window

    return Figure(figsize=(8.5, 5.2))


def _plain_ticks(axis: Axis, label: Callable[[float], str] = lambda value: f"{value:g}") -> None:
    """Log-scale ticks at 1, 2, 5 times powers of ten, labelled as plain numbers."""
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: label(value)))
    axis.set_minor_formatter(NullFormatter())


def _title(result: StudyResult, what: str, clock: str) -> str:
    threads = result.machine.get("omp_num_threads") or result.machine.get("usable_cores")
    per = "CPU-second" if clock == "cpu" else "second"
    return (f"CartPole on hlofuse: {what} per {per}, T={result.config.steps} "
            f"({result.machine.get('cpu')}, OpenMP threads: {threads})")


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def write_speedup_plot(result: StudyResult, path: Path, clock: str = "wall") -> None:
    """Speedup over the baseline for each step of the sequence, one bar per N (log scale)."""
    fig = _figure()
    ax = fig.add_subplot()
    steps = [s.name for s in result.steps]
    envs = sorted({r.envs for r in result.records})
    width = 0.8 / max(len(envs), 1)
    for k, n in enumerate(envs):
        by_step = {r.step: r.speedup(clock) for r in result.records if r.envs == n}
        xs = [i + (k - (len(envs) - 1) / 2) * width for i in range(len(steps))]
        bars = ax.bar(xs, [by_step.get(s, 0.0) for s in steps], width, label=f"N={n}")
        ax.bar_label(bars, fmt="%.2g", fontsize=6)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    _plain_ticks(ax.yaxis)
    ax.set_xticks(range(len(steps)), steps, rotation=20, ha="right")
    ax.set_ylabel("speedup over baseline")
    ax.set_title(_title(result, "speedup", clock), fontsize=9)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)


def write_rates_plot(result: StudyResult, path: Path, clock: str = "wall") -> None:
    """env-steps/s against N for every step, log axes."""
    fig = _figure()
    ax = fig.add_subplot()
    for step in result.steps:
        rows = sorted((r for r in result.records if r.step == step.name), key=lambda r: r.envs)
        style = "--" if step.strategy == "none" else "-"
        ax.plot([r.envs for r in rows], [r.rate(clock) for r in rows], style, marker="o",
                label=f"{step.name} ({step.strategy})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    envs = sorted({r.envs for r in result.records})
    ax.set_xticks(envs, [str(n) for n in envs])
    ax.xaxis.set_minor_locator(NullLocator())
    _plain_ticks(ax.yaxis, format_rate)
    ax.set_xlabel("environments N")
    ax.set_ylabel("env-steps per CPU-second" if clock == "cpu" else "env-steps/s")
    ax.set_title(_title(result, "env-steps", clock), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)
