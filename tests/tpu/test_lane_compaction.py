"""Rare values for the lanes that pick them only (targets/tpu/lane_compaction.py): the
slots' gather and spread on the MXU are exact for any 32-bit word, and a rollout whose
resets draw fresh values runs its draws on the slots, equal to the interpreter whether
the resetting lanes fit the slots or not (the block's form then)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import hlofuse.numpy as hnp
from hlofuse import lax, random
from hlofuse.api import compile_module, jit
from hlofuse.envs import cartpole
from hlofuse.ir.hlo import Module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.studies.cartpole_study import known_steps
from hlofuse.targets.tpu import TpuTarget, lane_compaction, whole_loop
from hlofuse.targets.tpu.lane_compaction import ROW_SLOTS, Compaction
from hlofuse.targets.tpu.whole_loop_held import compacted_elements


@pytest.mark.parametrize("rows", [8, 24, 128])
@pytest.mark.parametrize("rate", [0.0, 0.04, 0.3])
def test_slots_gather_the_wanting_lanes_and_spread_any_word_back(rows: int,
                                                                 rate: float) -> None:
    rng = np.random.default_rng(rows)
    wanted = (rng.random((rows, 128)) < rate).astype(np.int32)
    first = 3 * rows * 128
    compaction = Compaction(jnp.asarray(wanted), np.int32(first))
    counts = wanted.sum(axis=1)
    assert bool(compaction.fits) == bool(counts.max() <= ROW_SLOTS)
    if not compaction.fits:
        return
    lanes = np.asarray(compaction.lanes)
    assert lanes.shape == (rows // 8, 128)
    # Slot 16 r + s of a group holds its row r's (s+1)-th wanting lane.
    for row in range(rows):
        slots = lanes[row // 8, (row % 8) * ROW_SLOTS:(row % 8 + 1) * ROW_SLOTS]
        columns = np.flatnonzero(wanted[row])
        assert list(slots[:len(columns)]) == list(first + row * 128 + columns)
    # Words of every kind (NaN, infinities, subnormals, negative integers) come back bit
    # for bit at the wanting lanes, zero elsewhere.
    bits = rng.integers(0, 2**32, lanes.shape, dtype=np.uint64).astype(np.uint32)
    bits[0, :4] = [0x7FC00001, 0x7F800000, 0x00000001, 0xFFFFFFFF]
    floats = jnp.asarray(bits.view(np.float32))
    ints = jnp.asarray(lanes * -7)
    spread_floats, spread_ints = compaction.spread([floats, ints])
    lane_numbers = first + np.arange(rows * 128).reshape(rows, 128)
    want_bits = np.zeros((rows, 128), np.uint32)
    for row in range(rows):
        for k, column in enumerate(np.flatnonzero(wanted[row])):
            want_bits[row, column] = bits[row // 8, (row % 8) * ROW_SLOTS + k]
    assert np.array_equal(np.asarray(spread_floats).view(np.uint32), want_bits)
    assert np.array_equal(np.asarray(spread_ints), np.where(wanted != 0, lane_numbers * -7, 0))


def _resetting_walk(n: int, steps: int, rate: float) -> Module:
    """Lanes walk up by one a step and restart from a fresh draw at about `rate` a step (or
    when y leaves [-2, 2]): the draw (two values a lane) is the select's rarely picked
    operand."""

    def rollout(key: Any) -> Any:
        def step(carry: Any, t: Any) -> Any:
            x, y, restarts = carry
            k_done, k_fresh = random.split(random.fold_in(key, t))
            done = (random.uniform(k_done, (n,)) < rate) | (hnp.abs(y) > 2.0)
            fresh = random.uniform(k_fresh, (2, n), minval=-3.0, maxval=3.0)
            x = hnp.where(done, fresh[0], x + 1.0)
            y = hnp.where(done, fresh[1], y * 0.5)
            return (x, y, restarts + hnp.sum(done)), None

        start = (hnp.zeros((n,)), hnp.ones((n,)), hnp.zeros((), hnp.int32))
        (x, y, restarts), _ = lax.scan(step, start, hnp.arange(steps))
        return x, y, restarts

    return jit(rollout).lower(random.key(0)).module


def _both_forms(monkeypatch: pytest.MonkeyPatch, module: Module, compacted: int
                ) -> list[list[np.ndarray]]:
    """The module's results under max in interpret mode, with the rare values on the slots
    and for the whole block (compiled anew for each: programs are kept by module)."""
    monkeypatch.setattr(whole_loop, "BLOCK_ROWS", 8)
    results = []
    for enabled in (True, False):
        monkeypatch.setattr(lane_compaction, "ENABLED", enabled)
        TpuTarget._programs.clear()
        compiled = compile_module(module, "max", "tpu-interpret")
        lanes = [k.lanes for k in compiled.executable.kernel_plans  # type: ignore[union-attr]
                 if k.lanes is not None]
        assert len(lanes) == 1
        assert len(compacted_elements(lanes[0])) == (compacted if enabled else 0)
        assert ("picking lanes only" in lanes[0].describe()) == enabled
        results.append([np.asarray(v) for v in compiled.run_flat([random.key(0)])])
    TpuTarget._programs.clear()
    return results


@pytest.mark.parametrize("rate", [0.03, 0.5])
def test_draws_on_the_slots_equal_the_blocks_form_and_the_interpreter(
        monkeypatch: pytest.MonkeyPatch, rate: float) -> None:
    """Rare resets (they fit the slots: the draws run on them) and frequent ones (rows of
    128 with more than 16 resetting lanes: the block's form), over two blocks of 8 rows:
    bit for bit the block's form, and the interpreter's values (the uniform's scaling
    rounds apart in a few lanes in either form)."""
    module = _resetting_walk(2048, 10, rate)
    want = flatten_value(evaluate(module, [random.key(0)]))
    slots, block = _both_forms(monkeypatch, module, 2)
    for a, b, w in zip(slots, block, want):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
        np.testing.assert_allclose(a, np.asarray(w), rtol=1e-6, atol=1e-6)
    assert int(slots[2]) == int(want[2]) > 0


def test_cartpole_resets_run_on_the_slots_bit_for_bit(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    """The study's program under max: its four reset draws run on the slots, with the
    block's form's results."""
    module = cartpole.trace(known_steps()["max"].variant, 1100, 16, 0)
    slots, block = _both_forms(monkeypatch, module, 4)
    for a, b in zip(slots, block):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert int(slots[1]) > 0
