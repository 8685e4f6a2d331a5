"""Vertical (producer into consumer) fusion: XLA's GpuInstructionFusion over the generic
InstructionFusion, as the 2022 GPU pipeline runs it.

Algorithm. For each fusible computation, consumers are taken in reverse post order (root
first). A consumer's operands are tried latest-defined first; the first producer that
`rules.should_fuse` accepts is cloned into the consumer (which becomes, or already is, a
`fusion` of kind kInput when it is a tiled reduction, else kLoop), the producer is deleted if
it has no users left, and the fusion goes back on the queue so its new operands are tried
next. A producer with several users is only cloned into one of them (duplication) in the
second sweep, and only if it is cheap and `ComputeGloballyUnfusible` did not mark it: a
producer that reads more than it writes must be fusible into all its users on all paths.

`may_duplicate=True` runs both sweeps, first without and then with duplication, exactly the
`GpuInstructionFusion(false)`, `GpuInstructionFusion(true)` pair of XLA's pipeline;
`may_duplicate=False` runs the first only. `relax_concatenate` lets a concatenate with
several users fuse (the study's third variant).

Refuses: everything `rules.should_fuse` refuses (expensive producers that would be duplicated
or re-read, non-loop-fusible producers such as custom calls, dots, tuples and reductions,
the root, budget and code-duplication limits), and anything across a while, conditional or
call boundary. Fusions are never merged here (the fusion merger does that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from hlofuse.fusion.graphs.fusing import create_fusion, fuse_instruction
from hlofuse.fusion.graphs.graph import Graph, Node, Reachability
from hlofuse.fusion.graphs.module_graph import ModuleGraph, ModuleGraphPass
from hlofuse.fusion.legality.emission_counts import cached_evaluation, update_after_fusing
from hlofuse.fusion.legality.properties import (
    is_effective_scalar,
    is_fusible,
    is_input_fusible,
    true_rank,
)
from hlofuse.fusion.legality.rules import (
    FusionOptions,
    barrier,
    producer_is_fusible,
    refuse,
    should_fuse,
)
from hlofuse.ir.ops import FusionKind, Op
from hlofuse.ir.shapes import Shape
from hlofuse.passes.decision_log import Recorder

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

PASS_NAME = "instruction-fusion"


@dataclass(frozen=True, slots=True)
class InstructionFusion(ModuleGraphPass):
    """Fuses producers into their consumers under XLA's 2022 GPU rules."""

    name: ClassVar[str] = PASS_NAME
    may_duplicate: bool = True
    relax_concatenate: bool = False

    def run_on_graphs(self, graphs: ModuleGraph, log: DecisionSink | None = None) -> bool:
        recorder = Recorder(log, self.name)
        changed = False
        sweeps = (False, True) if self.may_duplicate else (False,)
        for may_duplicate in sweeps:
            options = FusionOptions(may_duplicate, self.relax_concatenate)
            for graph in graphs.fusible_graphs():
                changed |= fuse_computation(graph, options, recorder)
        return changed


def choose_kind(producer: Node, consumer: Node) -> FusionKind:
    """ChooseFusionKind (2022): kInput when the consumer is a tiled reduction."""
    return FusionKind.INPUT if is_input_fusible(consumer) else FusionKind.LOOP


def fuse(producer: Node, consumer: Node, relax_concatenate: bool = False) -> Node:
    """InstructionFusion::Fuse: the consumer becomes (or is) a fusion holding a producer clone."""
    kind = choose_kind(producer, consumer)
    evaluation = None
    if consumer.is_fusion:
        fusion = consumer
        if fusion.kind != kind:
            fusion.set_kind(kind)
        evaluation = cached_evaluation(fusion, relax_concatenate)
    else:
        fusion = create_fusion(consumer, kind)
    clone = fuse_instruction(fusion, producer)
    if evaluation is not None:
        update_after_fusing(evaluation, producer, clone)
    return fusion


class _ReversePostOrderQueue:
    """XLA's ReversePostOrderFusionQueue."""

    def __init__(self, graph: Graph) -> None:
        self.order: list[Node | None] = list(graph.post_order())
        self.index: dict[Node, int] = {n: i for i, n in enumerate(self.order) if n is not None}

    def dequeue(self) -> tuple[Node, list[int]] | None:
        while self.order and self.order[-1] is None:
            self.order.pop()
        if not self.order:
            return None
        node = self.order.pop()
        assert node is not None
        del self.index[node]
        numbers = [i for i, o in enumerate(node.operands) if o in self.index]
        # Latest-defined operand first: fusing B before A in C = f(A, B = g(A)) keeps A from
        # being cloned into the fusion twice.
        numbers.sort(key=lambda i: self.index[node.operands[i]], reverse=True)
        return node, numbers

    def on_fusing(self, fusion: Node) -> None:
        self.index[fusion] = len(self.order)
        self.order.append(fusion)

    def remove(self, node: Node) -> None:
        self.order[self.index.pop(node)] = None


