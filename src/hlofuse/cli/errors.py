"""Bad input as the command line reports it: `UsageError`, and loading an HLO file whose parse
and verify errors name the file, line and column."""

from __future__ import annotations

import re
from pathlib import Path

from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import HloParseError, parse_module
from hlofuse.ir.verifier import HloVerifyError, verify

EXIT_OK = 0
EXIT_WRONG_RESULT = 1
EXIT_BAD_INPUT = 2


class UsageError(Exception):
    """Bad input found by a command: printed as `error: ...`, exit status 2."""


def one_line(message: str) -> str:
    return message.splitlines()[0] if message else message


def load_module(path: str) -> tuple[Module, str]:
    """Parse and verify a file; errors name the file, line and column."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line_start = data.rfind(b"\n", 0, e.start) + 1
        line = data.count(b"\n", 0, e.start) + 1
        column = len(data[line_start:e.start].decode("utf-8")) + 1
        raise UsageError(f"{path}:{line}:{column}: the file is not UTF-8 text") from None
    try:
        module = parse_module(text, path)
    except HloParseError as e:
        raise UsageError(one_line(str(e))) from None
    try:
        verify(module)
    except HloVerifyError as e:
        raise UsageError(f"{definition_site(path, text, e.instruction)}: {e}") from None
    return module, text


def definition_site(path: str, text: str, name: str | None) -> str:
    """`file:line:col` where instruction `name` is defined, or just the file."""
    if name:
        # Point at the name, as the parser's errors do (not at ROOT or a preceding blank line).
        pattern = re.compile(r"^[ \t]*(?:ROOT[ \t]+)?(%?" + re.escape(name) + r")[ \t]*=", re.M)
        m = pattern.search(text)
        if m:
            start = m.start(1)
            line = text.count("\n", 0, start) + 1
            column = start - (text.rfind("\n", 0, start) + 1) + 1
            return f"{path}:{line}:{column}"
    return f"{path}:1:1"
