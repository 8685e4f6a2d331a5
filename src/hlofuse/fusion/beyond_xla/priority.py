"""Priority fusion: fuse producers into all their users in order of the time the cost model
says it saves (XLA's PriorityFusion, the default GPU fusion pass since 2024, for our CPU).

Algorithm. Per fusible computation, every instruction with users (parameters, constants,
tuples and get-tuple-elements excepted) gets a priority: minus infinity if some user cannot
take it (the legality checks below), else the estimated time of the producer and its users as
they are minus the time of the users with the producer fused into each of them (duplicated
when there are several; `cost_model`). Producers with a positive priority wait in a queue;
the largest is taken (ties: the later instruction), fused into every user (a plain user first
becomes a one-instruction fusion; a fusion producer is merged), and removed. Bitcasts and
reshapes that only reinterpret a buffer go first; a bitcast is not fused into, and a producer
with bitcast users stays for them. Only the priorities that changed are computed again: the
new fusions' (as producers) and their operands' (their consumer changed). The model caches
every kernel's profile and every fused pair's until either side changes, and a grown fusion
takes the profile predicted for it, so no fusion is walked twice. When the queue is empty,
every constant of at most one element is fused into each user that can take it where the
model sees a gain (XLA fuses constants last, outside the queue); larger constants stay
external buffers.

Of XLA's ten `CanFuse` checks, these apply here, because they are about correctness or about
the kernels our C emitter writes:
 1. both are fusible: side-effect free, not a library call (dot, custom-call, rng), tuple,
    loop or call (`rules.barrier` names the reason); a multi-output fusion is not a producer;
 3. a bitcast consumer is not fused into (bitcasts are free);
 7. the fused kernel has at most 96 operands and outputs (the budget without the GPU's shared
    memory and tiled-reduction limits, which our emitter does not have);
 8. the fused kernel stays under 10000 instructions, counting the producer once per index it
    is emitted at (`indexing`): the C source and its compile time stay bounded (asked last,
    only where the model sees a gain, because it walks the consumer);
 9. the producer is not the computation's root (its value is needed anyway);
10. in-place updates stay safe (`rules.in_place_safe`).
Relaxed, because they were GPU emitter limits that the cost model now prices: 5, no reduce
into a reduce (our emitter nests the loops; recomputation is priced through utilisation), and
6, no reduction epilogue that turns a reduction kernel into a loop kernel (our emitter
computes a reduction per output element wherever it stands). Not applicable: 2 (Triton) and 4
(scatter). As in XLA there is no expensive-op rule and no `code-duplication-too-high`:
duplicating a producer into several users, recomputing it through a broadcast, and reading a
multi-user concatenate are decided by estimated time alone.

Every considered edge is logged once: fused edges with `cost-model-gain` and the figures
(gain, times unfused and fused, in microseconds), edges the model refused with
`cost-model-loss`, edges a check refused with that check's rule id; when another user refused,
the edge carries that user's rule (a producer joins all its users or none).

Knobs: `costs` says which machine constants the pass prices with, "measured" (this machine's,
which the caller passes as `constants`: the strategy gets them from the layer above, which
runs the calibration probe; without them, the defaults) or "default"
(`cost_model.DEFAULT_CONSTANTS`, whatever `constants` says). `constants` injects them (tests,
the measured ones).
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from hlofuse.fusion.beyond_xla.cost_model import (
    DEFAULT_CONSTANTS,
    CostModel,
    MachineConstants,
    node_key,
)
from hlofuse.fusion.graphs.fusing import create_fusion, fuse_instruction, merge_fusion
from hlofuse.fusion.graphs.graph import Graph, Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph, ModuleGraphPass
from hlofuse.fusion.kernels import is_free
from hlofuse.fusion.legality.emission_counts import (
    IndexingEvaluation,
    cached_evaluation,
    indexing_evaluation,
    update_after_fusing,
)
from hlofuse.fusion.legality.properties import (
    has_side_effect,
    is_effective_scalar,
    is_input_fusible_reduction,
    subshape_count,
)
from hlofuse.fusion.legality.rules import (
    OK,
    barrier,
    in_place_safe,
    producer_is_not_multi_output,
    producer_not_root,
    refuse,
)
from hlofuse.ir.ops import FusionKind, Op, OpKind
from hlofuse.passes.decision_log import COST_MODEL_GAIN, FusionDecision, Recorder

if TYPE_CHECKING:
    from collections.abc import Callable

    from hlofuse.passes.decision_log import DecisionSink

PASS_NAME = "priority-fusion"
COST_MODEL_LOSS = "cost-model-loss"
MAX_OPERANDS_AND_OUTPUTS = 96  # XLA 2024's MaxOperandsAndOutputsPerFusion
MAX_IR_SIZE = 10000  # XLA's kMaxIRSize
COSTS = ("measured", "default")
_NOT_PRODUCERS = frozenset({Op.PARAMETER, Op.CONSTANT})
_FUSIBLE_KINDS = frozenset({OpKind.ELEMENTWISE, OpKind.INJECTIVE, OpKind.REDUCTION})
_US = 1e6


@dataclass(frozen=True, slots=True)
class PriorityFusion(ModuleGraphPass):
    """Fuses producers into all their users, most estimated time saved first."""

    name: ClassVar[str] = PASS_NAME
    costs: str = "measured"
    constants: MachineConstants | None = None

    def __post_init__(self) -> None:
        if self.costs not in COSTS:
            raise ValueError(f"knob costs of {PASS_NAME} takes {' or '.join(COSTS)}, got "
                             f"{self.costs!r}")

    def machine(self) -> MachineConstants:
        if self.constants is not None:
            return self.constants
        return DEFAULT_CONSTANTS

    def run_on_graphs(self, graphs: ModuleGraph, log: DecisionSink | None = None) -> bool:
        recorder = Recorder(log, self.name)
        model = CostModel(self.machine())
        changed = False
        for graph in graphs.fusible_graphs():
            changed |= _PriorityFuser(graph, model, recorder).run()
        return changed


# --- legality (XLA's CanFuse, as it applies to our CPU kernels) ------------------------------


def is_fusible(node: Node) -> bool:
    """PriorityFusion's IsFusible: side-effect free and an op a loop kernel can compute."""
    if node.op in (Op.PARAMETER, Op.WHILE, Op.CONDITIONAL, Op.CALL) or has_side_effect(node):
        return False
    if node.is_fusion:
        return node.kind != FusionKind.CUSTOM  # a custom fusion (a whole loop) has its own emitter
    if node.op in (Op.CONSTANT, Op.IOTA):
        return True
    return node.op.definition.kind in _FUSIBLE_KINDS


