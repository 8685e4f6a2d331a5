"""Priority fusion as XLA's GPU compiler runs it today (`priority_fusion.cc`): the queue of
`priority.py`, XLA's GPU legality checks, and XLA's GPU performance model (`performance_model.py`)
over a named device description (`devices.py`).

The queue is the one `priority` uses (a producer joins all its non-bitcast users or none, the
largest estimated gain first, bitcasts first, incremental updates); what differs from our CPU
strategy:

- ties go to the larger XLA unique id (`priority_fusion.cc` keys its queue by `(priority,
  unique_id)`): the creation order `ids.py` rebuilds from the module before optimisation,
  then what hlofuse's passes created, then each new fusion; users are visited in that order;
- gains are whole quarter nanoseconds (XLA's `absl::Duration`s, `performance_model.py`), and a
  producer of gain zero is fused too (only negative priorities stay out of XLA's queue);

- `IsFusible` is XLA's list: element-wise ops, bitcasts that keep the bit width, copies, iotas,
  constants, reduce, broadcast, concatenate, dynamic-slice and -update-slice, gather, pad,
  reduce-window, reshape, reverse, scatter, slice, transpose and (non-custom) fusions; dots,
  custom calls, random-number generators, sorts, control flow and tuples are not.
- `CanFuseWithNativeEmitter`, in XLA's order: not across the computation's root; both
  fusible; no fusing into a bitcast; not a producer and a consumer that both hold a
  reduction over at least 16 elements per output (`both-contain-reduce`); not an epilogue
  that turns a reduction kernel into a loop kernel (`reduction-epilogue-becomes-loop`);
  `FusionFitsInBudget` (shared memory, unnested reductions, 96 operands and outputs); the
  emitted size (`ProducerConsumerMergedTooLarge`); in-place updates stay safe.
- Priorities are XLA's `EstimateRunTimesForPriorityFusion` with the GPU model: 1 us per
  launch, so on small arrays fusing nearly always wins and the checks decide.
- Constants of at most one element are fused, last, into every user that is fusible
  without asking the model; larger ones stay buffers.

Triton: a pair where the producer or the consumer is a generic Triton fusion (made by
`softmax_rewriter.py`) skips the native checks and is judged by `CanFuseTriton` (both
fusible, every instruction one Triton emits; the tiling analysis is not modelled); the grown
fusion stays a Triton fusion, priced as a tiled kernel (`TritonGpuCostModel`). Triton GEMM
fusions (`gemm_fusion.py`) are kCustom and never fused. A scatter takes its updates'
producers (`CanEmitInputFusedScatter`: not the buffer it updates in place, nor a producer
reading it) and becomes a kInput fusion, into whose output nothing fuses. Not modelled:
Triton multi-output fusion (`xla_gpu_unsupported_enable_triton_multi_output_fusion`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from hlofuse.fusion.beyond_xla.cost_model import CostModel
from hlofuse.fusion.beyond_xla.priority import (
    COST_MODEL_LOSS,
    Verdicts,
    _PriorityFuser,
    _us,
    is_bitcast_like,
)
from hlofuse.fusion.graphs.graph import Graph, Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph
from hlofuse.fusion.legality.properties import (
    current_xla_rules,
    has_side_effect,
    is_elementwise_op,
)
from hlofuse.fusion.legality.rules import (
    OK,
    barrier,
    fits_in_budget,
    in_place_safe,
    producer_is_not_multi_output,
    producer_not_root,
    refuse,
)
from hlofuse.fusion.xla_gpu.devices import DEFAULT_DEVICE, GpuDevice, device
from hlofuse.fusion.xla_gpu.ids import InstructionIds, variadic_reduce
from hlofuse.fusion.xla_gpu.in_place import producer_is_not_in_place_buffer
from hlofuse.fusion.xla_gpu.launch_dimensions import (
    fusion_roots,
    hero_reduction,
    kernel_concatenate,
)
from hlofuse.fusion.xla_gpu.performance_model import TICKS_PER_SECOND, duration_ticks
from hlofuse.fusion.xla_gpu.softmax_rewriter import (
    TritonGpuCostModel,
    can_fuse_triton,
    is_generic_triton,
    mark_triton,
)
from hlofuse.ir.hlo import Module
from hlofuse.ir.ops import FusionKind, Op
from hlofuse.passes.decision_log import COST_MODEL_GAIN, FusionDecision, Recorder

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

PASS_NAME = "gpu-priority-fusion"
BOTH_CONTAIN_REDUCE = "both-contain-reduce"
REDUCTION_EPILOGUE_LOOP = "reduction-epilogue-becomes-loop"
SIGNIFICANT_REDUCTION = 16  # elements reduced per output from which a reduce is "significant"

# Non-element-wise ops XLA's elemental emitter fuses (priority_fusion.cc, IsFusible).
_FUSIBLE_OPS = frozenset({
    Op.COPY, Op.IOTA, Op.CONSTANT, Op.REDUCE, Op.BROADCAST, Op.CONCATENATE, Op.DYNAMIC_SLICE,
    Op.DYNAMIC_UPDATE_SLICE, Op.GATHER, Op.PAD, Op.REDUCE_WINDOW, Op.RESHAPE, Op.REVERSE,
    Op.SCATTER, Op.SLICE, Op.TRANSPOSE,
})


# HloInstruction::IsFusible is false for these (and for side-effecting instructions).
_NOT_FUSIBLE_AT_ALL = frozenset({Op.PARAMETER, Op.WHILE, Op.CONDITIONAL, Op.CALL})


def gpu_is_fusible(node: Node) -> bool:
    """XLA's IsFusible for the GPU priority fusion."""
    if node.op in (Op.PARAMETER, Op.TUPLE, Op.GET_TUPLE_ELEMENT) or has_side_effect(node):
        return False
    if node.is_fusion:  # a custom fusion has its own emitter; a generic Triton one is fusible
        return node.kind != FusionKind.CUSTOM or is_generic_triton(node)
    if node.op is Op.BITCAST:
        return node.dtype.bits == node.operands[0].dtype.bits
    return node.op in _FUSIBLE_OPS or is_elementwise_op(node)


