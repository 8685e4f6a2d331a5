"""ShapeError, the arguments every shape rule takes, and the operand and attribute checks
several op families share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hlofuse.ir.shapes import Shape

if TYPE_CHECKING:
    from hlofuse.ir.hlo import Computation


class ShapeError(ValueError):
    """An operation's operands, attributes or declared shape are inconsistent."""


Attrs = Mapping[str, object]
Calls = Sequence["Computation"]


def require(cond: bool, message: str) -> None:
    """Raise ShapeError(message) unless `cond` holds."""
    if not cond:
        raise ShapeError(message)


def require_array(shape: Shape, what: str) -> Shape:
    """`shape`, which must be an array (`what` names it in the error)."""
    if not shape.is_array:  # format the message only on failure: this runs per instruction
        raise ShapeError(f"{what} must be an array, got {shape.text(False)}")
    return shape


def int_attrs(attrs: Attrs, key: str) -> tuple[int, ...]:
    """A list-of-integers attribute, empty when absent."""
    value = attrs.get(key, ())
    assert isinstance(value, tuple)
    return value


def declared_shape(declared: Shape | None, op: str) -> Shape:
    """The result shape written out in the text, which `op` needs."""
    if declared is None:
        raise ShapeError(f"{op} needs its result shape written out")
    assert declared is not None
    return declared


def check_dims(dims: tuple[int, ...], rank: int, what: str, unique: bool = True) -> None:
    """Every dimension number in `dims` is below `rank` (and, if `unique`, none repeats)."""
    for d in dims:
        if not 0 <= d < rank:
            raise ShapeError(f"{what} {list(dims)} has dimension {d} out of range for rank {rank}")
    if unique:
        if len(set(dims)) != len(dims):
            raise ShapeError(f"{what} {list(dims)} repeats a dimension")


def check_scalar_computation(comp: Computation, params: list[Shape], result: Shape, op: str,
                             role: str) -> None:
    """A called computation (reducer, comparator, ...) takes `params` and returns `result`."""
    got = [p.shape for p in comp.parameters]
    if got != params:
        raise ShapeError(f"{op} {role} %{comp.name} must take "
                         f"({', '.join(s.text(False) for s in params)}), takes "
                         f"({', '.join(s.text(False) for s in got)})")
    root = comp.root.shape
    if root.is_tuple and len(root.elements) == 1 and not result.is_tuple:
        root = root.elements[0]
    if root != result:
        raise ShapeError(f"{op} {role} %{comp.name} must return {result.text(False)}, returns "
                         f"{root.text(False)}")
