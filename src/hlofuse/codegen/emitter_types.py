"""Element positions and element values: the vocabulary the emitters share.

An `Index` names one element of an array by its row-major linear index, by per-dimension
indices, or both (cir expressions). A `Value` is an element's value in register form (a cir
expression) or a tuple of them for tuple-shaped instructions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from hlofuse.codegen import cir
from hlofuse.codegen.cir import Expr
from hlofuse.ir.hlo import Instruction

Value: TypeAlias = Expr | tuple["Value", ...]
Binding: TypeAlias = Callable[["Index"], Value] | tuple["Binding", ...]

# Reductions over at most this many elements, small dimensions of loop nests, and small arrays
# of a whole-loop kernel are written out with literal indices instead of a loop.
UNROLL_ELEMENTS = 16


class UnsupportedInstruction(ValueError):
    """The code generator has no emission for this instruction; the message names it."""


class NeedsLoopNest(Exception):
    """A flat loop cannot supply per-dimension indices; the group must be emitted as a nest."""

    def __init__(self, group: int) -> None:
        super().__init__(group)
        self.group = group


class UnsharedColumns(Exception):
    """The columns of a written-out dimension share little of their work and their code is
    large: the group must be emitted with a loop over that dimension instead."""

    def __init__(self, group: int) -> None:
        super().__init__(group)
        self.group = group


# A written-out dimension whose columns would declare more than this many locals (the first
# column's count times the number of columns), and whose second column repeats more than half
# of the first's work, is looped over instead: writing it out would only multiply the code (a
# stack of slices of long element-wise chains repeated each chain once per column).
WRITE_OUT_BUDGET = 1024

ZERO = cir.Int(0)


@dataclass(frozen=True)
class Index:
    """One element position: the row-major linear index, per-dimension indices, or both."""

    dims: tuple[int, ...]
    linear: Expr | None = None
    multi: tuple[Expr, ...] | None = None
    # Set inside a flat loop: per-dimension indices would cost a division per element.
    flat_group: int | None = None

    @property
    def key(self) -> tuple[object, ...]:
        """One key per element position, however the index is spelled: a value reached both
        through the linear index and through per-dimension indices is computed once."""
        # Asked for each operand an index is passed to: kept on the (immutable) index.
        found: tuple[object, ...] | None = self.__dict__.get("_key")
        if found is None:
            found = self._key()
            object.__setattr__(self, "_key", found)
            object.__setattr__(self, "_key_hash", hash(found))
        return found

    @property
    def key_hash(self) -> int:
        """hash(self.key), kept with it."""
        found: int | None = self.__dict__.get("_key_hash")
        if found is None:
            self.key  # noqa: B018 (sets both)
            found = self.__dict__["_key_hash"]
        return found

    def _key(self) -> tuple[object, ...]:
        dims = self.dims
        multi = self.multi
        if multi is not None:
            if 1 not in dims and len(multi) == len(dims):
                return ("M", *multi)
            return ("M", *(ZERO if d == 1 else m for m, d in zip(multi, dims)))
        assert self.linear is not None
        wide = [k for k, d in enumerate(dims) if d != 1]
        if len(wide) <= 1:  # the linear index is the one wide dimension's index
            return ("M", *(self.linear if k in wide else ZERO for k in range(len(dims))))
        return ("L", self.linear)


SCALAR = Index((), ZERO, ())


def at(dims: tuple[int, ...], *multi: Expr | int) -> Index:
    """The index of per-dimension components (ints are literals)."""
    return Index(dims, None, tuple(cir.Int(m) if isinstance(m, int) else m for m in multi), None)


def is_scalar_valued(inst: Instruction) -> bool:
    """Rank-0 results (or tuples of them): the same value at every output position."""
    shape = inst.shape
    if not shape.is_tuple:  # its one leaf
        return shape.is_array and not shape.dims
    leaves = shape.leaves()
    return bool(leaves) and all(leaf.is_array and not leaf.dims for leaf in leaves)


def strides_of(dims: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    stride = 1
    for d in reversed(dims):
        out.append(stride)
        stride *= d
    return tuple(reversed(out))


def expr_of(value: Value) -> Expr:
    """An array value (not a tuple)."""
    assert isinstance(value, Expr)
    return value


def pick(value: Value, path: tuple[int, ...]) -> Expr:
    for k in path:
        assert isinstance(value, tuple)
        value = value[k]
    return expr_of(value)


def selected(position: Expr, values: list[Expr]) -> Expr:
    """values[position] as a chain of selects on the position (the last value where no other
    matches): a read at a computed position that stays a vector, where a gather would not."""
    value = values[-1]
    for q in reversed(range(len(values) - 1)):
        value = cir.Select(cir.Binary("==", position, cir.Int(q)), values[q], value)
    return value


def conjunction(conditions: list[Expr]) -> Expr:
    """`c0 && c1 && ...` of at least one condition."""
    total = conditions[0]
    for c in conditions[1:]:
        total = cir.Binary("&&", total, c)
    return total
