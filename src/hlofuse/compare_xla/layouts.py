"""Layouts compared with XLA's: the arrays a module's layout assignment lays out other than
row-major (dimensions of size 1 aside) and the copies it inserts, read from XLA's
`after_layout-assignment` dump or computed by `xla-gpu`'s model
(`fusion/xla_gpu/layout_assignment.py`) on the module `xla-gpu`'s pipeline has made when it
gets there. `benchmarks/xla_gpu_layouts.py` runs it over the stored corpus.

Get-tuple-elements and tuples are left out (they forward their operands' layouts).
"""

from __future__ import annotations

import re

from hlofuse.fusion.strategies import parse_strategy
from hlofuse.fusion.xla_gpu.layout_assignment import LayoutNotModelled, assign_layouts
from hlofuse.fusion.xla_gpu.layout_normalization import GpuLayoutAssignment
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.passes.manager import Pipeline

_LINE = re.compile(r"^\s*(?:ROOT )?%(\S+) = (\w+)\[([\d,]*)\]\{([\d,]*)\} ([\w-]+)\(")

Layouts = dict[str, object]


def non_row_major(dims: tuple[int, ...], layout: tuple[int, ...]) -> tuple[int, ...] | None:
    """The layout's order of the dimensions larger than 1, if it is not row-major."""
    big = tuple(d for d in layout if dims[d] != 1)
    return None if big == tuple(sorted(big, reverse=True)) else big


def xla_layouts(text: str) -> Layouts:
    """XLA's non-row-major arrays and its copies, from an after_layout-assignment dump."""
    laid_out: dict[str, list[int]] = {}
    copies = 0
    for line in text.splitlines():
        found = _LINE.match(line)
        if found is None:
            continue
        name, _, dims_text, layout_text, op = found.groups()
        if op == "copy":
            copies += 1
            continue
        if op in ("get-tuple-element", "tuple"):
            continue
        dims = tuple(int(d) for d in dims_text.split(",") if d)
        order = non_row_major(dims, tuple(int(d) for d in layout_text.split(",") if d))
        if order is not None:
            laid_out[name] = list(order)
    return {"laid_out": laid_out, "copies": copies}


def xla_gpu_layouts(before: str) -> Layouts:
    """`xla-gpu`'s layouts for the module XLA started from (text), on the module its pipeline
    has when layout assignment runs; {"refused": why} where the model does not cover it."""
    module = parse_module(before)
    steps = parse_strategy("xla-gpu").steps()
    cut = next(i for i, s in enumerate(steps) if isinstance(s, GpuLayoutAssignment))
    module, _ = Pipeline(steps[:cut], debug=False).run(module)
    try:
        assignment = assign_layouts(module)
    except LayoutNotModelled as refusal:
        return {"refused": str(refusal)}
    laid_out: dict[str, list[int]] = {}
    for (inst, index), layout in assignment.buffers.items():
        if index or inst.op in (Op.GET_TUPLE_ELEMENT, Op.TUPLE) or not inst.shape.is_array:
            continue
        order = non_row_major(inst.shape.dims, layout)
        if order is not None:
            laid_out[inst.name] = list(order)
    return {"laid_out": laid_out, "copies": len(assignment.copies())}


def same_layouts(xla: Layouts, ours: Layouts) -> bool:
    return "refused" not in ours and xla["laid_out"] == ours["laid_out"] and (
        xla["copies"] == ours["copies"])
