"""Fusion graph pictures: every kernel a box, every blocked edge red and labelled with its rule,
loops nested, source lines as tooltips, in DOT, our own SVG, Graphviz's SVG and the HTML page."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

import hlofuse
import hlofuse.numpy as hnp
from hlofuse import lax
from hlofuse.envs import cartpole
from hlofuse.fusion.explain import blocked_edges
from hlofuse.fusion.strategies import FusionResult, run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.visualize import fusion_graph, render, to_dot, to_svg, write_graph
from hlofuse.visualize import model as graph_model

SVG = "{http://www.w3.org/2000/svg}"
XLINK_TITLE = "{http://www.w3.org/1999/xlink}title"


@pytest.fixture(scope="module")
def result() -> FusionResult:
    """CartPole's baseline rollout under xla: a loop, custom calls, tuples, sibling refusals."""
    return run_strategy(cartpole.trace(cartpole.PRESETS["baseline"], 8, 3), "xla", debug=False)


def _groups(root: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if cls in g.get("class", "").split()]


def _texts(group: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in group.iter(f"{SVG}text")]


def _title(group: ET.Element) -> str:
    """The tooltip: our `<title>`, or Graphviz's `<a xlink:title>`."""
    link = group.find(f".//{SVG}a")
    if link is not None and link.get(XLINK_TITLE):
        return link.get(XLINK_TITLE) or ""
    title = group.find(f"{SVG}title")
    return title.text or "" if title is not None else ""


def _edge_records(result: FusionResult) -> list[tuple[str, str, str]]:
    return [(r.producer, r.consumer or "", r.rule) for r in blocked_edges(result)
            if len(r.siblings) <= 1]


def test_dot_has_a_box_per_kernel_and_every_blocked_edge_labelled(result: FusionResult) -> None:
    text = to_dot(fusion_graph(result, collapse=False))
    labels = re.findall(r'subgraph cluster_\w+ \{\n\s*label="([^"]*)"', text)
    for kernel in result.kernels:
        assert f"%{kernel.name} ({kernel.kind})" in labels, kernel.name
    blocked = re.findall(r'\w+ -> \w+ \[tooltip="([^"]*)", color="#d62728", '
                         r'fontcolor="#d62728", label="([^"]*)"', text)
    for producer, consumer, rule in _edge_records(result):
        tip = f"%{producer} -> %{consumer}: not fused ({rule})"
        assert (tip, rule) in blocked, tip
    # The loop is a box holding its body and condition boxes.
    loop = result.loops[0]
    start = text.index(f'label="while %{loop.name}"')
    end = text.index("\n  }", start) if "\n  }" in text[start:] else len(text)
    assert f'label="body %{loop.body}"' in text[start:end]
    assert f'label="condition %{loop.condition}"' in text[start:end]


def _check_svg(svg: str, result: FusionResult) -> ET.Element:
    root = ET.fromstring(svg)
    kernel_boxes = {texts[0] for g in _groups(root, "cluster") if "kernel" in g.get("class", "")
                    for texts in [_texts(g)] if texts}
    for kernel in result.kernels:
        assert f"%{kernel.name} ({kernel.kind})" in kernel_boxes, kernel.name
    blocked = _groups(root, "blocked")
    drawn = {(_title(g), tuple(_texts(g))) for g in blocked}
    tooltips = {title for title, _ in drawn}
    for producer, consumer, rule in _edge_records(result):
        tip = f"%{producer} -> %{consumer}: not fused ({rule})"
        assert tip in tooltips, tip
        assert any(rule in texts for title, texts in drawn if title == tip), tip
    for g in blocked:
        assert _texts(g), "a blocked edge without its rule id"
    return root


def test_builtin_svg_boxes_edges_nesting_and_tooltips(result: FusionResult) -> None:
    graph = fusion_graph(result, collapse=False)
    root = _check_svg(to_svg(graph), result)
    rects = {g.get("id"): g.find(f"{SVG}rect") for g in root.iter(f"{SVG}g") if g.get("id")}

    def box(gid: str) -> tuple[float, float, float, float]:
        rect = rects[gid]
        assert rect is not None
        x, y = float(rect.get("x", 0)), float(rect.get("y", 0))
        return x, y, x + float(rect.get("width", 0)), y + float(rect.get("height", 0))

    def inside(inner: str, outer: str) -> bool:
        a, b = box(inner), box(outer)
        return a[0] >= b[0] and a[1] >= b[1] and a[2] <= b[2] and a[3] <= b[3]

    # Every node and box lies inside the box that holds it (loops and bodies nest).
    for cluster in graph.clusters():
        for child in cluster.children:
            prefix = "cluster_" if isinstance(child, graph_model.Cluster) else "node_"
            assert inside(prefix + child.id, "cluster_" + cluster.id), child.id
    kinds = {c.kind for c in graph.clusters()}
    assert {"computation", "kernel", "loop", "body", "condition"} <= kinds
    # The user's source line is each instruction's tooltip.
    titles = [_title(g) for g in _groups(root, "node")]
    assert sum("cartpole.py:" in t for t in titles) > len(titles) // 2
    assert graph.blocked == {rule: n for rule, n in
                             result.explain_dict()["blocked"].items()}  # type: ignore[union-attr]


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_graphviz_svg_has_the_same_structure(result: FusionResult) -> None:
    svg = render(fusion_graph(result, collapse=False), ".svg", engine="dot")
    _check_svg(svg[svg.index("<svg"):], result)


