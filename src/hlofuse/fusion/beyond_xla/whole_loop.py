"""whole-loop-fusion: a while loop that runs independently per lane becomes one kernel.

A loop qualifies when its state splits into per-lane arrays (leading dimension N) and
uniform values, each iteration computes lane e's new state from lane e's old
state and uniform values only, the uniform values and the trip count do not depend on
per-lane values, and the per-lane state is small (the analysis is
`hlofuse.analysis.parallel_loop`; sums across the lanes that only accumulate, such as CartPole's
episode count, and per-step reductions across the lanes, such as a scan's [T] output of the
reward summed over the lanes, are allowed). Such a loop is wrapped as it is in a fusion of
kind kCustom whose called computation holds the loop, its operands being the loop's initial
values, so the interpreter still evaluates it unchanged; the code generator
(codegen/whole_loop.py) emits it as one kernel: blocks of `lanes` lanes split across threads,
the time loop inside each block, the state in block-local arrays, the uniform values computed
once per step.

Algorithm: every while of a computation that is not (inside) a fusion is planned; fusions in
its body and condition (when the pass runs after the fusion passes) are inlined first, since
the kernel computes the whole body element by element anyway. A loop that qualifies is
replaced by the fusion; one that does not is left alone and the refusal is logged with a rule
id naming the first offending instruction (`whole-loop-opaque-op`,
`whole-loop-cross-lane-reduce`, `whole-loop-cross-lane-access`,
`whole-loop-data-dependent-trip-count`, `whole-loop-state-too-large`,
`whole-loop-nested-control-flow`, `whole-loop-state-not-tuple`,
`whole-loop-no-parallel-dimension`).

Run it before the fusion passes (strategy `+whole_loop` does): they then leave the wrapped
loop alone, and only fuse what stays outside. XLA has no such pass: it fuses loop bodies in
isolation and runs the loop on the host (docs/xla-fusion.md, section 16.1); the hand-written
CartPole kernel of the peers benchmark is what this reproduces.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

from hlofuse.analysis.counted_loops import NotCounted, counted_loop
from hlofuse.analysis.lane_classification import element_read
from hlofuse.analysis.parallel_loop import (
    DEFAULT_MAX_STATE_ELEMENTS_PER_LANE,
    DEFAULT_MAX_UNIFORM_ELEMENTS,
    LoopPlan,
    plan_parallel_loop,
)
from hlofuse.analysis.parallel_loop_refusals import Refusal
from hlofuse.analysis.rare_selects import rare_selects
from hlofuse.analysis.whole_loop_config import MAX_LANES, block_lanes, whole_loop_config
from hlofuse.ir.attrs import RawAttr
from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import FusionKind, Op
from hlofuse.passes.call_inliner import inline_computation
from hlofuse.passes.decision_log import FUSIBLE, DecisionRecord, Figure, Verdict
from hlofuse.passes.loop_rebuild import with_reachable_computations
from hlofuse.passes.rewrite import RewriteBuilder, Transform, rewrite_module
from hlofuse.passes.simplify import simplify_computation

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

# Lanes per block of a loop with a rare select (`default_lanes`).
RARE_SELECT_LANES = 64


def fusion_reachable(module: Module) -> set[int]:
    """id() of every computation called, directly or not, from a fused computation."""
    out: set[int] = set()
    stack = [c for inst in module.all_instructions() if inst.op is Op.FUSION for c in inst.calls]
    while stack:
        comp = stack.pop()
        if id(comp) in out:
            continue
        out.add(id(comp))
        stack.extend(comp.called_computations)
    return out


@dataclass(frozen=True, slots=True)
class WholeLoopFusion:
    """Wraps every loop that is parallel over lanes into one kCustom fusion."""

    name: ClassVar[str] = "whole-loop-fusion"
    lanes: int = 0  # lanes per block; 0 chooses per loop (`default_lanes`)
    max_state_elements_per_lane: int = DEFAULT_MAX_STATE_ELEMENTS_PER_LANE
    max_uniform_elements: int = DEFAULT_MAX_UNIFORM_ELEMENTS

    def __post_init__(self) -> None:
        if not 0 <= self.lanes <= MAX_LANES:
            raise ValueError(f"whole-loop-fusion: lanes must be in 0..{MAX_LANES} (0: chosen "
                             f"per loop), got {self.lanes}")
        if self.max_state_elements_per_lane < 1 or self.max_uniform_elements < 1:
            raise ValueError("whole-loop-fusion: the element limits must be positive")

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        skipped = fusion_reachable(module)
        computation_names = NameUniquer()
        for computation in module.computations:
            computation_names.reserve(computation.name)
        callers = Counter(id(c) for inst in module.all_instructions() for c in inst.calls)
        shared = {key for key, count in callers.items() if count > 1}

        def transform_for(comp: Computation) -> Transform | None:
            if id(comp) in skipped or not any(i.op is Op.WHILE for i in comp.instructions):
                return None

            def transform(inst: Instruction, operands: tuple[Instruction, ...],
                          builder: RewriteBuilder) -> Instruction | None:
                if inst.op is not Op.WHILE:
                    return None
                return self._loop(comp, inst, operands, builder, log, computation_names,
                                  shared)

            return transform

        module, changed = rewrite_module(module, transform_for)
        if changed:
            module = with_reachable_computations(module)
        return module, changed

    def _loop(self, comp: Computation, inst: Instruction, operands: tuple[Instruction, ...],
              builder: RewriteBuilder, log: DecisionSink | None,
              computation_names: NameUniquer, shared: set[int]) -> Instruction | None:
        calls = tuple(builder.callee(c) for c in inst.calls)
        loop = dataclasses.replace(inst, operands=operands, calls=tuple(
            _unfused(c, builder.names, computation_names, id(original) in shared)
            for c, original in zip(calls, inst.calls)))
        plan = plan_parallel_loop(loop,
                                  max_state_elements_per_lane=self.max_state_elements_per_lane,
                                  max_uniform_elements=self.max_uniform_elements)
        if isinstance(plan, Refusal):
            _log_refusal(log, comp, inst, plan)
            return None
        fusion = self._wrap(loop, builder, computation_names.unique("whole_loop_computation"),
                            plan)
        _log_fusion(log, comp, inst, fusion, plan, self.lanes or default_lanes(plan))
        return fusion

    def _wrap(self, loop: Instruction, builder: RewriteBuilder, name: str,
              plan: LoopPlan) -> Instruction:
        """fusion(initial values), kind=kCustom, calling { params; tuple; while }; the
        backend_config records the plan for code generation."""
        init = loop.operands[0]
        if init.op is Op.TUPLE:
            values = list(dict.fromkeys(init.operands))
        else:
            values = [builder.add(Op.GET_TUPLE_ELEMENT, [init], attrs={"index": i})
                      for i in range(len(init.shape.elements))]
        inner = ComputationBuilder(name, builder.names)
        params = {id(v): inner.parameter(k, v.shape) for k, v in enumerate(values)}
        elements = init.operands if init.op is Op.TUPLE else values
        state = inner.add(Op.TUPLE, [params[id(v)] for v in elements], metadata=init.metadata)
        inner.instructions.append(dataclasses.replace(loop, operands=(state,)))
        fused = inner.build()
        return builder.add(Op.FUSION, values, attrs={"kind": FusionKind.CUSTOM}, calls=[fused],
                           shape=loop.shape, metadata=loop.metadata,
                           extra=[("backend_config", RawAttr(whole_loop_config(
                               self.lanes or default_lanes(plan), plan)))])


def default_lanes(plan: LoopPlan) -> int:
    """Lanes per block: RARE_SELECT_LANES when the loop has a rare select (an auto-reset that
    draws fresh state), since the kernel computes its costly operand for the lanes of a block
    that pick it, one vector at a time, and a larger block lists more of them per vector
    (measured on the rollout corpus: particles, resetting 19 % of its lanes per step, 1.2x
    faster at 64 lanes than at 32, the others unchanged); otherwise 16, or 32 when the
    program has 8-bit lane values (predicates, s8/u8 state). The 16/32 rule dates from lane
    code holding predicates in bytes (gcc vectorised a lane loop with as many lanes as the
    narrowest type fits in a vector); lane code now computes predicates in 32 bits
    (codegen/whole_loop_lanes.py), and the rule is kept until it is measured again."""
    if rare_selects(plan):
        return RARE_SELECT_LANES
    narrowest = min((inst.dtype.bits for inst in plan.body.instructions
                     if id(inst) in plan.lane and inst.shape.is_array), default=32)
    return 32 if narrowest <= 8 else 16


def _unfused(comp: Computation, names: NameUniquer, computation_names: NameUniquer,
             shared: bool) -> Computation:
    """`comp` with every fusion replaced by the instructions of its fused computation, and
    every nested loop with a constant trip count (the same for every lane: JAX's CPU Threefry
    rounds, a `fori_loop` integrator) replaced by its iterations, so that the lane's kernel
    runs it as straight-line code: at most NESTED_MAX_TRIP_COUNT iterations (XLA's
    WhileLoopUnroller limit) and NESTED_UNROLL_INSTRUCTIONS instructions in all. A larger
    nested loop stays a loop (a physics engine's substeps or a solver's iterations), which
    lane code runs as a loop (codegen/whole_loop_nested.py): written out, its chain of
    dependent values would grow with the trip count and so would code generation and the C
    compiler's time."""
    flat = comp
    if any(i.op in (Op.FUSION, Op.WHILE) for i in comp.instructions):
        builder = ComputationBuilder(comp.name, names)
        root = _flattened(comp, tuple(comp.parameters), builder, computation_names, top=True)
        flat = Computation(comp.name, tuple(builder.instructions), root,
                           tuple(comp.parameters))
    # The unrolled iterations' counters are constants now, and so is what they index (the
    # Threefry rotation distances): folded, lane code shifts by literals (rotates), and
    # fewer values are computed once per step and handed to the lanes.
    simplified = simplify_computation(flat, names,
                                      max_broadcast_elements=FOLDED_BROADCAST_ELEMENTS)
    if simplified is comp:
        return comp
    if not shared:
        return simplified
    # Loops may share a computation (JAX's Threefry rounds): each copy gets names of its own.
    builder = ComputationBuilder(computation_names.unique(comp.name), names)
    params = tuple(builder.add(Op.PARAMETER, attrs={"parameter_number": p.parameter_number},
                               shape=p.shape, name_base=p.name)
                   for p in simplified.parameters)
    root = inline_computation(simplified, params, builder, keep_names=False)
    return builder.build(root)


