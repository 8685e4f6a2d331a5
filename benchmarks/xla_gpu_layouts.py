"""`xla-gpu`'s layout assignment against XLA's on the stored oracle corpus: for each program,
the arrays XLA lays out other than row-major (dimensions of size 1 aside) and the copies its
layout assignment inserts, against `xla_gpu/layout_assignment.py`'s
(`hlofuse.compare_xla.layouts`). Prints the programs that differ and the total:

    .venv/bin/python benchmarks/xla_gpu_layouts.py [NAME ...]      # compare
    .venv/bin/python benchmarks/xla_gpu_layouts.py --extract DIR    # rebuild the reference

The reference, tests/data/xla_gpu/h100.layouts.json, is read from XLA's own dumps: the
oracle run with `--xla_dump_hlo_pass_re=layout-assignment` writes
`*.after_layout-assignment.*.txt`, one directory per program (`DIR/dump_NAME/`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "xla_gpu"
REFERENCE = DATA / "h100.layouts.json"
sys.path.insert(0, str(ROOT / "src"))


def main() -> int:
    from hlofuse.compare_xla.layouts import same_layouts, xla_gpu_layouts, xla_layouts

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
                reference[name] = xla_layouts(dumps[0].read_text())
        REFERENCE.write_text(json.dumps(reference, indent=1, sort_keys=True) + "\n")
        print(f"{len(reference)} programs written to {REFERENCE}")
        return 0
    reference = json.loads(REFERENCE.read_text())
    names = args.programs or sorted(reference)
    same = 0
    for name in names:
        ours = xla_gpu_layouts((DATA / f"{name}.before.hlo").read_text())
        if same_layouts(reference[name], ours):
            same += 1
        else:
            print(f"{name:36} differs: XLA {reference[name]}, xla-gpu {ours}")
    print(f"same layouts and copies as XLA on {same} of {len(names)} programs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
