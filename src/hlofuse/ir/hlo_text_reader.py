"""The lexer of HLO text: a character scanner with line and column positions that skips
whitespace and comments, reads names, integers, strings and shapes (with layouts), and makes
every error an HloParseError pointing at the offending text."""

from __future__ import annotations

import re

from hlofuse.ir.dtypes import DType
from hlofuse.ir.shapes import Shape

_NAME = re.compile(r"%?([A-Za-z_][A-Za-z0-9_.\-]*)")
_INT = re.compile(r"[+-]?\d+")
# Whitespace and comments between tokens (an unterminated /* comment stops the match).
_BLANKS = re.compile(r"(?:[ \t\r\n]+|/\*.*?\*/|//[^\n]*|#[^\n]*)*", re.DOTALL)
_BLANK_STARTS = frozenset(" \t\r\n/#")
_WORD = re.compile(r"[A-Za-z0-9_.\-]+")
# Longer integers than any 64-bit value (20 digits) plus a margin for leading zeros.
_MAX_INT_DIGITS = 64
_MAX_RANK = 64
_LAYOUT_AHEAD = re.compile(r"\{[ \t]*[\d}]")
# Tuple shapes nest this deep at most: deeper text is refused before Python's recursion limit.
_MAX_TUPLE_DEPTH = 64


class HloParseError(ValueError):
    """Malformed HLO text, with the position of the problem."""

    def __init__(self, message: str, line: int, column: int, source_line: str = "",
                 filename: str | None = None) -> None:
        self.message = message
        self.line = line
        self.column = column
        self.source_line = source_line
        self.filename = filename
        super().__init__(self._render())

    def _render(self) -> str:
        where = f"{self.filename or '<text>'}:{self.line}:{self.column}"
        text = f"{where}: {self.message}"
        if self.source_line:
            # At most 200 characters of the line, from far enough left to include the column
            # (jax's lines with metadata run to many hundreds).
            start = max(0, self.column - 150) if len(self.source_line) > 200 else 0
            marker = "..." if start else ""
            excerpt = self.source_line[start:start + 200]
            # Keep the line's tabs so the caret lines up under tab-indented text.
            pad = "".join(c if c == "\t" else " "
                          for c in marker + self.source_line[start:self.column - 1])
            text += f"\n  {marker}{excerpt}\n  {pad}^"
        return text


