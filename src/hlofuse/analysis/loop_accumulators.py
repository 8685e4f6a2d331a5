"""Accumulators of a parallel loop: uniform scalar elements updated only as
`acc <op> reduce(x, <op>)` with x per-lane, an associative and commutative op and its
identity as the reduce's initial value, read nowhere else (CartPole's episode count and
return sum). Each lane keeps a partial result, combined at the end in a fixed order."""

from __future__ import annotations

from dataclasses import dataclass

from hlofuse.analysis.lane_classification import LaneClassification, element_read
from hlofuse.analysis.reducers import ASSOCIATIVE_OPS, identity, is_identity, reducer_op
from hlofuse.ir.builder import ComputationBuilder
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape


@dataclass(frozen=True, slots=True)
class Accumulator:
    """A uniform scalar element updated as `element <op> reduce(x1) <op> reduce(x2) ...`.

    Each reduce runs `op` over all dimensions of a per-lane value from the op's
    identity; with one lane, a reduce of a one-element value is the reshape to a scalar that
    XLA's simplifier makes of it (`one_element_reshape`), and stands for it here. `combines`
    are the `op` instructions joining them with the element (several after unrolling), the
    last one being the element's new value. `reducer` and `identity` are a reduce's (or, with
    reshapes only, made here: `(a, b) -> op(a, b)` and the op's identity).
    """

    element: int
    op: Op
    reduces: tuple[Instruction, ...]
    combines: tuple[Instruction, ...]
    reducer: Computation
    identity: Instruction

    @property
    def operands(self) -> tuple[Instruction, ...]:
        return tuple(r.operands[0] for r in self.reduces)


def one_element_reshape(inst: Instruction) -> bool:
    """A reshape of a one-element array to a scalar: what XLA's simplifier leaves of a reduce
    whose result keeps every element (`passes/simplify.reduce_keeping_every_element`), so with
    one lane the sum over the lanes of a per-lane scalar."""
    return inst.op is Op.RESHAPE and inst.shape.is_array and not inst.shape.dims \
        and inst.operands[0].shape.num_elements == 1


def _reducer_and_identity(op: Op, dtype: DType) -> tuple[Computation, Instruction]:
    """`(a, b) -> op(a, b)` over `dtype` scalars, and the op's identity as a constant."""
    builder = ComputationBuilder(f"accumulate_{op.text}")
    scalar = Shape.scalar(dtype)
    builder.add(op, [builder.parameter(0, scalar), builder.parameter(1, scalar)])
    start = identity(op, dtype)
    assert start is not None, (op, dtype)
    constants = ComputationBuilder("identity")
    return builder.build(), constants.constant(start, dtype)


def find_accumulators(lanes: LaneClassification) -> list[Accumulator]:
    """The loop's accumulators, among its uniform scalar elements (after `lanes.classify()`)."""
    out = []
    for i, shape in enumerate(lanes.loop.shape.elements):
        if i in lanes.per_lane or shape.dims:
            continue
        found = _accumulator(lanes, i)
        if found is not None:
            out.append(found)
            for r in found.reduces:
                lanes.record_generated(r.operands[0])
    return out


def _accumulator(lanes: LaneClassification, element: int) -> Accumulator | None:
    top = lanes.body.root.operands[element]
    op = top.op
    if op not in ASSOCIATIVE_OPS or sum(1 for o in lanes.body.root.operands if o is top) != 1:
        return None
    combines: list[Instruction] = []
    leaves: list[Instruction] = []
    stack = [top]
    while stack:
        node = stack.pop()
        if node.op is op and not node.shape.dims and (node is top or len(
                lanes.users.get(id(node), [])) == 1):
            combines.append(node)
            stack.extend(node.operands)
        else:
            leaves.append(node)
    reads = [leaf for leaf in leaves if element_read(leaf) == element]
    reduces = [leaf for leaf in leaves if element_read(leaf) != element]
    if len(reads) != 1 or not reduces:
        return None
    if not all(_is_accumulated_reduce(lanes, r, op) for r in reduces):
        return None
    inside = {id(c) for c in combines}
    if not all(all(id(u) in inside for u in lanes.users.get(id(leaf), []))
               for leaf in [*leaves, *combines[1:]]):
        return None
    if not all(u is lanes.body.root for u in lanes.users.get(id(top), [])):
        return None
    if any(element_read(inst) == element for inst in lanes.condition.instructions):
        return None
    if any(element_read(inst) == element and inst is not reads[0]
           for inst in lanes.body.instructions):
        return None
    if len({id(r) for r in reduces}) != len(reduces):
        return None
    combines.reverse()
    proper = [r for r in reduces if r.op is Op.REDUCE]
    if proper:
        reducer, start = proper[0].calls[0], proper[0].operands[1]
    else:
        reducer, start = _reducer_and_identity(op, top.dtype)
    return Accumulator(element, op, tuple(reduces), tuple(combines), reducer, start)


def _is_accumulated_reduce(lanes: LaneClassification, reduce: Instruction, op: Op) -> bool:
    if lanes.size == 1 and one_element_reshape(reduce):
        return id(reduce.operands[0]) in lanes.dependent and identity(op, reduce.dtype) \
            is not None
    return full_lane_reduce_op(lanes, reduce) is op


def full_lane_reduce_op(lanes: LaneClassification, reduce: Instruction) -> Op | None:
    """The op of `reduce` when it reduces a per-lane value (state-dependent, or generated per
    lane: a step's draws) over all its dimensions with an associative and commutative op,
    from that op's identity (its result needs every lane)."""
    if reduce.op is not Op.REDUCE or len(reduce.operands) != 2:
        return None
    operand, init = reduce.operands
    if id(init) in lanes.dependent or (id(operand) not in lanes.dependent
                                       and lanes.generated_lane_dim(operand) is None):
        return None
    if sorted(reduce.ints("dimensions")) != list(range(operand.shape.rank)):
        return None
    op = reducer_op(reduce.calls[0])
    if op is None or op not in ASSOCIATIVE_OPS or not is_identity(init, op):
        return None
    return op
