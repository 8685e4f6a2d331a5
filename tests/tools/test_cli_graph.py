"""`hlofuse explain FILE --graph OUT` and the graphs `hlofuse cartpole` writes next to its plots."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from hlofuse.cli import main

CORPUS = Path(__file__).parents[1] / "data" / "jax"


@pytest.mark.thorough
@pytest.mark.parametrize("suffix", [".svg", ".dot", ".html"])
def test_explain_writes_the_graph(tmp_path: Path, suffix: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / f"g{suffix}"
    assert main(["explain", str(CORPUS / "cartpole_rollout.hlo"), "--json", "--graph", str(out),
                 "--graph-engine", "builtin", "--collapse", "no"]) == 0
    report = json.loads(capsys.readouterr().out)
    text = out.read_text()
    for kernel in report["kernels"]:
        assert f"%{kernel['name']} ({kernel['kind']})" in text
    for rule in report["blocked"]:
        assert rule in text
    if suffix == ".svg":
        ET.fromstring(text[text.index("<svg"):])


def test_explain_graph_collapse_flag(tmp_path: Path) -> None:
    out = tmp_path / "g.dot"
    assert main(["explain", str(CORPUS / "cartpole_rollout.hlo"), "--graph", str(out),
                 "--collapse", "yes"]) == 0
    text = out.read_text()
    assert "instructions" in text and "(collapsed)" in text


def test_explain_graph_bad_suffix_is_one_error_line(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", str(CORPUS / "cartpole_rollout.hlo"), "--graph",
                 str(tmp_path / "g.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --graph:") and err.count("\n") == 1


@pytest.mark.needs_cc
def test_cartpole_writes_baseline_and_max_graphs(tmp_path: Path) -> None:
    assert main(["cartpole", "--envs", "16", "--steps", "4", "--repeats", "1",
                 "--variants", "baseline,max", "--out", str(tmp_path)]) == 0
    for step in ("baseline", "max"):
        svg = (tmp_path / f"cartpole_graph_{step}.svg").read_text()
        root = ET.fromstring(svg[svg.index("<svg"):])
        assert any("kernel" in (g.get("class") or "") for g in root.iter())
        assert (tmp_path / f"cartpole_graph_{step}.html").read_text().startswith("<!DOCTYPE")
