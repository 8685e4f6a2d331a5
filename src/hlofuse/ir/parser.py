"""HLO text -> Module. Accepts what XLA and jax print: with or without `%` sigils, operand
shapes, signatures on computations, `/*index=N*/` comments and attributes we don't use.

Parsing is two-phase: the text is read into raw computations first (so instructions and
computations may refer to ones defined later, as XLA allows), then built in dependency order.
Every error is an HloParseError with the line and column of the offending text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from hlofuse.ir.attrs import ConvDimLabels, Metadata, PaddingDim, RawAttr, SliceDim, Window
from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.limits import Limits
from hlofuse.ir.ops import COMPLEX_OPCODES, OP_BY_NAME, UNSUPPORTED_XLA_OPCODES, AttrType, Op
from hlofuse.ir.shape_inference import ShapeError
from hlofuse.ir.shapes import Shape

_NAME = re.compile(r"%?([A-Za-z_][A-Za-z0-9_.\-]*)")
_INT = re.compile(r"[+-]?\d+")
# Longer integers than any 64-bit value (20 digits) plus a margin for leading zeros.
_MAX_INT_DIGITS = 64
_NUMBER = re.compile(r"[+-]?(?:inf|nan(?:\([^)]*\))?|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")
_DTYPE_AHEAD = re.compile(r"(?:pred|[su](?:8|16|32|64)|f16|bf16|f32|f64|token)\[")
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


@dataclass
class _RawInstruction:
    name: str
    position: int
    is_root: bool
    shape: Shape
    opcode: Op
    operands: list[tuple[str, int]]  # (name, position)
    attrs: dict[str, object] = field(default_factory=dict)
    calls: list[tuple[str, int]] = field(default_factory=list)
    metadata: Metadata | None = None
    extra: list[tuple[str, RawAttr]] = field(default_factory=list)


@dataclass
class _RawComputation:
    name: str
    position: int
    is_entry: bool
    instructions: list[_RawInstruction]


class _Reader:
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
        text = self.text
        while self.pos < len(text):
            ch = text[self.pos]
            if ch in " \t\r\n":
                self.pos += 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise self.error("unterminated /* comment")
                self.pos = end + 2
            elif text.startswith("//", self.pos) or ch == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                return

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
        m = re.compile(r"[A-Za-z0-9_.\-]+").match(self.text, self.pos)
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


def _int_list(reader: _Reader, what: str) -> tuple[int, ...]:
    reader.expect("{", f"to open {what}")
    values: list[int] = []
    if reader.accept("}"):
        return ()
    while True:
        values.append(reader.integer(what))
        if reader.accept("}"):
            return tuple(values)
        reader.expect(",", f"in {what}")


def _slice_spec(reader: _Reader) -> tuple[SliceDim, ...]:
    reader.expect("{", "to open slice")
    dims: list[SliceDim] = []
    if reader.accept("}"):
        return ()
    while True:
        reader.expect("[", "to open a slice range")
        start = reader.integer("slice start")
        reader.expect(":")
        limit = reader.integer("slice limit")
        stride = reader.integer("slice stride") if reader.accept(":") else 1
        reader.expect("]")
        dims.append(SliceDim(start, limit, stride))
        if reader.accept("}"):
            return tuple(dims)
        reader.expect(",", "between slice ranges")


def _padding_spec(reader: _Reader) -> tuple[PaddingDim, ...]:
    reader.skip()
    start = reader.pos
    m = reader.match(re.compile(r"[-\d_x]+"))
    if not m:
        raise reader.error("expected padding like 0_1x2_3_1", start)
    dims = []
    for part in m.group(0).split("x"):
        numbers = part.split("_")
        if len(numbers) not in (2, 3) or not all(re.fullmatch(r"-?\d{1,64}", n)
                                                 for n in numbers):
            raise reader.error(f"bad padding entry '{part}' (want low_high or low_high_interior)",
                               start)
        values = [int(n) for n in numbers] + ([0] if len(numbers) == 2 else [])
        dims.append(PaddingDim(*values))
    return tuple(dims)


def _window_spec(reader: _Reader) -> Window:
    start = reader.pos
    reader.expect("{", "to open window")
    fields: dict[str, list[list[int]]] = {}
    while not reader.accept("}"):
        key = reader.word()
        reader.expect("=")
        raw = reader.match(re.compile(r"[-\d_x]+"))
        if not raw:
            raise reader.error(f"bad value for window {key}")
        try:
            fields[key] = [[int(v) for v in part.split("_")] for part in raw.group(0).split("x")]
        except ValueError:
            raise reader.error(f"bad value for window {key}: '{raw.group(0)}'") from None
    if "size" not in fields:
        if fields:
            raise reader.error("window needs size=", start)
        return Window((), (), (), (), (), ())
    rank = len(fields["size"])

    def flat(key: str, default: int) -> tuple[int, ...]:
        values = fields.get(key, [[default]] * rank)
        if len(values) != rank or any(len(v) != 1 for v in values):
            raise reader.error(f"window {key} does not match size's rank {rank}", start)
        return tuple(v[0] for v in values)

    pads = fields.get("pad", [[0, 0]] * rank)
    if len(pads) != rank or any(len(p) != 2 for p in pads):
        raise reader.error("window pad must be low_high per dimension", start)
    unknown = set(fields) - {"size", "stride", "pad", "lhs_dilate", "rhs_dilate"}
    if unknown:
        raise reader.error(f"unsupported window field {sorted(unknown)[0]}", start)
    return Window(flat("size", 1), flat("stride", 1), tuple(p[0] for p in pads),
                  tuple(p[1] for p in pads), flat("lhs_dilate", 1), flat("rhs_dilate", 1))


def _metadata(reader: _Reader) -> Metadata:
    reader.expect("{", "to open metadata")
    fields: list[tuple[str, str | int]] = []
    while not reader.accept("}"):
        key = reader.word()
        reader.expect("=")
        if reader.peek('"'):
            fields.append((key, reader.string()))
        elif reader.peek("{"):
            fields.append((key, reader.balanced()))
        else:
            value = reader.word()
            fields.append((key, int(value) if re.fullmatch(r"-?\d{1,64}", value) else value))
        reader.accept(",")
    frame = dict(fields).get("stack_frame_id")
    location = reader.frames.get(frame) if isinstance(frame, int) else None
    return Metadata(tuple(fields), location)


def _literal(reader: _Reader, shape: Shape) -> np.ndarray:
    """A constant's value: a scalar, or nested braces matching the declared shape."""
    start = reader.pos
    if not shape.is_array:
        raise reader.error("only array constants are supported", start)
    if reader.peek("{...}"):
        raise reader.error("the constant's value was elided ('{...}'); print the module with "
                           "large constants included", start)
    values = _literal_values(reader, shape.dims, 0)
    dtype = shape.dtype.numpy
    try:
        array = _convert_literal(values, shape)
    except (ValueError, OverflowError) as e:
        raise reader.error(f"bad {shape.dtype.text} constant: {e}", start) from None
    return array.astype(dtype).reshape(shape.dims)


