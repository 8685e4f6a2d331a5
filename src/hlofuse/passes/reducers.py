"""Which reductions may be regrouped without changing their result.

A rewrite that reduces the pieces of an array separately and then combines the partial results
(`concat-forwarding` on a reduce over a concatenated dimension) computes the same values only
when the reducer is one associative, commutative element-wise op whose order of evaluation
cannot show in the result:

- and, or, maximum, minimum: exact in every type, and idempotent, so an init value counted once
  per piece changes nothing (max(max(i, a), max(i, b)) = max(i, a, b));
- add, multiply, xor (`COUNTING`) on integers and booleans: exact (wrap-around arithmetic is
  associative), but not idempotent, so the init value must be the op's identity (0, 1, 0);
- add and multiply on floating point are not: another grouping rounds differently, so they are
  refused (the reference interpreter's comparison would see it).

`identity_init` also tells when a reduce over only size-1 dimensions is its operand itself:
op(identity, x) = x exactly for every op above (max(-inf, NaN) is NaN; -inf is the identity of
maximum even for -0.0).
"""

from __future__ import annotations

import numpy as np

from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op

IDEMPOTENT = frozenset({Op.AND, Op.OR, Op.MAXIMUM, Op.MINIMUM})
COUNTING = frozenset({Op.ADD, Op.MULTIPLY, Op.XOR})


def combiner(comp: Computation) -> Op | None:
    """The op of a reducer computation `(a, b) -> op(a, b)` (either operand order), or None
    when the computation is anything else."""
    if len(comp.parameters) != 2 or len(comp.instructions) != 3:
        return None
    root = comp.root
    if root.op not in IDEMPOTENT | COUNTING:
        return None
    if set(map(id, root.operands)) != set(map(id, comp.parameters)):
        return None
    return root.op


def _identity(op: Op, dtype: DType) -> np.ndarray | None:
    np_dtype = dtype.numpy
    if op in (Op.OR, Op.XOR, Op.ADD):
        return np.zeros((), np_dtype)
    if op is Op.MULTIPLY:
        return np.ones((), np_dtype)
    if op is Op.AND:
        return np.invert(np.zeros((), np_dtype))
    largest = op is Op.MINIMUM
    if dtype.is_pred:
        return np.array(largest)
    if dtype.is_float:
        return np.array(np.inf if largest else -np.inf, np_dtype)
    if dtype.is_integer:
        info = np.iinfo(np_dtype)
        return np.array(info.max if largest else info.min, np_dtype)
    return None


def identity_init(init: Instruction, op: Op) -> bool:
    """Whether `init` is a constant holding the identity of `op` in its type."""
    if init.op is not Op.CONSTANT or init.shape.rank != 0:
        return False
    identity = _identity(op, init.dtype)
    literal = init.attrs["literal"]
    assert isinstance(literal, np.ndarray)
    return identity is not None and bool(np.array_equal(literal, identity))


def regrouping_refusal(reduce: Instruction, comp: Computation) -> tuple[str, str] | None:
    """(rule id, reason) when partial reductions of `reduce` (whose reducer is `comp`) could
    not be combined exactly; None when they can."""
    if len(reduce.operands) != 2:
        return ("variadic-reduce",
                f"%{reduce.name} reduces {len(reduce.operands) // 2} arrays at once")
    op = combiner(comp)
    if op is None:
        return ("reducer-not-associative",
                f"the reducer %{comp.name} of %{reduce.name} is not a single associative "
                "element-wise op of its two parameters")
    dtype = reduce.dtype
    if op in COUNTING and dtype.is_float:
        return ("reducer-not-exact",
                f"%{reduce.name} reduces {dtype.text} with {op.text}: grouped differently, the "
                "result may round differently")
    if op not in IDEMPOTENT and not identity_init(reduce.operands[1], op):
        return ("init-not-identity",
                f"the init value %{reduce.operands[1].name} of %{reduce.name} is not the "
                f"identity of {op.text}, and each partial reduction would add it again")
    return None
