"""Reducer computations that are one associative, commutative op, and that op's identity.

`reducer_op` recognises a reducer `(a, b) -> op(a, b)` (either operand order) whose op is one
of `ASSOCIATIVE_OPS`; every layer asks it (the interpreter's NumPy fast path, whole-loop
accumulators, concat-forwarding, the tree-reduction rewriter, code generation). `identity`
is the op's identity in a type, and `is_identity` whether an init value is that identity bit
for bit (-0.0 is not the identity of add: -0.0 + 0.0 = 0.0).

Which reductions may also be regrouped without changing their result (`regrouping_refusal`):
a rewrite that reduces the pieces of an array separately and then combines the partial
results (`concat-forwarding` on a reduce over a concatenated dimension) computes the same
values only when the order of evaluation cannot show in the result:

- and, or, maximum, minimum (`IDEMPOTENT`): exact in every type, and idempotent, so an init
  value counted once per piece changes nothing (max(max(i, a), max(i, b)) = max(i, a, b));
- add, multiply, xor (`COUNTING`) on integers and booleans: exact (wrap-around arithmetic is
  associative), but not idempotent, so the init value must be the op's identity (0, 1, 0);
- add and multiply on floating point are not: another grouping rounds differently, so they are
  refused (the reference interpreter's comparison would see it).

op(identity, x) = x exactly for every op here (max(-inf, NaN) is NaN; -inf is the identity of
maximum even for -0.0), so a reduce over only size-1 dimensions from the identity is its
operand itself.

Float sums and products (`in_index_order`): HLO applies the reducer to values of the reduce's
type, so a reduce that combines its elements one at a time from the initial value rounds to
that type after every step. XLA's CPU backend does so, in row-major order of the reduced
elements, for every f16 and bf16 add or multiply and for an f32/f64 one over at most
`IN_ORDER_EXTENT` elements (measured, JAX 0.10.2: rows of 5 to 32, from any initial value).
Longer f32/f64 reductions have no single order in XLA (its TreeReductionRewriter splits rows
over 32 into windows of 32, and longer ones go to a library); the reference keeps NumPy's
order there (pairwise sums: fast and vectorisable in the generated C, and compared within a
tolerance by the fuzzer).
"""

from __future__ import annotations

import numpy as np

from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op

IDEMPOTENT = frozenset({Op.AND, Op.OR, Op.MAXIMUM, Op.MINIMUM})
COUNTING = frozenset({Op.ADD, Op.MULTIPLY, Op.XOR})
ASSOCIATIVE_OPS = IDEMPOTENT | COUNTING
# The longest f32/f64 reduce that runs element by element from the initial value.
IN_ORDER_EXTENT = 32


def reducer_op(comp: Computation) -> Op | None:
    """The op of a reducer computation `(a, b) -> op(a, b)` (either operand order) with op
    associative and commutative, or None when the computation is anything else."""
    root, params = comp.root, comp.parameters
    if len(params) != 2 or len(root.operands) != 2 or root.op not in ASSOCIATIVE_OPS:
        return None
    if {id(o) for o in root.operands} != {id(p) for p in params}:
        return None
    return root.op


def identity(op: Op, dtype: DType) -> np.ndarray | None:
    """The identity of `op` in `dtype` as a 0-d array of that type; None when it has none
    there (no op of `ASSOCIATIVE_OPS`, or a type without an order for max/min)."""
    np_dtype = dtype.numpy
    if dtype.is_float and op in (Op.AND, Op.OR, Op.XOR):
        return None
    if op in (Op.OR, Op.XOR, Op.ADD):
        return np.zeros((), np_dtype)
    if op is Op.MULTIPLY:
        return np.ones((), np_dtype)
    if op is Op.AND:
        return np.invert(np.zeros((), np_dtype))  # all bits set; True for pred
    if op not in (Op.MAXIMUM, Op.MINIMUM):
        return None
    largest = op is Op.MINIMUM
    if dtype.is_pred:
        return np.array(largest)
    if dtype.is_float:
        return np.array(np.inf if largest else -np.inf, np_dtype)
    if dtype.is_integer:
        info = np.iinfo(np_dtype)
        return np.array(info.max if largest else info.min, np_dtype)
    return None


def is_identity(init: Instruction, op: Op) -> bool:
    """Whether `init` is a rank-0 constant holding the identity of `op` in its type, bit for
    bit."""
    if init.op is not Op.CONSTANT or init.shape.rank != 0:
        return False
    expected = identity(op, init.dtype)
    if expected is None:
        return False
    literal = init.attrs["literal"]
    assert isinstance(literal, np.ndarray)
    return np.asarray(literal, expected.dtype).tobytes() == expected.tobytes()


def in_index_order(op: Op | None, dtype: DType, extent: int) -> bool:
    """Whether a reduce with one-op reducer `op` over `extent` elements of float `dtype` is an
    add or multiply computed element by element in row-major order from the initial value,
    rounded to `dtype` after every step (module docstring); False for every other reduce."""
    if op not in (Op.ADD, Op.MULTIPLY) or not dtype.is_float:
        return False
    return dtype in (DType.F16, DType.BF16) or extent <= IN_ORDER_EXTENT


def regrouping_refusal(reduce: Instruction, comp: Computation) -> tuple[str, str] | None:
    """(rule id, reason) when partial reductions of `reduce` (whose reducer is `comp`) could
    not be combined exactly; None when they can."""
    if len(reduce.operands) != 2:
        return ("variadic-reduce",
                f"%{reduce.name} reduces {len(reduce.operands) // 2} arrays at once")
    op = reducer_op(comp)
    if op is None:
        return ("reducer-not-associative",
                f"the reducer %{comp.name} of %{reduce.name} is not a single associative "
                "element-wise op of its two parameters")
    dtype = reduce.dtype
    if op in COUNTING and dtype.is_float:
        return ("reducer-not-exact",
                f"%{reduce.name} reduces {dtype.text} with {op.text}: grouped differently, the "
                "result may round differently")
    if op not in IDEMPOTENT and not is_identity(reduce.operands[1], op):
        return ("init-not-identity",
                f"the init value %{reduce.operands[1].name} of %{reduce.name} is not the "
                f"identity of {op.text}, and each partial reduction would add it again")
    return None
