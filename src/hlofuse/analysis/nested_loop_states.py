"""Nested loops whose initial state is a tuple built where they start.

Lane code runs a nested while from the values of its initial state, element by element
(codegen/whole_loop_nested.py), and the analysis reads each element's lane dimension from the
value that starts it. A simplifier folds `tuple(get-tuple-element(s, 0), ...,
get-tuple-element(s, n))` into `s` (a loop started from the enclosing loop's whole state, or
from another loop's result): here such a start is written out again as the tuple of its
elements, in a copy of the loop's computations that only the plan sees. The module is left as
it is.
"""

from __future__ import annotations

import dataclasses

from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op


def with_tupled_nested_states(loop: Instruction) -> Instruction:
    """`loop`, its condition and body rewritten so that every nested while's operand is a
    tuple instruction; `loop` itself when they all are."""
    calls = tuple(_tupled(comp) for comp in loop.calls)
    if all(new is old for new, old in zip(calls, loop.calls)):
        return loop
    return dataclasses.replace(loop, calls=calls)


def _untupled(comp: Computation) -> bool:
    return any(inst.op is Op.WHILE and inst.operands[0].op is not Op.TUPLE
               for inst in comp.instructions)


def _tupled(comp: Computation) -> Computation:
    if not _untupled(comp):
        return comp
    names = NameUniquer()
    names.reserve_each(inst.name for inst in comp.instructions)
    builder = ComputationBuilder(comp.name, names)
    copies: dict[int, Instruction] = {}
    for inst in comp.instructions:
        operands = tuple(copies.get(id(o), o) for o in inst.operands)
        if inst.op is Op.WHILE and operands[0].op is not Op.TUPLE:
            state = operands[0]
            elements = [builder.add(Op.GET_TUPLE_ELEMENT, [state], attrs={"index": k})
                        for k in range(len(state.shape.elements))]
            operands = (builder.add(Op.TUPLE, elements),)
        copy = inst if operands == inst.operands else dataclasses.replace(inst, operands=operands)
        builder.instructions.append(copy)
        copies[id(inst)] = copy
    return Computation(comp.name, tuple(builder.instructions), copies[id(comp.root)],
                       tuple(comp.parameters))
