"""Code for sort and topk: a stable insertion sort of every row along the sort dimension, with
the comparator computation inlined by the elemental emitter; topk keeps the k first of a row
ordered by XLA's float total order (ties keep the lower index first).

Insertion sort is quadratic in the row length and linear for rows already in order; the rows
of the programs hlofuse compiles are short (a handful to a few hundred elements), where it
beats a merge sort's bookkeeping. Stable order is one of the valid answers of an unstable
sort, so `is_stable` needs no code of its own.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from hlofuse.codegen import cir
from hlofuse.codegen.cir import Binary, Cast, Expr, Select, Unary
from hlofuse.codegen.emitter_types import Index, UnsupportedInstruction
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction

if TYPE_CHECKING:
    from hlofuse.codegen.kernel import KernelEmitter


def _row_layout(dims: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    """(rows before the axis, the axis' length, elements after it): element (o, j, i) of the
    row-major array sits at (o * length + j) * inner + i."""
    return math.prod(dims[:axis]), dims[axis], math.prod(dims[axis + 1:])


def emit_sort(k: KernelEmitter, inst: Instruction, targets: list[str]) -> None:
    em = k.em
    dims = inst.operands[0].shape.dims
    for operand, target in zip(inst.operands, targets):
        k.loop(dims, [(k.element(operand), target, operand.dtype, None)], parallel=True)
    axis = inst.ints("dimensions")[0]
    outer, length, inner = _row_layout(dims, axis)
    if length <= 1 or outer * inner == 0:
        return
    comparator = inst.calls[0]
    if comparator.root.shape.leaves()[0].dims:
        raise UnsupportedInstruction(
            f"%{inst.name}: the comparator %{comparator.name} must return a scalar pred")
    row, i, j = k.body.fresh("r"), k.body.fresh("i"), k.body.fresh("j")
    with k.body.loop(row, 0, outer * inner):
        base = em.index_let(cir.add(cir.mul(cir.div(cir.Var(row), inner), length * inner),
                                    cir.mod(cir.Var(row), inner) if inner > 1 else cir.Int(0)))
        with k.body.loop(i, 1, length):
            with k.body.loop(j, 0, cir.Var(i)):
                # Element at = i - j moves left while it is less than its left neighbour.
                at = em.index_let(cir.sub(cir.Var(i), cir.Var(j)))
                here = em.index_let(cir.add(base, cir.mul(at, inner)))
                left = em.index_let(cir.sub(here, inner))
                em._no_hoist += 1
                try:
                    with k.body.cache_scope():
                        arguments: list[Expr] = []
                        pairs = []
                        for operand, target in zip(inst.operands, targets):
                            a = em.load(operand.dtype, cir.Var(target), _at(dims, here))
                            b = em.load(operand.dtype, cir.Var(target), _at(dims, left))
                            arguments += [a, b]
                            pairs.append((operand.dtype, target, a, b))
                        less = em.apply_reducer(comparator, [], arguments)[0]
                        with k.body.if_(Unary("!", less)):
                            k.body.emit(cir.Break())
                        for dtype, target, a, b in pairs:
                            k.body.assign(cir.load(target, left), em.lang.to_storage(dtype, a))
                            k.body.assign(cir.load(target, here), em.lang.to_storage(dtype, b))
                finally:
                    em._no_hoist -= 1


def _at(dims: tuple[int, ...], linear: Expr) -> Index:
    return Index(dims, linear, None, None)


def _order_key(lang_dtype: DType, value: Expr) -> Expr:
    """A signed integer ordered as the float total order of `value` (integers by value)."""
    if lang_dtype is DType.U64:
        # u64 above 2^63 would wrap negative: flip the top bit, which keeps the order.
        flipped = Binary("^", Cast(DType.U64, value), cir.Const(DType.U64, 1 << 63))
        return Cast(DType.S64, flipped)
    if not lang_dtype.is_float:
        return Cast(DType.S64, value)
    wide = Cast(DType.F64, value)
    bits = Cast(DType.S64, cir.call("hlofuse_f64_bits", wide))
    # Negative floats order in reverse of their bits: flip all but the sign.
    return Select(Binary("<", bits, cir.Int(0)),
                  Binary("^", bits, cir.Int(0x7FFFFFFFFFFFFFFF)), bits)


def emit_topk(k: KernelEmitter, inst: Instruction, targets: list[str]) -> None:
    """Values and s32 indices of the k first elements of every last-axis row."""
    em = k.em
    operand = inst.operands[0]
    dims = operand.shape.dims
    count = inst.attrs["k"]
    assert isinstance(count, int)
    largest = inst.attrs.get("largest", True) is not False
    length = dims[-1] if dims else 1
    rows = math.prod(dims[:-1])
    if rows == 0 or count == 0:
        return
    values, positions = targets
    out_dims = (*dims[:-1], count)
    row, i, j = k.body.fresh("r"), k.body.fresh("i"), k.body.fresh("j")
    index_type = DType.S32
    with k.body.loop(row, 0, rows):
        # Insertion into the row's k best so far, kept in order in the outputs.
        filled = k.body.variable(cir.INDEX, "n", cir.Int(0))
        with k.body.loop(i, 0, length):
            with k.body.cache_scope():
                em._no_hoist += 1
                try:
                    source = em.index_let(cir.add(cir.mul(cir.Var(row), length), cir.Var(i)))
                    x = em.array_value(operand, _at(dims, source))
                    key = k.body.let(cir.INDEX, _order_key(operand.dtype, x), "key")
                    place = k.body.variable(cir.INDEX, "p", filled)
                    out_base = em.index_let(cir.mul(cir.Var(row), count))
                    # Move worse elements right; equal keys stay ahead (stable).
                    with k.body.loop(j, 0, cir.Var(filled.name)):
                        slot = em.index_let(cir.sub(cir.Var(filled.name), cir.add(cir.Var(j), 1)))
                        stored = em.load(operand.dtype, cir.Var(values),
                                         _at(out_dims, cir.add(out_base, slot)))
                        other = _order_key(operand.dtype, stored)
                        worse = Binary("<" if largest else ">", other, key)
                        with k.body.if_(Unary("!", worse)):
                            k.body.emit(cir.Break())
                        k.body.assign(place, slot)
                        with k.body.if_(Binary("<", cir.add(slot, 1), cir.Int(count))):
                            to = cir.add(out_base, slot, 1)
                            k.body.assign(cir.load(values, to), cir.load(values,
                                                                         cir.add(out_base, slot)))
                            k.body.assign(cir.load(positions, to),
                                          cir.load(positions, cir.add(out_base, slot)))
                    with k.body.if_(Binary("<", place, cir.Int(count))):
                        to = cir.add(out_base, place)
                        k.body.assign(cir.load(values, to), em.lang.to_storage(operand.dtype, x))
                        k.body.assign(cir.load(positions, to), Cast(index_type, cir.Var(i)))
                    with k.body.if_(Binary("<", filled, cir.Int(count))):
                        k.body.assign(filled, Binary("+", filled, cir.Int(1)))
                finally:
                    em._no_hoist -= 1
