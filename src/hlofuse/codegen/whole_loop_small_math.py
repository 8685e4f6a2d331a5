"""Lane code of small-argument math (codegen/whole_loop_lanes.py): sin, cos and fmod of the
state in the math library's small-argument forms, the full functions only in a step where
some lane's argument is beyond the form's limit, checked before the step or, speculatively,
while it runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hlofuse.analysis.parallel_loop import LoopPlan
from hlofuse.codegen import cir, mathlib
from hlofuse.codegen.cir import Expr, Stmt
from hlofuse.codegen.emitter_types import Index, Value, expr_of
from hlofuse.codegen.op_expressions import math_arguments
from hlofuse.codegen.whole_loop_elements import L, lane_part_indices
from hlofuse.codegen.whole_loop_lane_code import LaneCode
from hlofuse.codegen.whole_loop_lanes import math_lane_dim
from hlofuse.ir.hlo import Instruction


@dataclass(frozen=True)
class SmallMath:
    """The small-argument math of one loop's lane code: its plan (the time loop's, or a
    nested loop's), the instructions with their forms, and the names of the flag that a lane's
    argument is beyond a form's limit and of the arrays of full values."""

    plan: LoopPlan
    calls: list[tuple[Instruction, mathlib.SmallArgumentForm]]
    large: str = "large"
    full: str = "fm"


class SmallArgumentLanes(LaneCode):
    """The small-argument forms' checks, full values and readers."""

    def _declare_small_argument_values(self, math: SmallMath | None = None) -> None:
        """Per block (per nested loop), the arrays the full functions fill in a step where
        some argument is too large for the small forms (zeroed, so that lane code may read
        them unconditionally)."""
        math = math or SmallMath(self.plan, self.small_math)
        for k, (inst, _) in enumerate(math.calls):
            positions = inst.shape.num_elements // math.plan.size
            self.body.declare(self._register_type(inst.dtype), f"{math.full}{k}",
                              dims=(positions, self.lanes), zeroed=True, speculable=True)

    def _small_argument_check(self, math: SmallMath | None = None) -> None:
        """Lane code computes the small-argument math values inline with the small forms,
        except in a step where some lane's argument is too large for them (a branch the block
        almost never takes): the full functions then fill `fm<k>[position][lane]` first and
        lane code reads those. The header's functions hold under DAZ/FTZ as they are, so they
        are called directly (libm calls get their arguments and results flushed)."""
        math = math or SmallMath(self.plan, self.small_math)
        if not math.calls:
            return
        body = self.body
        large = body.declare(cir.Special.INT, math.large, cir.Int(0))
        with self._lane_loop(cir.Loop(reduction=("|", math.large))):
            self._declare_lane_index()
            tests: list[Stmt] = []
            for inst, form in math.calls:
                for index in lane_part_indices(inst.shape.dims, self.lane_index,
                                               _lane_dim(math.plan, inst)):
                    arguments = self._math_arguments(inst, index)
                    test = cir.Assign(large, cir.Unary("!", cir.call(form.guard, *arguments)),
                                      "|=")
                    if test not in tests:
                        tests.append(test)
                        body.emit(test)
        with body.if_(large), self._lane_loop(cir.Loop(simd=True)):
            self._declare_lane_index()
            for k, (inst, form) in enumerate(math.calls):
                full = mathlib.lookup(form.name, form.dtype)
                assert full is not None
                indices = lane_part_indices(inst.shape.dims, self.lane_index,
                                            _lane_dim(math.plan, inst))
                for q, index in enumerate(indices):
                    arguments = self._math_arguments(inst, index)
                    body.assign(cir.load(f"{math.full}{k}", cir.Int(q), L),
                                cir.call(full.c_name, *arguments))
        for k, (inst, form) in enumerate(math.calls):
            self.lane_em.bindings[id(inst)] = self._small_argument_reader(math, k, inst, form)

    def _math_arguments(self, inst: Instruction, index: Index) -> list[Expr]:
        """The math function's arguments at `index`, as the elemental emitter passes them."""
        values = [expr_of(self.lane_em.array_value(x, index)) for x in inst.operands]
        return math_arguments(inst, values)

    def _small_argument_reader(self, math: SmallMath, k: int, inst: Instruction,
                               form: mathlib.SmallArgumentForm) -> Callable[[Index], Value]:
        full_value = self._lane_reader(f"{math.full}{k}", inst.dtype, inst.shape.dims,
                                       _lane_dim(math.plan, inst))

        def read(index: Index) -> Value:
            # computed outside the select: gcc if-converts no conditional division (fmod's)
            small = self.body.let(self._register_type(inst.dtype),
                                  cir.call(form.c_name, *self._math_arguments(inst, index)))
            chosen = cir.Select(cir.Var(math.large), expr_of(full_value(index)),
                                expr_of(small))
            return self.body.let(self._register_type(inst.dtype), chosen)

        return read

    def _speculative_reader(self, inst: Instruction, form: mathlib.SmallArgumentForm,
                            beyond: cir.Var) -> Callable[[Index], Value]:
        def read(index: Index) -> Value:
            arguments = self._math_arguments(inst, index)
            self.body.assign(beyond, cir.Unary("!", cir.call(form.guard, *arguments)), "|=")
            return self.body.let(self._register_type(inst.dtype), cir.call(form.c_name, *arguments))

        return read


def _lane_dim(plan: LoopPlan, inst: Instruction) -> int:
    lane_dim = math_lane_dim(plan, inst)
    assert lane_dim is not None
    return lane_dim
