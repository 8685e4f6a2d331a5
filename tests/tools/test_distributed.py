"""Rollouts on a local Ray cluster (started here with 2 CPUs): shards gathered in order, equal
to the same shards run in one process, equal to one unsharded run where environments are
independent, retried on another actor when an actor dies, never returned partial."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from hlofuse import distributed
from hlofuse.api import compile_module
from hlofuse.distributed import DistributedError, RayNotInstalledError, rollout, rollout_local
from hlofuse.envs import cartpole

try:
    import ray
except ImportError:  # the 'distributed' extra is not installed
    ray = None

needs_ray = pytest.mark.skipif(ray is None, reason="Ray is not installed (extra 'distributed')")
# Each test starts Ray actors (seconds each): make test, not make fast. Ray starts its processes
# with fork + exec, which JAX (loaded by other tests) warns about; the exec makes it safe.
pytestmark = [pytest.mark.needs_cc, pytest.mark.thorough,
              pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")]

BASELINE = functools.partial(cartpole.scan_rollout, cartpole.PRESETS["baseline"])
DETERMINISTIC = functools.partial(cartpole.scan_rollout, cartpole.PRESETS["deterministic"])
N, T = 48, 12


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    assert ray is not None
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        distributed.shutdown()
        ray.shutdown()


def _same(a: Any, b: Any) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)


@needs_ray
def test_shards_equal_the_single_process_run_whatever_the_workers(cluster: None) -> None:
    local = rollout_local(BASELINE, N, T, shards=3, seed=5)
    for workers in (1, 2):
        run = rollout(BASELINE, N, T, workers=workers, shards=3, seed=5)
        assert run.shard_envs == [16, 16, 16]
        assert [r.index for r in run.results] == [0, 1, 2]
        for got, want in zip(run.shards, local.shards):
            _same(got, want)
    states, finished, return_sum = run.concatenated()
    assert states.shape == (N, 4) and finished.shape == (3,) and return_sum.shape == (3,)
    # Two actors really ran shards.
    assert len({r.worker_pid for r in rollout(BASELINE, N, T, workers=2).results}) == 2


@needs_ray
def test_independent_environments_equal_one_unsharded_run(cluster: None) -> None:
    init = cartpole.initial_states(N, seed=3)
    run = rollout(DETERMINISTIC, N, 40, workers=2, shards=4, inputs=init)
    states, finished, return_sum = run.concatenated()
    whole = cartpole.rollout(cartpole.PRESETS["deterministic"], N, 40, init=init,
                             backend="cpu")
    np.testing.assert_array_equal(states, whole.states)
    assert int(finished.sum()) == whole.finished
    assert float(return_sum.sum()) == pytest.approx(whole.return_sum)


@needs_ray
def test_a_compiled_program_runs_per_shard_from_the_cache(cluster: None) -> None:
    compiled = compile_module(cartpole.trace(cartpole.PRESETS["baseline"], N // 2, T), "xla",
                              "cpu")
    run = rollout(compiled, N, T, workers=2)
    _same(run.shards[0], rollout_local(compiled, N, T, shards=2).shards[0])
    # The program was compiled here first: fresh actors load it from the on-disk cache.
    distributed.shutdown()
    again = rollout(compiled, N, T, workers=2)
    assert all(r.cache_hit for r in again.results)
    with pytest.raises(ValueError, match="multiple of shards"):
        rollout(compiled, N + 1, T, workers=2)


@needs_ray
def test_a_dead_actor_s_shard_runs_again_on_another(cluster: None) -> None:
    want = rollout_local(BASELINE, N, T, shards=2, seed=1)
    run = rollout(BASELINE, N, T, workers=2, seed=1, _crash_first_attempt=frozenset({1}))
    for got, expected in zip(run.shards, want.shards):
        _same(got, expected)


@needs_ray
def test_no_partial_result_when_retries_run_out(cluster: None) -> None:
    with pytest.raises(DistributedError, match=r"shard 0 \(24 environments\).*died 1 times"):
        rollout(BASELINE, N, T, workers=2, max_retries=0,
                _crash_first_attempt=frozenset({0}))
    # The pool recovers: the next rollout is complete.
    assert len(rollout(BASELINE, N, T, workers=2).shards) == 2


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="shards must be an integer from 1 to n_envs"):
        rollout_local(BASELINE, 4, T, shards=5)
    with pytest.raises(ValueError, match=r"inputs must have n_envs \(4\) rows"):
        rollout_local(DETERMINISTIC, 4, T, inputs=np.zeros((3, 4), np.float32))
    with pytest.raises(TypeError, match="needs a builder"):
        rollout_local(42, 4, T)


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(RayNotInstalledError, match=r"hlofuse\[distributed\]"):
        rollout(BASELINE, 4, 2, workers=2)


@needs_ray
def test_cartpole_command_times_rollouts_on_ray(cluster: None, tmp_path: Any) -> None:
    from hlofuse.cli import main

    assert main(["cartpole", "--envs", "32", "--steps", "5", "--repeats", "1",
                 "--variants", "baseline", "--ray", "local:2", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "cartpole.json").read_text())
    assert "--ray local:2" in data["command"]
    assert [r["workers"] for r in data["records"]] == [2]
    assert data["records"][0]["checked"]


def test_cartpole_ray_option_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from hlofuse.cli import main

    assert main(["cartpole", "--envs", "1", "--ray", "local:2"]) == 2
    assert "2 workers need at least 2 environments" in capsys.readouterr().err
    assert main(["cartpole", "--ray", "local:x"]) == 2
    assert "local:K needs a positive number" in capsys.readouterr().err
