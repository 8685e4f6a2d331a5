"""Helpers of the front-end tests: FileCheck on traced HLO, and running jitted functions."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from filecheck.matcher import Matcher
from filecheck.options import Options

import hlofuse


def filecheck(text: str, checks: str, tmp_path: Path) -> None:
    """Assert that `text` satisfies the `// CHECK...` lines in `checks` (LLVM FileCheck)."""
    check_file = tmp_path / "checks.txt"
    input_file = tmp_path / "input.hlo"
    check_file.write_text(checks)
    input_file.write_text(text)
    log = io.StringIO()
    with redirect_stderr(log), redirect_stdout(log):
        options = Options(match_filename=str(check_file), input_file=str(input_file))
        code = Matcher.from_opts(options).run()
    assert code == 0, f"FileCheck failed:\n{log.getvalue()}\n--- input ---\n{text}"


def hlo(fn: Any, *args: Any, **kwargs: Any) -> str:
    """The HLO text of `fn` traced on `args`."""
    return str(hlofuse.jit(fn).lower(*args, **kwargs).as_text())
