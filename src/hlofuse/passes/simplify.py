"""Algebraic simplification before fusion (the part of XLA's AlgebraicSimplifier and
HloConstantFolding that moves fusion barriers).

Each rule is a small function from an instruction (with already simplified operands) to a
replacement or None; the first rule that applies wins, and the replacement is offered to the
rules again, so chains collapse in one run:

- no-op reshape, bitcast, broadcast, transpose, slice, convert -> the operand;
- reshape of reshape, broadcast of broadcast, transpose of transpose, slice of slice -> one op;
- reshape of a broadcast scalar, broadcast of a reshaped scalar -> a broadcast of the scalar;
- a reduce of dimensions of size 1 only, from the reducer's identity -> a reshape (XLA's
  HandleReduce);
- get-tuple-element of a tuple -> the element; a tuple of all elements of x in order -> x;
- a slice of a concatenate that falls inside one operand -> a slice of that operand (only
  when the slice sees the concatenate: never through a while loop's state, as in XLA);
- an instruction whose operands are all constants and whose result has at most
  `max_folded_elements` elements -> a constant computed by the reference interpreter
  (broadcast and iota are never folded: XLA keeps them, big constants are not fusible);
- and/or of booleans with a constant operand: x | false, x & true -> x; x | true -> true,
  x & false -> false (XLA's HandleOr / HandleAnd);
- a float compare that no value can satisfy, x > +inf or x < -inf (NaN and inf included;
  not under TOTALORDER, where NaN sorts past the infinities) -> false. A packed state tested
  against a row of bounds, with +inf for the unbounded components (CartPole's velocities),
  leaves these behind once `concat-forwarding` splits the test per component.

What it leaves alone: arithmetic identities (x*1, x+0), reassociation, anything that could
change a floating-point result. Dead instructions are left for `dce`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hlofuse.analysis.reducers import is_identity, reducer_op
from hlofuse.ir.attrs import SliceDim
from hlofuse.ir.builder import NameUniquer
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op, OpKind
from hlofuse.ir.shapes import Shape, default_layout
from hlofuse.passes.dce import has_side_effect
from hlofuse.passes.rewrite import RewriteBuilder, Transform, rebuild_computation, rewrite_module
from hlofuse.reference.interpreter import Interpreter

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

Rule = Callable[[Instruction, RewriteBuilder], Instruction | None]

DEFAULT_MAX_FOLDED_ELEMENTS = 1024
_MAX_REWRITES_PER_INSTRUCTION = 8


def _layout(shape: Shape) -> tuple[int, ...]:
    return shape.layout if shape.layout is not None else default_layout(shape.rank)


def same_array_shape(a: Shape, b: Shape) -> bool:
    """Equal dims, element type and layout."""
    return a == b and _layout(a) == _layout(b)


def _slices(inst: Instruction) -> tuple[SliceDim, ...]:
    spec = inst.attrs["slice"]
    assert isinstance(spec, tuple)
    return tuple(s for s in spec if isinstance(s, SliceDim))


def _add(builder: RewriteBuilder, like: Instruction, op: Op, operands: list[Instruction],
         shape: Shape | None = None, **attrs: object) -> Instruction:
    return builder.add(op, operands, attrs=attrs, shape=shape, metadata=like.metadata)


# --- the rules ---------------------------------------------------------------------------


def noop_reshape(inst: Instruction, builder: RewriteBuilder) -> Instruction | None:
    if inst.op in (Op.RESHAPE, Op.BITCAST) and same_array_shape(inst.operands[0].shape,
                                                                inst.shape):
        return inst.operands[0]
    return None


def reshape_of_reshape(inst: Instruction, builder: RewriteBuilder) -> Instruction | None:
    if inst.op is not Op.RESHAPE or inst.operands[0].op is not Op.RESHAPE:
        return None
    return _add(builder, inst, Op.RESHAPE, [inst.operands[0].operands[0]], inst.shape)


def scalar_broadcasts(inst: Instruction, builder: RewriteBuilder) -> Instruction | None:
    """reshape(broadcast(s)) and broadcast(reshape(s)) of a rank-0 s become broadcast(s)."""
    operand = inst.operands[0] if inst.operands else None
    if operand is None or not operand.operands:
        return None
    inner = operand.operands[0]
    shapes_only = (inst.op, operand.op) in ((Op.RESHAPE, Op.BROADCAST),
                                            (Op.BROADCAST, Op.RESHAPE))
    if not shapes_only or inner.shape.rank != 0:
        return None
    return _add(builder, inst, Op.BROADCAST, [inner], inst.shape, dimensions=())


def noop_broadcast(inst: Instruction, builder: RewriteBuilder) -> Instruction | None:
    if inst.op is not Op.BROADCAST:
        return None
    operand = inst.operands[0]
    identity = inst.ints("dimensions") == tuple(range(operand.shape.rank))
    return operand if identity and same_array_shape(operand.shape, inst.shape) else None


def broadcast_of_broadcast(inst: Instruction, builder: RewriteBuilder) -> Instruction | None:
    if inst.op is not Op.BROADCAST or inst.operands[0].op is not Op.BROADCAST:
        return None
    inner = inst.operands[0]
    outer_dims = inst.ints("dimensions")
    dims = tuple(outer_dims[d] for d in inner.ints("dimensions"))
    return _add(builder, inst, Op.BROADCAST, [inner.operands[0]], inst.shape, dimensions=dims)


def noop_transpose(inst: Instruction, builder: RewriteBuilder) -> Instruction | None:
    if inst.op is Op.TRANSPOSE and inst.ints("dimensions") == tuple(range(inst.shape.rank)):
        if same_array_shape(inst.operands[0].shape, inst.shape):
            return inst.operands[0]
    return None


def transpose_of_transpose(inst: Instruction, builder: RewriteBuilder) -> Instruction | None:
    if inst.op is not Op.TRANSPOSE or inst.operands[0].op is not Op.TRANSPOSE:
        return None
    inner = inst.operands[0]
    inner_perm, outer_perm = inner.ints("dimensions"), inst.ints("dimensions")
    perm = tuple(inner_perm[p] for p in outer_perm)
    return _add(builder, inst, Op.TRANSPOSE, [inner.operands[0]], None, dimensions=perm)


def noop_slice(inst: Instruction, builder: RewriteBuilder) -> Instruction | None:
    if inst.op is not Op.SLICE:
        return None
    operand = inst.operands[0]
    full = all(s.start == 0 and s.limit == d and s.stride == 1
               for s, d in zip(_slices(inst), operand.shape.dims))
    return operand if full else None


def slice_of_slice(inst: Instruction, builder: RewriteBuilder) -> Instruction | None:
    if inst.op is not Op.SLICE or inst.operands[0].op is not Op.SLICE:
        return None
    inner = inst.operands[0]
    merged = []
    for outer_dim, inner_dim, size in zip(_slices(inst), _slices(inner), inst.shape.dims):
        start = inner_dim.start + outer_dim.start * inner_dim.stride
        stride = inner_dim.stride * outer_dim.stride
        limit = start + (size - 1) * stride + 1 if size else start
        merged.append(SliceDim(start, limit, stride))
    return _add(builder, inst, Op.SLICE, [inner.operands[0]], None, slice=tuple(merged))


def slice_of_concatenate(inst: Instruction, builder: RewriteBuilder) -> Instruction | None:
    if inst.op is not Op.SLICE or inst.operands[0].op is not Op.CONCATENATE:
        return None
    concat = inst.operands[0]
    dim = concat.ints("dimensions")[0]
    spec = _slices(inst)
    if any(s.stride != 1 for s in spec):
        return None  # XLA only rewrites unstrided slices
    start, limit = spec[dim].start, spec[dim].limit
    offset = 0
    for part in concat.operands:
        size = part.shape.dims[dim]
        if offset <= start and limit <= offset + size and size:
            shifted = list(spec)
            shifted[dim] = SliceDim(start - offset, limit - offset)
            return _add(builder, inst, Op.SLICE, [part], None, slice=tuple(shifted))
        offset += size
    return None


def reduce_keeping_every_element(inst: Instruction, builder: RewriteBuilder
                                 ) -> Instruction | None:
    """A reduce whose result has as many elements as its operand (it reduces only dimensions
    of size 1) is a reshape: XLA's HandleReduce takes the initial value to be the reducer's
    identity and drops the reduction, so no arithmetic flushes a denormal or turns -0 into +0
    (fuzz seed 4292). XLA does so whatever the initial value; here only when it is the
    identity, where the two agree up to flushing and zero signs (any other initial value
    keeps its meaning, which the interpreter and rewrites such as concat-forwarding rely on)."""
    if inst.op is not Op.REDUCE or len(inst.operands) != 2 or inst.shape.is_tuple:
        return None
    operand, init = inst.operands
    if operand.shape.num_elements != inst.shape.num_elements:
        return None
    op = reducer_op(inst.calls[0])
    if op is None or not is_identity(init, op):
        return None
    return _add(builder, inst, Op.RESHAPE, [operand], inst.shape)


def noop_convert(inst: Instruction, builder: RewriteBuilder) -> Instruction | None:
    if inst.op in (Op.CONVERT, Op.BITCAST_CONVERT) and inst.operands[0].dtype is inst.dtype:
        return inst.operands[0]
    return None


def get_tuple_element_of_tuple(inst: Instruction, builder: RewriteBuilder
                               ) -> Instruction | None:
    if inst.op is not Op.GET_TUPLE_ELEMENT or inst.operands[0].op is not Op.TUPLE:
        return None
    index = inst.attrs["index"]
    assert isinstance(index, int)
    return inst.operands[0].operands[index]


def tuple_of_all_elements(inst: Instruction, builder: RewriteBuilder) -> Instruction | None:
    if inst.op is not Op.TUPLE or not inst.operands:
        return None
    first = inst.operands[0]
    if first.op is not Op.GET_TUPLE_ELEMENT:
        return None
    source = first.operands[0]
    if len(source.shape.elements) != len(inst.operands):
        return None
    for i, element in enumerate(inst.operands):
        if (element.op is not Op.GET_TUPLE_ELEMENT or element.operands[0] is not source
                or element.attrs["index"] != i):
            return None
    return source


def scalar_constant(inst: Instruction) -> np.ndarray | None:
    """The value of a one-element constant, or of a broadcast of one; None otherwise."""
    if inst.op is Op.BROADCAST:
        inst = inst.operands[0]
    if inst.op is not Op.CONSTANT or inst.shape.num_elements != 1:
        return None
    literal = inst.attrs["literal"]
    assert isinstance(literal, np.ndarray)
    return literal.reshape(())


def _filled(like: Instruction, value: bool, builder: RewriteBuilder) -> Instruction:
    """A pred array of `like`'s shape holding `value`: a constant broadcast as XLA keeps it."""
    scalar = builder.add(Op.CONSTANT, attrs={"literal": np.array(value)},
                         shape=Shape.array(DType.PRED, ()), metadata=like.metadata)
    if like.shape.rank == 0:
        return scalar
    return _add(builder, like, Op.BROADCAST, [scalar], like.shape, dimensions=())


