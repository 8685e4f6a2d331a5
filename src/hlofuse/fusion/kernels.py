"""The kernels a (fused or unfused) module launches, and how many run per loop iteration.

A kernel is a top-level instruction that does work on the device: every fusion (kind kLoop,
kInput or kOutput), every library call (dot, custom call, rng-bit-generator) and every other
instruction left unfused (one kernel per instruction, as XLA emits them). Free instructions
launch nothing: parameters, constants (XLA keeps them as external buffers), tuples and
get-tuple-elements (buffer bookkeeping), bitcasts and reshapes that do not move bytes (XLA
turns them into bitcasts after layout assignment), and control flow itself (while,
conditional and call run on the host; the kernels of their computations are counted there).

Kernels in a while loop's body and condition run once per iteration; `loops` names the
enclosing while instructions, outermost first. A loop whose trip count is known
(`backend_config={"known_trip_count":...}`, `passes/trip_count.py`) runs as a counted loop,
as XLA's GPU runtime runs it: its condition is never evaluated, so its kernels are not listed.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlofuse.analysis.loop_config import known_trip_count, stated_trip_count
from hlofuse.fusion.graphs.graph import Graph, Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph
from hlofuse.fusion.legality.properties import is_contiguous_reduction, minor_to_major
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import FusionKind, Op, OpKind
from hlofuse.ir.shapes import default_layout


@dataclass(frozen=True, slots=True)
class Kernel:
    """One launch: its instruction, emitter kind, where it runs and what it computes."""

    name: str
    kind: str  # kLoop, kInput, kOutput (fusions and unfused ops alike), or "library"
    computation: str
    loops: tuple[str, ...]  # enclosing while instructions, outermost first
    instructions: tuple[str, ...]  # fused instructions (parameters excluded), or the op itself
    ops: tuple[str, ...]
    source_lines: tuple[str, ...]
    is_fusion: bool

    @property
    def loop(self) -> str | None:
        """The innermost while loop that runs this kernel once per iteration, if any."""
        return self.loops[-1] if self.loops else None

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "kind": self.kind, "computation": self.computation,
                "loop": self.loop, "loops": list(self.loops),
                "instructions": list(self.instructions), "ops": list(self.ops),
                "source_lines": list(self.source_lines), "fused": self.is_fusion}


def is_free(node: Node | Instruction) -> bool:
    """Launches nothing: buffer plumbing (the op table's `buffer_only`), and the ops that
    run other computations (their kernels are those of the computations)."""
    definition = node.op.definition
    if definition.buffer_only or (definition.kind is OpKind.CONTROL
                                  and node.op is not Op.FUSION):
        return True
    if node.op is Op.RESHAPE:
        source = node.operands[0].shape
        return (minor_to_major(source) == default_layout(source.rank)
                and minor_to_major(node.shape) == default_layout(node.shape.rank))
    return False


def kernel_kind(node: Node) -> str:
    if node.is_fusion:
        return node.kind
    if node.op.definition.kind is OpKind.OPAQUE:
        return "library"
    return FusionKind.INPUT if is_contiguous_reduction(node) else FusionKind.LOOP


def _kernel(node: Node, loops: tuple[str, ...]) -> Kernel:
    if node.is_fusion:
        # A multi-output fusion's root tuple only lists outputs; it computes nothing.
        inner = [n for n in node.fused.post_order() if n.op not in (Op.PARAMETER, Op.TUPLE)]
    else:
        inner = [node]
    return Kernel(node.name, kernel_kind(node), node.parent.name, loops,
                  tuple(n.name for n in inner), tuple(n.op.text for n in inner),
                  node.source_locations(), node.is_fusion)


@dataclass(frozen=True, slots=True)
class Loop:
    """A while loop: where it is, its body and condition, and the loops around it."""

    name: str
    computation: str
    body: str
    condition: str
    loops: tuple[str, ...]
    source_lines: tuple[str, ...]
    trip_count: int | None = None  # known: a counted loop, its condition never runs

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "computation": self.computation, "body": self.body,
                "condition": self.condition, "enclosing_loops": list(self.loops),
                "source_lines": list(self.source_lines), "known_trip_count": self.trip_count}


def list_kernels(module: Module) -> tuple[list[Kernel], list[Loop]]:
    """Every kernel and every while loop, in the order of a walk from the entry computation."""
    kernels: list[Kernel] = []
    loops: list[Loop] = []
    with ModuleGraph.from_module(module) as graphs:
        assert graphs.entry is not None
        _walk(graphs.entry, (), kernels, loops, set())
    return kernels, loops


def _walk(graph: Graph, enclosing: tuple[str, ...], kernels: list[Kernel], loops: list[Loop],
          active: set[Graph]) -> None:
    active = active | {graph}
    for node in graph.post_order():
        if node.op is Op.WHILE:
            condition, body = node.calls
            trips = stated_trip_count(node.extra)
            loops.append(Loop(node.name, graph.name, body.name, condition.name, enclosing,
                              node.source_locations(), trips))
            for callee in (body,) if trips is not None else (condition, body):
                if callee not in active:
                    _walk(callee, enclosing + (node.name,), kernels, loops, active)
        elif node.op in (Op.CONDITIONAL, Op.CALL):
            for callee in node.calls:
                if callee not in active:
                    _walk(callee, enclosing, kernels, loops, active)
        elif not is_free(node):
            kernels.append(_kernel(node, enclosing))


def count_kernels_per_iteration(module: Module) -> dict[str, int]:
    """`kernels_per_iteration(*list_kernels(module))`, counted on the frozen module without
    listing each kernel's instructions (a compile saves the counts with its executable)."""
    counts: dict[str, int] = {}

    def walk(computation: Computation, loop: str | None,
             active: frozenset[Computation]) -> None:
        active = active | {computation}
        for inst in computation.instructions:
            if inst.op is Op.WHILE:
                counts[inst.name] = 0
                condition, body = inst.calls
                counted = known_trip_count(inst) is not None
                for callee in (body,) if counted else (condition, body):
                    if callee not in active:
                        walk(callee, inst.name, active)
            elif inst.op in (Op.CONDITIONAL, Op.CALL):
                for callee in inst.calls:
                    if callee not in active:
                        walk(callee, loop, active)
            elif loop is not None and not is_free(inst):
                counts[loop] += 1

    walk(module.entry, None, frozenset())
    return counts


def kernels_per_iteration(kernels: list[Kernel], loops: list[Loop]) -> dict[str, int]:
    """For each while loop: the kernels its body and condition launch per iteration (those of
    nested loops are counted under the nested loops)."""
    counts = {loop.name: 0 for loop in loops}
    for kernel in kernels:
        if kernel.loop is not None:
            counts[kernel.loop] += 1
    return counts
