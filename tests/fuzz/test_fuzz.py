"""The fuzz corpus (every failure the fuzzer found, shrunk, with JAX's outputs) and a small
fixed range of seeds, on the interpreter and every named strategy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.fuzz.compile_facts import ONE_KERNEL
from tests.fuzz.harness import (
    CORPUS_DIR,
    TARGETS,
    Rule,
    classify,
    compare_output,
    load_case,
    run_target,
    unsupported_opcodes,
)
from tests.fuzz.program import Generator, Step, Value, random_array
from tests.fuzz.rollout import LANE_COUNTS, RolloutGenerator

CASES = sorted(p for p in CORPUS_DIR.iterdir() if (p / "meta.json").exists()) \
    if CORPUS_DIR.is_dir() else []
# Seeds run by `make test` (the corpus holds every failure; `make fuzz` runs hundreds more).
SEEDS = range(4)


def _check(case_results: dict[str, tuple[str, str]], allowed: dict[str, str]) -> None:
    problems = {t: r for t, r in case_results.items()
                if r[0] not in ("equal", "unsupported") and allowed.get(t) != r[0]}
    assert not problems, "\n".join(f"{t}: {c}: {m[:400]}" for t, (c, m) in problems.items())


@pytest.mark.needs_cc
@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_corpus_case(path: Path) -> None:
    case, meta = load_case(path)
    unsupported = unsupported_opcodes()
    # An entry still open (a bug outside this area, reported) names the targets it fails on.
    open_targets: dict[str, str] = meta.get("open", {})
    results = {t: classify(run_target(case.text, case.inputs, t), case, unsupported)
               for t in TARGETS}
    _check(results, open_targets)
    still_failing = [t for t, c in open_targets.items() if results[t][0] == c]
    if still_failing:
        pytest.xfail(f"open: {', '.join(still_failing)} ({meta.get('reason', '')})")


@pytest.mark.needs_cc
def test_fuzz_seeds(tmp_path: Path) -> None:
    """A few fixed seeds through `python -m tests.fuzz` (its own process: XLA's flags for the
    oracle must be set before JAX starts, and a crash or a hang is counted, not fatal)."""
    pytest.importorskip("jax")
    out = tmp_path / "fuzz.json"
    done = subprocess.run(
        [sys.executable, "-m", "tests.fuzz", "--n", str(len(SEEDS)), "--seed", str(SEEDS[0]),
         "--no-save", "--out", str(out)], cwd=Path(__file__).parents[2], capture_output=True,
        text=True, timeout=600, check=False)
    record = json.loads(out.read_text())
    assert record["programs"] == len(SEEDS), done.stdout + done.stderr
    for target, counts in record["per_target"].items():
        assert set(counts) <= {"equal", "unsupported"}, (target, counts, done.stdout)


def _fuzz(tmp_path: Path, *args: str) -> tuple[dict[str, Any], str]:
    """`python -m tests.fuzz ARGS --no-save` in its own process: its JSON record and output."""
    out = tmp_path / "fuzz.json"
    done = subprocess.run(
        [sys.executable, "-m", "tests.fuzz", *args, "--no-save", "--out", str(out)],
        cwd=Path(__file__).parents[2], capture_output=True, text=True, timeout=1200,
        check=False)
    return json.loads(out.read_text()), done.stdout + done.stderr


# Rollout-shaped seeds `make test` runs (a large constant-trip substep loop under an MLP
# policy over 257 lanes; a loop halving a lane value to zero and one bounded by the lane's
# episode step, 33 lanes); `-m slow` runs ROLLOUT_SLOW_SEEDS too.
ROLLOUT_SEEDS = (26, 9)
ROLLOUT_SLOW_SEEDS = range(40)


def _check_rollout_record(record: dict[str, Any], n: int, output: str) -> None:
    assert record["mode"] == "rollout" and record["programs"] == n, output
    for target, counts in record["per_target"].items():
        assert set(counts) <= {"equal", "unsupported"}, (target, counts, output)
    for target in ("interpreter", "none", "xla", "priority", "max"):
        assert sum(record["per_target"][target].values()) == n, (target, output)
    verdicts = record["time_loop_under_max"]
    assert sum(verdicts.values()) == n, verdicts  # one verdict per program
    for verdict in verdicts:
        assert all(v == ONE_KERNEL or v.startswith("whole-loop-") for v in verdict.split(", "))


@pytest.mark.needs_cc
@pytest.mark.parametrize("seed", ROLLOUT_SEEDS)
def test_fuzz_rollout_seeds(tmp_path: Path, seed: int) -> None:
    """Rollout-shaped programs under every strategy `hlofuse bench rollouts` compares, against
    the interpreter and JAX; `max`'s verdict on each time loop is recorded."""
    pytest.importorskip("jax")
    record, output = _fuzz(tmp_path, "--mode", "rollout", "--n", "1", "--seed", str(seed))
    _check_rollout_record(record, 1, output)


