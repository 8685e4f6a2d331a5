"""HLO text -> Module. Accepts what XLA and jax print: with or without `%` sigils, operand
shapes, signatures on computations, `/*index=N*/` comments and attributes we don't use.

Parsing is two-phase: the text is read into raw computations first (so instructions and
computations may refer to ones defined later, as XLA allows), then built in dependency order.
Every error is an HloParseError with the line and column of the offending text.

This module reads the module header and jax's debug tables, builds the module (phase 2) and
holds the entry points; the lexer is hlo_text_reader.py, attribute values and constants are
hlo_text_attributes.py, and computations and instructions are read by hlo_text_computations.py
(phase 1).
"""

from __future__ import annotations

import re
from typing import cast

from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.hlo_text_computations import RawComputation, RawInstruction, parse_computation
from hlofuse.ir.hlo_text_reader import HloParseError, HloTextReader
from hlofuse.ir.limits import Limits
from hlofuse.ir.ops import Op
from hlofuse.ir.shape_inference.checks import ShapeError

# The parser's public API; HloParseError is defined with the lexer that raises it.
__all__ = ["HloParseError", "parse_file", "parse_module"]


def _parse_header(reader: HloTextReader) -> str:
    reader.skip()
    if not reader.accept("HloModule"):
        raise reader.error(f"expected 'HloModule', found {reader.describe_next()}")
    name, _ = reader.name("the module name")
    while reader.accept(","):
        reader.word()
        reader.expect("=")
        reader.balanced()
    return name


_TABLE_ENTRY_ID = re.compile(r"\d{1,64}(?=[ \t])")
_TABLE_HEAD = re.compile(r"(FileNames|FunctionNames|FileLocations|StackFrames)\s*\n")


def _parse_debug_tables(reader: HloTextReader
                        ) -> tuple[tuple[str, tuple[tuple[int, str], ...]], ...]:
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
    def __init__(self, reader: HloTextReader, raws: list[RawComputation]) -> None:
        self.reader = reader
        self.raws: dict[str, RawComputation] = {}
        for raw in raws:
            if raw.name in self.raws:
                raise reader.error(f"duplicate computation name '{raw.name}'", raw.position)
            self.raws[raw.name] = raw
        self.built: dict[str, Computation] = {}
        self.in_progress: set[str] = set()
        self.names = NameUniquer()

    def callees_first(self) -> list[RawComputation]:
        """Every computation after the ones it calls, found without recursion (a call chain
        can be longer than Python's stack); refuses undefined callees and recursion."""
        order: list[RawComputation] = []
        state: dict[str, int] = {}  # 1 visiting, 2 done
        calls = {c.name: [call for inst in c.instructions for call in inst.calls]
                 for c in self.raws.values()}
        for start in self.raws.values():
            if state.get(start.name):
                continue
            state[start.name] = 1
            stack: list[tuple[RawComputation, int]] = [(start, 0)]
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

    def _build(self, raw: RawComputation) -> Computation:
        by_name: dict[str, RawInstruction] = {}
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

    def _topological(self, raw: RawComputation,
                     by_name: dict[str, RawInstruction]) -> list[RawInstruction]:
        for inst in raw.instructions:
            for operand, position in inst.operands:
                if operand not in by_name:
                    raise self.reader.error(f"undefined operand '{operand}' of '{inst.name}'",
                                            position)
        order: list[RawInstruction] = []
        state: dict[str, int] = {}  # 1 visiting, 2 done
        for start in raw.instructions:
            if state.get(start.name):
                continue
            stack: list[tuple[RawInstruction, int]] = [(start, 0)]
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

    def _instruction(self, builder: ComputationBuilder, raw: RawInstruction,
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

    def _check_parameters(self, raw: RawComputation) -> None:
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
        raise HloTextReader(text, filename, max_buffer_bytes).error("binary data in HLO text",
                                                             position)
    reader = HloTextReader(text, filename, max_buffer_bytes)
    if reader.at_end():
        raise reader.error("empty input: expected 'HloModule'")
    module_name = _parse_header(reader)
    debug_tables = _parse_debug_tables(reader)
    reader.frames = _resolve_locations(debug_tables)
    raws: list[RawComputation] = []
    while not reader.at_end():
        raws.append(parse_computation(reader))
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
        reader = HloTextReader(data.decode("utf-8", "replace"), path, max_buffer_bytes)
        position = len(data[:e.start].decode("utf-8"))  # e.start counts bytes, not characters
        raise reader.error("the file is not UTF-8 text", position) from None
    return parse_module(text, path, max_buffer_bytes)
