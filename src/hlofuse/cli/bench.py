"""`hlofuse bench peers`: the CartPole peers side by side; table, results/peers.json, plot."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from hlofuse import targets
from hlofuse.cli.errors import UsageError
from hlofuse.cli.options import (
    check_not_negative,
    check_positive,
    check_positive_float,
    check_seed,
    parse_positive_list,
)
from hlofuse.studies.formatting import format_rate
from hlofuse.studies.peers.bench import (
    BenchConfig,
    BenchResult,
    run_bench,
    write_json,
    write_plot,
)
from hlofuse.studies.peers.registry import PeerRegistry, default_registry

if TYPE_CHECKING:
    from rich.table import Table

BENCH_DEFAULT_ENVS = "1,64,1024,16384"
DEFAULTS = BenchConfig()


def add_bench_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser("bench", help="benchmarks")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True)
    p = bench_sub.add_parser(
        "peers",
        help="the CartPole workload in NumPy, Gymnasium, JAX, PyTorch, C and hlofuse",
        description="Runs the CartPole workload in every installed peer on this machine and "
        "reports env-steps/s per N and each peer's ratio to hlofuse's best (to the C kernel "
        "while hlofuse has no compiled CartPole).",
    )
    p.add_argument("--envs", default=BENCH_DEFAULT_ENVS,
                   help=f"comma-separated environment counts (default {BENCH_DEFAULT_ENVS})")
    p.add_argument("--steps", type=int, default=DEFAULTS.steps,
                   help=f"steps per rollout for compiled peers (default {DEFAULTS.steps}; "
                   "fewer at large N, see --max-work)")
    p.add_argument("--eager-steps", type=int, default=DEFAULTS.eager_steps,
                   help="steps per rollout for peers driven from Python each step "
                   f"(default {DEFAULTS.eager_steps})")
    p.add_argument("--max-work", type=int, default=DEFAULTS.max_work, metavar="ENV_STEPS",
                   help="at most this many env-steps per rollout of a compiled peer, a quarter "
                   f"of it for eager peers, at least {DEFAULTS.min_steps} steps (default "
                   f"{DEFAULTS.max_work}; 0: always the full --steps)")
    p.add_argument("--repeats", type=int, default=DEFAULTS.repeats,
                   help="timed rollouts per peer and N; the median is kept "
                   f"(default {DEFAULTS.repeats})")
    p.add_argument("--budget", type=float, default=DEFAULTS.budget_s, metavar="SECONDS",
                   help="at most about this long for one peer's timed rollouts at one N; "
                   f"fewer repeats (at least 1) when the warm-up says so (default "
                   f"{DEFAULTS.budget_s:g})")
    p.add_argument("--peers", default="",
                   help="comma-separated peer names (default: every peer but the extra hlofuse "
                   "strategies); `--peers list` lists them")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--out", default="results", help="output folder (default results/)")
    p.set_defaults(handler=cmd_bench_peers)
    r = bench_sub.add_parser(
        "rollouts",
        help="the rollout corpus under xla, priority, max and JAX jit on CPU",
        description="Exports every rollout of the corpus from JAX at N lanes and T steps, "
        "compiles it under each strategy and times it next to JAX's jit in the same run: "
        "env-steps/s, kernels per step, cold compile time, equality with JAX.",
    )
    r.add_argument("--lanes", type=int, default=4096, help="N, lanes per rollout (default 4096)")
    r.add_argument("--steps", type=int, default=200, help="T, steps per rollout (default 200)")
    r.add_argument("--repeats", type=int, default=3,
                   help="timed rollouts per runner; the median is kept (default 3)")
    r.add_argument("--programs", default="", help="comma-separated names (default: all)")
    r.add_argument("--corpus", default="tests/data/rollouts",
                   help="folder of the corpus' programs.py (default tests/data/rollouts)")
    r.add_argument("--threads", type=int, default=0,
                   help="threads for both JAX (XLA's CPU thread pool) and hlofuse (OpenMP); "
                   "default: each library's own default")
    r.add_argument("--backend", choices=targets.names(compiled_only=True),
                   default=targets.names()[0],
                   help=f"where hlofuse's kernels run: {targets.help_text(compiled_only=True)}")
    r.add_argument("--out", default="results", help="output folder (default results/)")
    r.set_defaults(handler=cmd_bench_rollouts)


def cmd_bench_peers(args: argparse.Namespace) -> int:
    registry = default_registry()
    if args.peers.strip() == "list":
        for peer in registry:
            default = "" if peer.is_default else " (only when named)"
            print(f"{peer.name:20} {peer.description}{default}")
        return 0
    selected = [p.strip() for p in args.peers.split(",") if p.strip()]
    selected = selected or registry.default_names()
    unknown = [p for p in selected if p not in registry]
    if unknown:
        raise UsageError(
            f"--peers: unknown peer {unknown[0]!r} (known: {', '.join(registry.names())})"
        )
    check_seed(args.seed)
    config = BenchConfig(
        envs=parse_positive_list(args.envs, "--envs"),
        steps=check_positive(args.steps, "--steps"),
        eager_steps=check_positive(args.eager_steps, "--eager-steps"),
        repeats=check_positive(args.repeats, "--repeats"),
        seed=args.seed,
        budget_s=check_positive_float(args.budget, "--budget"),
        max_work=check_not_negative(args.max_work, "--max-work"),
        max_eager_work=max(args.max_work // 4, 1) if args.max_work else 0,
    )
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out: {out} exists and is not a folder")
    return run_and_report(registry, selected, config, out)


def run_and_report(
    registry: PeerRegistry, selected: list[str], config: BenchConfig, out: Path
) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console()
    for note in registry.notes:
        console.print(f"[yellow]note:[/] {note}")
    total = len(selected) * len(config.envs)
    columns = (
        TextColumn("{task.description:28}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("starting", total=total)
        result = run_bench(
            registry, selected, config,
            on_task=lambda label: progress.update(task, description=label),
            on_done=lambda: progress.advance(task),
        )
    for skip in result.skipped:
        console.print(f"[yellow]skipped {skip.peer}:[/] {escape(skip.note)}")
    for table in results_tables(result):
        console.print(table)
    json_path, plot_path = out / "peers.json", out / "peers.png"
    write_json(result, json_path)
    if result.records:
        write_plot(result, plot_path)
        console.print(f"wrote {json_path} and {plot_path}")
    else:
        console.print(f"wrote {json_path} (no records, no plot)")
    return 0


def results_tables(result: BenchResult) -> tuple[Table, Table]:
    """env-steps/s per peer and N, and the same as ratios to the reference."""
    from rich.table import Table

    envs = sorted({r.envs for r in result.records})
    references = {r.envs: r.reference for r in result.records if r.reference}
    rates = Table(title="CartPole peers: env-steps/s")
    ratios = Table(title="ratio to the reference at each N (hlofuse best, else the C kernel)")
    for table in (rates, ratios):
        table.add_column("peer", no_wrap=True)
        for n in envs:
            table.add_column(f"N={n}", justify="right", no_wrap=True)
    rates.add_column("compile s", justify="right", no_wrap=True)
    for name in dict.fromkeys(r.peer for r in result.records):
        by_n = {r.envs: r for r in result.records if r.peer == name}
        rate_cells, ratio_cells = [], []
        for n in envs:
            r = by_n.get(n)
            rate_cells.append("-" if r is None else format_rate(r.env_steps_per_s))
            ratio_cells.append("-" if r is None or r.ratio is None else f"{r.ratio:.3g}")
        compile_s = max((r.compile_s for r in by_n.values()), default=0.0)
        rates.add_row(name, *rate_cells, f"{compile_s:.1f}")
        ratios.add_row(name, *ratio_cells)
    if references:
        ratios.caption = "reference: " + "; ".join(f"N={n}: {references[n]}" for n in references)
    return rates, ratios


def cmd_bench_rollouts(args: argparse.Namespace) -> int:
    from hlofuse.studies.rollouts_bench import (
        RolloutsConfig,
        limit_threads,
        run_rollouts,
        table_rows,
    )
    from hlofuse.studies.rollouts_bench import write_json as write_rollouts_json
    from hlofuse.studies.rollouts_bench import write_plot as write_rollouts_plot

    check_positive(args.lanes, "--lanes")
    check_positive(args.steps, "--steps")
    check_positive(args.repeats, "--repeats")
    names = tuple(n.strip() for n in args.programs.split(",") if n.strip())
    if args.threads:
        check_positive(args.threads, "--threads")
        limit_threads(args.threads)
    config = RolloutsConfig(args.lanes, args.steps, args.repeats, Path(args.corpus), names,
                            threads=args.threads or None, backend=args.backend)
    try:
        result = run_rollouts(config)
    except FileNotFoundError as e:
        raise UsageError(f"bench rollouts: {e}") from None
    except KeyError as e:
        raise UsageError(f"bench rollouts: {e.args[0]}") from None
    out = Path(args.out)
    write_rollouts_json(result, out / "rollouts.json")
    plotted = write_rollouts_plot(result, out / "rollouts.png")
    header = ["program", "runner", "env-steps/s", "x JAX", "kernels/step", "compile s",
              "equal", "note"]
    print(" | ".join(header))
    for row in table_rows(result):
        print(" | ".join(row))
    for strategy in config.strategies:
        geomean = result.geomean(strategy)
        if geomean is not None:
            print(f"{strategy}: geomean {geomean:.2f}x JAX")
    print(f"wrote {out / 'rollouts.json'}" + (f" and {out / 'rollouts.png'}" if plotted else ""))
    return 0
