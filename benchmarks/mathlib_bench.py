"""Times the vectorised math library against libm on one thread; writes results/mathlib.json.

Each function runs as `for (i...) y[i] = f(x[i]);` over N elements (1M by default),
compiled with the flags of generated kernels (hlofuse.toolchain: -O3 -march=native
-fno-math-errno -ffp-contract=off ..., no -ffast-math), once with the hlofuse_math.h
function and once with libm's. With -fno-math-errno the compiler inlines and vectorises
sqrtf/sqrt itself, so the libm column for sqrt and rsqrt is the hardware instruction.
The 1M elements are timed as blocks of 64K, each block's best time over several runs is
kept and the blocks are summed: on a shared machine a 10-50 ms libm pass is rarely left
alone for its whole length, a 64K block often is. Figures are nanoseconds per element.
Run from the repository root:

    .venv/bin/python benchmarks/mathlib_bench.py [--n 1000000] [--repeats 15] [--functions fmod]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import platform
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hlofuse.codegen import mathlib
from hlofuse.codegen.mathlib import MathFunction
from hlofuse.ir.dtypes import DType
from hlofuse.toolchain.compiler import DEFAULT_FLAGS, Compiler

CFLAGS = [f for f in DEFAULT_FLAGS if f != "-fvisibility=hidden"]
Inputs = Callable[[np.random.Generator, int], tuple[np.ndarray, ...]]


def _uniform(lo: float, hi: float) -> Inputs:
    return lambda rng, n: (rng.uniform(lo, hi, n),)


def _log_uniform(lo: float, hi: float) -> Inputs:
    return lambda rng, n: (np.exp(rng.uniform(np.log(lo), np.log(hi), n)),)


def _pow_inputs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return np.exp(rng.uniform(-7, 7, n)), rng.uniform(-10, 10, n)


def _angle_wrap_inputs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    """An angle wrapped into a period, as environments do: x + pi modulo 2 pi."""
    return rng.uniform(-30, 30, n), np.full(n, 2 * np.pi)


def _atan2_inputs(rng: np.random.Generator, n: int) -> tuple[np.ndarray, ...]:
    return rng.normal(size=n), rng.normal(size=n)


@dataclass(frozen=True)
class Case:
    name: str
    inputs: Inputs
    libm_f32: str  # a C expression of x (and z for two arguments)
    libm_f64: str


CASES = (
    Case("sin", _uniform(-10, 10), "sinf(x)", "sin(x)"),
    Case("cos", _uniform(-10, 10), "cosf(x)", "cos(x)"),
    Case("tan", _uniform(-10, 10), "tanf(x)", "tan(x)"),
    Case("exp", _uniform(-80, 80), "expf(x)", "exp(x)"),
    Case("expm1", _uniform(-10, 10), "expm1f(x)", "expm1(x)"),
    Case("log", _log_uniform(1e-30, 1e30), "logf(x)", "log(x)"),
    Case("log1p", _log_uniform(1e-6, 1e6), "log1pf(x)", "log1p(x)"),
    Case("tanh", _uniform(-10, 10), "tanhf(x)", "tanh(x)"),
    Case("logistic", _uniform(-20, 20), "1.0f / (1.0f + expf(-x))", "1.0 / (1.0 + exp(-x))"),
    Case("sqrt", _log_uniform(1e-30, 1e30), "sqrtf(x)", "sqrt(x)"),
    Case("rsqrt", _log_uniform(1e-30, 1e30), "1.0f / sqrtf(x)", "1.0 / sqrt(x)"),
    Case("cbrt", _log_uniform(1e-30, 1e30), "cbrtf(x)", "cbrt(x)"),
    Case("pow", _pow_inputs, "powf(x, z)", "pow(x, z)"),
    Case("atan2", _atan2_inputs, "atan2f(x, z)", "atan2(x, z)"),
    Case("fmod", _angle_wrap_inputs, "fmodf(x, z)", "fmod(x, z)"),
    Case("erf", _uniform(-4, 4), "erff(x)", "erf(x)"),
)


def _source(functions: list[tuple[Case, MathFunction]]) -> str:
    lines = ["#include <math.h>", "#include <stdint.h>", '#include "hlofuse_math.h"']
    for case, function in functions:
        t = "float" if function.dtype is DType.F32 else "double"
        libm = case.libm_f32 if function.dtype is DType.F32 else case.libm_f64
        args = "x[i]" if function.arity == 1 else "x[i], z[i]"
        call = f"{function.c_name}({args})"
        libm_call = re.sub(r"\b([xz])\b", r"\1[i]", libm)
        for kind, expr in (("hl", call), ("libm", libm_call)):
            lines.append(
                f"void {kind}_{function.c_name}(const {t} *restrict x, const {t} *restrict z, "
                f"{t} *restrict y, int64_t n) {{ for (int64_t i = 0; i < n; i++) y[i] = {expr}; }}")
    return "\n".join(lines) + "\n"


BLOCK = 1 << 16


def _best_time(fn: Callable[[int, int], None], n: int, repeats: int) -> float:
    """Sum over blocks of the block's best time; fn(start, count) runs one block."""
    fn(0, n)
    best = [float("inf")] * ((n + BLOCK - 1) // BLOCK)
    for _ in range(repeats):
        for b, start in enumerate(range(0, n, BLOCK)):
            count = min(BLOCK, n - start)
            t0 = time.perf_counter()
            fn(start, count)
            best[b] = min(best[b], time.perf_counter() - t0)
    return sum(best)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path("results/mathlib.json"))
    parser.add_argument("--functions", help="comma-separated names (default: all)")
    args = parser.parse_args()
    cc = list(Compiler.find().command)

    wanted = set(args.functions.split(",")) if args.functions else {c.name for c in CASES}
    functions = [(case, f) for case in CASES for f in mathlib.FUNCTIONS
                 if f.name == case.name and case.name in wanted]
    work = Path(tempfile.mkdtemp(prefix="hlofuse-mathbench-"))
    (work / "bench.c").write_text(_source(functions))
    subprocess.run([*cc, *CFLAGS, f"-I{mathlib.include_dir()}", str(work / "bench.c"),
                    "-o", str(work / "bench.so"), "-lm"], check=True)
    lib = ctypes.CDLL(str(work / "bench.so"))

    rng = np.random.default_rng(0)
    rows = []
    for case, function in functions:
        dtype = np.float32 if function.dtype is DType.F32 else np.float64
        inputs = [np.ascontiguousarray(a, dtype=dtype) for a in case.inputs(rng, args.n)]
        x, z = inputs[0], inputs[-1]
        y = np.empty_like(x)
        bases = [a.ctypes.data for a in (x, z, y)]
        size = x.itemsize
        times = {}
        outputs = {}
        for kind in ("hl", "libm"):
            fn = getattr(lib, f"{kind}_{function.c_name}")

            def run(start: int, count: int, fn: Callable[..., object] = fn, size: int = size,
                    bases: list[int] = bases) -> None:
                fn(*(ctypes.c_void_p(b + start * size) for b in bases), ctypes.c_int64(count))

            times[kind] = _best_time(run, args.n, args.repeats)
            outputs[kind] = y.copy()
        close = np.allclose(outputs["hl"], outputs["libm"], rtol=1e-5 if dtype is np.float32
                            else 1e-13, equal_nan=True)
        row = {
            "function": function.c_name,
            "dtype": function.dtype.text,
            "libm": case.libm_f32 if function.dtype is DType.F32 else case.libm_f64,
            "hlofuse_ns_per_element": times["hl"] / args.n * 1e9,
            "libm_ns_per_element": times["libm"] / args.n * 1e9,
            "speedup": times["libm"] / times["hl"],
            "results_agree": bool(close),
        }
        rows.append(row)
        print(f"{row['function']:18s} {row['dtype']}  hlofuse {row['hlofuse_ns_per_element']:6.2f}"
              f" ns  libm {row['libm_ns_per_element']:6.2f} ns  speedup {row['speedup']:5.2f}x"
              f"{'' if close else '  (results differ!)'}")

    compiler = subprocess.run([*cc, "--version"], capture_output=True, text=True).stdout
    report = {
        "benchmark": "hlofuse_math.h vs libm, y[i] = f(x[i]), one thread",
        "n": args.n,
        "repeats": args.repeats,
        "cflags": CFLAGS,
        "compiler": compiler.splitlines()[0] if compiler else " ".join(cc),
        "cpu": _cpu_model(),
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
