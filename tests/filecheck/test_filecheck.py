"""FileCheck tests: every `tests/filecheck/<folder>/*.hlo` file.

The file's first lines name the commands, which run in-process; each output goes to the
`filecheck` package, which matches the file's `// CHECK:` lines (LLVM's syntax, with LLVM's
range for CHECK-NOT: `LlvmMatcher`).

- `// RUN: opt -p pass,pass` (or `--strategy S`): the module after those passes
  (`<pass-name>/` and `strategies/` folders).
- `// RUN: compile [--backend B] --emit WHAT [--strategy S]`: the code a target generates for
  the module (`codegen-<target>/` folders), through `hlofuse compile`'s own arguments and
  handler, so B and WHAT are what the command line accepts (`--backend cpu --emit c|c-full`,
  `--backend cuda --emit cuda|cuda-full`; the backend defaults to cpu). Without `--strategy`
  the module is compiled as written (its fusions are the file's own), not fused by the
  command line's default strategy.
- `// RUN: opt ... | compile ...`: the code generated for the module `opt` prints (a pass
  with knobs no strategy sets, such as `whole-loop-fusion{lanes=8}`).
- A RUN line may end in `| filecheck --check-prefix=NAME`: that run's output is matched by
  the `// NAME:` lines instead. A file may have several RUN lines (its first lines), so that
  one output is checked twice: once for its structure, once for what must be absent from a
  whole kernel (`NAME-LABEL` around it, `NAME-NOT` inside).
- `// TIER: thorough` anywhere in the file: its commands take seconds (CartPole's rollout
  under `max`), so it runs in `make test`, not in `make fast`.
- `// WHOLE-LOOPS: large` anywhere in the file: its whole-loop kernels are generated in the
  form of a large one (vector lane loops, the whole loop's tuning), as a rollout's would be;
  the file's few lanes and steps alone would make them small kernels
  (codegen/whole_loop_work.py).

Fusion tests may also assert on the decision log:

    // DECISION: <rule-id> <fuse|no> [producer [consumer]]
    // DECISION-NOT: <rule-id> [<fuse|no>]

A DECISION line needs a record with that rule and verdict (and those instruction names, if
given; names without `%`); a DECISION-NOT line forbids one.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from filecheck.compiler import compile_uops
from filecheck.finput import FInput, InputRange
from filecheck.matcher import Matcher
from filecheck.ops import CheckOp
from filecheck.options import Options
from filecheck.parser import Parser

from hlofuse.cli.opt import run_opt
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.ir.verifier import verify
from hlofuse.passes.decision_log import DecisionLog

HERE = Path(__file__).parent
CASES = sorted(HERE.glob("*/*.hlo"))
THOROUGH = "// TIER: thorough"
LARGE_WHOLE_LOOPS = "// WHOLE-LOOPS: large"


def _case(path: Path) -> object:
    marks = [pytest.mark.thorough] if THOROUGH in path.read_text().splitlines() else []
    return pytest.param(path, marks=marks, id=f"{path.parent.name}/{path.name}")


def test_enough_cases() -> None:
    assert len(CASES) >= 40


class LlvmMatcher(Matcher):
    """The `filecheck` package's matcher with LLVM's range for CHECK-NOT: from the previous
    match to the start of the next CHECK or CHECK-NEXT match. filecheck 1.0.6 searches up to
    the end of that match, so `CHECK-NOT: for (` before `CHECK: for (int64_t i = 40; ...`
    fails on the very loop the CHECK names (test_check_not_stops_at_the_next_match)."""

    @classmethod
    def for_file(cls, checks: Path, output: Path, prefix: str) -> LlvmMatcher:
        options = Options(match_filename=str(checks), input_file=str(output),
                          check_prefixes=[prefix])
        return cls(options, FInput.from_opts(options), Parser.from_opts(options))

    def match_eventually(self, op: CheckOp) -> None:
        pattern, _ = compile_uops(op, self.ctx.live_variables, self.opts)
        self._check_pending_nots(self.file.find(pattern, op.name == "SAME"))
        super().match_eventually(op)

    def match_immediately(self, op: CheckOp) -> None:
        pattern, _ = compile_uops(op, self.ctx.live_variables, self.opts)
        self._check_pending_nots(self.file.match(pattern))
        super().match_immediately(op)

    def _check_pending_nots(self, upcoming: re.Match[str] | None) -> None:
        if upcoming is None or self.ctx.negative_matches_start is None:
            return  # no match: the CHECK itself fails; no CHECK-NOT waiting
        searched = InputRange(self.ctx.negative_matches_start, upcoming.start())
        for check in self.ctx.negative_matches_stack:
            self.check_not(check, searched)
        self.ctx.negative_matches_start = None
        self.ctx.negative_matches_stack = []


def _filecheck(checks: Path, output: Path, prefix: str = "CHECK") -> tuple[int, str]:
    """(status, messages) of matching `checks`' PREFIX lines against the text in `output`."""
    matcher = LlvmMatcher.for_file(checks, output, prefix)
    errors = io.StringIO()
    matcher.stderr = errors
    return matcher.run(), errors.getvalue()


