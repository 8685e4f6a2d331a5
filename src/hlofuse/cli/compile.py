"""`hlofuse compile FILE.hlo [--strategy S] --emit hlo|c`: the fused module or its C source."""

from __future__ import annotations

import argparse
import sys

from hlofuse.cli.errors import UsageError, load_module
from hlofuse.fusion.strategies import StrategyError, run_strategy
from hlofuse.ir.printer import module_text


def cmd_compile(args: argparse.Namespace) -> int:
    # The runtime and code generation load only when this command runs: `--help` stays quick.
    from hlofuse.compile_cache import strategy_constants
    from hlofuse.runtime.executable import CodegenError, generate

    module, _ = load_module(args.file)
    try:
        module = run_strategy(module, args.strategy,
                              constants=strategy_constants(args.strategy)).module
    except StrategyError as e:
        raise UsageError(str(e)) from None
    if args.emit == "hlo":
        sys.stdout.write(module_text(module))
        return 0
    try:
        if args.backend == "cuda":
            from hlofuse.runtime.cuda_executable import generate_cuda

            generated = generate_cuda(module).source
        else:
            generated = generate(module).source
        source = generated.text if args.emit == "c-full" else generated.listing
    except CodegenError as e:
        raise UsageError(f"{args.file}: {e}") from None
    sys.stdout.write(source)
    return 0


def add_compile_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("compile", help="fuse an HLO module and print the fused HLO or its C")
    p.add_argument("file", help="HLO text file")
    p.add_argument("--strategy", default="xla",
                   help="fusion strategy (default xla; none = one kernel per instruction)")
    p.add_argument("--emit", choices=("hlo", "c", "c-full"), default="c",
                   help="print the fused HLO, the generated C (kernels first, headers by name; "
                        "the default) or the whole file the compiler gets (c-full)")
    p.add_argument("--backend", choices=("cpu", "cuda"), default="cpu",
                   help="the C of the CPU backend (default) or the CUDA of the GPU backend")
    p.set_defaults(handler=cmd_compile)
