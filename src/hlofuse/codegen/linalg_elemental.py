"""A small factorisation or solve computed inside a lane's code, where no library call can run
(a whole-loop kernel: a physics step factorising its mass matrix): Cholesky, triangular
solves, LU with partial pivoting and its pivots turned into a permutation.

The first element lane code reads of such an instruction computes all of that batch
position's results, unrolled over the matrix positions (analysis/lane_linalg.py bounds the
work), and later reads of the same position pick from them. The operations and their order
are those of the runtime's routines (runtime/hlofuse_linalg.c: potrf, trsm, getrf,
lu_permutation), one rounding per multiply and per subtract, so a whole-loop kernel gives the
bits the library calls give. LU's pivot search, row swaps and permutation become selects on
the pivot row, which keeps lane code free of branches. A read at a position that is not a
literal (a dynamic slice of the solution) goes through a local array of the results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hlofuse.analysis.lane_linalg import (
    TriangularSolve,
    batch_rank,
    is_lane_linalg,
    lane_linalg_routine,
    triangular_solve_of,
)
from hlofuse.codegen import cir
from hlofuse.codegen.body import Key
from hlofuse.codegen.cir import Binary, Expr
from hlofuse.codegen.emitter_types import Index, UnsupportedInstruction, Value
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.linalg import Routine, options_of
from hlofuse.ir.ops import Op

if TYPE_CHECKING:
    from hlofuse.codegen.elemental import ElementalEmitter

# One result of a batch position: its elements by position inside the position's part.
Elements = dict[tuple[int, ...], Expr]


class _LaneLinalg:
    """Emits one batch position's results of `inst` into the lane's code."""

    def __init__(self, em: ElementalEmitter, inst: Instruction,
                 batch_parts: tuple[Expr, ...]) -> None:
        self.em = em
        self.inst = inst
        self.batch_parts = batch_parts
        self.dtype = inst.operands[0].dtype
        self.register = em.lang.register_type(self.dtype)

    def read(self, operand: Instruction, row: int, column: int) -> Expr:
        index = Index(operand.shape.dims, None,
                      (*self.batch_parts, cir.Int(row), cir.Int(column)), None)
        return self.em.array_value(operand, index)

    def let(self, expr: Expr) -> Expr:
        return self.em.body.let(self.register, expr)

    def minus_product(self, total: Expr, a: Expr, b: Expr) -> Expr:
        return self.let(Binary("-", total, self.let(Binary("*", a, b))))

    def divide(self, a: Expr, b: Expr) -> Expr:
        return self.let(self.em.lang.round_to(self.dtype, Binary("/", a, b)))

    # --- Cholesky -------------------------------------------------------------------------

    def cholesky(self, lower: bool, xla: bool) -> tuple[Elements, Expr | None]:
        """potrf's factor in the `lower` (or upper) triangle. LAPACK's form keeps the other
        triangle and reports `info` (the first order whose pivot is not positive); XLA's
        `cholesky` zeroes it and is NaN everywhere once a pivot's square root is NaN."""
        lang = self.em.lang
        a = self.inst.operands[0]
        n = a.shape.dims[-1]

        def source(i: int, j: int) -> Expr:  # element (i, j) of the lower factor's matrix
            return self.read(a, i, j) if lower else self.read(a, j, i)

        factor: dict[tuple[int, int], Expr] = {}
        zero = lang.literal(self.dtype, 0)
        status: Expr = lang.literal(DType.S32, 0)
        nan_root: Expr = lang.literal(DType.PRED, 0)
        for j in range(n):
            d = source(j, j)
            for k in range(j):
                d = self.minus_product(d, factor[j, k], factor[j, k])
            failed = Binary("&&", Binary("==", status, lang.literal(DType.S32, 0)),
                            cir.Unary("!", Binary(">", d, zero)))
            status = self.em.body.let(DType.S32, cir.Select(failed, lang.literal(DType.S32, j + 1),
                                                            status))
            root = self.let(lang.call_math("sqrt", self.dtype, d))
            nan_root = self.em.body.let(cir.Special.INT,
                                        Binary("||", nan_root, Binary("!=", root, root)))
            factor[j, j] = root
            for i in range(j + 1, n):
                x = source(i, j)
                for k in range(j):
                    x = self.minus_product(x, factor[i, k], factor[j, k])
                factor[i, j] = self.divide(x, root)
        out: Elements = {}
        nan = lang.literal(self.dtype, float("nan"))
        for r in range(n):
            for c in range(n):
                i, j = (r, c) if lower else (c, r)
                value = factor.get((i, j))
                if value is None:
                    value = zero if xla else self.read(a, r, c)
                if xla:
                    value = self.let(cir.Select(nan_root, nan, value))
                out[r, c] = value
        return out, (None if xla else status)

    # --- LU -------------------------------------------------------------------------------

    def lu(self) -> tuple[Elements, Elements, Expr]:
        """getrf: the factors (unit lower below the diagonal, upper on and above), 1-based
        pivot rows (LAPACK's ipiv: row j was swapped with row ipiv[j] - 1) and info (the first
        column whose pivot is exactly zero; the factorisation still completes)."""
        lang = self.em.lang
        a = self.inst.operands[0]
        m, n = a.shape.dims[-2:]
        rows = [[self.read(a, i, c) for c in range(n)] for i in range(m)]
        s32 = DType.S32
        zero = lang.literal(self.dtype, 0)
        status: Expr = lang.literal(s32, 0)
        pivots: Elements = {}
        for j in range(min(m, n)):
            # LAPACK's i?amax: `>` from the diagonal on (a NaN on it stays, one below never wins)
            best = self.abs(rows[j][j])
            p: Expr = lang.literal(s32, j)
            for i in range(j + 1, m):
                magnitude = self.abs(rows[i][j])
                larger = self.em.body.let(cir.Special.INT, Binary(">", magnitude, best))
                best = self.let(cir.Select(larger, magnitude, best))
                p = self.em.body.let(DType.S32, cir.Select(larger, lang.literal(s32, i), p))
            pivots[(j,)] = self.em.body.let(DType.S32, Binary("+", p, lang.literal(s32, 1)))
            picked = [self.em.body.let(cir.Special.INT, Binary("==", p, lang.literal(s32, i)))
                      for i in range(m)]
            # Row j and the pivot row trade places (no change when p == j).
            pivot_row = [self.pick(picked, [rows[i][c] for i in range(m)], j)
                         for c in range(n)]
            for i in range(j + 1, m):
                rows[i] = [self.let(cir.Select(picked[i], rows[j][c], rows[i][c]))
                           for c in range(n)]
            rows[j] = pivot_row
            pivot = rows[j][j]
            failed = Binary("&&", Binary("==", pivot, zero),
                            Binary("==", status, lang.literal(s32, 0)))
            status = self.em.body.let(DType.S32,
                                      cir.Select(failed, lang.literal(s32, j + 1), status))
            nonzero = self.em.body.let(cir.Special.INT, Binary("!=", pivot, zero))
            for i in range(j + 1, m):
                rows[i][j] = self.let(cir.Select(nonzero, self.divide(rows[i][j], pivot),
                                                 rows[i][j]))
            for i in range(j + 1, m):
                for c in range(j + 1, n):
                    rows[i][c] = self.minus_product(rows[i][c], rows[i][j], rows[j][c])
        factors: Elements = {(i, c): rows[i][c] for i in range(m) for c in range(n)}
        return factors, pivots, status

    def permutation(self) -> Elements:
        """The row permutation of 0-based pivots (row i swapped with row pivots[i], clamped
        into the matrix, in order), as lu_pivots_to_permutation gives it."""
        lang = self.em.lang
        pivots = self.inst.operands[0]
        k = pivots.shape.dims[-1]
        m = self.inst.shape.dims[-1]
        s32 = DType.S32
        order: list[Expr] = [lang.literal(s32, i) for i in range(m)]
        for i in range(k):
            at = Index(pivots.shape.dims, None, (*self.batch_parts, cir.Int(i)), None)
            raw = self.em.array_value(pivots, at)
            low = lang.literal(s32, 0)
            high = lang.literal(s32, m - 1)
            p = self.em.body.let(DType.S32, cir.Select(
                Binary("<", raw, low), low, cir.Select(Binary(">=", raw, lang.literal(s32, m)),
                                                       high, raw)))
            picked = [self.em.body.let(cir.Special.INT, Binary("==", p, lang.literal(s32, q)))
                      for q in range(m)]
            moved = self.pick(picked, order, i, DType.S32)
            kept = order[i]
            order = [self.em.body.let(DType.S32, cir.Select(picked[q], kept,
                                                            moved if q == i else order[q]))
                     for q in range(m)]
        return {(q,): order[q] for q in range(m)}

    def pick(self, picked: list[Expr], values: list[Expr], default: int,
             register: DType | None = None) -> Expr:
        """values[p] where picked[i] says p == i (values[default] when none does)."""
        out = values[default]
        for i, value in enumerate(values):
            if i != default:
                out = self.em.body.let(register or self.register, cir.Select(picked[i], value, out))
        return out

    def abs(self, x: Expr) -> Expr:
        # a bit operation: the runtime's fabs does not flush a denormal either
        return self.let(cir.call(self.em.lang.math("fabs", self.dtype), x))

    # --- triangular solve -----------------------------------------------------------------

    def solve(self, how: TriangularSolve) -> Elements:
        """x with op(A) x = b (left) or x op(A) = b (right), by substitution in the runtime's
        order: one system (a column of b, or a row for the right side) after the other, the
        unknowns from the triangle's first row on."""
        a, b = self.inst.operands[0], self.inst.operands[1]
        n = a.shape.dims[-1]
        m, r = b.shape.dims[-2:]
        # op(A)(i, k) as the left-side solve sees it: the right side solves with op(A)^T.
        flipped = how.transpose != (not how.left)

        def coefficient(i: int, k: int) -> Expr:
            return self.read(a, k, i) if flipped else self.read(a, i, k)

        effective_lower = how.lower != how.transpose if how.left else how.lower == how.transpose
        x: Elements = {}

        def at(i: int, c: int) -> tuple[int, int]:  # unknown i of system c, in x's positions
            return (i, c) if how.left else (c, i)

        for c in range(r if how.left else m):
            for step in range(n):
                i = step if effective_lower else n - 1 - step
                s = self.read(b, *at(i, c))
                others = range(0, i) if effective_lower else range(i + 1, n)
                for k in others:
                    s = self.minus_product(s, coefficient(i, k), x[at(k, c)])
                x[at(i, c)] = s if how.unit else self.divide(s, coefficient(i, i))
        return x