def producer_is_fusible(producer: Node, consumer: Node) -> FusionDecision:
    if gpu_is_fusible(producer):
        return OK
    rule, reason = barrier(producer)
    return refuse(rule, producer, consumer, reason)


def consumer_is_fusible(producer: Node, consumer: Node) -> FusionDecision:
    if gpu_is_fusible(consumer):
        return OK
    rule, reason = barrier(consumer)
    return refuse(rule, producer, consumer, reason)


def consumer_not_bitcast_like(producer: Node, consumer: Node) -> FusionDecision:
    """CanFuse (priority_fusion.cc) fuses nothing into a single bitcast as consumer. A reshape
    that only reinterprets its row-major buffer is such a bitcast in XLA: the layout-sensitive
    AlgebraicSimplifier after layout assignment replaces it by one (HandleReshape,
    ReshapeIsBitcast)."""
    if is_bitcast_like(consumer):
        return refuse("consumer-is-bitcast", producer, consumer, "bitcasts are not fused into")
    return OK


def _significant_reduce(node: Node) -> bool:
    inner = node.fused.nodes if node.is_fusion else (node,)
    for inst in inner:
        if inst.op is Op.REDUCE and inst.shape.is_array:
            reduced = inst.operands[0].shape.num_elements // max(1, inst.shape.num_elements)
            if reduced >= SIGNIFICANT_REDUCTION:
                return True
    return False


def not_both_reductions(producer: Node, consumer: Node) -> FusionDecision:
    """XLA avoids fusing a reduce into a reduce: its cost model cannot tile them."""
    if _significant_reduce(producer) and _significant_reduce(consumer):
        return refuse(BOTH_CONTAIN_REDUCE, producer, consumer, "both the producer and the "
                      f"consumer contain a reduction of at least {SIGNIFICANT_REDUCTION} "
                      "elements per output")
    return OK


