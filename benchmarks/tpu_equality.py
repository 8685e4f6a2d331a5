"""Every corpus program on the chip against the reference interpreter (issue 29's first
figure): the JAX-exported corpus, indexing, linear algebra (f32) and the rollouts, each
compiled for --backend under --strategy (the rollouts also under max), and per program the
largest relative difference of its floats (|got - want| / max(|want|, 1e-6)) and absolute
one, whether they are within rtol 1e-5 (and within rtol 1e-5, atol 1e-6), integers exactly
equal, and which transcendental ops it uses (where the
chip's functions differ from NumPy's in the last bits). The JSON is rewritten after each
program, so a run stopped by a time limit keeps what it measured.

    python benchmarks/tpu_equality.py --out results/tpu/equality.json
    python benchmarks/tpu_equality.py --backend tpu-interpret --sets jax --out /tmp/eq.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from hlofuse.api import compile_module
from hlofuse.ir.hlo import Module
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value

DATA = Path(__file__).parent.parent / "tests" / "data"
RTOL = 1e-5
FLOOR = 1e-6  # |want| below this counts as this: near-zero values differ absolutely
ATOL = 1e-6  # `allclose`: |got - want| <= RTOL |want| + ATOL, NumPy's test
TRANSCENDENTAL = frozenset({
    Op.EXPONENTIAL, Op.EXPONENTIAL_MINUS_ONE, Op.LOG, Op.LOG_PLUS_ONE, Op.TANH, Op.SINE,
    Op.COSINE, Op.TAN, Op.POWER, Op.SQRT, Op.RSQRT, Op.CBRT, Op.LOGISTIC, Op.ERF, Op.ATAN2})


def _programs(sets: list[str]) -> list[tuple[str, Path]]:
    globs = {"jax": ("jax", "*.hlo"), "indexing": ("indexing", "*.hlo"),
             "rollouts": ("rollouts", "*.cpu.hlo"), "linalg": ("linalg", "*.f32.*.cpu.hlo")}
    return [(name, path) for name in sets
            for path in sorted((DATA / globs[name][0]).glob(globs[name][1]))]


def _inputs(path: Path) -> list[np.ndarray]:
    stem = path.name.split(".")[0]
    npz = path.parent / f"{stem}.npz"
    if not npz.exists():  # linalg: named by stem and precision
        npz = path.parent / (".".join(path.name.split(".")[:3]) + ".npz")
    data = np.load(npz)
    return [data[f"arg{i}"] for i in range(sum(k.startswith("arg") for k in data.files))]


def compare(got: list[np.ndarray], want: list[np.ndarray]) -> dict[str, object]:
    """The largest relative difference of the floats and whether integers are equal."""
    worst, worst_abs, close, exact, floats = 0.0, 0.0, True, True, 0
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return {"shapes_differ": True, "within_rtol": False, "integers_equal": False}
        if w.dtype.kind == "f" or w.dtype.name == "bfloat16":
            g64, w64 = g.astype(np.float64), w.astype(np.float64)
            both_nan = np.isnan(g64) & np.isnan(w64)
            same = (g64 == w64) | both_nan
            diff = np.where(same, 0.0, np.abs(g64 - w64) / np.maximum(np.abs(w64), FLOOR))
            diff = np.where(np.isnan(diff), np.inf, diff)
            worst = max(worst, float(diff.max(initial=0.0)))
            absolute = np.where(same, 0.0, np.abs(g64 - w64))
            worst_abs = max(worst_abs, float(np.nan_to_num(absolute, nan=np.inf).max(initial=0)))
            close = close and bool(np.allclose(g64, w64, rtol=RTOL, atol=ATOL, equal_nan=True))
            floats += int(w.size)
        else:
            exact = exact and bool(np.array_equal(g, w))
    return {"max_relative": worst, "max_absolute": worst_abs,
            "within_rtol": worst <= RTOL and exact, "allclose": close and exact,
            "integers_equal": exact, "floats": floats}


def transcendental_ops(module: Module) -> list[str]:
    return sorted({inst.op.value for comp in module.computations for inst in comp.instructions
                   if inst.op in TRANSCENDENTAL})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="tpu")
    parser.add_argument("--strategy", default="xla")
    parser.add_argument("--sets", default="jax,indexing,rollouts,linalg")
    parser.add_argument("--programs", default="", help="comma-separated file names (default all)")
    parser.add_argument("--out", default="results/tpu/equality.json")
    args = parser.parse_args()
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    chosen = {n for n in args.programs.split(",") if n}
    for corpus, program in _programs(args.sets.split(",")):
        if chosen and program.name not in chosen:
            continue
        module = parse_module(program.read_text(), program.name)
        inputs = _inputs(program)
        want = flatten_value(evaluate(module, inputs))
        strategies = [args.strategy, "max"] if corpus == "rollouts" else [args.strategy]
        for strategy in dict.fromkeys(strategies):
            row: dict[str, object] = {"corpus": corpus, "program": program.name,
                                      "strategy": strategy,
                                      "transcendental": transcendental_ops(module)}
            start = time.perf_counter()
            try:
                got = compile_module(module, strategy, args.backend).run_flat(inputs)
                row.update(compare(got, want))
            except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
                row["error"] = f"{type(e).__name__}: {str(e).strip()[:300]}"
            row["seconds"] = round(time.perf_counter() - start, 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
            path.write_text(json.dumps({"backend": args.backend, "rtol": RTOL,
                                        "floor": FLOOR, "programs": rows}, indent=1) + "\n")
    bad = [r for r in rows if not r.get("within_rtol")]
    print(f"tpu_equality: {len(rows) - len(bad)} of {len(rows)} within rtol {RTOL}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