def producer_is_fusible(producer: Node, consumer: Node) -> FusionDecision:
    if is_fusible(producer):
        return OK
    rule, reason = barrier(producer)
    return refuse(rule, producer, consumer, reason)


def consumer_is_fusible(producer: Node, consumer: Node) -> FusionDecision:
    if is_fusible(consumer):
        return OK
    rule, reason = barrier(consumer)
    return refuse(rule, producer, consumer, reason)


def consumer_not_bitcast(producer: Node, consumer: Node) -> FusionDecision:
    if consumer.op is Op.BITCAST:
        return refuse("consumer-is-bitcast", producer, consumer, "bitcasts are not fused into")
    return OK


def fits_in_kernel_budget(producer: Node, consumer: Node) -> FusionDecision:
    operands = len((set(consumer.operands) | set(producer.operands)) - {producer})
    outputs = subshape_count(consumer.shape)
    if operands + outputs > MAX_OPERANDS_AND_OUTPUTS:
        return refuse("too-many-operands", producer, consumer,
                      f"the fused kernel would have {operands} operands and {outputs} outputs, "
                      f"over the budget of {MAX_OPERANDS_AND_OUTPUTS}", operands=operands,
                      outputs=outputs, limit=MAX_OPERANDS_AND_OUTPUTS)
    return OK


def _instruction_count(node: Node) -> int:
    return len(node.fused.nodes) if node.is_fusion else 1


def _evaluation(fusion: Node) -> IndexingEvaluation | None:
    """The fusion's emission counts if known: the concatenate knob does not change them, so
    either cached form serves (multi-output fusion keeps the other)."""
    return cached_evaluation(fusion, False) or cached_evaluation(fusion, True)


def merged_not_too_large(producer: Node, consumer: Node) -> FusionDecision:
    """ProducerConsumerMergedTooLarge (the MLIR emitters' form: the size cap only)."""
    if consumer.is_fusion:
        emitted = (_evaluation(consumer) or indexing_evaluation(consumer)).emitted(producer)
    else:
        emitted = 1
    size = _instruction_count(consumer) + _instruction_count(producer) * max(1, emitted)
    if size > MAX_IR_SIZE:
        return refuse("merged-too-large", producer, consumer,
                      f"the fused kernel would emit {size} instructions (the producer "
                      f"{emitted} times), over {MAX_IR_SIZE}", size=size, emitted=emitted,
                      limit=MAX_IR_SIZE)
    return OK


