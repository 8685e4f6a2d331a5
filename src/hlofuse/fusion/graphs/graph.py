"""A mutable copy of a module for the fusion passes, converted from and back to frozen IR.

XLA's fusion passes rewrite the graph one edge at a time and ask for users, post orders and
reachability after every step; doing that on frozen IR would rebuild the module per step. So
the fusion layer works on `Node`s (mutable instructions with user lists kept up to date, like
XLA's HloInstruction) inside `Graph`s (computations), and converts back with `to_module`
(`module_graph.ModuleGraph`); a malformed rewrite fails in the verifier, which re-infers every
shape and names the instruction (after every pass in debug mode, and before code
generation). Post orders follow XLA's `MakeInstructionPostOrder` exactly, because fusion
results depend on visiting order.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING

from hlofuse.ir.attrs import Metadata, RawAttr
from hlofuse.ir.dtypes import DType
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape

if TYPE_CHECKING:
    from hlofuse.fusion.graphs.module_graph import ModuleGraph

_EMPTY: Mapping[str, object] = MappingProxyType({})
# The ops `Graph.special_nodes` lists: the only ones a fusion's tiled reductions, shared
# memory, re-reading (`reads_elements_multiple_times`) or physical transposes come from.
SPECIAL_OPS = frozenset({Op.REDUCE, Op.FUSION, Op.REDUCE_WINDOW, Op.GATHER, Op.COPY,
                         Op.TRANSPOSE})


class Node:
    """A mutable instruction. `users` keeps XLA's order: users in the order they were added."""

    __slots__ = ("name", "op", "operands", "users", "shape", "attrs", "metadata", "extra",
                 "calls", "parent", "_location", "memo", "is_fusion")

    def __init__(self, name: str, op: Op, shape: Shape, parent: Graph,
                 attrs: Mapping[str, object] = _EMPTY, calls: Sequence[Graph] = (),
                 metadata: Metadata | None = None,
                 extra: tuple[tuple[str, RawAttr], ...] = ()) -> None:
        self.name = name
        self.op = op
        # A plain attribute, not a property: the rules ask it millions of times per compile
        # of a large module, and a node's op never changes.
        self.is_fusion = op is Op.FUSION
        self.operands: list[Node] = []
        self.users: dict[Node, None] = {}
        self.shape = shape
        self.attrs = attrs
        self.metadata = metadata
        self.extra = extra
        self.calls: list[Graph] = list(calls)
        self.parent = parent
        self._location: str | None | bool = False  # False: not looked up yet
        # Analyses of this node keyed by the graph versions they were computed at.
        self.memo: dict[str, tuple[object, object]] = {}

    def __repr__(self) -> str:
        return f"<{self.op.text} %{self.name}>"

    @property
    def dtype(self) -> DType:
        return self.shape.dtype

    @property
    def kind(self) -> str:
        value = self.attrs.get("kind", "")
        assert isinstance(value, str)
        return value

    def set_kind(self, kind: str) -> None:
        self.attrs = MappingProxyType({**self.attrs, "kind": kind})

    @property
    def fused(self) -> Graph:
        assert self.is_fusion, self
        return self.calls[0]

    @property
    def fused_root(self) -> Node:
        return self.fused.root

    @property
    def is_multi_output_fusion(self) -> bool:
        return self.is_fusion and self.fused_root.op is Op.TUPLE

    @property
    def parameter_number(self) -> int:
        value = self.attrs["parameter_number"]
        assert isinstance(value, int)
        return value

    def ints(self, key: str) -> tuple[int, ...]:
        value = self.attrs.get(key, ())
        assert isinstance(value, tuple)
        return value

    def operand_index(self, operand: Node) -> int:
        return self.operands.index(operand)

    def fused_parameter(self, index: int) -> Node:
        return self.fused.params[index]

    @property
    def source_location(self) -> str | None:
        if self._location is False:
            metadata = self.metadata
            self._location = (_location_at(metadata.fields, metadata.resolved_location)
                              if metadata else None)
        return self._location  # type: ignore[return-value]

    def fusion_key(self) -> tuple[object, ...]:
        """Changes whenever this fusion's body or operands change."""
        return (self.calls[0].version, *self.operands)

    def source_locations(self) -> tuple[str, ...]:
        """The user's source lines of this instruction (of every fused one, for a fusion, in
        file and line order)."""
        if not self.is_fusion:
            return (self.source_location,) if self.source_location else ()
        return self.fused.source_locations()


@functools.cache
def _location_order(location: str) -> tuple[str, int, str]:
    """`file:line` sorts by file, then line as a number."""
    file, _, line = location.rpartition(":")
    return (file, int(line), "") if line.isdigit() else (location, 0, "")


