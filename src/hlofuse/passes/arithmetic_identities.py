"""arithmetic-identities: `A + 0 -> A` and `A * 1 -> A` (either operand order), `convert(p) * A ->
select(p, A, 0)` for a pred p, and `max(lo, min(x, hi))` or `min(hi, max(x, lo))` -> `clamp(lo,
x, hi)`, `A - C -> A + (-C)` for a constant C, `(A * C1) * C2 -> A * (C1 * C2)`,
`(A + C1) + C2 -> A + (C1 + C2)`, `A / C -> A * (1 / C)` for a floating-point constant C, and
`broadcast(iota) -> iota`, an element-wise op of broadcasts as a broadcast of the op, a slice
of the leading rows of a reshape as a reshape of a slice, and a concatenate of an operand and a
broadcast scalar as a pad, for `xla-gpu`.

XLA's AlgebraicSimplifier removes the first two (AlgebraicSimplifierVisitor::HandleAdd, "A + 0
=> A" and "0 + A => A"; HandleMultiply, "A*1 => A" and "1*A => A"), where the zero or one is a
constant or a broadcast of a one-element constant and the result has the other operand's shape.
Its HandleMultiply also turns a product with a pred converted to a number into a select of the
other operand and zeros (either operand order; XLA's per-pass dump of the corpus program `mlp`
shows `multiply(convert(eq), sub)` become `select(eq, sub, broadcast(0))` in the "algsimp"
step). Its HandleMaximum and HandleMinimum (MinMaxToClamp) turn a maximum of a broadcast
constant lower bound and a minimum of x and a broadcast constant upper bound (or the minimum of
the upper bound and such a maximum, any operand order) into one clamp when the lower bound is
less than the upper (the corpus' rollouts clip their state this way; XLA's dump shows `clamp.N`
where the program had `max` and `min`). HandleSubtract canonicalises the subtraction of a
constant or a broadcast constant from a non-constant into the addition of its negation (which
constant folding then folds; here the negated constant is made directly). HandleMultiply's "(A
* C1) * C2 => A * (C1 * C2)" multiplies the two constants of a product of a product once: C1
and C2 constants and A not a constant (either operand order of either product), or C1 and C2
broadcasts of rank-0 constants (A anything, operands in that order), the inner product left to
its other users (XLA's per-pass dump of `rollout_rigid_body` shows `mul.20`, a normal sample
times sqrt(2) times 2, become one multiply by 2.82842708 in the "algsimp" step; here the
product constant is made directly). HandleAdd reassociates sums the same way ("(A + C1) + C2
=> A + (C1 + C2)", A not a constant): a uniform sample `u - 1 + (-0.5)`, the subtraction
made an addition first, is one addition of -1.5 in XLA's dump of `rollout_jacobi_rope`.
HandleDivide makes a floating-point division of a non-constant by a constant, or by a
broadcast of one, a multiplication by the constant's inverse, computed in the element type
(`InvertConstant`; XLA's `multiply.4` of `rollout_jacobi_rope` carries `div.11`'s op name).
XLA's other reassociations of products with constants in
HandleMultiply (a product of two such products, a broadcast non-constant factor) are not
modelled. HandleBroadcast makes a broadcast of an iota an iota of the broadcast shape along the
dimension the iota's dimension maps to. HandleConcatenate turns a concatenate of two operands,
one a broadcast of a (rank-0) scalar, into a pad of the other with that scalar, low when the
first operand is the broadcast, else high (XLA's `loop_pad_fusion` of
`rollout_mountain_car_continuous`, where the program stacks a column with zeros). The select of
`convert(p) * A` differs from the product where A is an infinity or a NaN and p is false (0,
not NaN), as XLA's does.

HandleBroadcast also sinks a broadcast below its element-wise users
(`TryToSinkBroadcastAfterElementwiseOps`, under `enable_sink_broadcast`, on by default and
left on by the GPU compiler; XLA 2022 had the same rule as
`TryToSinkBroadcastAfterOpWithUniqueNonScalarOperand`): a user that is element-wise (not a
copy, not a fusion; a bitcast-convert only when it keeps the element width), whose shape is
not a scalar and whose operands are all "compatible" broadcasts, i.e. each either broadcasts
a scalar or broadcasts an operand of the same shape (element type included) along the same
dimensions as the others, is computed on the broadcasts' operands and broadcast once. A scalar
operand is broadcast to the small shape instead (when the small shape is itself a scalar, XLA
makes a scalar-to-scalar broadcast that its next visit removes; here the scalar is used as it
is). The new op keeps the old one's name base and metadata and is created after the
instructions the program had, as XLA's `CloneWithNewOperands` and `AddInstruction` do. XLA
tries the sinking before HandleBroadcast's later rules, so a broadcast of an iota with a user
that can sink stays a broadcast until its users have sunk (then it becomes an iota). `map` is
left alone here (the front end never emits it). The values are the same: an element-wise op
computes each element from the elements at the same index, and a broadcast only repeats
elements.
HandleAdd also adds only the window of a dynamic-update-slice of zeros: `A +
dynamic-update-slice(broadcast(0), U, s)` (either operand order, the zero a broadcast of a
one-element constant) is `dynamic-update-slice(A, dynamic-slice(A, s) + U, s)`; the
dynamic-slice is made a slice here when every start is a constant, as HandleDynamicSlice makes
it (its starts clamped into A as a dynamic-slice clamps them). XLA's per-pass dump of
`rollout_jacobi_rope` shows it on what ScatterExpander leaves of `x.at[:, k].set(v)` added to
a broadcast (`xla_gpu/scatter_expander.py`).
hlofuse's own `simplify` leaves arithmetic alone (it is shared with the 2022 pipeline, which
the study reproduces as it was); `xla-gpu` runs this pass next to the while-loop simplifier,
whose merged induction variables leave `0 + counter * 1` behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hlofuse.ir.attrs import PaddingDim, SliceDim
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import ELEMENTWISE_OPS, Op
from hlofuse.ir.shapes import Shape
from hlofuse.passes.decision_log import RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, Transform, rewrite_module

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

PASS_NAME = "arithmetic-identities"
_IDENTITY = {Op.ADD: 0, Op.MULTIPLY: 1}


def _is_all(inst: Instruction, value: int) -> bool:
    """XLA's IsAll: a constant, or a broadcast of a one-element constant, holding `value`."""
    if inst.op is Op.BROADCAST and inst.operands[0].shape.num_elements == 1:
        inst = inst.operands[0]
    literal = inst.attrs.get("literal") if inst.op is Op.CONSTANT else None
    return isinstance(literal, np.ndarray) and literal.size > 0 and bool(np.all(literal == value))