def _results(em: ElementalEmitter, inst: Instruction,
             batch_parts: tuple[Expr, ...]) -> list[Elements]:
    """Every result (tuple leaf) of `inst` at one batch position, computed once per scope."""
    key = Key(("lane-linalg", id(inst), *batch_parts))
    found = em.body.lookup(key)
    if found is not None:
        return found  # type: ignore[return-value]
    lane = _LaneLinalg(em, inst, batch_parts)
    routine = lane_linalg_routine(inst)
    results: list[Elements]
    if routine is Routine.POTRF and inst.op is Op.CHOLESKY:
        factor, _ = lane.cholesky(inst.attrs.get("lower", False) is True, xla=True)
        results = [factor]
    elif routine is Routine.POTRF:
        factor, info = lane.cholesky(options_of(inst).lower, xla=False)
        assert info is not None
        results = [factor, {(): info}]
    elif routine is Routine.GETRF:
        factors, pivots, status = lane.lu()
        results = [factors, pivots, {(): status}]
    elif routine is Routine.PIVOTS_TO_PERMUTATION:
        results = [lane.permutation()]
    else:
        results = [lane.solve(triangular_solve_of(inst))]
    em.body.remember(key, results)
    return results


def _element(em: ElementalEmitter, inst: Instruction, leaf: int, dims: tuple[int, ...],
             index: Index) -> Expr:
    batch = batch_rank(inst)
    multi = em.multi_of(index)
    elements = _results(em, inst, tuple(multi[:batch]))[leaf]
    inner = multi[batch:]
    if all(isinstance(m, cir.Int) for m in inner):
        return elements[tuple(m.value for m in inner if isinstance(m, cir.Int))]
    return _through_array(em, inst, leaf, dims[batch:], elements, index, batch)


