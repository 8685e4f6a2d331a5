"""Every rule id a pass writes into the decision log: which passes, what it means, whose it is.

Each row names the passes that log the id, says in one line what a record with it means, and
names the XLA source file and function whose check it restates, or "ours" when the rule is
hlofuse's own (the rewrites of the packed CartPole state, whole-loop fusion, the Threefry
expansion). `hlofuse explain --rules` prints this table, and a test fails when a pass logs an
id that is missing here (tests/passes/test_rule_catalogue.py): add the row with the rule.
"""

from __future__ import annotations

from dataclasses import dataclass

OURS = "ours"

_GPU = "xla/service/gpu/"
_FUSIBLE = _GPU + "gpu_fusible.cc"
_INSTRUCTION_FUSION = "xla/service/instruction_fusion.cc"
_GPU_INSTRUCTION_FUSION = _GPU + "instruction_fusion.cc"
_MERGER = _GPU + "fusion_merger.cc"
_MULTI_OUTPUT = _GPU + "multi_output_fusion.cc"
_HORIZONTAL_LOOP = _GPU + "horizontal_loop_fusion.cc"
_HORIZONTAL_INPUT = _GPU + "horizontal_input_fusion.cc"
_PRIORITY = _GPU + "priority_fusion.cc"
_WHILE_ANALYSIS = "xla/service/while_loop_analysis.cc"

# The passes, by their `name`.
INSTRUCTION_FUSION = "instruction-fusion"
FUSION_MERGER = "fusion-merger"
MULTI_OUTPUT = "multi-output-fusion"
HORIZONTAL_LOOP = "horizontal-loop-fusion"
HORIZONTAL_INPUT = "horizontal-input-fusion"
PRIORITY = "priority-fusion"
GPU_PRIORITY = "gpu-priority-fusion"
GPU_MULTI_OUTPUT = "gpu-multi-output-fusion"
TRANSPOSE_TO_BITCAST = "transpose-to-bitcast"
LAYOUT_ASSIGNMENT = "layout-assignment"
TRANSPOSE_FOLDING = "transpose-folding"
DYNAMIC_DIMENSION_SIMPLIFIER = "dynamic-dimension-simplifier"
GEMM_FUSION = "gemm-fusion"
SOFTMAX_REWRITER = "softmax-rewriter-triton"
_GEMM_FUSION_CC = "xla/service/gpu/transforms/gemm_fusion.cc"
WHOLE_LOOP = "whole-loop-fusion"
CONCAT_FORWARDING = "concat-forwarding"
SCALARIZE_STATE = "scalarize-state"
LOOP_UNROLL = "loop-unroll"
RNG_EXPANSION = "rng-expansion"
OWN_ROW_GATHER = "own-row-gather"
TRIP_COUNT = "while-loop-trip-count-annotator"
TREE_REDUCTION = "tree-reduction-rewriter"
LOGISTIC = "logistic-expander"
VARIADIC_SPLITTER = "variadic-op-splitter"
WHILE_SIMPLIFIER = "while-loop-simplifier"
ARITHMETIC_IDENTITIES = "arithmetic-identities"
CONSTANT_FOLDING = "constant-folding"
CONDITIONAL_PRED_INDEX = "conditional-pred-index"
DOT_STRENGTH_REDUCTION = "dot-strength-reduction"
DOT_DECOMPOSER = "dot-decomposer"
CONDITIONAL_SIMPLIFIER = "conditional-simplifier"
RESHAPE_MOVER = "reshape-mover"
COPY_INSERTION = "copy-insertion"
COPY_FUSION = "copy-fusion"
FP_CONVERSIONS = "simplify-fp-conversions"
BATCHED_GATHER_SCATTER = "batched-gather-scatter-normalizer"
GATHER_SIMPLIFIER = "gather-simplifier"
SCATTER_SIMPLIFIER = "scatter-simplifier"
SCATTER_EXPANDER = "scatter-expander"
REDUCE_MERGER = "reduce-merger"
_WHILE_SIMPLIFIER_CC = "xla/hlo/transforms/simplifiers/while_loop_simplifier.cc"

# Rules every vertical fusion pass applies through the shared legality checks (rules.py).
_VERTICAL = (INSTRUCTION_FUSION, FUSION_MERGER, MULTI_OUTPUT, PRIORITY, GPU_PRIORITY,
             GPU_MULTI_OUTPUT)
