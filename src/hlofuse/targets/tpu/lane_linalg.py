"""Small factorisations and solves in a whole-loop kernel's step (lane_values.py): each lane's
matrix written out over its positions, so a 5 x 5 Cholesky of every lane is element-wise work
on (rows, 128) tiles rather than a padded matrix per lane.

Cholesky (the `cholesky` opcode, and LAPACK's potrf with its `info`) and triangular solves
(the `triangular-solve` opcode and trsm) in the operations and order of the runtime's
routines (runtime/hlofuse_linalg.c), as the C target's lane code computes them
(codegen/linalg_elemental.py). A batch position's results are computed once, at the first
read, and later reads pick from them.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
from jax import lax

from hlofuse.analysis.lane_linalg import (
    TriangularSolve,
    batch_rank,
    is_lane_linalg,
    lane_linalg_routine,
    triangular_solve_of,
)
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.linalg import Routine, options_of
from hlofuse.ir.ops import Op
from hlofuse.targets.tpu.lane_values import LaneValues, Position, same_shape, select_where
from hlofuse.targets.tpu.lax_ops import Value

Elements = dict[tuple[int, ...], Value]
_ROUTINES = (Routine.POTRF, Routine.TRSM)


def is_tile_linalg(inst: Instruction) -> bool:
    """A factorisation or solve the kernel writes out per lane."""
    return lane_linalg_routine(inst) in _ROUTINES and is_lane_linalg(inst)


def linalg_leaf(values: LaneValues, inst: Instruction, leaf: int, position: Position,
                dims: tuple[int, ...]) -> Value:
    """Result `leaf` of `inst` at a position: its batch position's results, computed once."""
    batch = batch_rank(inst)
    results = values.cached(("linalg", id(inst)), position[:batch],
                            lambda: _results(values, inst, position[:batch]))
    elements = results[leaf]
    return values.select_over(dims[batch:], position[batch:], lambda p: elements[p])


def _results(values: LaneValues, inst: Instruction, batch: Position) -> list[Elements]:
    def read(operand: Instruction) -> Callable[[int, int], Value]:
        return lambda i, j: values.value(operand, (*batch, i, j))

    dtype = np.dtype(inst.operands[0].dtype.numpy)
    if lane_linalg_routine(inst) is Routine.POTRF:
        n = inst.operands[0].shape.dims[-1]
        if inst.op is Op.CHOLESKY:
            factor, _ = _cholesky(read(inst.operands[0]), n, inst.attrs.get("lower", False)
                                  is True, True, dtype)
            return [factor]
        factor, info = _cholesky(read(inst.operands[0]), n, options_of(inst).lower, False, dtype)
        return [factor, {(): info}]
    a, b = inst.operands[0], inst.operands[1]
    how = triangular_solve_of(inst)
    return [_solve(read(a), read(b), a.shape.dims[-1], b.shape.dims[-2:], how)]


def _cholesky(read: Callable[[int, int], Value], n: int, lower: bool, xla: bool,
              dtype: np.dtype) -> tuple[Elements, Value]:
    """potrf's factor in the `lower` (or upper) triangle. LAPACK's form keeps the other
    triangle and reports `info` (the first order whose pivot is not positive); XLA's
    `cholesky` zeroes it and is NaN everywhere once a pivot's square root is NaN."""
    def source(i: int, j: int) -> Value:
        return read(i, j) if lower else read(j, i)

    factor: dict[tuple[int, int], Value] = {}
    zero = jnp.zeros((), dtype)
    status: Value = jnp.zeros((), np.int32)
    nan_root: Value = jnp.zeros((), bool)
    for j in range(n):
        d = source(j, j)
        for k in range(j):
            d = lax.sub(*same_shape(d, lax.mul(factor[j, k], factor[j, k])))
        failed = lax.bitwise_and(*same_shape(status == 0, ~(d > zero)))
        status = select_where(failed, np.int32(j + 1), status)
        root = lax.sqrt(d)
        nan_root = lax.bitwise_or(*same_shape(nan_root, jnp.isnan(root)))
        factor[j, j] = root
        for i in range(j + 1, n):
            x = source(i, j)
            for k in range(j):
                x = lax.sub(*same_shape(x, lax.mul(*same_shape(factor[i, k], factor[j, k]))))
            factor[i, j] = lax.div(*same_shape(x, root))
    out: Elements = {}
    nan = jnp.full((), np.nan, dtype)
    for r in range(n):
        for c in range(n):
            i, j = (r, c) if lower else (c, r)
            value = factor.get((i, j))
            if value is None:
                value = zero if xla else read(r, c)
            out[r, c] = select_where(nan_root, nan, value) if xla else value
    return out, status


def _solve(read_a: Callable[[int, int], Value], read_b: Callable[[int, int], Value], n: int,
           b_dims: tuple[int, ...], how: TriangularSolve) -> Elements:
    """x with op(A) x = b (left) or x op(A) = b (right), by substitution in the runtime's
    order: one system after the other, the unknowns from the triangle's first row on."""
    m, r = b_dims
    flipped = how.transpose != (not how.left)

    def coefficient(i: int, k: int) -> Value:
        return read_a(k, i) if flipped else read_a(i, k)

    effective_lower = how.lower != how.transpose if how.left else how.lower == how.transpose
    x: Elements = {}

    def at(i: int, c: int) -> tuple[int, int]:
        return (i, c) if how.left else (c, i)

    for c in range(r if how.left else m):
        for step in range(n):
            i = step if effective_lower else n - 1 - step
            s = read_b(*at(i, c))
            others = range(0, i) if effective_lower else range(i + 1, n)
            for k in others:
                s = lax.sub(*same_shape(s, lax.mul(*same_shape(coefficient(i, k), x[at(k, c)]))))
            x[at(i, c)] = s if how.unit else lax.div(*same_shape(s, coefficient(i, i)))
    return x
