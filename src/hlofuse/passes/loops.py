"""Helpers for the passes that rebuild while loops (scalarize-state, loop-unroll)."""

from __future__ import annotations

from collections import Counter

from hlofuse.ir.builder import ComputationBuilder
from hlofuse.ir.hlo import Computation, Instruction, Module, reachable_computations
from hlofuse.ir.ops import Op


def call_counts(module: Module) -> Counter[int]:
    """How many instructions call each computation (by id)."""
    return Counter(id(c) for inst in module.all_instructions() for c in inst.calls)


def with_reachable_computations(module: Module) -> Module:
    """`module` listing exactly the computations its entry reaches: the loop bodies a pass has
    just built are added, the ones they replace are dropped."""
    computations = tuple(reachable_computations(module.entry))
    return Module(module.name, computations, module.entry, module.debug_tables)


def tuple_elements(value: Instruction, builder: ComputationBuilder) -> list[Instruction]:
    """The elements of a tuple-shaped value: a tuple's operands, or new get-tuple-elements."""
    if value.op is Op.TUPLE:
        return list(value.operands)
    return [builder.add(Op.GET_TUPLE_ELEMENT, [value], attrs={"index": i})
            for i in range(len(value.shape.elements))]


def parameter_users(comp: Computation) -> list[Instruction]:
    """The instructions that use the computation's (single) parameter."""
    param = comp.parameters[0]
    return [i for i in comp.instructions if any(o is param for o in i.operands)]


def element_reads(comp: Computation, index: int) -> list[Instruction]:
    """The get-tuple-elements of the parameter that read tuple element `index`."""
    return [i for i in parameter_users(comp)
            if i.op is Op.GET_TUPLE_ELEMENT and i.attrs["index"] == index]


def has_control_flow(comp: Computation) -> bool:
    return any(i.op in (Op.WHILE, Op.CONDITIONAL, Op.CALL) for i in comp.instructions)
