"""`python -m tests.fuzz [--n N] [--seed S] [--mode ops|rollout]`: fuzz N programs from seed S,
print the tally per target and category, shrink and save every failure under
tests/fuzz/corpus/. `--mode rollout` generates rollout-shaped programs (tests/fuzz/rollout.py),
compiles them cold, and reports compile times and what `max` made of each time loop."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tests.fuzz.harness import CORPUS_DIR, MODES, ROLLOUT_TARGETS, TARGETS, campaign


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--n", type=int, default=200, help="programs to run (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--mode", choices=sorted(MODES), default="ops",
                        help="ops: any operation and element type (default); rollout: "
                        "rollout-shaped programs (a time loop over lanes, nested loops, MLPs)")
    parser.add_argument("--targets", default=None,
                        help="comma-separated: interpreter and strategy names (default: all "
                        f"for ops, {','.join(ROLLOUT_TARGETS)} for rollout)")
    parser.add_argument("--no-save", action="store_true", help="do not shrink or save failures")
    parser.add_argument("--shrink-budget", type=float, default=300.0,
                        help="seconds to spend shrinking one failure")
    parser.add_argument("--corpus", type=Path, default=CORPUS_DIR,
                        help="where shrunk failures are saved (default tests/fuzz/corpus)")
    parser.add_argument("--out", type=Path, default=Path("results/fuzz.json"),
                        help="where to write the tally as JSON")
    args = parser.parse_args(argv)
    default_targets = ROLLOUT_TARGETS if args.mode == "rollout" else TARGETS
    targets = [t for t in (args.targets or ",".join(default_targets)).split(",") if t]
    start = time.time()
    tally = campaign(range(args.seed, args.seed + args.n), targets, save=not args.no_save,
                     shrink_budget_s=args.shrink_budget,
                     log=lambda line: print(line, flush=True), corpus=args.corpus,
                     mode=args.mode)
    elapsed = time.time() - start
    print(f"\n{tally.programs} programs (seeds {args.seed}..{args.seed + args.n - 1}; "
          f"{tally.skipped} without an oracle: JAX refused or XLA crashed), {elapsed:.0f} s")
    print(tally.table())
    print(tally.compiles.summary())
    if tally.unsupported_ops:
        print("unsupported opcodes:", dict(tally.unsupported_ops))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {"seed": args.seed, "n": args.n, "mode": args.mode, "seconds": round(elapsed, 1),
              **tally.to_json()}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    bad = sum(tally.counts[t][c] for t in targets for c in ("wrong", "crash", "hang", "refused"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
