"""Digests of the code hlofuse generates, per program x strategy x target, to show that a
refactor of code generation leaves its output unchanged.

Every program of the corpora (tests/data/jax, indexing, linalg, rollouts; CartPole's presets at
a small size) is fused under each strategy (the cost-model strategies with their fixed default
constants, so the result does not depend on this machine), then its C source and its CUDA
source are generated (no compiler runs) and hashed. Run it before and after a change and
compare the two files:

    .venv/bin/python benchmarks/codegen_digest.py --out /tmp/before.json
    .venv/bin/python benchmarks/codegen_digest.py --out /tmp/after.json --compare /tmp/before.json

`--compare` prints every entry whose digest differs (or that failed on one side only) and
exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
STRATEGIES = ("none", "xla", "xla+relax_concatenate", "priority+default_costs",
              "max+default_costs", "xla-gpu")


def programs(quick: bool) -> Iterator[tuple[str, Callable[[], object]]]:
    """(name, a function giving the unfused module) for every program of the digest."""
    from hlofuse.envs import cartpole
    from hlofuse.ir.parser import parse_module

    def from_file(path: Path) -> Callable[[], object]:
        return lambda: parse_module(path.read_text(), path.name)

    folders = ("jax", "indexing", "linalg", "rollouts")
    for folder in folders:
        files = sorted((DATA / folder).glob("*.hlo"))
        if quick:
            files = files[:4]
        for path in files:
            if ".tpu." in path.name:
                continue
            yield f"{folder}/{path.name}", from_file(path)
    for name, variant in cartpole.PRESETS.items():
        yield f"cartpole/{name}", (lambda v=variant: cartpole.trace(v, 64, 12))


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def generated_sources(fused: object) -> dict[str, str]:
    """target -> digest of the source generated for it (or the error's first line)."""
    from hlofuse.targets.c import generate_c as generate
    from hlofuse.targets.cuda.compile import generate_cuda

    out: dict[str, str] = {}
    for target, make in (("c", generate), ("cuda", generate_cuda)):
        try:
            out[target] = digest(make(fused).source.text)  # type: ignore[attr-defined]
        except Exception as e:  # noqa: BLE001 - recorded, compared like a digest
            out[target] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    return out


def run(quick: bool, strategies: tuple[str, ...]) -> dict[str, dict[str, str]]:
    from hlofuse.fusion.strategies import run_strategy

    results: dict[str, dict[str, str]] = {}
    for name, make in programs(quick):
        module = make()
        for strategy in strategies:
            key = f"{name} {strategy}"
            start = time.perf_counter()
            try:
                fused = run_strategy(module, strategy, debug=False,  # type: ignore[arg-type]
                                     log_decisions=False).module
            except Exception as e:  # noqa: BLE001
                results[key] = {"fusion": f"error: {type(e).__name__}: {e}"[:160]}
                continue
            results[key] = generated_sources(fused)
            print(f"{key}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return results


def compare(now: dict[str, dict[str, str]], before: dict[str, dict[str, str]]) -> int:
    differing = 0
    for key in sorted(set(now) | set(before)):
        a, b = before.get(key), now.get(key)
        if a != b:
            differing += 1
            print(f"DIFFERS {key}: before {a} now {b}")
    print(f"{len(now)} entries, {differing} differ")
    return 1 if differing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--compare", type=Path)
    parser.add_argument("--quick", action="store_true", help="four programs per folder")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    args = parser.parse_args()
    results = run(args.quick, tuple(s for s in args.strategies.split(",") if s))
    args.out.write_text(json.dumps(results, indent=1, sort_keys=True))
    if args.compare:
        return compare(results, json.loads(args.compare.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
