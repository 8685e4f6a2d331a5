"""while-loop-simplifier: the loop-state rewrites of XLA's WhileLoopSimplifier
(xla/hlo/transforms/simplifiers/while_loop_simplifier.cc), for `xla-gpu`.

XLA runs the pass in its simplification pipeline before fusion; every rewrite below rebuilds a
loop over a different state tuple, so kernels that only kept dead or duplicated state alive
disappear. Per loop, in XLA's order, the first rewrite that applies (XLA's `Run` moves to the
next loop after a success; the surrounding fixed point comes back for more):

1. `repeated-state` (TryRemoveRepeatedWhileTupleIndices): two elements that start from the same
   instruction and that the body passes through unchanged are one; reads of the second read
   the first, and after the loop the second is its initial value.
2. `dead-state` (TryRemoveDeadWhileParams, its first case): an element that no other element's
   next value depends on, that nothing after the loop reads, and that the condition does not
   depend on, is dropped.
3. `constant-state` (TryPropagateConstant): a scalar element that the body passes through and
   that starts as a constant is that constant: its reads in the body and the condition become
   the constant.
4. `merged-induction-variables` (TryMergeInductionVariables): elements of one integer type that
   the body advances by a constant (`x += c`) are computed from one trip counter (the first
   element that starts at 0 and advances by 1; one is added at the end of the state if none
   exists): their reads become `init + counter * c` and the body passes them through.

Not done: the DUS-insertion case of (1), the grouped case of (2), flattening nested tuples,
removing loops of trip count 0 or 1, and removing constant elements (the constant-state rewrite
plus dead-state cover the loops of the corpus). Loops whose body or condition is also called
by another instruction are left alone (XLA clones them; hlofuse rebuilds in place).
The arithmetic the merge leaves (`0 + x * 1`) is removed by `arithmetic-identities`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from hlofuse.analysis.call_graph import call_counts
from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape
from hlofuse.passes.dce import has_side_effect
from hlofuse.passes.decision_log import RewriteLog
from hlofuse.passes.loop_rebuild import tuple_elements, with_reachable_computations
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

PASS_NAME = "while-loop-simplifier"
_INTEGER_KINDS = ("s8", "u8", "s32", "u32", "s64", "u64")  # XLA skips 16-bit types

# read(index, builder, new parameter, original read) -> the value that replaces the read, or
# None when the element is gone (its readers go too).
Read = Callable[[int, ComputationBuilder, Instruction, Instruction], Instruction | None]
# root(old root operands mapped (None: dropped), builder, new parameter) -> the new root
# tuple's operands.
Root = Callable[[list[Instruction | None], ComputationBuilder, Instruction], list[Instruction]]


@dataclass(frozen=True, slots=True)
class _Plan:
    """One rewrite of a loop: the new state, how body and condition read it, what the body
    returns, the new initial elements, and the old loop's elements rebuilt after it."""

    rule: str
    message: str
    shapes: list[Shape]
    read: Read
    root: Root
    init: Callable[[list[Instruction], RewriteBuilder], list[Instruction]]
    after: Callable[[Instruction, list[Instruction], RewriteBuilder], list[Instruction]]


def _gte(builder: ComputationBuilder, value: Instruction, index: int) -> Instruction:
    return builder.add(Op.GET_TUPLE_ELEMENT, [value], attrs={"index": index})


def _passes_through(body: Computation, index: int) -> bool:
    produced = body.root.operands[index]
    return (produced.op is Op.GET_TUPLE_ELEMENT and produced.operands[0] is body.parameters[0]
            and produced.attrs["index"] == index)


def _reads(comp: Computation) -> list[Instruction]:
    param = comp.parameters[0]
    return [i for i in comp.instructions
            if i.op is Op.GET_TUPLE_ELEMENT and i.operands[0] is param]


def _only_element_reads(comp: Computation, root_allowed: bool) -> bool:
    param = comp.parameters[0]
    for inst in comp.instructions:
        if param in inst.operands and inst.op is not Op.GET_TUPLE_ELEMENT \
                and not (root_allowed and inst is comp.root):
            return False
    return True


def _index(inst: Instruction) -> int:
    value = inst.attrs["index"]
    assert isinstance(value, int)
    return value


