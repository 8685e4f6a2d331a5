"""FileCheck tests: every `tests/filecheck/<pass-name>/*.hlo` file.

The first line names the command, `// RUN: opt -p pass,pass` (or `--strategy S`), or
`// RUN: compile --emit c [--strategy S]` for code generation (codegen/*.hlo: the C of the
kernels and the driver); it runs in-process and its output goes to the `filecheck` package,
which matches the file's `// CHECK:` lines. Fusion tests may also assert on the decision log:

    // DECISION: <rule-id> <fuse|no> [producer [consumer]]
    // DECISION-NOT: <rule-id> [<fuse|no>]

A DECISION line needs a record with that rule and verdict (and those instruction names, if
given; names without `%`); a DECISION-NOT line forbids one.
"""

from __future__ import annotations

import io
import shlex
from pathlib import Path

import pytest
from filecheck.matcher import Matcher
from filecheck.options import Options

from hlofuse.cli.opt import run_opt
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.ir.verifier import verify
from hlofuse.passes.decision_log import DecisionLog

HERE = Path(__file__).parent
CASES = sorted(HERE.glob("*/*.hlo"))


def test_enough_cases() -> None:
    assert len(CASES) >= 40


def _run_line(path: Path) -> tuple[str | None, str | None]:
    first = path.read_text().splitlines()[0]
    if first.startswith("// RUN: compile --emit c"):
        args = shlex.split(first[len("// RUN: compile --emit c"):])
        strategy = args[1] if args[:1] == ["--strategy"] and len(args) == 2 else None
        assert strategy is not None or not args, f"{path.name}: unknown RUN arguments {args}"
        return "compile", strategy
    assert first.startswith("// RUN: opt"), f"{path.name}: first line must be // RUN: opt ..."
    args = shlex.split(first[len("// RUN: opt"):])
    passes = strategy = None
    while args:
        flag = args.pop(0)
        if flag in ("-p", "--passes"):
            passes = args.pop(0)
        elif flag == "--strategy":
            strategy = args.pop(0)
        else:
            raise AssertionError(f"{path.name}: unknown RUN argument {flag!r}")
    return passes, strategy


def _check_decisions(path: Path, log: DecisionLog) -> None:
    records = log.unique()
    for line in path.read_text().splitlines():
        text = line.strip()
        negative = text.startswith("// DECISION-NOT:")
        if not negative and not text.startswith("// DECISION:"):
            continue
        words = text.split(":", 1)[1].split()
        rule = words[0]
        verdict = words[1] if len(words) > 1 else None
        names = words[2:]

        def matches(r: object, rule: str = rule, verdict: str | None = verdict,
                    names: list[str] = names) -> bool:
            assert hasattr(r, "rule")
            if r.rule != rule or (verdict and r.verdict != verdict):  # type: ignore[attr-defined]
                return False
            involved = [r.producer, r.consumer, *r.siblings]  # type: ignore[attr-defined]
            return all(n in involved for n in names)

        found = [r for r in records if matches(r)]
        if negative:
            assert not found, f"{path.name}: unexpected decision {found[0]}"
        else:
            summary = "\n".join(f"  {r.rule} {r.verdict} {r.producer} -> {r.consumer} "
                                f"{r.siblings}" for r in records)
            assert found, f"{path.name}: no decision `{text}` among:\n{summary}"


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.name}" for p in CASES])
def test_filecheck(path: Path, tmp_path: Path) -> None:
    passes, strategy = _run_line(path)
    module = parse_module(path.read_text(), str(path))
    verify(module)
    if passes == "compile":
        output = _compiled_c(module, strategy)
        log = None
    else:
        result, log = run_opt(module, passes, strategy)
        output = module_text(result)
    out_file = tmp_path / "output.hlo"
    out_file.write_text(output)
    matcher = Matcher.from_opts(Options(match_filename=str(path), input_file=str(out_file)))
    errors = io.StringIO()
    matcher.stderr = errors
    assert matcher.run() == 0, f"{path.name}:\n{errors.getvalue()}\n--- output ---\n{output}"
    if log is not None:
        _check_decisions(path, log)


def _compiled_c(module: Module, strategy: str | None) -> str:
    """`hlofuse compile --emit c`: the kernels and the driver (codegen/ tests)."""
    from hlofuse.compile_cache import strategy_constants
    from hlofuse.fusion.strategies import run_strategy
    from hlofuse.targets.c import generate_c as generate

    if strategy is not None:
        module = run_strategy(module, strategy, constants=strategy_constants(strategy)).module
    return generate(module).source.listing
