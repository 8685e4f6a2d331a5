"""`hlofuse compile FILE.hlo [--strategy S] [--backend B] [--emit WHAT]`: the fused module, or
the code a target generates for it."""

from __future__ import annotations

import argparse
import sys

from hlofuse import targets
from hlofuse.cli.errors import UsageError, load_module, one_line
from hlofuse.fusion.strategies import StrategyError, run_strategy
from hlofuse.ir.printer import module_text


def cmd_compile(args: argparse.Namespace) -> int:
    # The runtime and code generation load only when this command runs: `--help` stays quick.
    from hlofuse.compile_cache import strategy_constants
    from hlofuse.runtime.target import CodegenError, TargetUnavailable

    target = targets.get(args.backend)
    what = args.emit or target.default_emit
    if what == "list":
        for name, description in {"hlo": "the fused HLO", **target.emits}.items():
            print(f"{name}: {description}")
        return 0
    if what != "hlo" and what not in target.emits:
        known = ", ".join(["hlo", *target.emits])
        raise UsageError(f"--emit {what}: the {target.name} backend emits {known}")
    reason = target.emit_unavailable() if what != "hlo" else None
    if reason is not None:
        raise UsageError(f"--backend {target.name}: {one_line(reason)}")
    module, _ = load_module(args.file)
    try:
        module = run_strategy(module, args.strategy,
                              constants=strategy_constants(args.strategy)).module
    except StrategyError as e:
        raise UsageError(str(e)) from None
    if what == "hlo":
        sys.stdout.write(module_text(module))
        return 0
    try:
        source = target.emit(module, what)
    except (CodegenError, TargetUnavailable) as e:
        raise UsageError(f"{args.file}: {e}") from None
    sys.stdout.write(source)
    return 0


def add_compile_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("compile", help="fuse an HLO module and print the fused HLO or the code "
                       "a backend generates for it")
    p.add_argument("file", help="HLO text file")
    p.add_argument("--strategy", default="xla",
                   help="fusion strategy (default xla; none = one kernel per instruction)")
    p.add_argument("--backend", choices=targets.names(compiled_only=True),
                   default=targets.names()[0],
                   help=f"whose code to print: {targets.help_text(compiled_only=True)}")
    p.add_argument("--emit", default=None, metavar="WHAT",
                   help="what to print: hlo (the fused module) or one of the backend's forms "
                   "of its code (default: the backend's first; `--emit list` lists them)")
    p.set_defaults(handler=cmd_compile)
