"""`hlofuse cartpole`: the study's table measured on hlofuse (the main job, `make run`).

With `--check` it runs every program variant on the reference interpreter instead, and with
`--show-hlo VARIANT` it prints one variant's traced HLO.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from hlofuse import targets
from hlofuse.cli.errors import EXIT_WRONG_RESULT, UsageError
from hlofuse.cli.options import check_positive, check_seed, parse_positive_list
from hlofuse.studies.formatting import format_rate

if TYPE_CHECKING:
    from rich.table import Table

    from hlofuse.studies.cartpole_study import Built, StudyConfig, StudyResult, StudyStep

DEFAULT_ENVS = (1024, 16384)
DEFAULT_STEPS = 200
DEFAULT_REPEATS = 5
QUICK_ENVS = (1024,)
QUICK_STEPS = 50
QUICK_REPEATS = 1
# --check and --show-hlo run the reference interpreter or print a module: one small size.
SMALL_ENVS, SMALL_STEPS = 8, 30
CLOCKS = ("wall", "cpu")
TABLE_WIDTH = 132


def add_cartpole_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "cartpole",
        help="the CartPole study: each step compiled, checked and timed (the main job)",
        description="Runs the study's sequence on hlofuse: each step is a program variant "
        "compiled by a fusion strategy. For every step and N it checks the compiled rollout "
        "against the reference interpreter (at the smallest N), then measures kernels and "
        "bytes per step, env-steps/s (median of at least --repeats rollouts), the speedup over the "
        "baseline and the compile time; it prints a table and writes cartpole.json and two "
        "plots to --out.",
    )
    p.add_argument("--envs", help="comma-separated environment counts N (default "
                   f"{','.join(map(str, DEFAULT_ENVS))}; the study's full set is "
                   "64,1024,16384,262144; one N with --check and --show-hlo, default "
                   f"{SMALL_ENVS})")
    p.add_argument("--steps", type=int, help=f"steps T per rollout (default {DEFAULT_STEPS}; "
                   f"{SMALL_STEPS} with --check and --show-hlo)")
    p.add_argument("--variants", default="",
                   help="comma-separated steps of the sequence to run (default: every default "
                   "step; baseline is always run); `--variants list` lists them")
    p.add_argument("--strategies", default="",
                   help="comma-separated extra strategies, each run on the baseline program as "
                   "a step named after it (e.g. xla-no-merger,xla+rng_expansion)")
    p.add_argument("--repeats", type=int,
                   help=f"at least this many timed rollouts per step and N, more for short "
                   f"ones; the median is kept (default {DEFAULT_REPEATS})")
    p.add_argument("--clock", choices=CLOCKS, default="wall",
                   help="what the table and plots show: env-steps per wall-clock second "
                   "(default) or per CPU-second of this process, steadier on a busy machine "
                   "(exact with OMP_NUM_THREADS=1); the JSON has both")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--out", default="results", help="output folder (default results/)")
    p.add_argument("--ray", metavar="local[:K]|ADDRESS",
                   help="run the timed rollouts as K shards on Ray actors (hlofuse.distributed; "
                   "extra 'distributed'): local:K starts a local cluster of K CPUs, local one "
                   "of all CPUs, an address (e.g. auto, ray://head:10001) joins a cluster and "
                   "uses its CPUs; each N must be at least K")
    p.add_argument("--quick", action="store_true",
                   help=f"a short run: N={','.join(map(str, QUICK_ENVS))}, T={QUICK_STEPS}, "
                   f"{QUICK_REPEATS} repeat (explicit options still win)")
    mode = p.add_mutually_exclusive_group()
    p.add_argument("--predict", metavar="GPU",
                   help="price every step with XLA's GPU performance model on v100, a100, "
                   "h100 or h200 (compiled and profiled here, not run on a GPU; default N "
                   "16384)")
    p.add_argument("--backend", choices=targets.names(compiled_only=True),
                   default=targets.names()[0],
                   help=f"where the study's steps run: {targets.help_text(compiled_only=True)}")
    mode.add_argument("--check", action="store_true",
                      help="instead: run every program variant on the reference interpreter "
                      "and print whether they agree")
    mode.add_argument("--show-hlo", metavar="VARIANT",
                      help="instead: print the traced HLO of VARIANT, a preset or a spec such "
                      "as rng=fused,state=split,rollout=scan,unroll=10[,deterministic]")
    p.set_defaults(handler=cmd_cartpole)


def _single_size(args: argparse.Namespace) -> tuple[int, int]:
    envs = parse_positive_list(args.envs, "--envs") if args.envs else (SMALL_ENVS,)
    if len(envs) != 1:
        raise UsageError("--envs: --check and --show-hlo take one N")
    steps = SMALL_STEPS if args.steps is None else check_positive(args.steps, "--steps")
    return envs[0], steps


def cmd_cartpole(args: argparse.Namespace) -> int:
    from hlofuse.cli.cartpole_check import show_hlo, variant_table

    if args.show_hlo is not None:
        show_hlo(args.show_hlo, *_single_size(args), args.seed)
        return 0
    if args.check:
        return 0 if variant_table(*_single_size(args), args.seed) else EXIT_WRONG_RESULT
    if args.variants.strip() == "list":
        _list_steps()
        return 0
    if args.predict is not None:
        return _predict(args)
    return run_and_report(_steps(args), _config(args), Path(args.out), args.clock)


def _predict(args: argparse.Namespace) -> int:
    from hlofuse.fusion.xla_gpu.devices import UnknownDeviceError
    from hlofuse.studies.gpu_predict import predict_device, predict_study, prediction_table

    try:
        device = predict_device(args.predict)
    except UnknownDeviceError as e:
        raise UsageError(f"--predict: {e}") from None
    envs = parse_positive_list(args.envs, "--envs") if args.envs else (16384,)
    steps = check_positive(args.steps, "--steps") if args.steps is not None else DEFAULT_STEPS
    names = [s.name for s in _steps(args)]
    if "baseline" in names:
        names.remove("baseline")
    names.insert(0, "baseline")  # speedups are over it
    print(prediction_table(predict_study(names, envs, steps, args.seed, device), device))
    return 0


def _list_steps() -> None:
    from hlofuse.studies.cartpole_study import SEQUENCE, is_available

    for s in SEQUENCE:
        state = "" if is_available(s.strategy) else "  (strategy not available yet)"
        default = "" if s.is_default else "  (not run by default)"
        print(f"{s.name:16} {s.program:12} {s.strategy:24} {s.about}{default}{state}")


def _split(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _steps(args: argparse.Namespace) -> list[StudyStep]:
    from hlofuse.fusion.strategies import StrategyError, parse_strategy
    from hlofuse.studies.cartpole_study import select_steps

    strategies = _split(args.strategies)
    for strategy in strategies:
        try:
            parse_strategy(strategy)
        except StrategyError as e:
            raise UsageError(f"--strategies: {e}") from None
    try:
        return select_steps(_split(args.variants), strategies)
    except ValueError as e:
        raise UsageError(f"--variants: {e}") from None


def _config(args: argparse.Namespace) -> StudyConfig:
    from hlofuse.studies.cartpole_study import StudyConfig

    if args.envs:
        envs = parse_positive_list(args.envs, "--envs")
    else:
        envs = QUICK_ENVS if args.quick else DEFAULT_ENVS
    steps = args.steps if args.steps is not None else (QUICK_STEPS if args.quick
                                                       else DEFAULT_STEPS)
    repeats = args.repeats if args.repeats is not None else (QUICK_REPEATS if args.quick
                                                             else DEFAULT_REPEATS)
    check_seed(args.seed)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out: {out} exists and is not a folder")
    ray, workers = _ray_option(args.ray, envs)
    return StudyConfig(envs=envs, steps=check_positive(steps, "--steps"),
                       repeats=check_positive(repeats, "--repeats"), seed=args.seed,
                       ray=ray, ray_workers=workers, backend=args.backend)


def _ray_option(address: str | None, envs: tuple[int, ...]) -> tuple[str | None, int]:
    if address is None:
        return None, 0
    from hlofuse.distributed import RayNotInstalledError, workers_for

    try:
        workers = workers_for(address)
    except (RayNotInstalledError, ValueError) as e:
        raise UsageError(f"--ray: {e}") from None
    except Exception as e:  # noqa: BLE001 - Ray's own errors when a cluster cannot be joined
        raise UsageError(f"--ray: cannot join the Ray cluster at {address!r}: "
                         f"{type(e).__name__}: {e}") from None
    if min(envs) < workers:
        raise UsageError(f"--ray: {workers} workers need at least {workers} environments, "
                         f"got N={min(envs)}")
    return address, workers


def run_and_report(steps: list[StudyStep], config: StudyConfig, out: Path,
                   clock: str = "wall") -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from hlofuse.studies.cartpole_plots import write_rates_plot, write_speedup_plot
    from hlofuse.studies.cartpole_study import StudyError, run_study, write_json

    graphs: list[Path] = []
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, TABLE_WIDTH)  # a log or a pipe: no need to squeeze
    columns = (TextColumn("{task.description:30}"), BarColumn(),
               TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task("starting", total=len(steps) * len(config.envs))
            result = run_study(steps, config,
                               on_task=lambda label: progress.update(task, description=label),
                               on_done=lambda: progress.advance(task),
                               on_built=functools.partial(write_graphs, out, graphs))
    except StudyError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_WRONG_RESULT
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}")
    console.print(results_table(result, clock))
    json_path = out / "cartpole.json"
    speedup_path, rates_path = out / "cartpole_speedup.png", out / "cartpole_rates.png"
    write_json(result, json_path)
    write_speedup_plot(result, speedup_path, clock)
    write_rates_plot(result, rates_path, clock)
    console.print(f"wrote {json_path}, {speedup_path} and {rates_path}")
    if graphs:
        console.print("fusion graphs: " + ", ".join(map(str, graphs)))
    return 0


# The steps whose fusion graphs go next to the plots (at the smallest N; the graph does not
# depend on N).
GRAPH_STEPS = ("baseline", "max")


def write_graphs(out: Path, written: list[Path], step: StudyStep, built: Built) -> None:
    if step.name not in GRAPH_STEPS:
        return
    from hlofuse.visualize import write_graph

    for suffix in (".svg", ".html"):
        written.append(write_graph(built.compiled.fusion,
                                   out / f"cartpole_graph_{step.name}{suffix}"))


def _bytes(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _span(values: list[float], digits: int) -> str:
    low, high = min(values), max(values)
    if f"{low:.{digits}f}" == f"{high:.{digits}f}":
        return f"{low:.{digits}f}"
    return f"{low:.{digits}f}-{high:.{digits}f}"


def results_table(result: StudyResult, clock: str = "wall") -> Table:
    from rich.table import Table

    envs = sorted({r.envs for r in result.records})
    per = "CPU-second" if clock == "cpu" else "second"
    table = Table(title=f"CartPole on hlofuse, T={result.config.steps}: env-steps per {per} and "
                  "speedup over baseline")
    table.add_column("step", no_wrap=True)
    table.add_column("strategy", overflow="fold")
    table.add_column("kernels\n/step", justify="right")
    table.add_column("bytes\n/env-step", justify="right")
    for n in envs:
        table.add_column(f"N={n}", justify="right", no_wrap=True)
    table.add_column("compile\ns", justify="right")
    for step in result.steps:
        rows = {r.envs: r for r in result.records if r.step == step.name}
        if not rows:
            continue
        cells = [f"{format_rate(rows[n].rate(clock))}\n{rows[n].speedup(clock):.2f}x"
                 if n in rows else "-" for n in envs]
        compile_s = max(r.compile_s for r in rows.values())
        all_hits = all(r.cache_hit for r in rows.values())
        table.add_row(step.name, step.strategy,
                      _span([r.kernels_per_step for r in rows.values()], 2),
                      _bytes(rows[envs[-1]].bytes_per_step / envs[-1]) if envs[-1] in rows
                      else "-", *cells,
                      f"{compile_s:.1f}{'*' if all_hits else ''}")
    table.caption = ("Kernels and bytes from the profile of one rollout, divided by T (bytes "
                     "per environment at the largest N); compile: the largest over N, * when "
                     "every C object came from the on-disk cache. Every step was checked "
                     "against the reference interpreter.")
    if result.config.ray is not None:
        table.caption += (f" Timed rollouts: {result.config.ray_workers} shards on Ray actors "
                          f"({result.config.ray}, one thread each; CPU time: theirs, summed), "
                          "each checked equal to the same shard run in this process.")
    return table