def boolean_identities(inst: Instruction, builder: RewriteBuilder) -> Instruction | None:
    if inst.op not in (Op.AND, Op.OR) or not inst.dtype.is_pred:
        return None
    absorbing = inst.op is Op.OR  # true absorbs or, false absorbs and
    for i, operand in enumerate(inst.operands):
        value = scalar_constant(operand)
        if value is None:
            continue
        if bool(value) == absorbing:
            return _filled(inst, absorbing, builder)
        other = inst.operands[1 - i]
        return other if same_array_shape(other.shape, inst.shape) else None
    return None


_NEVER_TRUE = {("GT", 1, np.inf), ("LT", 1, -np.inf), ("LT", 0, np.inf), ("GT", 0, -np.inf)}


def never_true_compare(inst: Instruction, builder: RewriteBuilder) -> Instruction | None:
    if (inst.op is not Op.COMPARE or not inst.operands[0].dtype.is_float
            or inst.attrs.get("type") == "TOTALORDER"):
        return None
    direction = inst.attrs["direction"]
    for i, operand in enumerate(inst.operands):
        value = scalar_constant(operand)
        if value is not None and (direction, i, float(value)) in _NEVER_TRUE:
            return _filled(inst, False, builder)
    return None


_FOLDABLE_KINDS = (OpKind.ELEMENTWISE, OpKind.INJECTIVE, OpKind.REDUCTION)