CHECKS: tuple[Callable[[Node, Node], FusionDecision], ...] = (
    producer_is_fusible, consumer_is_fusible, producer_is_not_multi_output, consumer_not_bitcast,
    fits_in_kernel_budget, producer_not_root, in_place_safe,
)
# Counting emissions walks the consumer's body: asked only where the cost model sees a gain.
SIZE_CHECKS: tuple[Callable[[Node, Node], FusionDecision], ...] = (merged_not_too_large,)


def can_fuse(producer: Node, consumer: Node,
             checks: tuple[Callable[[Node, Node], FusionDecision], ...] = CHECKS + SIZE_CHECKS
             ) -> FusionDecision:
    """The first check that refuses, or yes."""
    for check in checks:
        decision = check(producer, consumer)
        if not decision:
            return decision
    return OK


def is_bitcast_like(node: Node) -> bool:
    """A bitcast, or a reshape that only reinterprets a row-major buffer (`kernels.is_free`):
    XLA gives these the highest priority."""
    return node.op is Op.BITCAST or (node.op is Op.RESHAPE and is_free(node))


def fused_kind(producer: Node, consumer: Node) -> FusionKind:
    """ChooseFusionKind (2024): kInput when either side has a tiled reduction hero."""
    if is_input_fusible_reduction(consumer) or is_input_fusible_reduction(producer):
        return FusionKind.INPUT
    return FusionKind.LOOP


def fuse(producer: Node, consumer: Node) -> Node:
    """Fuse `producer` into `consumer` (which becomes a fusion if it is not one); returns it."""
    kind = fused_kind(producer, consumer)
    evaluation = None
    if consumer.is_fusion:
        fusion = consumer
        if kind == FusionKind.INPUT and fusion.kind != kind:
            fusion.set_kind(kind)
        evaluation = _evaluation(fusion)
    else:
        fusion = create_fusion(consumer, kind)
    if not producer.is_fusion:
        clone = fuse_instruction(fusion, producer)
        if evaluation is not None:  # keep the emission counts without recounting
            update_after_fusing(evaluation, producer, clone)
        return fusion
    before = set(fusion.fused.nodes)
    merge_fusion(fusion, producer)
    if evaluation is not None:
        _update_after_merging(evaluation, producer, before)
    return fusion


def _update_after_merging(evaluation: IndexingEvaluation, producer: Node,
                          before: set[Node]) -> None:
    """`update_after_fusing` for a merged fusion: its body's clones, users before operands.
    The clones are the consumer's new instructions, added in the producer's post order."""
    originals = [n for n in producer.fused.post_order() if n.op is not Op.PARAMETER]
    clones = [n for n in evaluation.fusion.fused.nodes
              if n not in before and n.op is not Op.PARAMETER]
    if len(clones) != len(originals) or any(a.op is not b.op for a, b in zip(originals, clones)):
        return  # not the layout expected: the evaluation is recomputed when next asked
    pairs = list(zip(reversed(originals), reversed(clones)))
    (root, root_clone), rest = pairs[0], pairs[1:]
    assert root is producer.fused_root
    update_after_fusing(evaluation, producer, root_clone)
    for _, clone in rest:
        evaluation.usage[clone] = sum(evaluation.usage[u]
                                      for u in evaluation.indexing_users[clone])
        evaluation.add_operand_users(clone)


# --- the queue ------------------------------------------------------------------------------

Verdicts = list[tuple[Node, FusionDecision]]


