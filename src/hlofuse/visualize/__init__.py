"""Fusion graph pictures: a strategy's kernels, loops and blocked edges as .dot, .svg or .html.

`write_graph(result, "g.svg")` writes the graph of a `FusionResult` (`Compiled.graph(path)`
and `hlofuse explain FILE --graph OUT` call it). The format follows the suffix. SVG comes from
Graphviz's `dot` when it is on PATH (engine "auto" or "dot"), otherwise from our own layered
layout (engine "builtin"), so nothing outside pip is needed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from hlofuse.visualize.dot import render_svg, to_dot
from hlofuse.visualize.html import to_html
from hlofuse.visualize.model import COLLAPSE_ABOVE, FusionGraph, fusion_graph
from hlofuse.visualize.svg import to_svg

if TYPE_CHECKING:
    from hlofuse.fusion.strategies import FusionResult

FORMATS = (".dot", ".svg", ".html")
ENGINES = ("auto", "dot", "builtin")

__all__ = ["COLLAPSE_ABOVE", "ENGINES", "FORMATS", "FusionGraph", "fusion_graph", "render",
           "to_dot", "to_svg", "write_graph"]


def check_path(path: str | os.PathLike[str]) -> Path:
    target = Path(path)
    if target.suffix.lower() not in FORMATS:
        raise ValueError(f"graph output {str(path)!r}: the name must end in "
                         f"{', '.join(FORMATS)} (the suffix chooses the format)")
    return target


def render(graph: FusionGraph, fmt: str, engine: str = "auto") -> str:
    """The graph as text in `fmt` (".dot", ".svg" or ".html")."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    dot_text = to_dot(graph)
    if fmt == ".dot":
        return dot_text
    svg = render_svg(dot_text) if engine in ("auto", "dot") else None
    if svg is None:
        if engine == "dot":
            raise RuntimeError("Graphviz's dot is not installed or failed; use engine "
                               "'builtin' or 'auto'")
        svg = to_svg(graph)
    if fmt == ".svg":
        return '<?xml version="1.0" encoding="UTF-8"?>\n' + svg
    blocked = sum(graph.blocked.values())
    summary = (f"{graph.kernel_count} kernel{'s' if graph.kernel_count != 1 else ''}, "
               f"{blocked} blocked edge{'s' if blocked != 1 else ''} (red, labelled with the "
               "rule)" + ("; kernels collapsed" if graph.collapsed else ""))
    return to_html(svg, graph.title, summary)


def write_graph(result: FusionResult, path: str | os.PathLike[str], *, collapse: bool | None = None,
                engine: str = "auto") -> Path:
    """Write `result`'s fusion graph to `path` (.dot, .svg or .html); returns the path."""
    target = check_path(path)
    text = render(fusion_graph(result, collapse), target.suffix.lower(), engine)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target
