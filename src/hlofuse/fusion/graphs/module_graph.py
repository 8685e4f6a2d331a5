"""A module of mutable Graphs: conversion from frozen IR and back (with final names)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from hlofuse.analysis.call_graph import callee_order
from hlofuse.fusion.graphs.graph import Graph, Node, frozen_attrs
from hlofuse.ir.builder import NameUniquer
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink


# Ops whose called computations are applied per element (XLA's embedded call context).
_APPLYING_OPS = frozenset({Op.REDUCE, Op.REDUCE_WINDOW, Op.CUSTOM_CALL, Op.MAP, Op.SCATTER,
                           Op.SORT, Op.SELECT_AND_SCATTER})


class ModuleGraph:
    """A module of Graphs; `from_module` and `to_module` convert to and from frozen IR."""

    def __init__(self, name: str,
                 debug_tables: tuple[tuple[str, tuple[tuple[int, str], ...]], ...] = ()) -> None:
        self.name = name
        self.debug_tables = debug_tables
        self.graphs: list[Graph] = []
        self.entry: Graph | None = None
        self.names = NameUniquer(bare_first=True)
        self.computation_names = NameUniquer(bare_first=True)
        # Whether removing a user moves the last user into its place, as XLA's
        # HloInstruction::Users::RemoveUser does (the order XLA's priority fusion visits a
        # producer's users in); off, removal keeps the order of the others.
        self.xla_user_order = False

    @staticmethod
    def from_module(module: Module) -> ModuleGraph:
        mg = ModuleGraph(module.name, module.debug_tables)
        fused: set[Computation] = set()
        for comp in module.computations:
            mg.names.reserve_each([inst.name for inst in comp.instructions])
            fused.update([c for inst in comp.instructions if inst.op is Op.FUSION
                          for c in inst.calls])
        graphs: dict[Computation, Graph] = {}
        for comp in callee_order(module):
            mg.computation_names.reserve(comp.name)
            graph = Graph(comp.name, mg, is_fusion=comp in fused)
            insert = graph._insert
            nodes: dict[Instruction, Node] = {}
            for inst in comp.instructions:
                # What `graph.add` does, without its keyword handling.
                node = Node(inst.name, inst.op, inst.shape, graph, frozen_attrs(inst.attrs),
                            [graphs[c] for c in inst.calls] if inst.calls else (),
                            inst.metadata, inst.extra)
                nodes[inst] = insert(node, [nodes[o] for o in inst.operands])
            graph.params = [nodes[p] for p in comp.parameters]
            graph.root = nodes[comp.root]
            graphs[comp] = graph
            mg.graphs.append(graph)
        mg.entry = graphs[module.entry]
        return mg

    def normalize(self) -> None:
        """Make this copy what `from_module(self.to_module())` would give, without building
        frozen IR between passes: unreachable computations dropped, every graph's nodes and
        every node's users in post order, fused instructions under their final names, the
        name uniquers holding exactly the names in use, and no remembered analyses. Passes
        that run one after another on one copy then decide exactly as on a fresh one."""
        assert self.entry is not None
        ordered = self._reachable(self._ordered())
        self._retain(ordered)
        for graph in ordered:
            if graph.normalized_version != graph.version:
                graph.plain_names = None  # known again below
        renamed, used = self._final_names(ordered)
        for node, name in renamed.items():
            if node.op is not Op.PARAMETER and node.name != name:
                node.parent.plain_names = None
            node.name = name
        fused = {c for g in ordered for n in g.calling_nodes if n.is_fusion for c in n.calls}
        self.computation_names = NameUniquer(bare_first=True)
        for graph in ordered:
            self.computation_names.reserve(graph.name)
            # A graph unchanged since it was last normalized has its nodes, and every node's
            # users, in post order already.
            unchanged = graph.normalized_version == graph.version
            order = graph.nodes if unchanged else graph.reorder_to_post_order()
            for node in order:
                if node.memo:
                    node.memo = {}
            graph.is_fusion = graph in fused
            if not unchanged:
                for node in order:
                    node.users = {}
                for node in order:
                    for operand in node.operands:
                        operand.users[node] = None
            if graph.is_fusion and graph.plain_names is None:
                graph.plain_names = _plain_names(order)
            graph.normalized_version = graph.version
        # Exactly the final names are in use.
        self.names = NameUniquer(bare_first=True)
        self.names.reserve_all(used)

    def reload(self, module: Module) -> None:
        """Become a fresh copy of `module` (after a frozen-IR rewrite of this one)."""
        fresh = ModuleGraph.from_module(module)
        self.release()
        for graph in fresh.graphs:
            graph.module = self
        self.name, self.debug_tables = fresh.name, fresh.debug_tables
        self.graphs, self.entry = fresh.graphs, fresh.entry
        self.names, self.computation_names = fresh.names, fresh.computation_names

    def drop_unreachable(self) -> bool:
        """Drop the graphs that nothing reachable from the entry calls; whether any was."""
        kept = self._reachable(self.graphs)
        if len(kept) == len(self.graphs):
            return False
        self._retain(kept)
        return True

    def _retain(self, kept: list[Graph]) -> None:
        """Keep the graphs `kept`, in that order, and release the others."""
        alive = set(kept)
        for graph in self.graphs:
            if graph not in alive:
                graph.release()
        self.graphs = kept

    def __enter__(self) -> ModuleGraph:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        """Break the node <-> graph reference cycles, so that this copy is freed by reference
        counting as soon as it is dropped: left to the cycle collector, the graphs of one
        compile cost more to collect than the passes took to build them."""
        for graph in self.graphs:
            graph.release()
        self.graphs = []
        self.entry = None

    def add_graph(self, base: str, is_fusion: bool) -> Graph:
        graph = Graph(self.computation_names.unique(base), self, is_fusion)
        self.graphs.append(graph)
        return graph

    def nonfusion_graphs(self) -> list[Graph]:
        return [g for g in self._ordered() if not g.is_fusion]

    def fusible_graphs(self) -> list[Graph]:
        """XLA's GetFusibleComputations: non-fusion computations, except the bodies of
        reduce, reduce-window, map, scatter, sort, select-and-scatter and custom calls (XLA's
        embedded call context: they are applied per element, not launched)
        and whatever a fused computation calls (a whole-loop fusion's loop body is one
        kernel already)."""
        applied: set[Graph] = set()
        inside: list[Graph] = []
        for graph in self.graphs:
            for node in graph.calling_nodes:
                if node.op in _APPLYING_OPS:
                    applied.update(node.calls)
                if graph.is_fusion:
                    inside.extend(node.calls)
        while inside:
            graph = inside.pop()
            if graph not in applied:
                applied.add(graph)
                inside.extend(c for node in graph.calling_nodes for c in node.calls)
        return [g for g in self.nonfusion_graphs() if g not in applied]

    def _ordered(self) -> list[Graph]:
        """Graphs still in use, callees before callers (XLA's MakeComputationPostOrder)."""
        assert self.entry is not None
        order: list[Graph] = []
        seen: set[Graph] = set()

        def callees(g: Graph) -> Iterator[Graph]:
            for node in list(g.calling_nodes):
                yield from node.calls

        for start in self.graphs:
            if start in seen:
                continue
            seen.add(start)
            stack: list[tuple[Graph, Iterator[Graph]]] = [(start, callees(start))]
            while stack:
                graph, it = stack[-1]
                callee = next(it, None)
                if callee is None:
                    stack.pop()
                    order.append(graph)
                elif callee not in seen:
                    seen.add(callee)
                    stack.append((callee, callees(callee)))
        return order

    def to_module(self) -> Module:
        """Frozen IR again. Top-level names stay; a fused copy whose name is taken elsewhere
        becomes `name.clone` (`name.clone.N`), fused parameters are `param_N` made unique."""
        assert self.entry is not None
        ordered = self._reachable(self._ordered())
        renamed, _ = self._final_names(ordered)
        built: dict[Graph, Computation] = {}
        name_of = renamed.get
        for graph in ordered:
            made: dict[Node, Instruction] = {}
            instruction_of = made.__getitem__
            # The nodes' shapes are taken as they are, not inferred again: the verifier checks
            # them (after every pass in debug mode, and before code generation).
            for node in graph.post_order():
                made[node] = Instruction(
                    name_of(node, node.name), node.op, tuple(map(instruction_of, node.operands)),
                    node.shape,
                    node.attrs, tuple([built[c] for c in node.calls]) if node.calls else (),
                    node.metadata, node.extra)
            params = tuple(made[p] for p in graph.params)
            built[graph] = Computation(graph.name, tuple(made.values()), made[graph.root],
                                       params)
        return Module(self.name, tuple(built[g] for g in ordered), built[self.entry],
                      self.debug_tables)

    def _reachable(self, ordered: list[Graph]) -> list[Graph]:
        assert self.entry is not None
        keep: set[Graph] = set()
        stack = [self.entry]
        while stack:
            graph = stack.pop()
            if graph in keep:
                continue
            keep.add(graph)
            for node in graph.calling_nodes:
                stack.extend(node.calls)
        return [g for g in ordered if g in keep]

    @staticmethod
    def _final_names(ordered: list[Graph]) -> tuple[dict[Node, str], NameUniquer]:
        """The fused nodes whose final name is not their name, with that name, and a uniquer
        holding every final name: the top-level names stay, then each fused node, graph by
        graph in post order, keeps its name if it is still free (a new name depends only on
        the names taken before it)."""
        used = NameUniquer(bare_first=True)
        for graph in ordered:
            if not graph.is_fusion:
                used.reserve_each(node.name for node in graph.nodes)
        taken = used.names_in_use()
        renamed: dict[Node, str] = {}
        for graph in ordered:
            if not graph.is_fusion:
                continue
            # A graph unchanged since it was last normalized lists its nodes in post order.
            unchanged = graph.normalized_version == graph.version
            order = graph.nodes if unchanged else graph.post_order()
            plain = graph.plain_names if unchanged else _plain_names(order)
            if plain is not None and used.reserve_new(plain):
                # Every name but the parameters' is free and none can be a parameter's new
                # name, so the walk below would keep them all and rename the parameters
                # alone, each from its own base (`param_N`): the same names in one step.
                for number, param in enumerate(graph.params):
                    renamed[param] = used.unique_root(f"param_{number}")
                if not unchanged:
                    graph.plain_names = plain  # for `normalize`, which orders it next
                continue
            for node in order:
                if node.op is Op.PARAMETER or node.name in taken:
                    renamed[node] = _fresh_name(node, used)
                else:
                    taken.add(node.name)
        return renamed, used


_CLONE_SUFFIX = re.compile(r"(\.clone(\.\d+)?)+$")


def _plain_names(order: Iterable[Node]) -> frozenset[str] | None:
    """The names of the nodes in `order` other than parameters, if they are distinct and none
    starts as a parameter's final name does (`param_`)."""
    names = [node.name for node in order if node.op is not Op.PARAMETER]
    plain = frozenset(names)
    if len(plain) != len(names) or any(name.startswith("param_") for name in plain):
        return None
    return plain


def _fresh_name(node: Node, used: NameUniquer) -> str:
    """A fused instruction's name, now reserved: its own, else the original's, else
    `original.clone`, `original.clone.1`, ... (`param_N`, `param_N.1`, ... for parameters)."""
    if node.op is Op.PARAMETER:
        return used.unique_root(f"param_{node.parameter_number}")
    if used.reserve(node.name):
        return node.name
    base = _original_name(node.name)
    if used.reserve(base):
        return base
    return used.unique_root(base + ".clone")  # no numeric suffix: `.clone` ends it


@functools.lru_cache(maxsize=1 << 16)
def _original_name(name: str) -> str:
    """`name` without its `.clone` / `.clone.N` suffixes (asked again in every normalize for
    every duplicated instruction)."""
    return _CLONE_SUFFIX.sub("", name)


class ModuleGraphPass:
    """Base of the passes that work on a ModuleGraph (`passes.manager.GraphPass`): a pipeline
    hands consecutive ones one shared copy; `run` alone converts the module there and back."""

    __slots__ = ()

    graphs_of = staticmethod(ModuleGraph.from_module)

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        with ModuleGraph.from_module(module) as graphs:
            changed = self.run_on_graphs(graphs, log)
            return (graphs.to_module(), True) if changed else (module, False)

    def run_on_graphs(self, graphs: ModuleGraph, log: DecisionSink | None = None) -> bool:
        raise NotImplementedError
