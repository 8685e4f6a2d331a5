"""A row's sums in NumPy's pairwise order with the summed values computed where they are added.

NumPy's pairwise summation (the reference's `add.reduce` over a contiguous row, and the C
runtime's `hlofuse_pairwise_*` over a stored row) splits a row of more than 128 values into
two halves (the first a multiple of 8 long) and adds their sums; a row of 8 to 128 values is
a leaf: 8 interleaved partial sums, combined as ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 +
r7)), then the values past the last multiple of 8 one after another.

`emit_pairwise_sums` writes that recursion as a loop over the leaves, left to right, with an
explicit stack of the pending right halves and finished left sums: the leaf's loops compute
the element-wise producer of each position themselves, so no row of values is stored first,
and the sums are the same, bit for bit, as the stored row's (-0.0 + x is x, so partial sums
started at -0.0 equal NumPy's started at the first eight values). Several sums over the same
row share one walk and the producers' common subexpressions.
"""

from __future__ import annotations

from collections.abc import Callable

from hlofuse.codegen import cir
from hlofuse.codegen.body import FunctionBody
from hlofuse.codegen.cir import Binary, Expr
from hlofuse.codegen.language import Language
from hlofuse.ir.dtypes import DType

LEAF = 128  # the longest row NumPy sums without splitting it
LANES = 8  # NumPy's interleaved partial sums in a leaf
# Halving a row of at most 2**63 values reaches a leaf in fewer steps than this.
MAX_DEPTH = 64


def emit_pairwise_sums(body: FunctionBody, lang: Language, dtypes: list[DType], extent: int,
                       values: Callable[[Expr], list[Expr]]) -> list[Expr]:
    """The pairwise sums over positions 0 .. extent - 1 of a row, one per dtype (f32 or f64),
    of the values `values(position)` gives; emitted in the current scope.

    The C walks the leaves: descend to the leftmost leaf not yet summed (pushing each right
    half), sum it, then pop every finished pair (left sum + right sum) until a right half is
    pending; the row's sum is what is left when the stack is empty.
    """
    assert extent > LEAF or extent >= LANES, "a row this short is summed one by one"
    index = cir.INDEX
    position = body.variable(index, "pw_at", cir.Int(0))
    length = body.variable(index, "pw_len", cir.Int(extent))
    depth = body.variable(index, "pw_depth", cir.Int(0))
    pending = body.declare(index, body.fresh("pw_right"), dims=(MAX_DEPTH,))
    has_left = body.declare(index, body.fresh("pw_has_left"), dims=(MAX_DEPTH,))
    lefts = [body.declare(t, body.fresh("pw_left"), dims=(MAX_DEPTH,)) for t in dtypes]
    sums = [body.variable(t, "pw_sum", lang.literal(t, 0.0)) for t in dtypes]
    top = cir.sub(depth, 1)
    with body.loop(body.fresh("pw_leaf"), 0, None):
        with body.while_(Binary(">", length, cir.Int(LEAF))):
            halved = body.let(index, cir.div(length, 2))
            half = body.let(index, cir.sub(halved, cir.mod(halved, LANES)))
            body.assign(cir.load(pending, depth), cir.sub(length, half))
            body.assign(cir.load(has_left, depth), cir.Int(0))
            body.assign(depth, cir.add(depth, 1))
            body.assign(length, half)
        _emit_leaf(body, lang, dtypes, position, length, sums, values)
        body.assign(position, cir.add(position, length))
        finished = Binary("&&", Binary(">", depth, cir.Int(0)), cir.load(has_left, top))
        with body.while_(finished):
            body.assign(depth, cir.sub(depth, 1))
            for left, total in zip(lefts, sums):
                body.assign(total, Binary("+", cir.load(left, depth), total))
        with body.if_(Binary("==", depth, cir.Int(0))):
            body.emit(cir.Break())
        for left, total in zip(lefts, sums):
            body.assign(cir.load(left, top), total)
        body.assign(cir.load(has_left, top), cir.Int(1))
        body.assign(length, cir.load(pending, top))
    return list(sums)


def _emit_leaf(body: FunctionBody, lang: Language, dtypes: list[DType], start: Expr,
               length: Expr, sums: list[cir.Var], values: Callable[[Expr], list[Expr]]) -> None:
    """sums = the leaf's sums: LANES interleaved partial sums, their tree, then the rest."""
    negative_zero = [lang.literal(t, -0.0) for t in dtypes]
    lanes = [body.declare(t, body.fresh("pw_lanes"), dims=(LANES,)) for t in dtypes]
    k = body.fresh("k")
    with body.loop(k, 0, LANES):
        for lane, zero in zip(lanes, negative_zero):
            body.assign(cir.load(lane, cir.Var(k)), zero)
    whole = body.let(cir.INDEX, cir.sub(length, cir.mod(length, LANES)))
    i, k = body.fresh("i"), body.fresh("k")
    with body.loop(i, 0, whole, step=LANES), body.loop(k, 0, LANES):
        at = cir.add(start, cir.Var(i), cir.Var(k))
        for lane, value in zip(lanes, values(at)):
            body.assign(cir.load(lane, cir.Var(k)), value, "+=")
    for lane, total in zip(lanes, sums):
        r = [cir.load(lane, cir.Int(j)) for j in range(LANES)]
        pairs = [Binary("+", r[j], r[j + 1]) for j in range(0, LANES, 2)]
        body.assign(total, Binary("+", Binary("+", pairs[0], pairs[1]),
                                  Binary("+", pairs[2], pairs[3])))
    i = body.fresh("i")
    with body.loop(i, whole, length):
        for total, value in zip(sums, values(cir.add(start, cir.Var(i)))):
            body.assign(total, value, "+=")
