"""Every corpus program on the GPU (hlofuse's CUDA backend) against JAX's recorded outputs.

Run by benchmarks/gpu_check.sh on a machine with a GPU; writes one JSON file (default
results/gpu/corpus.json) with each program's verdict, compile and first-call times."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import flatten_value
from hlofuse.targets.cuda.compile import compile_cuda

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "jax"


def load(name: str) -> tuple[str, list[np.ndarray], list[np.ndarray]]:
    data = np.load(CORPUS / f"{name}.npz")
    inputs = [data[f"arg{i}"] for i in range(sum(k.startswith("arg") for k in data.files))]
    outputs = [data[f"out{i}"] for i in range(sum(k.startswith("out") for k in data.files))]
    return (CORPUS / f"{name}.hlo").read_text(), inputs, outputs


def agrees(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return False
        if np.issubdtype(w.dtype, np.floating):
            if not np.allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-5,
                               atol=1e-6, equal_nan=True):
                return False
        elif not np.array_equal(g, w):
            return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--out", default="results/gpu/corpus.json")
    args = parser.parse_args()
    rows = []
    for hlo in sorted(CORPUS.glob("*.hlo")):
        name = hlo.stem
        row: dict[str, object] = {"program": name}
        try:
            text, inputs, expected = load(name)
            module = run_strategy(parse_module(text, hlo.name), "xla", debug=False).module
            start = time.perf_counter()
            executable = compile_cuda(module, arch=args.arch, debug=True)
            row["compile_s"] = time.perf_counter() - start
            start = time.perf_counter()
            got = flatten_value(executable(*inputs))
            row["first_call_s"] = time.perf_counter() - start
            row["ok"] = agrees(got, expected)
        except Exception as e:  # noqa: BLE001 - every failure is a row of the report
            row["ok"] = False
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        rows.append(row)
        print(f"{'OK  ' if row['ok'] else 'FAIL'} {name} {row.get('error', '')}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"arch": args.arch, "programs": rows}, indent=1))
    failed = [r["program"] for r in rows if not r["ok"]]
    print(f"{len(rows) - len(failed)}/{len(rows)} programs agree; written {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
