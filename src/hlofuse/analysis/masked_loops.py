"""Nested loops whose trip count differs per lane, in the form `jax.vmap` gives them.

A `while_loop` inside a function mapped over the lanes runs until no lane wants another
iteration: JAX's batching makes the condition `reduce(p, false, or)` over every lane's
predicate p, and masks the body, each element's new value `select(p, new, old)` with p
computed again from the same state, so a lane that has finished is left as it is while the
others go on. Such a loop can stop for each block of lanes once none of the block's lanes
wants another iteration: the further iterations the other blocks run leave this block's lanes
unchanged. `masked_condition` finds the per-lane predicate p of such a loop, and
`unmasked_element` says which element of the body would change a finished lane (the loop is
then refused: its lanes must run as many iterations as the slowest lane of all).
"""

from __future__ import annotations

from collections.abc import Hashable

from hlofuse.analysis.lane_classification import element_read
from hlofuse.analysis.reducers import is_identity, reducer_op
from hlofuse.analysis.same_values import attribute_key
from hlofuse.ir.attrs import SliceDim
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op, has_side_effect


def masked_condition(loop: Instruction) -> Instruction | None:
    """The per-lane predicate p of a condition `reduce(p, false), or` over all of p's
    dimensions, or None when the condition has another form."""
    root = loop.calls[0].root
    if root.op is not Op.REDUCE or len(root.operands) != 2 or not root.dtype.is_pred:
        return None
    predicate, init = root.operands
    if (reducer_op(root.calls[0]) is not Op.OR or not is_identity(init, Op.OR)
            or sorted(root.ints("dimensions")) != list(range(predicate.shape.rank))
            or predicate.shape.rank == 0):
        return None
    return predicate


def unmasked_element(loop: Instruction, predicate: Instruction,
                     uniform: frozenset[int]) -> int | None:
    """The first element the body changes without masking it by the condition's predicate
    (a per-lane one not `select(p, new, old)`, or any uniform one), or None. The select may
    come split over the pieces of a concatenate (concat forwarding splits element-wise ops
    so), each piece keeping its own slice of the old value."""
    root = loop.calls[1].root
    for i, value in enumerate(root.operands):
        if element_read(value) == i:
            continue
        if i in uniform or not _keeps_finished(value, i, (0,) * value.shape.rank, predicate):
            return i
    return None


def _keeps_finished(value: Instruction, element: int, offsets: tuple[int, ...],
                    predicate: Instruction) -> bool:
    """Whether `value` is element `element`'s old value, from `offsets` on, wherever the
    predicate is false: `select(p, new, old)`, or a concatenate of such pieces."""
    if value.op is Op.CONCATENATE:
        dim = value.ints("dimensions")[0]
        start = list(offsets)
        for piece in value.operands:
            if not _keeps_finished(piece, element, tuple(start), predicate):
                return False
            start[dim] += piece.shape.dims[dim]
        return True
    if value.op is not Op.SELECT or not _reads_old(value.operands[2], element, offsets):
        return False
    mask = value.operands[0]
    if mask.op is Op.BROADCAST:
        mask = mask.operands[0]
    return same_expression(mask, predicate, {})


def _reads_old(value: Instruction, element: int, offsets: tuple[int, ...]) -> bool:
    """Whether `value` reads element `element` of the state from `offsets` on, unchanged."""
    if value.op is Op.SLICE:
        spec = value.attrs["slice"]
        assert isinstance(spec, tuple)
        return (all(isinstance(s, SliceDim) and s.stride == 1 for s in spec)
                and tuple(s.start for s in spec) == offsets
                and _reads_old(value.operands[0], element, (0,) * len(offsets)))
    return element_read(value) == element and not any(offsets)


def same_expression(a: Instruction, b: Instruction, seen: dict[tuple[int, int], bool]) -> bool:
    """Whether `a` and `b` (of two computations of one loop) compute the same value from the
    loop state: the same ops, attributes and shapes over reads of the same elements."""
    key = (id(a), id(b))
    if key in seen:
        return seen[key]
    read_a, read_b = element_read(a), element_read(b)
    if read_a is not None or read_b is not None:
        result = read_a == read_b
    else:
        result = (_signature(a) == _signature(b) and len(a.operands) == len(b.operands)
                  and all(same_expression(x, y, seen) for x, y in zip(a.operands, b.operands)))
    seen[key] = result
    return result


def _signature(inst: Instruction) -> Hashable:
    if inst.op is Op.PARAMETER or has_side_effect(inst.op, inst.attrs) or \
            inst.calls and inst.op is not Op.REDUCE:
        return ("own", id(inst))  # a parameter, a draw, a call: only itself
    attrs = tuple(sorted((k, attribute_key(v)) for k, v in inst.attrs.items()))
    calls = tuple(reducer_op(c) or ("own", id(c)) for c in inst.calls)
    return (inst.op, inst.shape.dtype, inst.shape.dims, inst.shape.elements, attrs, calls)