def _keeping(kept: list[int], shapes: tuple[Shape, ...], rule: str, message: str,
             replaced: dict[int, int] | None = None) -> _Plan:
    """A plan that keeps the elements `kept` (in order); reads of an element in `replaced`
    read the element it names instead; after the loop a dropped element is its initial
    value (XLA's RemoveDeadTupleIndices without a replacement index)."""
    new_index = {old: new for new, old in enumerate(kept)}
    redirect = replaced or {}

    def read(index: int, b: ComputationBuilder, param: Instruction,
             original: Instruction) -> Instruction | None:
        source = redirect.get(index, index)
        if source not in new_index:
            return None
        return dataclasses.replace(original, operands=(param,),
                                   attrs={"index": new_index[source]})

    def root(operands: list[Instruction | None], b: ComputationBuilder,
             param: Instruction) -> list[Instruction]:
        found = [operands[i] for i in kept]
        assert all(o is not None for o in found), "a kept element reads a dropped one"
        return [o for o in found if o is not None]

    def init(elements: list[Instruction], b: RewriteBuilder) -> list[Instruction]:
        return [elements[i] for i in kept]

    def after(loop: Instruction, elements: list[Instruction],
              b: RewriteBuilder) -> list[Instruction]:
        return [_gte(b, loop, new_index[i]) if i in new_index else elements[i]
                for i in range(len(shapes))]

    return _Plan(rule, message, [shapes[i] for i in kept], read, root, init, after)


def repeated_state(loop: Instruction, init: Instruction, body: Computation) -> _Plan | None:
    """TryRemoveRepeatedWhileTupleIndices, pass-through case: the first pivot with
    duplicates."""
    if init.op is not Op.TUPLE:
        return None
    count = len(init.operands)
    for pivot in range(count):
        if not _passes_through(body, pivot):
            continue
        duplicates = [i for i in range(pivot + 1, count) if _passes_through(body, i)
                      and init.operands[i] is init.operands[pivot]]
        if duplicates:
            kept = [i for i in range(count) if i not in duplicates]
            return _keeping(kept, loop.shape.elements, "repeated-state",
                            f"elements {duplicates} of %{loop.name} start as element {pivot} "
                            "and pass through the body: read element "
                            f"{pivot} instead and drop them",
                            {i: pivot for i in duplicates})
    return None


def _dependencies(comp: Computation) -> dict[Instruction, set[int]]:
    """The state elements each instruction of `comp` depends on within one iteration."""
    param = comp.parameters[0]
    deps: dict[Instruction, set[int]] = {}
    for inst in comp.instructions:
        if inst is param:
            deps[inst] = set()
        elif inst.op is Op.GET_TUPLE_ELEMENT and inst.operands[0] is param:
            deps[inst] = {_index(inst)}
        else:
            found: set[int] = set()
            for operand in inst.operands:
                found |= deps.get(operand, set())
            deps[inst] = found
    return deps


def dead_state(loop: Instruction, init: Instruction, cond: Computation, body: Computation,
               used_after: set[int] | None) -> _Plan | None:
    """TryRemoveDeadWhileParams, first case: elements nothing else needs."""
    if not (_only_element_reads(body, root_allowed=False)
            and _only_element_reads(cond, root_allowed=False)):
        return None
    count = len(loop.shape.elements)
    if count == 0:
        return None
    after = set(range(count)) if used_after is None else used_after
    body_deps, cond_deps = _dependencies(body), _dependencies(cond)
    needed = set(cond_deps[cond.root])
    for comp, deps in ((body, body_deps), (cond, cond_deps)):
        for inst in comp.instructions:
            if has_side_effect(inst):
                needed |= deps[inst]
    affecting: set[int] = set()
    for i, produced in enumerate(body.root.operands):
        affecting |= body_deps[produced] - {i}
    dead = [i for i in range(count) if i not in affecting | after | needed]
    if not dead:
        return None
    kept = [i for i in range(count) if i not in dead]
    return _keeping(kept, loop.shape.elements, "dead-state",
                    f"elements {dead} of %{loop.name} are read by nothing else and not "
                    "after the loop: dropped")


def constant_state(loop: Instruction, init: Instruction, cond: Computation,
                   body: Computation) -> _Plan | None:
    """TryPropagateConstant: scalar pass-through elements that start as a constant."""
    if init.op is not Op.TUPLE or body.root.op is not Op.TUPLE:
        return None
    constants = {i: init.operands[i] for i in range(len(init.operands))
                 if _passes_through(body, i) and init.operands[i].op is Op.CONSTANT
                 and init.operands[i].shape.is_array and init.operands[i].shape.rank == 0}
    readers = {_index(r) for comp in (body, cond) for r in _reads(comp)}
    constants = {i: c for i, c in constants.items() if i in readers}
    if not constants:
        return None
    shapes = loop.shape.elements

    def read(index: int, b: ComputationBuilder, param: Instruction,
             original: Instruction) -> Instruction | None:
        if index in constants:
            literal = constants[index].attrs["literal"]
            return b.add(Op.CONSTANT, attrs={"literal": literal}, shape=original.shape,
                         metadata=original.metadata)
        return dataclasses.replace(original, operands=(param,))

    return _Plan("constant-state",
                 f"elements {sorted(constants)} of %{loop.name} stay the constants they start "
                 "as: their reads become those constants",
                 list(shapes), read, _all_operands, lambda e, b: e,
                 lambda new, e, b: [_gte(b, new, i) for i in range(len(shapes))])