def identity_operand(inst: Instruction, operands: tuple[Instruction, ...]) -> Instruction | None:
    """The operand `inst` equals when the other one is the identity of its op."""
    identity = _IDENTITY.get(inst.op)
    if identity is None or len(operands) != 2:
        return None
    for keep, other in (operands, operands[::-1]):
        if keep.shape == inst.shape and _is_all(other, identity):
            return keep
    return None


def add_of_zero_update(inst: Instruction, operands: tuple[Instruction, ...]
                       ) -> tuple[Instruction, Instruction] | None:
    """(A, the dynamic-update-slice) when `inst` adds A and a dynamic-update-slice of a
    broadcast zero, in either order (XLA's HandleAdd: only the window is added)."""
    if inst.op is not Op.ADD or len(operands) != 2:
        return None
    for other, update in (operands, operands[::-1]):
        if (update.op is Op.DYNAMIC_UPDATE_SLICE and update.operands[0].op is Op.BROADCAST
                and _is_all(update.operands[0], 0) and other.shape == inst.shape):
            return other, update
    return None


def _window_added(inst: Instruction, other: Instruction, update: Instruction,
                  builder: RewriteBuilder) -> Instruction:
    """dynamic-update-slice(A, A's window + U) for A + dynamic-update-slice(0, U); the window
    is a slice where the starts are constants (HandleDynamicSlice), clamped into A as a
    dynamic-slice's starts are."""
    window, starts = update.operands[1], update.operands[2:]
    constants = [_scalar_value(s) for s in starts]
    if all(c is not None for c in constants):
        bounds = []
        for c, n, w in zip(constants, other.shape.dims, window.shape.dims):
            assert c is not None
            start = min(max(c, 0), n - w)
            bounds.append(SliceDim(start, start + w))
        old = builder.add(Op.SLICE, [other], attrs={"slice": tuple(bounds)})
    else:
        old = builder.add(Op.DYNAMIC_SLICE, [other, *starts],
                          attrs={"dynamic_slice_sizes": window.shape.dims})
    added = builder.add(Op.ADD, [old, window], metadata=window.metadata)
    return builder.add(Op.DYNAMIC_UPDATE_SLICE, [other, added, *starts],
                       metadata=inst.metadata)