def _hero_is_reduction(start: Node, outer: Node | None, producer: Node | None) -> bool:
    return hero_reduction(start, outer, producer) is not None


def _is_reduction_kernel(node: Node) -> bool:
    """The emitter kind of `node`'s kernel is kReduction (HloFusionAnalysis): an output's hero
    (FindNonTrivialHero, through element-wise ops and bitcasts) is a tiled reduction, so a
    reduction followed by element-wise epilogue ops is one too."""
    outer = node if node.is_fusion else None
    return any(_hero_is_reduction(o, outer, None) for o in fusion_roots(node))


def reduction_stays_reduction(producer: Node, consumer: Node) -> FusionDecision:
    """XLA refuses an epilogue that would turn a reduction kernel into a loop kernel
    (`CanFuse`: the producer's emitter kind is kReduction, the fused one's kLoop)."""
    if not _is_reduction_kernel(producer):
        return OK
    outer = consumer if consumer.is_fusion else None
    if any(_hero_is_reduction(o, outer, producer) for o in fusion_roots(consumer)):
        return OK
    return refuse(REDUCTION_EPILOGUE_LOOP, producer, consumer, "fusing into the output of a "
                  "reduction kernel would make it a loop kernel")


def fits_budget(producer: Node, consumer: Node) -> FusionDecision:
    decision = fits_in_budget(consumer, producer, True)
    if decision:
        return OK
    return refuse(decision.rule, producer, consumer, decision.message, **decision.figures)


# ProducerConsumerMergedTooLarge (gpu_hlo_cost_analysis.cc): the IR size. The XLA jaxlib
# 0.10.2 is built from no longer counts basic-block splits (kMaxBasicBlockSplitsPerFusion, the
# size doubled per split): its VLOG gives a producer holding a concatenate, emitted once into
# a consumer of size 3, "IR sizes: 6, 3 -> 9", and its plugin has no "Basic block split
# counts" message.
MAX_IR_SIZE = 10000  # kMaxIRSize


def ir_profile(node: Node) -> tuple[float, dict[int, float]]:
    """XLA's IR size of `node`'s kernel and how many times each fused parameter is emitted
    (GpuHloCostAnalysis::FusionCalculateUtilizations): an instruction is emitted once per
    distinct root of its element-wise uses, and an operand of a non-element-wise instruction
    becomes a root emitted as often as that instruction."""
    if not node.is_fusion:
        return 1.0, {}
    key = (node.fused.version,)
    cached = node.memo.get("xla_ir_profile")
    if cached is not None and cached[0] == key:
        return cached[1]  # type: ignore[return-value]
    root = node.fused_root
    root_size: dict[Node, float] = {root: 1.0}
    use_roots: dict[Node, set[Node]] = {root: {root}}
    size = 0.0
    emitted: dict[int, float] = {}
    for inst in reversed(node.fused.post_order()):
        times = sum(root_size.get(r, 0.0) for r in use_roots.get(inst, ()))
        size += times
        if inst.op is Op.PARAMETER:
            emitted[inst.parameter_number] = times
        passes_roots = (is_elementwise_op(inst)
                        or inst.op in (Op.TUPLE, Op.GET_TUPLE_ELEMENT))
        for operand in inst.operands:
            roots = use_roots.setdefault(operand, set())
            if passes_roots:
                roots |= use_roots.get(inst, set())
            else:
                roots.add(operand)
                root_size[operand] = root_size.get(operand, 0.0) + times
    result = (size, emitted)
    node.memo["xla_ir_profile"] = (key, result)
    return result


def merged_not_too_large(producer: Node, consumer: Node) -> FusionDecision:
    """ProducerConsumerMergedTooLarge: the producer's code is emitted as often as the consumer
    emits the parameter it becomes, plus the consumer's own."""
    producer_size, _ = ir_profile(producer)
    consumer_size, emitted = ir_profile(consumer)
    replication = 1.0
    if consumer.is_fusion:
        replication = emitted.get(consumer.operands.index(producer), 0.0)
    size = int(producer_size * replication + consumer_size)
    if size > MAX_IR_SIZE:
        return refuse("merged-too-large", producer, consumer, f"the fused kernel would emit "
                      f"about {size} instructions (the producer {replication:.0f} times), over "
                      f"{MAX_IR_SIZE}", size=size, emitted=replication, limit=MAX_IR_SIZE)
    return OK