def _literal_values(reader: _Reader, dims: tuple[int, ...], depth: int) -> list[str]:
    if depth == len(dims):
        is_braced = depth == 0 and reader.accept("{")  # a scalar may be written {1}, once
        reader.skip()
        m = reader.match(re.compile(r"true|false|" + _NUMBER.pattern))
        if not m:
            raise reader.error(f"expected a number, found {reader.describe_next()}")
        if is_braced:
            reader.expect("}", "after the scalar constant")
        return [m.group(0)]
    reader.expect("{", "to open a constant's dimension")
    out: list[str] = []
    count = 0
    if not reader.peek("}"):
        while True:
            reader.skip()
            if count == dims[depth]:  # point at the first element too many
                raise reader.error(f"constant has more than {count} elements in dimension "
                                   f"{depth}, its shape says {dims[depth]}")
            out += _literal_values(reader, dims, depth + 1)
            count += 1
            if reader.peek("}"):
                break
            reader.expect(",", "between constant elements")
    if count != dims[depth]:  # at the closing brace
        raise reader.error(f"constant has {count} elements in dimension {depth}, its shape says "
                           f"{dims[depth]}")
    reader.expect("}")
    return out


def _convert_literal(values: list[str], shape: Shape) -> np.ndarray:
    dtype = shape.dtype
    if dtype.is_pred:
        for v in values:
            if v not in ("true", "false", "0", "1"):
                raise ValueError(f"'{v}' is not a pred value")
        return np.array([v in ("true", "1") for v in values], dtype=np.bool_)
    if dtype.is_integer:
        info = np.iinfo(dtype.numpy)
        ints = []
        for v in values:
            if not re.fullmatch(r"[+-]?\d+", v):
                raise ValueError(f"'{v}' is not an integer")
            number = int(v)
            if not info.min <= number <= info.max:
                raise ValueError(f"{number} is out of range")
            ints.append(number)
        return np.array(ints, dtype=dtype.numpy)
    floats = []
    for v in values:
        if v in ("true", "false"):
            raise ValueError(f"'{v}' is not a number")
        real = float(re.sub(r"\(.*\)", "", v))
        with np.errstate(over="ignore"):
            is_overflow = np.isinf(np.array(real, dtype.numpy)) and "inf" not in v
        if is_overflow:  # as XLA's parser: a finite literal must fit the type
            raise ValueError(f"{v} is out of range")
        floats.append(real)
    return np.array(floats, dtype=np.float64)