def _scalar_value(inst: Instruction) -> int | None:
    literal = inst.attrs.get("literal") if inst.op is Op.CONSTANT else None
    if isinstance(literal, np.ndarray) and literal.size == 1:
        return int(literal.reshape(()))
    return None


def pred_factor(inst: Instruction, operands: tuple[Instruction, ...]
                ) -> tuple[Instruction, Instruction] | None:
    """(p, A) when `inst` multiplies convert(p) of a pred p by A, in either order."""
    if inst.op is not Op.MULTIPLY or len(operands) != 2:
        return None
    for convert, other in (operands, operands[::-1]):
        if (convert.op is Op.CONVERT and convert.operands[0].dtype is DType.PRED
                and convert.operands[0].shape.dims == inst.shape.dims):
            return convert.operands[0], other
    return None


def _select_of(inst: Instruction, pred: Instruction, other: Instruction,
               builder: RewriteBuilder) -> Instruction:
    zero = builder.add(Op.CONSTANT, attrs={"literal": np.zeros((), inst.dtype.numpy)},
                       shape=Shape.scalar(inst.dtype))
    zeros = zero if inst.shape.rank == 0 else builder.add(
        Op.BROADCAST, [zero], attrs={"dimensions": ()}, shape=inst.shape)
    return builder.add(Op.SELECT, [pred, other, zeros], metadata=inst.metadata)


def constant_product(inst: Instruction, operands: tuple[Instruction, ...]
                     ) -> tuple[Instruction, np.ndarray, Instruction | None] | None:
    """(A, C1 * C2, the broadcast of C2 or None) when `inst` is `(A * C1) * C2` as XLA's
    HandleMultiply matches it: C1 and C2 constants and A not a constant, in either operand
    order of either product, or else, operands in that order, C1 and C2 broadcasts of rank-0
    constants (A anything)."""
    if inst.op is not Op.MULTIPLY or len(operands) != 2:
        return None
    found = _constants_either_order(Op.MULTIPLY, np.multiply, operands)
    if found is not None:
        return found
    inner, c2 = operands
    if inner.op is not Op.MULTIPLY:
        return None
    a, c1 = inner.operands
    if _broadcast_scalar_constant(c1) and _broadcast_scalar_constant(c2):
        return _combined(np.multiply, a, c1.operands[0], c2.operands[0], c2)
    return None


def constant_sum(inst: Instruction, operands: tuple[Instruction, ...]
                 ) -> tuple[Instruction, np.ndarray, Instruction | None] | None:
    """(A, C1 + C2, the broadcast of C2 or None) when `inst` is `(A + C1) + C2` as XLA's
    HandleAdd matches it ("Reassociate to allow constant folding"): C1 and C2 constants (in
    either operand order: HandleAdd first puts a constant on the right), or, operands in that
    order, broadcasts of rank-0 constants; A not a constant."""
    if inst.op is not Op.ADD or len(operands) != 2:
        return None
    found = _constants_either_order(Op.ADD, np.add, operands)
    if found is not None:
        return found
    inner, c2 = operands
    if inner.op is not Op.ADD:
        return None
    a, c1 = inner.operands
    if (a.op is not Op.CONSTANT and _broadcast_scalar_constant(c1)
            and _broadcast_scalar_constant(c2)):
        return _combined(np.add, a, c1.operands[0], c2.operands[0], c2)
    return None


