"""What a report keeps of a long error message: its first line, or the error's type."""

from __future__ import annotations

from hlofuse.runtime.target import first_line


def test_the_first_line_of_a_long_message() -> None:
    assert first_line(ValueError("Mosaic refused it\n  at line 3\n  at line 9")) == \
        "Mosaic refused it"


def test_leading_blank_lines_are_skipped() -> None:
    assert first_line(RuntimeError("\n\n  the cause\nmore")) == "the cause"


def test_an_empty_message_gives_the_type() -> None:
    assert first_line(RuntimeError("")) == "RuntimeError"
    assert first_line(KeyError()) == "KeyError"
