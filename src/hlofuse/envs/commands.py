"""`hlofuse cartpole`: run every CartPole program variant briefly, or print one's HLO."""

from __future__ import annotations

import argparse
import sys
import zlib

import numpy as np

from hlofuse.envs import cartpole
from hlofuse.ir.printer import module_text


def _usage_error(message: str) -> Exception:
    from hlofuse.cli import UsageError  # cli imports this module to register the command

    return UsageError(message)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def checksum(states: np.ndarray) -> str:
    """CRC-32 of the float32 bytes: equal only for bit-identical states."""
    return f"{zlib.crc32(np.ascontiguousarray(states, np.float32).tobytes()):08x}"


def cmd_cartpole(args: argparse.Namespace) -> int:
    if args.show_hlo is not None:
        try:
            variant = cartpole.all_variants().get(args.show_hlo) or cartpole.parse_variant(
                args.show_hlo)
        except ValueError as e:
            raise _usage_error(str(e)) from None
        sys.stdout.write(module_text(cartpole.trace(variant, args.envs, args.steps, args.seed)))
        return 0
    _run_all(args.envs, args.steps, args.seed)
    return 0


def _run_all(n_envs: int, n_steps: int, seed: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"CartPole variants, N={n_envs}, T={n_steps}, seed={seed} "
                        "(reference interpreter)")
    table.add_column("variant", no_wrap=True)
    for column in ("instrs", "state sum", "crc32", "episodes", "return", "agrees"):
        table.add_column(column, justify="right")
    references: dict[bool, cartpole.RolloutResult] = {}
    with console.status("running variants...") as status:
        for name, variant in cartpole.all_variants().items():
            status.update(f"running {name}")
            module = cartpole.trace(variant, n_envs, n_steps, seed)
            result = cartpole.rollout(variant, n_envs, n_steps, seed)
            reference = references.setdefault(variant.deterministic, result)
            agrees = np.allclose(result.states, reference.states, atol=1e-5) and (
                result.finished == reference.finished)
            table.add_row(name, str(cartpole.instruction_count(module)),
                          f"{float(result.states.sum()):.6f}", checksum(result.states),
                          str(result.finished), f"{result.return_sum:g}",
                          "yes" if agrees else "[red]NO[/red]")
    console.print(table)
    console.print("Random variants draw the same numbers from one seed; the -det ones and "
                  "'deterministic' start from fixed states and use a fixed policy. Within each "
                  "group every variant must agree. Programs: hlofuse cartpole --show-hlo NAME")


def add_cartpole_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("cartpole", help="run every CartPole program variant on a small size, or "
                                        "print one variant's HLO")
    p.add_argument("--show-hlo", metavar="VARIANT",
                   help="print the traced HLO of VARIANT: a preset "
                        f"({', '.join(cartpole.PRESETS)}) or a spec such as "
                        "rng=fused,state=split,rollout=scan,unroll=10[,deterministic]")
    p.add_argument("--envs", type=_positive, default=8, help="environments N (default 8)")
    p.add_argument("--steps", type=_positive, default=30, help="steps T (default 30)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.set_defaults(handler=cmd_cartpole)