@functools.cache
def _location_at(fields: tuple[tuple[str, str | int], ...], resolved: str | None) -> str | None:
    """`Metadata.source_location`, remembered: every pass copies the program into fresh nodes,
    which would each look the location up again."""
    return Metadata(fields, resolved).source_location


def frozen_attrs(attrs: Mapping[str, object] | None) -> Mapping[str, object]:
    """A node's attributes: a read-only view is shared as it is (clones and copies from
    frozen IR pass one), anything else is copied into one."""
    if isinstance(attrs, MappingProxyType):
        return attrs
    return MappingProxyType(dict(attrs or {}))


class Graph:
    """A mutable computation: nodes in insertion order (XLA's instruction list), a root, and
    parameters by number."""

    def __init__(self, name: str, module: ModuleGraph, is_fusion: bool = False) -> None:
        self.name = name
        self.module = module
        self.is_fusion = is_fusion
        self.nodes: dict[Node, None] = {}
        # The nodes of the ops in SPECIAL_OPS, kept as nodes come and go: the rules ask a
        # fusion whether it holds a reduction, a transpose or a re-reading op each time it is
        # offered to a consumer or grows, and looking through all of its nodes each time is
        # quadratic in its size.
        self.special_nodes: dict[Node, None] = {}
        # The nodes that call graphs, in the order of `nodes` (call-graph walks visit them).
        self.calling_nodes: dict[Node, None] = {}
        # `version` when `ModuleGraph.normalize` last left this graph.
        self.normalized_version = -1
        # A fused graph's names other than its parameters', at `normalized_version`, when they
        # are distinct and none looks like a parameter's (`ModuleGraph._final_names`).
        self.plain_names: frozenset[str] | None = None
        self.params: list[Node] = []
        self._root: Node | None = None
        self.version = 0  # bumped by every change of nodes, edges or root
        self._post_order: tuple[int, list[Node]] | None = None
        # How many nodes (parameters aside) have each source location; counted when first
        # asked for (`location_count`), kept up to date from then on.
        self._locations: dict[str, int] | None = None
        # Bumped when a location appears or disappears (not when a node joins an existing one):
        # the decision log asks a growing fusion for its lines after every step.
        self._locations_changes = 0
        self._sorted_locations: tuple[int, tuple[str, ...]] | None = None
        # Clean-up pass name -> the version it last left this graph at (nothing to redo
        # while the version stays).
        self.cleaned: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"<graph %{self.name}: {len(self.nodes)} nodes>"

    @property
    def root(self) -> Node:
        assert self._root is not None, f"computation %{self.name} has no root"
        return self._root

    @root.setter
    def root(self, node: Node) -> None:
        self._root = node
        self.version += 1

    # --- building -------------------------------------------------------------------

    def add(self, op: Op, operands: Sequence[Node], shape: Shape, *,
            attrs: Mapping[str, object] | None = None, calls: Sequence[Graph] = (),
            metadata: Metadata | None = None, extra: tuple[tuple[str, RawAttr], ...] = (),
            name: str | None = None) -> Node:
        node = Node(name if name is not None else self.module.names.unique(op.text), op, shape,
                    self, frozen_attrs(attrs), calls, metadata, extra)
        return self._insert(node, operands)

    def _insert(self, node: Node, operands: Sequence[Node]) -> Node:
        node.operands = list(operands)
        for operand in node.operands:
            operand.users[node] = None
        self.nodes[node] = None
        if node.op in SPECIAL_OPS:
            self.special_nodes[node] = None
        if node.calls:
            self.calling_nodes[node] = None
        self.version += 1
        if self._locations is not None:
            self._count_location(node, 1)
        return node

    def add_parameter(self, shape: Shape, name: str | None = None) -> Node:
        number = len(self.params)
        param = self.add(Op.PARAMETER, (), shape, attrs={"parameter_number": number},
                         name=name if name is not None else f"param_{number}")
        self.params.append(param)
        return param

    def clone_into(self, node: Node, operands: Sequence[Node]) -> Node:
        """A copy of `node` (same name, attributes, metadata, calls) in this graph."""
        clone = Node(node.name, node.op, node.shape, self, node.attrs, node.calls,
                     node.metadata, node.extra)
        clone._location = node._location  # the same metadata: no need to look it up again
        return self._insert(clone, operands)

    def move_into(self, node: Node, operands: Sequence[Node]) -> Node:
        """`node` of another graph, about to be dropped with it (`keep_parameters_only`), now
        in this one, reading `operands`: what `clone_into` gives, without the copy. Its
        users come back as the nodes after it are moved, as they would to a copy."""
        node.parent = self
        node.users = {}
        if node.memo:
            node.memo = {}  # analyses keyed by the other graph's versions
        return self._insert(node, operands)

    def keep_parameters_only(self) -> None:
        """Forget every node but the parameters (the others moved to another graph with
        `move_into`); the graph is dead afterwards, as its fusion is removed."""
        self.nodes = dict.fromkeys(self.params)
        self.special_nodes = {}
        self.calling_nodes = {}
        self.version += 1
        self._post_order = None
        self._locations = None
        self._sorted_locations = None

    def append_operand(self, node: Node, operand: Node) -> None:
        """`node` (of this graph) reads `operand` as its last operand."""
        node.operands.append(operand)
        operand.users[node] = None
        self.version += 1

    # --- rewriting ------------------------------------------------------------------

    def _drop_user(self, operand: Node, user: Node) -> None:
        """`user` no longer reads `operand`. Under the module's `xla_user_order` the last of
        `operand`'s users takes `user`'s place (XLA's `Users::RemoveUser` swaps it there)."""
        users = operand.users
        if user not in users:
            return
        if not self.module.xla_user_order:
            del users[user]
            return
        order = list(users)
        last = order.pop()
        if last is not user:
            order[order.index(user)] = last
        operand.users = dict.fromkeys(order)

    def remove_operand_at(self, node: Node, index: int) -> None:
        old = node.operands.pop(index)
        if old not in node.operands:
            self._drop_user(old, node)
        self.version += 1

    def replace_operand(self, user: Node, index: int, new: Node) -> None:
        old = user.operands[index]
        user.operands[index] = new
        new.users[user] = None
        if old not in user.operands:
            self._drop_user(old, user)
        self.version += 1

    def replace_uses(self, old: Node, new: Node, exclude: Node | None = None) -> None:
        """Every user of `old` (but `exclude`) uses `new` instead; the root is not moved."""
        for user in list(old.users):
            if user is exclude:
                continue
            for i, operand in enumerate(user.operands):
                if operand is old:
                    user.operands[i] = new
            new.users[user] = None
            del old.users[user]
        self.version += 1

    def replace_instruction(self, old: Node, new: Node) -> None:
        """XLA's ReplaceInstruction: uses and root move to `new`, `old` is removed."""
        self.replace_uses(old, new)
        if self._root is old:
            self._root = new
        self.remove(old)

    def remove(self, node: Node) -> None:
        assert not node.users, f"%{node.name} still has users {list(node.users)}"
        assert node is not self._root, f"cannot remove the root %{node.name}"
        for operand in dict.fromkeys(node.operands):
            self._drop_user(operand, node)
        node.operands = []
        node.memo = {}  # analyses of a fusion refer back to it: a cycle the node would keep
        del self.nodes[node]
        self.special_nodes.pop(node, None)
        self.calling_nodes.pop(node, None)
        self.version += 1
        if self._locations is not None:
            self._count_location(node, -1)

    def remove_parameter(self, index: int) -> None:
        """Remove parameter `index` (it must be unused); later parameters are renumbered."""
        param = self.params.pop(index)
        self.remove(param)
        for number, later in enumerate(self.params[index:], start=index):
            later.attrs = MappingProxyType({**later.attrs, "parameter_number": number})

    def reorder(self, order: Sequence[Node]) -> None:
        """List the nodes in `order` (all of them, each once)."""
        assert len(order) == len(self.nodes)
        if any(a is not b for a, b in zip(self.nodes, order, strict=True)):
            self.nodes = dict.fromkeys(order)
            self.calling_nodes = {n: None for n in order if n.calls}
            self.version += 1

    def reorder_to_post_order(self) -> list[Node]:
        """List the nodes in post order; returns that order."""
        order = self.post_order()
        self.reorder(order)
        # Walking a list that is in post order gives that list again: the post order stays
        # known (normalizing between passes would otherwise walk every graph again).
        self._post_order = (self.version, list(order))
        return order

    def contains(self, node: Node) -> bool:
        return node in self.nodes

    def release(self) -> None:
        """Drop every edge and node (the graph is dead afterwards; `ModuleGraph.release`)."""
        for node in self.nodes:
            node.operands = []
            node.users = {}
            node.calls = []
            node.memo = {}
        self.nodes = {}
        self.special_nodes = {}
        self.calling_nodes = {}
        self.params = []
        self._root = None
        self._post_order = None
        self._locations = None
        self._sorted_locations = None

    # --- analyses -------------------------------------------------------------------

    @property
    def location_count(self) -> int:
        """How many distinct source locations the nodes (parameters aside) have."""
        if self._locations is None:
            self._locations = {}
            for node in self.nodes:
                self._count_location(node, 1)
        return len(self._locations)

    def _count_location(self, node: Node, change: int) -> None:
        assert self._locations is not None
        location = node.source_location if node.op is not Op.PARAMETER else None
        if not location:
            return
        count = self._locations.get(location, 0) + change
        if count == 1 and change == 1:
            self._locations_changes += 1
        if count:
            self._locations[location] = count
        else:
            del self._locations[location]
            self._locations_changes += 1

    def source_locations(self) -> tuple[str, ...]:
        """The distinct source locations of the nodes (parameters aside), in file and line
        order."""
        self.location_count  # noqa: B018 - counts the locations on first use
        cached = self._sorted_locations
        if cached is not None and cached[0] == self._locations_changes:
            return cached[1]
        assert self._locations is not None
        locations = tuple(sorted(self._locations, key=_location_order))
        self._sorted_locations = (self._locations_changes, locations)
        return locations

    def post_order(self) -> list[Node]:
        """XLA's MakeInstructionPostOrder: DFS from every user-less node in list order,
        operands pushed in reverse so the first operand is visited first."""
        if self._post_order is None or self._post_order[0] != self.version:
            self._post_order = (self.version, self._compute_post_order())
        return list(self._post_order[1])

    def _compute_post_order(self) -> list[Node]:
        # Depth first, each node's operands in order, a node after all of them; a node is
        # entered once (the graph is acyclic). A fusion grows one instruction at a time and
        # its post order is asked for after each: this loop is hot (a list, not a generator).
        order: list[Node] = []
        append = order.append
        seen: set[Node] = set()
        for start in self.nodes:
            if start.users:
                continue
            seen.add(start)
            stack = [(start, iter(start.operands))]
            while stack:
                node, operands = stack[-1]
                for operand in operands:
                    if operand not in seen:
                        seen.add(operand)
                        stack.append((operand, iter(operand.operands)))
                        break
                else:
                    stack.pop()
                    append(node)
        return order

    def reachability(self) -> Reachability:
        return Reachability(self.post_order())