def make_constant_folding(max_elements: int, max_broadcast_elements: int = 0) -> Rule:
    """Evaluates an instruction of constants. Broadcasts stay (XLA leaves them, so that a
    large splat is not materialised) unless at most `max_broadcast_elements` large."""
    def fold_constants(inst: Instruction, builder: RewriteBuilder) -> Instruction | None:
        if not inst.operands:
            return None
        for operand in inst.operands:  # the cheapest test, and the one that fails most
            if operand.op is not Op.CONSTANT:
                return None
        if inst.definition.kind not in _FOLDABLE_KINDS or has_side_effect(inst):
            return None
        if inst.op is Op.BROADCAST and inst.shape.num_elements > max_broadcast_elements:
            return None
        if not inst.shape.is_array or inst.shape.num_elements > max_elements:
            return None
        operands = tuple(dict.fromkeys(inst.operands))
        comp = Computation("constant_folding", operands + (inst,), inst)
        value = Interpreter().run(comp, [])
        assert isinstance(value, np.ndarray)
        literal = np.asarray(value, dtype=inst.dtype.numpy).reshape(inst.shape.dims)
        return builder.add(Op.CONSTANT, attrs={"literal": literal}, shape=inst.shape,
                           metadata=inst.metadata)

    return fold_constants


STRUCTURAL_RULES: tuple[Rule, ...] = (
    noop_reshape, noop_broadcast, noop_transpose, noop_slice, noop_convert,
    get_tuple_element_of_tuple, tuple_of_all_elements, scalar_broadcasts, reshape_of_reshape,
    broadcast_of_broadcast, transpose_of_transpose, slice_of_slice, slice_of_concatenate,
    boolean_identities, never_true_compare, reduce_keeping_every_element,
)


