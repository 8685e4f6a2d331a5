"""Today's `ShouldFuseInPlaceOp` for a producer that is itself the buffer its consumer updates
in place, for `xla-gpu`.

XLA's `InstructionFusion::ShouldFuseInPlaceOp` (xla/service/instruction_fusion.cc) looks at
every in-place operand of the consumer (`GetInPlaceInputOutputPairs`: a dynamic-update-slice's
base, a scatter's operands, and those of a fusion's in-place roots). The version of 2022 that
`legality/rules.py`'s `in_place_safe` follows checks only a non-element-wise producer that
*reads* that buffer; today's also checks a producer that *is* the buffer (`consumer->operand(n)
== producer`). Its non-element-wise instructions (neither element-wise, nor a bitcast, a
parameter or a fusion) decide: more than one refuses the fusion ("Producer fusion has multiple
non-elementwise ops"); with a dynamic-update-slice in the consumer (more than one refuses),
one that is not a slice or dynamic-slice refuses it ("unrecognized inplace update
non-elementwise output pair"). So a broadcast that a dynamic-update-slice updates in place
stays a kernel of its own, as XLA's priority-fusion log shows for `rollout_spring_chain`'s
`add.703`. Not modelled here: the index checks of a slice or dynamic-slice producer that is
the buffer (left to `in_place_safe`), and the reachability check for an element-wise producer
of a consumer fusion with other non-element-wise ops.
"""

from __future__ import annotations

from hlofuse.fusion.graphs.graph import Node
from hlofuse.fusion.legality.properties import in_place_operands, is_elementwise
from hlofuse.fusion.legality.rules import OK, refuse
from hlofuse.ir.ops import Op
from hlofuse.passes.decision_log import FusionDecision


def _instructions(node: Node) -> list[Node]:
    return list(node.fused.nodes) if node.is_fusion else [node]


def _non_elementwise(node: Node) -> bool:
    return (not node.is_fusion and node.op not in (Op.BITCAST, Op.PARAMETER)
            and not is_elementwise(node))


def producer_is_not_in_place_buffer(producer: Node, consumer: Node) -> FusionDecision:
    """Refuses a non-element-wise producer that is the buffer a dynamic-update-slice of the
    consumer updates in place (see the module docstring)."""
    for number in in_place_operands(consumer):
        if consumer.operands[number] is not producer:
            continue
        readers = [n for n in _instructions(producer) if _non_elementwise(n)]
        if len(readers) > 1:
            return refuse("in-place-conflict", producer, consumer,
                          "the producer of the in-place buffer has several "
                          "non-element-wise instructions")
        if not readers:
            continue
        updates = [n for n in _instructions(consumer) if n.op is Op.DYNAMIC_UPDATE_SLICE]
        if len(updates) > 1:
            return refuse("in-place-conflict", producer, consumer,
                          "the consumer has several dynamic-update-slices")
        if updates and readers[0].op not in (Op.SLICE, Op.DYNAMIC_SLICE):
            return refuse("in-place-conflict", producer, consumer,
                          f"{readers[0].op.text} is the buffer a dynamic-update-slice "
                          "updates in place")
    return OK
