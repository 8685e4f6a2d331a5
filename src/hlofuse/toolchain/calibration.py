"""Measuring this machine's speeds for the cost model: a short C probe, cached on disk.

The probe is a fixed C program (nothing from any module goes into it), compiled with the
flags kernels get (`cc -O3 -march=native -fopenmp ...`) and run once; it times, each as the
best of a few repetitions:

- the call of a tiny non-inlined kernel (the per-kernel overhead without OpenMP), and of the
  same kernel with an OpenMP parallel loop (the fork/join on top of it);
- a chain of cheap float operations on cache-resident data (cheap operations per second), and
  `expf`, `sinf` and divisions on the same data (their cost in cheap operations);
- streaming over arrays larger than the last-level cache with one thread and with all
  threads (memory bandwidth), and over arrays that fit in L2 (cache bandwidth).

Compiling and running take under a second on a quiet machine (each measurement stops after
50 ms, so about two on a busy one). The result is cached as JSON under the cache directory
(`$HLOFUSE_CACHE_DIR`, else `~/.cache/hlofuse`: private, written atomically), keyed by the
host signature the compiled-kernel cache uses, so it is measured once per machine. When there
is no compiler, the probe fails, or its figures are implausible (on a machine so busy that a
fork/join waits milliseconds for a core), `measure` answers None (the cost model then uses its
documented defaults), and the probe is tried again after an hour. Tests never depend on this:
they pass constants explicitly.

The figures are plain numbers keyed by name (`FIGURES`, plus `cache_bytes` when the system
tells it): the toolchain knows nothing of the cost model. The layer above turns them into
the cost model's constants (`fusion.cost_model.constants_from_figures`, in
`compile_cache.strategy_constants`) and passes those to the strategy explicitly
(`run_strategy(..., constants=)`), so fusion never runs a compiler.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from hlofuse.toolchain.cache import CacheError, ensure_cache_dir
from hlofuse.toolchain.compiler import Compiler, ToolchainError, host_signature

# 2: the cache holds the probe's figures, no longer the cost model's constants.
PROBE_VERSION = 2
PROBE_TIMEOUT_S = 30
# After a failed or implausible probe (no compiler; a machine so busy that a fork/join takes
# milliseconds), no figures are reported, and the probe is not run again for this long.
RETRY_AFTER_S = 3600.0
# The kernels' flags, minus what only a shared object needs.
PROBE_FLAGS = ("-O3", "-march=native", "-fopenmp", "-ffp-contract=off", "-fno-math-errno",
               "-std=gnu11")

PROBE_SOURCE = r"""
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef void (*kernel_fn)(const float *restrict, float *restrict, int64_t);

__attribute__((noinline)) static void k_small(const float *restrict a, float *restrict b,
                                              int64_t n) {
  for (int64_t i = 0; i < n; ++i) b[i] = a[i] + 1.0f;
}

__attribute__((noinline)) static void k_parallel(const float *restrict a, float *restrict b,
                                                 int64_t n) {
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) b[i] = a[i] + 1.0f;
  }
}

/* 16 cheap operations per element (no FMA contraction: -ffp-contract=off). */
__attribute__((noinline)) static void k_cheap(const float *restrict a, float *restrict b,
                                              int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float x = a[i];
    x = x * 0.999f + 0.001f; x = x * 0.999f + 0.001f; x = x * 0.999f + 0.001f;
    x = x * 0.999f + 0.001f; x = x * 0.999f + 0.001f; x = x * 0.999f + 0.001f;
    x = x * 0.999f + 0.001f; x = x * 0.999f + 0.001f;
    b[i] = x;
  }
}

__attribute__((noinline)) static void k_exp(const float *restrict a, float *restrict b,
                                            int64_t n) {
  for (int64_t i = 0; i < n; ++i) b[i] = expf(a[i]);
}

__attribute__((noinline)) static void k_sin(const float *restrict a, float *restrict b,
                                            int64_t n) {
  for (int64_t i = 0; i < n; ++i) b[i] = sinf(a[i]);
}

/* 4 divisions per element. */
__attribute__((noinline)) static void k_div(const float *restrict a, float *restrict b,
                                            int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float x = a[i];
    x = 1.5f / x; x = 1.5f / x; x = 1.5f / x; x = 1.5f / x;
    b[i] = x;
  }
}

__attribute__((noinline)) static void k_stream(const float *restrict a, float *restrict b,
                                               int64_t n) {
  for (int64_t i = 0; i < n; ++i) b[i] = a[i] * 1.5f;
}

__attribute__((noinline)) static void k_stream_parallel(const float *restrict a,
                                                        float *restrict b, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) b[i] = a[i] * 1.5f;
}