@pytest.mark.needs_cc
@pytest.mark.slow
def test_fuzz_rollout_seeds_slow(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    n = len(ROLLOUT_SLOW_SEEDS)
    record, output = _fuzz(tmp_path, "--mode", "rollout", "--n", str(n), "--seed",
                           str(ROLLOUT_SLOW_SEEDS[0]))
    _check_rollout_record(record, n, output)


def _all_steps(steps: list[Step]) -> list[Step]:
    out = []
    for step in steps:
        out.append(step)
        for block in step.blocks:
            out.extend(_all_steps(block.steps))
    return out


def test_rollout_generator_makes_what_it_promises() -> None:
    """Over a few dozen seeds: every lane count, both time loops, per-step logs across the
    lanes, MLPs with shared weights, random draws, and each kind of nested loop (constant
    trip counts small and large, bounded by a uniform or a per-lane value, halving)."""
    lanes, loops, ops, trips, limits = set(), set(), set(), [], set()
    for seed in range(60):
        program = RolloutGenerator(seed).program()
        (time_loop,) = program.steps
        assert time_loop.op == "time_loop"
        loops.add(time_loop.params["kind"])
        lanes.add(time_loop.out.shape[0])
        (body,) = time_loop.blocks
        assert any(s.op == "lane_map" for s in body.steps)
        assert any(s.op == "reduce" and s.params["axes"] == (0,) for s in body.steps)
        for step in _all_steps(program.steps):
            ops.add(step.op)
            if step.op == "fori":
                trips.append(step.params["trips"])
            if step.op == "while":
                limits.add(step.params["max_trips"])
        stacked = time_loop.extra_outs[len(time_loop.args) - 1:]  # the logs, over the steps
        assert len(stacked) >= 2
        assert all(v.shape[0] == time_loop.params["length"] for v in stacked)
    assert lanes >= {1, 200, 257, 300} and any(n % 2 and n > 1 for n in lanes)
    assert lanes <= set(LANE_COUNTS)
    assert loops == {"scan", "fori"}
    assert {"lane_map", "dot", "tanh", "random", "while", "halving_while", "fori"} <= ops
    assert min(trips) <= 8 and max(trips) >= 100
    assert len(limits) > 3


def test_rollout_generator_is_deterministic() -> None:
    a, b = RolloutGenerator(3).program(), RolloutGenerator(3).program()
    assert a.ops() == b.ops() and a.outputs == b.outputs
    for x, y in zip(a.input_data, b.input_data, strict=True):
        assert x.tobytes() == y.tobytes()


def test_generator_is_deterministic() -> None:
    a, b = Generator(7).program(), Generator(7).program()
    assert a.ops() == b.ops() and a.outputs == b.outputs
    for x, y in zip(a.input_data, b.input_data, strict=True):
        assert x.tobytes() == y.tobytes()


def test_special_values_appear() -> None:
    rng = np.random.default_rng(0)
    x = random_array(rng, Value("float32", (4000,)))
    bits = x.view(np.uint32)
    assert np.isnan(x).any() and np.isinf(x).any()
    assert ((bits == 0x80000000) | (bits == 0)).any()  # zeros of either sign
    assert ((bits & 0x7F800000) == 0).any() and (bits & 0x807FFFFF != 0).any()  # denormals
    assert (np.isnan(x) & (bits >> 31 == 1)).any()  # a NaN with its sign bit set
    i = random_array(rng, Value("int8", (400,)))
    assert {-128, 127, 0, -1} <= set(i.tolist())


def test_comparison_rules() -> None:
    nan, neg_nan = np.float32(np.nan), np.array(0xFFC00000, np.uint32).view(np.float32)
    exact = Rule("float32", (2,), inexact=False, nan_bits=False)
    assert compare_output(np.array([nan, 1], np.float32), np.array([neg_nan, 1], np.float32),
                          exact) is None
    bits = Rule("float32", (2,), inexact=False, nan_bits=True)
    assert compare_output(np.array([nan, 1], np.float32), np.array([neg_nan, 1], np.float32),
                          bits) is not None
    assert compare_output(np.array([1, np.nextafter(np.float32(1), 2)], np.float32),
                          np.array([1, 1], np.float32), exact) is not None
    loose = Rule("float32", (2,), inexact=True, nan_bits=False)
    assert compare_output(np.array([1, np.nextafter(np.float32(1), 2)], np.float32),
                          np.array([1, 1], np.float32), loose) is None
    assert compare_output(np.array([1, np.inf], np.float32), np.array([1, 3e38], np.float32),
                          loose) is not None
    # XLA's approximations return a tiny argument unchanged where hlofuse computes from the
    # zero DAZ reads: below the smallest normal, an approximated value equals zero.
    denormal = np.array([0x00000010], np.uint32).view(np.float32)
    assert compare_output(np.float32([0.0]), denormal, Rule("float32", (1,), True, False)) is None
    assert compare_output(np.float32([0.0]), denormal,
                          Rule("float32", (1,), False, False)) is not None
    assert compare_output(np.float32([1.2e-38]), denormal,
                          Rule("float32", (1,), True, False)) is not None  # a normal number
    f16_denormal = np.array([0x0010], np.uint16).view(np.float16)
    assert compare_output(np.float16([0.0]), f16_denormal,
                          Rule("float16", (1,), True, False)) is not None  # normal in f32
    ints = Rule("int32", (1,), False, True)
    assert compare_output(np.array([1], np.int32), np.array([2], np.int32), ints) is not None


def test_unsupported_opcodes_come_from_the_readme() -> None:
    listed = unsupported_opcodes()
    from hlofuse.ir.ops import UNSUPPORTED_XLA_OPCODES
    from hlofuse.reference.interpreter import UNSUPPORTED_OPS

    # Every opcode the parser or the interpreter refuses is listed (parameter is no
    # computation); the README also lists those the compiled backend refuses.
    refused = {op.text for op in UNSUPPORTED_OPS if op.text != "parameter"}
    assert refused | set(UNSUPPORTED_XLA_OPCODES) <= listed
