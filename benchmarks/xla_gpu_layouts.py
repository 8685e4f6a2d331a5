"""`xla-gpu`'s layout assignment against XLA's on the stored oracle corpus: for each program,
the arrays XLA lays out other than row-major (dimensions of size 1 aside) and the copies its
layout assignment inserts, against `xla_gpu/layout_assignment.py`'s on the module hlofuse's
pipeline has made when it gets there.

    .venv/bin/python benchmarks/xla_gpu_layouts.py [NAME ...]      # compare, one line each
    .venv/bin/python benchmarks/xla_gpu_layouts.py --extract DIR    # rebuild the reference

The reference, tests/data/xla_gpu/h100.layouts.json, is read from XLA's own dumps: the
oracle run with `--xla_dump_hlo_pass_re=layout-assignment` writes
`*.after_layout-assignment.*.txt`, one directory per program (`DIR/dump_NAME/`). Get-tuple-
elements and tuples are left out of the comparison (they forward their operands' layouts),
and so are names only one side has (passes before layout assignment name new instructions
differently) unless the other side lays that name out too.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "xla_gpu"
REFERENCE = DATA / "h100.layouts.json"
sys.path.insert(0, str(ROOT / "src"))

_LINE = re.compile(r"^\s*(?:ROOT )?%(\S+) = (\w+)\[([\d,]*)\]\{([\d,]*)\} ([\w-]+)\(")


def non_row_major(dims: tuple[int, ...], layout: tuple[int, ...]) -> tuple[int, ...] | None:
    """The layout's order of the dimensions larger than 1, if it is not row-major."""
    big = tuple(d for d in layout if dims[d] != 1)
    return None if big == tuple(sorted(big, reverse=True)) else big


def extract(text: str) -> dict[str, object]:
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


def ours(name: str) -> dict[str, object]:
    """hlofuse's layouts for the program, on the module its pipeline has before the pass."""
    from hlofuse.fusion.strategies import parse_strategy
    from hlofuse.fusion.xla_gpu.layout_assignment import LayoutNotModelled, assign_layouts
    from hlofuse.fusion.xla_gpu.layout_normalization import GpuLayoutAssignment
    from hlofuse.ir.ops import Op
    from hlofuse.ir.parser import parse_module
    from hlofuse.passes.manager import Pipeline

    module = parse_module((DATA / f"{name}.before.hlo").read_text())
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


def agrees(xla: dict[str, object], mine: dict[str, object]) -> bool:
    return "refused" not in mine and xla["laid_out"] == mine["laid_out"] and (
        xla["copies"] == mine["copies"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extract", type=Path, help="directory of XLA's dumps, dump_NAME/")
    parser.add_argument("programs", nargs="*")
    args = parser.parse_args()
    if args.extract is not None:
        reference = {}
        for directory in sorted(args.extract.glob("dump_*")):
            dumps = sorted(directory.glob("*after_layout-assignment*"))
            name = directory.name.removeprefix("dump_")
            if dumps and (DATA / f"{name}.before.hlo").exists():
                reference[name] = extract(dumps[0].read_text())
        REFERENCE.write_text(json.dumps(reference, indent=1, sort_keys=True) + "\n")
        print(f"{len(reference)} programs written to {REFERENCE}")
        return 0
    reference = json.loads(REFERENCE.read_text())
    names = args.programs or sorted(reference)
    same = 0
    for name in names:
        mine = ours(name)
        ok = agrees(reference[name], mine)
        same += ok
        if not ok:
            print(f"{name:36} differs: XLA {reference[name]}, xla-gpu {mine}")
    print(f"same layouts and copies as XLA on {same} of {len(names)} programs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
