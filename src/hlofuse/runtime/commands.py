"""`hlofuse compile FILE.hlo [--strategy S] --emit hlo|c`: the fused module or its C source.

Fusing needs the fusion layer, which sits beside this one, so it is imported only when the
command runs (as the command line, above both, would).
"""

from __future__ import annotations

import argparse
import sys

from hlofuse.ir.printer import module_text
from hlofuse.runtime.executable import CodegenError, generate


def cmd_compile(args: argparse.Namespace) -> int:
    from hlofuse.cli import UsageError, load_module
    from hlofuse.fusion.strategies import StrategyError, run_strategy

    module, _ = load_module(args.file)
    try:
        module = run_strategy(module, args.strategy).module
    except StrategyError as e:
        raise UsageError(str(e)) from None
    if args.emit == "hlo":
        sys.stdout.write(module_text(module))
        return 0
    try:
        source = generate(module).source.text
    except CodegenError as e:
        raise UsageError(f"{args.file}: {e}") from None
    sys.stdout.write(source)
    return 0


def add_compile_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("compile", help="fuse an HLO module and print the fused HLO or its C")
    p.add_argument("file", help="HLO text file")
    p.add_argument("--strategy", default="xla",
                   help="fusion strategy (default xla; none = one kernel per instruction)")
    p.add_argument("--emit", choices=("hlo", "c"), default="c",
                   help="print the fused HLO or the generated C (default c)")
    p.set_defaults(handler=cmd_compile)