def _constants_either_order(op: Op, combine: np.ufunc, operands: tuple[Instruction, ...]
                            ) -> tuple[Instruction, np.ndarray, Instruction | None] | None:
    """(A, C1 <op> C2, None) when the operands are `(A <op> C1)` and C2, constants in either
    operand order of either `op` and A not a constant (HandleAdd's and HandleMultiply's first
    form)."""
    for inner, c2 in (operands, operands[::-1]):
        if inner.op is not op or c2.op is not Op.CONSTANT:
            continue
        for a, c1 in (inner.operands, inner.operands[::-1]):
            if a.op is not Op.CONSTANT and c1.op is Op.CONSTANT:
                return _combined(combine, a, c1, c2, None)
    return None


def _broadcast_scalar_constant(inst: Instruction) -> bool:
    return (inst.op is Op.BROADCAST and inst.operands[0].op is Op.CONSTANT
            and inst.operands[0].shape.rank == 0)


def _combined(combine: np.ufunc, a: Instruction, c1: Instruction, c2: Instruction,
              broadcast: Instruction | None
              ) -> tuple[Instruction, np.ndarray, Instruction | None] | None:
    left, right = c1.attrs.get("literal"), c2.attrs.get("literal")
    if not isinstance(left, np.ndarray) or not isinstance(right, np.ndarray):
        return None
    with np.errstate(all="ignore"):
        combined = np.asarray(combine(left, right), dtype=left.dtype)
    return a, combined, broadcast


def _with_constant(op: Op, inst: Instruction, a: Instruction, value: np.ndarray,
                   broadcast: Instruction | None, builder: RewriteBuilder) -> Instruction:
    """`op(a, C)` in `inst`'s place, C the folded constant (broadcast from a scalar when the
    matched constant was a broadcast)."""
    shape = inst.shape if broadcast is None else Shape.scalar(inst.dtype)
    constant = builder.add(Op.CONSTANT, attrs={"literal": value}, shape=shape)
    if broadcast is not None:
        constant = builder.add(Op.BROADCAST, [constant], attrs={"dimensions": ()},
                               shape=inst.shape)
    return builder.add(op, [a, constant], metadata=inst.metadata)


def _scalar_bound(inst: Instruction) -> float | None:
    """The value of a broadcast of a one-element constant (XLA's
    `m::Broadcast(m::ConstantEffectiveScalar())`), else None."""
    if inst.op is not Op.BROADCAST:
        return None
    constant = inst.operands[0]
    literal = constant.attrs.get("literal") if constant.op is Op.CONSTANT else None
    if not isinstance(literal, np.ndarray) or literal.size != 1:
        return None
    return float(literal.reshape(()))


_CLAMP_INNER = {Op.MAXIMUM: Op.MINIMUM, Op.MINIMUM: Op.MAXIMUM}


def subtracted_constant(inst: Instruction, operands: tuple[Instruction, ...]
                        ) -> Instruction | None:
    """The constant (or broadcast constant) `inst` subtracts from a non-constant."""
    if inst.op is not Op.SUBTRACT or len(operands) != 2 or operands[0].op is Op.CONSTANT:
        return None
    rhs = operands[1]
    constant = rhs.operands[0] if rhs.op is Op.BROADCAST else rhs
    return rhs if constant.op is Op.CONSTANT else None


def constant_divisor(inst: Instruction, operands: tuple[Instruction, ...]
                     ) -> Instruction | None:
    """The divisor of a floating-point `inst` that divides a non-constant by a constant or a
    broadcast of one (HandleDivide's "A / Const => A * (1 / Const)")."""
    if (inst.op is not Op.DIVIDE or len(operands) != 2 or not inst.dtype.is_float
            or operands[0].op is Op.CONSTANT):
        return None
    divisor = operands[1]
    constant = divisor.operands[0] if divisor.op is Op.BROADCAST else divisor
    if constant.op is not Op.CONSTANT or not isinstance(constant.attrs.get("literal"),
                                                       np.ndarray):
        return None
    return divisor


