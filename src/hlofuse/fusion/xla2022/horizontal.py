"""Horizontal fusion: independent small kernels that feed one consumer, launched as one
(XLA's 2022 GpuHorizontalLoopFusion and GpuHorizontalInputFusion).

Loop fusion (entry computation only, as in XLA: "run on the entry computation is actually
enough"). For each consumer, uses before defs, the candidates are its operands (through
get-tuple-elements) that are element-wise instructions or kLoop fusions with one output type,
whose only users besides the computation root are this consumer, that are launch-bound
(at most 128*2048 output elements, at most 30 fused instructions), row-major, and that share
no computation parameter with another candidate. They are sorted by (output type, output
count, instruction count) and cut into spans of equal output type, output count and
instruction count, at most 32 members and 4000 bytes of kernel parameters (8 B per operand and
output). Each span of two or more becomes one kInput fusion: every member's body is cloned,
each output reshaped to 1-D, the outputs concatenated, and the root is a tuple of slices of
the concatenation; outside, a get-tuple-element and a bitcast replace each member.

Input fusion (all fusible computations). Tiled reductions whose only non-root user is one
consumer are sorted by input shape and size and greedily merged into multi-output kInput
fusions while their shapes are compatible and they fit the budget.

Candidates refused, span cuts, and loop-fusion candidates outside the entry computation are
recorded, so `explain` can show which independent kernels stayed apart and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from hlofuse.fusion.graphs.fusing import create_fusion, fuse_into_multi_output
from hlofuse.fusion.graphs.graph import Graph, Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph, ModuleGraphPass
from hlofuse.fusion.legality.properties import (
    fusion_outputs,
    is_elementwise,
    is_input_fusible_reduction,
    is_loop_fusion,
    minor_to_major,
    real_hero,
    shapes_compatible_for_multi_output,
)
from hlofuse.fusion.legality.rules import fits_in_budget
from hlofuse.ir.attrs import SliceDim
from hlofuse.ir.dtypes import DType
from hlofuse.ir.ops import FusionKind, Op
from hlofuse.ir.shapes import Shape, default_layout
from hlofuse.passes.decision_log import FusionDecision, Recorder

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

SHAPE_THRESHOLD = 128 * 2048
INSTRUCTION_COUNT_THRESHOLD = 30
MAX_FUSION_BATCH_SIZE = 32
MAX_CUDA_PARAM_BYTES = 4000
# XLA's PrimitiveType numbers, which order horizontal-fusion candidates.
_PRIMITIVE_TYPE_NUMBER = {
    DType.PRED: 1, DType.S8: 2, DType.S16: 3, DType.S32: 4, DType.S64: 5, DType.U8: 6,
    DType.U16: 7, DType.U32: 8, DType.U64: 9, DType.F16: 10, DType.F32: 11, DType.F64: 12,
    DType.BF16: 16,
}


def latest_non_gte_ancestor(node: Node) -> Node:
    while node.op is Op.GET_TUPLE_ELEMENT:
        node = node.operands[0]
    return node


def consumer_is_only_non_root_user(node: Node, consumer: Node) -> bool:
    """IsConsumerTheOnlyNonRootUser: through get-tuple-elements; guarantees no cycle."""
    for user in node.users:
        if user.op is Op.GET_TUPLE_ELEMENT:
            if not consumer_is_only_non_root_user(user, consumer):
                return False
        elif user is not consumer and user is not user.parent.root:
            return False
    return True


def instruction_count(node: Node) -> int:
    return len(node.fused.nodes) if node.is_fusion else 1


def output_count(node: Node) -> int:
    return len(node.fused_root.operands) if node.is_multi_output_fusion else 1


def output_type(node: Node) -> DType:
    return fusion_outputs(node)[0].dtype


def _type_order(node: Node) -> int:
    return _PRIMITIVE_TYPE_NUMBER.get(output_type(node), 99)


def horizontal_candidate(node: Node) -> FusionDecision:
    """IsFusibleCandidate (2022)."""
    if is_elementwise(node) and node.operands and not node.is_fusion:
        return FusionDecision.yes()
    if not is_loop_fusion(node):
        return FusionDecision.no("not-horizontal-candidate", f"%{node.name} is neither "
                                 "element-wise nor a kLoop fusion")
    if len({o.dtype for o in fusion_outputs(node)}) > 1:
        return FusionDecision.no("not-horizontal-candidate", f"%{node.name} has outputs of "
                                 "several element types")
    return FusionDecision.yes()


def launch_bound(node: Node) -> FusionDecision:
    """IsProfitableFusionCandidate: small enough that the launch, not the work, dominates."""
    elements = fusion_outputs(node)[0].shape.num_elements
    if elements > SHAPE_THRESHOLD:
        return FusionDecision.no("not-launch-bound", f"%{node.name} writes {elements} "
                                 f"elements, over {SHAPE_THRESHOLD}", elements=elements,
                                 limit=SHAPE_THRESHOLD)
    count = instruction_count(node)
    if node.is_fusion and count > INSTRUCTION_COUNT_THRESHOLD:
        return FusionDecision.no("not-launch-bound", f"%{node.name} fuses {count} "
                                 f"instructions, over {INSTRUCTION_COUNT_THRESHOLD}",
                                 instructions=count, limit=INSTRUCTION_COUNT_THRESHOLD)
    return FusionDecision.yes()


def row_major(node: Node) -> bool:
    nodes = list(node.fused.nodes) if node.is_fusion else [node]
    return all(minor_to_major(n.shape) == default_layout(n.shape.rank)
               for n in nodes if n.shape.is_array)


def shares_parameter(node: Node, candidates: set[Node]) -> bool:
    """AnyOpndIsParamSharedAmongFusions: the horizontal fusion could not alias its inputs."""
    return any(o.op is Op.PARAMETER and any(u is not node and u in candidates for u in o.users)
               for o in node.operands)


class _Candidates:
    """FusionCandidates of one consumer, cut into spans."""

    def __init__(self, consumer: Node, recorder: Recorder) -> None:
        self.consumer = consumer
        self.recorder = recorder
        self.members: list[Node] = []
        self.position = 0
        found: list[Node] = []
        for operand in consumer.operands:
            node = latest_non_gte_ancestor(operand)
            if node not in found and horizontal_candidate(node):
                found.append(node)
        found_set = set(found)
        for node in found:
            decision = self._check(node, found_set)
            if decision:
                self.members.append(node)
            elif node.op is not Op.PARAMETER:
                recorder.group(consumer.parent.name, [node], decision, consumer)
        self.members.sort(key=lambda n: (_type_order(n), output_count(n), instruction_count(n)))

    def _check(self, node: Node, found: set[Node]) -> FusionDecision:
        consumer = self.consumer
        if not consumer_is_only_non_root_user(node, consumer):
            return FusionDecision.no("consumer-not-only-user", f"%{node.name} has users other "
                                     f"than %{consumer.name} and the root; fusing could create "
                                     "a cycle")
        decision = launch_bound(node)
        if not decision:
            return decision
        if not row_major(node):
            return FusionDecision.no("non-row-major", f"%{node.name} has a non-row-major "
                                     "layout")
        if shares_parameter(node, found):
            return FusionDecision.no("shared-parameter", f"%{node.name} shares a parameter "
                                     "with another candidate")
        return FusionDecision.yes()

    def next_span(self) -> list[Node]:
        members = self.members
        if self.position >= len(members):
            return []
        left = self.position
        right = left + 1
        io_size = 0
        first = members[left]
        while right < len(members):
            current = members[right]
            stop = self._span_break(first, current, left, right, io_size)
            if stop is not None:
                self.recorder.group(self.consumer.parent.name, [first, current], stop,
                                    self.consumer)
                break
            io_size += len(current.operands) + output_count(current)
            if io_size * 8 >= MAX_CUDA_PARAM_BYTES:
                self.recorder.group(self.consumer.parent.name, [first, current],
                                    FusionDecision.no("span-limit", "the kernel's parameters "
                                                      f"would exceed {MAX_CUDA_PARAM_BYTES} B"),
                                    self.consumer)
                break
            right += 1
        self.position = right
        return members[left:right]

    @staticmethod
    def _span_break(first: Node, current: Node, left: int, right: int,
                    io_size: int) -> FusionDecision | None:
        names = f"%{first.name} and %{current.name}"
        if output_type(first) is not output_type(current):
            return FusionDecision.no("output-types-differ", f"cannot fuse {names} "
                                     "horizontally: different output types")
        if output_count(first) != output_count(current):
            return FusionDecision.no("output-counts-differ", f"cannot fuse {names} "
                                     "horizontally: different numbers of outputs")
        if instruction_count(first) != instruction_count(current):
            return FusionDecision.no("instruction-counts-differ", f"cannot fuse {names} "
                                     "horizontally: different instruction counts (divergence)")
        if right - left >= MAX_FUSION_BATCH_SIZE:
            return FusionDecision.no("span-limit", f"cannot fuse {names} horizontally: at "
                                     f"most {MAX_FUSION_BATCH_SIZE} kernels at a time")
        return None


@dataclass(frozen=True, slots=True)
class HorizontalLoopFusion(ModuleGraphPass):
    """Launches independent small loop kernels of the entry computation as one."""

    name: ClassVar[str] = "horizontal-loop-fusion"

    def run_on_graphs(self, graphs: ModuleGraph, log: DecisionSink | None = None) -> bool:
        recorder = Recorder(log, self.name)
        assert graphs.entry is not None
        changed = _fuse_horizontally(graphs.entry, recorder)
        for graph in graphs.fusible_graphs():
            if graph is not graphs.entry:
                _record_outside_entry(graph, recorder)
        return changed


def _fuse_horizontally(graph: Graph, recorder: Recorder) -> bool:
    changed = False
    for consumer in reversed(graph.post_order()):
        if not graph.contains(consumer):
            continue
        candidates = _Candidates(consumer, recorder)
        while span := candidates.next_span():
            if len(span) == 1:
                continue
            recorder.group(graph.name, span, FusionDecision.yes(), consumer)
            fusions = [n if n.is_fusion else create_fusion(n, FusionKind.LOOP) for n in span]
            horizontally_fuse(graph, fusions)
            changed = True
    return changed


def _record_outside_entry(graph: Graph, recorder: Recorder) -> None:
    silent = Recorder(None, recorder.pass_name)
    for consumer in reversed(graph.post_order()):
        candidates = _Candidates(consumer, silent)
        while span := candidates.next_span():
            if len(span) > 1:
                recorder.group(graph.name, span, FusionDecision.no(
                    "not-entry-computation", f"%{span[0].name} and {len(span) - 1} other "
                    f"independent kernels feeding %{consumer.name} stay apart: XLA fuses "
                    "horizontally only in the entry computation", kernels=len(span)),
                    consumer)


def horizontally_fuse(graph: Graph, members: list[Node]) -> Node:
    """CreateFusedComputation + Fuse: one kInput fusion computing every member."""
    module = graph.module
    fused = module.add_graph("horizontally_fused_computation", is_fusion=True)
    operands: list[Node] = []
    params: dict[Node, Node] = {}
    copies: dict[Node, Node] = {}
    for i, member in enumerate(members):
        for j, operand in enumerate(member.operands):
            if operand not in params:
                params[operand] = fused.add_parameter(operand.shape, name=f"param_{i}_{j}")
                operands.append(operand)
            copies[member.fused.params[j]] = params[operand]
        for node in member.fused.post_order():
            if node.op is not Op.PARAMETER:
                copies[node] = fused.clone_into(node, [copies[o] for o in node.operands])
    slices: list[list[Node]] = [[] for _ in members]
    for k in range(output_count(members[0])):
        parts = []
        for member in members:
            output = copies[fusion_outputs(member)[k]]
            flat = Shape.array(output.dtype, (output.shape.num_elements,))
            if output.shape.dims != flat.dims:
                output = fused.add(Op.RESHAPE, [output], flat, name=module.names.unique("reshape"))
            parts.append(output)
        total = sum(p.shape.num_elements for p in parts)
        concat = fused.add(Op.CONCATENATE, parts, Shape.array(parts[0].dtype, (total,)),
                           attrs={"dimensions": (0,)}, name=module.names.unique("concatenate"))
        start = 0
        for j, part in enumerate(parts):
            limit = start + part.shape.num_elements
            slices[j].append(fused.add(Op.SLICE, [concat], part.shape,
                                       attrs={"slice": (SliceDim(start, limit),)},
                                       name=module.names.unique("slice")))
            start = limit
    outputs = [s for member_slices in slices for s in member_slices]
    fused.root = fused.add(Op.TUPLE, outputs, Shape.tuple_of([o.shape for o in outputs]),
                           name=module.names.unique("tuple"))
    fusion = graph.add(Op.FUSION, operands, fused.root.shape, attrs={"kind": FusionKind.INPUT},
                       calls=[fused], name=module.names.unique("fusion"))
    index = 0
    for member in members:
        bitcasts = []
        for output in fusion_outputs(member):
            gte = graph.add(Op.GET_TUPLE_ELEMENT, [fusion], outputs[index].shape,
                            attrs={"index": index}, name=module.names.unique("get-tuple-element"))
            bitcasts.append(graph.add(Op.BITCAST, [gte], output.shape,
                                      name=module.names.unique("bitcast")))
            index += 1
        if len(bitcasts) == 1:
            graph.replace_instruction(member, bitcasts[0])
        else:
            result = graph.add(Op.TUPLE, bitcasts, member.shape,
                               name=module.names.unique("tuple"))
            graph.replace_instruction(member, result)
    return fusion


@dataclass(frozen=True, slots=True)
class HorizontalInputFusion(ModuleGraphPass):
    """Merges independent tiled reductions feeding one consumer into one kInput fusion."""

    name: ClassVar[str] = "horizontal-input-fusion"

    def run_on_graphs(self, graphs: ModuleGraph, log: DecisionSink | None = None) -> bool:
        recorder = Recorder(log, self.name)
        changed = False
        for graph in graphs.fusible_graphs():
            changed |= _fuse_reductions_horizontally(graph, recorder)
        return changed


def _input_shape_key(node: Node) -> tuple[int, tuple[int, ...]]:
    hero = real_hero(node)
    shape = hero.operands[0].shape if hero.operands else Shape.array(DType.PRED, ())
    return shape.rank, shape.dims


def _reduction_candidates(consumer: Node) -> list[Node]:
    found: list[Node] = []
    for operand in consumer.operands:
        node = latest_non_gte_ancestor(operand)
        if (node not in found and is_input_fusible_reduction(node)
                and consumer_is_only_non_root_user(node, consumer)):
            found.append(node)
    found.sort(key=lambda n: (_input_shape_key(n), instruction_count(n)))
    return found


def _fuse_reductions_horizontally(graph: Graph, recorder: Recorder) -> bool:
    changed = False
    for consumer in graph.post_order():
        if not graph.contains(consumer):
            continue
        candidates = _reduction_candidates(consumer)
        if len(candidates) <= 1:
            continue
        # Only wrapping a bare reduce or merging changes the module: a consumer whose
        # candidates are all fusions already and stay apart is no change, or the fixed point
        # around this pass would never settle.
        wrapped = [c if c.is_fusion else create_fusion(c, FusionKind.INPUT) for c in candidates]
        changed |= any(w is not c for w, c in zip(wrapped, candidates))
        candidates = wrapped
        anchor = candidates[0]
        for other in candidates[1:]:
            decision = fits_in_budget(anchor, other)
            if not shapes_compatible_for_multi_output(anchor, other):
                decision = FusionDecision.no(
                    "incompatible-shapes", f"cannot fuse reductions %{anchor.name} and "
                    f"%{other.name} horizontally: their loops run over different shapes")
            recorder.group(graph.name, [anchor, other], decision, consumer)
            if decision:
                fuse_into_multi_output(anchor, other)
                graph.remove(other)
                changed = True
            else:
                anchor = other
    return changed
