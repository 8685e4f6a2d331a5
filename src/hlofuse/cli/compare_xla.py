"""`hlofuse compare-xla`: XLA's GPU kernels next to `xla-gpu`'s for one program.

XLA compiles the program for the GPU without one (optional extra `xla-gpu`); its optimised
HLO is parsed by hlofuse and compared kernel by kernel with `xla-gpu` run on the module XLA
started from (`hlofuse.compare_xla`). `--xla-hlo` compares with optimised HLO already at hand
(the stored corpus, `tests/data/xla_gpu/`), which needs no extra.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hlofuse.cli.errors import UsageError
from hlofuse.compare_xla.compare import compare_texts, report_text
from hlofuse.compare_xla.oracle import (
    EXTRA,
    OracleUnavailable,
    XlaCompileError,
    compile_file,
)
from hlofuse.fusion.strategies import StrategyError
from hlofuse.fusion.xla_gpu.devices import DEFAULT_DEVICE, DEVICES


def cmd_compare_xla(args: argparse.Namespace) -> int:
    source = Path(args.file)
    if not source.is_file():
        raise UsageError(f"{source}: no such file")
    if args.xla_hlo is not None:
        if source.suffix == ".py":
            raise UsageError("--xla-hlo compares an HLO file (the module XLA started from)")
        before, optimized = source.read_text(), _read(Path(args.xla_hlo))
    else:
        try:
            result = compile_file(source, args.device)
        except OracleUnavailable as e:
            raise UsageError(f"{e} (the extra is named {EXTRA!r})") from None
        except XlaCompileError as e:
            raise UsageError(f"XLA could not compile {source}: {e}") from None
        before, optimized = result.before, result.optimized
    strategy = args.strategy or f"xla-gpu+device={args.device}"
    try:
        comparison = compare_texts(before, optimized, args.device, strategy)
    except StrategyError as e:
        raise UsageError(str(e)) from None
    if args.json:
        json.dump(comparison.as_dict(), sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(report_text(comparison))
    return 0


def _read(path: Path) -> str:
    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    return path.read_text()


def add_compare_xla_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("compare-xla", help="XLA's own GPU kernels next to xla-gpu's "
                                          f"(optional extra {EXTRA!r})")
    p.add_argument("file", help="HLO text file, or a Python file defining program() -> "
                                "(fn, args) with args NumPy arrays or (shape, dtype) pairs")
    p.add_argument("--device", default=DEFAULT_DEVICE, choices=sorted(DEVICES),
                   help=f"the GPU XLA compiles for and xla-gpu prices for (default "
                        f"{DEFAULT_DEVICE})")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--strategy", help="compare another strategy instead of xla-gpu")
    p.add_argument("--xla-hlo", metavar="OPTIMISED.hlo",
                   help="XLA's optimised HLO for FILE, already compiled: no XLA run")
    p.set_defaults(handler=cmd_compare_xla)
