"""copy-insertion: the copies XLA's GPU compiler leaves in a program after fusion, for `xla-gpu`.

XLA gives every value a buffer and lets values share one where their live ranges allow it
(`xla/service/copy_insertion.cc`). Where they cannot, a `copy` remains, and the GPU runtime
launches it as a device-to-device copy (a kCopy thunk): one launch, in the loop body once per
iteration. The GPU pipeline runs `CopyInsertion` after fusion and again, with the schedule,
`RemoveUnnecessaryCopies` and `AddSpecialCaseCopies` (`gpu_compiler.cc`,
`RunPostSchedulingCopyInsertion`). What is left, and what this pass inserts:

* A while loop's state (`AddCopiesForWhile`, `IndicesToCopyForWhile`): an element the body
  changes needs its own buffer. Its init value gives up its buffer to the loop unless the value
  is read-only (a constant or an entry parameter, `ValueIsReadOnly`), feeds another changed
  element of the same loop, is live out of the computation, or has another reader that runs
  after the loop (one that depends on it: the copy remover cannot order it before, it can
  order every other reader by a control edge, `ComputeRelativeLocation::ForceRuntimeOrder`).
  A read-only value is copied once per element it feeds (`AddSpecialCaseCopies`).
* In the body, the new value of a changed element is written into the element's buffer
  (after the in-place updates and inner loops over the old value, if any, which keep
  the buffer). That
  needs a copy when the new value is not a fresh value of the body (a constant, another
  element, or one value at two indices), when a reader of the old value depends on the
  writer, or when the writer reads the old value in a way that cannot share its buffer (a
  fusion that reads it other than elementwise, `HloDataflowAnalysis::
  CanShareOperandBufferWithUser` with the GPU's `FusionCanShareBufferHint`).
* In-place operations (`AddCopiesForInPlaceOperation`, `GetInPlaceInputOutputPairs`): a
  dynamic-update-slice or scatter, fused or not, writes into its base operand's buffer; the
  base needs a copy under the same conditions as a loop's init value.
* The entry's result (`AddSpecialCaseCopies`, policy of the entry computation): a constant
  or an entry parameter in the result, or one buffer at two indices of it, is copied.

Only the top level of tuples is modelled (loop state and results that are tuples of arrays).
Entry parameters aliased to the result (donation) are not: hlofuse's IR does not carry
`input_output_alias`, so every entry parameter is read-only, as XLA treats an undonated one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import ClassVar

from hlofuse.fusion.kernels import is_free
from hlofuse.fusion.legality.properties import (
    current_xla_rules,
    reduces_contiguous_dimensions,
)
from hlofuse.fusion.xla_gpu.kernel_names import hero, roots_of
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import FusionKind, Op, OpKind
from hlofuse.passes.decision_log import DecisionSink, RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, Transform, rewrite_module

PASS_NAME = "copy-insertion"

# A value: the instruction that defines it and, for an element of a tuple it defines, the
# element's index.
Value = tuple[Instruction, int | None]
_IN_PLACE = (Op.DYNAMIC_UPDATE_SLICE, Op.SCATTER)


def _aliases(inst: Instruction) -> bool:
    """Instructions that name an existing buffer rather than define one."""
    return (inst.op in (Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.BITCAST)
            or (inst.op is Op.RESHAPE and is_free(inst)))


def in_place_operands(inst: Instruction) -> dict[int, int | None]:
    """Operand number -> output index (None: the array result) that an instruction updates in
    place: a dynamic-update-slice or scatter, or a fusion whose output is one of them applied
    to a parameter of the fusion (through bitcasts)."""
    if inst.op in _IN_PLACE:
        return {0: None}
    if inst.op is not Op.FUSION:
        return {}
    root = inst.calls[0].root
    outputs: list[tuple[Instruction, int | None]] = (
        [(o, k) for k, o in enumerate(root.operands)] if root.op is Op.TUPLE else [(root, None)])
    pairs: dict[int, int | None] = {}
    for output, index in outputs:
        current, updated = output, False
        while True:
            if current.op in _IN_PLACE:
                current, updated = current.operands[0], True
            elif current.op is Op.BITCAST or (current.op is Op.RESHAPE and is_free(current)):
                current = current.operands[0]
            else:
                break
        if updated and current.op is Op.PARAMETER:
            pairs.setdefault(current.parameter_number, index)
    return pairs


def reduction_hero(fused: Computation) -> Instruction | None:
    """The reduction the reduction emitter computes first: the hero of the first root whose
    hero is a reduction it tiles (`HloFusionAnalysis::FindHeroReduction`)."""
    for root in roots_of(fused):
        found = hero(root)
        if found.op is Op.REDUCE and reduces_contiguous_dimensions(
                found.operands[0].shape, found.ints("dimensions")):
            return found
    return None


def _reads_in_output_order(parameter: Instruction, fused: Computation,
                           output: int | None) -> bool:
    """The fused parameter reaches the fusion's output `output` (its root, or the root
    tuple's element), and every path from it reads it at the element it writes: element-wise
    ops and bitcasts up to the root tuple, or the hero reduction of a reduction kernel, which
    the reduction emitter computes before it writes any output (GPU
    `FusionCanShareBufferHint`, `xla/service/gpu/buffer_sharing.cc`: a breadth-first walk
    from the parameter that stops below the hero reduction, and `found_path_to_output`).
    Another reduction of the kernel is no exception: its reads may come after the shared
    output's writes. A parameter read only for another output cannot share: the fusion
    would overwrite it while another output still reads it (rollout_implicit_pendulum's
    `loop_select_fusion.1` reads the old angle for the velocity, output 1, and writes the
    new angle, output 0: XLA copies the new angle, `copy.28`)."""
    first_reduction = reduction_hero(fused)
    target = fused.root
    if target.op is Op.TUPLE:
        target = target.operands[output if output is not None else 0]
    users: dict[Instruction, list[Instruction]] = {}
    for inst in fused.instructions:
        for operand in inst.operands:
            users.setdefault(operand, []).append(inst)
    queue, seen, found = deque([parameter]), {parameter}, False
    while queue:
        inst = queue.popleft()
        found |= inst is target
        if inst is first_reduction:
            continue
        for user in users.get(inst, ()):
            if user not in seen:
                seen.add(user)
                queue.append(user)
            elementwise = (user.op.definition.kind is OpKind.ELEMENTWISE
                           and user.shape.dims == parameter.shape.dims)
            bitcast = user.op is Op.BITCAST or (user.op is Op.RESHAPE and is_free(user))
            if (user.op is not Op.TUPLE and not elementwise and not bitcast
                    and user is not first_reduction):
                return False
    return found


def can_share(writer: Instruction, operand_number: int, output: int | None) -> bool:
    """Whether `writer` may write its output `output` into operand `operand_number`'s buffer
    while reading it (`CanShareOperandBufferWithUser`)."""
    operand = writer.operands[operand_number].shape
    result = writer.shape if output is None else writer.shape.elements[output]
    if operand.dims != result.dims or operand.dtype is not result.dtype:
        return False
    if in_place_operands(writer).get(operand_number, -1) == output:
        return True
    if writer.op is Op.FUSION:
        kind = writer.attrs.get("kind")
        if kind not in (FusionKind.LOOP, FusionKind.INPUT):
            return False
        fused = writer.calls[0]
        parameter = next(i for i in fused.instructions
                         if i.op is Op.PARAMETER and i.parameter_number == operand_number)
        return _reads_in_output_order(parameter, fused, output)
    return writer.op.definition.kind is OpKind.ELEMENTWISE


@dataclass
class CopyPlan:
    """Where one computation gets copies: operands of while loops and in-place instructions
    (instruction name -> (operand number or loop-state index)), and indices of its root."""

    loop_inits: dict[str, list[int]] = field(default_factory=dict)  # while -> state indices
    in_place: dict[str, list[int]] = field(default_factory=dict)  # instruction -> operands
    root: list[int] = field(default_factory=list)  # root tuple indices (or [0]: the array)
    reasons: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return (sum(map(len, self.loop_inits.values())) + sum(map(len, self.in_place.values()))
                + len(self.root))


class _Values:
    """The values (defining instruction, element) each instruction of a computation names."""

    def __init__(self, computation: Computation, changed: dict[Instruction, frozenset[int]]
                 ) -> None:
        self.computation = computation
        self.changed = changed  # while instruction -> the state indices its body changes
        self._leaves: dict[Instruction, list[Value]] = {}

    def leaves(self, inst: Instruction) -> list[Value]:
        """The values at each top-level element of `inst` (one for an array)."""
        found = self._leaves.get(inst)
        if found is None:
            found = self._compute(inst)
            self._leaves[inst] = found
        return found

    def _compute(self, inst: Instruction) -> list[Value]:
        if not inst.shape.is_tuple:
            if inst.op is Op.GET_TUPLE_ELEMENT:
                index = int(inst.attr("index"))  # type: ignore[call-overload]
                return [self.leaves(inst.operands[0])[index]]
            if _aliases(inst):
                return self.leaves(inst.operands[0])
            return [(inst, None)]
        if inst.op is Op.TUPLE:
            return [self.leaves(o)[0] if not o.shape.is_tuple else (o, None)
                    for o in inst.operands]
        if inst.op is Op.WHILE:
            changed = self.changed.get(inst, frozenset())
            init = self.leaves(inst.operands[0])
            return [(inst, i) if i in changed else init[i] for i in range(len(init))]
        return [(inst, i) for i in range(len(inst.shape.elements))]


def _changed_indices(body: Computation) -> frozenset[int]:
    """The loop-state indices whose value the body replaces (`IndicesToCopyForWhile`)."""
    values = _Values(body, {})
    parameter = next(i for i in body.instructions if i.op is Op.PARAMETER)
    if not body.root.shape.is_tuple:
        return frozenset({0}) if body.root is not parameter else frozenset()
    return frozenset(i for i, value in enumerate(values.leaves(body.root))
                     if value != (parameter, i))


@dataclass(frozen=True, slots=True, eq=False)
class _Destroyer:
    """A use that overwrites a value's buffer: a loop taking it as the init of a changed state
    element (`where`: the index), an in-place instruction (`where`: the operand number), or
    a body's writer of a state element's new value (`where`: the index; `output`: which of
    the writer's outputs it is)."""

    kind: str  # "loop", "in_place" or "state"
    inst: Instruction
    where: int
    output: int | None = None


def plan_copies(computation: Computation, *, is_entry: bool) -> CopyPlan:
    """The copies XLA's copy insertion leaves in `computation` (entry or while body)."""
    changed = {inst: _changed_indices(inst.calls[1]) for inst in computation.instructions
               if inst.op is Op.WHILE}
    values = _Values(computation, changed)
    plan = CopyPlan()
    users: dict[Instruction, list[Instruction]] = {}
    uses: dict[Value, list[tuple[Instruction, int]]] = {}
    for inst in computation.instructions:
        for number, operand in enumerate(inst.operands):
            users.setdefault(operand, []).append(inst)
            if _aliases(inst):
                continue
            for value in values.leaves(operand):
                uses.setdefault(value, []).append((inst, number))
    root_values = values.leaves(computation.root)

    def after(start: Instruction) -> set[Instruction]:
        """Everything that depends on `start` in this computation."""
        seen: set[Instruction] = set()
        stack = [start]
        while stack:
            for user in users.get(stack.pop(), ()):
                if user not in seen:
                    seen.add(user)
                    stack.append(user)
        return seen

    def read_only(value: Value) -> bool:
        inst = value[0]
        return inst.op is Op.CONSTANT or (is_entry and inst.op is Op.PARAMETER)

    destructive: dict[Value, list[_Destroyer]] = {}
    for inst in computation.instructions:
        if inst.op is Op.WHILE:
            init = values.leaves(inst.operands[0])
            for index in sorted(changed[inst]):
                destructive.setdefault(init[index], []).append(_Destroyer("loop", inst, index))
        for number, output in in_place_operands(inst).items():
            for value in values.leaves(inst.operands[number]):
                destructive.setdefault(value, []).append(
                    _Destroyer("in_place", inst, number, output))
    if not is_entry:
        _plan_loop_state(computation, root_values, destructive, plan)
    live_out = set(root_values)
    for value, destroyers in destructive.items():
        taker = None
        if not read_only(value) and value not in live_out:
            taker = next((d for d in destroyers
                          if _may_take(d, destroyers, uses.get(value, []), after(d.inst))),
                         None)
        for destroyer in destroyers:
            if destroyer is not taker:
                _copy_for(value, destroyer, plan)
    if is_entry:
        seen: set[Value] = set()
        for index, value in enumerate(root_values):
            if read_only(value):
                plan.root.append(index)
                plan.reasons.append(f"result {index}: %{value[0].name} is read-only")
            elif value in seen:
                plan.root.append(index)
                plan.reasons.append(f"result {index}: %{value[0].name} is also an earlier "
                                    "result")
            seen.add(value)
    return plan


def _plan_loop_state(body: Computation, root_values: list[Value],
                     destructive: dict[Value, list[_Destroyer]], plan: CopyPlan) -> None:
    """The body writes each changed element's new value into the element's buffer: the
    writer destroys the old value (the parameter's element), unless the new value is no
    fresh value of the body, which then needs a copy of its own."""
    parameter = next(i for i in body.instructions if i.op is Op.PARAMETER)
    if not body.root.shape.is_tuple:
        return
    counts: dict[Value, int] = {}
    for value in root_values:
        counts[value] = counts.get(value, 0) + 1
    for index, value in enumerate(root_values):
        if value == (parameter, index):
            continue
        writer = value[0]
        if writer.op in (Op.CONSTANT, Op.PARAMETER) or counts[value] > 1:
            plan.root.append(index)
            plan.reasons.append(f"state {index}: %{writer.name} is no fresh value of the body")
            continue
        # The element's buffer may first be updated in place (a scatter of the old state, an
        # inner loop over it): the writer then overwrites the last value of that chain.
        old: Value = (parameter, index)
        while old != value:
            chain = [d for d in destructive.get(old, []) if d.kind in ("in_place", "loop")]
            if len(chain) != 1 or chain[0].inst is writer:
                break
            link = chain[0]
            old = (link.inst, link.output if link.kind == "in_place" else link.where)
        if old == value:
            continue
        kinds = destructive.setdefault(old, [])
        if not any(d.kind == "in_place" and d.inst is writer for d in kinds):
            kinds.append(_Destroyer("state", writer, index, value[1]))


def _copy_for(value: Value, destroyer: _Destroyer, plan: CopyPlan) -> None:
    name, inst, where = value[0].name, destroyer.inst, destroyer.where
    if destroyer.kind == "loop":
        plan.loop_inits.setdefault(inst.name, []).append(where)
        plan.reasons.append(f"%{inst.name} state {where}: copy of %{name}")
    elif destroyer.kind == "in_place":
        plan.in_place.setdefault(inst.name, []).append(where)
        plan.reasons.append(f"%{inst.name} operand {where}: copy of %{name}")
    else:
        plan.root.append(where)
        plan.reasons.append(f"state {where}: %{inst.name} cannot overwrite %{name}")


def _may_take(candidate: _Destroyer, destroyers: list[_Destroyer],
              value_uses: list[tuple[Instruction, int]], later: set[Instruction]) -> bool:
    """Whether `candidate` may write into the value's buffer: every other reader can run
    before it (none depends on it), and it reads the value only where it can share the
    buffer."""
    others = {d.inst for d in destroyers if d is not candidate}
    inst = candidate.inst
    for reader, number in value_uses:
        if reader is inst:
            if candidate.kind == "loop":
                # The loop's init holds this value at an element the body keeps too.
                reads = sum(1 for r, _ in value_uses if r is inst)
                if reads > sum(1 for d in destroyers if d.inst is inst):
                    return False
            elif not (candidate.kind == "in_place" and number == candidate.where) \
                    and not can_share(inst, number, candidate.output):
                return False
        elif reader not in others and reader in later:
            return False
    return True


@dataclass(frozen=True, slots=True)
class GpuCopyInsertion:
    """Adds the copies XLA's copy insertion leaves, after fusion (see the module doc)."""

    name: ClassVar[str] = PASS_NAME

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)
        # Today's emitter choice (which reductions the reduction emitter takes) decides
        # buffer sharing, as in priority fusion.
        with current_xla_rules():
            plans: dict[str, CopyPlan] = {module.entry.name: plan_copies(module.entry,
                                                                         is_entry=True)}
            for comp in module.computations:
                for inst in comp.instructions:
                    if inst.op is Op.WHILE and inst.calls[1].name not in plans:
                        plans[inst.calls[1].name] = plan_copies(inst.calls[1],
                                                                is_entry=False)
        if not any(plan.count for plan in plans.values()):
            return module, False

        def transform_for(comp: Computation) -> Transform | None:
            plan = plans.get(comp.name)
            if plan is None or not plan.count:
                return None
            for reason in plan.reasons:
                records.rewrote(comp.name, comp.root, "copy-inserted", reason)

            def transform(inst: Instruction, operands: tuple[Instruction, ...],
                          builder: RewriteBuilder) -> Instruction | None:
                copied = list(operands)
                if inst.name in plan.loop_inits:
                    copied[0] = _with_copies(operands[0], plan.loop_inits[inst.name], builder)
                for number in plan.in_place.get(inst.name, ()):
                    copied[number] = builder.add(Op.COPY, [operands[number]])
                if inst is comp.root and plan.root:
                    if not inst.shape.is_tuple:
                        return builder.add(Op.COPY, [_same_name(inst, copied, builder)])
                    return _tuple_with_copies(inst, copied, plan.root, builder)
                if copied != list(operands):
                    return _same_name(inst, copied, builder)
                return None

            return transform

        return rewrite_module(module, transform_for)


