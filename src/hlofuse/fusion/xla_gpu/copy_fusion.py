"""copy-fusion: a copy of a fusion's output in the entry computation becomes one more output of
that fusion, for `xla-gpu` (after copy insertion, as XLA's GPU pipeline runs it).

XLA's `CopyFusion` (`xla/service/gpu/transforms/copy_fusion.cc`, `DoCopyFusion`) looks at the
entry computation only (in a loop body a copy shares its buffer with the loop state, which a
fusion's output may not). A fusion takes the copies of its outputs (reached through one
get-tuple-element and one bitcast, each with no other user) as extra outputs when everything
reachable from its parameters is element-wise on them (`OnlyElementwiseOpsReachableFromParams`:
a copy or anything else that moves elements refuses), its root is not a reduction, a scatter,
or a tuple of slices only, a copy keeps its operand's shape, and none of the fusion's outputs
is written by a dynamic-update-slice (such a fusion may run in place). The copy then launches
nothing: the fusion writes both buffers. XLA also checks `FusionFitsInBudget`, which one extra
output of a kernel this small does not exceed; it is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.fusion.kernels import is_free
from hlofuse.fusion.legality.properties import reduces_contiguous_dimensions
from hlofuse.ir.hlo import Computation, Instruction, Module, reachable_computations
from hlofuse.ir.ops import Op, OpKind
from hlofuse.ir.shapes import Shape
from hlofuse.passes.decision_log import DecisionSink, RewriteLog

PASS_NAME = "copy-fusion"


def _elementwise_from_parameters(fused: Computation) -> bool:
    users: dict[Instruction, list[Instruction]] = {}
    for inst in fused.instructions:
        for operand in inst.operands:
            users.setdefault(operand, []).append(inst)
    stack = [i for i in fused.instructions if i.op is Op.PARAMETER]
    seen = set(stack)
    while stack:
        for user in users.get(stack.pop(), ()):
            moves = (user.op.definition.kind is not OpKind.ELEMENTWISE or user.op is Op.COPY
                     or any(o.shape.dims != user.shape.dims for o in user.operands
                            if o.shape.is_array and o.shape.num_elements > 1))
            if moves and user.op not in (Op.BITCAST, Op.TUPLE):
                return False
            if user not in seen:
                seen.add(user)
                stack.append(user)
    return True


def _roots(fused: Computation) -> list[Instruction]:
    return list(fused.root.operands) if fused.root.op is Op.TUPLE else [fused.root]


def _takes_copies(fusion: Instruction) -> bool:
    fused = fusion.calls[0]
    root = fused.root
    roots = _roots(fused)
    if root.op is Op.SCATTER or (root.op is not Op.TUPLE and _is_reduction(root)):
        return False
    if root.op is Op.TUPLE and all(r.op is Op.SLICE for r in roots):
        return False
    if any(_written_by_update(r) for r in roots):
        return False
    return _elementwise_from_parameters(fused)


def _is_reduction(inst: Instruction) -> bool:
    return inst.op is Op.REDUCE and reduces_contiguous_dimensions(inst.operands[0].shape,
                                                                  inst.ints("dimensions"))


def _written_by_update(inst: Instruction) -> bool:
    while inst.op is Op.BITCAST or (inst.op is Op.RESHAPE and is_free(inst)):
        inst = inst.operands[0]
    return inst.op is Op.DYNAMIC_UPDATE_SLICE


def plan_copy_fusion(entry: Computation) -> dict[str, list[tuple[Instruction, list[Instruction],
                                                                  int | None]]]:
    """fusion name -> the copies it takes: (copy, the chain from the fusion's output to the
    copy, outermost last, the output's index or None for a single output)."""
    users: dict[Instruction, list[Instruction]] = {}
    for inst in entry.instructions:
        for operand in inst.operands:
            users.setdefault(operand, []).append(inst)
    plan: dict[str, list[tuple[Instruction, list[Instruction], int | None]]] = {}
    for fusion in entry.instructions:
        if fusion.op is not Op.FUSION or not _takes_copies(fusion):
            continue
        taken = []
        for user in users.get(fusion, ()):
            current, chain, index = user, [], None
            if current.op is Op.GET_TUPLE_ELEMENT and len(users.get(current, ())) == 1:
                index = int(current.attr("index"))  # type: ignore[call-overload]
                if _is_reduction(_roots(fusion.calls[0])[index]):
                    continue
                current = users[current][0]
            if current.op is Op.BITCAST and len(users.get(current, ())) == 1:
                chain.append(current)
                current = users[current][0]
            if current.op is Op.COPY and current.shape == current.operands[0].shape \
                    and not current.shape.is_tuple:
                taken.append((current, chain, index))
        if taken:
            plan[fusion.name] = taken
    return plan


@dataclass(frozen=True, slots=True)
class CopyFusion:
    """Fuses the entry's copies of fusion outputs into those fusions (see the module doc)."""

    name: ClassVar[str] = PASS_NAME

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        entry = module.entry
        plan = plan_copy_fusion(entry)
        if not plan:
            return module, False
        records = RewriteLog(log, self.name)
        replaced: dict[Instruction, Instruction] = {}
        order: list[Instruction] = []
        counter = [0]
        taken_names = {i.name for c in module.computations for i in c.instructions}

        def fresh(base: str) -> str:
            while True:
                counter[0] += 1
                name = f"{base}.cf{counter[0]}"
                if name not in taken_names:
                    taken_names.add(name)
                    return name

        def add(inst: Instruction) -> Instruction:
            order.append(inst)
            return inst

        copy_outputs: dict[Instruction, tuple[Instruction, int]] = {}
        for inst in entry.instructions:
            operands = tuple(replaced.get(o, o) for o in inst.operands)
            if inst in copy_outputs:
                fusion, index = copy_outputs[inst]
                replaced[inst] = add(Instruction(fresh("get-tuple-element"),
                                                 Op.GET_TUPLE_ELEMENT, (fusion,), inst.shape,
                                                 {"index": index}))
                continue
            if inst.name not in plan:
                new = inst if operands == inst.operands else Instruction(
                    inst.name, inst.op, operands, inst.shape, inst.attrs, inst.calls,
                    inst.metadata, inst.extra)
                replaced[inst] = add(new)
                continue
            fused = inst.calls[0]
            outputs = _roots(fused)
            extra: list[Instruction] = []
            body = list(fused.instructions)
            for copy, chain, output in plan[inst.name]:
                value = outputs[output if output is not None else 0]
                for link in [*chain, copy]:
                    value = Instruction(fresh(link.op.text), link.op, (value,), link.shape,
                                        link.attrs)
                    body.append(value)
                extra.append(value)
                records.rewrote(entry.name, copy, "copy-fused",
                                f"%{copy.name} becomes an output of %{inst.name}")
            elements = outputs + extra
            root = Instruction(fresh("tuple"), Op.TUPLE, tuple(elements),
                               Shape.tuple_of([e.shape for e in elements]))
            if fused.root.op is Op.TUPLE:
                body.remove(fused.root)
            body.append(root)
            new_fused = Computation(fused.name, tuple(body), root)
            fusion = add(Instruction(inst.name, inst.op, operands, root.shape, inst.attrs,
                                     (new_fused,), inst.metadata, inst.extra))
            if fused.root.op is Op.TUPLE:
                parts = [add(Instruction(fresh("get-tuple-element"), Op.GET_TUPLE_ELEMENT,
                                         (fusion,), o.shape, {"index": k}))
                         for k, o in enumerate(outputs)]
                replaced[inst] = add(Instruction(fresh("tuple"), Op.TUPLE, tuple(parts),
                                                 inst.shape))
            else:
                replaced[inst] = add(Instruction(fresh("get-tuple-element"),
                                                 Op.GET_TUPLE_ELEMENT, (fusion,), inst.shape,
                                                 {"index": 0}))
            for k, (copy, _, _) in enumerate(plan[inst.name]):
                copy_outputs[copy] = (fusion, len(outputs) + k)
        new_entry = Computation(entry.name, tuple(order), replaced[entry.root])
        computations = tuple(reachable_computations(new_entry))
        return Module(module.name, computations, new_entry, module.debug_tables), True
