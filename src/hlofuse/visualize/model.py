"""The fusion graph of a strategy's result, as nested boxes, nodes and edges (no drawing).

Boxes (clusters): the entry computation; one per kernel (a fusion, a library call or an
unfused instruction), holding the instructions it computes; one per while loop (or
conditional, or call) in the computation that runs it, holding its body and condition (or
branches) as boxes of their own, so loops and their bodies nest. A fusion that runs inside a
kernel (whole-loop fusion puts a loop with fusions into one kernel) is a box of kind "fused".
Nodes: instructions, with the user's source line as tooltip; a fusion's parameters are left
out (their edges start at the operand outside). Edges: operand to user; the blocked edges of
`explain` (a pass refused to fuse and the two are still separate) carry their rule id, as do
sibling groups that multi-output or horizontal fusion refused (drawn between the siblings).

A graph of more than `COLLAPSE_ABOVE` instructions is collapsed: each kernel is one node with
the number of instructions it computes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hlofuse.fusion.explain import blocked_edges
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import FusionKind, Op

if TYPE_CHECKING:
    from hlofuse.fusion.strategies import FusionResult

COLLAPSE_ABOVE = 400
_FREE_OPS = frozenset({Op.PARAMETER, Op.CONSTANT, Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.BITCAST,
                       Op.AFTER_ALL})


@dataclass(slots=True)
class GraphNode:
    id: str
    label: tuple[str, ...]
    tooltip: str
    kind: str  # "instruction", "free" (no work: parameter, tuple, ...), "control", "kernel"
    op: str


@dataclass(slots=True)
class Cluster:
    id: str
    label: str
    tooltip: str
    kind: str  # "computation", "kernel", "fused", "loop", "body", "condition", "branch"
    kernel_kind: str = ""  # kLoop, kInput, kOutput, kCustom or library, for kernels
    children: list[GraphNode | Cluster] = field(default_factory=list)

    def nodes(self) -> Iterator[GraphNode]:
        for child in self.children:
            if isinstance(child, Cluster):
                yield from child.nodes()
            else:
                yield child

    def clusters(self) -> Iterator[Cluster]:
        yield self
        for child in self.children:
            if isinstance(child, Cluster):
                yield from child.clusters()


@dataclass(frozen=True, slots=True)
class GraphEdge:
    source: str
    target: str
    rule: str | None = None  # the rule id of a blocked edge
    tooltip: str = ""
    sibling: bool = False  # a refused sibling group, not a data edge


@dataclass(slots=True)
class FusionGraph:
    title: str
    root: Cluster
    edges: list[GraphEdge]
    collapsed: bool
    kernel_count: int
    blocked: dict[str, int]  # rule -> blocked edges drawn

    def nodes(self) -> list[GraphNode]:
        return list(self.root.nodes())

    def clusters(self) -> list[Cluster]:
        return list(self.root.clusters())


def _instruction_count(comp: Computation, fused: bool = True) -> int:
    """Instructions a computation computes, nested fusions and loops included (a fusion's
    root tuple only lists its outputs and is not counted, as in `Kernel.instructions`)."""
    total = 0
    for inst in comp.instructions:
        if inst.op is Op.PARAMETER or (fused and inst is comp.root and inst.op is Op.TUPLE):
            continue
        if inst.op is Op.FUSION or inst.op in (Op.WHILE, Op.CONDITIONAL, Op.CALL):
            total += sum(_instruction_count(c, inst.op is Op.FUSION) for c in inst.calls)
            total += 0 if inst.op is Op.FUSION else 1
        else:
            total += 1
    return total


def _tooltip(inst: Instruction) -> str:
    text = f"%{inst.name} = {inst.op.text} {inst.shape.text(False)}"
    return text + (f"\n{inst.source_location}" if inst.source_location else "")


class _Builder:
    def __init__(self, result: FusionResult, collapsed: bool) -> None:
        self.result = result
        self.collapsed = collapsed
        self.kernels = {(k.computation, k.name): k for k in result.kernels}
        self.blocked: dict[tuple[str, str, str], str] = {}
        self.sibling_groups: list[tuple[str, tuple[str, ...], str]] = []
        for record in blocked_edges(result):
            if len(record.siblings) > 1:
                self.sibling_groups.append((record.computation, record.siblings, record.rule))
            else:
                key = (record.computation, record.producer, record.consumer or "")
                self.blocked[key] = record.rule
        self.edges: list[GraphEdge] = []
        self.drawn_edges: set[tuple[str, str, str]] = set()
        self.drawn_groups: dict[str, int] = defaultdict(int)
        # Per (computation, instruction): the node an edge from it starts at, and per operand
        # the nodes an edge into it ends at.
        self.exits: dict[tuple[str, str], str] = {}
        self.entries: dict[tuple[str, str], list[list[str]]] = {}
        self._count = 0

    def blocked_counts(self) -> dict[str, int]:
        counts = defaultdict(int, self.drawn_groups)
        for key in self.drawn_edges:
            counts[self.blocked[key]] += 1
        return dict(sorted(counts.items()))

    def new_id(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def computation(self, comp: Computation, cluster: Cluster, fused: bool) -> None:
        """Fill `cluster` with `comp`'s instructions and the edges between them."""
        for inst in comp.instructions:
            if fused and inst.op is Op.PARAMETER:
                continue
            cluster.children.append(self.instruction(comp, inst))
        for inst in comp.instructions:
            for index, operand in enumerate(inst.operands):
                source = self.exits.get((comp.name, operand.name))
                if source is None:
                    continue  # a fusion parameter: the edge is drawn from outside
                rule = self.blocked.get((comp.name, operand.name, inst.name))
                if rule is not None:
                    self.drawn_edges.add((comp.name, operand.name, inst.name))
                tip = (f"%{operand.name} -> %{inst.name}"
                       + (f": not fused ({rule})" if rule else ""))
                for target in self.entries[(comp.name, inst.name)][index]:
                    self.edges.append(GraphEdge(source, target, rule, tip))
        for computation, siblings, rule in self.sibling_groups:
            if computation != comp.name:
                continue
            ends = [self.exits.get((comp.name, s)) for s in siblings]
            present = [e for e in ends if e is not None]
            self.drawn_groups[rule] += 1
            for a, b in zip(present, present[1:]):
                self.edges.append(GraphEdge(a, b, rule, "siblings not fused: "
                                            + ", ".join(f"%{s}" for s in siblings), True))

    def instruction(self, comp: Computation, inst: Instruction) -> GraphNode | Cluster:
        key = (comp.name, inst.name)
        kernel = self.kernels.get(key)
        n_operands = len(inst.operands)
        if inst.op is Op.FUSION:
            body = inst.calls[0]
            kind = str(inst.attr("kind", FusionKind.LOOP))
            if self.collapsed and kernel is not None:
                count = _instruction_count(body)
                node = GraphNode(self.new_id("n"), (f"%{inst.name}", f"{kind}: {count} "
                                 f"instruction{'s' if count != 1 else ''}"),
                                 self._kernel_tip(inst, count), "kernel", inst.op.text)
                self._leaf(key, node.id, n_operands)
                return node
            box = Cluster(self.new_id("c"), f"%{inst.name} ({kind})", _tooltip(inst),
                          "kernel" if kernel is not None else "fused", kind)
            self.computation(body, box, fused=True)
            root = self.exits.get((body.name, body.root.name))
            if root is None:  # the body only forwards a parameter: draw the fusion itself
                node = GraphNode(self.new_id("n"), (f"%{inst.name}", inst.shape.text(False)),
                                 _tooltip(inst), "instruction", inst.op.text)
                box.children.append(node)
                root = node.id
            self.exits[key] = root
            self.entries[key] = [self._parameter_users(body, i) or [self.exits[key]]
                                 for i in range(n_operands)]
            return box
        if inst.op in (Op.WHILE, Op.CONDITIONAL, Op.CALL):
            return self._control(comp, inst)
        kind = "free" if inst.op in _FREE_OPS else "instruction"
        label = (f"%{inst.name}", inst.shape.text(False))
        node = GraphNode(self.new_id("n"), label, _tooltip(inst), kind, inst.op.text)
        self._leaf(key, node.id, n_operands)
        if kernel is None:
            return node
        if self.collapsed:
            node.kind = "kernel"
            node.label = (f"%{inst.name}", f"{kernel.kind}: 1 instruction")
            return node
        box = Cluster(self.new_id("c"), f"%{inst.name} ({kernel.kind})", _tooltip(inst),
                      "kernel", kernel.kind, [node])
        return box

    def _kernel_tip(self, inst: Instruction, count: int) -> str:
        return _tooltip(inst) + f"\n{count} instructions"

    def _leaf(self, key: tuple[str, str], node_id: str, n_operands: int) -> None:
        self.exits[key] = node_id
        self.entries[key] = [[node_id] for _ in range(n_operands)]

    def _parameter_users(self, body: Computation, number: int) -> list[str]:
        targets: list[str] = []
        for inst in body.instructions:
            for index, operand in enumerate(inst.operands):
                if operand.op is Op.PARAMETER and operand.parameter_number == number:
                    targets += self.entries[(body.name, inst.name)][index]
        return list(dict.fromkeys(targets))

    def _control(self, comp: Computation, inst: Instruction) -> Cluster:
        key = (comp.name, inst.name)
        node = GraphNode(self.new_id("n"), (f"%{inst.name}", inst.op.text), _tooltip(inst),
                         "control", inst.op.text)
        self._leaf(key, node.id, len(inst.operands))
        if inst.op is Op.WHILE:
            condition, body = inst.calls
            parts = [("body", body), ("condition", condition)]
            kind, title = "loop", f"while %{inst.name}"
        else:
            parts = [("branch", c) for c in inst.calls]
            kind, title = "branch", f"{inst.op.text} %{inst.name}"
        box = Cluster(self.new_id("c"), title, _tooltip(inst), kind if kind == "loop"
                      else "control", "", [node])
        for part, callee in parts:
            inner = Cluster(self.new_id("c"), f"{part} %{callee.name}", f"{part} of %{inst.name}",
                            part)
            self.computation(callee, inner, fused=False)
            box.children.append(inner)
        return box


def fusion_graph(result: FusionResult, collapse: bool | None = None) -> FusionGraph:
    """The graph of `result`'s fused module; `collapse` None collapses large graphs."""
    entry = result.module.entry
    if collapse is None:
        collapse = _instruction_count(entry, fused=False) > COLLAPSE_ABOVE
    builder = _Builder(result, collapse)
    root = Cluster(builder.new_id("c"), f"ENTRY %{entry.name}", result.module.name,
                   "computation")
    builder.computation(entry, root, fused=False)
    title = (f"{result.module.name}: strategy {result.strategy.name}, "
             f"{len(result.kernels)} kernels" + (" (collapsed)" if collapse else ""))
    return FusionGraph(title, root, builder.edges, collapse, len(result.kernels),
                       builder.blocked_counts())