def _through_array(em: ElementalEmitter, inst: Instruction, leaf: int, inner: tuple[int, ...],
                   elements: Elements, index: Index, batch: int) -> Expr:
    """A read at a computed position: the batch position's results in a local array."""
    dtype = inst.shape.leaves()[leaf].dtype
    register = em.lang.register_type(dtype)
    key = Key(("lane-linalg-array", id(inst), leaf, *em.multi_of(index)[:batch]))
    # positions in row-major order, as `linear_of` counts them
    found = em.body.lookup(key)
    if isinstance(found, str):
        name = found
    else:
        name = em.body.fresh("la")
        em.body.declare(register, name, dims=(max(1, len(elements)),))
        for q, position in enumerate(sorted(elements)):
            em.body.assign(cir.load(name, cir.Int(q)), elements[position])
        em.body.remember(key, name)
    position_index = Index(inner, None, em.multi_of(index)[batch:], None)
    return em.body.let(register, cir.load(name, em.linear_of(position_index)))


def linalg_elemental(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    """Element `index` of a (single-result) factorisation or solve, in lane code."""
    _check(inst)
    if inst.shape.is_tuple:
        raise UnsupportedInstruction(f"%{inst.name}: its results are read through "
                                     "get-tuple-element")
    return _element(em, inst, 0, inst.shape.dims, index)


def linalg_leaf_elemental(em: ElementalEmitter, inst: Instruction, leaf: int,
                          index: Index) -> Value:
    """Element `index` of result `leaf` of a factorisation returning a tuple (potrf's factor
    and info), in lane code."""
    _check(inst)
    return _element(em, inst, leaf, inst.shape.leaves()[leaf].dims, index)


def _check(inst: Instruction) -> None:
    if not is_lane_linalg(inst):
        raise UnsupportedInstruction(
            f"%{inst.name}: {inst.op.text} is computed by the library, not in lane code")

