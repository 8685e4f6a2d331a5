"""The legality rules shared by the fusion passes, each a small named function returning a
FusionDecision whose refusal names both instructions, the rule id and its figures.

Order and content follow XLA's 2022 GPU code: `IsProducerConsumerFusible` and
`FusionFitsInBudget` (gpu_fusible.cc), `InstructionFusion::ShouldFuse` and
`ShouldFuseInPlaceOp` (instruction_fusion.cc), and `GpuInstructionFusion::ShouldFuse`.

Rule ids of barriers name what the user wrote rather than the check that failed: a custom
call, a tuple, a while loop or a dot is "not loop-fusible" to XLA, and `custom-call`,
`tuple-boundary`, `control-flow-boundary` and `library-call` here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hlofuse.fusion.graphs.graph import Node
from hlofuse.fusion.legality.emission_counts import indexing_evaluation, real_user_count
from hlofuse.fusion.legality.properties import (
    ALLOWED_CODE_DUPLICATION,
    MAX_OPERANDS_AND_OUTPUTS_PER_FUSION,
    MAX_UNNESTED_REDUCTIONS_PER_FUSION,
    SHARED_MEMORY_BUDGET_BYTES,
    constant_int,
    extract_instruction,
    has_side_effect,
    in_place_operands,
    is_always_duplicable,
    is_effective_scalar,
    is_elementwise,
    is_expensive,
    is_fusible,
    is_input_fusible,
    is_input_fusible_reduction,
    is_loop_fusible,
    is_physically_transposing,
    reads_elements_multiple_times,
    reuses_operand_elements,
    scatter_fusion_refusal,
    shared_memory_usage,
    subshape_count,
    unnested_reduction_count,
)
from hlofuse.ir.ops import Op, OpKind
from hlofuse.passes.decision_log import Figure, FusionDecision


@dataclass(frozen=True, slots=True)
class FusionOptions:
    """Knobs of the vertical fusion rules."""

    may_duplicate: bool = True
    relax_concatenate: bool = False


OK = FusionDecision.yes()


def refuse(rule: str, producer: Node, consumer: Node, reason: str,
           **figures: Figure) -> FusionDecision:
    return FusionDecision.no(rule, f"cannot fuse %{producer.name} into %{consumer.name}: "
                             f"{reason}", **figures)


def barrier(node: Node) -> tuple[str, str]:
    """(rule id, reason) for an instruction that cannot take part in a loop fusion."""
    op = node.op
    if op in (Op.WHILE, Op.CONDITIONAL, Op.CALL):
        return ("control-flow-boundary",
                f"{op.text} %{node.name} runs other computations; fusion stops at its boundary")
    if has_side_effect(node):
        return "side-effect", f"{op.text} %{node.name} has side effects"
    if op is Op.CUSTOM_CALL:
        target = node.attrs.get("custom_call_target", "")
        return "custom-call", f"custom-call %{node.name} ({target}) is an opaque library call"
    if op in (Op.TUPLE, Op.GET_TUPLE_ELEMENT):
        return ("tuple-boundary",
                f"{op.text} %{node.name} only moves buffers; values passing through it are "
                "materialized")
    if op is Op.OPT_BARRIER:
        return "optimization-barrier", f"%{node.name} is an optimization barrier"
    if op.definition.kind is OpKind.OPAQUE:
        # XLA's GPU backend calls cuSOLVER for cholesky, cuBLAS for dot and triangular-solve.
        library = "cuSOLVER" if op is Op.CHOLESKY else "cuBLAS"
        return "library-call", f"{op.text} %{node.name} is a library call ({library} in XLA)"
    if op is Op.REDUCE:
        kind = "variadic reduce" if node.shape.is_tuple else "tiled reduction"
        return ("reduction-not-at-root",
                f"%{node.name} is a {kind}; it can only be the root (hero) of a fusion")
    if op is Op.FUSION:
        return "not-loop-fusible", f"%{node.name} is a {node.kind} fusion"
    return "not-loop-fusible", f"{op.text} %{node.name} is not loop-fusible"


# --- IsProducerConsumerFusible ----------------------------------------------------------


def producer_is_loop_fusible(producer: Node, consumer: Node) -> FusionDecision:
    if is_loop_fusible(producer):
        return OK
    rule, reason = barrier(producer)
    return refuse(rule, producer, consumer, reason)


def consumer_is_fusible(producer: Node, consumer: Node) -> FusionDecision:
    if is_input_fusible(consumer) or is_loop_fusible(consumer):
        return OK
    rule, reason = barrier(consumer)
    return refuse(rule, producer, consumer, reason)


def producer_is_not_multi_output(producer: Node, consumer: Node) -> FusionDecision:
    if producer.is_multi_output_fusion:
        return refuse("multi-output-producer", producer, consumer,
                      "the producer is a multi-output fusion")
    return OK


def creates_nested_loop(producer: Node, consumer: Node) -> bool:
    """CreatesNestedLoop (2022): a re-reading producer under a re-reading consumer."""
    # Only reduces, reduce-windows and gathers re-read (`graph.SPECIAL_OPS`).
    producer_loops = (any(reads_elements_multiple_times(n) for n in producer.fused.special_nodes)
                      if producer.is_fusion else reads_elements_multiple_times(producer))
    if not producer_loops:
        return False
    if not consumer.is_fusion:
        return reads_elements_multiple_times(consumer)
    param = consumer.fused_parameter(consumer.operand_index(producer))
    stack, seen = [param], {param}
    while stack:
        node = stack.pop()
        if reads_elements_multiple_times(node):
            return True
        for user in node.users:
            if user not in seen:
                seen.add(user)
                stack.append(user)
    return False


def no_nested_loop(producer: Node, consumer: Node) -> FusionDecision:
    if creates_nested_loop(producer, consumer):
        return refuse("creates-nested-loop", producer, consumer,
                      "both read elements several times (reduce or reduce-window); fused, the "
                      "producer's loop would run inside the consumer's")
    return OK


def layouts_reduce_input_friendly(producer: Node) -> bool:
    if is_physically_transposing(producer):
        return False
    # Only copies and transposes transpose (`graph.SPECIAL_OPS`).
    return not (producer.is_fusion
                and any(is_physically_transposing(n) for n in producer.fused.special_nodes))


def reduce_input_layout_friendly(producer: Node, consumer: Node) -> FusionDecision:
    if is_input_fusible_reduction(consumer) and not layouts_reduce_input_friendly(producer):
        return refuse("transposing-producer-into-reduction", producer, consumer,
                      "the producer transposes memory; a reduction reading it would read "
                      "uncoalesced")
    return OK


def constant_is_fusible(producer: Node, consumer: Node) -> FusionDecision:
    if producer.op is not Op.CONSTANT:
        return OK
    if not is_effective_scalar(producer.shape):
        return refuse("constant-not-fused", producer, consumer,
                      f"a constant of {producer.shape.num_elements} elements stays an external "
                      "constant", elements=producer.shape.num_elements)
    if not consumer.is_fusion:
        return refuse("constant-not-fused", producer, consumer,
                      "scalar constants are only fused into existing fusions")
    return OK


def _real_operand(fusion: Node, node: Node) -> Node:
    if fusion.is_fusion and node.op is Op.PARAMETER:
        return fusion.operands[node.parameter_number]
    return node


def _slice_into_dus_is_safe(producer: Node, consumer: Node) -> bool:
    """IsSafeToFuseSliceIntoDusFusion: no other non-elementwise use of the shared buffer."""
    dus = extract_instruction(consumer, lambda n: n.op is Op.DYNAMIC_UPDATE_SLICE)
    memo: dict[Node, bool] = {}

    def nonelementwise_use(node: Node) -> bool:
        if node not in memo:
            own = node is not dus and not is_elementwise(node) and node.op is not Op.PARAMETER
            memo[node] = own or any(nonelementwise_use(u) for u in node.users)
        return memo[node]

    return not any(operand is producer and nonelementwise_use(consumer.fused_parameter(i))
                   for i, operand in enumerate(consumer.operands))


def _matching_slice_indices(producer_op: Node, producer: Node, dus: Node,
                            consumer: Node) -> bool:
    for i in range(dus.shape.rank):
        dus_index = _real_operand(consumer, dus.operands[2 + i])
        if producer_op.op is Op.SLICE:
            spec = producer_op.attrs["slice"][i]  # type: ignore[index]
            if constant_int(dus_index) != spec.start or spec.stride != 1:
                return False
        else:
            ds_index = _real_operand(producer, producer_op.operands[1 + i])
            a, b = constant_int(ds_index), constant_int(dus_index)
            if a != b or (a is None and ds_index is not dus_index):
                return False
    return True


def in_place_safe(producer: Node, consumer: Node) -> FusionDecision:
    """ShouldFuseInPlaceOp: a consumer that updates a buffer in place must not read it twice."""
    scatter_reason = scatter_fusion_refusal(producer, consumer)  # CanEmitInputFusedScatter
    if scatter_reason is not None:
        return refuse("in-place-conflict", producer, consumer, scatter_reason)
    for number in in_place_operands(consumer):
        buffer = consumer.operands[number]
        if any(i != number and o is buffer for i, o in enumerate(consumer.operands)):
            return refuse("in-place-conflict", producer, consumer,
                          "the in-place buffer is also passed as another operand")
        if is_elementwise(producer) or buffer not in producer.operands:
            continue
        dus = extract_instruction(consumer, lambda n: n.op is Op.DYNAMIC_UPDATE_SLICE)
        reader = extract_instruction(
            producer, lambda n: not n.is_fusion and not is_elementwise(n))
        if dus is None or reader is None or reader.shape != dus.operands[1].shape:
            return refuse("in-place-conflict", producer, consumer,
                          "the producer reads the buffer the consumer updates in place")
        if reader.op not in (Op.SLICE, Op.DYNAMIC_SLICE):
            return refuse("in-place-conflict", producer, consumer,
                          f"{reader.op.text} reads the buffer updated in place")
        if not _matching_slice_indices(reader, producer, dus, consumer):
            return refuse("in-place-conflict", producer, consumer,
                          "the slice and the dynamic-update-slice use different indices")
        if consumer.is_fusion and not _slice_into_dus_is_safe(producer, consumer):
            return refuse("in-place-conflict", producer, consumer,
                          "another non-elementwise op shares the in-place buffer")
        return OK
    return OK


PRODUCER_CONSUMER_RULES: tuple[Callable[[Node, Node], FusionDecision], ...] = (
    producer_is_loop_fusible, consumer_is_fusible, producer_is_not_multi_output,
    no_nested_loop, reduce_input_layout_friendly, constant_is_fusible, in_place_safe,
)


# The rules after the first two, which `should_fuse` asks itself first.
_AFTER_LOOP_FUSIBLE = PRODUCER_CONSUMER_RULES[2:]
assert PRODUCER_CONSUMER_RULES[:2] == (producer_is_loop_fusible, consumer_is_fusible)
assert PRODUCER_CONSUMER_RULES[-1] is in_place_safe


def is_producer_consumer_fusible(producer: Node, consumer: Node) -> FusionDecision:
    """IsProducerConsumerFusible (2022): the first rule that refuses, or yes."""
    for rule in PRODUCER_CONSUMER_RULES:
        decision = rule(producer, consumer)
        if not decision:
            return decision
    return OK


# --- FusionFitsInBudget -----------------------------------------------------------------


def fits_in_budget(a: Node, b: Node, is_consumer_producer: bool = False) -> FusionDecision:
    """FusionFitsInBudget: shared memory, unnested reductions, operands plus outputs."""
    smem = shared_memory_usage(a) + shared_memory_usage(b)
    if smem > SHARED_MEMORY_BUDGET_BYTES:
        return FusionDecision.no(
            "shared-memory-budget", f"%{a.name} and %{b.name} together would use {smem} B of "
            f"shared memory, over the budget of {SHARED_MEMORY_BUDGET_BYTES} B",
            shared_memory_bytes=smem, limit=SHARED_MEMORY_BUDGET_BYTES)
    reductions = unnested_reduction_count(a) + unnested_reduction_count(b)
    if reductions > MAX_UNNESTED_REDUCTIONS_PER_FUSION:
        return FusionDecision.no(
            "too-many-unnested-reductions", f"%{a.name} and %{b.name} together would hold "
            f"{reductions} tiled reductions, over {MAX_UNNESTED_REDUCTIONS_PER_FUSION}",
            reductions=reductions, limit=MAX_UNNESTED_REDUCTIONS_PER_FUSION)
    outputs = subshape_count(a.shape) + subshape_count(b.shape)
    limit = MAX_OPERANDS_AND_OUTPUTS_PER_FUSION
    if len(a.operands) + len(b.operands) - 1 + outputs <= limit:
        return OK
    operands = (set(a.operands) | set(b.operands)) - {a, b}
    if is_consumer_producer and len(operands) <= len(a.operands):
        return OK
    if len(operands) + outputs > limit:
        return FusionDecision.no(
            "too-many-operands", f"%{a.name} and %{b.name} together would have "
            f"{len(operands)} operands and {outputs} outputs, over the budget of {limit}",
            operands=len(operands), outputs=outputs, limit=limit)
    return OK


# --- InstructionFusion::ShouldFuse and GpuInstructionFusion::ShouldFuse --------------------


def producer_not_fusion(producer: Node, consumer: Node) -> FusionDecision:
    if producer.is_fusion:
        return refuse("producer-is-fusion", producer, consumer,
                      "the producer is already a fusion (instruction fusion does not merge "
                      "fusions; the fusion merger does)")
    return OK


def expensive_producer_not_reused(producer: Node, consumer: Node, index: int) -> FusionDecision:
    if is_expensive(producer) and reuses_operand_elements(consumer, index):
        return refuse("expensive-producer-reused", producer, consumer,
                      f"{producer.op.text} is expensive and {consumer.op.text} reads each of "
                      "its elements several times", op=producer.op.text)
    return OK


def producer_not_root(producer: Node, consumer: Node) -> FusionDecision:
    if producer is producer.parent.root:
        return refuse("producer-is-root", producer, consumer,
                      "the producer is the computation's root")
    return OK


def would_duplicate(producer: Node, consumer: Node) -> bool:
    return not (len(producer.users) == 1 and consumer in producer.users)


def duplication_allowed(producer: Node, consumer: Node,
                        options: FusionOptions) -> FusionDecision:
    if not would_duplicate(producer, consumer) or is_always_duplicable(producer):
        return OK
    users = len(producer.users)
    if not options.may_duplicate:
        return refuse("cannot-duplicate", producer, consumer,
                      f"the producer has {users} users and this sweep does not duplicate",
                      users=users)
    if is_expensive(producer):
        return refuse("expensive-producer-duplicated", producer, consumer,
                      f"{producer.op.text} is expensive and has {users} users; fusing would "
                      "compute it again in every consumer", users=users, op=producer.op.text)
    return OK


def code_duplication_acceptable(producer: Node, consumer: Node,
                                options: FusionOptions) -> FusionDecision:
    """CodeDuplicationTooHigh, for a consumer that is already a fusion."""
    if not consumer.is_fusion:
        return OK
    evaluation = indexing_evaluation(consumer, options.relax_concatenate)
    emitted = evaluation.emitted(producer)
    if not evaluation.too_high(producer, emitted):
        return OK
    users = real_user_count(producer)
    if emitted > ALLOWED_CODE_DUPLICATION:
        reason = (f"{producer.op.text} would be emitted {emitted} times, over "
                  f"{ALLOWED_CODE_DUPLICATION}")
    else:
        reason = (f"{producer.op.text} has {users} users and would be emitted {emitted} "
                  "time(s); it starts a new basic block, so it may only be fused with a single "
                  "user and a single index")
    return refuse("code-duplication-too-high", producer, consumer, reason, emitted=emitted,
                  users=users, op=producer.op.text, instruction=producer.name,
                  source_line=producer.source_location or "", limit=ALLOWED_CODE_DUPLICATION)


def should_fuse(consumer: Node, index: int, options: FusionOptions) -> FusionDecision:
    """GpuInstructionFusion::ShouldFuse (2022), for operand `index` of `consumer`."""
    producer = consumer.operands[index]
    # Every check must pass, so their order only decides which refusal is reported; barriers
    # (custom calls, tuples, loops, ...) are reported before the cost rule they also fail.
    # Written out rather than as a list of closures: this runs once per candidate edge.
    # Every check returns OK itself when it passes. The checks are pure: those that
    # `is_producer_consumer_fusible` repeats (its first two) or that XLA asks again after it
    # (`in_place_safe`, its last) passed already when reached, and are not asked twice.
    decision = producer_not_fusion(producer, consumer)
    if decision is OK:
        decision = producer_is_loop_fusible(producer, consumer)
    if decision is OK:
        decision = consumer_is_fusible(producer, consumer)
    if decision is OK:
        decision = expensive_producer_not_reused(producer, consumer, index)
    if decision is OK:
        for rule in _AFTER_LOOP_FUSIBLE:  # the rest of is_producer_consumer_fusible
            decision = rule(producer, consumer)
            if decision is not OK:
                break
    if decision is OK:
        decision = producer_not_root(producer, consumer)
    if decision is OK:
        decision = duplication_allowed(producer, consumer, options)
    if decision is OK:
        decision = fits_in_budget(consumer, producer, is_consumer_producer=True)
    if decision is OK:
        decision = code_duplication_acceptable(producer, consumer, options)
    return decision


def producer_is_fusible(producer: Node, consumer: Node) -> FusionDecision:
    if is_fusible(producer):
        return OK
    rule, reason = barrier(producer)
    return refuse(rule, producer, consumer, reason)