@pytest.mark.parametrize(("text", "status"), [
    ("a\nfor (i = 0; i < 40;)\nfor (i = 40; i < 64;)\n", 0),
    ("a\nfor (i = 0; i < 40;)\nfor (j = 0;)\nfor (i = 40; i < 64;)\n", 1),
])
def test_check_not_stops_at_the_next_match(text: str, status: int, tmp_path: Path) -> None:
    checks = tmp_path / "checks.hlo"
    checks.write_text("// CHECK: i < 40\n// CHECK-NOT: for (\n// CHECK: for (i = 40;\n"
                      "// CHECK-NOT: for (\n// CHECK-NEXT: for (k\n")
    output = tmp_path / "output.txt"
    output.write_text(text + "for (k")
    assert _filecheck(checks, output)[0] == status


# An empty pipeline: `compile` without `--strategy` in a RUN line compiles the module as written.
AS_WRITTEN = "none-no-simplify-no-trip-count"


@dataclass(frozen=True)
class Run:
    """One RUN line: its commands (`opt`, `compile`, or `opt ... | compile ...`), each with
    its arguments, and the check prefix its output is matched with."""

    stages: tuple[tuple[str, tuple[str, ...]], ...]
    prefix: str = "CHECK"


def _runs(path: Path) -> list[Run]:
    """The file's RUN lines (the lines it starts with)."""
    lines = path.read_text().splitlines()
    assert lines and lines[0].startswith("// RUN:"), f"{path.name}: first line must be // RUN:"
    runs = []
    for line in lines:
        if not line.startswith("// RUN:"):
            break
        stages = [shlex.split(stage) for stage in line.removeprefix("// RUN:").split("|")]
        prefix = "CHECK"
        if stages[-1][:1] == ["filecheck"]:
            options = stages.pop()[1:]
            assert len(options) == 1 and options[0].startswith("--check-prefix="), (
                f"{path.name}: filecheck takes --check-prefix=NAME, not {options}")
            prefix = options[0].removeprefix("--check-prefix=")
        commands = [stage[0] if stage else "" for stage in stages]
        assert commands in (["opt"], ["compile"], ["opt", "compile"]), (
            f"{path.name}: a RUN line is `opt ...`, `compile ...` or `opt ... | compile ...`, "
            "then `| filecheck --check-prefix=NAME` if not CHECK")
        runs.append(Run(tuple((stage[0], tuple(stage[1:])) for stage in stages), prefix))
    return runs


def _opt_arguments(path: Path, args: list[str]) -> tuple[str | None, str | None]:
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


@pytest.mark.parametrize("path", [_case(path) for path in CASES])
def test_filecheck(path: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if LARGE_WHOLE_LOOPS in path.read_text().splitlines():
        request.getfixturevalue("large_whole_loops")
    outputs: dict[tuple[tuple[str, tuple[str, ...]], ...], str] = {}
    log = None
    for number, run in enumerate(_runs(path)):
        if run.stages not in outputs:
            outputs[run.stages], stages_log = _run_stages(path, run, tmp_path)
            log = log or stages_log
        output = outputs[run.stages]
        out_file = tmp_path / f"output{number}.txt"
        out_file.write_text(output)
        status, errors = _filecheck(path, out_file, run.prefix)
        assert status == 0, (f"{path.name} ({run.prefix} lines):\n{errors}\n"
                             f"--- output ---\n{output}")
    if log is not None:
        _check_decisions(path, log)


def _run_stages(path: Path, run: Run, tmp_path: Path) -> tuple[str, DecisionLog | None]:
    """The output of a RUN line's commands (and the decision log of its `opt`)."""
    source, output, log = path, "", None
    for command, args in run.stages:
        if command == "compile":
            output = _compiled(source, path.name, list(args))
            continue
        module = parse_module(source.read_text(), str(source))
        verify(module)
        result, log = run_opt(module, *_opt_arguments(path, list(args)))
        output = module_text(result)
        source = tmp_path / "opt-output.hlo"
        source.write_text(output)
    return output, log


def _compiled(path: Path, case: str, args: list[str]) -> str:
    """`hlofuse compile PATH ARGS`: its argument parser and handler, run in-process."""
    from hlofuse.cli import build_parser

    try:
        namespace = build_parser().parse_args(["compile", str(path), *args])
    except SystemExit:  # argparse has printed why
        raise AssertionError(f"{case}: bad RUN arguments {args}") from None
    if "--strategy" not in args:
        namespace.strategy = AS_WRITTEN
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = namespace.handler(namespace)
    assert status == 0, f"{case}: hlofuse compile exited with {status}"
    return printed.getvalue()