class HloTextReader:
    """Character-level scanner with positions; skips whitespace and comments."""

    def __init__(self, text: str, filename: str | None, max_buffer_bytes: int) -> None:
        self.text = text
        self.pos = 0
        self.filename = filename
        self.max_buffer_bytes = max_buffer_bytes
        self.frames: dict[int, str] = {}  # stack_frame_id -> file:line
        self._line_starts = [0] + [m.end() for m in re.finditer(r"\n", text)]

    # --- positions and errors ---

    def location(self, position: int) -> tuple[int, int]:
        lo, hi = 0, len(self._line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._line_starts[mid] <= position:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, position - self._line_starts[lo] + 1

    def error(self, message: str, position: int | None = None) -> HloParseError:
        position = self.pos if position is None else position
        line, column = self.location(position)
        start = self._line_starts[line - 1]
        end = self.text.find("\n", start)
        source_line = self.text[start:end if end >= 0 else len(self.text)]
        return HloParseError(message, line, column, source_line, self.filename)

    # --- scanning ---

    def skip(self) -> None:
        text, pos = self.text, self.pos
        if pos >= len(text) or text[pos] not in _BLANK_STARTS:
            return  # at a token: the parser asks before almost every one
        match = _BLANKS.match(text, pos)
        assert match is not None  # the pattern matches the empty string
        self.pos = match.end()
        if text.startswith("/*", self.pos):
            raise self.error("unterminated /* comment")

    def at_end(self) -> bool:
        self.skip()
        return self.pos >= len(self.text)

    def peek(self, literal: str) -> bool:
        self.skip()
        return self.text.startswith(literal, self.pos)

    def accept(self, literal: str) -> bool:
        if self.peek(literal):
            self.pos += len(literal)
            return True
        return False

    def expect(self, literal: str, what: str | None = None) -> None:
        if not self.accept(literal):
            raise self.error(f"expected '{literal}'" + (f" {what}" if what else "") +
                             f", found {self.describe_next()}")

    def describe_next(self) -> str:
        self.skip()
        if self.pos >= len(self.text):
            return "end of input"
        snippet = self.text[self.pos:self.pos + 20].split("\n")[0]
        return repr(snippet)

    def match(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        self.skip()
        m = pattern.match(self.text, self.pos)
        if m:
            self.pos = m.end()
        return m

    def name(self, what: str) -> tuple[str, int]:
        self.skip()
        start = self.pos
        m = self.match(_NAME)
        if not m:
            raise self.error(f"expected {what}, found {self.describe_next()}")
        return m.group(1), start

    def integer(self, what: str) -> int:
        m = self.match(_INT)
        if not m:
            raise self.error(f"expected an integer for {what}, found {self.describe_next()}")
        if len(m.group(0)) > _MAX_INT_DIGITS:  # Python refuses to convert beyond 4,300 digits
            raise self.error(f"{what} {m.group(0)[:20]}... has {len(m.group(0)):,} digits, "
                             f"more than any 64-bit integer", m.start())
        return int(m.group(0))

    def word(self) -> str:
        self.skip()
        m = _WORD.match(self.text, self.pos)
        if not m:
            raise self.error(f"expected a word, found {self.describe_next()}")
        self.pos = m.end()
        return m.group(0)

    def balanced(self) -> str:
        """Raw text up to the next top-level ',' or end of line, with brackets balanced."""
        self.skip()
        start = self.pos
        depth = 0
        text = self.text
        closers = {"}": "{", ")": "(", "]": "["}
        stack: list[str] = []
        while self.pos < len(text):
            ch = text[self.pos]
            if ch == '"':
                self._skip_string()
                continue
            if ch in "{([":
                stack.append(ch)
                depth += 1
            elif ch in "})]":
                if not stack:
                    break
                if stack.pop() != closers[ch]:
                    raise self.error(f"unbalanced '{ch}'")
                depth -= 1
            elif depth == 0 and ch in ",\n":
                break
            self.pos += 1
        if stack:
            raise self.error(f"unbalanced '{stack[-1]}' in attribute value", start)
        value = text[start:self.pos].strip()
        if not value:
            raise self.error("expected an attribute value", start)
        return value

    def _skip_string(self) -> None:
        start = self.pos
        self.pos += 1
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "\\":
                self.pos += 2
                continue
            if ch == '"':
                self.pos += 1
                return
            if ch == "\n":
                break
            self.pos += 1
        raise self.error("unterminated string", start)

    def string(self) -> str:
        self.skip()
        if not self.text.startswith('"', self.pos):
            raise self.error(f"expected a quoted string, found {self.describe_next()}")
        start = self.pos
        self._skip_string()
        body = self.text[start + 1:self.pos - 1]
        return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)),
                      body)

    # --- shapes ---

    def shape(self, depth: int = 0) -> Shape:
        self.skip()
        start = self.pos
        if self.accept("("):
            if depth >= _MAX_TUPLE_DEPTH:
                raise self.error(f"tuple shapes nested deeper than {_MAX_TUPLE_DEPTH} levels",
                                 start)
            elements: list[Shape] = []
            if not self.accept(")"):
                while True:
                    elements.append(self.shape(depth + 1))
                    if self.accept(")"):
                        break
                    self.expect(",", "between tuple shape elements")
            return Shape.tuple_of(elements)
        m = self.match(re.compile(r"([a-z]+\d*)\["))
        if not m:
            raise self.error(f"expected a shape, found {self.describe_next()}", start)
        try:
            dtype = DType.from_text(m.group(1))
        except ValueError as e:
            raise self.error(str(e), start) from None
        dims: list[int] = []
        if not self.accept("]"):
            while True:
                self.skip()
                if self.peek("<=") or self.peek("?"):
                    raise self.error("dynamic dimensions are not supported")
                size = self.integer("a dimension size")
                if size < 0:
                    raise self.error(f"negative dimension size {size}")
                dims.append(size)
                if len(dims) > _MAX_RANK:
                    raise self.error(f"rank above {_MAX_RANK} is not supported", start)
                if self.accept("]"):
                    break
                self.expect(",", "between dimension sizes")
        if dtype is DType.TOKEN:
            return Shape.token()
        layout = self._layout(len(dims))
        shape = Shape(dtype, tuple(dims), (), layout)
        if dims and not dtype.is_array:
            raise self.error(f"{dtype.text} cannot have dimensions", start)
        if shape.byte_size > self.max_buffer_bytes:
            raise self.error(f"shape {shape.text(False)} needs {shape.byte_size} bytes, above "
                             f"the cap of {self.max_buffer_bytes} bytes per buffer (set "
                             "$HLOFUSE_MAX_BUFFER_BYTES or pass max_buffer_bytes= to raise it)",
                             start)
        return shape

    def _layout(self, rank: int) -> tuple[int, ...] | None:
        # A layout starts with a digit or is `{}`; in `-> f32[2] {` the brace opens a body.
        if not self.peek("{") or not _LAYOUT_AHEAD.match(self.text, self.pos):
            return None
        start = self.pos
        self.expect("{")
        minor_to_major: list[int] = []
        if not self.accept("}"):
            while True:
                minor_to_major.append(self.integer("a layout dimension"))
                if self.peek(":"):
                    raise self.error("tiled or memory-space layouts are not supported")
                if self.accept("}"):
                    break
                self.expect(",", "in layout")
        if sorted(minor_to_major) != list(range(rank)):
            raise self.error(f"layout {{{','.join(map(str, minor_to_major))}}} is not a "
                             f"permutation of the {rank} dimensions", start)
        return tuple(minor_to_major)
