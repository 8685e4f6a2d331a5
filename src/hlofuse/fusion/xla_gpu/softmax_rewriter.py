"""softmax-rewriter-triton: XLA's SoftmaxRewriterTriton for `xla-gpu`: each normalisation
"diamond" (a row reduction broadcast back onto the rows it reduced) becomes a kCustom Triton
fusion before priority fusion, which then grows such fusions (`can_fuse_triton`).

What XLA does (`softmax_rewriter_triton.cc`; gpu_compiler.cc runs it after layout
normalisation on Ampere and newer GPUs, all of `devices.py`'s, before GemmFusion):

- `MatchesTritonCompatibleClosedReductionDiamondImpl`, over every instruction in post order:
  the root is a binary element-wise op Triton emits; from its second operand a chain of
  trivially fusible ops leads to a broadcast (`TrivialEdge`), from the broadcast's operand to a
  reduce of the last dimension only (`ShouldFuseReduction`, with a constant identity); the
  broadcast and the reduce have one user each; the broadcast does not produce the last
  dimension; from the reduce's operand trivially fusible ops are walked up to the producer,
  which must lead trivially to the root's first operand (`IsTriviallyConnectedProducerOf`).
  Trivially fusible (`IsTriviallyFusible`): at most one user, and a bitcast, a unary
  element-wise op Triton emits, or a binary one with both operands the same or exactly one a
  broadcast of a scalar constant or of a parameter (the walk follows the other operand).
- `MakeFusionForDiamond`: everything from the root down to the producer (a parameter of
  the fusion) becomes a kCustom fusion of backend kind `__triton`, in place of the root;
  diamonds are fused in reverse order of discovery.
- Priority fusion (`priority_fusion.cc`, `CanFuse` then `CanFuseTriton`): when the producer
  or the consumer is such a fusion, only the root check and Triton's rules apply: both
  fusible, and every instruction of both one Triton emits (`IsTritonSupportedInstruction`,
  support.cc); the result stays a `__triton` fusion.

Not modelled (documented in the catalogue): `SymbolicTileAnalysis` (whether the fused
computation can be tiled) and the Triton cost model (`GpuPerformanceModelWithIndexing
Analysis`: the block-level tiling search). The rewriter's profitability test
(`only_fuse_if_profitable`: the tiled Triton kernel against priority fusion of the diamond
alone) needs that model; here every diamond is fused: as one kernel it launches once and
reads its input once, where XLA's native emitters need at least two kernels for it (a
reduction is never fused into its broadcast consumer: `reduction-epilogue-becomes-loop`)
that read the input twice, which `performance_model.py`'s roofline always prices higher. Priority
fusion prices Triton fusions with `performance_model.py` like any kernel.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from hlofuse.fusion.beyond_xla.cost_model import AT_OUTPUT, KernelProfile
from hlofuse.fusion.graphs.fusing import absorb_operands, create_fusion
from hlofuse.fusion.graphs.graph import Graph, Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph, ModuleGraphPass
from hlofuse.fusion.legality.rules import OK, refuse
from hlofuse.fusion.xla_gpu.devices import DEFAULT_DEVICE, device
from hlofuse.fusion.xla_gpu.performance_model import GpuCostModel, flops_per_element
from hlofuse.ir.attrs import RawAttr
from hlofuse.ir.dtypes import DType
from hlofuse.ir.ops import FusionKind, Op
from hlofuse.ir.shapes import default_layout
from hlofuse.passes.decision_log import DecisionSink, FusionDecision, Recorder

PASS_NAME = "softmax-rewriter-triton"
TRITON_KIND = "__triton"  # kTritonFusionKind
TRITON_BACKEND_CONFIG = '{"fusion_backend_config":{"kind":"__triton"}}'

# Rule ids (passes/rule_catalogue.py).
TRITON_UNSUPPORTED = "triton-unsupported"
TRITON_NOT_FUSIBLE = "triton-not-fusible"

# support.cc (IsTritonSupportedDataType, the element-wise op sets by element type).
_DATA_TYPES = frozenset({DType.PRED, DType.S8, DType.S16, DType.S32, DType.S64, DType.F16,
                         DType.BF16, DType.F32, DType.F64})
_FLOAT_UNARY = frozenset({Op.COSINE, Op.EXPONENTIAL, Op.EXPONENTIAL_MINUS_ONE, Op.FLOOR, Op.CEIL,
                          Op.LOG, Op.LOG_PLUS_ONE, Op.RSQRT, Op.SINE, Op.SQRT, Op.CBRT, Op.TAN,
                          Op.TANH, Op.ERF})
_INTEGERS = frozenset({DType.S8, DType.S16, DType.S32, DType.S64})
_WIDE_FLOATS = frozenset({DType.F32, DType.F64})
_STRUCTURAL = frozenset({Op.TRANSPOSE, Op.SLICE, Op.PARAMETER, Op.BROADCAST, Op.BITCAST,
                         Op.RESHAPE, Op.CONSTANT, Op.IOTA})


def _is_elementwise(node: Node) -> bool:
    return node.op.definition.kind.name == "ELEMENTWISE"


def _elementwise_supported(op: Op, dtype: DType) -> bool:
    """IsTritonSupportedElementwise, by the type of the last operand."""
    if op in (Op.SELECT, Op.CLAMP):
        return True
    if dtype is DType.PRED:
        return op in (Op.NOT, Op.AND, Op.OR, Op.XOR, Op.COMPARE, Op.ADD, Op.MULTIPLY,
                      Op.MAXIMUM, Op.MINIMUM)
    if op in (Op.ABS, Op.CONVERT, Op.NEGATE, Op.COMPARE, Op.ADD, Op.SUBTRACT, Op.MAXIMUM,
              Op.MINIMUM, Op.MULTIPLY):
        return True
    if dtype in _INTEGERS and op in (Op.NOT, Op.DIVIDE, Op.AND, Op.OR, Op.XOR):
        return True
    if dtype in _WIDE_FLOATS and (op in _FLOAT_UNARY or op in (
            Op.ATAN2, Op.DIVIDE, Op.REMAINDER, Op.POWER)):
        return True
    return dtype in (DType.BF16, DType.F16) and op in (Op.FLOOR, Op.CEIL)


def instruction_unsupported(node: Node) -> str | None:
    """Why Triton does not emit `node` (IsTritonSupportedInstruction, support.cc), or None."""
    if not node.shape.is_array or node.dtype not in _DATA_TYPES:
        return "unsupported output data type"
    if any(not o.shape.is_array or o.dtype not in _DATA_TYPES for o in node.operands):
        return "unsupported input data type"
    if _is_elementwise(node):
        if not _elementwise_supported(node.op, node.operands[-1].dtype):
            return f"unsupported element-wise operation {node.op.text}"
        return None
    if node.op is Op.REDUCE:
        return reduce_unsupported(node)
    return None if node.op in _STRUCTURAL else f"unsupported opcode {node.op.text}"


def reduce_unsupported(reduce: Node) -> str | None:
    """legacy_triton::CanTritonHandleReduce."""
    for inst in reduce.calls[0].nodes:
        if inst.op is not Op.PARAMETER and instruction_unsupported(inst) is not None:
            return "unsupported reduction computation"
    if len(reduce.ints("dimensions")) == 1 and len(reduce.operands) == 2:
        return None
    return "not a reduction of one dimension of a single operand"


def unsupported(node: Node) -> str | None:
    """IsTritonSupported of priority fusion: every instruction of a fusion, or the node."""
    if is_generic_triton(node):
        return None
    if not node.shape.is_array:
        return "not an array"
    if not node.is_fusion:
        return instruction_unsupported(node)
    for inst in node.fused.nodes:
        if inst.op in (Op.PARAMETER, Op.TUPLE):
            continue
        reason = instruction_unsupported(inst)
        if reason is not None:
            return f"%{inst.name}: {reason}"
    return None


def is_generic_triton(node: Node) -> bool:
    """IsGenericTritonFusion: a kCustom fusion of backend kind `__triton`."""
    return node.is_fusion and node.kind == FusionKind.CUSTOM and any(
        key == "backend_config" and f'"{TRITON_KIND}"' in raw.text for key, raw in node.extra)


def mark_triton(fusion: Node) -> None:
    """Make `fusion` a generic Triton fusion (after priority fusion grew one)."""
    if fusion.kind != FusionKind.CUSTOM:
        fusion.set_kind(FusionKind.CUSTOM)
    fusion.extra = tuple((k, v) for k, v in fusion.extra if k != "backend_config") + (
        ("backend_config", RawAttr(TRITON_BACKEND_CONFIG)),)


def can_fuse_triton(producer: Node, consumer: Node) -> FusionDecision:
    """CanFuseTriton (tiling not modelled): both fusible, every instruction one Triton emits."""
    from hlofuse.fusion.xla_gpu.priority import gpu_is_fusible

    for node, role in ((producer, "producer"), (consumer, "consumer")):
        if not gpu_is_fusible(node):
            return refuse(TRITON_NOT_FUSIBLE, producer, consumer, f"the {role} %{node.name} "
                          "is not fusible into a Triton fusion")
    for node in (producer, consumer):
        reason = unsupported(node)
        if reason is not None:
            return refuse(TRITON_UNSUPPORTED, producer, consumer, f"Triton does not emit "
                          f"%{node.name} ({reason})")
    return OK


# --- pricing Triton fusions ------------------------------------------------------------------


def tiled_profile(kernel: tuple[Node, ...], output: Node) -> KernelProfile:
    """A Triton kernel computing `kernel`'s instructions (a fusion's body or the node), as a
    tiled kernel runs them: every input read once, every instruction computed once per
    element of its result, the output written once."""
    members = set(kernel)
    instructions: list[Node] = []
    for node in kernel:
        instructions += [n for n in node.fused.nodes if n.op not in (Op.PARAMETER, Op.TUPLE)] \
            if node.is_fusion else [node]
    inputs = {o: None for node in kernel for o in node.operands if o not in members}
    reads = {o: {AT_OUTPUT: float(sum(leaf.num_elements for leaf in o.shape.leaves()))}
             for o in inputs}
    operations = sum(flops_per_element(n) * n.shape.num_elements for n in instructions
                     if n.shape.is_array)
    return KernelProfile(reads, float(operations), float(output.shape.byte_size),
                         output.shape.num_elements if output.shape.is_array else 1)


class TritonGpuCostModel(GpuCostModel):
    """`GpuCostModel`, with generic Triton fusions priced as tiled kernels (`tiled_profile`)
    instead of XLA's tiling search (GpuPerformanceModelWithIndexingAnalysis), which is not
    modelled."""

    def profile(self, node: Node) -> KernelProfile:
        if is_generic_triton(node):
            return tiled_profile((node,), node)
        return super().profile(node)

    def fused_profile(self, producer: Node, consumer: Node) -> KernelProfile:
        if is_generic_triton(producer) or is_generic_triton(consumer):
            return tiled_profile((producer, consumer), consumer)
        return super().fused_profile(producer, consumer)

    def time(self, node: Node) -> float:
        if is_generic_triton(node):
            return self.price(self.profile(node)).total
        return super().time(node)

    def fused_time(self, producer: Node, consumer: Node) -> float:
        if is_generic_triton(producer) or is_generic_triton(consumer):
            return self.price(self.fused_profile(producer, consumer)).total
        return super().fused_time(producer, consumer)


# --- the diamond matcher ---------------------------------------------------------------------


def _default_layout(node: Node) -> bool:
    layout = node.shape.layout
    return layout is None or tuple(layout) == default_layout(node.shape.rank)


def _is_bitcast(node: Node) -> bool:
    # After layout assignment XLA's reshapes between row-major shapes are bitcasts.
    from hlofuse.fusion.kernels import is_free

    return node.op is Op.BITCAST or (node.op is Op.RESHAPE and is_free(node))


def _is_splat(node: Node) -> bool:
    """IsBroadcastOfScalarConstant or IsBroadcastOfParameter."""
    if node.op is not Op.BROADCAST:
        return False
    source = node.operands[0]
    return (source.op is Op.CONSTANT and not source.shape.dims) or source.op is Op.PARAMETER


def trivially_fusible(node: Node, allowed_users: int = 1) -> bool:
    """IsTriviallyFusible."""
    if len(node.users) > allowed_users or not _default_layout(node):
        return False
    if _is_bitcast(node):
        return True
    if _is_elementwise(node) and len(node.operands) == 1:
        return instruction_unsupported(node) is None
    if _is_elementwise(node) and len(node.operands) == 2:
        a, b = node.operands
        if a is b or _is_splat(a) != _is_splat(b):
            return instruction_unsupported(node) is None
    return False


def _follow(node: Node) -> Node:
    """ChooseOperandForFusionProcessing: the first operand that is not a splat."""
    if len(node.operands) > 1 and _is_splat(node.operands[0]):
        return node.operands[1]
    return node.operands[0]


def _trivial_edge(consumer: Node, op: Op) -> Node | None:
    """TrivialEdge: the first `op` reached through trivially fusible instructions."""
    while consumer.op is not op:
        if not trivially_fusible(consumer):
            return None
        consumer = _follow(consumer)
    return consumer


def _trivially_connected(producer: Node, consumer: Node) -> bool:
    """IsTriviallyConnectedProducerOf."""
    if producer is consumer:
        return True
    found = _trivial_edge(consumer, producer.op)
    while found is not None:
        if found is producer:
            return True
        if not trivially_fusible(found):
            return False
        found = _trivial_edge(found.operands[0], producer.op)
    return False


@dataclass(frozen=True, slots=True)
class Diamond:
    root: Node
    producer: Node


def match_diamond(root: Node) -> Diamond | str:
    """The diamond rooted at `root`, or why there is none."""
    if not (_is_elementwise(root) and len(root.operands) == 2):
        return "the root is not element-wise binary"
    if instruction_unsupported(root) is not None:
        return "Triton does not emit the root"
    broadcast = _trivial_edge(root.operands[1], Op.BROADCAST)
    if broadcast is None:
        return "no trivial connection from the root to a broadcast"
    reduce = _trivial_edge(broadcast.operands[0], Op.REDUCE)
    if reduce is None:
        return "no trivial connection from the broadcast to a reduction"
    if not (_default_layout(broadcast) and _default_layout(reduce)):
        return "the broadcast or the reduce has a non-default layout"
    reason = reduce_unsupported(reduce)
    if reason is not None:
        return reason
    source = reduce.operands[0]
    if reduce.ints("dimensions") != (source.shape.rank - 1,):
        return "the reduction does not reduce exactly the last dimension"
    identity = reduce.operands[1]
    if not (identity.op is Op.CONSTANT or (identity.op is Op.CONVERT
                                           and identity.operands[0].op is Op.CONSTANT)):
        return "the reduction's identity is not a constant"
    if len(broadcast.users) != 1 or len(reduce.users) != 1:
        return "the broadcast or the reduce has more than one user"
    if broadcast.shape.rank - 1 in broadcast.ints("dimensions"):
        return "the broadcast is not along the reduced dimension"
    producer = source
    while trivially_fusible(producer):
        producer = _follow(producer)
    if not _default_layout(producer):
        return "the producer has a non-default layout"
    if not _trivially_connected(producer, root.operands[0]):
        return "the producer is not trivially connected to the root"
    if producer is not root.operands[0] and len(root.operands[0].users) != 1:
        return "unsupported root-producer connection"
    return Diamond(root, producer)


def diamond_members(diamond: Diamond) -> set[Node]:
    """What MakeFusionForDiamond clones: from the root down to the producer and parameters."""
    members: set[Node] = set()
    stack = [diamond.root]
    while stack:
        node = stack.pop()
        if node is diamond.producer or node.op is Op.PARAMETER or node in members:
            continue
        members.add(node)
        stack.extend(node.operands)
    return members


def build_fusion(root: Node, members: set[Node], name: str, backend_config: str) -> Node:
    """A kCustom fusion of `members` in place of `root`; members with other users stay."""
    graph = root.parent
    fusion = create_fusion(root, FusionKind.CUSTOM)
    fusion.name = graph.module.names.unique(name)
    fusion.extra = (("backend_config", RawAttr(backend_config)),)
    absorb_operands(fusion, members)
    return fusion


def _candidates(graph: Graph) -> Iterable[Node]:
    return [n for n in graph.post_order() if _is_elementwise(n) and len(n.operands) == 2]


@dataclass(frozen=True, slots=True)
class SoftmaxRewriterTriton(ModuleGraphPass):
    """Makes each normalisation diamond a kCustom Triton fusion."""

    name: ClassVar[str] = PASS_NAME
    device: str = DEFAULT_DEVICE

    def run_on_graphs(self, graphs: ModuleGraph, log: DecisionSink | None = None) -> bool:
        description = device(self.device)
        if description.compute_capability < (8, 0):
            return False  # EnsureTritonSupportsComputeCapability: Ampere and newer
        recorder = Recorder(log, self.name)
        changed = False
        for graph in graphs.fusible_graphs():
            diamonds: list[Diamond] = []
            for node in _candidates(graph):
                matched = match_diamond(node)
                if isinstance(matched, Diamond):
                    diamonds.append(matched)
            for diamond in reversed(diamonds):
                changed |= self._fuse(graph, diamond, recorder)
        return changed

    def _fuse(self, graph: Graph, diamond: Diamond, recorder: Recorder) -> bool:
        root = diamond.root
        fusion = build_fusion(root, diamond_members(diamond), "triton_softmax",
                              TRITON_BACKEND_CONFIG)
        recorder.pair(graph.name, diamond.producer, fusion, FusionDecision.yes(
            f"the normalisation diamond rooted at %{root.name} becomes the Triton fusion "
            f"%{fusion.name}"))
        return True
