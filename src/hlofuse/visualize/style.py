"""Colours and shapes of the fusion graph, shared by the DOT and SVG writers."""

from __future__ import annotations

from hlofuse.visualize.model import Cluster, GraphNode

BLOCKED_COLOR = "#d62728"
EDGE_COLOR = "#7f7f7f"
_KERNEL_FILL = {"kLoop": "#dbe9f6", "kInput": "#dcf0dc", "kOutput": "#f3e3f3",
                "kCustom": "#fde9c9", "library": "#fbe0c8"}
_CLUSTER = {"computation": ("#ffffff", "#404040", False),
            "loop": ("#fafafa", "#555555", True),
            "body": ("#ffffff", "#8c8c8c", False),
            "condition": ("#ffffff", "#8c8c8c", False),
            "control": ("#fafafa", "#555555", True),
            "branch": ("#ffffff", "#8c8c8c", False),
            "fused": ("#eef3fa", "#6b8cb5", True)}


def cluster_style(cluster: Cluster) -> tuple[str, str, bool]:
    """(fill, stroke, dashed)."""
    if cluster.kind == "kernel":
        return _KERNEL_FILL.get(cluster.kernel_kind, "#e8e8e8"), "#2f5f8f", False
    return _CLUSTER.get(cluster.kind, ("#ffffff", "#808080", False))


def node_style(node: GraphNode) -> tuple[str, str, str]:
    """(fill, stroke, DOT shape)."""
    if node.kind == "free":
        return "#f2f2f2", "#9a9a9a", "box"
    if node.kind == "control":
        return "#fff4cc", "#b38f00", "box"
    if node.kind == "kernel":
        kind = node.label[1].split(":")[0] if len(node.label) > 1 else ""
        return _KERNEL_FILL.get(kind, "#dbe9f6"), "#2f5f8f", "box"
    return "#ffffff", "#2f5f8f", "box"