# Small broadcasts of constants fold too: a value computed once per step from them would be
# handed to every lane through a table (`randint`'s span, a u32[1] of the key's shape).
FOLDED_BROADCAST_ELEMENTS = 64


NESTED_MAX_TRIP_COUNT = 64
# Instructions of an unrolled nested loop (trip count x body) at most: JAX's CPU Threefry (5
# rounds of 64) and a few substeps of a small integrator (the particles rollout: 4 x 45) are
# written out; 16 substeps of a spring chain (16 x 81) stay a loop.
NESTED_UNROLL_INSTRUCTIONS = 512


def _flattened(comp: Computation, operands: tuple[Instruction, ...],
               builder: ComputationBuilder, computation_names: NameUniquer,
               top: bool = False) -> Instruction:
    """`comp` applied to `operands`, its instructions copied into `builder` with fusions
    inlined and constant-trip-count loops unrolled; returns the copy of its root. A nested
    loop kept a loop has its own computations flattened, and an element it passes on
    unchanged is read from its initial value (lane code then holds it once)."""
    copies: dict[int, Instruction] = {}
    for param in comp.parameters:
        copies[id(param)] = operands[param.parameter_number]
    for inst in comp.instructions:
        if inst.op is Op.PARAMETER:
            if top:
                builder.instructions.append(inst)
            continue
        mapped = tuple(copies[id(o)] for o in inst.operands)
        if inst.op is Op.FUSION:
            copies[id(inst)] = _flattened(inst.calls[0], mapped, builder, computation_names)
            continue
        calls = inst.calls
        if inst.op is Op.WHILE:
            unrolled = _unrolled(inst, mapped, builder, computation_names)
            if unrolled is not None:
                copies[id(inst)] = unrolled
                continue
            calls = tuple(_unfused(c, builder.names, computation_names, True)
                          for c in inst.calls)
        if inst.op is Op.GET_TUPLE_ELEMENT and (unchanged := _unchanged(mapped[0], inst)):
            copies[id(inst)] = unchanged
            continue
        name = inst.name if top else builder.names.unique(inst.name)
        copy = (inst if mapped == inst.operands and calls == inst.calls and top
                else dataclasses.replace(inst, name=name, operands=mapped, calls=calls))
        builder.instructions.append(copy)
        copies[id(inst)] = copy
    return copies[id(comp.root)]


