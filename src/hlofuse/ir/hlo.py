"""Instructions, computations and modules: immutable HLO data."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from hlofuse.ir.attrs import Metadata, RawAttr
from hlofuse.ir.dtypes import DType
from hlofuse.ir.ops import Op, OpDef
from hlofuse.ir.shapes import Shape

_EMPTY: Mapping[str, object] = MappingProxyType({})


@dataclass(frozen=True, slots=True, eq=False, init=False)
class Instruction:
    """One HLO instruction. Identity equality: two instructions are equal only if the same object.

    `attrs` holds the op's schema attributes as Python values (ints, tuples, SliceDim, Window,
    and for constants the literal as a NumPy array under "literal", for parameters the number
    under "parameter_number"). `extra` keeps attributes hlofuse does not interpret, verbatim.
    """

    name: str
    op: Op
    operands: tuple[Instruction, ...]
    shape: Shape
    attrs: Mapping[str, object] = field(default_factory=lambda: _EMPTY)
    calls: tuple[Computation, ...] = ()
    metadata: Metadata | None = None
    extra: tuple[tuple[str, RawAttr], ...] = ()

    def __init__(self, name: str, op: Op, operands: tuple[Instruction, ...], shape: Shape,
                 attrs: Mapping[str, object] = _EMPTY, calls: tuple[Computation, ...] = (),
                 metadata: Metadata | None = None,
                 extra: tuple[tuple[str, RawAttr], ...] = ()) -> None:
        # The dataclass's own __init__ sets each field by `object.__setattr__(self, "name",
        # ...)`; the slots' descriptors set them directly, at half the cost. Instructions are
        # created by the hundred thousand per pass on a large module.
        _set_name(self, name)
        _set_op(self, op)
        _set_operands(self, operands)
        _set_shape(self, shape)
        _set_attrs(self, attrs)
        _set_calls(self, calls)
        _set_metadata(self, metadata)
        _set_extra(self, extra)

    @property
    def dtype(self) -> DType:
        return self.shape.dtype

    @property
    def definition(self) -> OpDef:
        return self.op.definition

    @property
    def parameter_number(self) -> int:
        value = self.attrs["parameter_number"]
        assert isinstance(value, int)
        return value

    def attr(self, key: str, default: object = None) -> object:
        return self.attrs.get(key, default)

    def ints(self, key: str) -> tuple[int, ...]:
        value = self.attrs.get(key, ())
        assert isinstance(value, tuple)
        return value

    @property
    def source_location(self) -> str | None:
        return self.metadata.source_location if self.metadata else None

    def __repr__(self) -> str:
        return f"<{self.op.text} %{self.name} {self.shape.text(False)}>"


(_set_name, _set_op, _set_operands, _set_shape, _set_attrs, _set_calls, _set_metadata,
 _set_extra) = (getattr(Instruction, f).__set__ for f in (
    "name", "op", "operands", "shape", "attrs", "calls", "metadata", "extra"))


@dataclass(frozen=True, slots=True, eq=False)
class Computation:
    """Parameters plus instructions in definition order (operands before users) and a root."""

    name: str
    instructions: tuple[Instruction, ...]
    root: Instruction
    parameters: tuple[Instruction, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.parameters:
            params = sorted([i for i in self.instructions if i.op is Op.PARAMETER],
                            key=lambda i: i.parameter_number)
            object.__setattr__(self, "parameters", tuple(params))

    @property
    def called_computations(self) -> Iterator[Computation]:
        # Listed by one comprehension, not yielded: most instructions call nothing, and a
        # generator's step per instruction costs more than the test.
        return iter([c for inst in self.instructions if inst.calls for c in inst.calls])

    def __repr__(self) -> str:
        return f"<computation %{self.name}: {len(self.instructions)} instructions>"


@dataclass(frozen=True, slots=True, eq=False)
class Module:
    """Computations with callees before callers; `entry` is the one the module runs."""

    name: str
    computations: tuple[Computation, ...]
    entry: Computation
    # jax's debug-info tables (FileNames, FunctionNames, FileLocations, StackFrames), verbatim:
    # ((table, ((id, text), ...)), ...). Metadata's stack_frame_id points into them.
    debug_tables: tuple[tuple[str, tuple[tuple[int, str], ...]], ...] = ()

    def computation(self, name: str) -> Computation:
        for comp in self.computations:
            if comp.name == name:
                return comp
        raise KeyError(name)

    def all_instructions(self) -> Iterator[Instruction]:
        for comp in self.computations:
            yield from comp.instructions

    @property
    def parameter_shapes(self) -> list[Shape]:
        return [p.shape for p in self.entry.parameters]

    @property
    def result_shape(self) -> Shape:
        return self.entry.root.shape

    def __repr__(self) -> str:
        return f"<module {self.name}: {len(self.computations)} computations>"


def reachable_computations(entry: Computation, seen: set[int] | None = None
                            ) -> list[Computation]:
    """Every computation reachable from `entry`, callees before callers, `entry` last; with
    `seen` (ids), those not in it, which it then holds too."""
    order: list[Computation] = []
    seen = set() if seen is None else seen
    if id(entry) in seen:
        return order
    stack: list[tuple[Computation, Iterator[Computation]]] = [(entry, entry.called_computations)]
    seen.add(id(entry))
    while stack:
        comp, callees = stack[-1]
        callee = next(callees, None)
        if callee is None:
            stack.pop()
            order.append(comp)
            continue
        if id(callee) in seen:
            continue
        seen.add(id(callee))
        stack.append((callee, callee.called_computations))
    return order


def make_module(name: str, entry: Computation) -> Module:
    """A module of `entry` and every computation it reaches."""
    return Module(name, tuple(reachable_computations(entry)), entry)
