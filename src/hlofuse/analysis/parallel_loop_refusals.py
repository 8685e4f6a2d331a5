"""What the parallel-loop analysis refuses: the rule ids of its refusals (the decision log's
words), the Refusal it returns, and the structural checks made before any lane is looked at
(a tuple of arrays as loop state, a tuple root, only ops lane code can compute)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from hlofuse.analysis.lane_linalg import is_lane_linalg, is_small_dot
from hlofuse.analysis.nested_loop_states import with_tupled_nested_states
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import ELEMENTWISE_OPS, FusionKind, Op, OpKind

# Rule ids of a refusal (the decision log's words).
STATE_NOT_TUPLE = "whole-loop-state-not-tuple"
NO_PARALLEL_DIMENSION = "whole-loop-no-parallel-dimension"
OPAQUE_OP = "whole-loop-opaque-op"
NESTED_CONTROL_FLOW = "whole-loop-nested-control-flow"
DATA_DEPENDENT_TRIP_COUNT = "whole-loop-data-dependent-trip-count"
STATE_TOO_LARGE = "whole-loop-state-too-large"

# Ops lane and uniform code compute element by element (besides the element-wise ones).
_STRUCTURAL = frozenset({
    Op.BITCAST, Op.BROADCAST, Op.CONCATENATE, Op.CONSTANT, Op.COPY, Op.DYNAMIC_SLICE,
    Op.DYNAMIC_UPDATE_SLICE, Op.GATHER, Op.GET_TUPLE_ELEMENT, Op.IOTA, Op.PAD, Op.PARAMETER,
    Op.REDUCE, Op.REDUCE_WINDOW, Op.RESHAPE, Op.REVERSE, Op.SCATTER, Op.SLICE, Op.TRANSPOSE,
    Op.TUPLE,
})


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a loop is not parallel: a rule id, the first offending instruction, a message."""

    rule: str
    instruction: Instruction
    message: str
    figures: Mapping[str, int | str] = field(default_factory=lambda: MappingProxyType({}))
    # Per-lane elements that uniform code needs whole (candidates to make uniform).
    demotable: frozenset[int] = frozenset()


def check_structure(loop: Instruction) -> Refusal | None:
    """A tuple of arrays as state, a tuple root, and only ops lane code can compute."""
    shape = loop.shape
    if not shape.is_tuple or any(not e.is_array for e in shape.elements):
        return Refusal(STATE_NOT_TUPLE, loop,
                       f"%{loop.name}: whole-loop fusion needs a tuple of arrays as loop state, "
                       f"not {shape.text(False)}")
    condition, body = loop.calls
    if body.root.op is not Op.TUPLE:
        return Refusal(STATE_NOT_TUPLE, body.root,
                       f"%{loop.name}: its body's root %{body.root.name} is not a tuple")
    for comp in (condition, body):
        param = comp.parameters[0]
        for inst in comp.instructions:
            refusal = _op_refusal(loop, inst)
            # A nested loop is named as such even when it takes the whole state.
            if refusal is not None and refusal.rule == NESTED_CONTROL_FLOW:
                return refusal
            if any(o is param for o in inst.operands) and inst.op is not Op.GET_TUPLE_ELEMENT:
                return Refusal(STATE_NOT_TUPLE, inst,
                               f"%{loop.name}: %{inst.name} uses the whole loop state, not "
                               "its elements")
            if refusal is not None:
                return refusal
    return None


def _op_refusal(loop: Instruction, inst: Instruction) -> Refusal | None:
    if inst.op is Op.FUSION and inst.attrs.get("kind") == FusionKind.CUSTOM:
        return Refusal(NESTED_CONTROL_FLOW, inst,
                       f"%{loop.name}: its body runs %{inst.name}, a loop fused into a kernel "
                       "of its own whose trip count is not a small constant (only those are "
                       "unrolled into the lane's kernel)")
    if inst.op is Op.WHILE:
        return _nested_loop_refusal(loop, inst)
    if inst.op.definition.kind is OpKind.CONTROL:
        return Refusal(NESTED_CONTROL_FLOW, inst,
                       f"%{loop.name}: its body runs {inst.op.text} %{inst.name}; lane code "
                       "runs nested while loops, not other control flow")
    if inst.op in ELEMENTWISE_OPS or inst.op in _STRUCTURAL:
        return None
    if inst.op is Op.DOT and is_small_dot(inst):
        return None
    if is_lane_linalg(inst):
        return None
    return Refusal(OPAQUE_OP, inst,
                   f"%{loop.name}: {inst.op.text} %{inst.name} is opaque (a library call or "
                   "an op without element-wise code); the loop cannot become one kernel")


def _nested_loop_refusal(loop: Instruction, nested: Instruction) -> Refusal | None:
    """A nested while runs inside lane code when it has the structure of a loop that can be
    one kernel itself; what it computes is planned with the lanes (parallel_loop.py)."""
    refusal = check_structure(with_tupled_nested_states(nested))
    if refusal is None:
        return None
    return Refusal(refusal.rule, refusal.instruction,
                   f"%{loop.name}: in its nested loop %{nested.name}: {refusal.message}",
                   refusal.figures)