NATIVE_CHECKS: tuple[Callable[[Node, Node], FusionDecision], ...] = (
    producer_is_fusible, consumer_is_fusible, producer_is_not_multi_output,
    consumer_not_bitcast_like, not_both_reductions, reduction_stays_reduction, fits_budget,
)
NATIVE_SIZE_CHECKS: tuple[Callable[[Node, Node], FusionDecision], ...] = (
    merged_not_too_large, producer_is_not_in_place_buffer, in_place_safe)


def _triton_pair(producer: Node, consumer: Node) -> bool:
    return is_generic_triton(producer) or is_generic_triton(consumer)


def triton_or_native(producer: Node, consumer: Node) -> FusionDecision:
    """CanFuse after the root check: a pair with a generic Triton fusion is Triton's to judge
    (CanFuseTriton); every other pair goes through the native emitters' checks."""
    if _triton_pair(producer, consumer):
        return can_fuse_triton(producer, consumer)
    for check in NATIVE_CHECKS:
        decision = check(producer, consumer)
        if not decision:
            return decision
    return OK


def native_size_checks(producer: Node, consumer: Node) -> FusionDecision:
    if _triton_pair(producer, consumer):
        return OK
    for check in NATIVE_SIZE_CHECKS:
        decision = check(producer, consumer)
        if not decision:
            return decision
    return OK


CHECKS: tuple[Callable[[Node, Node], FusionDecision], ...] = (producer_not_root,
                                                              triton_or_native)
SIZE_CHECKS: tuple[Callable[[Node, Node], FusionDecision], ...] = (native_size_checks,)


# The stages of XLA's pipeline after the simplifier that create instructions (ids.py):
# ReshapeDecomposer's bitcasts, LayoutNormalization's rewrites, the layout-sensitive
# simplifier's bitcasts, ReductionLayoutNormalizer's variadic reduces.
_LATE_STAGES = 4


def _late_stage(node: Node, ids: InstructionIds | None) -> int:
    """The stage after the simplifier at which XLA creates `node` (1 to `_LATE_STAGES`), 0
    for one the translation or the simplifier made."""
    if variadic_reduce(node.op, len(node.operands)):
        return 4
    before = ids.before_layout if ids is not None else None
    if is_bitcast_like(node):
        return 1 if before is None or node.name in before else 3
    if before is not None and node.name not in before:
        return 2
    return 0


