"""Call inlining (XLA's CallInliner).

Replaces every `call` by a copy of the called computation's instructions, with the callee's
parameters replaced by the call's operands. JAX wraps user functions (`jnp.where`, `jit`ted
helpers, the body of a scan step) in calls, and XLA inlines them before fusion, so a call
boundary only stays a fusion barrier if this pass is left out. Copies keep their metadata
(the user's source line); a name already used in the module gets a fresh `base.N` name.
Callees are processed first, so nested calls are flattened in one run.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from hlofuse.ir.builder import ComputationBuilder
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_callers

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink


def inline_call(call: Instruction, operands: tuple[Instruction, ...],
                builder: RewriteBuilder, keep_names: bool) -> Instruction:
    """Copies of the callee's instructions added to `builder`; returns the copy of its root.

    With `keep_names` (the callee has no other caller and disappears) copies keep their names.
    """
    return inline_computation(builder.callee(call.calls[0]), operands, builder, keep_names)


def inline_computation(callee: Computation, operands: tuple[Instruction, ...],
                       builder: ComputationBuilder, keep_names: bool) -> Instruction:
    """`callee` applied to `operands`: its instructions copied into `builder` (parameters
    replaced by the operands); returns the copy of its root. Loop unrolling uses it too."""
    copies: dict[Instruction, Instruction] = {}
    for param in callee.parameters:
        copies[param] = operands[param.parameter_number]
    for inst in callee.instructions:
        if inst.op is Op.PARAMETER:
            continue
        name = inst.name if keep_names else builder.names.unique(inst.name)
        copy = dataclasses.replace(inst, name=name,
                                   operands=tuple(copies[o] for o in inst.operands))
        builder.instructions.append(copy)
        copies[inst] = copy
    return copies[callee.root]


@dataclass(frozen=True, slots=True)
class CallInliner:
    """Inlines every `call` instruction."""

    name: ClassVar[str] = "call-inliner"

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        references = Counter(id(c) for i in module.all_instructions() for c in i.calls)

        def transform(inst: Instruction, operands: tuple[Instruction, ...],
                      builder: RewriteBuilder) -> Instruction:
            return inline_call(inst, operands, builder, references[id(inst.calls[0])] == 1)

        return rewrite_callers(module, Op.CALL, transform)
