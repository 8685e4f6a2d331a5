"""Rebuilding frozen computations with some instructions replaced, keeping names and metadata.

IR objects are immutable, so a pass that replaces one instruction must re-create every user
of it, and every computation that calls a re-created computation. `rewrite_module` does that
once for all passes: it walks each computation in definition order, asks a transform for a
replacement of each instruction (given its already rewritten operands), and reuses the
original object wherever nothing below it changed, so an untouched module comes back as the
same objects and `changed` is exact.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping

from hlofuse.analysis.call_graph import callee_order
from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op


class RewriteBuilder(ComputationBuilder):
    """The builder a transform gets: `rewritten` maps each original instruction seen so far to
    what replaced it (itself if kept)."""

    def __init__(self, name: str, names: NameUniquer,
                 callees: Mapping[Computation, Computation]) -> None:
        super().__init__(name, names)
        self.rewritten: dict[Instruction, Instruction] = {}
        self.callees = callees  # original computation -> its rewritten version

    def callee(self, comp: Computation) -> Computation:
        return self.callees.get(comp, comp)

    @contextlib.contextmanager
    def metadata_of(self, inst: Instruction) -> Iterator[None]:
        """Instructions added inside (without metadata of their own) carry `inst`'s: the
        user's source line of what they replace."""
        saved, self.metadata = self.metadata, inst.metadata
        try:
            yield
        finally:
            self.metadata = saved


# transform(original, rewritten operands, builder) -> replacement, or None to keep the original
# (re-pointed at the rewritten operands). New instructions are created with `builder.add`; they
# get module-unique names. A replacement must have the original's shape.
Transform = Callable[[Instruction, tuple[Instruction, ...], RewriteBuilder], Instruction | None]


def module_names(module: Module) -> NameUniquer:
    """A name uniquer that already holds every instruction name of `module`."""
    return _ModuleNames(module)


class _ModuleNames(NameUniquer):
    """Reserves the module's names when first asked for one: most rewrites of a fixed point
    create no instruction, and reserving every name of the module costs more than they do."""

    def __init__(self, module: Module) -> None:
        super().__init__()
        self._module: Module | None = module

    def _fill(self) -> None:
        module, self._module = self._module, None
        if module is not None:
            for inst in module.all_instructions():
                NameUniquer.reserve(self, inst.name)

    def reserve(self, name: str) -> bool:
        self._fill()
        return super().reserve(name)

    def unique(self, base: str) -> str:
        self._fill()
        return super().unique(base)


def rebuild_computation(computation: Computation, transform: Transform | None,
                        names: NameUniquer, callees: Mapping[Computation, Computation],
                        keep: Callable[[Instruction], bool] | None = None
                        ) -> tuple[Computation, bool]:
    """`computation` with `transform` applied and called computations replaced per `callees`.

    Instructions for which `keep` is false are dropped; nothing kept may use them.
    """
    if transform is None and keep is None and (
            not callees or not any(c in callees for inst in computation.instructions
                                   for c in inst.calls)):
        # Nothing to rewrite or drop and no callee replaced: every instruction would be kept
        # as it is, operands first, so the computation stays.
        return computation, False
    builder = RewriteBuilder(computation.name, names, callees)
    order: list[Instruction] = []
    mapping = builder.rewritten
    changed = False
    added = builder.instructions
    rewritten = mapping.__getitem__
    for inst in computation.instructions:
        if keep is not None and not keep(inst):
            changed = True
            continue
        operands = inst.operands
        if operands:
            operands = tuple(map(rewritten, operands))
        calls = tuple(callees.get(c, c) for c in inst.calls) if inst.calls else ()
        start = len(added)
        result = transform(inst, operands, builder) if transform is not None else None
        if len(added) != start:
            order.extend(added[start:])
        if result is None:
            # Instructions and computations compare by identity (eq=False): tuple equality is
            # an identity test per element, done in C.
            if operands == inst.operands and calls == inst.calls:
                result = inst
            else:
                # A clone keeps name, attributes and metadata; shapes cannot change because the
                # rewritten operands have the shapes of the originals.
                # (The constructor, not dataclasses.replace: this is the hot line of every
                # frozen-IR pass on a large module, and replace costs three times as much.)
                result = Instruction(inst.name, inst.op, operands, inst.shape, inst.attrs,
                                     calls, inst.metadata, inst.extra)
                changed = True
            order.append(result)
        elif result is not inst:
            changed = True
            if result.shape != inst.shape:
                raise ValueError(f"rewriting %{inst.name} ({inst.shape.text(False)}) gave "
                                 f"%{result.name} of shape {result.shape.text(False)}")
        mapping[inst] = result
    if not changed:
        return computation, False
    return Computation(computation.name, tuple(order), mapping[computation.root]), True



def rewrite_module(module: Module,
                   transform_for: Callable[[Computation], Transform | None],
                   keep_for: Callable[[Computation], Callable[[Instruction], bool] | None]
                   = lambda comp: None) -> tuple[Module, bool]:
    """Apply `transform_for(computation)` to every computation, callees first."""
    names = module_names(module)
    callees: dict[Computation, Computation] = {}
    changed = False
    for comp in callee_order(module):
        new, comp_changed = rebuild_computation(comp, transform_for(comp), names, callees,
                                                keep_for(comp))
        if comp_changed:
            callees[comp] = new
            changed = True
    if not changed:
        return module, False
    return replace_computations(module, callees), True


def rewrite_matching(module: Module, matches: Callable[[Instruction], bool],
                     rewrite: Transform) -> tuple[Module, bool]:
    """`rewrite` applied to each instruction that `matches` (returning None keeps it), in the
    computations holding one; the others are not rebuilt. `builder.name` names the
    computation being rewritten."""

    def transform(inst: Instruction, operands: tuple[Instruction, ...],
                  builder: RewriteBuilder) -> Instruction | None:
        return rewrite(inst, operands, builder) if matches(inst) else None

    def transform_for(comp: Computation) -> Transform | None:
        return transform if any(map(matches, comp.instructions)) else None

    return rewrite_module(module, transform_for)


def replace_computations(module: Module, replacements: Mapping[Computation, Computation]
                         ) -> Module:
    """`module` with computations swapped (callers must already call the replacements)."""
    computations = tuple(replacements.get(c, c) for c in callee_order(module))
    entry = replacements.get(module.entry, module.entry)
    return Module(module.name, computations, entry, module.debug_tables)


def rewrite_callers(module: Module, op: Op, rewrite: Transform) -> tuple[Module, bool]:
    """`rewrite` applied to each `op` instruction (one that calls computations: a call, a
    conditional); the computations no longer called are dropped."""
    module, changed = rewrite_matching(module, lambda inst: inst.op is op, rewrite)
    if changed:
        module, _ = without_unreachable(module)
    return module, changed


def without_unreachable(module: Module) -> tuple[Module, bool]:
    """Drop computations that nothing reachable from the entry calls."""
    reachable: set[int] = set()
    stack = [module.entry]
    while stack:
        comp = stack.pop()
        if id(comp) in reachable:
            continue
        reachable.add(id(comp))
        stack.extend(comp.called_computations)
    kept = tuple(c for c in callee_order(module) if id(c) in reachable)
    if len(kept) == len(module.computations):
        return module, False
    return Module(module.name, kept, module.entry, module.debug_tables), True