def fuse_computation(graph: Graph, options: FusionOptions, recorder: Recorder) -> bool:
    do_not_duplicate = globally_unfusible(graph, options) if options.may_duplicate else set()
    queue = _ReversePostOrderQueue(graph)
    changed = False
    while (entry := queue.dequeue()) is not None:
        consumer, numbers = entry
        if not is_fusible(consumer) and not consumer.is_fusion:
            _record_unfusible_consumer(graph, consumer, numbers, recorder)
            continue
        for i in numbers:
            producer = consumer.operands[i]
            if producer.op is Op.PARAMETER:
                continue  # an input of the computation, not an edge between kernels
            decision = producer_is_fusible(producer, consumer)
            if decision:
                decision = should_fuse(consumer, i, options)
            if decision and producer in do_not_duplicate:
                # XLA checks this first; when the edge itself is fine, this is the reason.
                decision = refuse("globally-unfusible", producer, consumer,
                                  f"it reads more than it writes and cannot be fused into all "
                                  f"{len(producer.users)} users on all paths",
                                  users=len(producer.users))
            recorder.pair(graph.name, producer, consumer, decision)
            if not decision:
                continue
            fusion = fuse(producer, consumer, options.relax_concatenate)
            queue.on_fusing(fusion)
            changed = True
            if not producer.users:
                do_not_duplicate.discard(producer)
                queue.remove(producer)
                graph.remove(producer)
            if fusion is not consumer:
                do_not_duplicate.discard(consumer)
            break
    return changed


def _record_unfusible_consumer(graph: Graph, consumer: Node, numbers: list[int],
                               recorder: Recorder) -> None:
    rule, reason = barrier(consumer)
    for i in numbers:
        producer = consumer.operands[i]
        if producer.op is not Op.PARAMETER:
            recorder.pair(graph.name, producer, consumer, refuse(rule, producer, consumer,
                                                                 reason))


# --- ComputeGloballyUnfusible -------------------------------------------------------------


def _elements(shape: Shape) -> int:
    return sum(leaf.num_elements for leaf in shape.leaves() if leaf.is_array)


def effectively_at_most_unary(node: Node) -> bool:
    """At most one operand is as large as the output (broadcasts, iotas, scalars are not)."""
    output_rank = max((true_rank(leaf) for leaf in node.shape.leaves() if leaf.is_array),
                      default=0)
    big = 0
    for operand in node.operands:
        if operand.op in (Op.BROADCAST, Op.IOTA):
            continue
        if operand.op is Op.CONSTANT and is_effective_scalar(operand.shape):
            continue
        if true_rank(operand.shape) >= output_rank:
            big += 1
    return big <= 1


def globally_unfusible(graph: Graph, options: FusionOptions) -> set[Node]:
    """Producers that must not be duplicated because they cannot reach every consumer."""
    do_not: set[Node] = set()
    cache: dict[tuple[Node, Node], bool] = {}
    # Built only when a producer needs it: most programs have none that reads more than it
    # writes, and the map costs time and memory quadratic in the computation's size.
    reachability: Reachability | None = None
    for producer in reversed(graph.post_order()):
        if effectively_at_most_unary(producer):
            continue
        operand_elements = sum(_elements(o.shape) for o in dict.fromkeys(producer.operands))
        if operand_elements <= _elements(producer.shape):
            continue
        if reachability is None:
            reachability = graph.reachability()
        if is_fusible(producer) and all(
                _can_fuse_on_all_paths(producer, user, do_not, reachability, cache, options)
                for user in producer.users):
            continue
        do_not.add(producer)
    return do_not


def _can_fuse_on_all_paths(producer: Node, consumer: Node, do_not: set[Node],
                           reachability: Reachability, cache: dict[tuple[Node, Node], bool],
                           options: FusionOptions) -> bool:
    """CanFuseOnAllPaths, with an explicit stack (paths can be long)."""
    # A frame is [node, next operand number, whether that operand passed should_fuse].
    frames: list[list[object]] = [[consumer, 0, False]]
    while frames:
        frame = frames[-1]
        node, i, checked = frame
        assert isinstance(node, Node) and isinstance(i, int)
        key = (producer, node)
        if node is producer or key in cache:
            frames.pop()
            continue
        if not is_fusible(node):
            cache[key] = False
            frames.pop()
            continue
        if i >= len(node.operands):
            cache[key] = True
            frames.pop()
            continue
        operand = node.operands[i]
        if not reachability.is_present(operand) or not reachability.is_reachable(producer,
                                                                                 operand):
            frame[1], frame[2] = i + 1, False
            continue
        if not checked:
            if operand in do_not or not should_fuse(node, i, options):
                cache[key] = False
                frames.pop()
                continue
            frame[2] = True
        if operand is producer or (producer, operand) in cache:
            if operand is not producer and not cache[(producer, operand)]:
                cache[key] = False
                frames.pop()
                continue
            frame[1], frame[2] = i + 1, False
            continue
        frames.append([operand, 0, False])
    return consumer is producer or cache.get((producer, consumer), False)
