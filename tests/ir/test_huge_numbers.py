"""Integers longer than any 64-bit value in HLO text are refused with the line and column (or,
in metadata, kept as text), never a traceback: Python itself refuses to convert more than
4,300 digits."""

from __future__ import annotations

from pathlib import Path

import pytest

from hlofuse.ir.parser import HloParseError, parse_module

HUGE = "9" * 5000


def _module(line: str) -> str:
    return ("HloModule m\n\nENTRY e {\n  p = f32[2] parameter(0)\n  c = f32[] constant(0)\n"
            f"  {line}\n}}\n")


@pytest.mark.parametrize(("line", "message", "column"), [
    (f"ROOT r = f32[{HUGE}] parameter(1)", "a dimension size 9999", 16),
    (f"ROOT r = f32[2] reverse(p), dimensions={{{HUGE}}}", "dimensions 9999", 43),
    (f"ROOT r = f32[1] slice(p), slice={{[0:{HUGE}]}}", "slice limit 9999", 39),
    (f"ROOT r = f32[2] pad(p, c), padding=0_{HUGE}", "bad padding entry '0_9999", 38),
])
def test_a_huge_integer_is_named_with_its_place(line: str, message: str, column: int) -> None:
    with pytest.raises(HloParseError, match=message) as info:
        parse_module(_module(line))
    assert (info.value.line, info.value.column) == (6, column)


def test_a_huge_metadata_number_stays_text() -> None:
    module = parse_module(_module(f'ROOT r = f32[2] copy(p), metadata={{op_name="x" '
                                  f"stack_frame_id={HUGE}}}"))
    assert module.entry.root.name == "r"


def test_the_command_line_gives_one_error_line(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from hlofuse.cli import main

    path = tmp_path / "huge.hlo"
    path.write_text(_module(f"ROOT r = f32[{HUGE}] parameter(1)"))
    assert main(["run", str(path), "--backend", "interpreter"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "5,000 digits" in err[0]
