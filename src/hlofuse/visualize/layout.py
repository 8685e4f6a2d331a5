"""A layered layout of the fusion graph of our own, for when Graphviz is not installed.

Boxes are laid out from the inside out: the children of a box (nodes, and boxes already laid
out, each a block of fixed size) are put in layers by the longest path of the edges between
them (edges between their descendants count as edges between them; cycles are broken where a
depth-first walk finds them), ordered within layers by a few barycentre sweeps, and placed
below each other, each as close as the order allows to above its predecessors. A box's size
is that of its content plus a margin and its label. Edges are drawn afterwards between the
absolute positions of their end nodes: down as curves, back up along the right.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from hlofuse.visualize.model import Cluster, FusionGraph, GraphNode

CHAR_W = 6.6  # width of a 11px Helvetica character, about
LINE_H = 13.0
NODE_PAD_X, NODE_PAD_Y = 10.0, 6.0
GAP_X, GAP_Y = 14.0, 30.0
MARGIN = 10.0
LABEL_H = 18.0
TITLE_H = 26.0
SWEEPS = 4


@dataclass(slots=True)
class Rect:
    x: float
    y: float
    w: float
    h: float

    @property
    def cx(self) -> float:
        return self.x + self.w / 2


@dataclass(slots=True)
class Layout:
    width: float
    height: float
    nodes: dict[str, Rect] = field(default_factory=dict)
    clusters: dict[str, Rect] = field(default_factory=dict)


def node_size(node: GraphNode) -> tuple[float, float]:
    longest = max((len(line) for line in node.label), default=1)
    return longest * CHAR_W + 2 * NODE_PAD_X, len(node.label) * LINE_H + 2 * NODE_PAD_Y


@dataclass(slots=True)
class _Block:
    """A child of a box while the box is laid out: its size and relative placement."""

    id: str
    w: float
    h: float
    x: float = 0.0
    y: float = 0.0
    # Relative placements of the block's own content (a box's children), by id.
    inner: dict[str, tuple[float, float]] = field(default_factory=dict)


class _Layouter:
    def __init__(self, graph: FusionGraph) -> None:
        self.graph = graph
        self.parent: dict[str, str] = {}  # child id -> box id
        self._index(graph.root)
        self.edges_at: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for edge in graph.edges:
            if edge.sibling:
                continue
            pair = self._children_under_common_box(edge.source, edge.target)
            if pair is not None:
                box, a, b = pair
                self.edges_at[box].append((a, b))
        self.sizes: dict[str, tuple[float, float]] = {}
        self.offsets: dict[str, tuple[float, float]] = {}  # relative to the parent box

    def _index(self, box: Cluster) -> None:
        for child in box.children:
            self.parent[child.id] = box.id
            if isinstance(child, Cluster):
                self._index(child)

    def _chain(self, item: str) -> list[str]:
        chain = [item]
        while chain[-1] in self.parent:
            chain.append(self.parent[chain[-1]])
        return chain[::-1]  # root first

    def _children_under_common_box(self, a: str, b: str) -> tuple[str, str, str] | None:
        ca, cb = self._chain(a), self._chain(b)
        depth = 0
        while depth < min(len(ca), len(cb)) and ca[depth] == cb[depth]:
            depth += 1
        if depth == 0 or depth >= len(ca) or depth >= len(cb):
            return None
        return ca[depth - 1], ca[depth], cb[depth]

    def box(self, box: Cluster) -> tuple[float, float]:
        blocks: list[_Block] = []
        for child in box.children:
            if isinstance(child, Cluster):
                w, h = self.box(child)
            else:
                w, h = node_size(child)
                self.sizes[child.id] = (w, h)
            blocks.append(_Block(child.id, w, h))
        label_w = len(box.label) * CHAR_W + 2 * MARGIN
        content_w, content_h = self._place(blocks, self.edges_at.get(box.id, []))
        w = max(content_w + 2 * MARGIN, label_w)
        h = content_h + 2 * MARGIN + LABEL_H
        shift = (w - 2 * MARGIN - content_w) / 2
        for block in blocks:
            self.offsets[block.id] = (MARGIN + shift + block.x, LABEL_H + MARGIN + block.y)
        self.sizes[box.id] = (w, h)
        return w, h

    def _place(self, blocks: list[_Block], edges: list[tuple[str, str]]) -> tuple[float, float]:
        if not blocks:
            return 0.0, 0.0
        order = {b.id: i for i, b in enumerate(blocks)}
        succ: dict[str, list[str]] = defaultdict(list)
        pred: dict[str, list[str]] = defaultdict(list)
        for source, target in _acyclic(edges, [b.id for b in blocks]):
            succ[source].append(target)
            pred[target].append(source)
        layer: dict[str, int] = {}
        for item in _topological([b.id for b in blocks], succ, pred):
            layer[item] = max((layer[p] + 1 for p in pred[item]), default=0)
        # A source with users (a constant, a parameter) sits just above its first user.
        for block in blocks:
            if not pred[block.id] and succ[block.id]:
                layer[block.id] = max(0, min(layer[s] for s in succ[block.id]) - 1)
        layers: dict[int, list[_Block]] = defaultdict(list)
        for block in blocks:
            layers[layer[block.id]].append(block)
        rows = [sorted(layers[i], key=lambda b: order[b.id]) for i in sorted(layers)]
        _sweep(rows, succ, pred)
        # Place each row below the last, each block near the mean of its predecessors.
        y = 0.0
        centre: dict[str, float] = {}
        for row in rows:
            x = 0.0
            for block in row:
                want = [centre[p] for p in pred[block.id] if p in centre]
                desired = sum(want) / len(want) - block.w / 2 if want else x
                block.x = max(x, desired)
                x = block.x + block.w + GAP_X
                centre[block.id] = block.x + block.w / 2
                block.y = y
            y += max(b.h for b in row) + GAP_Y
        width = max(b.x + b.w for b in blocks)
        return width, y - GAP_Y

    def absolute(self, item: str, x: float, y: float, out: Layout, is_box: bool) -> None:
        w, h = self.sizes[item]
        rect = Rect(x, y, w, h)
        if is_box:
            out.clusters[item] = rect
        else:
            out.nodes[item] = rect


def _acyclic(edges: list[tuple[str, str]], ids: list[str]) -> list[tuple[str, str]]:
    """The edges without self loops, duplicates and the back edges of a depth-first walk."""
    succ: dict[str, list[str]] = defaultdict(list)
    for a, b in dict.fromkeys(edges):
        if a != b:
            succ[a].append(b)
    state: dict[str, int] = {}
    kept: list[tuple[str, str]] = []
    for start in ids:
        if start in state:
            continue
        stack = [(start, iter(succ[start]))]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
                continue
            if state.get(nxt) == 1:
                continue  # back edge
            kept.append((node, nxt))
            if nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(succ[nxt])))
    return kept


def _topological(ids: list[str], succ: dict[str, list[str]],
                 pred: dict[str, list[str]]) -> list[str]:
    waiting = {i: len(pred[i]) for i in ids}
    ready = [i for i in ids if waiting[i] == 0]
    out: list[str] = []
    while ready:
        item = ready.pop(0)
        out.append(item)
        for s in succ[item]:
            waiting[s] -= 1
            if waiting[s] == 0:
                ready.append(s)
    return out


def _sweep(rows: list[list[_Block]], succ: dict[str, list[str]],
           pred: dict[str, list[str]]) -> None:
    """Barycentre ordering: each row sorted by the mean position of its neighbours."""
    def positions() -> dict[str, float]:
        return {b.id: (i + 0.5) / len(row) for row in rows for i, b in enumerate(row)}

    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        for index in (range(1, len(rows)) if down else range(len(rows) - 2, -1, -1)):
            where = positions()
            row = rows[index]
            neighbours = pred if down else succ

            def key(item: tuple[int, _Block], where: dict[str, float] = where,
                    neighbours: dict[str, list[str]] = neighbours,
                    size: int = len(row)) -> float:
                i, block = item
                near = [where[n] for n in neighbours[block.id] if n in where]
                return sum(near) / len(near) if near else (i + 0.5) / size

            rows[index] = [b for _, b in sorted(enumerate(row), key=key)]


def layout(graph: FusionGraph) -> Layout:
    """Absolute rectangles of every node and box; the title sits above the root box."""
    layouter = _Layouter(graph)
    w, h = layouter.box(graph.root)
    title_w = len(graph.title) * CHAR_W * 1.1
    out = Layout(max(w, title_w) + 2 * MARGIN, h + TITLE_H + 2 * MARGIN)
    _place_absolute(layouter, graph.root, MARGIN, TITLE_H + MARGIN, out)
    return out


def _place_absolute(layouter: _Layouter, box: Cluster, x: float, y: float, out: Layout) -> None:
    layouter.absolute(box.id, x, y, out, True)
    for child in box.children:
        dx, dy = layouter.offsets[child.id]
        if isinstance(child, Cluster):
            _place_absolute(layouter, child, x + dx, y + dy, out)
        else:
            layouter.absolute(child.id, x + dx, y + dy, out, False)