# --- instructions and computations -------------------------------------------------------

_CALL_KEYS = {"to_apply", "condition", "body", "calls", "branch_computations",
              "true_computation", "false_computation", "select", "scatter"}
_DIM_LABELS = re.compile(r"[A-Za-z0-9_?]+->[A-Za-z0-9_?]+")


def _parse_attribute(reader: _Reader, raw: _RawInstruction) -> None:
    reader.skip()  # so that errors point at the key, not at the space before it
    key_start = reader.pos
    key = reader.word()
    reader.expect("=", f"after attribute name '{key}'")
    definition = raw.opcode.definition
    spec = definition.attrs.get(key)
    if key in raw.attrs or key == "metadata" and raw.metadata is not None:
        raise reader.error(f"attribute '{key}' given twice", key_start)
    if key == "metadata":
        raw.metadata = _metadata(reader)
    elif key in _CALL_KEYS:
        _parse_call_attribute(reader, raw, key, key_start)
    elif spec is None:
        raw.extra.append((key, RawAttr(reader.balanced())))
    elif spec.type is AttrType.INTS:
        raw.attrs[key] = _int_list(reader, key)
    elif spec.type is AttrType.INT:
        raw.attrs[key] = reader.integer(key)
    elif spec.type is AttrType.STRING:
        raw.attrs[key] = reader.string()
    elif spec.type is AttrType.BOOL:
        value = reader.word()
        if value not in ("true", "false"):
            raise reader.error(f"{key} must be true or false, got '{value}'")
        raw.attrs[key] = value == "true"
    elif spec.type is AttrType.ENUM:
        value_start = reader.pos
        value = reader.word()
        if spec.choices and value not in spec.choices:
            raise reader.error(f"bad value '{value}' for {key}; expected one of "
                               f"{', '.join(spec.choices)}", value_start)
        raw.attrs[key] = value
    elif spec.type is AttrType.SLICE:
        raw.attrs[key] = _slice_spec(reader)
    elif spec.type is AttrType.PADDING:
        raw.attrs[key] = _padding_spec(reader)
    elif spec.type is AttrType.WINDOW:
        raw.attrs[key] = _window_spec(reader)
    elif spec.type is AttrType.DIM_LABELS:
        reader.skip()
        value_start = reader.pos
        m = reader.match(_DIM_LABELS)
        if not m:
            raise reader.error(f"expected dim_labels like b01f_01io->b01f, found "
                               f"{reader.describe_next()}", value_start)
        try:
            raw.attrs[key] = ConvDimLabels.parse(m.group(0))
        except ValueError as e:
            raise reader.error(str(e), value_start) from None


