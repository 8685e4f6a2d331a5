"""What running and profiling a compiled module needs, without the module: saved with its
shared object so that a cache hit skips every pass and all code generation.

An `ExecutablePlan` holds the calling convention (parameter and output buffers, the result's
structure), the arena size, the constant pool, one row per profiled kernel or copy (name, kind,
C function, bytes moved per call), the kernels, the key of the shared object in the cache, and
`facts`: what the caller wants back without compiling again (JSON values); `plan_of` derives it
from a module's generated code. It is written as one file: a JSON header line, then the
constant pool's bytes. The cache directory it lives in is private to the user (the shared
objects next to it are loaded as code), and a damaged file reads as absent; still, every field
is checked on reading, so a malformed plan is refused rather than trusted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hlofuse.codegen.kernel_spec import kernel_instructions
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op
from hlofuse.runtime.buffers import ALIGNMENT
from hlofuse.runtime.program import Buffer, BufferKind, CopyThunk, KernelThunk, Tree, walk

if TYPE_CHECKING:
    from hlofuse.runtime.lowering import Generated

PLAN_FORMAT = 1


class PlanError(ValueError):
    """A saved plan cannot be read back."""


@dataclass(frozen=True)
class KernelInfo:
    """One kernel call site of the program."""

    name: str  # the fusion or unfused instruction
    kind: str
    function: str
    instructions: tuple[str, ...]
    bytes_read: int  # per call
    bytes_written: int


@dataclass(frozen=True)
class ProfileRow:
    """A kernel or copy the driver times: what a profile reports beside the timings."""

    profile_id: int
    name: str
    kind: str
    function: str
    bytes_read: int  # per call
    bytes_written: int


@dataclass(frozen=True)
class ExecutablePlan:
    name: str  # the module's
    parameters: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    result: Tree  # over `outputs`
    arena_bytes: int
    constants: np.ndarray  # the pool: uint8, ALIGNMENT-aligned
    profile_count: int  # profile ids the driver may record (elided copies included)
    profile_rows: tuple[ProfileRow, ...]  # in program order
    kernels: tuple[KernelInfo, ...]
    object_key: str = ""  # the shared object's key in the cache
    facts: Mapping[str, Any] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        header = {
            "format": PLAN_FORMAT, "name": self.name,
            "parameters": [_buffer_json(b) for b in self.parameters],
            "outputs": [_buffer_json(b) for b in self.outputs],
            "result": _tree_json(self.result), "arena_bytes": self.arena_bytes,
            "constant_bytes": int(self.constants.nbytes), "profile_count": self.profile_count,
            "profile_rows": [[r.profile_id, r.name, r.kind, r.function, r.bytes_read,
                              r.bytes_written] for r in self.profile_rows],
            "kernels": [[k.name, k.kind, k.function, list(k.instructions), k.bytes_read,
                         k.bytes_written] for k in self.kernels],
            "object_key": self.object_key, "facts": dict(self.facts),
        }
        return json.dumps(header).encode() + b"\n" + self.constants.tobytes()

    @staticmethod
    def from_bytes(data: bytes) -> ExecutablePlan:
        head, newline, pool = data.partition(b"\n")
        try:
            header = json.loads(head)
            if not newline or not isinstance(header, dict) \
                    or header.get("format") != PLAN_FORMAT:
                raise PlanError("not a plan of this version")
            return _plan(header, pool)
        except (KeyError, TypeError, ValueError) as e:
            raise PlanError(f"malformed plan: {e}") from None


def plan_of(generated: Generated, object_key: str = "") -> ExecutablePlan:
    """What calling and profiling the generated module need (see `ExecutablePlan`)."""
    program = generated.program
    function_of = generated.source.function_of
    rows: list[ProfileRow] = []
    kernels: list[KernelInfo] = []
    for thunk in walk(program.thunks):
        if isinstance(thunk, KernelThunk):
            spec = thunk.spec
            function = function_of[id(thunk)].name
            read, written = _traffic(generated, thunk)
            rows.append(ProfileRow(thunk.profile_id, spec.label, spec.kind, function, read,
                                   written))
            kernels.append(KernelInfo(spec.label, spec.kind, function, spec.instructions, read,
                                      written))
        elif isinstance(thunk, CopyThunk) and id(thunk) not in generated.assignment.elided:
            size = thunk.source.nbytes
            rows.append(ProfileRow(thunk.profile_id, f"copy ({thunk.reason})", "copy", "memcpy",
                                   size, size))
    return ExecutablePlan(generated.module.name, tuple(program.parameters),
                          tuple(program.outputs), program.result,
                          generated.assignment.arena_bytes, generated.constants,
                          len(program.profile_labels), tuple(rows), tuple(kernels), object_key)


def _traffic(generated: Generated, thunk: KernelThunk) -> tuple[int, int]:
    """(bytes read, bytes written) by one call of a kernel."""
    storage = generated.assignment
    read = 0
    seen: set[int] = set()
    for (inst, _path), buffer in zip(thunk.spec.inputs, thunk.inputs):
        if buffer.id in seen:
            continue
        seen.add(buffer.id)
        read += _bytes_read(thunk, inst, buffer)
    written = sum(b.nbytes for b in thunk.outputs)
    for out_k, in_k in generated.emitted[id(thunk)].in_place:
        source, target = thunk.inputs[in_k], thunk.outputs[out_k]
        update = _update_bytes(thunk, out_k)
        if update is not None and storage.of(source) == storage.of(target):
            # An in-place dynamic-update-slice touches only the window it writes.
            read -= source.nbytes
            written += update - target.nbytes
    return read, written


def _bytes_read(thunk: KernelThunk, inst: Instruction, buffer: Buffer) -> int:
    """An input read only through dynamic-slice windows costs the windows, not the array."""
    users = [i for i in kernel_instructions(thunk.spec) if any(o is inst for o in i.operands)]
    if users and all(u.op is Op.DYNAMIC_SLICE and u.operands[0] is inst
                     and all(o is not inst for o in u.operands[1:]) for u in users):
        return min(buffer.nbytes, sum(u.shape.byte_size for u in users))
    return buffer.nbytes


def _update_bytes(thunk: KernelThunk, output: int) -> int | None:
    inst, _ = thunk.spec.outputs[output]
    return inst.operands[1].shape.byte_size if inst.op is Op.DYNAMIC_UPDATE_SLICE else None


def _buffer_json(buffer: Buffer) -> list[object]:
    return [buffer.dtype.text, list(buffer.dims), buffer.number, buffer.label]


def _tree_json(tree: Tree) -> object:
    if isinstance(tree, tuple):
        return [_tree_json(t) for t in tree]
    return None if tree is None else tree.number


def _buffers(items: object, kind: BufferKind, first_id: int) -> tuple[Buffer, ...]:
    out = []
    for k, item in enumerate(_list(items)):
        dtype, dims, number, label = _list(item)
        shape = tuple(_int(d) for d in _list(dims))
        if _int(number) != k or not isinstance(label, str):
            raise PlanError(f"{kind.value} {k} is out of order")
        out.append(Buffer(first_id + k, DType.from_text(str(dtype)), shape, kind, k, label))
    return tuple(out)


def _tree(item: object, outputs: tuple[Buffer, ...]) -> Tree:
    if isinstance(item, list):
        return tuple(_tree(t, outputs) for t in item)
    if item is None:
        return None
    number = _int(item)
    if not 0 <= number < len(outputs):
        raise PlanError(f"the result names output {number} of {len(outputs)}")
    return outputs[number]


def _plan(header: dict[str, Any], pool: bytes) -> ExecutablePlan:
    parameters = _buffers(header["parameters"], BufferKind.PARAMETER, 0)
    outputs = _buffers(header["outputs"], BufferKind.OUTPUT, len(parameters))
    if len(pool) != _int(header["constant_bytes"]):
        raise PlanError("the constant pool is truncated")
    constants = _aligned_copy(pool)
    rows = tuple(ProfileRow(_int(i), str(n), str(k), str(f), _int(r), _int(w))
                 for i, n, k, f, r, w in map(_list, _list(header["profile_rows"])))
    kernels = tuple(KernelInfo(str(n), str(k), str(f), tuple(str(x) for x in _list(i)), _int(r),
                               _int(w))
                    for n, k, f, i, r, w in map(_list, _list(header["kernels"])))
    count = _int(header["profile_count"])
    if any(not 0 <= r.profile_id < count for r in rows):
        raise PlanError("a profile row is out of range")
    facts = header["facts"]
    if not isinstance(facts, dict):
        raise PlanError("facts must be an object")
    return ExecutablePlan(str(header["name"]), parameters, outputs,
                          _tree(header["result"], outputs), _int(header["arena_bytes"]),
                          constants, count, rows, kernels, str(header["object_key"]), facts)


def _aligned_copy(data: bytes) -> np.ndarray:
    raw = np.zeros(len(data) + ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    out = raw[start:start + len(data)]
    out[:] = np.frombuffer(data, np.uint8)
    return out


def _list(value: object) -> list[Any]:
    if not isinstance(value, list):
        raise PlanError(f"expected a list, got {type(value).__name__}")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise PlanError(f"expected a non-negative integer, got {value!r}")
    return value