/* Seconds per call: the best of up to `reps` runs (50 ms in all), each of batches of `batch`
   calls until `calls` calls or 10 ms, so a busy machine (threads waiting for a core) cannot
   stretch the probe. */
static double best(kernel_fn volatile f, const float *a, float *b, int64_t n, int calls,
                   int batch, int reps) {
  double t_best = 1e30, start = now();
  for (int r = 0; r < reps && now() - start < 0.05; ++r) {
    double t0 = now(), t = 0.0;
    int c = 0;
    while (c < calls) {
      for (int k = 0; k < batch; ++k) f(a, b, n);
      c += batch;
      t = now() - t0;
      if (t > 0.01) break;
    }
    if (t / c < t_best) t_best = t / c;
  }
  return t_best;
}

/* Seconds of the fastest single call among up to `calls` (50 ms in all): on a busy machine
   most fork/joins wait for a core, the fastest shows what the fork/join itself costs. */
static double fastest(kernel_fn volatile f, const float *a, float *b, int64_t n, int calls) {
  double t_best = 1e30, start = now();
  for (int c = 0; c < calls && now() - start < 0.05; ++c) {
    double t0 = now();
    f(a, b, n);
    double t = now() - t0;
    if (t < t_best) t_best = t;
  }
  return t_best;
}

int main(void) {
  const int64_t small_n = 4096;           /* 16 KiB: L1-resident */
  const int64_t cache_n = 16384;          /* 64 KiB per array: L2-resident */
  const int64_t big_n = 12 * 1024 * 1024; /* 48 MiB per array: beyond the last-level cache */
  float *a = aligned_alloc(64, big_n * sizeof(float));
  float *b = aligned_alloc(64, big_n * sizeof(float));
  if (!a || !b) return 1;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < big_n; ++i) { a[i] = 0.5f + (float)(i % 7) * 0.1f; b[i] = 0.0f; }

  int threads = omp_get_max_threads();
  double call = best(k_small, a, b, 16, 100000, 256, 5);
  k_parallel(a, b, 64); /* start the thread pool */
  double parallel = fastest(k_parallel, a, b, 64, 2000);
  double cheap = best(k_cheap, a, b, small_n, 1000, 4, 5) / (small_n * 16.0);
  double ex = best(k_exp, a, b, small_n, 200, 1, 5) / small_n;
  double sn = best(k_sin, a, b, small_n, 200, 1, 5) / small_n;
  double dv = best(k_div, a, b, small_n, 300, 2, 5) / (small_n * 4.0);
  double cache = best(k_stream, a, b, cache_n, 2000, 8, 5);
  double mem = best(k_stream, a, b, big_n, 1, 1, 3);
  double mem_parallel = best(k_stream_parallel, a, b, big_n, 1, 1, 3);
  double bytes_cache = 2.0 * cache_n * sizeof(float), bytes_big = 2.0 * big_n * sizeof(float);
  printf("threads %d\n", threads);
  printf("call_overhead %.6e\n", call);
  printf("parallel_overhead %.6e\n", parallel - call);
  printf("op_rate %.6e\n", 1.0 / cheap);
  printf("transcendental_ops %.6e\n", 0.5 * (ex + sn) / cheap);
  printf("divide_ops %.6e\n", dv / cheap);
  printf("cache_bandwidth %.6e\n", bytes_cache / cache);
  printf("memory_bandwidth %.6e\n", bytes_big / mem);
  printf("parallel_memory_bandwidth %.6e\n", bytes_big / mem_parallel);
  volatile float sink = b[7];
  (void)sink;
  free(a);
  free(b);
  return 0;
}
"""

# Each measured figure must fall in this range to be believed (a loaded or odd machine can
# give nonsense; the defaults are better than nonsense).
_PLAUSIBLE: dict[str, tuple[float, float]] = {
    "threads": (1, 4096),
    "call_overhead": (1e-10, 1e-5),
    "parallel_overhead": (0.0, 1e-3),
    "op_rate": (1e7, 1e12),
    "transcendental_ops": (1.0, 1e3),
    "divide_ops": (0.5, 1e2),
    "cache_bandwidth": (1e8, 1e13),
    "memory_bandwidth": (1e7, 1e12),
    "parallel_memory_bandwidth": (1e7, 1e13),
}


FIGURES = tuple(_PLAUSIBLE)
CACHE_BYTES = "cache_bytes"


class ProbeError(RuntimeError):
    """The probe could not be compiled or run, or printed something unexpected."""


def parse_probe_output(text: str, cache_bytes: int | None) -> dict[str, float]:
    """The figures from the probe's `name value` lines, with `cache_bytes` when known;
    ProbeError names a bad or missing one."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        name, _, raw = line.partition(" ")
        if name in _PLAUSIBLE:
            try:
                values[name] = float(raw)
            except ValueError:
                raise ProbeError(f"probe printed {name} = {raw!r}, not a number") from None
    for name, (low, high) in _PLAUSIBLE.items():
        if name not in values:
            raise ProbeError(f"probe did not report {name}")
        value = values[name]
        if not math.isfinite(value) or not low <= value <= high:
            raise ProbeError(f"probe measured an implausible {name} = {value:g}")
    if cache_bytes is not None:
        values[CACHE_BYTES] = float(cache_bytes)
    return values