def _parse_call_attribute(reader: _Reader, raw: _RawInstruction, key: str,
                          key_start: int) -> None:
    expected = raw.opcode.definition.call_attrs
    allowed = set(expected)
    if "branch_computations*" in allowed:
        allowed = {"branch_computations", "true_computation", "false_computation"}
    if key not in allowed:
        raise reader.error(f"{raw.opcode.text} does not take {key}=", key_start)
    if key == "branch_computations":
        reader.expect("{", "to open branch_computations")
        while not reader.accept("}"):
            raw.calls.append(reader.name("a computation name"))
            reader.accept(",")
        raw.attrs["_call:" + key] = True
        return
    name = reader.name("a computation name")
    raw.attrs["_call:" + key] = name


def _order_calls(reader: _Reader, raw: _RawInstruction) -> None:
    """Put the named computations into the op's call order and check none is missing."""
    names = raw.opcode.definition.call_attrs
    if names == ("branch_computations*",):
        if raw.attrs.pop("_call:branch_computations", None):
            if "_call:true_computation" in raw.attrs:
                raise reader.error("conditional mixes branch_computations and "
                                   "true_computation", raw.position)
            return
        pair = [raw.attrs.pop("_call:true_computation", None),
                raw.attrs.pop("_call:false_computation", None)]
        if None in pair:
            raise reader.error("conditional needs branch_computations= or both "
                               "true_computation= and false_computation=", raw.position)
        raw.calls = [p for p in pair if isinstance(p, tuple)]
        return
    for key in names:
        value = raw.attrs.pop("_call:" + key, None)
        if not isinstance(value, tuple):
            raise reader.error(f"{raw.opcode.text} %{raw.name} needs {key}=", raw.position)
        raw.calls.append(value)


def _parse_instruction(reader: _Reader) -> _RawInstruction:
    is_root = reader.accept("ROOT ") or reader.accept("ROOT\t")
    name, position = reader.name("an instruction name")
    reader.expect("=", f"after instruction name '{name}'")
    shape = reader.shape()
    opcode_start = reader.pos
    reader.skip()
    opcode_start = reader.pos
    opcode_text = reader.word()
    op = OP_BY_NAME.get(opcode_text)
    if op is None:
        if opcode_text in COMPLEX_OPCODES:
            raise reader.error(f"opcode '{opcode_text}' is not supported by hlofuse (complex "
                               "numbers are not supported)", opcode_start)
        if opcode_text in UNSUPPORTED_XLA_OPCODES:
            raise reader.error(f"opcode '{opcode_text}' is not supported by hlofuse",
                               opcode_start)
        raise reader.error(f"unknown opcode '{opcode_text}'", opcode_start)
    raw = _RawInstruction(name, position, is_root, shape, op, [])
    reader.expect("(", f"after opcode '{opcode_text}'")
    if op is Op.PARAMETER:
        number = reader.integer("the parameter number")
        if number < 0:
            raise reader.error("parameter number must be >= 0")
        raw.attrs["parameter_number"] = number
        reader.expect(")")
    elif op is Op.CONSTANT:
        raw.attrs["literal"] = _literal(reader, shape)
        reader.expect(")", "after the constant's value")
    else:
        _parse_operands(reader, raw)
    while reader.accept(","):
        _parse_attribute(reader, raw)
    _order_calls(reader, raw)
    for key, spec in op.definition.attrs.items():
        if spec.required and key not in raw.attrs:
            raise reader.error(f"{opcode_text} %{name} needs {key}=", position)
    return raw


def _parse_operands(reader: _Reader, raw: _RawInstruction) -> None:
    if reader.accept(")"):
        return
    while True:
        reader.skip()
        if reader.peek("(") or _DTYPE_AHEAD.match(reader.text, reader.pos):
            reader.shape()  # operand shapes are optional and redundant: ignored
        raw.operands.append(reader.name("an operand name"))
        if reader.accept(")"):
            return
        reader.expect(",", "between operands")