def _same_name(inst: Instruction, operands: list[Instruction],
               builder: RewriteBuilder) -> Instruction:
    """`inst` over new operands, under its own name (which the module already holds)."""
    rebuilt = Instruction(inst.name, inst.op, tuple(operands), inst.shape, inst.attrs,
                          tuple(builder.callee(c) for c in inst.calls), inst.metadata,
                          inst.extra)
    builder.instructions.append(rebuilt)
    return rebuilt


def _tuple_with_copies(root: Instruction, operands: list[Instruction], indices: list[int],
                       builder: RewriteBuilder) -> Instruction:
    if root.op is Op.TUPLE:
        elements = list(operands)
    else:
        source = _same_name(root, operands, builder)
        elements = [builder.add(Op.GET_TUPLE_ELEMENT, [source], attrs={"index": i})
                    for i in range(len(root.shape.elements))]
    for index in sorted(set(indices)):
        elements[index] = builder.add(Op.COPY, [elements[index]])
    if root.op is Op.TUPLE:
        return _same_name(root, elements, builder)
    return builder.add(Op.TUPLE, elements, shape=root.shape)


def _with_copies(init: Instruction, indices: list[int], builder: RewriteBuilder
                 ) -> Instruction:
    """A loop's init tuple with the elements at `indices` copied."""
    if init.op is Op.TUPLE:
        elements = list(init.operands)
    else:
        elements = [builder.add(Op.GET_TUPLE_ELEMENT, [init], attrs={"index": i})
                    for i in range(len(init.shape.elements))]
    for index in sorted(set(indices)):
        elements[index] = builder.add(Op.COPY, [elements[index]])
    return builder.add(Op.TUPLE, elements, shape=init.shape)