def last_level_cache_bytes(sysfs: Path = Path("/sys/devices/system/cpu/cpu0/cache")
                           ) -> int | None:
    """The largest cache of CPU 0 (Linux sysfs), None when the system does not say."""
    sizes = []
    for entry in sorted(sysfs.glob("index*/size")) if sysfs.is_dir() else ():
        text = entry.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=None)


def run_probe(workdir: Path, compiler: tuple[str, ...] | None = None) -> str:
    """Compile and run the probe in `workdir`; returns what it printed."""
    command = compiler or _compiler()
    source = workdir / "probe.c"
    binary = workdir / "probe"
    source.write_text(PROBE_SOURCE)
    try:
        built = subprocess.run([*command, *PROBE_FLAGS, str(source), "-o", str(binary), "-lm"],
                               capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        if built.returncode != 0:
            raise ProbeError(f"compiling the probe failed: {built.stderr.strip()[:500]}")
        ran = subprocess.run([str(binary)], capture_output=True, text=True,
                             timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ProbeError(f"cannot run the probe: {e}") from None
    if ran.returncode != 0:
        raise ProbeError(f"the probe exited with status {ran.returncode}")
    return ran.stdout


def _compiler() -> tuple[str, ...]:
    try:
        return Compiler.find().command
    except ToolchainError as e:
        raise ProbeError(str(e)) from None


def _cache_file(cache_dir: Path) -> Path:
    return cache_dir / f"cost-constants-v{PROBE_VERSION}-{host_signature()}.json"


def read_cached(path: Path) -> dict[str, float] | None:
    """The figures stored at `path`, or None if absent or unreadable (then re-measured)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not set(FIGURES) <= set(data) <= {*FIGURES, CACHE_BYTES}:
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in data.values()):
        return None
    return {name: float(value) for name, value in data.items()}


def write_cached(path: Path, figures: dict[str, float]) -> None:
    """Atomically: a private temporary file in the same directory, renamed into place."""
    write_text_atomically(path, json.dumps(figures, indent=1))


def measure(cache_dir: Path | None = None,
            probe: Callable[[Path], str] = run_probe) -> dict[str, float] | None:
    """This machine's figures: from the cache, else measured (and cached), else None (the
    probe cannot run, or failed less than `RETRY_AFTER_S` ago)."""
    try:
        directory = ensure_cache_dir(cache_dir)
    except (CacheError, OSError):
        return _probe_uncached(probe)
    path = _cache_file(directory)
    cached = read_cached(path)
    if cached is not None:
        return cached
    failed = path.with_suffix(".failed")
    if _age(failed) < RETRY_AFTER_S:
        return None
    try:
        workdir = Path(tempfile.mkdtemp(prefix="tmp-probe-", dir=directory))
    except OSError:  # a read-only or full cache: measure without keeping the figures
        return _probe_uncached(probe)
    try:
        figures = parse_probe_output(probe(workdir), last_level_cache_bytes())
    except ProbeError as e:
        _note_failure(failed, str(e))
        return None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    try:
        write_cached(path, figures)
    except OSError:
        pass  # measured but not kept: the next process measures again
    return figures


def _age(path: Path) -> float:
    """Seconds since `path` was written (infinite when it does not exist)."""
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return math.inf


def _note_failure(path: Path, reason: str) -> None:
    try:
        write_text_atomically(path, reason + "\n")
    except OSError:
        pass


def write_text_atomically(path: Path, text: str) -> None:
    fd, name = tempfile.mkstemp(prefix="tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(name, path)
    except BaseException:
        if os.path.exists(name):
            os.unlink(name)
        raise


def _probe_uncached(probe: Callable[[Path], str]) -> dict[str, float] | None:
    workdir = Path(tempfile.mkdtemp(prefix="hlofuse-probe-"))
    try:
        return parse_probe_output(probe(workdir), last_level_cache_bytes())
    except ProbeError:
        return None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@functools.cache
def measured_figures() -> dict[str, float] | None:
    """`measure()` once per process (the cache directory is read from the environment once)."""
    return measure()