@dataclass(frozen=True, slots=True)
class AlgebraicSimplifier:
    """Removes no-op data movement, merges chains, folds small constants."""

    name: ClassVar[str] = "simplify"
    max_folded_elements: int = DEFAULT_MAX_FOLDED_ELEMENTS

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        transform = _simplifying(self.max_folded_elements)
        return rewrite_module(module, lambda comp: transform)


def simplify_computation(comp: Computation, names: NameUniquer,
                         max_folded_elements: int = DEFAULT_MAX_FOLDED_ELEMENTS,
                         max_broadcast_elements: int = 0) -> Computation:
    """`comp` simplified on its own (a computation built inside a pass, such as a loop body
    whose nested loops were unrolled: their counters and round constants fold)."""
    transform = _simplifying(max_folded_elements, max_broadcast_elements)
    simplified, _ = rebuild_computation(comp, transform, names, {})
    return simplified


# The ops each structural rule can rewrite (each returns None for any other op at once): the
# rules an instruction is offered are those of its op, in STRUCTURAL_RULES's order, so the
# first that applies is the same one as when every rule is asked.
_RULE_OPS: dict[Rule, frozenset[Op]] = {
    noop_reshape: frozenset({Op.RESHAPE, Op.BITCAST}),
    noop_broadcast: frozenset({Op.BROADCAST}),
    noop_transpose: frozenset({Op.TRANSPOSE}),
    noop_slice: frozenset({Op.SLICE}),
    noop_convert: frozenset({Op.CONVERT, Op.BITCAST_CONVERT}),
    get_tuple_element_of_tuple: frozenset({Op.GET_TUPLE_ELEMENT}),
    tuple_of_all_elements: frozenset({Op.TUPLE}),
    scalar_broadcasts: frozenset({Op.RESHAPE, Op.BROADCAST}),
    reshape_of_reshape: frozenset({Op.RESHAPE}),
    broadcast_of_broadcast: frozenset({Op.BROADCAST}),
    transpose_of_transpose: frozenset({Op.TRANSPOSE}),
    slice_of_slice: frozenset({Op.SLICE}),
    slice_of_concatenate: frozenset({Op.SLICE}),
    boolean_identities: frozenset({Op.AND, Op.OR}),
    never_true_compare: frozenset({Op.COMPARE}),
    reduce_keeping_every_element: frozenset({Op.REDUCE}),
}


def _rules_by_op(folding: Rule) -> dict[Op, tuple[Rule, ...]]:
    """Per op, the rules that can rewrite an instruction of it, in order: the structural ones
    that name the op, then constant folding if the op's kind is foldable."""
    return {op: tuple(rule for rule in STRUCTURAL_RULES if op in _RULE_OPS[rule])
            + ((folding,) if op.definition.kind in _FOLDABLE_KINDS else ())
            for op in Op}


def _simplifying(max_folded_elements: int, max_broadcast_elements: int = 0) -> Transform:
    rules_of = _rules_by_op(make_constant_folding(max_folded_elements,
                                                  max_broadcast_elements))

    def transform(inst: Instruction, operands: tuple[Instruction, ...],
                  builder: RewriteBuilder) -> Instruction | None:
        rules = rules_of[inst.op]
        if not rules:
            return None
        current = inst if _same(operands, inst.operands) else _with_operands(inst, operands)
        replaced = False
        for _ in range(_MAX_REWRITES_PER_INSTRUCTION):
            result = _first_rewrite(rules, current, builder)
            if result is None:
                break
            current, replaced = result, True
            rules = rules_of[current.op]
        return current if replaced else None

    return transform


def _first_rewrite(rules: tuple[Rule, ...], inst: Instruction,
                   builder: RewriteBuilder) -> Instruction | None:
    for rule in rules:
        result = rule(inst, builder)
        if result is not None:
            return result
    return None


def _same(a: tuple[Instruction, ...], b: tuple[Instruction, ...]) -> bool:
    return a == b  # instructions compare by identity: one C loop


def _with_operands(inst: Instruction, operands: tuple[Instruction, ...]) -> Instruction:
    """A stand-in with the rewritten operands for the rules to look at (never inserted)."""
    return Instruction(inst.name, inst.op, operands, inst.shape, inst.attrs, inst.calls,
                       inst.metadata, inst.extra)
