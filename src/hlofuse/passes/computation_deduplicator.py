"""computation-deduplicator: XLA's HloComputationDeduplicator and the FlattenCallGraph after
it, for `xla-gpu`, on the computations control flow calls.

XLA's GPU compiler deduplicates computations in its optimisation pipeline, after the
simplification fixed point (hlo_computation_deduplicator.cc, `HloComputationDeduplicator::Run`):
computations are visited callees first; one that is not the entry, has at most 128
instructions and at most 1024 bytes of constants and is identical to one seen before (the same
instructions in the same order with the same shapes, layouts, attributes and constants, and
callees that are the same or duplicates; names and metadata do not count) is replaced by that
one everywhere. Layout assignment then flattens the call graph (`FlattenCallGraph`): a
computation that control flow (a conditional's branch, a while loop's condition or body, a
call) reaches from a second call site is cloned for it, its instructions under fresh names
(`add.6` for a copy of `add.1`: only metadata ties a copy to its original, as in XLA's output).
So two conditionals with identical branches run copies of the first one's branches: their
kernels are the same instructions as the first conditional's, which is how XLA names them.

Here only the computations control flow calls are deduplicated; XLA also merges identical
reducers (`to_apply`), which changes no kernel.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hlofuse.analysis.call_graph import callee_order
from hlofuse.ir.builder import NameUniquer
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.passes.rewrite import module_names, without_unreachable

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

# HloComputationDeduplicator's limits.
MAX_INSTRUCTIONS = 128
MAX_CONSTANT_BYTES = 1024
_CONTROL_FLOW = frozenset({Op.CONDITIONAL, Op.WHILE, Op.CALL})


def _value_key(value: object) -> object:
    if isinstance(value, np.ndarray):
        return (str(value.dtype), value.shape, value.tobytes())
    if isinstance(value, (tuple, list)):
        return tuple(_value_key(v) for v in value)
    return repr(value)


def _constant_bytes(comp: Computation) -> int:
    return sum(i.shape.byte_size for i in comp.instructions if i.op is Op.CONSTANT)


def _key(comp: Computation, canonical: dict[int, Computation]) -> tuple[object, ...]:
    position = {id(inst): n for n, inst in enumerate(comp.instructions)}
    rows: list[object] = []
    for inst in comp.instructions:
        attrs = tuple(sorted((k, _value_key(v)) for k, v in inst.attrs.items()))
        extra = tuple((k, raw.text) for k, raw in inst.extra if k != "metadata")
        calls = tuple(id(canonical.get(id(c), c)) for c in inst.calls)
        rows.append((inst.op.text, inst.shape.text(True), attrs, extra, calls,
                     tuple(position[id(o)] for o in inst.operands),
                     inst is comp.root))
    return tuple(rows)


def _control_flow_callees(module: Module) -> set[int]:
    return {id(c) for inst in module.all_instructions() if inst.op in _CONTROL_FLOW
            for c in inst.calls}


@dataclass(frozen=True, slots=True)
class ComputationDeduplicator:
    """Identical control-flow computations become one, then each call site its own copy."""

    name: ClassVar[str] = "computation-deduplicator"

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        control = _control_flow_callees(module)
        canonical: dict[int, Computation] = {}
        seen: dict[tuple[object, ...], Computation] = {}
        for comp in callee_order(module):
            if (comp is module.entry or id(comp) not in control
                    or len(comp.instructions) > MAX_INSTRUCTIONS
                    or _constant_bytes(comp) > MAX_CONSTANT_BYTES):
                continue
            key = _key(comp, canonical)
            first = seen.setdefault(key, comp)
            if first is not comp:
                canonical[id(comp)] = first
        if not canonical:
            return module, False
        return _flatten(module, canonical), True


def _flatten(module: Module, canonical: dict[int, Computation]) -> Module:
    """Control flow calls the canonical computations; a second call site gets a clone."""
    names = module_names(module)
    computation_names = NameUniquer()
    for comp in module.computations:
        computation_names.reserve(comp.name)
    used: set[int] = set()
    built: dict[int, Computation] = {}  # original computation -> rebuilt (first call site)

    def rebuild(comp: Computation, clone: bool) -> Computation:
        if not clone and id(comp) in built:
            return built[id(comp)]
        copies: dict[int, Instruction] = {}
        order: list[Instruction] = []
        changed = clone
        for inst in comp.instructions:
            calls = inst.calls
            if inst.op in _CONTROL_FLOW:
                calls = tuple(_site(c) for c in inst.calls)
            operands = tuple(copies[id(o)] for o in inst.operands)
            name = names.unique(inst.op.text) if clone else inst.name
            if clone or calls != inst.calls or operands != inst.operands:
                new = dataclasses.replace(inst, name=name, operands=operands, calls=calls)
                changed = True
            else:
                new = inst
            copies[id(inst)] = new
            order.append(new)
        result = comp
        if changed:
            result = Computation(_clone_name(comp.name, computation_names) if clone
                                 else comp.name, tuple(order), copies[id(comp.root)])
        if not clone:
            built[id(comp)] = result
        return result

    def _site(callee: Computation) -> Computation:
        target = canonical.get(id(callee), callee)
        if id(target) in used:
            return rebuild(target, True)
        used.add(id(target))
        return rebuild(target, False)

    entry = rebuild(module.entry, False)
    computations: list[Computation] = []
    _collect(entry, computations, set())
    flattened = Module(module.name, tuple(computations), entry, module.debug_tables)
    flattened, _ = without_unreachable(flattened)
    return flattened


def _collect(comp: Computation, out: list[Computation], seen: set[int]) -> None:
    """Callees before callers."""
    if id(comp) in seen:
        return
    seen.add(id(comp))
    for callee in comp.called_computations:
        _collect(callee, out, seen)
    out.append(comp)


def _clone_name(name: str, names: NameUniquer) -> str:
    base = f"{name}.clone"
    return base if names.reserve(base) else names.unique(base)
