"""XLA's merge of a reduce of a reduce into one reduce, for `xla-gpu`.

XLA's algebraic simplifier (`xla/hlo/transforms/simplifiers/algebraic_simplifier.cc`,
`AlgebraicSimplifierVisitor::HandleReduce` with `MergeReduces`; layout-insensitive runs only,
so in the simplification fixed point before layout assignment) replaces a reduce whose operand
is another reduce with one reduce of the inner reduce's operand over both reduces' dimensions,
when:

- the outer reduce has one input (XLA leaves variadic reduces out of this rule);
- the two initial values are identical (`HloInstruction::Identical`: the same constant);
- the two reducers are equivalent (`ReductionComputationsEquivalent`): the same computation
  (structurally), or both an add, a multiply, an and or an or of their two parameters, in
  either order (a max or min reducer merges only with an identical computation).

The inner reduce's other users, if any, keep it (the rule does not ask how many users it
has). The replacement keeps the outer reduce's name, metadata and reducer, as XLA's
`ReplaceWithNewInstruction` does, and is a new instruction to XLA: a new unique id, after every
old one (`ids.py`).

So JAX's `jnp.sum(board)` written as a sum over the last dimensions and then a sum of that
(`minatar_rollout`'s `reduce_sum.14` of `s32[64,2,10,10]` to `s32[64]`, then `reduce_sum.15`
to a scalar) is one reduction of the whole board in XLA, `reduce_sum.15` over `{0,1,2,3}` in
the "algsimp" step of its per-pass dump, which the reduction emitter runs as one block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

from hlofuse.analysis.reducers import reducer_op
from hlofuse.fusion.xla_gpu.gather_scatter import forget_ids
from hlofuse.fusion.xla_gpu.ids import InstructionIds
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.passes.cse import instruction_key
from hlofuse.passes.decision_log import DecisionSink, RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching

PASS_NAME = "reduce-merger"
# ReductionComputationsEquivalent's commutative kinds (kAdd, kMul, kAnd, kOr).
_COMMUTATIVE = frozenset({Op.ADD, Op.MULTIPLY, Op.AND, Op.OR})


def _commutative_kind(reducer: Computation) -> Op | None:
    """The kind `categorize_computation` gives `reducer`: its root is one of the commutative
    ops applied to its two parameters, in either order."""
    op = reducer_op(reducer)
    return op if op in _COMMUTATIVE else None


def _identical_computations(a: Computation, b: Computation) -> bool:
    """HloComputation's equality for a reducer: the same instructions in the same order, with
    the same ops, shapes, attributes (literals bit for bit) and operands (names do not
    count)."""
    if a is b:
        return True
    if len(a.instructions) != len(b.instructions):
        return False
    position = {id(inst): n for n, inst in enumerate(a.instructions)}
    position.update({id(inst): n for n, inst in enumerate(b.instructions)})
    for x, y in zip(a.instructions, b.instructions, strict=True):
        if (instruction_key(x, [position[id(o)] for o in x.operands])
                != instruction_key(y, [position[id(o)] for o in y.operands])):
            return False
    return position[id(a.root)] == position[id(b.root)]


def equivalent_reducers(a: Computation, b: Computation) -> bool:
    """ReductionComputationsEquivalent."""
    if _identical_computations(a, b):
        return True
    kind = _commutative_kind(a)
    return kind is not None and kind is _commutative_kind(b)


def _identical_values(a: Instruction, b: Instruction) -> bool:
    """HloInstruction::Identical for two initial values: the same instruction, or two
    constants of one shape and literal."""
    return a is b or (a.op is Op.CONSTANT and b.op is Op.CONSTANT
                      and instruction_key(a, ()) == instruction_key(b, ()))


def merges(inst: Instruction) -> bool:
    """Whether HandleReduce merges `inst` with the reduce it reads."""
    if inst.op is not Op.REDUCE or len(inst.operands) != 2 or inst.shape.is_tuple:
        return False
    inner, init = inst.operands
    return (inner.op is Op.REDUCE and len(inner.operands) == 2
            and _identical_values(init, inner.operands[1])
            and equivalent_reducers(inst.calls[0], inner.calls[0]))


def merged_dimensions(inner: tuple[int, ...], outer: tuple[int, ...]) -> tuple[int, ...]:
    """MergeReduces: the outer reduce's dimensions in the inner reduce's operand, merged with
    the inner reduce's."""
    inner_sorted = sorted(inner)
    outer_in_operand = sorted(outer)
    for reduced in inner_sorted:
        outer_in_operand = [d + 1 if d >= reduced else d for d in outer_in_operand]
    return tuple(sorted(inner_sorted + outer_in_operand))


@dataclass(frozen=True, slots=True)
class ReduceMerger:
    """Every reduce of a reduce with an identical initial value and an equivalent reducer
    becomes one reduce of the inner reduce's operand (module docstring)."""

    name: ClassVar[str] = PASS_NAME
    ids: InstructionIds | None = field(default=None, compare=False)

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def rewrite(inst: Instruction, operands: tuple[Instruction, ...],
                    builder: RewriteBuilder) -> Instruction:
            inner, init = operands
            dimensions = merged_dimensions(inner.ints("dimensions"), inst.ints("dimensions"))
            records.rewrote(builder.name, inst, "reduce-of-reduce",
                            f"%{inst.name} reduces the reduce %{inner.name} with the same "
                            f"reducer and initial value: one reduce over {list(dimensions)}")
            forget_ids(self.ids, inst.name)
            # The outer reduce's name, not a fresh one: its old instruction leaves with it.
            merged = Instruction(inst.name, Op.REDUCE, (inner.operands[0], init), inst.shape,
                                 MappingProxyType({**inst.attrs, "dimensions": dimensions}),
                                 inst.calls, inst.metadata, inst.extra)
            builder.instructions.append(merged)
            return merged

        return rewrite_matching(module, merges, rewrite)
