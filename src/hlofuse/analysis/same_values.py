"""Which instructions compute the same value as an earlier one.

A fused computation can repeat itself many times over: XLA 2022's CSE leaves identical iotas
apart, and with them every chain that starts from one (a counter-based random number drawn
in several consumers is one Threefry chain per consumer, all in one kernel once multi-output
fusion has joined them). In CartPole unrolled 40 times, three quarters of the fused
instructions repeat an earlier one. The fusion passes must keep them, as XLA does; code
generation, which writes each value once anyway, needs to visit only one of each class.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import numpy as np

from hlofuse.analysis.graph import post_order
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op, has_side_effect


def attribute_key(value: object) -> Hashable:
    """A hashable stand-in for an attribute value, literals compared bit for bit."""
    if isinstance(value, np.ndarray):
        return ("literal", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, tuple):
        return tuple(attribute_key(v) for v in value)
    assert isinstance(value, Hashable)
    return value


def _key(inst: Instruction, operands: Iterable[int]) -> Hashable:
    shape = inst.shape
    attrs = (tuple(sorted((k, attribute_key(v)) for k, v in inst.attrs.items()))
             if inst.attrs else ())
    # The shape as the fields it compares by (tuples hash without calling into Python), and
    # its layout, which it does not compare.
    return (inst.op, tuple(operands), shape.dtype, shape.dims, shape.elements, shape.layout,
            attrs, tuple(map(id, inst.calls)) if inst.calls else (),
            tuple((k, r.text) for k, r in inst.extra) if inst.extra else ())


def same_values(roots: Iterable[Instruction],
                bound: Iterable[Instruction] = (),
                order: list[Instruction] | None = None) -> dict[int, int]:
    """For each instruction reachable from `roots` (not through `bound` ones, which stand
    for values given from outside and are never merged) that computes the same value as one
    before it in post order, the id of the first such: equal opcode, shape, attributes and
    called computations (by identity), and operands of the same values. Iotas of one shape
    and dimension are one value; parameters and side-effecting instructions are each their
    own. `order`, where the caller has it, is `post_order(roots, stop_at=bound)`."""
    bound = list(bound)
    fixed = {id(inst) for inst in bound}
    first: dict[Hashable, int] = {}
    same: dict[int, int] = {}
    for inst in post_order(roots, stop_at=bound) if order is None else order:
        if id(inst) in fixed or inst.op is Op.PARAMETER or has_side_effect(inst.op, inst.attrs):
            continue
        if not inst.operands and inst.op not in (Op.CONSTANT, Op.IOTA):
            continue
        key = _key(inst, [same.get(id(o), id(o)) for o in inst.operands])
        earlier = first.setdefault(key, id(inst))
        if earlier != id(inst):
            same[id(inst)] = earlier
    return same