class _GpuPriorityFuser(_PriorityFuser):
    checks: ClassVar[tuple[Callable[[Node, Node], FusionDecision], ...]] = CHECKS
    size_checks: ClassVar[tuple[Callable[[Node, Node], FusionDecision], ...]] = SIZE_CHECKS

    def __init__(self, graph: Graph, model: CostModel, recorder: Recorder,
                 ids: InstructionIds | None = None) -> None:
        """Ties go to the larger unique id (`ids.py`): the recorded creation order, then
        the instructions hlofuse's passes made, in post order, then each new fusion."""
        super().__init__(graph, model, recorder)
        ranks = ids.ranks if ids is not None else {}
        recreated = ids.recreated if ids is not None else {}
        nodes = graph.post_order()
        # A reshape that only reinterprets its buffer is a new bitcast in XLA (layout
        # normalisation replaces it), created after every instruction of the translation and
        # of the simplifier, and after the broadcasts the simplifier re-creates; then what
        # layout normalisation creates, then the bitcasts the simplifier makes after it; a
        # variadic reduce is re-created later still (ids.py).
        stages = [_late_stage(n, ids) for n in nodes]
        known = [n for n, stage in zip(nodes, stages, strict=True)
                 if n.name in ranks and not stage]
        for node in known:
            self.order[node] = ranks[node.name]
        self.next_id = itertools.count(max((ranks[n.name] for n in known), default=-1) + 1)
        for node, stage in zip(nodes, stages, strict=True):
            if node not in self.order and not stage and node.name not in recreated:
                self.order[node] = next(self.next_id)
        for node in sorted((n for n in nodes if n not in self.order and n.name in recreated),
                           key=lambda n: recreated[n.name]):
            self.order[node] = next(self.next_id)
        for stage in range(1, _LATE_STAGES + 1):
            for node, at in zip(nodes, stages, strict=True):
                if at == stage and node not in self.order:
                    self.order[node] = next(self.next_id)
        # XLA lists an instruction's users in the order they were added: its users' creation
        # order (a fusion made later goes last); a producer is fused into them in that order.
        for node in nodes:
            if len(node.users) > 1:
                node.users = dict.fromkeys(sorted(node.users, key=self.order.__getitem__))
        # XLA's GpuPerformanceModelCache (gpu_performance_model_base.cc), in ticks with the
        # launch included: each instruction's time and each (producer, consumer) pair's fused
        # time, kept until XLA invalidates them (`_invalidate`).
        self.times: dict[Node, int] = {}
        self.pair_times: dict[Node, dict[Node, int]] = {}
        # The priority (ticks) of every queued producer (XLA's reverse_map_ keys).
        self.queued: dict[Node, float] = {}
        # This round's operands_to_new_consumers_ and operands_to_removed_consumers_runtimes_.
        self.new_consumers: dict[Node, list[Node]] = {}
        self.removed: dict[Node, int] = {}
        self.updating = False
        self.last_ticks: dict[Node, float] = {}

    def is_bitcast_user(self, user: Node) -> bool:
        """CanFuseWithAllNonBitcastUsers (priority_fusion.cc) skips bitcast users, reshapes
        that are bitcasts in XLA (`consumer_not_bitcast_like`) among them."""
        return is_bitcast_like(user)

    def worth(self, gain: float) -> bool:
        """XLA queues every producer whose priority is not negative: one whose fusion saves
        nothing is fused too (`ComputeAndSetPriorities` skips `priority < ZeroDuration()`)."""
        return gain >= 0

    def difference(self, unfused: float, fused: float) -> float:
        """XLA's times are `absl::Duration`s, whole quarter nanoseconds (`performance_model.py`
        prices each kernel in them): the gain is too, so equal sums tie exactly."""
        return duration_ticks(unfused - fused) / TICKS_PER_SECOND

    def update(self, node: Node) -> None:
        if node not in self.order:  # a fusion created just now: the next id
            self.order[node] = next(self.next_id)
        self.last_ticks[node] = math.inf  # a bitcast's priority; the cost model sets others
        self.updating = True
        try:
            super().update(node)
        finally:
            self.updating = False
        if node in self.entry:
            self.queued[node] = self.last_ticks[node]
        else:
            self.queued.pop(node, None)

    # --- XLA's cached run times (priority_fusion.cc, gpu_performance_model_base.cc) -----

    def _time(self, node: Node) -> int:
        """GpuPerformanceModelCache::Get(instruction), filled when first asked."""
        found = self.times.get(node)
        if found is None:
            found = self.times[node] = duration_ticks(self.model.time(node))
        return found

    def _fused_time(self, producer: Node, consumer: Node) -> int:
        """GpuPerformanceModelCache::Get(producer, consumer), filled when first asked."""
        pairs = self.pair_times.setdefault(producer, {})
        found = pairs.get(consumer)
        if found is None:
            found = pairs[consumer] = duration_ticks(self.model.fused_time(producer, consumer))
        return found

    def _invalidate(self, node: Node) -> None:
        """GpuPerformanceModelCache::Invalidate: the instruction's time, its pairs as a
        producer, and its pairs as the consumer of its operands as they are now (none for a
        consumer a new fusion replaced: it is detached)."""
        self.times.pop(node, None)
        self.pair_times.pop(node, None)
        for operand in node.operands:
            if operand.op is Op.GET_TUPLE_ELEMENT:
                operand = operand.operands[0]
            pairs = self.pair_times.get(operand)
            if pairs is not None:
                pairs.pop(node, None)

    def cost_verdicts(self, producer: Node, targets: list[Node],
                      stays: bool) -> tuple[float, Verdicts]:
        """EstimateRunTimes over the cached times. A queued producer whose users changed
        is updated incrementally (CalculateProducerPriority): its queued priority, plus the
        gain over its new consumers and its own time now, minus what
        `ComputeRuntimesOfRemovedConsumers` cached for the consumers it lost and its own
        time then. Cached times of the consumers it kept stay as they were, even where the
        producer itself has grown since."""
        incremental = self.updating and producer in self.removed
        consumers = self.new_consumers[producer] if incremental else targets
        own = self._time(producer)
        before = {u: self._time(u) for u in consumers}
        after = {u: self._fused_time(producer, u) for u in consumers}
        if incremental:
            ticks = (self.queued[producer] + own + sum(before[u] - after[u] for u in consumers)
                     - self.removed[producer])
        else:
            ticks = (own * (not stays) + sum(before.values()) - sum(after.values()))
        gain = ticks / TICKS_PER_SECOND
        self.last_ticks[producer] = ticks
        unfused = (own + sum(before.values())) / TICKS_PER_SECOND
        fused = unfused - gain
        figures = {"gain_us": _us(gain), "unfused_us": _us(unfused), "fused_us": _us(fused),
                   "producer_us": _us(own / TICKS_PER_SECOND), "users": len(targets)}
        verdicts: Verdicts = []
        for user in targets:
            edge = dict(figures)
            if user in before:
                edge.update(consumer_us=_us(before[user] / TICKS_PER_SECOND),
                            fused_consumer_us=_us(after[user] / TICKS_PER_SECOND))
            if self.worth(gain):
                verdicts.append((user, FusionDecision.yes(
                    f"fuse %{producer.name} into %{user.name}: fused into its {len(targets)} "
                    f"user(s) the cost model estimates a gain of {gain * 1e6:.3g} us",
                    rule=COST_MODEL_GAIN, **edge)))
            else:
                verdicts.append((user, refuse(
                    COST_MODEL_LOSS, producer, user, f"fused into its {len(targets)} user(s) "
                    f"the cost model estimates a loss of {-gain * 1e6:.3g} us", **edge)))
        return (gain if self.worth(gain) else -math.inf), verdicts

    def fuse_into_users(self, producer: Node) -> list[Node]:
        """One round of XLA's RunImpl loop: the dequeued producer leaves the queue, is fused
        into its users (a replaced consumer leaves the queue: RemoveInstruction), the new
        fusions' fusible operands are noted with their new consumers (OnFusingInstruction),
        the cached times of the consumers they lose are summed before the caches of the
        producer (if it is gone) and of the consumers are invalidated."""
        self.queued.pop(producer, None)
        chosen = [(u, d) for u, d in self.verdicts[producer][1] if d]
        consumers = [u for u, _ in chosen]
        for node in (producer, *consumers):  # cached at the queue's start in XLA
            self._time(node)
        new_consumers: dict[Node, list[Node]] = {}
        affected: dict[Node, None] = {}
        for user, decision in chosen:
            self.record(producer, user, decision)
            fusion = self.fuse(producer, user)
            if fusion is not user:
                self.queued.pop(user, None)
                self.entry.pop(user, None)
            for operand in fusion.operands:
                if (operand is producer or operand.op in (Op.CONSTANT, Op.GET_TUPLE_ELEMENT)
                        or operand.op in _NOT_FUSIBLE_AT_ALL or has_side_effect(operand)):
                    continue
                new_consumers.setdefault(operand, []).append(fusion)
            affected[fusion] = None
            affected.update(dict.fromkeys(fusion.operands))
        self.new_consumers = new_consumers
        self.removed = {}
        for operand in new_consumers:
            cached = self.pair_times.get(operand)
            if operand not in self.queued or cached is None:
                continue
            removed = self._time(operand)
            for consumer in (*consumers, producer):
                if consumer in cached:
                    removed += self._time(consumer) - cached[consumer]
            self.removed[operand] = removed
        if not producer.users:
            self._invalidate(producer)
            self.graph.remove(producer)
        else:
            affected[producer] = None
        for consumer in consumers:
            self._invalidate(consumer)
        return list(affected)

    def constant_decision(self, constant: Node, user: Node) -> FusionDecision:
        """XLA fuses every constant of at most one element into every fusible user."""
        elements = constant.shape.num_elements if constant.shape.is_array else 2
        if elements > 1:
            return refuse("constant-not-fused", constant, user, f"a constant of {elements} "
                          "elements stays a buffer", elements=elements)
        if not gpu_is_fusible(user):
            rule, reason = barrier(user)
            return refuse(rule, constant, user, reason)
        return FusionDecision.yes(f"fuse the constant %{constant.name} into %{user.name} "
                                  "(small constants are fused last, into every user)")

    def fuse(self, producer: Node, consumer: Node) -> Node:
        """A fusion grown from a generic Triton fusion stays one (priority_fusion.cc). A
        fusion made from a scatter is an input fusion (PriorityFusion::ChooseKind: the scatter
        emitter's kind is kInput), so nothing fuses into its output later
        (CanEmitInputFusedScatter, IsInputFusibleScatter)."""
        triton = _triton_pair(producer, consumer)
        fusion = super().fuse(producer, consumer)
        if triton:
            mark_triton(fusion)
        elif fusion.fused_root.op is Op.SCATTER and fusion.kind != FusionKind.INPUT:
            fusion.set_kind(FusionKind.INPUT)
        else:
            _kind_of_concatenate_emitter(fusion)
        return fusion


