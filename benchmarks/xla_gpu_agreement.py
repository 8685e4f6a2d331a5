"""`xla-gpu` against XLA's own GPU compiler on every program of the stored oracle corpus
(tests/data/xla_gpu/): kernels outside loops, per loop iteration, copies and grouping, one line
per program, and the totals. Reads only the stored files (no XLA needed):

    .venv/bin/python benchmarks/xla_gpu_agreement.py [--device h100] [--jobs 4] [--out F.json]

Programs run in parallel processes (`--jobs`); the figures do not depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "xla_gpu"
sys.path.insert(0, str(ROOT / "src"))


def measure(name: str, device: str) -> dict[str, object]:
    from hlofuse.compare_xla.compare import compare_texts

    start = time.perf_counter()
    result = compare_texts((DATA / f"{name}.before.hlo").read_text(),
                           (DATA / f"{name}.{device}.hlo").read_text(), device)
    names = [(k.name, k.xla_name) for k in result.ours.kernels]
    return {
        "program": name, "same_count": result.same_count,
        "same_grouping": result.same_grouping,
        "xla": {"outside_loops": result.xla.outside_loops(),
                "per_iteration": list(result.xla.per_iteration().values()),
                "copies": result.xla.copies()},
        "xla_gpu": {"outside_loops": result.ours.outside_loops(),
                    "per_iteration": list(result.ours.per_iteration().values()),
                    "copies": result.ours.copies()},
        "names": names, "seconds": round(time.perf_counter() - start, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="h100")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("programs", nargs="*")
    args = parser.parse_args()
    names = args.programs or sorted(
        p.name.removesuffix(".before.hlo") for p in DATA.glob("*.before.hlo")
        if (DATA / f"{p.name.removesuffix('.before.hlo')}.{args.device}.hlo").exists())
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(measure, names, [args.device] * len(names)))
    for row in rows:
        xla, ours = row["xla"], row["xla_gpu"]
        assert isinstance(xla, dict) and isinstance(ours, dict)
        print(f"{row['program']:32} count {'=' if row['same_count'] else 'X'} "
              f"grouping {'=' if row['same_grouping'] else 'X'}  XLA {xla['outside_loops']}"
              f"+{xla['per_iteration']} ({xla['copies']} copies)  xla-gpu "
              f"{ours['outside_loops']}+{ours['per_iteration']} ({ours['copies']} copies)")
    count = sum(1 for r in rows if r["same_count"])
    grouping = sum(1 for r in rows if r["same_grouping"])
    print(f"{args.device}: same kernel count on {count} of {len(rows)} "
          f"({100 * count / len(rows):.0f}%), same grouping on {grouping} of {len(rows)} "
          f"({100 * grouping / len(rows):.0f}%)")
    if args.out:
        args.out.write_text(json.dumps({"device": args.device, "same_count": count,
                                        "same_grouping": grouping, "programs": rows},
                                       indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
