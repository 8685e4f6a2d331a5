"""Per-step reductions across the lanes inside a whole-loop kernel (analysis/step_reductions.py,
codegen/whole_loop_reductions.py): the [T] sums, means, extremes and counts over all lanes
that RL code logs at every step are computed by the lanes' blocks and combined after the
loop, equal to the reference interpreter; what is not such a reduction is refused by name."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import hlofuse
import hlofuse.numpy as hnp
from hlofuse import lax
from hlofuse import random as hrandom
from hlofuse.api import compile_module
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.passes.decision_log import DecisionRecord
from hlofuse.reference.interpreter import evaluate, flatten_value

pytestmark = pytest.mark.needs_cc

KEY = np.array([0, 7], np.uint32)


def _walkers(n: int, t: int, *, reverse: bool = False) -> Any:
    """Random walkers with auto-reset, logging per step: reward sum, mean, done count, the
    largest position, and the mean reward of the lanes that finished (two reductions)."""

    def rollout(key: Any, x0: Any) -> Any:
        def body(carry: Any, _: Any) -> Any:
            x, key = carry
            key, k = hrandom.split(key)
            x = x * 0.9 + hrandom.uniform(k, (n,))
            reward = hnp.sin(x)
            done = x > 2.5
            x = hnp.where(done, 0.0, x)
            finished = hnp.sum(hnp.where(done, reward, 0.0)) / hnp.maximum(
                hnp.sum(done.astype(np.float32)), 1.0)
            log = {"sum": hnp.sum(reward), "mean": hnp.mean(reward),
                   "dones": hnp.sum(done.astype(np.int32)), "highest": hnp.max(x),
                   "finished": finished}
            return (x, key), log

        return lax.scan(body, (x0, key), None, length=t, reverse=reverse)

    return rollout


def _module(fn: Any, *args: Any) -> Module:
    module: Module = hlofuse.jit(fn).lower(*args).module
    return module


def _whole_loop_records(module: Module) -> list[DecisionRecord]:
    fused = run_strategy(module, "max", debug=False)
    return [r for r in fused.decisions.records if r.pass_name == "whole-loop-fusion"]


def _time_loop_record(module: Module) -> DecisionRecord:
    found = [r for r in _whole_loop_records(module) if r.figures.get("step_reductions")]
    assert len(found) == 1, [r.message for r in _whole_loop_records(module)]
    return found[0]


def _assert_matches_interpreter(fn: Any, *args: Any, strategy: str = "max") -> None:
    module = _module(fn, *args)
    expected = flatten_value(evaluate(module, list(args)))
    actual = flatten_value(compile_module(module, strategy)(*args))
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        a = np.asarray(a)
        assert a.dtype == e.dtype and a.shape == e.shape, f"out{k}"
        if e.dtype.kind == "f":  # float sums are reassociated by blocks
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5, err_msg=f"out{k}")
        else:
            np.testing.assert_array_equal(a, e, err_msg=f"out{k}")


@pytest.mark.parametrize("n,t", [(64, 50), (37, 300), (1, 20), (5000, 12)])
def test_logged_statistics_match_the_interpreter(n: int, t: int) -> None:
    x0 = np.linspace(0, 2, n, dtype=np.float32)
    _assert_matches_interpreter(_walkers(n, t), KEY, x0)


def test_a_reversed_scan_writes_its_positions_backwards() -> None:
    x0 = np.linspace(0, 2, 40, dtype=np.float32)
    _assert_matches_interpreter(_walkers(40, 30, reverse=True), KEY, x0)


def test_the_plan_names_the_reduced_elements_and_keeps_the_lanes() -> None:
    x0 = np.zeros(64, np.float32)
    record = _time_loop_record(_module(_walkers(64, 100), KEY, x0))
    assert record.figures["lanes"] == 64  # the lanes, not the 100 steps of the stacked outputs
    assert record.figures["step_reductions"] == 5
    explained = hlofuse.jit(_walkers(64, 100), strategy="max").lower(KEY, x0).compile().explain()
    assert "reduced over the lanes per step" in str(explained)


def test_positions_no_step_writes_keep_their_initial_values() -> None:
    """A while loop logging into every other slot of a preallocated buffer of -1s."""

    def fn(x0: Any) -> Any:
        def cond(c: Any) -> Any:
            return c[0] < 10

        def body(c: Any) -> Any:
            i, x, log = c
            x = x * 1.5 - 0.25
            log = lax.dynamic_update_slice(log, hnp.reshape(hnp.sum(x), (1,)), [2 * i + 1])
            return i + 1, x, log

        return lax.while_loop(cond, body, (0, x0, hnp.full((25,), -1.0, np.float32)))

    x0 = np.linspace(-1, 1, 48, dtype=np.float32)
    _assert_matches_interpreter(fn, x0)
    record = _time_loop_record(_module(fn, x0))
    assert record.figures["step_reductions"] == 1


def test_results_do_not_change_from_run_to_run() -> None:
    x0 = np.linspace(0, 2, 4099, dtype=np.float32)
    compiled = compile_module(_module(_walkers(4099, 64), KEY, x0), "max")
    first = flatten_value(compiled(KEY, x0))
    second = flatten_value(compiled(KEY, x0))
    for a, b in zip(first, second):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_sum_across_lanes_that_feeds_the_state_is_refused_by_name() -> None:
    """Centring every lane on the lanes' mean needs all lanes each step: not one kernel."""

    def fn(key: Any, x0: Any) -> Any:
        def body(carry: Any, _: Any) -> Any:
            x, key = carry
            key, k = hrandom.split(key)
            x = x + hrandom.uniform(k, x.shape)
            total = hnp.sum(x)
            return (x - total / x.shape[0], key), total

        return lax.scan(body, (x0, key), None, length=100)

    x0 = np.zeros(256, np.float32)
    _assert_matches_interpreter(fn, KEY, x0)
    explained = hlofuse.jit(fn, strategy="max").lower(KEY, x0).compile().explain()
    assert "whole-loop-cross-lane-reduce" in str(explained)


