"""`explain` (text and JSON) and the `opt`/`explain` commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hlofuse.cli import main
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module

from tests.fusion.test_barriers import PACKED_STEP_LOOP


@pytest.fixture
def packed_file(tmp_path: Path) -> Path:
    path = tmp_path / "packed.hlo"
    path.write_text(PACKED_STEP_LOOP)
    return path


def test_explain_text_lists_kernels_blocked_edges_and_hints() -> None:
    text = run_strategy(parse_module(PACKED_STEP_LOOP), "xla").explain()
    # 8: the loop counts to 5, so its condition never runs (no kernel of its own).
    assert text.startswith("strategy xla: 8 kernels, 0 outside loops")
    assert "while %loop (body %body, condition %cond): 8 kernels per iteration" in text
    assert "%bits  library  in %body [per iteration of %loop]" in text
    assert "source: cartpole.py:42" in text
    assert "code-duplication-too-high: " in text
    assert "custom-call: 1" in text
    assert "hints" in text and "xla+relax_concatenate" in text


def test_explain_dict_is_the_documented_json() -> None:
    report = run_strategy(parse_module(PACKED_STEP_LOOP), "xla").explain_dict()
    json.dumps(report)  # serializable
    assert report["strategy"] == "xla"
    assert report["kernels_per_iteration"] == {"loop": 8}
    assert [loop["known_trip_count"] for loop in report["loops"]] == [5]  # type: ignore[index]
    kernels = report["kernels"]
    assert isinstance(kernels, list)
    for kernel in kernels:
        assert {"name", "kind", "instructions", "source_lines", "computation",
                "loop"} <= set(kernel)
    decisions = report["decisions"]
    assert isinstance(decisions, list) and decisions
    for decision in decisions:
        assert {"pass", "producer", "consumer", "verdict", "rule", "source_lines"} <= set(decision)
        assert decision["verdict"] in ("fuse", "no", "rewrite")
    blocked = report["blocked"]
    assert isinstance(blocked, dict) and blocked["custom-call"] == 1
    assert sum(blocked.values()) == len(report["blocked_edges"])  # type: ignore[arg-type]


def test_explain_command_json(packed_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(packed_file), "--json", "--strategy",
                 "xla+relax_concatenate"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["strategy"] == "xla+relax_concatenate"
    assert "code-duplication-too-high" not in report["blocked"]


def test_explain_command_text(packed_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(packed_file)]) == 0
    assert "kernels per iteration" in capsys.readouterr().out


def test_opt_command(packed_file: Path, tmp_path: Path,
                     capsys: pytest.CaptureFixture[str]) -> None:
    dumps = tmp_path / "dumps"
    assert main(["opt", str(packed_file), "-p", "simplify,instruction-fusion",
                 "--dump-dir", str(dumps), "--decisions"]) == 0
    out = capsys.readouterr().out
    assert "kind=kLoop" in out and "// decision: instruction-fusion" in out
    parse_module(out)  # the printed module (with decision comments) reads back
    assert sorted(p.name for p in dumps.iterdir()) == ["01-simplify.hlo",
                                                       "02-instruction-fusion.hlo"]


@pytest.mark.parametrize("args, message", [
    (["-p", "nonsense"], "unknown pass 'nonsense'"),
    (["--strategy", "fastest"], "unknown strategy 'fastest'"),
    ([], "name passes with -p"),
])
def test_opt_bad_input(packed_file: Path, capsys: pytest.CaptureFixture[str],
                       args: list[str], message: str) -> None:
    assert main(["opt", str(packed_file), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_explain_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(tmp_path / "missing.hlo")]) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.hlo"
    bad.write_text(PACKED_STEP_LOOP)
    assert main(["explain", str(bad), "--strategy", "xla+bogus"]) == 2
    assert "unknown modifier 'bogus'" in capsys.readouterr().err
