"""Times a log-sum-exp over a policy's action logits, [4096, k] -> [4096], with short rows
chunked (codegen/short_rows.py) and written out in the loop over rows (as before it), next to
NumPy's equivalent in the same run; writes docs/results/short_rows.json.

The program is `log(sum(exp(x), axis=1))` fused into one kernel (strategy `xla`). Both hlofuse
builds are the C target's: `chunked` with the default `KernelOptions`, `rows` with
`short_row_chunk=0` (the code of main before the change). Figures are nanoseconds per element
of x: the kernel's median call as the generated C times it (`profile`), and the median of
single calls of `np.log(np.exp(x, out=e).sum(axis=1))` into preallocated arrays. Results are
checked against the reference interpreter first. Threads: the kernels follow
$OMP_NUM_THREADS; set it to 1 (the one-thread figure is what the change is about). Run from
the repository root:

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/short_rows_bench.py [--samples 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from hlofuse.codegen.kernel_spec import KernelOptions
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c import compile_cpu
from hlofuse.targets.c.build import CompileOptions

ROWS = 4096
WIDTHS = (4, 5, 6, 7, 18)
SAMPLE_S = 0.02  # each profile runs the program this long, at least
CALLS = 20  # single calls timed per sample
BUILDS = {"chunked": KernelOptions(), "rows": KernelOptions(short_row_chunk=0)}


def program(width: int) -> str:
    return f"""HloModule row_logsumexp
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}}
ENTRY e {{
  x = f32[{ROWS},{width}] parameter(0)
  ex = f32[{ROWS},{width}] exponential(x)
  z = f32[] constant(0)
  s = f32[{ROWS}] reduce(ex, z), dimensions={{1}}, to_apply=add
  ROOT l = f32[{ROWS}] log(s)
}}
"""


def median_s(run: Callable[[], object], samples: int) -> float:
    """The median time of one call over `samples` x CALLS calls, each timed alone."""
    run()
    times = []
    for _ in range(samples * CALLS):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def kernel_s(executable: object, x: np.ndarray, samples: int) -> float:
    """The fusion's median call as the generated C times it, over `samples` profiles."""
    once = median_s(lambda: executable(x), 1)  # type: ignore[operator]
    repeat = max(1, min(200, int(SAMPLE_S / max(once, 1e-9))))
    medians = []
    for _ in range(samples):
        profile = executable.profile(x, repeat=repeat)  # type: ignore[attr-defined]
        medians.append(sum(r.median_s for r in profile.rows if r.kind != "copy" and r.calls))
    return statistics.median(medians)


def measure(width: int, samples: int, rng: np.random.Generator) -> dict[str, object]:
    x = rng.standard_normal((ROWS, width)).astype(np.float32)
    module = parse_module(program(width))
    expected = np.asarray(flatten_value(evaluate(module, [x]))[0])
    fused = run_strategy(module, "xla", debug=False).module
    elements = ROWS * width
    row: dict[str, object] = {"rows": ROWS, "k": width}
    for name, options in BUILDS.items():
        executable = compile_cpu(fused, CompileOptions(kernel=options))
        got = np.asarray(executable(x))
        np.testing.assert_allclose(got, expected, rtol=2e-6, atol=2e-6)
        row[f"{name}_ns_per_element"] = kernel_s(executable, x, samples) * 1e9 / elements
    e = np.empty_like(x)
    out = np.empty(ROWS, np.float32)

    def numpy_equivalent() -> None:
        np.log(np.exp(x, out=e).sum(axis=1), out=out)

    row["numpy_ns_per_element"] = median_s(numpy_equivalent, samples) * 1e9 / elements
    row["speedup"] = float(row["rows_ns_per_element"]) / float(  # type: ignore[arg-type]
        row["chunked_ns_per_element"])  # type: ignore[arg-type]
    return row


def main(samples: int, out: Path) -> int:
    rng = np.random.default_rng(0)
    threads = os.environ.get("OMP_NUM_THREADS")
    print(f"[{ROWS}, k] log-sum-exp, ns per element; OMP_NUM_THREADS={threads}; "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"{'k':>3} {'rows':>8} {'chunked':>8} {'numpy':>8} {'speedup':>8}")
    rows = []
    for width in WIDTHS:
        row = measure(width, samples, rng)
        rows.append(row)
        print(f"{width:>3} {row['rows_ns_per_element']:>8.2f} "
              f"{row['chunked_ns_per_element']:>8.2f} {row['numpy_ns_per_element']:>8.2f} "
              f"{row['speedup']:>8.2f}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "omp_num_threads": threads, "cpu_count": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0], "numpy": np.__version__,
        "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path("docs/results/short_rows.json"))
    args = parser.parse_args()
    raise SystemExit(main(args.samples, args.out))