def _particles(n: int, t: int) -> Any:
    """Particles in the plane, logging per step the mean position ([2] of f32), the largest
    speed along each axis, and each axis' count of particles past a wall ([2] of s32): the
    [T, 2] logs that a reduction over the lanes keeping the state's minor dimension gives."""

    def rollout(key: Any, p0: Any) -> Any:
        def body(carry: Any, _: Any) -> Any:
            p, v, key = carry
            key, k = hrandom.split(key)
            v = v * 0.95 + 0.1 * hrandom.normal(k, (n, 2))
            p = p + 0.1 * v
            out = hnp.abs(p) > 1.0
            p = hnp.where(out, 0.0, p)
            log = {"mean": hnp.mean(p, axis=0), "fastest": hnp.max(hnp.abs(v), axis=0),
                   "walls": hnp.sum(out.astype(np.int32), axis=0),
                   "spread": hnp.sum(p * p, axis=0) / n - hnp.mean(p, axis=0) ** 2}
            return (p, v, key), log

        return lax.scan(body, (p0, hnp.zeros_like(p0), key), None, length=t)

    return rollout


@pytest.mark.parametrize("n,t", [(64, 40), (37, 25), (1000, 7)])
def test_vector_statistics_across_the_lanes_match_the_interpreter(n: int, t: int) -> None:
    p0 = np.linspace(-0.5, 0.5, 2 * n, dtype=np.float32).reshape(n, 2)
    _assert_matches_interpreter(_particles(n, t), KEY, p0)
    record = _time_loop_record(_module(_particles(n, t), KEY, p0))
    assert record.figures["lanes"] == n
    assert record.figures["step_reductions"] == 4


def test_vector_statistics_run_in_the_cuda_emulation() -> None:
    p0 = np.linspace(-0.5, 0.5, 2 * 50, dtype=np.float32).reshape(50, 2)
    module = _module(_particles(50, 9), KEY, p0)
    expected = flatten_value(evaluate(module, [KEY, p0]))
    actual = flatten_value(compile_module(module, "max", backend="cuda-emulated")(KEY, p0))
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(np.asarray(a), e, rtol=1e-5, atol=1e-5)


def _random_policy(n: int, t: int) -> Any:
    """A random policy's rollout logging, per step, statistics of its draws alone (the mean
    action, the largest noise per component, a count of high draws) and keeping the number
    of draws below a threshold over the run: reductions over the lanes of values that do
    not depend on the state, each lane's draw made from the step's key and its number."""

    def rollout(key: Any, x0: Any) -> Any:
        def body(carry: Any, t: Any) -> Any:
            x, low = carry
            k = hrandom.fold_in(key, t)
            action = hrandom.bernoulli(k, 0.3, (n,)).astype(np.float32)
            noise = hrandom.normal(hrandom.fold_in(k, 1), (n, 3))
            x = x + action - 0.3 + noise[:, 0] * 0.01
            low = low + hnp.sum((noise[:, 1] < -1.0).astype(np.int32))
            log = {"mean_action": hnp.mean(action), "max_noise": hnp.max(noise, axis=0),
                   "high": hnp.sum(x > 1.0)}
            return (x, low), log

        return lax.scan(body, (x0, hnp.zeros((), hnp.int32)), hnp.arange(t))

    return rollout


@pytest.mark.parametrize("n,t", [(64, 30), (3000, 12)])
def test_statistics_of_draws_alone_are_reduced_by_the_lanes(n: int, t: int) -> None:
    """Computed as uniform code these needed every lane's draws again in each step, outside
    the lanes' blocks (10x slower at 32,768 lanes); now the lanes' blocks reduce them, as
    they do the state's, and the count over the run is an accumulator."""
    x0 = np.zeros(n, np.float32)
    _assert_matches_interpreter(_random_policy(n, t), KEY, x0)
    record = _time_loop_record(_module(_random_policy(n, t), KEY, x0))
    assert record.figures["step_reductions"] == 3
    assert "accumulated [" in record.message
