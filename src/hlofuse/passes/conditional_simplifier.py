"""XLA's rewrites of `conditional` before fusion, for `xla-gpu`.

Two passes, both in XLA's GPU simplification fixed point (gpu_compiler.cc, pipeline
"simplification"):

- `conditional-pred-index` (the AlgebraicSimplifier, pass "algsimp"): a two-branch conditional
  whose branch index is `convert(p)` of a `pred[]` p becomes a conditional on p itself, with
  branch 1 as its true and branch 0 as its false computation (p converts to 1 when true). JAX
  lowers `lax.cond(p, ...)` with that convert; XLA's per-pass dump of the corpus program `cond`
  (`--xla_dump_hlo_pass_re=.*`, jaxlib 0.10.2) shows the rewrite in the "algsimp" step, before
  "simplify-conditional".
- `conditional-simplifier` (ConditionalSimplifier::TryRemoveConditional): a conditional with
  one branch, or with a constant branch index, is replaced by the branch it runs (inlined; an
  s32 index out of range runs the last branch); a two-branch conditional on a `pred` whose
  branches hold no expensive instruction (everything element-wise, or a broadcast,
  concatenate, dynamic-slice, get-tuple-element, reduce, reshape, pad, parameter, slice or
  tuple) and neither of which is empty (only parameters, tuples and get-tuple-elements, with
  an array in its result: running it is cheaper than a select) is replaced by both branches
  inlined and `select(p, true result, false result)` per array of the result (the predicate
  broadcast to the array's shape unless it is a scalar). Conditionals with side-effecting
  instructions in a branch stay (`HasSideEffect`).

`max` runs the same pass with `select_chains` (ours, not XLA's): a conditional on an `s32`
index whose branches are all cheap and non-empty by the same test becomes every branch
inlined and a chain of selects, `select(i == 0, b0, select(i == 1, b1, ... b[n-1]))` (an
index out of range runs the last branch, as the conditional does). JAX lowers `lax.switch`
to such a conditional; left as control flow it keeps the loop around it from being one
kernel (lane code runs no conditionals), and its branches are as cheap as XLA's test for the
two-branch case asks.

Not modelled: the simplifier's tuple clean-ups (merging duplicate and dropping unused result
elements and unused operands): they change no kernel.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op, OpKind
from hlofuse.ir.shapes import Shape
from hlofuse.passes.call_inliner import inline_computation
from hlofuse.passes.dce import has_side_effect
from hlofuse.passes.decision_log import RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_callers

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

# TryRemoveConditional's instruction_is_expensive: these ops are cheap although not
# element-wise.
_CHEAP = frozenset({Op.BROADCAST, Op.CONCATENATE, Op.DYNAMIC_SLICE, Op.GET_TUPLE_ELEMENT,
                    Op.REDUCE, Op.RESHAPE, Op.PAD, Op.PARAMETER, Op.SLICE, Op.TUPLE})
# XLA's IsElementwise holds for these besides the element-wise ops.
_ALSO_ELEMENTWISE = frozenset({Op.CONSTANT, Op.COPY})
_EMPTY = frozenset({Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.PARAMETER})


def _expensive(inst: Instruction) -> bool:
    if inst.op in _CHEAP or inst.op in _ALSO_ELEMENTWISE:
        return False
    return inst.definition.kind is not OpKind.ELEMENTWISE


def _has_array(shape: Shape) -> bool:
    if shape.is_array:
        return True
    return any(_has_array(s) for s in shape.elements)


def _empty_with_array_root(comp: Computation) -> bool:
    """ComputationIsEmptyWithArrayRoot."""
    return all(i.op in _EMPTY for i in comp.instructions) and _has_array(comp.root.shape)


def _side_effects(comp: Computation, seen: set[int] | None = None) -> bool:
    seen = set() if seen is None else seen
    if id(comp) in seen:
        return False
    seen.add(id(comp))
    return any(has_side_effect(i) or any(_side_effects(c, seen) for c in i.calls)
               for i in comp.instructions)


def _pred_of_convert(index: Instruction) -> Instruction | None:
    if (index.op is Op.CONVERT and index.operands[0].dtype is DType.PRED
            and index.operands[0].shape.rank == 0):
        return index.operands[0]
    return None


@dataclass(frozen=True, slots=True)
class ConditionalPredIndex:
    """conditional(convert(p), b0, b1) -> conditional(p, true=b1, false=b0)."""

    name: ClassVar[str] = "conditional-pred-index"

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def transform(inst: Instruction, operands: tuple[Instruction, ...],
                      builder: RewriteBuilder) -> Instruction | None:
            if len(inst.calls) != 2:
                return None
            pred = _pred_of_convert(operands[0])
            if pred is None:
                return None
            records.rewrote(builder.name, inst, "pred-index",
                            f"%{inst.name}'s index converts the pred %{pred.name}: it "
                            "branches on the pred")
            calls = tuple(builder.callee(c) for c in inst.calls)
            swapped = dataclasses.replace(inst, operands=(pred, operands[2], operands[1]),
                                          calls=(calls[1], calls[0]))
            builder.instructions.append(swapped)
            return swapped

        return rewrite_callers(module, Op.CONDITIONAL, transform)


def _constant_branch(index: Instruction, branches: int) -> int | None:
    """The branch a constant index runs (a pred: true runs the first computation)."""
    if index.op is not Op.CONSTANT:
        return None
    value = np.asarray(index.attrs["literal"]).reshape(()).item()
    if index.dtype is DType.PRED:
        return 0 if value else 1
    chosen = int(value)
    return chosen if 0 <= chosen < branches else branches - 1


@dataclass(frozen=True, slots=True)
class ConditionalSimplifier:
    """TryRemoveConditional: inlines a conditional whose branch is known or cheap to run;
    with `select_chains`, cheap conditionals on an s32 index too (ours, for `max`)."""

    name: ClassVar[str] = "conditional-simplifier"
    select_chains: bool = False

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def transform(inst: Instruction, operands: tuple[Instruction, ...],
                      builder: RewriteBuilder) -> Instruction | None:
            branches = tuple(builder.callee(c) for c in inst.calls)
            if any(_side_effects(b) for b in branches):
                return None
            chosen = 0 if len(branches) == 1 else _constant_branch(operands[0], len(branches))
            if chosen is not None:
                records.rewrote(builder.name, inst, "known-branch",
                                f"%{inst.name} always runs branch {chosen}: it is inlined")
                return inline_computation(branches[chosen], (operands[1 + chosen],), builder,
                                          keep_names=False)
            if (any(_expensive(i) for b in branches for i in b.instructions)
                    or any(_empty_with_array_root(b) for b in branches)):
                return None
            if operands[0].dtype is not DType.PRED:
                if not self.select_chains or operands[0].dtype is not DType.S32:
                    return None
                records.rewrote(builder.name, inst, "select-chain",
                                f"%{inst.name}'s {len(branches)} branches are cheap: all run "
                                "and a chain of selects on the index picks the result")
                results = [inline_computation(b, (operands[1 + k],), builder, keep_names=False)
                           for k, b in enumerate(branches)]
                chosen_result = results[-1]
                for k in range(len(branches) - 2, -1, -1):
                    is_k = builder.add(Op.COMPARE, [operands[0], builder.constant(k, DType.S32)],
                                       attrs={"direction": "EQ"},
                                       shape=Shape.array(DType.PRED, ()))
                    chosen_result = _select(builder, is_k, results[k], chosen_result, inst)
                return chosen_result
            if len(branches) != 2:
                return None
            records.rewrote(builder.name, inst, "select-branches",
                            f"%{inst.name}'s branches are cheap: both run and a select "
                            "picks the result")
            on_true = inline_computation(branches[0], (operands[1],), builder, keep_names=False)
            on_false = inline_computation(branches[1], (operands[2],), builder,
                                          keep_names=False)
            return _select(builder, operands[0], on_true, on_false, inst)

        return rewrite_callers(module, Op.CONDITIONAL, transform)


def _select(builder: RewriteBuilder, pred: Instruction, on_true: Instruction,
            on_false: Instruction, conditional: Instruction) -> Instruction:
    """select(pred, t, f) per array of the result, as TryRemoveConditional builds it."""
    metadata = conditional.metadata
    shape = on_false.shape
    if shape.is_array:
        condition = pred
        if shape.rank > 0:
            condition = builder.add(Op.BROADCAST, [pred], attrs={"dimensions": ()},
                                    shape=Shape.array(DType.PRED, shape.dims))
        return builder.add(Op.SELECT, [condition, on_true, on_false], metadata=metadata)
    parts = []
    for i, element in enumerate(shape.elements):
        t = builder.add(Op.GET_TUPLE_ELEMENT, [on_true], attrs={"index": i}, shape=element)
        f = builder.add(Op.GET_TUPLE_ELEMENT, [on_false], attrs={"index": i}, shape=element)
        parts.append(_select(builder, pred, t, f, conditional))
    return builder.add(Op.TUPLE, parts, metadata=metadata)