class Reachability:
    """XLA's HloReachabilityMap: `is_reachable(a, b)` iff b depends on a (or a is b)."""

    def __init__(self, post_order: Sequence[Node]) -> None:
        self._bit: dict[Node, int] = {}
        self._ancestors: dict[Node, int] = {}
        self._next = len(post_order)
        for i, node in enumerate(post_order):
            bits = 1 << i
            for operand in node.operands:
                bits |= self._ancestors[operand]
            self._bit[node] = 1 << i
            self._ancestors[node] = bits

    def is_present(self, node: Node) -> bool:
        return node in self._bit

    def update_after_fusion(self, graph: Graph, fusion: Node) -> None:
        """The map of `graph` again after `fusion` grew in place (or was made) and the nodes
        since added (get-tuple-elements, a new fusion) were wired in, as XLA updates its map
        through the changed instruction instead of rebuilding it. Fusion only adds paths, and
        only below `fusion` and the new nodes: their descendants get their sets again, from
        their operands, in topological order; every other set stays right. Removed nodes keep
        their bits (never asked about again) and bits are never reused."""
        new: list[Node] = []
        for node in reversed(graph.nodes):  # new nodes are the last inserted
            if node in self._bit:
                break
            new.append(node)
        for node in reversed(new):
            self._bit[node] = 1 << self._next
            self._next += 1
        below: set[Node] = set()
        stack = [fusion, *new]
        while stack:
            node = stack.pop()
            if node not in below:
                below.add(node)
                stack.extend(node.users)
        # Operands before users, within `below` (the rest is already right).
        done: set[Node] = set()
        for start in below:
            if start in done:
                continue
            done.add(start)
            walk = [(start, iter(start.operands))]
            while walk:
                node, operands = walk[-1]
                for operand in operands:
                    if operand in below and operand not in done:
                        done.add(operand)
                        walk.append((operand, iter(operand.operands)))
                        break
                else:
                    walk.pop()
                    bits = self._bit[node]
                    for operand in node.operands:
                        bits |= self._ancestors[operand]
                    self._ancestors[node] = bits

    def is_reachable(self, a: Node, b: Node) -> bool:
        return bool(self._ancestors[b] & self._bit[a])

    def is_connected(self, a: Node, b: Node) -> bool:
        return self.is_reachable(a, b) or self.is_reachable(b, a)
