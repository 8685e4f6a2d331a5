"""XLA's unique instruction ids, as far as the text of the module before optimisation tells
them: the order in which XLA created each instruction.

XLA's priority fusion breaks ties between equal priorities by the instruction's unique id,
the larger id first (`priority_fusion.cc`, `PriorityFusionQueue`: the queue is a
`std::map` keyed by `(priority, instruction->unique_id())` and dequeues its last entry). Ids
are not in HLO text. What they are, read from XLA's own dumps (`--xla_dump_hlo_as_proto`;
each `HloInstructionProto` carries its `id`) for the 42 programs of `tests/data/xla_gpu/`:

- an id is the instruction's place in its computation's creation order: passes append the
  instructions they create, and the ids of the instructions that survive keep their relative
  order up to priority fusion (the ids at its entry are the ids before optimisation,
  compacted, followed by the instructions the passes created); a fusion priority fusion
  creates gets the next id (`PriorityFusion::Fuse`: `computation->AddInstruction`);
- before optimisation, the ids are the order of XLA's StableHLO-to-HLO translation
  (`xla/hlo/translate/mhlo_to_hlo/mlir_hlo_to_hlo.cc`): a computation's parameters first,
  then one get-tuple-element per element of a tuple parameter, in element order; then the
  constants, which MLIR keeps at the start of a block, in the order of the number the name
  uniquer gave them (`constant.N`), a splat constant as a scalar constant followed by its
  broadcast; then every other instruction in the order of the text (XLA prints a post
  order), the get-tuple-elements of a multi-output instruction right after it.

This agrees with XLA's ids on every computation of 35 of the 42 programs; in the other 7 one
computation each differs in a few places, where XLA's printed post order is not the order of
the translation (an operand defined before its users but printed after an unrelated
instruction). Instructions hlofuse's own passes create are not in the record: they rank
after every recorded one, in their order at priority fusion's entry, as XLA appends them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar

from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.passes.decision_log import DecisionSink

_NUMBER = re.compile(r"\.(\d+)$")


def _uniquer_number(instruction: Instruction) -> int:
    found = _NUMBER.search(instruction.name)
    return int(found.group(1)) if found else -1


def creation_order(computation: Computation) -> list[Instruction]:
    """`computation`'s instructions in the order XLA's translation creates them."""
    position = {inst: i for i, inst in enumerate(computation.instructions)}

    def key(inst: Instruction) -> tuple[int, int, int, int]:
        if inst.op is Op.PARAMETER:
            return (0, inst.parameter_number, 0, 0)
        if inst.op is Op.CONSTANT:
            return (2, _uniquer_number(inst), 0, position[inst])
        operand = inst.operands[0] if inst.operands else None
        if operand is not None and inst.op is Op.GET_TUPLE_ELEMENT:
            index = inst.attrs.get("index", 0)
            assert isinstance(index, int)
            if operand.op is Op.PARAMETER:
                return (1, operand.parameter_number, index, position[inst])
            return (3, position[operand], 1 + index, position[inst])
        if operand is not None and inst.op is Op.BROADCAST and operand.op is Op.CONSTANT:
            return (2, _uniquer_number(operand), 1, position[inst])
        return (3, position[inst], 0, 0)

    return sorted(computation.instructions, key=key)


@dataclass(slots=True)
class InstructionIds:
    """Each recorded instruction's rank in its computation's creation order, by name."""

    ranks: dict[str, int] = field(default_factory=dict)

    def record(self, module: Module) -> None:
        self.ranks.clear()
        for computation in module.computations:
            for rank, inst in enumerate(creation_order(computation)):
                self.ranks.setdefault(inst.name, rank)


@dataclass(frozen=True, slots=True)
class RecordInstructionIds:
    """Records `ids` from the module as it enters the pipeline (the module before
    optimisation); changes nothing."""

    name: ClassVar[str] = "record-instruction-ids"
    ids: InstructionIds = field(default_factory=InstructionIds, compare=False)

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        self.ids.record(module)
        return module, False
