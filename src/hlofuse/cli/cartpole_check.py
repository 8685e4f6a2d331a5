"""`hlofuse cartpole --check` and `--show-hlo`: every program variant on the reference
interpreter, or one variant's HLO (the command itself lives in hlofuse.cli.cartpole)."""

from __future__ import annotations

import sys
import zlib

import numpy as np

from hlofuse.cli.errors import UsageError
from hlofuse.envs import cartpole
from hlofuse.ir.printer import module_text


def checksum(states: np.ndarray) -> str:
    """CRC-32 of the float32 bytes: equal only for bit-identical states."""
    return f"{zlib.crc32(np.ascontiguousarray(states, np.float32).tobytes()):08x}"


def show_hlo(text: str, n_envs: int, n_steps: int, seed: int) -> None:
    """Print the traced HLO of a variant given by name (preset or `-det` twin) or spec."""
    try:
        variant = cartpole.all_variants().get(text) or cartpole.parse_variant(text)
    except ValueError as e:
        raise UsageError(str(e)) from None
    sys.stdout.write(module_text(cartpole.trace(variant, n_envs, n_steps, seed)))


def variant_table(n_envs: int, n_steps: int, seed: int) -> bool:
    """Run every variant on the reference interpreter and print whether they agree."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"CartPole variants, N={n_envs}, T={n_steps}, seed={seed} "
                        "(reference interpreter)")
    table.add_column("variant", no_wrap=True)
    for column in ("instrs", "state sum", "crc32", "episodes", "return", "agrees"):
        table.add_column(column, justify="right")
    references: dict[bool, cartpole.RolloutResult] = {}
    all_agree = True
    with console.status("running variants...") as status:
        for name, variant in cartpole.all_variants().items():
            status.update(f"running {name}")
            module = cartpole.trace(variant, n_envs, n_steps, seed)
            result = cartpole.rollout(variant, n_envs, n_steps, seed)
            reference = references.setdefault(variant.deterministic, result)
            agrees = np.allclose(result.states, reference.states, atol=1e-5) and (
                result.finished == reference.finished)
            all_agree = all_agree and agrees
            table.add_row(name, str(cartpole.instruction_count(module)),
                          f"{float(result.states.sum()):.6f}", checksum(result.states),
                          str(result.finished), f"{result.return_sum:g}",
                          "yes" if agrees else "[red]NO[/red]")
    console.print(table)
    console.print("Random variants draw the same numbers from one seed; the -det ones and "
                  "'deterministic' start from fixed states and use a fixed policy. Within each "
                  "group every variant must agree. Programs: hlofuse cartpole --show-hlo NAME")
    return all_agree
