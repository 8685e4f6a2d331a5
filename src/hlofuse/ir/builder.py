"""Builders: the only way to create instructions, with shape inference and unique names."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

import numpy as np

from hlofuse.ir.attrs import Metadata, RawAttr
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import DECLARED_SHAPE_OPS, Op
from hlofuse.ir.shape_inference.checks import ShapeError
from hlofuse.ir.shapes import Shape

_SUFFIX = re.compile(r"^(.*)\.(\d+)$")


class NameUniquer:
    """Hands out unique names in XLA's `base.N` style: the one name uniquer of hlofuse.

    Two numberings, as the names they must reproduce were made:

    - by default (the parser, the builders, the front end, the rewrites) every name gets a
      suffix, and a base's numbers continue after the highest one reserved (`add.7` reserved:
      `add` gives `add.8`);
    - with `bare_first` (the fusion passes, as XLA names its fusions) the first name is the
      base itself, then `base.1`, `base.2`, ... the lowest free one; a reserved name only
      stops that name from being handed out.

    `unique` strips a numeric suffix from the base it is given (`add.3` -> `add.N`).
    """

    def __init__(self, bare_first: bool = False) -> None:
        self.bare_first = bare_first
        self._next: dict[str, int] = {}
        self._used: set[str] = set()

    def __contains__(self, name: object) -> bool:
        return name in self._used

    def reserve(self, name: str) -> bool:
        """Mark `name` as used; False if it already was."""
        if name in self._used:
            return False
        self._used.add(name)
        if not self.bare_first:
            match = _SUFFIX.match(name)
            if match:
                base, number = match.group(1), int(match.group(2))
                self._next[base] = max(self._next.get(base, 0), number + 1)
        return True

    def reserve_each(self, names: Iterable[str]) -> None:
        """`reserve` every name of `names` (one set update for the fusion passes' uniquers)."""
        if self.bare_first:
            self._used.update(names)
            return
        for name in names:
            self.reserve(name)

    def names_in_use(self) -> set[str]:
        """The names in use, as a set the caller may add to directly (what `reserve` does
        for the fusion passes' uniquers, which keep nothing else)."""
        assert self.bare_first
        return self._used

    def release(self, name: str) -> None:
        """`name` is no longer in use (its instruction was removed); for the fusion passes'
        uniquers, which keep nothing else about it."""
        assert self.bare_first
        self._used.discard(name)

    def reserve_new(self, names: frozenset[str]) -> bool:
        """Reserve all of `names` if none is used yet (True), else none of them (False);
        for the fusion passes' uniquers."""
        assert self.bare_first
        if not self._used.isdisjoint(names):
            return False
        self._used |= names
        return True

    def reserve_all(self, other: NameUniquer) -> None:
        """`reserve` every name `other` holds (one set union for the fusion passes' uniquers,
        which number from the lowest free name and so remember nothing else)."""
        if self.bare_first:
            self._used |= other._used
            return
        for name in other._used:
            self.reserve(name)

    def unique_root(self, root: str) -> str:
        """`unique(root)` for a base without a numeric suffix (a fused parameter's
        `param_N`), without matching it: the fusion passes' uniquers only."""
        assert self.bare_first
        used = self._used
        if root not in used:
            used.add(root)
            return root
        number = self._next.get(root, 1)
        while f"{root}.{number}" in used:
            number += 1
        used.add(f"{root}.{number}")
        self._next[root] = number + 1
        return f"{root}.{number}"

    def unique(self, base: str) -> str:
        match = _SUFFIX.match(base)
        root = match.group(1) if match else base
        if self.bare_first:
            if root not in self._used:
                self._used.add(root)
                return root
            number = self._next.get(root, 1)
        else:
            root = root or "x"
            number = self._next.get(root, 0)
        while f"{root}.{number}" in self._used:
            number += 1
        name = f"{root}.{number}"
        # What reserve(name) does, without matching the name again: its suffix is `number`.
        self._used.add(name)
        self._next[root] = max(self._next.get(root, 0), number + 1)
        return name


def infer_shape(op: Op, operand_shapes: Sequence[Shape], attrs: Mapping[str, object],
                calls: Sequence[Computation], declared: Shape | None) -> Shape:
    """The result shape of `op`, checked against `declared` when the op needs one."""
    definition = op.definition
    if op is Op.CONSTANT and declared is None:
        literal = attrs.get("literal")
        assert isinstance(literal, np.ndarray)
        declared = Shape.array(DType.from_numpy(literal.dtype), literal.shape)
    return definition.infer(list(operand_shapes), attrs, list(calls), declared, op=op.text)


def result_shape(op: Op, operand_shapes: Sequence[Shape], attrs: Mapping[str, object],
                 calls: Sequence[Computation], declared: Shape | None) -> Shape:
    """The shape `ComputationBuilder.add` gives an instruction: the inferred one, which must
    equal `declared` unless the op declares its shape; `declared` itself when it has a layout
    (inference may not carry one)."""
    inferred = infer_shape(op, operand_shapes, attrs, calls, declared)
    if declared is not None and op not in DECLARED_SHAPE_OPS and inferred != declared:
        raise ShapeError(f"{op.text} produces {inferred.text(False)}, but "
                         f"{declared.text(False)} was declared")
    if declared is not None and declared.layout is not None and declared == inferred:
        return declared
    return inferred


class ComputationBuilder:
    """Appends instructions to one computation, inferring shapes from the op table."""

    def __init__(self, name: str, names: NameUniquer | None = None) -> None:
        self.name = name
        self.names = names if names is not None else NameUniquer()
        self.instructions: list[Instruction] = []
        self.metadata: Metadata | None = None  # applied to instructions added without their own

    def add(self, op: Op, operands: Sequence[Instruction] = (), *,
            attrs: Mapping[str, object] | None = None, calls: Sequence[Computation] = (),
            shape: Shape | None = None, name: str | None = None,
            metadata: Metadata | None = None,
            extra: Sequence[tuple[str, RawAttr]] = (),
            name_base: str | None = None) -> Instruction:
        """Append an instruction; without `name`, it is named `name_base` (default: the
        op's name) with a fresh numeric suffix."""
        attrs = dict(attrs or {})
        inferred = result_shape(op, [o.shape for o in operands], attrs, calls, shape)
        if name is None:
            name = self.names.unique(name_base if name_base is not None else op.text)
        elif not self.names.reserve(name):
            raise ValueError(f"duplicate instruction name %{name}")
        instruction = Instruction(
            name=name, op=op, operands=tuple(operands), shape=inferred,
            attrs=MappingProxyType(attrs), calls=tuple(calls),
            metadata=metadata if metadata is not None else self.metadata, extra=tuple(extra))
        self.instructions.append(instruction)
        return instruction

    def parameter(self, number: int, shape: Shape, name: str | None = None,
                  metadata: Metadata | None = None) -> Instruction:
        if name is None:
            name = self.names.unique(f"Arg_{number}")
            self.names._used.discard(name)  # add() reserves it again
        return self.add(Op.PARAMETER, attrs={"parameter_number": number}, shape=shape,
                        name=name, metadata=metadata)

    def constant(self, value: object, dtype: DType, name: str | None = None) -> Instruction:
        literal = np.asarray(value, dtype=dtype.numpy)
        return self.add(Op.CONSTANT, attrs={"literal": literal},
                        shape=Shape.array(dtype, literal.shape), name=name)

    def build(self, root: Instruction | None = None) -> Computation:
        if not self.instructions:
            raise ValueError(f"computation %{self.name} has no instructions")
        root = root if root is not None else self.instructions[-1]
        return Computation(self.name, tuple(self.instructions), root)