def _inverse_multiplied(inst: Instruction, dividend: Instruction, divisor: Instruction,
                        builder: RewriteBuilder) -> Instruction:
    constant = divisor.operands[0] if divisor.op is Op.BROADCAST else divisor
    literal = constant.attrs["literal"]
    assert isinstance(literal, np.ndarray)
    with np.errstate(all="ignore"):
        inverse_literal = np.asarray(np.divide(np.ones((), literal.dtype), literal),
                                     dtype=literal.dtype)
    inverse = builder.add(Op.CONSTANT, attrs={"literal": inverse_literal}, shape=constant.shape)
    if divisor.op is Op.BROADCAST:
        inverse = builder.add(Op.BROADCAST, [inverse], attrs=dict(divisor.attrs),
                              shape=divisor.shape)
    return builder.add(Op.MULTIPLY, [dividend, inverse], metadata=inst.metadata)


def _negated(inst: Instruction, operands: tuple[Instruction, ...], rhs: Instruction,
             builder: RewriteBuilder) -> Instruction:
    constant = rhs.operands[0] if rhs.op is Op.BROADCAST else rhs
    literal = constant.attrs["literal"]
    assert isinstance(literal, np.ndarray)
    with np.errstate(over="ignore"):
        negated = builder.add(Op.CONSTANT, attrs={"literal": np.asarray(np.negative(literal))},
                              shape=constant.shape)
    if rhs.op is Op.BROADCAST:
        negated = builder.add(Op.BROADCAST, [negated], attrs=dict(rhs.attrs), shape=rhs.shape)
    return builder.add(Op.ADD, [operands[0], negated], metadata=inst.metadata)


def min_max_clamp(inst: Instruction, operands: tuple[Instruction, ...]
                  ) -> tuple[Instruction, Instruction, Instruction] | None:
    """(lower bound, x, upper bound) when `inst` is max(lo, min(x, hi)) or min(hi,
    max(x, lo)) in any operand order, lo and hi broadcast constants with lo < hi."""
    inner = _CLAMP_INNER.get(inst.op)
    if inner is None or len(operands) != 2:
        return None
    for bound, other in (operands, operands[::-1]):
        if other.op is not inner or _scalar_bound(bound) is None:
            continue
        for x, bound2 in (other.operands, other.operands[::-1]):
            if _scalar_bound(bound2) is None:
                continue
            lower, upper = (bound, bound2) if inst.op is Op.MAXIMUM else (bound2, bound)
            if (x.shape == inst.shape and lower.shape == upper.shape == inst.shape
                    and _scalar_bound(lower) < _scalar_bound(upper)):  # type: ignore[operator]
                return lower, x, upper
    return None


def sinkable_broadcast(inst: Instruction, operands: tuple[Instruction, ...]
                       ) -> Instruction | None:
    """The broadcast XLA sinks below `inst` (one of its non-scalar broadcast operands, else
    its first operand), when `inst` is element-wise of compatible broadcasts; else None."""
    if inst.op not in ELEMENTWISE_OPS or inst.op is Op.MAP or inst.shape.rank == 0:
        return None
    if inst.op is Op.BITCAST_CONVERT and operands[0].dtype.bits != inst.dtype.bits:
        return None
    if not operands or any(o.op is not Op.BROADCAST for o in operands):
        return None
    wide = [o for o in operands if o.operands[0].shape.rank != 0]
    anchor = wide[0] if wide else operands[0]
    small = anchor.operands[0].shape
    dimensions = anchor.ints("dimensions")
    if any(o.operands[0].shape != small or o.ints("dimensions") != dimensions for o in wide):
        return None
    return anchor


def _sunk(inst: Instruction, operands: tuple[Instruction, ...], anchor: Instruction,
          builder: RewriteBuilder) -> Instruction:
    small = anchor.operands[0].shape
    new_operands: list[Instruction] = []
    for operand in operands:
        inner = operand.operands[0]
        if inner.shape.rank == 0 and small.rank != 0:
            inner = builder.add(Op.BROADCAST, [inner], attrs={"dimensions": ()},
                                shape=Shape(inner.dtype, small.dims), metadata=operand.metadata)
        new_operands.append(inner)
    narrow = builder.add(inst.op, new_operands, attrs=dict(inst.attrs),
                         shape=Shape(inst.dtype, small.dims),
                         name_base=inst.name, metadata=inst.metadata)
    return builder.add(Op.BROADCAST, [narrow], attrs={"dimensions": anchor.ints("dimensions")},
                       shape=inst.shape, metadata=anchor.metadata)