def _parse_signature(reader: _Reader) -> None:
    """Skip an optional `(p: f32[], q: s32[]) -> f32[]` after a computation name."""
    if not reader.accept("("):
        return
    if not reader.accept(")"):
        while True:
            reader.name("a parameter name")
            reader.expect(":")
            reader.shape()
            if reader.accept(")"):
                break
            reader.expect(",", "between parameters")
    reader.expect("->")
    reader.shape()


def _parse_computation(reader: _Reader) -> _RawComputation:
    reader.skip()
    is_entry = reader.accept("ENTRY ") or reader.accept("ENTRY\t")
    name, position = reader.name("a computation name")
    _parse_signature(reader)
    reader.expect("{", f"to open computation '{name}'")
    instructions: list[_RawInstruction] = []
    while not reader.accept("}"):
        if reader.at_end():
            raise reader.error(f"computation '{name}' is not closed with '}}'")
        instructions.append(_parse_instruction(reader))
    if not instructions:
        raise reader.error(f"computation '{name}' has no instructions", position)
    return _RawComputation(name, position, is_entry, instructions)


def _parse_header(reader: _Reader) -> str:
    reader.skip()
    if not reader.accept("HloModule"):
        raise reader.error(f"expected 'HloModule', found {reader.describe_next()}")
    name, _ = reader.name("the module name")
    while reader.accept(","):
        reader.word()
        reader.expect("=")
        reader.balanced()
    return name


_DEBUG_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_TABLE_ENTRY_ID = re.compile(r"\d{1,64}(?=[ \t])")
_TABLE_HEAD = re.compile(r"(FileNames|FunctionNames|FileLocations|StackFrames)\s*\n")


def _parse_debug_tables(reader: _Reader) -> tuple[tuple[str, tuple[tuple[int, str], ...]], ...]:
    """jax's `debug_info=True` tables between the header and the first computation."""
    tables: list[tuple[str, tuple[tuple[int, str], ...]]] = []
    while True:
        reader.skip()
        m = _TABLE_HEAD.match(reader.text, reader.pos)
        if not m:
            return tuple(tables)
        reader.pos = m.end()
        entries: list[tuple[int, str]] = []
        while (number := reader.match(_TABLE_ENTRY_ID)) is not None:
            entries.append((int(number.group(0)), reader.balanced()))
        tables.append((m.group(1), tuple(entries)))


def _resolve_locations(tables: tuple[tuple[str, tuple[tuple[int, str], ...]], ...]
                       ) -> dict[int, str]:
    """stack_frame_id -> `file:line` of the frame's own location (the innermost one)."""
    by_name = {name: dict(entries) for name, entries in tables}
    files = {k: v.strip('"') for k, v in by_name.get("FileNames", {}).items()}
    locations: dict[int, str] = {}
    for key, text in by_name.get("FileLocations", {}).items():
        fields = dict(re.findall(r"(\w+)=(-?\d{1,64})\b", text))
        file_name = files.get(int(fields.get("file_name_id", -1)))
        if file_name is not None and "line" in fields:
            locations[key] = f"{file_name}:{fields['line']}"
    frames: dict[int, str] = {}
    for key, text in by_name.get("StackFrames", {}).items():
        m = re.search(r"file_location_id=(\d{1,64})\b", text)
        if m and int(m.group(1)) in locations:
            frames[key] = locations[int(m.group(1))]
    return frames


# --- phase 2: build ----------------------------------------------------------------------