def _kind_of_concatenate_emitter(fusion: Node) -> None:
    """PriorityFusion::ChooseKind gives the concatenate emitter's fusions kInput (from
    HloFusionAnalysis::GetEmitterFusionKind), and kLoop again once a fusion into it leaves the
    loop emitter to run it. The kind does not steer priority fusion, but multi-output fusion
    takes only loop fusions as roots and producers (IsFusibleAsMultiOutputFusionRoot's
    IsLoopFusion, IsLoopFusibleAsProducer): a concatenate kernel keeps its siblings apart."""
    concatenates = kernel_concatenate(fusion) is not None
    if concatenates and fusion.kind == FusionKind.LOOP:
        fusion.set_kind(FusionKind.INPUT)
        fusion.memo["concatenate_emitter"] = (True, None)
    elif not concatenates and fusion.memo.pop("concatenate_emitter", None) is not None:
        fusion.set_kind(FusionKind.LOOP)


@dataclass(frozen=True, slots=True)
class GpuPriorityFusion:
    """Fuses producers into all their users, the largest gain XLA's GPU model estimates for
    `device` first."""

    name: ClassVar[str] = PASS_NAME
    device: str = DEFAULT_DEVICE
    # XLA's unique ids of the module before optimisation (`ids.py`), for the ties.
    ids: InstructionIds | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        device(self.device)  # an unknown name fails here, naming the known ones

    @property
    def description(self) -> GpuDevice:
        return device(self.device)

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        with ModuleGraph.from_module(module) as graphs, current_xla_rules():
            recorder = Recorder(log, self.name)
            model = TritonGpuCostModel(self.description)  # Triton fusions priced as tiled
            changed = False
            # A producer is fused into its users in the order of its user list, which XLA
            # permutes as it removes users (graph.py, `_drop_user`): that order decides which
            # fusion is made first, and so the ids that break later ties.
            graphs.xla_user_order = True
            for graph in graphs.fusible_graphs():
                changed |= _GpuPriorityFuser(graph, model, recorder, self.ids).run()
            return (graphs.to_module(), True) if changed else (module, False)
