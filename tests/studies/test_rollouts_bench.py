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