class _ModuleBuilder:
    def __init__(self, reader: _Reader, raws: list[_RawComputation]) -> None:
        self.reader = reader
        self.raws: dict[str, _RawComputation] = {}
        for raw in raws:
            if raw.name in self.raws:
                raise reader.error(f"duplicate computation name '{raw.name}'", raw.position)
            self.raws[raw.name] = raw
        self.built: dict[str, Computation] = {}
        self.in_progress: set[str] = set()
        self.names = NameUniquer()

    def callees_first(self) -> list[_RawComputation]:
        """Every computation after the ones it calls, found without recursion (a call chain
        can be longer than Python's stack); refuses undefined callees and recursion."""
        order: list[_RawComputation] = []
        state: dict[str, int] = {}  # 1 visiting, 2 done
        calls = {c.name: [call for inst in c.instructions for call in inst.calls]
                 for c in self.raws.values()}
        for start in self.raws.values():
            if state.get(start.name):
                continue
            state[start.name] = 1
            stack: list[tuple[_RawComputation, int]] = [(start, 0)]
            while stack:
                comp, next_call = stack.pop()
                if next_call == len(calls[comp.name]):
                    state[comp.name] = 2
                    order.append(comp)
                    continue
                stack.append((comp, next_call + 1))
                name, position = calls[comp.name][next_call]
                callee = self.raws.get(name)
                if callee is None:
                    raise self.reader.error(f"undefined computation '{name}'", position)
                if state.get(name) == 1:
                    raise self.reader.error(f"computation '{name}' calls itself (recursion is "
                                            f"not allowed), here from '{comp.name}'", position)
                if state.get(name) is None:
                    state[name] = 1
                    stack.append((callee, 0))
        return order

    def computation(self, name: str, position: int) -> Computation:
        if name in self.built:
            return self.built[name]
        raw = self.raws.get(name)
        if raw is None:
            raise self.reader.error(f"undefined computation '{name}'", position)
        if name in self.in_progress:
            raise self.reader.error(f"computation '{name}' calls itself (recursion is not "
                                    "allowed)", position)
        self.in_progress.add(name)
        built = self._build(raw)
        self.in_progress.discard(name)
        self.built[name] = built
        return built

    def _build(self, raw: _RawComputation) -> Computation:
        by_name: dict[str, _RawInstruction] = {}
        for inst in raw.instructions:
            if inst.name in by_name:
                raise self.reader.error(f"duplicate instruction name '{inst.name}'",
                                        inst.position)
            by_name[inst.name] = inst
        roots = [i for i in raw.instructions if i.is_root]
        if len(roots) > 1:
            raise self.reader.error(f"computation '{raw.name}' has more than one ROOT",
                                    roots[1].position)
        order = self._topological(raw, by_name)
        builder = ComputationBuilder(raw.name, self.names)
        done: dict[str, Instruction] = {}
        for inst in order:
            done[inst.name] = self._instruction(builder, inst, done)
        self._check_parameters(raw)
        root_raw = roots[0] if roots else raw.instructions[-1]
        return builder.build(done[root_raw.name])

    def _topological(self, raw: _RawComputation,
                     by_name: dict[str, _RawInstruction]) -> list[_RawInstruction]:
        for inst in raw.instructions:
            for operand, position in inst.operands:
                if operand not in by_name:
                    raise self.reader.error(f"undefined operand '{operand}' of '{inst.name}'",
                                            position)
        order: list[_RawInstruction] = []
        state: dict[str, int] = {}  # 1 visiting, 2 done
        for start in raw.instructions:
            if state.get(start.name):
                continue
            stack: list[tuple[_RawInstruction, int]] = [(start, 0)]
            state[start.name] = 1
            while stack:
                inst, next_operand = stack.pop()
                if next_operand < len(inst.operands):
                    stack.append((inst, next_operand + 1))
                    child = by_name[inst.operands[next_operand][0]]
                    mark = state.get(child.name)
                    if mark == 1:
                        raise self.reader.error(
                            f"cycle: '{child.name}' depends on itself through '{inst.name}'",
                            inst.operands[next_operand][1])
                    if mark is None:
                        state[child.name] = 1
                        stack.append((child, 0))
                    continue
                state[inst.name] = 2
                order.append(inst)
        return order

    def _instruction(self, builder: ComputationBuilder, raw: _RawInstruction,
                     done: dict[str, Instruction]) -> Instruction:
        operands = [done[name] for name, _ in raw.operands]
        definition = raw.opcode.definition
        if definition.arity is not None and len(operands) != definition.arity:
            raise self.reader.error(f"{raw.opcode.text} takes {definition.arity} operand(s), "
                                    f"'{raw.name}' has {len(operands)}", raw.position)
        if definition.arity is None and len(operands) < definition.min_arity:
            raise self.reader.error(f"{raw.opcode.text} takes at least {definition.min_arity} "
                                    f"operand(s), '{raw.name}' has {len(operands)}",
                                    raw.position)
        calls = [self.computation(name, position) for name, position in raw.calls]
        try:
            inst = builder.add(raw.opcode, operands, attrs=raw.attrs, calls=calls,
                               shape=raw.shape, name=raw.name, metadata=raw.metadata,
                               extra=raw.extra)
        except ShapeError as e:
            raise self.reader.error(f"invalid {raw.opcode.text} '{raw.name}': {e}",
                                    raw.position) from None
        except ValueError as e:
            raise self.reader.error(str(e), raw.position) from None
        if inst.shape != raw.shape:
            raise self.reader.error(
                f"'{raw.name}' is declared {raw.shape.text(False)} but {raw.opcode.text} "
                f"produces {inst.shape.text(False)}", raw.position)
        return inst

    def _check_parameters(self, raw: _RawComputation) -> None:
        # parameter_number is an int: its schema was checked when the instruction was read.
        numbers = sorted(((cast(int, i.attrs["parameter_number"]), i) for i in raw.instructions
                          if i.opcode is Op.PARAMETER), key=lambda pair: pair[0])
        for (first, _), (number, inst) in zip(numbers, numbers[1:]):
            if first == number:
                raise self.reader.error(f"computation '{raw.name}' has parameter({number}) twice",
                                        inst.position)
        for expected, (number, inst) in enumerate(numbers):
            if number != expected:
                raise self.reader.error(f"computation '{raw.name}' has parameter({number}) but "
                                        f"no parameter({expected})", inst.position)


