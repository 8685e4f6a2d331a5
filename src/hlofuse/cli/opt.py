"""`hlofuse opt` (run named passes or a strategy, print the module) and `hlofuse explain`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hlofuse import targets
from hlofuse.cli.errors import UsageError, load_module
from hlofuse.compile_cache import strategy_constants, with_measured_constants
from hlofuse.fusion.strategies import (
    ALL_PASSES,
    FusionResult,
    StrategyError,
    parse_strategy,
    run_strategy,
)
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.printer import module_text
from hlofuse.passes.decision_log import DecisionLog, DecisionRecord
from hlofuse.passes.manager import PassError, Pipeline, parse_pass_list
from hlofuse.passes.rule_catalogue import catalogue_text
from hlofuse.targets.tpu.product_plan import explain_lines


def run_opt(module: Module, passes: str | None, strategy: str | None,
            dump_dir: str | None = None) -> tuple[Module, DecisionLog]:
    """Run a strategy (if given), then the named passes, verifying after every pass."""
    if not passes and not strategy:
        raise UsageError("name passes with -p pass,pass,... or a strategy with --strategy")
    log = DecisionLog()
    try:
        if strategy:
            result = run_strategy(module, strategy, dump_dir=dump_dir,
                                  constants=strategy_constants(strategy))
            module = result.module
            log.records.extend(result.decisions.records)
        if passes:
            steps = with_measured_constants(parse_pass_list(passes, ALL_PASSES))
            module, _ = Pipeline(steps, dump_dir=dump_dir, log=log).run(module)
    except (StrategyError, ValueError) as e:
        if isinstance(e, PassError):
            raise
        raise UsageError(str(e)) from None
    return module, log


def decision_comment(record: DecisionRecord) -> str:
    target = (f"%{record.consumer}" if record.consumer and len(record.siblings) <= 1
              else ", ".join(f"%{s}" for s in record.siblings))
    return (f"// decision: {record.pass_name} {record.verdict} {record.rule} "
            f"%{record.producer} -> {target}")


def cmd_opt(args: argparse.Namespace) -> int:
    module, _ = load_module(args.file)
    module, log = run_opt(module, args.passes, args.strategy, args.dump_dir)
    sys.stdout.write(module_text(module))
    if args.decisions:
        for record in log.unique():
            sys.stdout.write(decision_comment(record) + "\n")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    if args.rules:
        sys.stdout.write(catalogue_text())
        return 0
    if args.file is None:
        raise UsageError("explain: name an HLO file (or pass --rules for the rule catalogue)")
    module, _ = load_module(args.file)
    try:
        strategy = parse_strategy(args.strategy)
    except StrategyError as e:
        raise UsageError(str(e)) from None
    if args.graph is not None:
        from hlofuse.visualize import check_path

        try:
            check_path(args.graph)
        except ValueError as e:
            raise UsageError(f"--graph: {e}") from None
    result = run_strategy(module, strategy, constants=strategy_constants(strategy))
    if args.graph is not None:
        from hlofuse.visualize import write_graph

        collapse = {"auto": None, "yes": True, "no": False}[args.collapse]
        written = write_graph(result, args.graph, collapse=collapse, engine=args.graph_engine)
        print(f"wrote {written}", file=sys.stderr)
    dots = _dot_kernels(result)
    described = targets.get("cpu").describe_dots(dots) if dots else []
    products = explain_lines(result.module)
    if args.json:
        report = result.explain_dict()
        if described:
            report["dot_kernels_c"] = dict(zip((d.name for d in dots), described))
        if products:
            report["lane_products_tpu"] = products
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(result.explain(verbose=args.verbose))
        if described:
            sys.stdout.write("\ndot kernels on the C target\n"
                             + "".join(f"  {line}\n" for line in described))
        if products:
            sys.stdout.write("\nlane-uniform products of whole-loop kernels on the TPU target\n"
                             + "".join(f"  {line}\n" for line in products))
    return 0


def _dot_kernels(result: FusionResult) -> list[Instruction]:
    """The dots that are kernels of their own (library calls), in kernel order."""
    names = {k.name for k in result.kernels if not k.is_fusion and k.ops == ("dot",)}
    found = {i.name: i for i in result.module.all_instructions()
             if i.op is Op.DOT and i.name in names}
    return [found[k.name] for k in result.kernels if k.name in found]


def add_opt_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("opt", help="run passes (or a fusion strategy) and print the module")
    p.add_argument("file", help="HLO text file")
    p.add_argument("-p", "--passes", metavar="PASSES",
                   help="comma-separated passes, knobs in braces: "
                        "instruction-fusion{may_duplicate=false},fusion-merger; known: "
                        + ", ".join(cls.name for cls in ALL_PASSES))
    p.add_argument("--strategy", help="run a fusion strategy first (none, xla, "
                                      "xla+relax_concatenate, xla-no-merger, ...)")
    p.add_argument("--dump-dir", type=Path, help="write NN-pass-name.hlo after every pass")
    p.add_argument("--decisions", action="store_true",
                   help="append the decision log as // decision: comments")
    p.set_defaults(handler=cmd_opt)


def add_explain_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("explain", help="kernels, blocked fusions and hints under a strategy")
    p.add_argument("file", nargs="?", help="HLO text file")
    p.add_argument("--strategy", default="xla", help="fusion strategy (default xla)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="list every fused instruction and every blocked edge")
    p.add_argument("--graph", metavar="OUT", type=Path,
                   help="also write the fusion graph to OUT.svg, OUT.dot or OUT.html (kernels "
                        "as boxes, blocked edges in red with their rule, loops nested)")
    p.add_argument("--graph-engine", choices=("auto", "dot", "builtin"), default="auto",
                   help="SVG layout: Graphviz's dot when installed (auto), or our own")
    p.add_argument("--collapse", choices=("auto", "yes", "no"), default="auto",
                   help="draw each kernel as one node with its instruction count (auto: for "
                        "graphs of more than 400 instructions)")
    p.add_argument("--rules", action="store_true",
                   help="print every rule id the passes log (pass, meaning, the XLA source it "
                        "follows) and exit")
    p.set_defaults(handler=cmd_explain)
