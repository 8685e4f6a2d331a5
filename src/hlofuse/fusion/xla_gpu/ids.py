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
  order), the get-tuple-elements of a multi-output instruction right after it. A broadcast
  of a constant of rank 1 or more is an op of the text (`broadcast_in_dim`), not a splat:
  `rollout_reacher_logged`'s `max.9`, a broadcast of the constant `f32[2]` `constant.164`,
  has XLA's id 867 in text order, the constant 15.

This agrees with XLA's ids on every computation of 35 of the 42 programs; in the other 7 one
computation each differs in a few places, where XLA's printed post order is not the order of
the translation (an operand defined before its users but printed after an unrelated
instruction). Instructions hlofuse's passes create are not in the record: they rank after
every recorded one, as XLA appends them, in their order at priority fusion's entry.

XLA's `HloComputation::ReplaceInstruction` gives a replacement of the same opcode the old
instruction's name: the name survives, the id is new. Two such replacements change ids where
hlofuse's passes keep the instruction:
- the algebraic simplifier's `HandleBroadcast` builds a new broadcast in place of one whose
  operand is a broadcast or a reshape that only inserts 1-sized dimensions (it reads that
  operand's operand); a broadcast whose name survives but that now reads what a chain of
  broadcasts and reshapes under it read before the pass is noted
  (`NoteRecreatedBroadcasts`, after each pass of the simplification fixed points) and ranks
  after the other new instructions but layout normalisation's bitcasts
  (`rollout_mountain_car_mlp`'s Threefry key `add.701`: XLA's id 792, after the
  simplifier's `broadcast.22` and `add.743`, 787 and 788, before the bitcasts, 793 on);
- `ReductionLayoutNormalizer` (`reduction_layout_normalizer.cc`, `HandleReduce`, run after
  the Triton GEMM rewriter) replaces every reduce of more than one input by a new one: such
  reduces rank last (`variadic_reduce`).

Layout normalisation's pipeline (`gpu_compiler.cc`) creates the rest in three steps, read
from XLA's proto dump of `rollout_reacher_logged` (ids 1044-1076 at priority fusion's entry):
its `ReshapeDecomposer` first makes every reshape the module had that is a bitcast a new
bitcast, in post order; then `LayoutNormalization` creates the instructions it rewrites over
physical shapes (`concatenate.1`, 1070); then the layout-sensitive simplifier makes bitcasts of
the same-width bitcast-converts (`HandleBitcastConvert`) and of the reshapes normalisation
made, in post order (the Threefry uniform's `bitcast.52`, 1071, after the concatenate).
`NoteNamesBeforeLayout` notes the names layout assignment gets, which tells the three apart.
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
        if (operand is not None and inst.op is Op.BROADCAST and operand.op is Op.CONSTANT
                and operand.shape.rank == 0):
            return (2, _uniquer_number(operand), 1, position[inst])
        return (3, position[inst], 0, 0)

    return sorted(computation.instructions, key=key)


def _foldable_sources(operand: Instruction) -> frozenset[str]:
    """The instructions a broadcast of `operand` comes to read when the simplifier folds
    `operand` into it: down a chain of broadcasts and reshapes (HandleBroadcast merges a
    broadcast of a broadcast, and elides a reshape under a broadcast)."""
    sources: set[str] = set()
    while operand.op in (Op.BROADCAST, Op.RESHAPE):
        operand = operand.operands[0]
        sources.add(operand.name)
    return frozenset(sources)


def variadic_reduce(op: Op, operand_count: int) -> bool:
    """A reduce of more than one input (and as many init values), which XLA's
    ReductionLayoutNormalizer re-creates."""
    return op is Op.REDUCE and operand_count > 2


@dataclass(slots=True)
class InstructionIds:
    """Each recorded instruction's rank in its computation's creation order, by name, and the
    broadcasts XLA's simplifier re-creates, in the order it does (`recreated`)."""

    ranks: dict[str, int] = field(default_factory=dict)
    recreated: dict[str, int] = field(default_factory=dict)
    # The names of the module as layout assignment got it (`NoteNamesBeforeLayout`); None
    # until noted.
    before_layout: frozenset[str] | None = None
    # What each broadcast read when the last record or note saw it: the names it would read
    # with its operand folded into it (`_foldable_sources`).
    broadcast_sources: dict[str, frozenset[str]] = field(default_factory=dict)

    def record(self, module: Module) -> None:
        self.ranks.clear()
        self.recreated.clear()
        self.broadcast_sources.clear()
        self.before_layout = None
        for computation in module.computations:
            for rank, inst in enumerate(creation_order(computation)):
                self.ranks.setdefault(inst.name, rank)
        self._note_broadcasts(module)

    def note(self, module: Module) -> None:
        """Notes the broadcasts XLA would have re-created since the last note (module
        docstring), in module order."""
        for computation in module.computations:
            for inst in computation.instructions:
                if inst.op is not Op.BROADCAST or inst.name in self.recreated:
                    continue
                if inst.operands[0].name in self.broadcast_sources.get(inst.name, ()):
                    self.ranks.pop(inst.name, None)
                    self.recreated[inst.name] = len(self.recreated)
        self._note_broadcasts(module)

    def _note_broadcasts(self, module: Module) -> None:
        self.broadcast_sources.clear()
        for computation in module.computations:
            for inst in computation.instructions:
                if inst.op is Op.BROADCAST:
                    self.broadcast_sources[inst.name] = _foldable_sources(inst.operands[0])


@dataclass(frozen=True, slots=True)
class RecordInstructionIds:
    """Records `ids` from the module as it enters the pipeline (the module before
    optimisation); changes nothing."""

    name: ClassVar[str] = "record-instruction-ids"
    ids: InstructionIds = field(default_factory=InstructionIds, compare=False)

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        self.ids.record(module)
        return module, False


@dataclass(frozen=True, slots=True)
class NoteRecreatedBroadcasts:
    """Notes in `ids` the broadcasts the passes before it re-created as XLA's simplifier does
    (`InstructionIds.note`); changes nothing."""

    name: ClassVar[str] = "note-recreated-broadcasts"
    ids: InstructionIds = field(default_factory=InstructionIds, compare=False)

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        self.ids.note(module)
        return module, False


@dataclass(frozen=True, slots=True)
class NoteNamesBeforeLayout:
    """Notes in `ids` the names of the module layout assignment is about to get: what
    layout normalisation and the passes after it create is not among them (module
    docstring); changes nothing."""

    name: ClassVar[str] = "note-names-before-layout"
    ids: InstructionIds = field(default_factory=InstructionIds, compare=False)

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        self.ids.before_layout = frozenset(i.name for i in module.all_instructions())
        return module, False
