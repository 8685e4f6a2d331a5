"""The calibration probe: parsing its output, the private atomic cache, no figures (so the
cost model's defaults) when it fails. The probe itself is replaced by a stub, except in one
test that compiles and runs it (needs_cc) and checks only that it reports every figure."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from hlofuse.toolchain.calibration import (
    CACHE_BYTES,
    FIGURES,
    RETRY_AFTER_S,
    ProbeError,
    last_level_cache_bytes,
    measure,
    parse_probe_output,
    read_cached,
    run_probe,
)

PROBE_OUTPUT = """threads 4
call_overhead 3.0e-09
parallel_overhead 2.0e-06
op_rate 5.0e+10
transcendental_ops 150
divide_ops 8
cache_bandwidth 8.0e+10
memory_bandwidth 6.0e+09
parallel_memory_bandwidth 1.2e+10
"""


def test_parse_probe_output() -> None:
    figures = parse_probe_output(PROBE_OUTPUT, cache_bytes=1 << 20)
    assert set(figures) == {*FIGURES, CACHE_BYTES}
    assert figures["threads"] == 4
    assert figures["op_rate"] == 5e10
    assert figures["transcendental_ops"] == 150.0
    assert figures["parallel_memory_bandwidth"] == 1.2e10
    assert figures[CACHE_BYTES] == 1 << 20
    assert CACHE_BYTES not in parse_probe_output(PROBE_OUTPUT, cache_bytes=None)


@pytest.mark.parametrize("text, message", [
    (PROBE_OUTPUT.replace("op_rate 5.0e+10\n", ""), "did not report op_rate"),
    (PROBE_OUTPUT.replace("divide_ops 8", "divide_ops fast"), "not a number"),
    (PROBE_OUTPUT.replace("parallel_overhead 2.0e-06", "parallel_overhead 0.02"),
     "implausible parallel_overhead"),
    (PROBE_OUTPUT.replace("threads 4", "threads 0"), "implausible threads"),
])
def test_bad_probe_output(text: str, message: str) -> None:
    with pytest.raises(ProbeError, match=message):
        parse_probe_output(text, cache_bytes=1 << 20)


def test_measure_caches_privately(tmp_path: Path) -> None:
    calls: list[Path] = []

    def probe(workdir: Path) -> str:
        calls.append(workdir)
        return PROBE_OUTPUT

    cache = tmp_path / "cache"
    first = measure(cache, probe)
    assert first is not None and first["threads"] == 4
    files = [p for p in cache.iterdir() if p.suffix == ".json"]
    assert len(files) == 1
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(files[0].stat().st_mode) & 0o077 == 0
    assert not calls[0].exists()  # the probe's scratch directory is removed

    def failing(workdir: Path) -> str:
        raise AssertionError("the cached figures must be used")

    assert measure(cache, failing) == first
    assert read_cached(files[0]) == first
    assert [p.name for p in cache.iterdir()] == [files[0].name]


def test_failed_probe_gives_no_figures_for_an_hour(tmp_path: Path) -> None:
    def broken(workdir: Path) -> str:
        raise ProbeError("no compiler")

    def not_again(workdir: Path) -> str:
        raise AssertionError("the probe failed a moment ago; it must not run again yet")

    assert measure(tmp_path, broken) is None
    assert measure(tmp_path, not_again) is None
    assert not list(tmp_path.glob("*.json"))
    (marker,) = tmp_path.glob("*.failed")
    assert marker.read_text() == "no compiler\n"
    hours_ago = time.time() - 2 * RETRY_AFTER_S
    os.utime(marker, (hours_ago, hours_ago))
    assert measure(tmp_path, lambda w: "threads 2\n") is None  # tried: implausible
    assert "did not report" in marker.read_text()
    os.utime(marker, (hours_ago, hours_ago))
    assert measure(tmp_path, lambda w: PROBE_OUTPUT) == parse_probe_output(
        PROBE_OUTPUT, last_level_cache_bytes())


def test_corrupt_cache_is_measured_again(tmp_path: Path) -> None:
    measure(tmp_path, lambda w: PROBE_OUTPUT)
    (entry,) = tmp_path.glob("*.json")
    entry.write_text("{not json")
    assert read_cached(entry) is None
    entry.write_text('{"threads": "four"}')
    assert read_cached(entry) is None
    again = measure(tmp_path, lambda w: PROBE_OUTPUT.replace("threads 4", "threads 3"))
    assert again is not None and again["threads"] == 3


def test_last_level_cache_from_sysfs(tmp_path: Path) -> None:
    for index, size in enumerate(("48K", "2048K", "32M")):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "size").write_text(size + "\n")
    assert last_level_cache_bytes(tmp_path) == 32 << 20
    assert last_level_cache_bytes(tmp_path / "missing") is None


@pytest.mark.needs_cc
def test_probe_reports_every_figure(tmp_path: Path) -> None:
    output = run_probe(tmp_path)
    names = {line.split()[0] for line in output.splitlines() if line.strip()}
    assert names == {"threads", "call_overhead", "parallel_overhead", "op_rate",
                     "transcendental_ops", "divide_ops", "cache_bandwidth", "memory_bandwidth",
                     "parallel_memory_bandwidth"}

