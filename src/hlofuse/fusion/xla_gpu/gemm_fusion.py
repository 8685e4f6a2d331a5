"""gemm-fusion: XLA's GemmFusion for `xla-gpu`: every dot Triton can compute becomes a kCustom
fusion holding the dot with the cheap instructions feeding it (its prologue) and the chain of
single users after it (its epilogue), before priority fusion.

What XLA does (jaxlib 0.10.2's GPU compiler, `gemm_fusion.cc`, after layout assignment):

- `GemmFusionVisitor::HandleDot`, in post order: a dot that is too small to be worth a GEMM
  (`IsMatrixMultiplicationTooSmallForRewriting` with `xla_gpu_gemm_rewrite_size_threshold`
  = 100: (lhs non-contracting + rhs non-contracting elements) x contracting elements < 100)
  and that the classical emitters compute (f16, f32, bf16 results:
  `IsDotSupportedByClassicalEmitters`) stays a dot: XLA's loop emitter computes it
  (`FusionWrapper` makes it a kernel of its own). Other dots go to `CreateDotFusion`.
- `CreateDotFusion`: the dot must be one Triton computes (`legacy_triton::
  IsTritonSupportedInstruction`: f16/f32/bf16 result, supported operand types, at most one
  batch dimension, a non-contracting dimension on both sides, default operand precision).
  `xla_gpu_triton_gemm_any` is on by default, so the "pure matmul" refusal never applies.
- The prologue, per operand (`BuildFusionPlanTowardOperands`): a breadth-first walk from the
  operand that fuses an instruction when `GetPropagatedDimOrdersAndRequirementsIfProfitably
  Fusible` (triton_tiling_propagation.cc) accepts it towards the inputs, with at most
  `kMaxParameterPerDotOperand` = 4 fusion inputs per operand; what is not fused becomes a
  parameter. Parameters are never fused; dynamic slices are not (gemm_fusion.cc).
- The epilogue (`FuseTowardUsers`): while the fusion's output has exactly one user and
  that user is accepted towards the outputs, the user joins, with its other operands fused
  towards the inputs without a parameter limit.
- The fusion is kCustom with backend kind `__triton_gemm` (`kTritonGemmFusionKind`); it
  replaces the last instruction it computes. Priority, multi-output and horizontal fusion
  leave kCustom fusions alone.

Not modelled: the dimension-order requirements (`GetRequirementsIfSupportedOrders`: which
splits of a dimension by bitcasts and reshapes Triton tiles; the corpus's dots read and
write whole 2-D operands), and concatenates (XLA fuses one only along the non-contracting
dimension with every piece a multiple of 64 long; here every concatenate is a parameter).
Autotuning: without a GPU XLA keeps the Triton fusion with a default tiling (the oracle
note: no cuBLAS fallback is measured), so every fusion formed here stays one kernel.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from hlofuse.fusion.graphs.fusing import absorb_operands, create_fusion
from hlofuse.fusion.graphs.graph import Graph, Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph, ModuleGraphPass
from hlofuse.ir.attrs import RawAttr
from hlofuse.ir.dtypes import DType
from hlofuse.ir.ops import FusionKind, Op
from hlofuse.passes.decision_log import DecisionSink, FusionDecision, Recorder

PASS_NAME = "gemm-fusion"
TRITON_GEMM_KIND = "__triton_gemm"
GEMM_BACKEND_CONFIG = '{"fusion_backend_config":{"kind":"__triton_gemm"}}'

# Rule ids (passes/rule_catalogue.py).
GEMM_TOO_SMALL = "gemm-too-small"
GEMM_UNSUPPORTED = "gemm-not-triton"

GEMM_REWRITE_SIZE_THRESHOLD = 100  # xla_gpu_gemm_rewrite_size_threshold's default
MAX_PARAMETERS_PER_OPERAND = 4  # TritonFusionAnalysis::kMaxParameterPerDotOperand
IO_TOLERANCE_BYTES = 1024  # kIoToleranceBytes (triton_tiling_propagation.cc)

_DOT_OUTPUT_TYPES = frozenset({DType.F16, DType.F32, DType.BF16})  # IsTritonSupportedDotOutputType
_DATA_TYPES = _DOT_OUTPUT_TYPES | {DType.PRED, DType.S8, DType.S16, DType.S32}
_CLASSICAL_DOT_TYPES = frozenset({DType.F16, DType.F32, DType.BF16})

# legacy_triton's element-wise lists, by the type of the first operand.
_UNARY_ANY = frozenset({Op.CONVERT, Op.ABS, Op.NEGATE})
_UNARY_FLOAT = frozenset({Op.COSINE, Op.EXPONENTIAL, Op.EXPONENTIAL_MINUS_ONE, Op.FLOOR, Op.CEIL,
                          Op.LOG, Op.LOG_PLUS_ONE, Op.RSQRT, Op.SINE, Op.SQRT, Op.CBRT, Op.TAN,
                          Op.TANH, Op.ERF})
_BINARY_ANY = frozenset({Op.ADD, Op.COMPARE, Op.MAXIMUM, Op.MINIMUM, Op.MULTIPLY, Op.SUBTRACT})
_BINARY_FLOAT = frozenset({Op.ATAN2, Op.DIVIDE, Op.POWER})
_PRED_OPS = frozenset({Op.CONVERT, Op.NOT, Op.AND, Op.OR, Op.XOR, Op.COMPARE})
_TERNARY = frozenset({Op.SELECT, Op.CLAMP})
_FLOATS = frozenset({DType.F32, DType.BF16, DType.F64})
# Non-element-wise ops legacy Triton emits (IsTritonSupportedInstruction).
_STRUCTURAL = frozenset({Op.BITCAST, Op.TRANSPOSE, Op.SLICE, Op.RESHAPE, Op.PAD, Op.CONCATENATE,
                         Op.PARAMETER, Op.BROADCAST, Op.DYNAMIC_SLICE})


# What GetPropagatedDimOrders follows towards the inputs, besides element-wise ops.
_PROPAGATES_TO_INPUTS = frozenset({Op.BITCAST, Op.RESHAPE, Op.TRANSPOSE, Op.COPY, Op.BROADCAST,
                                   Op.SLICE})


def _elementwise_supported(op: Op, first_operand: DType) -> bool:
    """IsTritonSupportedElementwiseUpToFloatNormalization."""
    if op in _TERNARY:
        return True
    if first_operand is DType.PRED:
        return op in _PRED_OPS
    if op in _UNARY_ANY or op in _BINARY_ANY:
        return True
    return first_operand in _FLOATS and (op in _UNARY_FLOAT or op in _BINARY_FLOAT)


def _is_elementwise(node: Node) -> bool:
    return node.op.definition.kind.name == "ELEMENTWISE" or node.op is Op.CONSTANT


def triton_supported(node: Node) -> str | None:
    """Why legacy Triton cannot emit `node` (IsTritonSupportedInstruction), or None."""
    if _is_elementwise(node):
        if node.dtype not in _DATA_TYPES:
            return "unsupported output data type"
        if any(o.dtype not in _DATA_TYPES for o in node.operands):
            return "unsupported input data type"
        if node.op is Op.CONSTANT:
            return None
        if not _elementwise_supported(node.op, node.operands[0].dtype):
            return "unsupported element-wise operation"
        return None
    if node.op is Op.DOT:
        return dot_unsupported(node)
    if node.op is Op.TUPLE:
        return None if node is node.parent.root else "only root tuples"
    return None if node.op in _STRUCTURAL else "unsupported opcode"


def dot_unsupported(dot: Node) -> str | None:
    """Why Triton does not compute this dot (CanTritonHandleGEMM, NoNonContractingDimension)."""
    lhs, rhs = dot.operands
    batch = dot.ints("lhs_batch_dims")
    if len(batch) + len(dot.ints("lhs_contracting_dims")) == len(lhs.shape.dims) or \
            len(dot.ints("rhs_batch_dims")) + len(dot.ints("rhs_contracting_dims")) == \
            len(rhs.shape.dims):
        return "no non-contracting dimensions"
    if any(key == "operand_precision" and "high" in raw.text.lower() for key, raw in dot.extra):
        return "non-default operand precision with an unset algorithm"
    if dot.dtype not in _DOT_OUTPUT_TYPES:
        return f"unsupported output type {dot.dtype.text}"
    if lhs.dtype not in _DATA_TYPES or rhs.dtype not in _DATA_TYPES:
        return "unsupported input data type"
    if len(batch) > 1:
        return "multiple batch dimensions"
    return None


def _non_contracting_size(shape_dims: tuple[int, ...], batch: tuple[int, ...],
                          contracting: tuple[int, ...]) -> int:
    size = 1
    for d, n in enumerate(shape_dims):
        if d not in batch and d not in contracting:
            size *= n
    return size


def dot_too_small(dot: Node) -> tuple[bool, int]:
    """IsMatrixMultiplicationTooSmallForRewriting with the default threshold, and the size."""
    lhs, rhs = dot.operands
    contracting = 1
    for d in dot.ints("lhs_contracting_dims"):
        contracting *= lhs.shape.dims[d]
    lhs_size = _non_contracting_size(lhs.shape.dims, dot.ints("lhs_batch_dims"),
                                     dot.ints("lhs_contracting_dims"))
    rhs_size = _non_contracting_size(rhs.shape.dims, dot.ints("rhs_batch_dims"),
                                     dot.ints("rhs_contracting_dims"))
    size = (lhs_size + rhs_size) * contracting
    return size < GEMM_REWRITE_SIZE_THRESHOLD, size


def _is_bitcast_reshape(node: Node) -> bool:
    # hlofuse keeps row-major layouts outside the layout-annotated ops: a reshape between
    # default layouts reads the same bytes (kernels.is_free makes the same test).
    from hlofuse.fusion.kernels import is_free

    return is_free(node)


def _is_effective_parameter(node: Node) -> bool:
    """hlo_query::IsEffectiveParameter: a parameter, or a bitcast or tuple element of one."""
    while node.op in (Op.BITCAST, Op.GET_TUPLE_ELEMENT):
        node = node.operands[0]
    return node.op is Op.PARAMETER


def _is_scalar_constant(node: Node) -> bool:
    return node.op is Op.CONSTANT and node.shape.is_array and not node.shape.dims


def _input_minus_output_bytes(node: Node) -> int:
    return sum(o.shape.byte_size for o in node.operands) - node.shape.byte_size


def _common_refusal(node: Node) -> str | None:
    """The first checks of GetPropagatedDimOrdersAndRequirementsIfProfitablyFusible."""
    if node.op in (Op.TUPLE, Op.GET_TUPLE_ELEMENT):
        return "unsupported instruction"
    if node.op is Op.REDUCE:
        return "reductions are not fused yet"
    if node.op is Op.PAD:
        return "pads are not fused yet"
    return triton_supported(node)


def input_refusal(node: Node) -> str | None:
    """Why `node` is not fused towards the dot's inputs (GetPropagatedDimOrdersAndRequirements
    IfProfitablyFusible, kOutputToInput, fusion level 2), or None."""
    if node.op is Op.DYNAMIC_SLICE:
        return "dynamic slices are not fused (gemm_fusion.cc)"
    refusal = _common_refusal(node)
    if refusal is not None:
        return refusal
    # GetPropagatedDimOrders, towards the inputs.
    if any(u.op in (Op.CONCATENATE, Op.DYNAMIC_SLICE) for u in node.users):
        return "no fusion into concatenations or dynamic slices"
    if node.op is Op.CONCATENATE:
        return "a concatenate (fused only along the non-contracting dimension with pieces " \
               "of multiples of 64; not modelled)"
    if node.op is Op.RESHAPE and not _is_bitcast_reshape(node):
        return "non-bitcast reshape"
    if not (_is_elementwise(node) or node.op in _PROPAGATES_TO_INPUTS):
        return f"unimplemented instruction ({node.op.text})"
    if node.op is Op.CONSTANT and not _is_scalar_constant(node):
        return "unimplemented instruction (a constant of several elements)"
    # Level 2: a binary element-wise op with a fusible broadcast of a parameter or constant is
    # worth fusing; otherwise the data volume decides (IsInputWorthFusing).
    if _is_elementwise(node) and len(node.operands) == 2:
        for operand in node.operands:
            if operand.op is Op.BROADCAST and \
                    operand.operands[0].op in (Op.PARAMETER, Op.CONSTANT) and \
                    input_refusal(operand) is None:
                return None
    if not _input_worth_fusing(node):
        return "not obviously profitable to fuse as input"
    return None


def _input_worth_fusing(node: Node) -> bool:
    """IsInputWorthFusing."""
    if _input_minus_output_bytes(node) <= IO_TOLERANCE_BYTES:
        return True
    if len(node.users) > 1:
        return False
    operands = node.operands
    if node.op is Op.SLICE and all(o.op in (Op.PARAMETER, Op.CONSTANT) for o in operands):
        return True
    return all(o.op in (Op.PARAMETER, Op.CONSTANT) and len(o.users) == 1 for o in operands)


def output_refusal(user: Node, source: Node) -> str | None:
    """Why `user` (the only user of `source`, the fusion's output so far) does not join the
    epilogue (the same function, kInputToOutput), or None."""
    refusal = _common_refusal(user)
    if refusal is not None:
        return refusal
    if user.op is Op.RESHAPE and not _is_bitcast_reshape(user):
        return "non-bitcast reshape"
    if not (_is_elementwise(user) or user.op in (Op.BITCAST, Op.RESHAPE, Op.TRANSPOSE)):
        return f"{user.op.text} does not propagate towards the output"
    for operand in user.operands:
        if operand is source:
            continue
        if (operand.op is Op.BROADCAST and (not operand.operands[0].shape.dims
                                           or _is_effective_parameter(operand.operands[0]))) \
                or _is_effective_parameter(operand):
            continue
        return "has multiple inputs (only parameters and broadcasts of them or of scalars " \
               "are accepted)"
    # IsOutputWorthFusing.
    root = user.parent.root
    cannot_fuse_further = user is root or (len(user.users) == 1 and next(iter(user.users))
                                            is root and root.op is Op.TUPLE)
    if not cannot_fuse_further and _input_minus_output_bytes(user) < -IO_TOLERANCE_BYTES:
        return "not obviously profitable to fuse as output"
    return None


def _plan_towards_inputs(start: Node, max_parameters: int | None, fused: set[Node]) -> None:
    """BuildFusionPlanTowardOperands: adds to `fused` what joins, breadth first from `start`."""
    inputs: set[Node] = {start}
    seen: set[Node] = {start}
    queue: deque[Node] = deque([start])
    requeued = 0
    while len(queue) > requeued:
        node = queue.popleft()
        added = 0 if node.op is Op.PARAMETER or (node.op is Op.CONSTANT
                                                 and not _is_scalar_constant(node)) \
            else len(node.operands) - 1
        if max_parameters is not None and len(inputs) + added > max_parameters:
            queue.append(node)  # the count may fall once other inputs are fused
            requeued += 1
            continue
        requeued = 0
        if node.op is Op.PARAMETER or input_refusal(node) is not None:
            continue
        inputs.discard(node)
        fused.add(node)
        for operand in node.operands:
            if operand not in seen:
                seen.add(operand)
                inputs.add(operand)
                queue.append(operand)


@dataclass
class GemmPlan:
    """One dot's fusion: its epilogue (dot first, output last) and everything it computes."""

    dot: Node
    epilogue: list[Node]
    members: set[Node]

    @property
    def output(self) -> Node:
        return self.epilogue[-1]


def plan_gemm_fusion(dot: Node) -> GemmPlan:
    """CreateDotFusion's choice of instructions for `dot` (assumed supported)."""
    members: set[Node] = {dot}
    for operand in dot.operands:
        _plan_towards_inputs(operand, MAX_PARAMETERS_PER_OPERAND, members)
    epilogue = [dot]
    current = dot
    while len(current.users) == 1:
        user = next(iter(current.users))
        if output_refusal(user, current) is not None:
            break
        for operand in user.operands:
            if operand is not current:
                _plan_towards_inputs(operand, None, members)
        members.add(user)
        epilogue.append(user)
        current = user
    return GemmPlan(dot, epilogue, members)


def build_gemm_fusion(plan: GemmPlan) -> Node:
    """The kCustom fusion computing `plan`, in place of its output."""
    graph = plan.output.parent
    fusion = create_fusion(plan.output, FusionKind.CUSTOM)
    fusion.name = graph.module.names.unique(f"gemm_fusion_{plan.dot.name}")
    fusion.extra = (("backend_config", RawAttr(GEMM_BACKEND_CONFIG)),)
    fusion.metadata = plan.dot.metadata
    absorb_operands(fusion, plan.members)
    return fusion


def is_gemm_fusion(node: Node) -> bool:
    return node.is_fusion and node.kind == FusionKind.CUSTOM and any(
        key == "backend_config" and TRITON_GEMM_KIND in raw.text for key, raw in node.extra)


def _dots(graph: Graph) -> Iterable[Node]:
    return [n for n in graph.post_order() if n.op is Op.DOT]


@dataclass(frozen=True, slots=True)
class GemmFusion(ModuleGraphPass):
    """Makes each dot Triton computes a kCustom GEMM fusion with its prologue and epilogue."""

    name: ClassVar[str] = PASS_NAME

    def run_on_graphs(self, graphs: ModuleGraph, log: DecisionSink | None = None) -> bool:
        recorder = Recorder(log, self.name)
        changed = False
        for graph in graphs.fusible_graphs():
            for dot in _dots(graph):
                if dot.parent is not graph or dot not in graph.nodes:
                    continue
                tiny, size = dot_too_small(dot)
                if tiny and dot.dtype in _CLASSICAL_DOT_TYPES:
                    recorder.pair(graph.name, dot, dot, FusionDecision.no(
                        GEMM_TOO_SMALL, f"%{dot.name} stays a dot for the loop emitter: "
                        f"(non-contracting + non-contracting) x contracting = {size} elements, "
                        f"under {GEMM_REWRITE_SIZE_THRESHOLD}", size=size,
                        limit=GEMM_REWRITE_SIZE_THRESHOLD))
                    continue
                reason = dot_unsupported(dot)
                if reason is not None:
                    recorder.pair(graph.name, dot, dot, FusionDecision.no(
                        GEMM_UNSUPPORTED, f"%{dot.name} stays a library call: Triton does not "
                        f"compute it ({reason})"))
                    continue
                plan = plan_gemm_fusion(dot)
                output = plan.output
                fusion = build_gemm_fusion(plan)
                recorder.pair(graph.name, dot, fusion, FusionDecision.yes(
                    f"%{dot.name} becomes the Triton GEMM fusion %{fusion.name} with "
                    f"{len(plan.members) - 1} more instructions (output %{output.name})"))
                changed = True
        return changed
