"""CSE inside fused computations, dead-code elimination and variadic-op splitting, on the
mutable graphs the fusion passes share.

The fusion fixed points run `variadic-op-splitter` before and `cse{only_fusion_computations=
true}` and `dce` after the fusion passes. Done on frozen IR (`passes/cse.py`, `passes/dce.py`,
`passes/variadic_op_splitter.py`), each would force the module out of its graph form and back
between fusion passes; these do the same on the graphs, with the same results (same merges,
same removals, same `changed`), so the pipeline keeps one graph copy through a whole fixed
point.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from hlofuse.fusion.graphs.graph import Graph, Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph, ModuleGraphPass
from hlofuse.fusion.legality.properties import has_side_effect
from hlofuse.ir.builder import NameUniquer, result_shape
from hlofuse.ir.ops import Op
from hlofuse.passes.cse import instruction_key, iota_key
from hlofuse.passes.decision_log import RewriteLog
from hlofuse.passes.variadic_op_splitter import (
    MAX_PARAMETERS,
    check_limit,
    concatenate_dimension,
    concatenate_tree,
    part_shape,
)

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink


def _unless_clean(graph: Graph, name: str, clean: Callable[[Graph], bool]) -> bool:
    """`clean(graph)`, skipped when the graph is unchanged since `name` last ran on it."""
    if graph.cleaned.get(name) == graph.version:
        return False
    changed = clean(graph)
    graph.cleaned[name] = graph.version
    return changed


def deduplicate(graph: Graph, combine_iotas: bool = False) -> bool:
    """Replace every node equal to an earlier one (in post order) by that one; with
    `combine_iotas`, identical iotas count as one operand (`passes/cse.py`)."""
    if combine_iotas:
        return _unless_clean(graph, "cse+iotas", lambda g: _deduplicate(g, True))
    return _unless_clean(graph, "cse", _deduplicate)


def _deduplicate(graph: Graph, combine_iotas: bool = False) -> bool:
    seen: dict[Hashable, Node] = {}
    changed = False
    for node in graph.post_order():
        if node.op is Op.PARAMETER or has_side_effect(node):
            continue
        if not node.operands and node.op is not Op.CONSTANT:
            continue
        # Today's HloCSE::Run (as the frozen pass, `passes/cse.py`): an iota operand is
        # compared as its shape and dimension, and an instruction that reads two identical
        # iotas reads the first one twice; the second, unused, goes with DCE.
        reads_iota = combine_iotas and any(o.op is Op.IOTA for o in node.operands)
        key = ((instruction_key(node, ()),
                tuple(iota_key(o) if o.op is Op.IOTA else id(o) for o in node.operands))
               if reads_iota else instruction_key(node, node.operands))
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = node
            if reads_iota:
                changed |= _read_first_iotas(graph, node)
            continue
        graph.replace_uses(node, earlier)
        if graph.root is node:
            graph.root = earlier
        graph.remove(node)
        changed = True
    return changed


def _read_first_iotas(graph: Graph, node: Node) -> bool:
    """`node` reads the first of its identical iota operands wherever it reads another."""
    first: dict[Hashable, Node] = {}
    changed = False
    for index, operand in enumerate(list(node.operands)):
        if operand.op is not Op.IOTA:
            continue
        kept = first.setdefault(iota_key(operand), operand)
        if kept is not operand:
            graph.replace_operand(node, index, kept)
            changed = True
    return changed


def remove_dead_nodes(graph: Graph) -> bool:
    """Remove what neither the root nor a side-effecting node depends on (parameters stay)."""
    return _unless_clean(graph, "dce", _remove_dead_nodes)


def _remove_dead_nodes(graph: Graph) -> bool:
    live: set[Node] = set(graph.params)
    stack = [graph.root] + [n for n in graph.nodes if has_side_effect(n)]
    while stack:
        node = stack.pop()
        if node in live and node.op is not Op.PARAMETER:
            continue
        live.add(node)
        stack.extend(o for o in node.operands if o not in live)
    dead = [n for n in graph.post_order() if n not in live]
    for node in reversed(dead):  # users before their operands
        graph.remove(node)
    return bool(dead)


@dataclass(frozen=True, slots=True)
class FusedComputationCse(ModuleGraphPass):
    """`cse{only_fusion_computations=true}` on graphs: merges equal instructions inside fused
    computations. `combine_iotas` (`xla-gpu`): today's HloCSE, which XLA's GPU fusion
    pipeline runs after priority fusion and after multi-output fusion (fusion_pipeline.cc,
    `HloCSE(/*is_layout_sensitive=*/true, /*only_fusion_computations=*/true)`), compares
    identical iotas as one operand there too (`passes/cse.py`)."""

    name: ClassVar[str] = "cse"
    only_fusion_computations: bool = True
    combine_iotas: bool = False

    def __post_init__(self) -> None:
        assert self.only_fusion_computations, "graph CSE covers fused computations only"

    def run_on_graphs(self, graphs: ModuleGraph, log: DecisionSink | None = None) -> bool:
        changed = False
        for graph in graphs.graphs:
            if graph.is_fusion:
                changed |= deduplicate(graph, self.combine_iotas)
        return changed


@dataclass(frozen=True, slots=True)
class GraphDce(ModuleGraphPass):
    """`dce` on graphs: removes unused instructions, then computations nothing calls."""

    name: ClassVar[str] = "dce"

    def run_on_graphs(self, graphs: ModuleGraph, log: DecisionSink | None = None) -> bool:
        changed = False
        for graph in graphs.graphs:
            changed |= remove_dead_nodes(graph)
        return graphs.drop_unreachable() or changed


@dataclass(frozen=True, slots=True)
class GraphVariadicOpSplitter(ModuleGraphPass):
    """`variadic-op-splitter` on the graphs (`passes/variadic_op_splitter.py`, XLA's
    VariadicOpSplitter): a concatenate of more than `max_operands` operands, outside fused
    computations, becomes a tree of concatenates, in place.

    The graphs are left as the frozen pass's round trip would leave them (`to_module`, the
    frozen pass, `ModuleGraph.reload`): normalized first (what `to_module` freezes: final
    names, post order); the new concatenates named as the frozen rewrite names them (one
    module-wide default numbering, `concatenate.N` after the highest N in use) and listed
    where the split one was, in the order they were made; each operand's users in list order,
    as `from_module` adds them; the name uniquer holding exactly the names in use."""

    name: ClassVar[str] = "variadic-op-splitter"
    max_operands: int = MAX_PARAMETERS

    def run_on_graphs(self, graphs: ModuleGraph, log: DecisionSink | None = None) -> bool:
        check_limit(self.max_operands)
        limit = self.max_operands
        if not any(node.op is Op.CONCATENATE and len(node.operands) > limit
                   for graph in graphs.graphs if not graph.is_fusion for node in graph.nodes):
            return False
        graphs.normalize()
        records = RewriteLog(log, self.name)
        # The frozen rewrite's uniquer (`passes.rewrite.module_names`) holds every name of the
        # module; only those of the new instructions' base bear on the names it hands out.
        frozen_names = NameUniquer()
        frozen_names.reserve_each(name for name in graphs.names.names_in_use()
                                  if name.startswith("concatenate."))
        changed = False
        for graph in graphs.graphs:  # callees first, as the frozen rewrite visits them
            if not graph.is_fusion and any(node.op is Op.CONCATENATE
                                           and len(node.operands) > limit
                                           for node in graph.nodes):
                _split_concatenates(graph, limit, frozen_names, records)
                changed = True
        return changed


def _split_concatenates(graph: Graph, limit: int, frozen_names: NameUniquer,
                        records: RewriteLog) -> None:
    """Split each concatenate of `graph` (in list order) with more than `limit` operands."""
    names = graph.module.names
    order: list[Node] = []
    for node in list(graph.nodes):
        if node.op is not Op.CONCATENATE or len(node.operands) <= limit:
            order.append(node)
            continue
        operands = list(node.operands)
        dim = concatenate_dimension(node.attrs)
        made: list[Node] = []

        def concatenate(parts: list[Node], node: Node = node, dim: int = dim,
                        made: list[Node] = made) -> Node:
            shape = result_shape(Op.CONCATENATE, [p.shape for p in parts], node.attrs, (),
                                 part_shape(node.shape, dim, [p.shape for p in parts]))
            name = frozen_names.unique("concatenate")
            names.reserve(name)
            made.append(graph.add(Op.CONCATENATE, parts, shape, attrs=dict(node.attrs),
                                  metadata=node.metadata, name=name))
            return made[-1]

        # Each operand's users as they were, in list order (this node among them), where this
        # node is not the last: the new concatenates are added after the others, and belong
        # at its place.
        readers = {operand: list(operand.users) for operand in dict.fromkeys(operands)
                   if next(reversed(operand.users)) is not node}
        split = concatenate_tree(operands, limit, concatenate)
        records.rewrote(graph.name, node, "concatenate-split",
                        f"%{node.name} had {len(operands)} operands, over {limit}; it is now "
                        f"{len(made)} concatenates", operands=len(operands), limit=limit)
        graph.replace_instruction(node, split)
        names.release(node.name)  # gone from the module, as from the round trip's copy
        # The new concatenates take the split one's place in the list, and in the user
        # lists of its operands.
        order.extend(made)
        if not readers:
            continue
        new_readers: dict[Node, list[Node]] = {operand: [] for operand in readers}
        for new in made:
            for operand in dict.fromkeys(new.operands):
                if operand in new_readers:
                    new_readers[operand].append(new)
        for operand, users in readers.items():
            reordered: dict[Node, None] = {}
            for user in users:
                if user is node:
                    reordered.update(dict.fromkeys(new_readers[operand]))
                else:
                    reordered[user] = None
            assert reordered.keys() == operand.users.keys()
            operand.users = reordered
    graph.reorder(order)