def _all_operands(operands: list[Instruction | None], b: ComputationBuilder,
                  param: Instruction) -> list[Instruction]:
    assert all(o is not None for o in operands)
    return [o for o in operands if o is not None]


def _constant_step(produced: Instruction, body: Computation, index: int,
                   kind: str) -> Instruction | None:
    """The constant `c` when the body computes element `index` as `x + c` (either order)."""
    if produced.op is not Op.ADD or produced.dtype.text != kind:
        return None
    param = body.parameters[0]
    for x, c in (produced.operands, produced.operands[::-1]):
        if (x.op is Op.GET_TUPLE_ELEMENT and x.operands[0] is param and _index(x) == index
                and c.op is Op.CONSTANT and c.shape.num_elements == 1):
            return c
    return None


def _is_all(inst: Instruction, value: int) -> bool:
    literal = inst.attrs.get("literal")
    return inst.op is Op.CONSTANT and literal is not None \
        and bool(np.all(np.asarray(literal) == value))


def merged_induction_variables(loop: Instruction, init: Instruction,
                               body: Computation) -> _Plan | None:
    """TryMergeInductionVariables, for each integer type in XLA's order (first that
    applies)."""
    if init.op is not Op.TUPLE or body.root.op is not Op.TUPLE:
        return None
    for kind in _INTEGER_KINDS:
        counter: int | None = None
        steps: dict[int, Instruction] = {}
        for i, produced in enumerate(body.root.operands):
            step = _constant_step(produced, body, i, kind)
            if step is None:
                continue
            if counter is None and _is_all(step, 1) and _is_all(init.operands[i], 0):
                counter = i
            else:
                steps[i] = step
        if len(steps) + (counter is not None) >= 2:
            return _merge_plan(loop, kind, counter, steps)
    return None


def _merge_plan(loop: Instruction, kind: str, counter: int | None,
                steps: dict[int, Instruction]) -> _Plan:
    shapes = list(loop.shape.elements)
    added = counter is None
    trip = len(shapes) if counter is None else counter
    scalar = Shape.array(steps[next(iter(steps))].dtype, ()) if steps else shapes[trip]
    if added:
        shapes.append(scalar)

    def value(b: ComputationBuilder, base: Instruction, count: Instruction,
              index: int) -> Instruction:
        step = steps[index]
        c = b.add(Op.CONSTANT, attrs={"literal": step.attrs["literal"]}, shape=step.shape)
        if count.shape != base.shape:
            count = b.add(Op.RESHAPE, [count], shape=base.shape)
        if c.shape != base.shape:
            c = b.add(Op.RESHAPE, [c], shape=base.shape)
        product = b.add(Op.MULTIPLY, [count, c])
        return b.add(Op.ADD, [base, product])

    def read(index: int, b: ComputationBuilder, param: Instruction,
             original: Instruction) -> Instruction | None:
        raw = dataclasses.replace(original, operands=(param,))
        if index not in steps:
            return raw
        b.instructions.append(raw)
        return value(b, raw, _gte(b, param, trip), index)

    def root(operands: list[Instruction | None], b: ComputationBuilder,
             param: Instruction) -> list[Instruction]:
        new: list[Instruction] = []
        for i, o in enumerate(operands):
            assert o is not None
            new.append(_gte(b, param, i) if i in steps else o)
        if added:
            one = b.add(Op.CONSTANT, attrs={"literal": np.asarray(1, scalar.dtype.numpy)},
                        shape=scalar)
            new.append(b.add(Op.ADD, [_gte(b, param, trip), one]))
        return new

    def init(elements: list[Instruction], b: RewriteBuilder) -> list[Instruction]:
        if not added:
            return elements
        zero = b.add(Op.CONSTANT, attrs={"literal": np.asarray(0, scalar.dtype.numpy)},
                     shape=scalar)
        return elements + [zero]

    def after(new: Instruction, elements: list[Instruction],
              b: RewriteBuilder) -> list[Instruction]:
        count = _gte(b, new, trip)
        return [value(b, _gte(b, new, i), count, i) if i in steps else _gte(b, new, i)
                for i in range(len(loop.shape.elements))]

    where = f"a new trip counter (element {trip})" if added else f"the trip counter {trip}"
    return _Plan("merged-induction-variables",
                 f"{kind} elements {sorted(steps)} of %{loop.name} advance by a constant: "
                 f"computed from {where}", shapes, read, root, init, after)


