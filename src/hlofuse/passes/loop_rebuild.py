"""Helpers for the passes that rebuild while loops (scalarize-state, loop-unroll)."""

from __future__ import annotations

from hlofuse.ir.builder import ComputationBuilder
from hlofuse.ir.hlo import Computation, Instruction, Module, reachable_computations
from hlofuse.ir.ops import Op, OpKind


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


def has_control_flow(comp: Computation) -> bool:
    """Whether `comp` runs a loop, conditional or call (a fusion does not count)."""
    return any(i.op.definition.kind is OpKind.CONTROL and i.op is not Op.FUSION
               for i in comp.instructions)