def _slice_dims(inst: Instruction) -> tuple[SliceDim, ...]:
    spec = inst.attrs["slice"]
    assert isinstance(spec, tuple)
    return tuple(s for s in spec if isinstance(s, SliceDim))


def reshaped_prefix(inst: Instruction, operands: tuple[Instruction, ...]
                    ) -> tuple[int, ...] | None:
    """The limits of the slice of the reshape's operand that `inst` (a slice of a reshape)
    reads, when it is an unstrided slice of the reshape's leading rows; else None."""
    if inst.op is not Op.SLICE or operands[0].op is not Op.RESHAPE:
        return None
    spec = _slice_dims(inst)
    reshape = operands[0]
    if any(s.stride != 1 for s in spec):
        return None
    cut = [i for i, (s, size) in enumerate(zip(spec, reshape.shape.dims, strict=True))
           if s.start != 0 or s.limit != size]
    if cut != [0] or spec[0].start != 0:
        return None
    limits = list(reshape.operands[0].shape.dims)
    elements = inst.shape.num_elements
    for i in reversed(range(len(limits))):
        if elements >= limits[i]:
            if limits[i] == 0 or elements % limits[i]:
                return None
            elements //= limits[i]
        else:
            limits[i], elements = elements, 1
    return tuple(limits)


def _broadcast_scalar(inst: Instruction) -> bool:
    return inst.op is Op.BROADCAST and inst.operands[0].shape.rank == 0


def concatenate_as_pad(inst: Instruction, operands: tuple[Instruction, ...]
                       ) -> tuple[Instruction, Instruction, tuple[PaddingDim, ...]] | None:
    """(operand, padding value, padding) when `inst` concatenates two operands one of which
    broadcasts a scalar (the first one: padding low, else the second: padding high)."""
    if inst.op is not Op.CONCATENATE or len(operands) != 2:
        return None
    low = _broadcast_scalar(operands[0])
    if not low and not _broadcast_scalar(operands[1]):
        return None
    (dimension,) = inst.ints("dimensions")
    padded, value = (operands[1], operands[0]) if low else (operands[0], operands[1])
    width = value.shape.dims[dimension]
    padding = tuple(PaddingDim(width if low and d == dimension else 0,
                               width if not low and d == dimension else 0)
                    for d in range(inst.shape.rank))
    return padded, value.operands[0], padding


