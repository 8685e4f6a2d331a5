"""Positions of whole-loop elements and the copy statements between arrays.

The whole-loop emitter (codegen/whole_loop.py and its lane code, codegen/whole_loop_blocks.py)
walks loop elements position by position: `element_indices` and `env_indices` give the indices
of an array or of one lane's part of it, and the small builders here (`store_at`, `element_of`,
`copy`, ...) make the statement that copies position q from one array to another, for the
emitters' copy loops (written out for a few positions, a loop beyond).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from hlofuse.codegen import cir
from hlofuse.codegen.cir import Binary, Expr, Stmt
from hlofuse.codegen.emitter_types import SCALAR, Index, Value, strides_of

L = cir.Var("l")


def element_indices(dims: tuple[int, ...]) -> list[Index]:
    """Every element of an array of `dims`, as an index of literal components."""
    if not dims:
        return [SCALAR]
    strides = strides_of(dims)
    out = []
    for q in range(math.prod(dims)):
        multi = tuple(cir.Int((q // s) % d) for s, d in zip(strides, dims))
        out.append(Index(dims, None, multi, None))
    return out


def lane_part_indices(dims: tuple[int, ...], lane_index: Expr, lane_dim: int = 0) -> list[Index]:
    """The elements of the lane's part of a per-lane array whose lanes lie along `lane_dim`
    (that component written `env`)."""
    rest = dims[:lane_dim] + dims[lane_dim + 1:]
    out = []
    for index in element_indices(rest):
        multi = list(index.multi or ())
        multi.insert(lane_dim, lane_index)
        out.append(Index(dims, None, tuple(multi), None))
    return out


def store_at(array: str, row: Expr | None = None, lane: bool = False
             ) -> Callable[[Expr, Expr], Stmt]:
    """`array[row + q]([l]) = value` as a function of (q, value)."""
    def store(q: Expr, value: Expr) -> Stmt:
        position = q if row is None else Binary("+", row, q)
        return cir.Assign(cir.load(array, position, *((L,) if lane else ())), value)

    return store


def store_through(array: str, position: Callable[[Expr], Expr]) -> Callable[[Expr, Expr], Stmt]:
    """`array[position(q)] = value` as a function of (q, value)."""
    return lambda q, value: cir.Assign(cir.load(array, position(q)), value)


def element_of(array: str, row: Expr | None = None, lane: bool = False
               ) -> Callable[[Expr], Expr]:
    """`array[row + q]([l])` as a function of q."""
    def read(q: Expr) -> Expr:
        position = q if row is None else Binary("+", row, q)
        return cir.load(array, position, *((L,) if lane else ()))

    return read


def constant(value: Expr) -> Callable[[Expr], Expr]:
    return lambda q: value


def copy(store: Callable[[Expr, Expr], Stmt], source: Callable[[Expr], Expr],
         convert: Callable[[Expr], Expr] | None = None) -> Callable[[Expr], Stmt]:
    """The statement copying element q of `source` (converted) through `store`."""
    def statement(q: Expr) -> Stmt:
        value = source(q)
        return store(q, value if convert is None else convert(value))

    return statement


def copy_whole(target: str, source: str) -> Stmt:
    """`memcpy(target, source, sizeof target)`: local arrays of one size."""
    return cir.ExprStmt(cir.call("memcpy", cir.Var(target), cir.Var(source),
                                 cir.call("sizeof", cir.Var(target))))


def named(name: str) -> Callable[[Index], Value]:
    """A binding that reads a named local, whatever the index (a value computed once)."""
    return lambda index: cir.Var(name)
