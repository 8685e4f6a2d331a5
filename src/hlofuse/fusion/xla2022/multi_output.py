"""Multi-output fusion: siblings that read the same operand, and a producer joined to its
consumer as an extra output (XLA's 2022 GpuMultiOutputFusion).

Algorithm. For each fusible computation, instructions are visited uses before defs. For each
instruction P (constants skipped):

1. Sibling fusion: P's users, fusions first (multi-output 2 > fusion 1 > plain 0, stable), are
   paired left to right; j joins i when i is a fusion, neither reaches the other, their loop
   shapes agree (`ShapesCompatibleForMultiOutputFusion`), and `LegalToFuse`: equal fusion
   kinds, no tiled reduction into a loop fusion, no dynamic-update-slice root, budget. The
   fused operand is then read once. No cost model (XLA has none here).
2. Producer-consumer: if P has several users (a single user was already refused by the fusion
   merger), P may join one consumer as an extra output: P must be loop-fusible, not in-place,
   not multi-output, not transposing into a reduction, not create a nested loop, have loop
   shapes compatible with the consumer's, create no cycle, fit the budget and not duplicate
   too much code. Among the candidates a multi-output fusion is preferred, then a fusion.

Results: the root of the fused computation becomes a tuple; former users of the joined
instruction read a get-tuple-element of the fusion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from hlofuse.fusion.graphs.fusing import create_fusion, fuse_into_multi_output
from hlofuse.fusion.graphs.graph import Graph, Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph, ModuleGraphPass
from hlofuse.fusion.legality.emission_counts import fused_emitter_inefficient
from hlofuse.fusion.legality.properties import (
    in_place_operands,
    is_contiguous_reduction,
    is_effective_scalar,
    is_fusible_as_multi_output_root,
    is_loop_fusible,
    is_loop_fusion,
    shapes_compatible_for_multi_output,
)
from hlofuse.fusion.legality.rules import (
    barrier,
    creates_nested_loop,
    fits_in_budget,
    layouts_reduce_input_friendly,
    refuse,
)
from hlofuse.fusion.xla2022.instruction_fusion import choose_kind
from hlofuse.ir.ops import Op
from hlofuse.passes.decision_log import FusionDecision, Recorder

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink


@dataclass(frozen=True, slots=True)
class MultiOutputFusion(ModuleGraphPass):
    """Sibling and producer-consumer multi-output fusion."""

    name: ClassVar[str] = "multi-output-fusion"
    relax_concatenate: bool = False

    def run_on_graphs(self, graphs: ModuleGraph, log: DecisionSink | None = None) -> bool:
        recorder = Recorder(log, self.name)
        changed = False
        for graph in graphs.fusible_graphs():
            changed |= _MultiOutputFuser(graph, recorder, self.relax_concatenate).run()
        return changed


def fusion_priority(node: Node) -> int:
    if node.is_multi_output_fusion:
        return 2
    return 1 if node.is_fusion else 0


def legal_to_fuse(a: Node, b: Node) -> FusionDecision:
    """LegalToFuse (2022) for siblings `a` (a fusion) and `b`."""
    if (b.is_fusion and a.kind != b.kind) or (is_contiguous_reduction(b) and is_loop_fusion(a)):
        return FusionDecision.no("fusion-kinds-differ", f"cannot fuse siblings %{a.name} and "
                                 f"%{b.name}: different fusion kinds ({a.kind} and "
                                 f"{b.kind if b.is_fusion else b.op.text})")
    for node in (a, b):
        if node.is_fusion and node.fused_root.op is Op.DYNAMIC_UPDATE_SLICE:
            return FusionDecision.no("dynamic-update-slice-sibling",
                                     f"cannot fuse siblings %{a.name} and %{b.name}: %{node.name} "
                                     "updates a buffer in place")
    return fits_in_budget(a, b)


def is_sibling_candidate(node: Node) -> bool:
    if not is_fusible_as_multi_output_root(node):
        return False
    return not node.is_multi_output_fusion or all(
        u.op is Op.GET_TUPLE_ELEMENT for u in node.users)


def producer_multi_output_fusible(producer: Node, consumer: Node) -> FusionDecision:
    """IsProducerConsumerMultiOutputFusible (2022)."""
    def no(rule: str, reason: str) -> FusionDecision:
        return refuse(rule, producer, consumer, reason + " (as an extra output)")

    if not is_fusible_as_multi_output_root(consumer):
        rule, reason = barrier(consumer)
        return no(rule if rule != "not-loop-fusible" else "not-multi-output-root", reason)
    if producer.is_multi_output_fusion:
        return no("multi-output-producer", "the producer is already a multi-output fusion")
    if in_place_operands(producer):
        return no("in-place-conflict", "the producer updates a buffer in place")
    if not is_loop_fusible(producer):
        rule, reason = barrier(producer)
        return no(rule, reason)
    if creates_nested_loop(producer, consumer):
        return no("creates-nested-loop", "both read elements several times")
    if not shapes_compatible_for_multi_output(producer, consumer):
        return no("incompatible-shapes", "their loops run over different shapes")
    if not layouts_reduce_input_friendly(producer):
        return no("transposing-producer-into-reduction", "the producer transposes memory")
    return FusionDecision.yes()


class _MultiOutputFuser:
    def __init__(self, graph: Graph, recorder: Recorder, relax_concatenate: bool) -> None:
        self.graph = graph
        self.recorder = recorder
        self.relax_concatenate = relax_concatenate
        self.reachability = graph.reachability()
        self._candidates: dict[Node, bool] = {}

    def run(self) -> bool:
        changed = False
        defs_before_uses = self.graph.post_order()
        while defs_before_uses:
            producer = defs_before_uses.pop()
            if producer.op is Op.CONSTANT or not self.graph.contains(producer):
                continue
            changed |= self.fuse_siblings(producer)
            changed |= self.fuse_producer_consumer(producer)
        return changed

    # --- siblings --------------------------------------------------------------------

    def fuse_siblings(self, parent: Node) -> bool:
        if parent.op is Op.CONSTANT and is_effective_scalar(parent.shape):
            return False  # IsProfitableOperand: nothing is read, nothing is saved
        siblings = sorted(parent.users, key=fusion_priority, reverse=True)
        # Whether each sibling can be an output, asked once per pair: a sibling other than
        # the one growing does not change until it is fused (then it is gone).
        self._candidates = {}
        changed = False
        i = 0
        while i < len(siblings):
            first = siblings[i]
            if not first.is_fusion or not is_sibling_candidate(first):
                i += 1
                continue
            j = i + 1
            while j < len(siblings):
                other = siblings[j]
                decision = self.sibling_decision(parent, first, other)
                self.recorder.group(self.graph.name, [first, other], decision, consumer=None)
                if not decision:
                    j += 1
                    continue
                fuse_into_multi_output(first, other)
                self.graph.remove(other)
                del siblings[j]
                self.reachability.update_after_fusion(self.graph, first)
                changed = True
            i += 1
        return changed

    def sibling_decision(self, parent: Node, a: Node, b: Node) -> FusionDecision:
        # Asked for every pair of siblings (quadratic in a value's users, as in XLA): the
        # message is only written for a refusal.
        def names() -> str:
            return f"siblings %{a.name} and %{b.name} (both read %{parent.name})"

        candidate = self._candidates.get(b)
        if candidate is None:
            candidate = self._candidates[b] = is_sibling_candidate(b)
        if not candidate:
            return FusionDecision.no("not-multi-output-root",
                                     f"cannot fuse {names()}: %{b.name} cannot be a fusion "
                                     "output")
        if self.reachability.is_connected(a, b):
            return FusionDecision.no("siblings-connected", f"cannot fuse {names()}: one "
                                     "depends on the other")
        if not shapes_compatible_for_multi_output(a, b):
            return FusionDecision.no("incompatible-shapes", f"cannot fuse {names()}: their "
                                     "loops run over different shapes")
        return legal_to_fuse(a, b)

    # --- producer and consumer ---------------------------------------------------------

    def fuse_producer_consumer(self, producer: Node) -> bool:
        if (not self.graph.contains(producer) or not producer.users
                or producer.op is Op.PARAMETER):
            return False
        users = list(producer.users)
        if len(users) == 1 and not users[0].is_multi_output_fusion:
            return False  # the fusion merger already judged this edge
        candidates = []
        for consumer in users:
            decision = self.consumer_decision(producer, consumer)
            self.recorder.pair(self.graph.name, producer, consumer, decision)
            if decision:
                candidates.append(consumer)
        if not candidates:
            return False
        consumer = max(candidates, key=fusion_priority)  # first of the highest priority
        if not consumer.is_fusion:
            consumer = create_fusion(consumer, choose_kind(producer, consumer))
        fuse_into_multi_output(consumer, producer)
        self.graph.remove(producer)
        self.reachability.update_after_fusion(self.graph, consumer)
        return True

    def cycle_refusal(self, producer: Node, consumer: Node) -> FusionDecision | None:
        """The refusal when another operand of `consumer` depends on `producer` (fusing them
        would make a cycle), else None."""
        for operand in consumer.operands:
            source = operand
            if not self.reachability.is_present(source) and source.op is Op.GET_TUPLE_ELEMENT:
                source = source.operands[0]
            if source is not producer and self.reachability.is_reachable(producer, source):
                return refuse("creates-cycle", producer, consumer,
                              f"%{consumer.name} also reads %{operand.name}, which depends on "
                              "the producer")
        return None

    def consumer_decision(self, producer: Node, consumer: Node) -> FusionDecision:
        decision = producer_multi_output_fusible(producer, consumer)
        if not decision:
            return decision
        cycle = self.cycle_refusal(producer, consumer)
        if cycle is not None:
            return cycle
        decision = fits_in_budget(producer, consumer)
        if not decision:
            return decision
        culprit = fused_emitter_inefficient(consumer, producer, self.relax_concatenate)
        if culprit is not None:
            return refuse("code-duplication-too-high", producer, consumer,
                          f"{culprit.describe()} (as an extra output)", **culprit.figures())
        return FusionDecision.yes()