def _rebuild(comp: Computation, state: Shape, read: Read, root: Root | None,
             names: NameUniquer) -> Computation:
    """`comp` (a loop body or condition) over the new state. The old computation goes away,
    so instructions keep their names; readers of a dropped element are dropped."""
    param = comp.parameters[0]
    b = ComputationBuilder(comp.name, names)
    new_param = dataclasses.replace(param, shape=state)
    mapping: dict[Instruction, Instruction | None] = {param: new_param}
    b.instructions.append(new_param)
    for inst in comp.instructions:
        if inst is param:
            continue
        if inst.op is Op.GET_TUPLE_ELEMENT and inst.operands[0] is param:
            mapping[inst] = read(_index(inst), b, new_param, inst)
            replacement = mapping[inst]
            if replacement is not None and replacement not in b.instructions:
                b.instructions.append(replacement)
            continue
        if root is not None and inst is comp.root:
            elements = root([mapping[o] for o in inst.operands], b, new_param)
            new = b.add(Op.TUPLE, elements, shape=state, name=None, metadata=inst.metadata)
            mapping[inst] = new
            continue
        mapped = [mapping[o] for o in inst.operands]
        if any(o is None for o in mapped):
            mapping[inst] = None
            continue
        operands = tuple(o for o in mapped if o is not None)
        same = all(x is y for x, y in zip(operands, inst.operands))
        new = inst if same else dataclasses.replace(inst, operands=operands)
        b.instructions.append(new)
        mapping[inst] = new
    result = mapping[comp.root]
    assert result is not None, f"the root of %{comp.name} reads a dropped element"
    return b.build(result)


def _used_after(loop: Instruction, comp: Computation) -> set[int] | None:
    """The elements read after the loop; None when the whole tuple is used (or is the root)."""
    if comp.root is loop:
        return None
    used: set[int] = set()
    for inst in comp.instructions:
        if loop in inst.operands:
            if inst.op is not Op.GET_TUPLE_ELEMENT:
                return None
            used.add(_index(inst))
    return used


@dataclass(frozen=True, slots=True)
class WhileLoopSimplifier:
    """Drops dead, duplicated and constant loop state and merges induction variables."""

    name: ClassVar[str] = PASS_NAME

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)
        counts = call_counts(module)

        used = {loop: _used_after(loop, comp) for comp in module.computations
                for loop in comp.instructions if loop.op is Op.WHILE}

        def simplify(inst: Instruction, operands: tuple[Instruction, ...],
                     builder: RewriteBuilder) -> Instruction | None:
            if not inst.shape.is_tuple or any(counts[id(c)] > 1 for c in inst.calls):
                return None
            cond, body = (builder.callee(c) for c in inst.calls)
            if body.root.op is not Op.TUPLE or any(has_side_effect(i) for i in
                                                   cond.instructions):
                return None
            init = operands[0]
            plan = (repeated_state(inst, init, body)
                    or dead_state(inst, init, cond, body, used[inst])
                    or constant_state(inst, init, cond, body)
                    or merged_induction_variables(inst, init, body))
            if plan is None:
                return None
            records.rewrote(builder.name, inst, plan.rule, plan.message)
            return _apply(inst, init, cond, body, plan, builder)

        module, changed = rewrite_matching(module, lambda inst: inst.op is Op.WHILE, simplify)
        if not changed:
            return module, False
        return with_reachable_computations(module), True


def _apply(loop: Instruction, init: Instruction, cond: Computation, body: Computation,
           plan: _Plan, builder: RewriteBuilder) -> Instruction:
    """The new loop, and a tuple of the old loop's shape standing for it."""
    state = Shape.tuple_of(plan.shapes)
    elements = tuple_elements(init, builder)
    new_init = builder.add(Op.TUPLE, plan.init(elements, builder), metadata=init.metadata)
    new_cond = _rebuild(cond, state, plan.read, None, builder.names)
    new_body = _rebuild(body, state, plan.read, plan.root, builder.names)
    new_loop = dataclasses.replace(loop, operands=(new_init,), calls=(new_cond, new_body),
                                   shape=state)
    builder.instructions.append(new_loop)
    return builder.add(Op.TUPLE, plan.after(new_loop, elements, builder))