_MULTI_OUTPUTS = (MULTI_OUTPUT, GPU_MULTI_OUTPUT)
_PRIORITIES = (PRIORITY, GPU_PRIORITY)


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule id of the decision log."""

    id: str
    passes: tuple[str, ...]
    meaning: str
    xla: str  # "file: function" it restates, or OURS


def _rule(id: str, passes: str | tuple[str, ...], meaning: str, xla: str) -> Rule:
    return Rule(id, (passes,) if isinstance(passes, str) else passes, meaning, xla)


CATALOGUE: tuple[Rule, ...] = (
    # --- positive decisions ------------------------------------------------------------
    _rule("fusible", _VERTICAL + (HORIZONTAL_LOOP, HORIZONTAL_INPUT, WHOLE_LOOP, GEMM_FUSION,
                                  SOFTMAX_REWRITER),
          "fused: the pass's legality rules (and its cost rules) agree",
          f"{_GPU_INSTRUCTION_FUSION}: GpuInstructionFusion::ShouldFuse"),
    _rule("cost-model-gain", _PRIORITIES,
          "fused: the cost model estimates the fused kernels faster than the unfused ones",
          f"{_PRIORITY}: GpuPriorityFusion::CalculateProducerPriority"),
    _rule("cost-model-loss", _PRIORITIES + (GPU_MULTI_OUTPUT,),
          "not fused: the cost model estimates no saving (recomputation or lost parallelism)",
          f"{_PRIORITY}: GpuPriorityFusion::CalculateProducerPriority"),
    # --- barriers: what cannot take part in a loop fusion ------------------------------
    _rule("control-flow-boundary", _VERTICAL,
          "a while, conditional or call runs other computations; fusion stops at it",
          "xla/hlo/ir/hlo_instruction.cc: HloInstruction::IsFusible"),
    _rule("side-effect", _VERTICAL,
          "an instruction with side effects is never fused",
          "xla/hlo/ir/hlo_instruction.cc: HloInstruction::IsFusible"),
    _rule("custom-call", _VERTICAL,
          "a custom call is an opaque library call (the Threefry kernel, say)",
          f"{_FUSIBLE}: IsFusible"),
    _rule("tuple-boundary", _VERTICAL,
          "tuple and get-tuple-element only move buffers; values through them are materialized",
          f"{_FUSIBLE}: IsFusible"),
    _rule("optimization-barrier", _VERTICAL,
          "an opt-barrier keeps its operands apart from its users",
          f"{_FUSIBLE}: IsFusible"),
    _rule("library-call", _VERTICAL,
          "dot and other library calls (cuBLAS in XLA) are kernels of their own",
          f"{_FUSIBLE}: IsFusible"),
    _rule("reduction-not-at-root", _VERTICAL,
          "a tiled or variadic reduction can only be the root (hero) of a fusion",
          f"{_FUSIBLE}: IsLoopFusibleAsProducer"),
    _rule("not-loop-fusible", _VERTICAL,
          "the instruction (or fusion kind) is not loop-fusible",
          f"{_FUSIBLE}: IsLoopFusibleAsProducer/IsLoopFusibleAsConsumer"),
    # --- IsProducerConsumerFusible and the shared budget -------------------------------
    _rule("multi-output-producer", _VERTICAL,
          "the producer is a multi-output fusion",
          f"{_FUSIBLE}: IsProducerConsumerFusible"),
    _rule("creates-nested-loop", _VERTICAL,
          "producer and consumer both re-read elements; fused, one loop would run inside the "
          "other", f"{_FUSIBLE}: CreatesNestedLoop"),
    _rule("transposing-producer-into-reduction", _VERTICAL,
          "a physically transposing producer would make the reduction read uncoalesced",
          f"{_FUSIBLE}: LayoutsAreReduceInputFusionFriendly"),
    _rule("constant-not-fused", (INSTRUCTION_FUSION, FUSION_MERGER) + _PRIORITIES,
          "a non-scalar constant stays an external buffer; scalars only join fusions",
          f"{_FUSIBLE}: IsProducerConsumerFusible"),
    _rule("in-place-conflict", _VERTICAL,
          "the consumer updates a buffer in place that the producer also reads (or, in "
          "xla-gpu, that a non-element-wise producer is)",
          f"{_INSTRUCTION_FUSION}: InstructionFusion::ShouldFuseInPlaceOp"),
    _rule("shared-memory-budget", _VERTICAL + (HORIZONTAL_INPUT,),
          "together the kernels would need more shared memory than the budget",
          f"{_FUSIBLE}: FusionFitsInBudget"),
    _rule("too-many-unnested-reductions", _VERTICAL + (HORIZONTAL_INPUT,),
          "together the kernels would hold too many unnested (tiled) reductions",
          f"{_FUSIBLE}: FusionFitsInBudget"),
    _rule("too-many-operands", _VERTICAL + (HORIZONTAL_INPUT,),
          "the fused kernel would have more operands plus outputs than the budget",
          f"{_FUSIBLE}: FusionFitsInBudget"),
    _rule("code-duplication-too-high", (INSTRUCTION_FUSION, FUSION_MERGER, MULTI_OUTPUT),
          "the fused emitter would emit the producer too many times",
          "xla/service/fusion_node_indexing_evaluation.cc: "
          "FusionNodeIndexingEvaluation::CodeDuplicationTooHigh"),
    # --- instruction fusion -------------------------------------------------------------
    _rule("producer-is-fusion", INSTRUCTION_FUSION,
          "instruction fusion does not merge fusions (the fusion merger does)",
          f"{_GPU_INSTRUCTION_FUSION}: GpuInstructionFusion::ShouldFuseInexpensiveChecks"),
    _rule("expensive-producer-reused", INSTRUCTION_FUSION,
          "an expensive producer would be recomputed for every element the consumer re-reads",
          f"{_INSTRUCTION_FUSION}: InstructionFusion::ShouldFuse (ReusesOperandElements)"),
    _rule("producer-is-root", (INSTRUCTION_FUSION, GPU_PRIORITY),
          "the producer is its computation's root",
          f"{_INSTRUCTION_FUSION}: InstructionFusion::ShouldFuse"),
    _rule("cannot-duplicate", INSTRUCTION_FUSION,
          "the producer has several users and this sweep does not duplicate",
          f"{_INSTRUCTION_FUSION}: InstructionFusion::ShouldFuse (may_duplicate)"),
    _rule("expensive-producer-duplicated", INSTRUCTION_FUSION,
          "an expensive producer with several users would be computed again in each",
          f"{_INSTRUCTION_FUSION}: InstructionFusion::ShouldFuse (IsExpensive)"),
    _rule("globally-unfusible", INSTRUCTION_FUSION,
          "the producer reads more than it writes and cannot fuse into all users on all paths",
          f"{_INSTRUCTION_FUSION}: InstructionFusion::ComputeGloballyUnfusible"),
    # --- fusion merger ------------------------------------------------------------------
    _rule("not-loop-fusion", FUSION_MERGER,
          "only kLoop fusions are merged into their users (kInput keeps its hero at the root)",
          f"{_MERGER}: FusionInstructionMerger::ShouldFuse"),
    _rule("consumer-is-bitcast", (FUSION_MERGER,) + _PRIORITIES,
          "bitcasts are not fused into", f"{_MERGER}: FusionInstructionMerger::ShouldFuse"),
    _rule("bytes-transferred-ratio", FUSION_MERGER,
          "merged into all users the fusion would move more bytes than it saves",
          f"{_MERGER}: FusionInstructionMerger::ShouldFuse"),
    _rule("expensive-instruction-in-fusion", FUSION_MERGER,
          "an expensive fused instruction would be computed again in each of several users",
          f"{_MERGER}: FusionInstructionMerger::ShouldFuse"),
    # --- multi-output fusion ------------------------------------------------------------
    _rule("not-multi-output-root", _MULTI_OUTPUTS,
          "the consumer cannot be the root of a multi-output fusion",
          f"{_FUSIBLE}: IsFusibleAsMultiOutputFusionRoot"),
    _rule("creates-cycle", _MULTI_OUTPUTS,
          "the consumer also reads a value that depends on the producer",
          f"{_MULTI_OUTPUT}: GpuMultiOutputFusion::DoProducerConsumerMultiOutputFusion"),
    _rule("incompatible-shapes", _MULTI_OUTPUTS + (HORIZONTAL_INPUT,),
          "the kernels' loops run over different shapes",
          f"{_FUSIBLE}: ShapesCompatibleForMultiOutputFusion"),
    _rule("siblings-connected", _MULTI_OUTPUTS,
          "one sibling depends on the other", f"{_MULTI_OUTPUT}: GpuMultiOutputFusion::"
          "FuseSiblings"),
    _rule("fusion-kinds-differ", MULTI_OUTPUT,
          "siblings of different fusion kinds (2022 rule)",
          f"{_MULTI_OUTPUT}: LegalToFuse"),
    _rule("dynamic-update-slice-sibling", _MULTI_OUTPUTS,
          "a sibling rooted at a dynamic-update-slice updates in place and is not fused",
          f"{_MULTI_OUTPUT}: LegalToFuse"),
    _rule("concat-forwarded", DYNAMIC_DIMENSION_SIMPLIFIER,
          "a concatenate of concatenates along the same dimension takes their operands",
          "xla/hlo/transforms/simplifiers/dynamic_dimension_simplifier.cc: ConcatForwarding"),
    _rule("transpose-folded", TRANSPOSE_FOLDING,
          "a dot reads its transposed operand's operand, its dimension numbers mapped through "
          "the transpose",
          "xla/service/transpose_folding.cc: FoldTransposeIntoDot; "
          "xla/service/gpu/matmul_utils.cc: CanFoldTransposeOperandIntoDot"),
    _rule("layout-copy", LAYOUT_ASSIGNMENT,
          "an operand laid out otherwise than its user's layout constraint wants: XLA's copy, "
          "which layout normalisation writes as a transpose",
          "xla/service/layout_assignment.cc: LayoutAssignment::CopyOperandIfLayoutsDiffer; "
          "xla/service/layout_normalization.cc: HandleCopy"),
    _rule("layout-bitcast", LAYOUT_ASSIGNMENT,
          "a transpose or copy that moves no byte under the layouts assigned became a bitcast "
          "(a free reshape)",
          "xla/service/layout_normalization.cc: LayoutNormalizationVisitor::HandleTranspose"),
    _rule("layout-row-major", LAYOUT_ASSIGNMENT,
          "an op given a non-default layout that the normalisation model does not rewrite: "
          "computed row-major between transposes (XLA's normalisation rewrites more ops)",
          OURS),
    _rule("layout-not-modelled", LAYOUT_ASSIGNMENT,
          "the module holds an op the layout-assignment model does not cover: layouts left "
          "row-major (XLA's LayoutAssignment::Run covers every op)",
          OURS),
    _rule("transpose-is-bitcast", TRANSPOSE_TO_BITCAST,
          "a transpose that only moves dimensions of size 1 became a (free) reshape",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: "
          "AlgebraicSimplifierVisitor::HandleTranspose"),
    _rule("bitcast-convert-is-bitcast", TRANSPOSE_TO_BITCAST,
          "a bitcast-convert that keeps the element width became a bitcast",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: "
          "AlgebraicSimplifierVisitor::HandleBitcastConvert"),
    _rule("column-reduction-sibling", GPU_MULTI_OUTPUT,
          "a column reduction and an element-wise root read the shared operand differently",
          "xla/backends/gpu/transforms/multi_output_fusion.cc: CanFuseSiblings"),
    _rule("slices-disjoint", GPU_MULTI_OUTPUT,
          "the siblings read disjoint slices of a shared operand of 1 KiB or more",
          "xla/backends/gpu/transforms/multi_output_fusion.cc: "
          "ParameterSlicesAreNonOverlapping"),
    _rule("transposing-producer", GPU_MULTI_OUTPUT,
          "a producer that transposes memory does not become an extra output",
          f"{_FUSIBLE}: IsProducerMultiOutputFusible"),
    # --- horizontal fusion --------------------------------------------------------------
    _rule("not-horizontal-candidate", HORIZONTAL_LOOP,
          "neither element-wise nor a kLoop fusion with one output type",
          f"{_HORIZONTAL_LOOP}: IsFusibleCandidate"),
    _rule("not-launch-bound", HORIZONTAL_LOOP,
          "too many elements or instructions to gain from saving a launch",
          f"{_HORIZONTAL_LOOP}: IsProfitableFusionCandidate"),
    _rule("consumer-not-only-user", HORIZONTAL_LOOP,
          "the candidate has users besides the consumer and the root (a cycle could form)",
          f"{_HORIZONTAL_LOOP}: IsConsumerTheOnlyNonRootUser"),
    _rule("non-row-major", HORIZONTAL_LOOP,
          "the candidate has a non-row-major layout", f"{_HORIZONTAL_LOOP}: "
          "HasOnlyRowMajorLayout"),
    _rule("shared-parameter", HORIZONTAL_LOOP,
          "the candidate shares a computation parameter with another candidate",
          f"{_HORIZONTAL_LOOP}: AnyOpndIsParamSharedAmongFusions"),
    _rule("output-types-differ", HORIZONTAL_LOOP,
          "a span holds one output element type only",
          f"{_HORIZONTAL_LOOP}: GetNextSpanOfFusions"),
    _rule("output-counts-differ", HORIZONTAL_LOOP,
          "a span holds one output count only", f"{_HORIZONTAL_LOOP}: GetNextSpanOfFusions"),
    _rule("instruction-counts-differ", HORIZONTAL_LOOP,
          "a span holds one fused instruction count only",
          f"{_HORIZONTAL_LOOP}: GetNextSpanOfFusions"),
    _rule("span-limit", HORIZONTAL_LOOP,
          "the span is full: too many members or too many kernel parameter bytes",
          f"{_HORIZONTAL_LOOP}: GetNextSpanOfFusions"),
    _rule("not-entry-computation", HORIZONTAL_LOOP,
          "horizontal fusion runs in the entry computation only (the 2022/2024 pass)",
          f"{_HORIZONTAL_LOOP}: GpuHorizontalLoopFusion::Run"),
    # --- priority fusion ----------------------------------------------------------------
    _rule("merged-too-large", _PRIORITIES + (GPU_MULTI_OUTPUT,),
          "the fused kernel would emit more instructions than the IR size cap",
          f"{_FUSIBLE}: ProducerConsumerMergedTooLarge"),
    _rule("both-contain-reduce", GPU_PRIORITY,
          "producer and consumer both hold a significant reduction (16+ elements per output)",
          f"{_PRIORITY}: GpuPriorityFusion::CanFuseWithNativeEmitter"),
    _rule("reduction-epilogue-becomes-loop", GPU_PRIORITY,
          "fusing the epilogue would turn a reduction kernel into a loop kernel",
          f"{_PRIORITY}: GpuPriorityFusion::CanFuseWithNativeEmitter"),
    # --- whole-loop fusion (analysis/parallel_loop.py, analysis/lane_dims.py) ----------
    _rule("whole-loop-state-not-tuple", WHOLE_LOOP,
          "the loop state is not a tuple the analysis can split per lane", OURS),
    _rule("whole-loop-no-parallel-dimension", WHOLE_LOOP,
          "no leading dimension of the state is shared by the loop's per-lane values",
          OURS),
    _rule("whole-loop-opaque-op", WHOLE_LOOP,
          "the loop runs an op the whole-loop kernel cannot emit per lane", OURS),
    _rule("whole-loop-nested-control-flow", WHOLE_LOOP,
          "the loop holds a conditional, a call, or a nested loop that lane code cannot "
          "run (whose result outside its lanes' part is read after it)", OURS),
    _rule("whole-loop-data-dependent-trip-count", WHOLE_LOOP,
          "the condition depends on per-lane values", OURS),
    _rule("whole-loop-state-too-large", WHOLE_LOOP,
          "one lane's state is over the per-lane limit", OURS),
    _rule("whole-loop-cross-lane-reduce", WHOLE_LOOP,
          "a reduction over the lanes that is not an accumulator", OURS),
    _rule("whole-loop-cross-lane-access", WHOLE_LOOP,
          "an op moves values between lanes (slice, reshape, ...)", OURS),
    # --- rewrites before fusion ---------------------------------------------------------
    _rule("threefry-expanded", RNG_EXPANSION,
          "the Threefry custom call became element-wise u32 HLO (as JAX's non-GPU lowering)",
          OURS),
    _rule("unknown-custom-call-target", RNG_EXPANSION,
          "a custom call whose target has no known integer form", OURS),
    _rule("threefry-signature", RNG_EXPANSION,
          "a Threefry custom call whose operands are not four u32 arrays of one shape", OURS),
    _rule("position-index-batched", OWN_ROW_GATHER,
          "a gather's index component that is the position along a dimension of its indices "
          "became a batching dimension pair", OURS),
    _rule("slice-forwarded", CONCAT_FORWARDING,
          "a slice of a concatenate reads its piece directly", OURS),
    _rule("slice-within-one-piece", CONCAT_FORWARDING,
          "a slice reads across pieces of the concatenate, so it stays", OURS),
    _rule("elementwise-split", CONCAT_FORWARDING,
          "an element-wise op of concatenates became one op per piece", OURS),
    _rule("reduce-split", CONCAT_FORWARDING,
          "a reduce over a concatenated dimension became one reduce per piece, combined", OURS),
    _rule("reduce-keeps-pieces", CONCAT_FORWARDING,
          "the reduce keeps the concatenated dimension, so splitting gains nothing", OURS),
    _rule("too-many-pieces", (CONCAT_FORWARDING, SCALARIZE_STATE),
          "more pieces than the pass's limit", OURS),
    _rule("split-gains-nothing", CONCAT_FORWARDING,
          "every user needs the whole concatenate anyway", OURS),
    _rule("empty-concatenate", CONCAT_FORWARDING, "every piece is empty", OURS),
    _rule("variadic-reduce", (CONCAT_FORWARDING, TREE_REDUCTION),
          "a reduce of several arrays at once is not regrouped or split",
          "xla/service/gpu/tree_reduction_rewriter.cc: ReductionRewriterVisitor::HandleReduce"),
    _rule("reducer-not-associative", CONCAT_FORWARDING,
          "the reducer is not one associative element-wise op of its parameters", OURS),
    _rule("reducer-not-exact", CONCAT_FORWARDING,
          "a float sum or product regrouped would round differently", OURS),
    _rule("init-not-identity", CONCAT_FORWARDING,
          "the init value is not the reducer's identity, and each piece would add it", OURS),
    _rule("state-split", SCALARIZE_STATE,
          "a concatenated loop-state element became one element per piece", OURS),
    _rule("state-not-concatenated", SCALARIZE_STATE,
          "the element is only sliced but the body does not build it by concatenation", OURS),
    _rule("state-read-whole", SCALARIZE_STATE,
          "something reads the element whole or across pieces", OURS),
    _rule("shared-loop-computation", (SCALARIZE_STATE, LOOP_UNROLL),
          "the loop's body or condition is also used by another instruction", OURS),
    _rule("unrolled", LOOP_UNROLL,
          "the loop was unrolled by the factor (completely when it is the trip count)",
          "xla/service/while_loop_unroller.cc: WhileLoopUnroller::Run"),
    _rule("data-dependent-condition", (LOOP_UNROLL, TRIP_COUNT),
          "the condition is not a compare of the counter with a constant",
          f"{_WHILE_ANALYSIS}: ComputeWhileLoopTripCount"),
    _rule("no-induction-variable", (LOOP_UNROLL, TRIP_COUNT),
          "no state element is a counter advanced by a constant",
          f"{_WHILE_ANALYSIS}: GetLoopInductionVarTupleIdx"),
    _rule("unknown-trip-count", (LOOP_UNROLL, TRIP_COUNT),
          "the counter's start or bound is not a constant",
          f"{_WHILE_ANALYSIS}: MatchTrivialLoopTripCount"),
    _rule("counter-overflow", (LOOP_UNROLL, TRIP_COUNT),
          "the counter would overflow its type before the bound",
          f"{_WHILE_ANALYSIS}: MatchTrivialLoopTripCount"),
    _rule("nested-control-flow", LOOP_UNROLL,
          "the body has a loop, conditional or call", OURS),
    _rule("body-too-large", LOOP_UNROLL,
          "the body, or its unrolled copies, exceed the instruction limit",
          "xla/service/while_loop_unroller.cc: IsLoopUnrollable (unroll instruction limits)"),
    _rule("factor-one", LOOP_UNROLL, "the chosen factor leaves the loop as it is", OURS),
    _rule("trip-count-annotated", TRIP_COUNT,
          "the loop carries its proven trip count as known_trip_count",
          "xla/service/while_loop_trip_count_annotator.cc: WhileLoopTripCountAnnotator::Run"),
    _rule("reduction-split", TREE_REDUCTION,
          "a long reduction became two nested ones (rows first, then the partial results)",
          "xla/service/gpu/tree_reduction_rewriter.cc: ReductionRewriterVisitor::HandleReduce"),
    _rule("min-max-reduction", TREE_REDUCTION,
          "min/max reductions are exact in any order and are left whole",
          "xla/service/gpu/tree_reduction_rewriter.cc: ReductionRewriterVisitor::HandleReduce"),
    _rule("non-default-layout", TREE_REDUCTION,
          "the reduce reads or writes a non-default layout",
          "xla/service/gpu/tree_reduction_rewriter.cc: ReductionRewriterVisitor::HandleReduce"),
    _rule("logistic-expanded", LOGISTIC,
          "logistic(x) became 1 / (1 + exp(-x))",
          "xla/service/logistic_expander.cc: LogisticExpander::ExpandInstruction"),
    _rule("concatenate-split", VARIADIC_SPLITTER,
          "a concatenate of too many operands became a tree of smaller ones",
          "xla/service/gpu/variadic_op_splitter.cc: SplitConcatenate"),
    # --- xla-gpu's Triton GEMM fusions (fusion/xla_gpu/gemm_fusion.py) ---------------------------
    _rule("gemm-too-small", GEMM_FUSION,
          "the dot stays a dot for the loop emitter: (non-contracting + non-contracting) x "
          "contracting elements under xla_gpu_gemm_rewrite_size_threshold (100)",
          f"{_GEMM_FUSION_CC}: GemmFusionVisitor::HandleDot; xla/service/gpu/matmul_utils.cc: "
          "IsMatrixMultiplicationTooSmallForRewriting, IsDotSupportedByClassicalEmitters"),
    _rule("gemm-not-triton", GEMM_FUSION,
          "the dot stays a library call: legacy Triton does not compute it (types, several "
          "batch dimensions, no non-contracting dimension, non-default precision)",
          f"{_GEMM_FUSION_CC}: CreateDotFusion; xla/backends/gpu/codegen/triton/"
          "support_legacy.cc: IsTritonSupportedInstruction, CanTritonHandleGEMM"),
    # --- xla-gpu's Triton normalisation fusions (fusion/xla_gpu/softmax_rewriter.py) ------------
    _rule("triton-unsupported", GPU_PRIORITY,
          "not fused into or out of a Triton fusion: an instruction of the producer or the "
          "consumer is one Triton does not emit",
          f"{_GPU}transforms/priority_fusion.cc: PriorityFusionQueue::CanFuseTriton; "
          "xla/backends/gpu/codegen/triton/support.cc: IsTritonSupportedInstruction"),
    _rule("triton-not-fusible", GPU_PRIORITY,
          "not fused into or out of a Triton fusion: the other side is not fusible",
          f"{_GPU}transforms/priority_fusion.cc: PriorityFusionQueue::CanFuseTriton, "
          "IsFusible"),
    # --- xla-gpu's loop simplification before fusion ---------------------------------------
    _rule("repeated-state", WHILE_SIMPLIFIER,
          "loop elements that start as one instruction and pass through are read as one",
          f"{_WHILE_SIMPLIFIER_CC}: TryRemoveRepeatedWhileTupleIndices"),
    _rule("dead-state", WHILE_SIMPLIFIER,
          "loop elements that nothing else, not the condition and nothing after the loop "
          "reads were dropped", f"{_WHILE_SIMPLIFIER_CC}: TryRemoveDeadWhileParams"),
    _rule("constant-state", WHILE_SIMPLIFIER,
          "scalar loop elements that stay the constant they start as were replaced by it",
          f"{_WHILE_SIMPLIFIER_CC}: TryPropagateConstant"),
    _rule("merged-induction-variables", WHILE_SIMPLIFIER,
          "integer loop elements advanced by a constant are computed from one trip counter",
          f"{_WHILE_SIMPLIFIER_CC}: TryMergeInductionVariables"),
    _rule("identity-operand", ARITHMETIC_IDENTITIES,
          "A + 0 and A * 1 became A",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: "
          "AlgebraicSimplifierVisitor::HandleAdd/HandleMultiply"),
    _rule("pred-product-select", ARITHMETIC_IDENTITIES,
          "convert(p) * A of a pred p became select(p, A, 0)",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: "
          "AlgebraicSimplifierVisitor::HandleMultiply"),
    _rule("min-max-clamp", ARITHMETIC_IDENTITIES,
          "max(lo, min(x, hi)) or min(hi, max(x, lo)) with constant bounds lo < hi became "
          "clamp(lo, x, hi)",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: "
          "AlgebraicSimplifierVisitor::HandleMaximum/HandleMinimum (MinMaxToClamp)"),
    _rule("broadcast-iota", ARITHMETIC_IDENTITIES,
          "broadcast(iota) became an iota of the broadcast shape",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: "
          "AlgebraicSimplifierVisitor::HandleBroadcast"),
    _rule("sink-broadcast", ARITHMETIC_IDENTITIES,
          "an element-wise op whose operands are all broadcasts of scalars or of one shape "
          "along the same dimensions became the op on the broadcasts' operands, broadcast once",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: "
          "AlgebraicSimplifierVisitor::HandleBroadcast, TryToSinkBroadcastAfterElementwiseOps"),
    _rule("slice-of-reshape", ARITHMETIC_IDENTITIES,
          "an unstrided slice of a reshape's leading rows became a reshape of a slice of the "
          "reshape's operand",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: "
          "AlgebraicSimplifierVisitor::HandleSlice, TryToReorderSliceAndReshape"),
    _rule("add-of-zero-update", ARITHMETIC_IDENTITIES,
          "the sum of A and a dynamic-update-slice of a broadcast zero became a "
          "dynamic-update-slice of A with the window of A plus the update",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: "
          "AlgebraicSimplifierVisitor::HandleAdd"),
    _rule("concatenate-as-pad", ARITHMETIC_IDENTITIES,
          "a concatenate of two operands, one a broadcast scalar, became a pad of the other "
          "with the scalar",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: "
          "AlgebraicSimplifierVisitor::HandleConcatenate"),
    _rule("constant-product", ARITHMETIC_IDENTITIES,
          "(A * C1) * C2 of constants, or of broadcasts of rank-0 constants, became "
          "A * (C1 * C2)",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: "
          "AlgebraicSimplifierVisitor::HandleMultiply"),
    _rule("constant-sum", ARITHMETIC_IDENTITIES,
          "(A + C1) + C2 of constants, or of broadcasts of rank-0 constants, became "
          "A + (C1 + C2)",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: "
          "AlgebraicSimplifierVisitor::HandleAdd"),
    _rule("divide-by-constant", ARITHMETIC_IDENTITIES,
          "a floating-point A / C of a constant C, or of a broadcast of one, became "
          "A * (1 / C)",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: "
          "AlgebraicSimplifierVisitor::HandleDivide"),
    _rule("subtract-constant", ARITHMETIC_IDENTITIES,
          "A - C of a constant C became A + (-C)",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: "
          "AlgebraicSimplifierVisitor::HandleSubtract"),
    _rule("sink-rearrange", RESHAPE_MOVER,
          "an element-wise op of equivalent reshapes or transposes (other operands constants "
          "or cheaply rearranged broadcasts) became the op on their operands, rearranged once",
          "xla/hlo/transforms/simplifiers/reshape_mover.cc: ReshapeMover::"
          "IsReshapeMoveCandidate, TryReshapeMoveOnCandidates, SinkRearrangeOperands"),
    _rule("folded-constant", CONSTANT_FOLDING,
          "an instruction of constants, broadcast constants and iotas (one operand a "
          "constant) became its value",
          "xla/hlo/transforms/simplifiers/hlo_constant_folding.cc: HloConstantFolding::Run, "
          "AllOperandsConstantOrBroadcastConstant, IsFoldable"),
    _rule("canonical-dot", DOT_DECOMPOSER,
          "a dot not in canonical form became transposes and reshapes around a canonical one",
          "xla/hlo/transforms/expanders/dot_decomposer.cc: CanonicalizeDot"),
    _rule("batched-gather-scatter-normalized", BATCHED_GATHER_SCATTER,
          "a gather or scatter with batching dimensions became one without, an iota index "
          "column per batching dimension concatenated in front of its indices",
          "xla/service/batched_gather_scatter_normalizer.cc: NormalizeBatchGather, "
          "NormalizeBatchScatter, CreateConcatIndices"),
    _rule("gather-simplified", GATHER_SIMPLIFIER,
          "a gather not in canonical form became one with indices [N, k] that keeps every "
          "slice dimension, with transposes and reshapes around it",
          "xla/service/gather_simplifier.cc: GatherSimplifier::ExpandInstruction"),
    _rule("scatter-simplified", SCATTER_SIMPLIFIER,
          "a scatter not in canonical form became one with indices [N, k], updates "
          "[N, window...] and no inserted window dimensions",
          "xla/service/scatter_simplifier.cc: ScatterSimplifier::ExpandInstruction, "
          "FlattenAndTransposeUpdates"),
    _rule("simple-scatter-expanded", SCATTER_EXPANDER,
          "a scatter of one constant index became a dynamic-update-slice of the operand's "
          "window combined with the update (the loop of one iteration, the map and the "
          "validity check folded away as XLA's later passes fold them)",
          "xla/service/scatter_expander.cc: ScatterExpander::ExpandInstruction, "
          "ScatterLoopBody (kEliminateSimpleScatters); AlgebraicSimplifierVisitor::HandleMap"),
    _rule("reduce-of-reduce", REDUCE_MERGER,
          "a reduce of a reduce with an identical initial value and an equivalent reducer "
          "became one reduce over both reduces' dimensions",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: "
          "AlgebraicSimplifierVisitor::HandleReduce, MergeReduces, "
          "ReductionComputationsEquivalent"),
    _rule("dot-to-reduce", DOT_STRENGTH_REDUCTION,
          "a small dot with a vector operand became a multiply and a reduce",
          "xla/backends/gpu/transforms/dot_strength_reduction.cc: "
          "DotStrengthReduction::InstructionMatchesPattern"),
    _rule("pred-index", CONDITIONAL_PRED_INDEX,
          "a two-branch conditional on convert(p) of a pred became a conditional on p, its "
          "branches swapped",
          "xla/hlo/transforms/simplifiers/algebraic_simplifier.cc: AlgebraicSimplifier (the "
          "\"algsimp\" step of XLA's per-pass dump)"),
    _rule("known-branch", CONDITIONAL_SIMPLIFIER,
          "a conditional with one branch or a constant index became that branch, inlined",
          "xla/service/conditional_simplifier.cc: ConditionalSimplifier::TryRemoveConditional"),
    _rule("select-branches", CONDITIONAL_SIMPLIFIER,
          "a two-branch pred conditional with cheap, non-empty branches became both branches "
          "and a select",
          "xla/service/conditional_simplifier.cc: ConditionalSimplifier::TryRemoveConditional"),
    _rule("select-chain", CONDITIONAL_SIMPLIFIER,
          "(max) a conditional on an s32 index with cheap, non-empty branches became every "
          "branch and a chain of selects on the index", OURS),
    _rule("copy-inserted", COPY_INSERTION,
          "a copy XLA's copy insertion leaves: loop state from a read-only value or one read "
          "after the loop, a state element rewritten while still read, an in-place base still "
          "read, a parameter, constant or repeated buffer in the entry's result",
          "xla/service/copy_insertion.cc: AddCopiesForWhile, IndicesToCopyForWhile, "
          "AddCopiesForInPlaceOperation, AddSpecialCaseCopies, CopyRemover (with "
          "xla/service/gpu/buffer_sharing.cc: FusionCanShareBufferHint)"),
    _rule("copy-fused", COPY_FUSION,
          "a copy of an element-wise fusion's output in the entry became an extra output of "
          "the fusion", "xla/service/gpu/transforms/copy_fusion.cc: CopyFusion::DoCopyFusion"),
    _rule("convert-chain", FP_CONVERSIONS,
          "a chain of floating-point converts became one convert, or none",
          "xla/hlo/transforms/simplifiers/simplify_fp_conversions.cc: "
          "SimplifyFPConversions (gpu_compiler.cc, with xla_allow_excess_precision)"),
)

RULES: dict[str, Rule] = {rule.id: rule for rule in CATALOGUE}
assert len(RULES) == len(CATALOGUE), "a rule id is listed twice"


def catalogue_text() -> str:
    """The catalogue as `hlofuse explain --rules` prints it: one block per rule."""
    lines: list[str] = []
    for rule in sorted(CATALOGUE, key=lambda r: (r.passes[0], r.id)):
        lines.append(f"{rule.id}  [{', '.join(rule.passes)}]")
        lines.append(f"    {rule.meaning}")
        lines.append(f"    follows: {rule.xla}")
    return "\n".join(lines) + "\n"
