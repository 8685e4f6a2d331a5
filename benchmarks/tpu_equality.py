"""Every corpus program on the chip against the reference interpreter (issue 29's first
figure): the JAX-exported corpus, indexing, linear algebra (f32) and the rollouts, each
compiled for --backend under --strategy (the rollouts also under max), and per program the
largest relative difference of its floats (|got - want| / max(|want|, 1e-6)) and absolute
one, whether they are within rtol 1e-5 (and within rtol 1e-5, atol 1e-6), integers exactly
equal, which transcendental ops it uses (where the
chip's functions differ from NumPy's in the last bits), and how its kernels ran (Pallas
kernels, whole-loop lane kernels among them, and each XLA operation with its reason). The
JSON is rewritten after each program, so a run stopped by a time limit keeps what it
measured; --merge keeps --out's rows and goes on with the programs it does not hold. A
program past --limit seconds is recorded as timed out and the process exits 3, so that a
rerun with --merge goes on with the next (`benchmarks/tpu_check.sh` loops so).

    python benchmarks/tpu_equality.py --out results/tpu/equality.json
    python benchmarks/tpu_equality.py --sets rollouts --merge --out results/tpu/equality.json
    python benchmarks/tpu_equality.py --backend tpu-interpret --sets jax --out /tmp/eq.json
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import threading
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


def kernel_modes(compiled: object) -> dict[str, object]:
    """How the compiled program's kernels run: Pallas kernels, whole-loop lane kernels, and
    the XLA operations with their reasons."""
    plans = getattr(getattr(compiled, "executable", None), "kernel_plans", [])
    xla_ops = [f"{k.name}: {k.reason[:160]}" for k in plans if k.mode != "pallas"]
    return {"pallas_kernels": sum(k.mode == "pallas" for k in plans),
            "lane_kernels": sum(k.mode == "pallas" and k.lanes is not None for k in plans),
            "xla_ops": xla_ops}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="tpu")
    parser.add_argument("--strategy", default="xla")
    parser.add_argument("--sets", default="jax,indexing,rollouts,linalg")
    parser.add_argument("--programs", default="", help="comma-separated file names (default all)")
    parser.add_argument("--out", default="results/tpu/equality.json")
    parser.add_argument("--merge", action="store_true",
                        help="keep --out's rows and skip the programs it holds")
    parser.add_argument("--limit", type=float, default=0.0,
                        help="seconds one program and strategy may take; past it the row is "
                        "recorded as timed out and the process exits 3")
    args = parser.parse_args()
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = (json.loads(path.read_text())["programs"]
                                     if args.merge and path.is_file() else [])
    done = {(r["program"], r["strategy"]) for r in rows}

    def write() -> None:
        path.write_text(json.dumps({"backend": args.backend, "rtol": RTOL, "floor": FLOOR,
                                    "programs": rows}, indent=1) + "\n")

    chosen = {n for n in args.programs.split(",") if n}
    for corpus, program in _programs(args.sets.split(",")):
        if chosen and program.name not in chosen:
            continue
        strategies = [args.strategy, "max"] if corpus == "rollouts" else [args.strategy]
        strategies = [s for s in dict.fromkeys(strategies) if (program.name, s) not in done]
        if not strategies:
            continue
        module = parse_module(program.read_text(), program.name)
        inputs = _inputs(program)
        want = flatten_value(evaluate(module, inputs))
        for strategy in strategies:
            row: dict[str, object] = {"corpus": corpus, "program": program.name,
                                      "strategy": strategy,
                                      "transcendental": transcendental_ops(module)}
            start = time.perf_counter()

            def expire(row: dict[str, object] = row) -> None:
                row["error"] = f"timed out after {args.limit:.0f} s"
                rows.append(row)
                write()
                print(json.dumps(row), flush=True)
                # Where it was: the main thread's stack, for the log.
                faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
                os._exit(3)

            timer = threading.Timer(args.limit, expire) if args.limit else None
            if timer is not None:
                timer.daemon = True
                timer.start()
            try:
                compiled = compile_module(module, strategy, args.backend)
                row.update(kernel_modes(compiled))
                row.update(compare(compiled.run_flat(inputs), want))
            except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
                row["error"] = f"{type(e).__name__}: {str(e).strip()[:300]}"
            if timer is not None:
                timer.cancel()
            row["seconds"] = round(time.perf_counter() - start, 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
            write()
    bad = [r for r in rows if not r.get("within_rtol")]
    print(f"tpu_equality: {len(rows) - len(bad)} of {len(rows)} within rtol {RTOL}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
