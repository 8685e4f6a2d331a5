"""Attribute values and constant literals of HLO text: integer lists, slice and padding
specs, windows, metadata, and a constant's value checked against its declared shape."""

from __future__ import annotations

import re

import numpy as np

from hlofuse.ir.attrs import Metadata, PaddingDim, SliceDim, Window
from hlofuse.ir.hlo_text_reader import HloTextReader
from hlofuse.ir.shapes import Shape

_NUMBER = re.compile(r"[+-]?(?:inf|nan(?:\([^)]*\))?|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")


def parse_int_list(reader: HloTextReader, what: str) -> tuple[int, ...]:
    """`{1,2,3}`: the integers of a list-valued attribute (`what` names it in errors)."""
    reader.expect("{", f"to open {what}")
    values: list[int] = []
    if reader.accept("}"):
        return ()
    while True:
        values.append(reader.integer(what))
        if reader.accept("}"):
            return tuple(values)
        reader.expect(",", f"in {what}")


def parse_slice_spec(reader: HloTextReader) -> tuple[SliceDim, ...]:
    """`{[start:limit:stride], ...}`, one range per dimension (the stride defaults to 1)."""
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


def parse_padding_spec(reader: HloTextReader) -> tuple[PaddingDim, ...]:
    """`low_high[_interior]` per dimension, joined by `x`."""
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


def parse_window_spec(reader: HloTextReader) -> Window:
    """`{size=2x2 stride=1x1 pad=0_1x0_1 ...}`; fields left out take their defaults."""
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


def parse_metadata(reader: HloTextReader) -> Metadata:
    """`{op_name="..." source_line=12 ...}`, with the source location of jax's stack frame."""
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


def parse_literal(reader: HloTextReader, shape: Shape) -> np.ndarray:
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


def _literal_values(reader: HloTextReader, dims: tuple[int, ...], depth: int) -> list[str]:
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