def parse_module(text: str, filename: str | None = None,
                 max_buffer_bytes: int | None = None) -> Module:
    """Parse HLO text into a Module; raises HloParseError with line and column. The buffer
    cap defaults to `Limits.from_env()` ($HLOFUSE_MAX_BUFFER_BYTES, else 4 GiB)."""
    if max_buffer_bytes is None:
        max_buffer_bytes = Limits.from_env().max_buffer_bytes
    if "\x00" in text:
        position = text.index("\x00")
        raise _Reader(text, filename, max_buffer_bytes).error("binary data in HLO text",
                                                             position)
    reader = _Reader(text, filename, max_buffer_bytes)
    if reader.at_end():
        raise reader.error("empty input: expected 'HloModule'")
    module_name = _parse_header(reader)
    debug_tables = _parse_debug_tables(reader)
    reader.frames = _resolve_locations(debug_tables)
    raws: list[_RawComputation] = []
    while not reader.at_end():
        raws.append(_parse_computation(reader))
    if not raws:
        raise reader.error("module has no computations")
    entries = [r for r in raws if r.is_entry]
    if len(entries) > 1:
        raise reader.error("module has more than one ENTRY computation", entries[1].position)
    entry_raw = entries[0] if entries else raws[-1]
    builder = _ModuleBuilder(reader, raws)
    callees_first = builder.callees_first()
    for raw in callees_first:
        builder.computation(raw.name, raw.position)
    entry = builder.built[entry_raw.name]
    # Module keeps callees before callers (the order XLA prints), whatever the text's order.
    ordered = tuple(builder.built[r.name] for r in callees_first if r is not entry_raw) + (entry,)
    return Module(module_name, ordered, entry, debug_tables)


def parse_file(path: str, max_buffer_bytes: int | None = None) -> Module:
    if max_buffer_bytes is None:
        max_buffer_bytes = Limits.from_env().max_buffer_bytes
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise HloParseError(f"cannot read file: {e.strerror}", 1, 1, "", path) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        reader = _Reader(data.decode("utf-8", "replace"), path, max_buffer_bytes)
        position = len(data[:e.start].decode("utf-8"))  # e.start counts bytes, not characters
        raise reader.error("the file is not UTF-8 text", position) from None
    return parse_module(text, path, max_buffer_bytes)