class _PriorityFuser:
    # The legality checks: the cheap ones asked of every user, the size checks only where the
    # model sees a gain (`xla-gpu` puts XLA's GPU checks here: `xla_gpu/priority.py`).
    checks: ClassVar[tuple[Callable[[Node, Node], FusionDecision], ...]] = CHECKS
    size_checks: ClassVar[tuple[Callable[[Node, Node], FusionDecision], ...]] = SIZE_CHECKS

    def __init__(self, graph: Graph, model: CostModel, recorder: Recorder) -> None:
        self.graph = graph
        self.model = model
        self.recorder = recorder
        self.heap: list[tuple[float, int, int, Node]] = []
        self.entry: dict[Node, int] = {}  # producer -> its live heap entry
        self.order: dict[Node, int] = {}  # XLA's unique ids: later instructions win ties
        self.verdicts: dict[Node, tuple[tuple[object, ...], Verdicts]] = {}
        self.sequence = itertools.count()

    def run(self) -> bool:
        changed = False
        for node in self.graph.post_order():
            self.update(node)
        while self.heap:
            _, _, sequence, producer = heapq.heappop(self.heap)
            if self.entry.get(producer) != sequence or not self.graph.contains(producer):
                continue
            del self.entry[producer]
            for node in self.fuse_into_users(producer):
                self.update(node)
            changed = True
        changed |= self.fuse_constants()
        self.log_refusals()
        return changed

    # --- priorities ---------------------------------------------------------------------

    def update(self, node: Node) -> None:
        """(Re)compute `node`'s priority and keep its queue entry in step."""
        self.order.setdefault(node, len(self.order))
        self.entry.pop(node, None)
        if not self.graph.contains(node) or node.op in _NOT_PRODUCERS or not node.users:
            return
        priority, verdicts = self.evaluate(node)
        self.verdicts[node] = (_edges_key(node), verdicts)
        if self.worth(priority):
            sequence = next(self.sequence)
            self.entry[node] = sequence
            heapq.heappush(self.heap, (-priority, -self.order[node], sequence, node))

    def is_bitcast_user(self, user: Node) -> bool:
        """A user the producer need not join (it stays for it): a bitcast."""
        return user.op is Op.BITCAST

    def evaluate(self, producer: Node) -> tuple[float, Verdicts]:
        """The producer's priority (seconds saved; -inf: cannot or should not fuse) and the
        decision for each user."""
        users = list(producer.users)
        targets = [u for u in users if not self.is_bitcast_user(u)]
        decisions = [(u, can_fuse(producer, u, self.checks)) for u in users]
        refused = [(u, d) for u, d in decisions if not d and u in targets]
        if not targets:
            return -math.inf, decisions
        if refused:
            blamed, why = refused[0]
            return -math.inf, [(u, d if not d else _blamed(producer, u, blamed, why))
                               for u, d in decisions]
        if is_bitcast_like(producer):
            return math.inf, [(u, FusionDecision.yes(
                f"fuse %{producer.name} into %{u.name}: it moves no data and is fused first"))
                for u in targets]
        priority, verdicts = self.cost_verdicts(producer, targets,
                                                stays=len(targets) < len(users))
        if not self.worth(priority):
            return priority, verdicts
        for user in targets:
            decision = can_fuse(producer, user, self.size_checks)
            if not decision:
                return -math.inf, [(u, decision if u is user else _blamed(producer, u, user,
                                                                          decision))
                                   for u in targets]
        return priority, verdicts

    def cost_verdicts(self, producer: Node, targets: list[Node],
                      stays: bool) -> tuple[float, Verdicts]:
        """EstimateRunTimesForPriorityFusion: the gain of fusing into every target."""
        own = self.model.time(producer)
        before = {u: self.model.time(u) for u in targets}
        after = {u: self.model.fused_time(producer, u) for u in targets}
        unfused = own + sum(before.values())
        fused = sum(after.values()) + (own if stays else 0.0)
        gain = self.difference(unfused, fused)
        figures = {"gain_us": _us(gain), "unfused_us": _us(unfused), "fused_us": _us(fused),
                   "producer_us": _us(own), "users": len(targets)}
        verdicts: Verdicts = []
        for user in targets:
            edge = dict(figures, consumer_us=_us(before[user]), fused_consumer_us=_us(after[user]))
            if self.worth(gain):
                verdicts.append((user, FusionDecision.yes(
                    f"fuse %{producer.name} into %{user.name}: fused into its {len(targets)} "
                    f"user(s) the cost model estimates {_text(fused)} instead of "
                    f"{_text(unfused)} (gain {_text(gain)})", rule=COST_MODEL_GAIN, **edge)))
            else:
                verdicts.append((user, refuse(
                    COST_MODEL_LOSS, producer, user, f"fused into its {len(targets)} user(s) "
                    f"the cost model estimates {_text(fused)} instead of {_text(unfused)} "
                    f"(loss {_text(-gain)})", **edge)))
        return (gain if self.worth(gain) else -math.inf), verdicts

    def worth(self, gain: float) -> bool:
        """Whether a producer with this gain is queued (and fused)."""
        return gain > 0

    def difference(self, unfused: float, fused: float) -> float:
        """The gain of `fused` over `unfused` (seconds)."""
        return unfused - fused

    # --- fusing -------------------------------------------------------------------------

    def fuse_into_users(self, producer: Node) -> list[Node]:
        """Fuse into every non-bitcast user; returns the instructions whose priority changed."""
        affected: dict[Node, None] = {}
        for user, decision in self.verdicts[producer][1]:
            if not decision:
                continue
            self.record(producer, user, decision)
            fusion = self.fuse(producer, user)
            affected[fusion] = None
            affected.update(dict.fromkeys(fusion.operands))
        if not producer.users:
            self.graph.remove(producer)
        else:
            affected[producer] = None
        return list(affected)

    def fuse(self, producer: Node, consumer: Node) -> Node:
        """`fuse`, keeping the model's profile of the grown fusion without walking it."""
        profile = self.model.fused_profile(producer, consumer)
        fusion = fuse(producer, consumer)
        self.model.remember(fusion, profile)
        return fusion

    def record(self, producer: Node, consumer: Node, decision: FusionDecision) -> None:
        if self.recorder.log is None:
            return
        self.recorder.pair(self.graph.name, producer, consumer, decision)

    def fuse_constants(self) -> bool:
        """Small constants go into each user that can take them and where the model sees a
        gain; larger constants stay external buffers."""
        changed = False
        for constant in [n for n in self.graph.post_order() if n.op is Op.CONSTANT]:
            for user in list(constant.users):
                decision = self.constant_decision(constant, user)
                self.record(constant, user, decision)
                if decision:
                    self.fuse(constant, user)
                    changed = True
            if not constant.users and constant is not self.graph.root:
                self.graph.remove(constant)
        return changed

    def constant_decision(self, constant: Node, user: Node) -> FusionDecision:
        if not is_effective_scalar(constant.shape):
            elements = constant.shape.num_elements if constant.shape.is_array else 0
            return refuse("constant-not-fused", constant, user, f"a constant of {elements} "
                          "elements stays an external buffer", elements=elements)
        decision = can_fuse(constant, user)
        if not decision:
            return decision
        before, after = self.model.time(user), self.model.fused_time(constant, user)
        gain = before - after
        figures = {"gain_us": _us(gain), "unfused_us": _us(before), "fused_us": _us(after)}
        if gain > 0:
            return FusionDecision.yes(f"fuse the constant %{constant.name} into %{user.name} "
                                      f"(last; gain {_text(gain)})", rule=COST_MODEL_GAIN,
                                      **figures)
        return refuse(COST_MODEL_LOSS, constant, user, f"the cost model estimates "
                      f"{_text(after)} fused instead of {_text(before)}", **figures)

    def log_refusals(self) -> None:
        """One record per edge that stays: the check, or the cost model, that refused it."""
        for producer in self.graph.post_order():
            if producer.op in _NOT_PRODUCERS or not producer.users:
                continue
            cached = self.verdicts.get(producer)
            if cached is not None and cached[0] == _edges_key(producer):
                verdicts = cached[1]
            else:
                verdicts = self.evaluate(producer)[1]
            for user, decision in verdicts:
                if producer.is_multi_output_fusion and user.op is Op.GET_TUPLE_ELEMENT:
                    continue  # reading an output of a multi-output kernel, not an edge
                if not decision:
                    self.record(producer, user, decision)


def _edges_key(producer: Node) -> tuple[object, ...]:
    """Changes whenever the producer, a user, or who the users are changes."""
    key: list[object] = [node_key(producer), producer is producer.parent.root]
    for user in producer.users:
        key += [user, node_key(user)]
    return tuple(key)


def _blamed(producer: Node, user: Node, blamed: Node, why: FusionDecision) -> FusionDecision:
    """The record of a legal edge whose producer another user refused."""
    return FusionDecision.no(why.rule, f"cannot fuse %{producer.name} into %{user.name}: a "
                             f"producer joins all its users or none, and %{blamed.name} "
                             f"refused ({why.message})", **why.figures)


def _us(seconds: float) -> float:
    return round(seconds * _US, 6)


def _text(seconds: float) -> str:
    return f"{seconds * _US:.3g} us"
