"""The fusion graph as SVG, laid out by `layout` (no Graphviz needed).

The structure follows Graphviz's SVG so that one set of checks reads both: every box is a
`<g class="cluster ...">` with a `<title>` (the tooltip), every node a `<g class="node ...">`,
every edge a `<g class="edge">`, blocked edges `<g class="edge blocked">` with the rule id as
`<text>`. Text from the program is XML-escaped.
"""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from hlofuse.visualize.layout import LINE_H, NODE_PAD_Y, Layout, Rect, layout
from hlofuse.visualize.model import Cluster, FusionGraph, GraphEdge
from hlofuse.visualize.style import BLOCKED_COLOR, EDGE_COLOR, cluster_style, node_style

_STYLE = """
text { font-family: Helvetica, Arial, sans-serif; }
.node text { font-size: 11px; }
.cluster > text { font-size: 11px; font-weight: bold; fill: #333; }
.edge path { fill: none; }
.edge.blocked text { font-size: 10px; fill: #d62728; font-weight: bold; }
.title { font-size: 15px; font-weight: bold; }
"""


LABEL_AT = 0.72


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def _cluster(cluster: Cluster, where: Layout, out: list[str]) -> None:
    rect = where.clusters[cluster.id]
    fill, stroke, dashed = cluster_style(cluster)
    dash = ' stroke-dasharray="5,3"' if dashed else ""
    kind = f"cluster {cluster.kind}" + (f" {cluster.kernel_kind}" if cluster.kernel_kind else "")
    out.append(f'<g id="cluster_{cluster.id}" class="{kind}">'
               f"<title>{escape(cluster.tooltip)}</title>"
               f'<rect x="{_fmt(rect.x)}" y="{_fmt(rect.y)}" width="{_fmt(rect.w)}" '
               f'height="{_fmt(rect.h)}" rx="6" fill="{fill}" stroke="{stroke}"{dash}/>'
               f'<text x="{_fmt(rect.x + 8)}" y="{_fmt(rect.y + 14)}">'
               f"{escape(cluster.label)}</text></g>")
    for child in cluster.children:
        if isinstance(child, Cluster):
            _cluster(child, where, out)


def _edge_path(a: Rect, b: Rect) -> tuple[str, float, float]:
    """A path from a's bottom to b's top (or, going up, along the right), and its middle."""
    if b.y >= a.y + a.h - 1:
        x1, y1, x2, y2 = a.cx, a.y + a.h, b.cx, b.y
        bend = max(12.0, (y2 - y1) / 2)
        path = (f"M{_fmt(x1)},{_fmt(y1)} C{_fmt(x1)},{_fmt(y1 + bend)} "
                f"{_fmt(x2)},{_fmt(y2 - bend)} {_fmt(x2)},{_fmt(y2)}")
        # The rule id sits near the target end, where edges from one source have parted.
        t = LABEL_AT
        mx = (1 - t) ** 3 * x1 + 3 * (1 - t) ** 2 * t * x1 + 3 * (1 - t) * t**2 * x2 + t**3 * x2
        my = ((1 - t) ** 3 * y1 + 3 * (1 - t) ** 2 * t * (y1 + bend)
              + 3 * (1 - t) * t**2 * (y2 - bend) + t**3 * y2)
        return path, mx, my
    x1, y1 = a.x + a.w, a.y + a.h / 2
    x2, y2 = b.x + b.w, b.y + b.h / 2
    out = max(x1, x2) + 40
    path = (f"M{_fmt(x1)},{_fmt(y1)} C{_fmt(out)},{_fmt(y1)} {_fmt(out)},{_fmt(y2)} "
            f"{_fmt(x2)},{_fmt(y2)}")
    return path, out - 10, (y1 + y2) / 2


def _edge(index: int, edge: GraphEdge, where: Layout, labels: list[str]) -> str:
    a, b = where.nodes[edge.source], where.nodes[edge.target]
    if edge.sibling:
        y = min(a.y, b.y) - 8
        path = (f"M{_fmt(a.cx)},{_fmt(a.y)} C{_fmt(a.cx)},{_fmt(y)} {_fmt(b.cx)},{_fmt(y)} "
                f"{_fmt(b.cx)},{_fmt(b.y)}")
        mx, my = (a.cx + b.cx) / 2, y
    else:
        path, mx, my = _edge_path(a, b)
    blocked = edge.rule is not None
    color = BLOCKED_COLOR if blocked else EDGE_COLOR
    marker = "" if edge.sibling else f' marker-end="url(#{"red" if blocked else "grey"})"'
    dash = ' stroke-dasharray="4,3"' if edge.sibling else ""
    width = "1.6" if blocked else "1"
    cls = "edge blocked" if blocked else "edge"
    text = ""
    if blocked:
        assert edge.rule is not None
        w = len(edge.rule) * 5.6 + 6
        text = (f'<rect x="{_fmt(mx - w / 2)}" y="{_fmt(my - 9)}" width="{_fmt(w)}" '
                f'height="12" fill="#ffffff" fill-opacity="0.85"/>'
                f'<text x="{_fmt(mx)}" y="{_fmt(my)}" text-anchor="middle">'
                f"{escape(edge.rule)}</text>")
    group = (f'<g id="edge{index}" class="{cls}"><title>{escape(edge.tooltip)}</title>'
             f'<path d="{path}" stroke="{color}" stroke-width="{width}"{dash}{marker}/>')
    if blocked:
        labels.append(f'<g class="{cls} label">{text}</g>')
        return group + text + "</g>"
    return group + "</g>"


def to_svg(graph: FusionGraph, where: Layout | None = None) -> str:
    where = where if where is not None else layout(graph)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="hlofuse-fusion-graph" '
           f'width="{_fmt(where.width)}" height="{_fmt(where.height)}" '
           f'viewBox="0 0 {_fmt(where.width)} {_fmt(where.height)}">',
           f"<style>{_STYLE}</style>",
           "<defs>"
           f'<marker id="grey" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" '
           f'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="{EDGE_COLOR}"/>'
           "</marker>"
           f'<marker id="red" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" '
           f'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" '
           f'fill="{BLOCKED_COLOR}"/></marker></defs>',
           '<rect width="100%" height="100%" fill="#ffffff"/>',
           f'<text class="title" x="10" y="20">{escape(graph.title)}</text>']
    _cluster(graph.root, where, out)
    labels: list[str] = []
    out += [_edge(i, e, where, labels) for i, e in enumerate(graph.edges) if e.rule is None]
    for node in graph.nodes():
        rect = where.nodes[node.id]
        fill, stroke, _ = node_style(node)
        out.append(f'<g id="node_{node.id}" class="node {node.kind}" '
                   f"data-op={quoteattr(node.op)}><title>{escape(node.tooltip)}</title>"
                   f'<rect x="{_fmt(rect.x)}" y="{_fmt(rect.y)}" width="{_fmt(rect.w)}" '
                   f'height="{_fmt(rect.h)}" rx="4" fill="{fill}" stroke="{stroke}"/>')
        for i, line in enumerate(node.label):
            y = rect.y + NODE_PAD_Y + LINE_H * (i + 1) - 3
            out.append(f'<text x="{_fmt(rect.cx)}" y="{_fmt(y)}" text-anchor="middle">'
                       f"{escape(line)}</text>")
        out.append("</g>")
    # Blocked edges last, so that their red lines and rule ids are on top.
    out += [_edge(i, e, where, labels) for i, e in enumerate(graph.edges) if e.rule is not None]
    out.append("</svg>")
    return "\n".join(out) + "\n"