def _unchanged(source: Instruction, read: Instruction) -> Instruction | None:
    """The initial value of the element `read` takes from loop `source`, when the loop's body
    passes that element on unchanged."""
    if source.op is not Op.WHILE or source.operands[0].op is not Op.TUPLE:
        return None
    root = source.calls[1].root
    index = read.attrs["index"]
    assert isinstance(index, int)
    if root.op is not Op.TUPLE or element_read(root.operands[index]) != index:
        return None
    return source.operands[0].operands[index]


def _unrolled(loop: Instruction, operands: tuple[Instruction, ...],
              builder: ComputationBuilder, computation_names: NameUniquer
              ) -> Instruction | None:
    """The iterations of a nested loop with a constant trip count, or None (kept a loop)."""
    cond, body = loop.calls
    try:
        counted = counted_loop(loop, operands[0], cond, body)
    except NotCounted:
        return None
    if (counted.trip_count > NESTED_MAX_TRIP_COUNT
            or counted.trip_count * counted.body_instructions > NESTED_UNROLL_INSTRUCTIONS):
        return None
    state = operands[0]
    for _ in range(counted.trip_count):
        state = _flattened(body, (state,), builder, computation_names)
    return state


def _lines(inst: Instruction | None) -> tuple[str, ...]:
    location = inst.source_location if inst is not None else None
    return (location,) if location else ()