@dataclass(frozen=True, slots=True)
class ArithmeticIdentities:
    """Replaces `A + 0` and `A * 1` by `A`, `convert(p) * A` by `select(p, A, 0)`, a
    maximum and minimum with constant bounds by a clamp, `A - C` by `A + (-C)`,
    `(A * C1) * C2` by `A * (C1 * C2)`,
    `broadcast(iota)` by an iota, an element-wise op of compatible broadcasts by a
    broadcast of the op, a slice of a reshape's leading rows by a reshape of a slice, a
    concatenate with a broadcast scalar by a pad, and a sum with a dynamic-update-slice of
    zeros by a dynamic-update-slice of the sum's window."""

    name: ClassVar[str] = PASS_NAME

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def transform_for(comp: Computation) -> Transform | None:
            if not any(i.op in _IDENTITY or i.op in _CLAMP_INNER
                       or i.op in (Op.SUBTRACT, Op.BROADCAST, Op.SLICE, Op.CONCATENATE)
                       for i in comp.instructions):
                return None
            users: dict[Instruction, list[Instruction]] = {}
            for user in comp.instructions:
                for operand in user.operands:
                    users.setdefault(operand, []).append(user)

            def transform(inst: Instruction, operands: tuple[Instruction, ...],
                          builder: RewriteBuilder) -> Instruction | None:
                anchor = sinkable_broadcast(inst, operands)
                if anchor is not None:
                    records.rewrote(comp.name, inst, "sink-broadcast",
                                    f"%{inst.name} ({inst.op.text}) reads only broadcasts: "
                                    "it is computed before broadcasting")
                    return _sunk(inst, operands, anchor, builder)
                clamp = min_max_clamp(inst, operands)
                if clamp is not None:
                    records.rewrote(comp.name, inst, "min-max-clamp",
                                    f"%{inst.name} bounds a value by constants from both "
                                    "sides: it is a clamp")
                    return builder.add(Op.CLAMP, list(clamp), metadata=inst.metadata)
                if (inst.op is Op.BROADCAST and operands[0].op is Op.IOTA
                        and not any(sinkable_broadcast(u, u.operands) is not None
                                    for u in users.get(inst, ()))):
                    records.rewrote(comp.name, inst, "broadcast-iota",
                                    f"%{inst.name} broadcasts an iota: it is an iota")
                    iota_dimension = operands[0].attrs.get("iota_dimension", 0)
                    assert isinstance(iota_dimension, int)
                    dimension = inst.ints("dimensions")[iota_dimension]
                    return builder.add(Op.IOTA, attrs={"iota_dimension": dimension},
                                       shape=inst.shape, metadata=inst.metadata)
                pad = concatenate_as_pad(inst, operands)
                if pad is not None:
                    records.rewrote(comp.name, inst, "concatenate-as-pad",
                                    f"%{inst.name} concatenates a broadcast scalar: it pads "
                                    "its other operand with the scalar")
                    padded, value, padding = pad
                    return builder.add(Op.PAD, [padded, value], attrs={"padding": padding},
                                       shape=inst.shape, metadata=inst.metadata)
                prefix = reshaped_prefix(inst, operands)
                if prefix is not None:
                    records.rewrote(comp.name, inst, "slice-of-reshape",
                                    f"%{inst.name} slices the leading rows of a reshape: it "
                                    "reshapes a slice of the reshape's operand")
                    source = operands[0].operands[0]
                    piece = builder.add(
                        Op.SLICE, [source],
                        attrs={"slice": tuple(SliceDim(0, limit) for limit in prefix)},
                        shape=Shape(source.dtype, prefix), name_base=inst.name,
                        metadata=inst.metadata)
                    return builder.add(Op.RESHAPE, [piece], shape=inst.shape,
                                       metadata=inst.metadata)
                divisor = constant_divisor(inst, operands)
                if divisor is not None:
                    records.rewrote(comp.name, inst, "divide-by-constant",
                                    f"%{inst.name} divides by a constant: it multiplies by "
                                    "the constant's inverse")
                    return _inverse_multiplied(inst, operands[0], divisor, builder)
                subtracted = subtracted_constant(inst, operands)
                if subtracted is not None:
                    records.rewrote(comp.name, inst, "subtract-constant",
                                    f"%{inst.name} subtracts a constant: it adds its negation")
                    return _negated(inst, operands, subtracted, builder)
                kept = identity_operand(inst, operands)
                zero_update = add_of_zero_update(inst, operands) if kept is None else None
                if zero_update is not None:
                    records.rewrote(comp.name, inst, "add-of-zero-update",
                                    f"%{inst.name} adds a dynamic-update-slice of zeros: "
                                    "only the window is added")
                    return _window_added(inst, *zero_update, builder)
                if kept is None:
                    factor = pred_factor(inst, operands)
                    if factor is None:
                        product = constant_product(inst, operands)
                        if product is None:
                            summed = constant_sum(inst, operands)
                            if summed is None:
                                return None
                            records.rewrote(comp.name, inst, "constant-sum",
                                            f"%{inst.name} adds a constant to a sum with a "
                                            "constant: it adds their sum")
                            return _with_constant(Op.ADD, inst, *summed, builder)
                        records.rewrote(comp.name, inst, "constant-product",
                                        f"%{inst.name} multiplies a product with a constant "
                                        "by a constant: it multiplies by their product")
                        return _with_constant(Op.MULTIPLY, inst, *product, builder)
                    records.rewrote(comp.name, inst, "pred-product-select",
                                    f"%{inst.name} multiplies by a converted pred: it selects "
                                    "its other operand or zero")
                    return _select_of(inst, *factor, builder)
                records.rewrote(comp.name, inst, "identity-operand",
                                f"%{inst.name} ({inst.op.text}) has an identity operand: "
                                f"it is its other operand")
                return kept

            return transform

        return rewrite_module(module, transform_for)