def test_collapsed_graph_has_one_node_per_kernel_with_counts(result: FusionResult) -> None:
    graph = fusion_graph(result, collapse=True)
    kernels = [n for n in graph.nodes() if n.kind == "kernel"]
    assert len(kernels) == len(result.kernels)
    by_name = {n.label[0]: n.label[1] for n in kernels}
    for kernel in result.kernels:
        count = len(kernel.instructions)
        assert by_name[f"%{kernel.name}"] == (f"{kernel.kind}: {count} instruction"
                                              + ("s" if count != 1 else ""))
    assert not [c for c in graph.clusters() if c.kind == "kernel"]
    _ = ET.fromstring(to_svg(graph))


def test_large_graphs_collapse_by_themselves(result: FusionResult,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert not fusion_graph(result).collapsed
    monkeypatch.setattr(graph_model, "COLLAPSE_ABOVE", 20)
    assert fusion_graph(result).collapsed


@pytest.mark.thorough
def test_whole_loop_kernel_counts_its_nested_instructions() -> None:
    module = cartpole.trace(cartpole.PRESETS["baseline"], 8, 3)
    result = run_strategy(module, "max", debug=False)
    graph = fusion_graph(result, collapse=True)
    counts = [int(n.label[1].split(": ")[1].split()[0]) for n in graph.nodes()
              if n.kind == "kernel"]
    # One kernel runs the whole loop: it computes most of the program's instructions.
    assert max(counts) > 0.5 * sum(len(c.instructions) for c in module.computations)


HOSTILE = """HloModule m

ENTRY %main (p: f32[4]) -> f32[4] {
  %p = f32[4] parameter(0)
  %e = f32[4] exponential(%p), metadata={source_file="a<b>&\\"c\\".py" source_line=7}
  ROOT %n = f32[4] negate(%e)
}
"""


def test_text_from_the_program_is_escaped(tmp_path: Path) -> None:
    result = run_strategy(parse_module(HOSTILE), "none", debug=False)
    svg = write_graph(result, tmp_path / "g.svg", engine="builtin").read_text()
    root = ET.fromstring(svg[svg.index("<svg"):])
    assert any('a<b>&"c".py:7' in _title(g) for g in _groups(root, "node"))
    dot = write_graph(result, tmp_path / "g.dot").read_text()
    assert 'a<b>&\\"c\\".py:7' in dot
    if shutil.which("dot"):
        done = subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, done.stderr


def test_html_page_is_self_contained(result: FusionResult, tmp_path: Path) -> None:
    page = write_graph(result, tmp_path / "g.html", engine="builtin").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script>" in page and "<svg" in page
    # No network: no external scripts, styles or images.
    assert not re.search(r'(src|href)="(https?:)?//', page)
    assert 'class="cluster kernel' in page


def test_compiled_graph_and_suffix_check(tmp_path: Path) -> None:
    @hlofuse.jit(backend="interpreter")
    def f(x: np.ndarray) -> object:
        return lax.fori_loop(0, 3, lambda i, v: hnp.sin(v) * 2.0 + 1.0, x)

    compiled = f.lower(np.ones(4, np.float32)).compile()
    path = compiled.graph(tmp_path / "loop.dot")
    text = path.read_text()
    assert "while %" in text and "body %" in text
    assert compiled.graph(tmp_path / "loop.svg", engine="builtin").exists()
    with pytest.raises(ValueError, match=r"must end in \.dot, \.svg, \.html"):
        compiled.graph(tmp_path / "loop.png")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.thorough
@pytest.mark.thorough
@pytest.mark.skipif(_chromium() is None, reason="headless Chromium is not installed")
def test_chromium_draws_the_kernels(result: FusionResult, tmp_path: Path) -> None:
    Image = pytest.importorskip("PIL.Image")
    small = run_strategy(parse_module(HOSTILE), "xla", debug=False)
    page = write_graph(small, tmp_path / "g.html", engine="builtin")
    browser = _chromium()
    assert browser is not None
    base = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--window-size=900,600"]
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120, check=False).stdout
    # The page's script ran (it sets the aspect ratio for pan and zoom) and kept the kernels.
    assert 'preserveAspectRatio="xMidYMid meet"' in dom
    assert dom.count('class="cluster kernel') == len(small.kernels)
    shot = tmp_path / "shot.png"
    subprocess.run([*base, f"--screenshot={shot}", page.as_uri()], capture_output=True,
                   timeout=120, check=False)
    assert shot.exists()
    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3)
    kernel_fill = np.array([0xDB, 0xE9, 0xF6])  # kLoop boxes
    assert int(np.sum(np.all(np.abs(pixels.astype(int) - kernel_fill) <= 2, axis=1))) > 500
