"""XLA's ScatterExpander in its `kEliminateSimpleScatters` mode, for `xla-gpu`: a scatter of
one index becomes a dynamic-update-slice of the operand.

XLA's GPU simplification fixed point runs `ScatterExpander(kEliminateSimpleScatters)` right
after the ScatterSimplifier (xla/service/scatter_expander.cc; gpu_compiler.cc's
simplification pipeline). It rewrites every scatter whose `ScatterTripCount` is 1 (one index
vector) into a counted while loop of one iteration (`ScatterLoopBody`): the start of the
window in the operand is the index vector spread over the operand's dimensions, 0 where no
index maps (`ExpandIndexVectorIntoOperandSpace`); the window of the operand is read with a
dynamic-slice, combined with the update window (the updates with the inserted window
dimensions back as dimensions of size 1) by the scatter's computation applied element by
element (a `map`), kept only where the window lies inside the operand (`CheckIndexValidity`:
`0 <= start <= dimension - window` in every dimension, else the old window is written back),
and written with a dynamic-update-slice. The while-loop simplifier then inlines the loop of one
iteration, the algebraic simplifier makes a `map` whose computation is one element-wise op of
its parameters (or a parameter) that op (`HandleMap`), and a dynamic-slice whose starts are
constants a slice (`HandleDynamicSlice`); with a constant index, constant folding evaluates
the validity check and the simplifier drops the select on a constant predicate
(`HandleSelect`). XLA's per-pass dump of a scatter-add of one constant index into `f32[8,10,2]`
shows the result: `dynamic-update-slice(x, add(slice(x), u), 0, 1, 0)`.

Modelled here: the scatters of one index whose indices are a constant and whose window lies
inside the operand, with one operand and a computation that `HandleMap` reduces to one
element-wise op or a parameter; they are replaced by that folded result directly (the loop,
the map, the validity check and the dynamic-slice are what XLA's later passes remove). Not
modelled: a scatter of one index that is computed at run time (XLA keeps the validity check,
a reduce of the per-dimension comparisons, and a select), of several operands, or with a
larger computation (XLA keeps a `map`); those stay scatters here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from hlofuse.fusion.xla_gpu.gather_scatter import forget_ids, is_batched, reshape_to
from hlofuse.fusion.xla_gpu.ids import InstructionIds
from hlofuse.ir.attrs import SliceDim
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op, OpKind
from hlofuse.passes.decision_log import DecisionSink, RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching

PASS_NAME = "scatter-expander"


def _index_vector_dim(scatter: Instruction) -> int:
    value = scatter.attrs["index_vector_dim"]
    assert isinstance(value, int)
    return value


def one_index(scatter: Instruction) -> bool:
    """ScatterTripCount(scatter) == 1: the indices hold one index vector."""
    indices = scatter.operands[(len(scatter.operands) - 1) // 2]
    ivd = _index_vector_dim(scatter)
    return all(n == 1 for d, n in enumerate(indices.shape.dims) if d != ivd)


def window_shape(scatter: Instruction) -> tuple[int, ...]:
    """The update window in the operand's rank: the update window dimensions in order, with a
    dimension of size 1 at each inserted window dimension (`InsertDegenerateDims`)."""
    update = scatter.operands[-1]
    sizes = iter(update.shape.dims[d] for d in scatter.ints("update_window_dims"))
    inserted = scatter.ints("inserted_window_dims")
    return tuple(1 if d in inserted else next(sizes)
                 for d in range(scatter.operands[0].shape.rank))


def constant_starts(scatter: Instruction) -> tuple[int, ...] | None:
    """The window's start in the operand (`ExpandIndexVectorIntoOperandSpace`), when the
    indices are a constant."""
    indices = scatter.operands[1]
    if indices.op is not Op.CONSTANT:
        return None
    literal = indices.attrs["literal"]
    assert isinstance(literal, np.ndarray)
    vector = [int(v) for v in literal.reshape(-1)]
    mapped = scatter.ints("scatter_dims_to_operand_dims")
    return tuple(vector[mapped.index(d)] if d in mapped else 0
                 for d in range(scatter.operands[0].shape.rank))


def combiner_root(scatter: Instruction) -> Instruction | None:
    """The one instruction `HandleMap` replaces the `map` by: the computation's root when it
    is a parameter, or an element-wise op whose operands are all parameters."""
    (computation,) = scatter.calls
    root = computation.root
    if root.op is Op.PARAMETER:
        return root
    if (root.definition.kind is not OpKind.ELEMENTWISE or not root.operands
            or any(o.op is not Op.PARAMETER for o in root.operands)):
        return None
    return root


def expands(scatter: Instruction) -> bool:
    """A scatter this pass replaces (see the module docstring for the ones it leaves)."""
    if (scatter.op is not Op.SCATTER or len(scatter.operands) != 3 or is_batched(scatter)
            or scatter.operands[0].shape.rank == 0 or not one_index(scatter)
            or combiner_root(scatter) is None):
        return False
    starts = constant_starts(scatter)
    if starts is None:
        return False
    dims = scatter.operands[0].shape.dims
    return all(0 <= s <= n - w for s, n, w in zip(starts, dims, window_shape(scatter)))


def _parameter_number(parameter: Instruction) -> int:
    number = parameter.attrs["parameter_number"]
    assert isinstance(number, int)
    return number


def expand(scatter: Instruction, operands: tuple[Instruction, ...],
           builder: RewriteBuilder) -> Instruction:
    """The dynamic-update-slice XLA's passes leave of a scatter `expands` accepts."""
    operand, indices, updates = operands
    starts = constant_starts(scatter)
    assert starts is not None
    window = window_shape(scatter)
    update = reshape_to(updates, window, builder)
    root = combiner_root(scatter)
    assert root is not None
    if root.op is Op.PARAMETER and _parameter_number(root) == 1:
        combined = update  # the scatter overwrites: the old window is not read
    else:
        old = builder.add(Op.SLICE, [operand], attrs={"slice": tuple(
            SliceDim(s, s + w) for s, w in zip(starts, window))})
        if root.op is Op.PARAMETER:
            combined = old
        else:
            by_number = {0: old, 1: update}
            combined = builder.add(
                root.op, [by_number[_parameter_number(p)] for p in root.operands],
                attrs=root.attrs, shape=old.shape.with_dtype(root.dtype), name_base=root.name,
                metadata=root.metadata)
    start_constants = [builder.constant(s, indices.dtype) for s in starts]
    return builder.add(Op.DYNAMIC_UPDATE_SLICE, [operand, combined, *start_constants],
                       shape=scatter.shape, metadata=scatter.metadata)


@dataclass(frozen=True, slots=True)
class ScatterExpander:
    """Every scatter of one constant index (see the module docstring) becomes a
    dynamic-update-slice of the operand's window combined with the update."""

    name: ClassVar[str] = PASS_NAME
    ids: InstructionIds | None = field(default=None, compare=False)

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def rewrite(inst: Instruction, operands: tuple[Instruction, ...],
                    builder: RewriteBuilder) -> Instruction:
            records.rewrote(builder.name, inst, "simple-scatter-expanded",
                            f"%{inst.name} scatters one index: a dynamic-update-slice of "
                            "its window combined with the update")
            forget_ids(self.ids, inst.name)
            with builder.metadata_of(inst):
                return expand(inst, operands, builder)

        return rewrite_matching(module, expands, rewrite)

