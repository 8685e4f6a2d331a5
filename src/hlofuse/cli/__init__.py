"""The `hlofuse` command line: run, fmt, opt, explain, compile, cache, cartpole, bench,
compare-xla.

This package sits above every layer and no layer imports it. Bad input never produces a
traceback: one line on standard error starting `error:` that names the file, line and column,
and exit status 2. Lower layers raise their own errors; the commands turn them into
`UsageError`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from hlofuse.cli.bench import add_bench_command
from hlofuse.cli.cache import add_cache_command
from hlofuse.cli.cartpole import add_cartpole_command
from hlofuse.cli.compare_xla import add_compare_xla_command
from hlofuse.cli.compile import add_compile_command
from hlofuse.cli.errors import EXIT_BAD_INPUT, EXIT_OK, UsageError, load_module, one_line
from hlofuse.cli.opt import add_explain_command, add_opt_command
from hlofuse.cli.run import add_fmt_command, add_run_command, random_inputs
from hlofuse.ir.parser import HloParseError
from hlofuse.ir.verifier import HloVerifyError

__all__ = ["EXIT_BAD_INPUT", "EXIT_OK", "COMMANDS", "UsageError", "build_parser",
           "load_module", "main", "random_inputs"]

# Each entry adds one subcommand (or a group of them), in the order `--help` lists them.
COMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    add_run_command,
    add_fmt_command,
    add_cartpole_command,
    add_opt_command,
    add_explain_command,
    add_compile_command,
    add_cache_command,
    add_bench_command,
    add_compare_xla_command,
]


def build_parser() -> argparse.ArgumentParser:
    summary = " ".join((__doc__ or "").split("\n\n")[0].split())  # the first paragraph
    parser = argparse.ArgumentParser(prog="hlofuse", description=summary)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result: int = args.handler(args)
        return result
    except (UsageError, HloParseError, HloVerifyError) as e:
        print(f"error: {one_line(str(e))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
