"""The fusion graph as Graphviz DOT text, and SVG from Graphviz's `dot` when it is installed.

Every box is a `subgraph cluster_<id>`; names and source lines from the program only reach
the output as quoted, escaped strings (ids are our own).
"""

from __future__ import annotations

import shutil
import subprocess

from hlofuse.visualize.model import Cluster, FusionGraph, GraphNode
from hlofuse.visualize.style import BLOCKED_COLOR, EDGE_COLOR, cluster_style, node_style

DOT_TIMEOUT_S = 120


def quote(text: str) -> str:
    """A DOT string literal: quotes and backslashes escaped, newlines as \\n."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\r", "").replace("\n", "\\n") + '"'


def _node(node: GraphNode, indent: str) -> str:
    fill, stroke, shape = node_style(node)
    return (f"{indent}{node.id} [label={quote(chr(10).join(node.label))}, "
            f"tooltip={quote(node.tooltip)}, shape={shape}, style=\"filled,rounded\", "
            f"fillcolor=\"{fill}\", color=\"{stroke}\", class=\"{node.kind}\"];")


def _cluster(cluster: Cluster, indent: str, out: list[str]) -> None:
    fill, stroke, dashed = cluster_style(cluster)
    out.append(f"{indent}subgraph cluster_{cluster.id} {{")
    inner = indent + "  "
    style = "filled,dashed" if dashed else "filled,rounded"
    out.append(f"{inner}label={quote(cluster.label)}; tooltip={quote(cluster.tooltip)}; "
               f"style=\"{style}\"; fillcolor=\"{fill}\"; color=\"{stroke}\"; "
               f"class=\"{cluster.kind}\";")
    for child in cluster.children:
        if isinstance(child, Cluster):
            _cluster(child, inner, out)
        else:
            out.append(_node(child, inner))
    out.append(f"{indent}}}")


def to_dot(graph: FusionGraph) -> str:
    out = ["digraph fusion {",
           f"  label={quote(graph.title)}; labelloc=t; fontname=\"Helvetica\"; "
           "compound=true; rankdir=TB; newrank=true;",
           "  node [fontname=\"Helvetica\", fontsize=10];",
           "  edge [fontname=\"Helvetica\", fontsize=9];"]
    _cluster(graph.root, "  ", out)
    for edge in graph.edges:
        attrs = [f"tooltip={quote(edge.tooltip)}"]
        if edge.rule is not None:
            attrs += [f"color=\"{BLOCKED_COLOR}\"", f"fontcolor=\"{BLOCKED_COLOR}\"",
                      f"label={quote(edge.rule)}", "penwidth=1.6", "class=\"blocked\""]
        else:
            attrs.append(f"color=\"{EDGE_COLOR}\"")
        if edge.sibling:
            attrs += ["style=dashed", "dir=none", "constraint=false"]
        out.append(f"  {edge.source} -> {edge.target} [{', '.join(attrs)}];")
    out.append("}")
    return "\n".join(out) + "\n"


def graphviz_dot() -> str | None:
    """The path of Graphviz's `dot`, if it is on PATH."""
    return shutil.which("dot")


def render_svg(dot_text: str) -> str | None:
    """SVG from Graphviz's `dot`, or None when it is not installed or fails."""
    dot = graphviz_dot()
    if dot is None:
        return None
    try:
        done = subprocess.run([dot, "-Tsvg"], input=dot_text, capture_output=True, text=True,
                              timeout=DOT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or "<svg" not in done.stdout:
        return None
    return done.stdout[done.stdout.index("<svg"):]
