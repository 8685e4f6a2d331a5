"""The first phase of parsing HLO text: every computation and instruction read into raw
records, with names of operands and called computations not yet resolved (so text may refer
to ones defined later, as XLA allows); attributes are read by the opcode's schema."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hlofuse.ir.attrs import ConvDimLabels, Metadata, RawAttr
from hlofuse.ir.hlo_text_attributes import (
    parse_int_list,
    parse_literal,
    parse_metadata,
    parse_padding_spec,
    parse_slice_spec,
    parse_window_spec,
)
from hlofuse.ir.hlo_text_reader import HloTextReader
from hlofuse.ir.ops import COMPLEX_OPCODES, OP_BY_NAME, UNSUPPORTED_XLA_OPCODES, AttrType, Op
from hlofuse.ir.shapes import Shape

_DTYPE_AHEAD = re.compile(r"(?:pred|[su](?:8|16|32|64)|f16|bf16|f32|f64|token)\[")
_CALL_KEYS = {"to_apply", "condition", "body", "calls", "branch_computations",
              "true_computation", "false_computation", "select", "scatter"}
_DIM_LABELS = re.compile(r"[A-Za-z0-9_?]+->[A-Za-z0-9_?]+")


@dataclass
class RawInstruction:
    """An instruction as written: operands and called computations by name and position."""

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
class RawComputation:
    """A computation as written, its instructions in text order."""

    name: str
    position: int
    is_entry: bool
    instructions: list[RawInstruction]



def _parse_attribute(reader: HloTextReader, raw: RawInstruction) -> None:
    reader.skip()  # so that errors point at the key, not at the space before it
    key_start = reader.pos
    key = reader.word()
    reader.expect("=", f"after attribute name '{key}'")
    definition = raw.opcode.definition
    spec = definition.attrs.get(key)
    if key in raw.attrs or key == "metadata" and raw.metadata is not None:
        raise reader.error(f"attribute '{key}' given twice", key_start)
    if key == "metadata":
        raw.metadata = parse_metadata(reader)
    elif key in _CALL_KEYS:
        _parse_call_attribute(reader, raw, key, key_start)
    elif spec is None:
        raw.extra.append((key, RawAttr(reader.balanced())))
    elif spec.type is AttrType.INTS:
        raw.attrs[key] = parse_int_list(reader, key)
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
        raw.attrs[key] = parse_slice_spec(reader)
    elif spec.type is AttrType.PADDING:
        raw.attrs[key] = parse_padding_spec(reader)
    elif spec.type is AttrType.WINDOW:
        raw.attrs[key] = parse_window_spec(reader)
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


def _parse_call_attribute(reader: HloTextReader, raw: RawInstruction, key: str,
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


def _order_calls(reader: HloTextReader, raw: RawInstruction) -> None:
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


def _parse_instruction(reader: HloTextReader) -> RawInstruction:
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
    raw = RawInstruction(name, position, is_root, shape, op, [])
    reader.expect("(", f"after opcode '{opcode_text}'")
    if op is Op.PARAMETER:
        number = reader.integer("the parameter number")
        if number < 0:
            raise reader.error("parameter number must be >= 0")
        raw.attrs["parameter_number"] = number
        reader.expect(")")
    elif op is Op.CONSTANT:
        raw.attrs["literal"] = parse_literal(reader, shape)
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


def _parse_operands(reader: HloTextReader, raw: RawInstruction) -> None:
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


def _parse_signature(reader: HloTextReader) -> None:
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


def parse_computation(reader: HloTextReader) -> RawComputation:
    """One computation: `[ENTRY] name [signature] { instructions }`."""
    reader.skip()
    is_entry = reader.accept("ENTRY ") or reader.accept("ENTRY\t")
    name, position = reader.name("a computation name")
    _parse_signature(reader)
    reader.expect("{", f"to open computation '{name}'")
    instructions: list[RawInstruction] = []
    while not reader.accept("}"):
        if reader.at_end():
            raise reader.error(f"computation '{name}' is not closed with '}}'")
        instructions.append(_parse_instruction(reader))
    if not instructions:
        raise reader.error(f"computation '{name}' has no instructions", position)
    return RawComputation(name, position, is_entry, instructions)

