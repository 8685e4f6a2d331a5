"""`hlofuse bench rollouts` at a tiny size: the JSON holds JAX's and each strategy's figures,
and the compiled rollout equals JAX's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hlofuse.studies.rollouts_bench import RolloutsConfig, run_rollouts, table_rows, write_json

CORPUS = Path(__file__).parent.parent / "data" / "rollouts"


@pytest.mark.needs_cc
def test_bench_rollouts_small(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    config = RolloutsConfig(lanes=8, steps=4, repeats=1, corpus=CORPUS, names=("catch",),
                            strategies=("xla", "max"))
    result = run_rollouts(config, progress=lambda line: None)
    runners = [m.runner for m in result.measurements]
    assert runners == ["jax", "xla", "max"]
    for m in result.measurements:
        assert m.env_steps_per_s > 0 and m.compile_s > 0, m
    for m in result.measurements[1:]:
        assert m.equal_to_jax is True and m.kernels_per_step is not None and m.note == ""
    write_json(result, tmp_path / "rollouts.json")
    data = json.loads((tmp_path / "rollouts.json").read_text())
    assert data["config"]["lanes"] == 8 and len(data["measurements"]) == 3
    assert set(data["geomean_speedup_over_jax"]) == {"xla", "max"}
    assert len(table_rows(result)) == 3


def test_unknown_program_is_named() -> None:
    pytest.importorskip("jax")
    config = RolloutsConfig(lanes=8, steps=4, corpus=CORPUS, names=("nope",))
    with pytest.raises(KeyError, match="no rollout named nope"):
        run_rollouts(config, progress=lambda line: None)


@pytest.mark.slow  # a subprocess that exports and compiles a rollout three times (~30 s)
@pytest.mark.needs_cc
def test_threads_option_limits_both_libraries(tmp_path: Path) -> None:
    """`--threads 1` in a fresh process: OpenMP and XLA's CPU client get one thread each, and
    the JSON records it."""
    import os
    import subprocess
    import sys

    pytest.importorskip("jax")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "XLA_FLAGS")}
    code = ("import os, sys; from hlofuse.cli import main; rc = main(sys.argv[1:]); "
            "print('OMP', os.environ['OMP_NUM_THREADS']); print('XLA', os.environ['XLA_FLAGS']);"
            " sys.exit(rc)")
    out = subprocess.run([sys.executable, "-c", code, "bench", "rollouts", "--threads", "1",
                          "--lanes", "8", "--steps", "3", "--repeats", "1", "--programs",
                          "catch", "--corpus", str(CORPUS), "--out", str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "OMP 1" in out.stdout
    assert "intra_op_parallelism_threads=1" in out.stdout
    assert "--xla_cpu_multi_thread_eigen=false" in out.stdout
    data = json.loads((tmp_path / "rollouts.json").read_text())
    assert data["config"]["threads"] == 1
