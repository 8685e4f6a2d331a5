"""`bench rollouts --backend tpu` one program at a time, the JSON (and plot) rewritten after
each, so that a run stopped by its time limit keeps what it measured; a later run with
--merge adds to the same file (a program and runner measured again replaces the old figure).

    python benchmarks/tpu_rollouts.py --strategies max --out results/tpu/rollouts.json
    python benchmarks/tpu_rollouts.py --strategies xla,priority --merge --out ...

Needs a TPU (JAX with libtpu) for --backend tpu; --backend tpu-interpret checks the script
on a CPU at a small --lanes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path

from hlofuse.studies.rollouts_bench import (
    STRATEGIES,
    Measurement,
    RolloutsConfig,
    RolloutsResult,
    load_programs,
    run_rollouts,
    write_json,
    write_plot,
)


def _previous(path: Path) -> list[Measurement]:
    if not path.is_file():
        return []
    return [Measurement(**m) for m in json.loads(path.read_text())["measurements"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=65536)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--programs", default="", help="comma-separated (default: all)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--backend", default="tpu")
    parser.add_argument("--merge", action="store_true",
                        help="keep the measurements already in --out")
    parser.add_argument("--limit", type=float, default=0.0,
                        help="seconds one program may take (JAX and every strategy); past "
                        "it the program is recorded as timed out and the process exits 3, "
                        "so that a rerun with --merge --rest goes on with the next")
    parser.add_argument("--rest", action="store_true",
                        help="skip the programs --out already holds")
    parser.add_argument("--out", default="results/tpu/rollouts.json")
    args = parser.parse_args()
    corpus = Path("tests/data/rollouts")
    names = [n for n in args.programs.split(",") if n] or sorted(load_programs(corpus).ROLLOUTS)
    strategies = tuple(s for s in args.strategies.split(",") if s)
    path = Path(args.out)
    kept = _previous(path) if args.merge else []
    programs = list(dict.fromkeys([*(m.program for m in kept), *names]))
    runners = list(dict.fromkeys([*(m.runner for m in kept if m.runner in STRATEGIES),
                                  *strategies]))
    total = RolloutsResult({"lanes": args.lanes, "steps": args.steps, "repeats": args.repeats,
                            "threads": None, "backend": args.backend, "programs": programs,
                            "strategies": runners}, kept)
    if args.rest:
        names = [n for n in names if n not in {m.program for m in kept}]
    last = [""]  # the program's last progress line: where a timed-out program stopped

    def progress(line: str) -> None:
        last[0] = line
        print(line, flush=True)

    for name in names:
        last[0] = "before JAX's compile"
        watchdog = _watchdog(total, name, args.limit, path, last) if args.limit else None
        config = RolloutsConfig(args.lanes, args.steps, args.repeats, corpus, (name,),
                                strategies, backend=args.backend)
        done = run_rollouts(config, progress=progress)
        fresh = {(m.program, m.runner) for m in done.measurements}
        total.measurements = [m for m in total.measurements
                              if (m.program, m.runner) not in fresh] + done.measurements
        write_json(total, path)
        write_plot(total, path.with_suffix(".png"))
        if watchdog is not None:
            watchdog.cancel()
    return 0


def _watchdog(total: RolloutsResult, name: str, limit: float, path: Path, last: list[str]
              ) -> threading.Timer:
    """Records `name` as timed out (after its last progress line: compiling or running) and
    ends the process when it runs past `limit` seconds (a compile or a kernel that does not
    finish cannot be interrupted from Python)."""
    def expire() -> None:
        note = f"timed out after {limit:.0f} s; last: {last[0]}"
        total.measurements.append(Measurement(name, "all", 0.0, 0.0, 0.0, note=note))
        write_json(total, path)
        print(f"{name}: timed out after {limit:.0f} s", flush=True)
        os._exit(3)

    timer = threading.Timer(limit, expire)
    timer.daemon = True
    timer.start()
    return timer


if __name__ == "__main__":
    sys.exit(main())