def _log_refusal(log: DecisionSink | None, comp: Computation, loop: Instruction,
                 refusal: Refusal) -> None:
    if log is None:
        return
    offender = refusal.instruction
    consumer = offender if offender is not loop else None
    figures: dict[str, Figure] = dict(refusal.figures)
    log.append(DecisionRecord(
        WholeLoopFusion.name, comp.name, loop.name, consumer.name if consumer else None,
        Verdict.NO,
        refusal.rule, refusal.message, loop.op.text, consumer.op.text if consumer else "",
        (), MappingProxyType(figures), _lines(loop), _lines(consumer)))


def _log_fusion(log: DecisionSink | None, comp: Computation, loop: Instruction,
                fusion: Instruction, plan: LoopPlan, lanes: int) -> None:
    if log is None:
        return
    accumulated = [a.element for a in plan.accumulators]
    per_step = [s.element for s in plan.step_reductions]
    logged = [s.element for s in plan.step_logs]
    block = block_lanes(lanes, plan.size)
    message = (f"%{loop.name} runs as one kernel %{fusion.name}: {plan.size} lanes in "
               f"blocks of {block}, per-lane elements {list(plan.per_lane)}, uniform "
               f"{list(plan.uniform)}" + (f", accumulated {accumulated}" if accumulated else "")
               + (f", reduced over the lanes per step {per_step}" if per_step else "")
               + (f", logged a slice per step {logged}" if logged else "")
               + (f", read-only {list(plan.read_only)}" if plan.read_only else "")
               + _nested_text(plan))
    figures: dict[str, Figure] = {
        "lanes": plan.size, "block_lanes": block, "per_lane_elements": len(plan.per_lane),
        "uniform_elements": len(plan.uniform), "accumulators": len(plan.accumulators),
        "step_reductions": len(plan.step_reductions), "step_logs": len(plan.step_logs),
        "read_only_elements": len(plan.read_only),
        "lane_instructions": len(plan.lane), "uniform_instructions": len(plan.uniform_code),
        "nested_loops": len(plan.nested),
    }
    log.append(DecisionRecord(
        WholeLoopFusion.name, comp.name, loop.name, fusion.name, Verdict.FUSE, FUSIBLE, message,
        loop.op.text, fusion.op.text, (), MappingProxyType(figures), _lines(loop), ()))


def _nested_text(plan: LoopPlan) -> str:
    """The nested loops lane code runs, each with how its trip count is decided."""
    if not plan.nested:
        return ""
    loops = [f"%{inst.name}" + (" (per-lane trip counts, each block until its lanes are done)"
                                if plan.nested[id(inst)].lane_condition is not None else "")
             for inst in plan.nested_loops()]
    return ", nested loops run in lane code " + ", ".join(loops)
