"""Merging a loop fusion into all of its users (XLA's 2022 GPU FusionMerger).

Algorithm. For each fusible computation, fusions are visited in post order (defs before
uses). A kLoop fusion is merged into every user (a plain user is first wrapped into a fusion
of its own) if all users can take it, and removed; otherwise it stays, untouched. The
conditions, in XLA's order:

1. it has users and is a kLoop fusion (kInput fusions are rooted at a reduction hero);
2. every user passes `IsProducerConsumerFusible` and is not a bitcast;
3. bytes: `current = read + written * (users + 1)`, `merged = read * users` (a parameter
   only sliced counts the sliced bytes); refuse if `merged / max(1, current) > 1.10`;
4. an expensive fused instruction is only allowed if (there is one user, or the ratio is
   below 0.3 and current is over 1 KiB) and no user re-reads the fusion's elements;
5. per user: the fused emitter would not duplicate too much code
   (`FusedIrEmitter::IsFusedIrEmitterInefficient`: the producer's instructions are counted
   with the number of times the user emits the producer) and the merged fusion fits the
   budget.

XLA has no rule against merging a fusion rooted at a concatenate into several users: inside
the producer the root has no users, so the code-duplication check of rule 5 only asks how
often each user would emit it. A concatenate stays a kernel of its own only when instruction
fusion left it bare and its users were fusions already (`indexing.py`).

Every user gets a record: all say fuse, or all carry the rule that refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from hlofuse.fusion.graphs.fusing import create_fusion, merge_fusion
from hlofuse.fusion.graphs.graph import Graph, Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph, ModuleGraphPass
from hlofuse.fusion.legality.emission_counts import fused_emitter_inefficient
from hlofuse.fusion.legality.properties import (
    expensive_instruction_count,
    is_expensive,
    is_loop_fusion,
    reuses_operand_elements,
)
from hlofuse.fusion.legality.rules import fits_in_budget, is_producer_consumer_fusible, refuse
from hlofuse.fusion.xla2022.instruction_fusion import choose_kind
from hlofuse.ir.ops import Op
from hlofuse.passes.decision_log import FUSIBLE, FusionDecision, Recorder

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

MAX_MERGED_TO_CURRENT_BYTES_RATIO = 1.10
EXPENSIVE_OK_RATIO = 0.3
EXPENSIVE_OK_MIN_BYTES = 1024


@dataclass(frozen=True, slots=True)
class FusionMerger(ModuleGraphPass):
    """Merges kLoop fusions into all their users when that does not add memory traffic."""

    name: ClassVar[str] = "fusion-merger"
    relax_concatenate: bool = False

    def run_on_graphs(self, graphs: ModuleGraph, log: DecisionSink | None = None) -> bool:
        recorder = Recorder(log, self.name)
        changed = False
        for graph in graphs.fusible_graphs():
            changed |= self._merge_computation(graph, recorder)
        return changed

    def _merge_computation(self, graph: Graph, recorder: Recorder) -> bool:
        changed = False
        for fusion in graph.post_order():
            if not fusion.is_fusion or not graph.contains(fusion) or not fusion.users:
                continue  # without users there is nothing to merge into, and no edge to log
            decision, blamed = self.should_merge(fusion)
            for user in fusion.users:
                recorder.pair(graph.name, fusion, user, _as_seen_by(decision, fusion, user,
                                                                    blamed))
            if decision:
                merge_into_all_users(fusion)
                changed = True
        return changed

    def should_merge(self, fusion: Node) -> tuple[FusionDecision, Node | None]:
        """The decision for the whole fusion, and the user that caused a refusal (if one)."""
        users = list(fusion.users)
        if not is_loop_fusion(fusion):
            return FusionDecision.no("not-loop-fusion", f"a {fusion.kind} fusion keeps its "
                                     "hero at the root and is not merged"), None
        for user in users:
            decision = is_producer_consumer_fusible(fusion, user)
            if decision and user.op is Op.BITCAST:
                decision = refuse("consumer-is-bitcast", fusion, user, "bitcasts are not fused")
            if not decision:
                return decision, user
        current = current_bytes_transferred(fusion)
        merged = merged_bytes_transferred(fusion)
        ratio = merged / max(1.0, current)
        figures = {"current_bytes": current, "merged_bytes": merged, "ratio": round(ratio, 4)}
        if ratio > MAX_MERGED_TO_CURRENT_BYTES_RATIO:
            return FusionDecision.no(
                "bytes-transferred-ratio", f"merged into its {len(users)} users it would move "
                f"{merged:.0f} B instead of {current:.0f} B (ratio {ratio:.2f} > "
                f"{MAX_MERGED_TO_CURRENT_BYTES_RATIO})", **figures), None
        decision = self._expensive_rule(fusion, users, ratio, current)
        if not decision:
            return decision, None
        for user in users:
            culprit = fused_emitter_inefficient(user, fusion, self.relax_concatenate)
            if culprit is not None:
                return refuse("code-duplication-too-high", fusion, user, culprit.describe(),
                              **culprit.figures()), user
            decision = fits_in_budget(fusion, user)
            if not decision:
                return decision, user
        return FusionDecision.yes("", FUSIBLE, **figures), None

    @staticmethod
    def _expensive_rule(fusion: Node, users: list[Node], ratio: float,
                        current: float) -> FusionDecision:
        # Only a fusion with an expensive instruction can be refused here: whether a user
        # re-reads the fusion (a walk through each user's body) is asked only then.
        if expensive_instruction_count(fusion) == 0:
            return FusionDecision.yes()
        reused = any(reuses_operand_elements(u, u.operand_index(fusion)) for u in users)
        saves_a_lot = ratio < EXPENSIVE_OK_RATIO and current > EXPENSIVE_OK_MIN_BYTES
        if (len(users) == 1 or saves_a_lot) and not reused:
            return FusionDecision.yes()
        for inst in fusion.fused.post_order():
            if inst.op is not Op.PARAMETER and is_expensive(inst):
                return FusionDecision.no(
                    "expensive-instruction-in-fusion", f"it contains {inst.op.text} "
                    f"%{inst.name}, which would be computed again in each of its "
                    f"{len(users)} users", op=inst.op.text, users=len(users))
        return FusionDecision.yes()


def _as_seen_by(decision: FusionDecision, fusion: Node, user: Node,
                blamed: Node | None) -> FusionDecision:
    """The decision as a record of the edge fusion -> user."""
    if decision or user is blamed:
        return decision
    if blamed is None:
        return FusionDecision.no(decision.rule, f"cannot merge %{fusion.name} into "
                                 f"%{user.name}: {decision.message}", **decision.figures)
    return FusionDecision.no(decision.rule, f"cannot merge %{fusion.name} into %{user.name}: "
                             f"it must merge into all users, and %{blamed.name} refused "
                             f"({decision.message})", **decision.figures)


def _bytes_read_by_parameter(param: Node) -> float:
    """All of the parameter, or only what slices of it read when slices are its only users."""
    if param.users and all(u.op in (Op.SLICE, Op.DYNAMIC_SLICE) for u in param.users):
        return float(sum(u.shape.byte_size for u in param.users))
    return float(param.shape.byte_size)


def bytes_read(fusion: Node) -> float:
    return sum(_bytes_read_by_parameter(p) for p in fusion.fused.params)


def current_bytes_transferred(fusion: Node) -> float:
    root = fusion.fused_root
    outputs = root.operands if root.op is Op.TUPLE else [root]
    written = float(sum(o.shape.byte_size for o in outputs))
    return bytes_read(fusion) + written * (len(fusion.users) + 1)


def merged_bytes_transferred(fusion: Node) -> float:
    return bytes_read(fusion) * len(fusion.users)


def merge_into_all_users(fusion: Node) -> None:
    graph = fusion.parent
    users = list(fusion.users)
    for i, user in enumerate(users):
        consumer = user if user.is_fusion else create_fusion(user, choose_kind(fusion, user))
        merge_fusion(consumer, fusion, last=i == len(users) - 1)
    graph.remove(fusion)
