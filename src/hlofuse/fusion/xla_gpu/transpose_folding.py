"""XLA's TransposeFolding with the GPU's folding rule, for `xla-gpu`: a dot reads a transposed
operand's operand directly, its dimension numbers mapped through the transpose.

`gpu_compiler.cc` runs `TransposeFolding(CanFoldTransposeOperandIntoDot)` right after its
simplification pipeline, before layout assignment (`xla/service/transpose_folding.cc`,
`FoldTransposeIntoDot`; the rule is `xla/service/gpu/matmul_utils.cc`,
`CanFoldTransposeOperandIntoDot`). A dot with no operand of rank below 2 folds an operand
that is a transpose other than the identity when the operand's non-contracting dimensions keep
their relative order through the transpose (the dot's shape does not change) and the
transposed batch, contracting and non-contracting dimensions make a matrix layout of the
transpose's (row-major) operand: each group contiguous, the batch dimensions most major
(`MatrixLayout::For`). So `dot(transpose(x), w)` with x `[k, m]` becomes a dot contracting x's
dimension 0, and layout assignment then sees no transpose to lay out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.fusion.xla_gpu.gather_scatter import replacement
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.passes.decision_log import DecisionSink, RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching

PASS_NAME = "transpose-folding"
_SIDES = (("lhs_batch_dims", "lhs_contracting_dims"), ("rhs_batch_dims", "rhs_contracting_dims"))


def _relative_order(dims: list[int]) -> list[int]:
    """NormalizedRelativeOrder: the positions of `dims` sorted by value."""
    return sorted(range(len(dims)), key=lambda i: dims[i])


def _matrix_layout_exists(rank: int, batch: list[int], rows: list[int],
                          cols: list[int]) -> bool:
    """MatrixLayout::For on a row-major shape: the batch dimensions first, then the two other
    groups one after the other, each a run of consecutive dimensions in order."""
    def run(group: list[int], start: int) -> bool:
        return group == list(range(start, start + len(group)))

    if not run(batch, 0):
        return False
    start = len(batch)
    return ((run(rows, start) and run(cols, start + len(rows)))
            or (run(cols, start) and run(rows, start + len(cols)))) and (
        len(batch) + len(rows) + len(cols) == rank)


def can_fold(dot: Instruction, k: int) -> bool:
    """CanFoldTransposeOperandIntoDot, with TransposeFolding's own conditions."""
    transpose = dot.operands[k]
    if transpose.op is not Op.TRANSPOSE or any(o.shape.rank < 2 for o in dot.operands):
        return False
    permutation = transpose.ints("dimensions")
    if permutation == tuple(range(len(permutation))):
        return False
    batch = list(dot.ints(_SIDES[k][0]))
    contracting = list(dot.ints(_SIDES[k][1]))
    free = [d for d in range(transpose.shape.rank) if d not in batch and d not in contracting]
    moved_free = [permutation[d] for d in free]
    if _relative_order(free) != _relative_order(moved_free):
        return False
    return _matrix_layout_exists(transpose.shape.rank, [permutation[d] for d in batch],
                                 [permutation[d] for d in contracting], moved_free)


@dataclass(frozen=True, slots=True)
class TransposeFolding:
    """Folds transposed dot operands into the dot (module docstring)."""

    name: ClassVar[str] = PASS_NAME

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def foldable(inst: Instruction) -> bool:
            return inst.op is Op.DOT and any(can_fold(inst, k) for k in range(2))

        def fold(inst: Instruction, operands: tuple[Instruction, ...],
                 builder: RewriteBuilder) -> Instruction:
            attrs = dict(inst.attrs)
            new_operands = list(operands)
            for k in range(2):
                if not can_fold(inst, k):
                    continue
                permutation = inst.operands[k].ints("dimensions")
                for key in _SIDES[k]:
                    attrs[key] = tuple(permutation[d] for d in inst.ints(key))
                new_operands[k] = operands[k].operands[0]
                records.rewrote(builder.name, inst, "transpose-folded",
                                f"%{inst.operands[k].name} folded into %{inst.name}",
                                user=inst.operands[k])
            # Under the dot's name, as XLA's SetupDerivedInstruction keeps it.
            return replacement(inst, new_operands, attrs, builder)

        return rewrite_matching(module, foldable, fold)
