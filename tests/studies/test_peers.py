"""The CartPole peers: every available peer agrees with the references; the bench's outputs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hlofuse.cli import main
from hlofuse.studies.peers import workload as w
from hlofuse.studies.peers.bench import BenchConfig, run_bench, write_json, write_plot
from hlofuse.studies.peers.hlofuse_peer import hlofuse_peer
from hlofuse.studies.peers.numpy_peer import NumpyRunner
from hlofuse.studies.peers.registry import Peer, PeerRegistry, default_registry

REGISTRY = default_registry()
# hlofuse's rollout on the reference interpreter, in two program forms: the default slot's
# (the baseline program under `max`: RNG expansion, split state, whole-loop fusion), and the
# study's hand-rewritten one (fused RNG, split state, unroll 10) left unfused, which spares
# the fusion passes' seconds on the unrolled body.
HLOFUSE_INTERPRETED = [
    replace(hlofuse_peer("max", backend="interpreter"), name="hlofuse-max-interpreter"),
    replace(hlofuse_peer("none", backend="interpreter", preset="all"),
            name="hlofuse-all-none-interpreter"),
]
PEERS = [*(p for p in REGISTRY if p.is_default), *HLOFUSE_INTERPRETED]
# Gymnasium resets from its own generator one step late (its NEXT_STEP mode), by design.
OWN_RESET_SCHEME = {"gymnasium"}
# Cold torch.compile of the step takes minutes on 2 cores; opt in with `-m slow`.
SLOW_PEERS = {"torch-compile"}
# hlofuse compiling the random rollout takes 20 s even at this size; its own tests cover it.
SLOW_RANDOM_PEERS = SLOW_PEERS | {p.name for p in REGISTRY if p.is_hlofuse}
# XLA takes 10-20 s to compile the random rollout unrolled by 10; its step (and so its random
# numbers) is the one the unroll-1 peers run, and the deterministic test covers the unroll.
RANDOM_SKIPPED = OWN_RESET_SCHEME | {"jax-scan-packed-u10", "jax-scan-split-u10"}

DET_ENVS, DET_STEPS = 24, 60
RANDOM_ENVS, RANDOM_STEPS, SEED = 40, 50, 11


def peer_params(peers: list[Peer], slow: set[str] = SLOW_PEERS) -> list[object]:
    return [
        pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.name in slow else [])
        for p in peers
    ]


def runnable(peer: Peer, request: pytest.FixtureRequest) -> None:
    note = peer.availability()
    if note is not None:
        pytest.skip(note)
    is_slow = request.node.get_closest_marker("slow") is not None
    if is_slow and "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip(f"{peer.name} compiles for too long here; run with -m slow")


def test_threefry_known_answers() -> None:
    # Random123's known-answer vectors for Threefry-2x32-20.
    cases = [
        ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
        ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
        ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
    ]
    for key, counter, expected in cases:
        y = w.threefry2x32(key[0], key[1], np.uint32(counter[0]), np.uint32(counter[1]))
        assert (int(y[0]), int(y[1])) == expected


@pytest.mark.thorough
def test_scheme_is_jax_random() -> None:
    jax = pytest.importorskip("jax")
    n, seed, steps = 37, 5, 2
    init_key, steps_key = jax.random.split(jax.random.PRNGKey(seed))
    jax_init = np.asarray(jax.random.uniform(init_key, (4, n), minval=-0.05, maxval=0.05)).T
    # XLA fuses the uniform's multiply-add into an FMA: 1 ulp apart at most.
    np.testing.assert_allclose(w.initial_states(n, seed), jax_init, rtol=0, atol=1e-8)
    keys = w.step_keys(seed, steps)
    for t in range(steps):
        ka, kr = jax.random.split(jax.random.fold_in(steps_key, t))
        action, reset = w.draw_step(keys, t, n)
        np.testing.assert_array_equal(action, np.asarray(jax.random.bernoulli(ka, 0.5, (n,))))
        np.testing.assert_array_equal(
            w.random_bits((keys.reset0[t], keys.reset1[t]), np.arange(4 * n, dtype=np.uint32)),
            np.asarray(jax.random.bits(kr, (4, n))).ravel(),
        )
        jax_reset = jax.random.uniform(kr, (4, n), minval=-0.05, maxval=0.05)
        np.testing.assert_allclose(reset, np.asarray(jax_reset).T, rtol=0, atol=1e-8)


def test_reference_is_well_conditioned() -> None:
    # Float32 peers can only agree with the float64 reference if no policy decision or
    # termination test comes close to its boundary; the fixed states are chosen for that.
    workload = w.Workload(w.deterministic_initial_states(DET_ENVS), DET_STEPS, deterministic=True)
    reference = w.reference_rollout(workload)
    assert reference.margin > 5e-5
    assert reference.result.episodes > DET_ENVS  # resets happen, several per environment


@pytest.mark.thorough
@pytest.mark.parametrize("peer", peer_params(PEERS))
def test_deterministic_variant_matches_reference(
    peer: Peer, request: pytest.FixtureRequest
) -> None:
    runnable(peer, request)
    workload = w.Workload(w.deterministic_initial_states(DET_ENVS), DET_STEPS, deterministic=True)
    expected = w.reference_rollout(workload).result
    result = peer.factory(workload).run()
    assert result.states.shape == (DET_ENVS, 4)
    np.testing.assert_allclose(result.states, expected.states, rtol=1e-4, atol=1e-4)
    assert result.episodes == expected.episodes
    assert result.return_sum == expected.return_sum


@pytest.mark.thorough
@pytest.mark.parametrize(
    "peer", peer_params([p for p in PEERS if p.name not in RANDOM_SKIPPED], SLOW_RANDOM_PEERS)
)
def test_random_variant_matches_numpy(peer: Peer, request: pytest.FixtureRequest) -> None:
    runnable(peer, request)
    workload = w.Workload(w.initial_states(RANDOM_ENVS, SEED), RANDOM_STEPS, seed=SEED)
    expected = NumpyRunner(workload).run()
    result = peer.factory(workload).run()
    # Same random bits everywhere: only float32 rounding (FMA, sin/cos) can differ.
    assert expected.episodes > RANDOM_ENVS
    assert result.episodes == expected.episodes
    assert result.return_sum == expected.return_sum
    np.testing.assert_allclose(result.states, expected.states, rtol=1e-4, atol=1e-5)


def test_hlofuse_max_and_priority_run_by_default_on_the_baseline_program() -> None:
    hlofuse = [p for p in REGISTRY if p.is_hlofuse]
    if not hlofuse:
        pytest.skip(REGISTRY.notes[0])
    assert sorted(p.name for p in hlofuse if p.is_default) == ["hlofuse-max", "hlofuse-priority"]
    assert all("program preset 'baseline'" in p.description for p in hlofuse)


def test_random_actions_are_fair_coins() -> None:
    keys = w.step_keys(SEED, 200)
    actions = np.stack([w.draw_step(keys, t, 500)[0] for t in range(200)])
    assert abs(actions.mean() - 0.5) < 0.01  # 100000 draws: sd 0.0016
    resets = np.concatenate([w.draw_step(keys, t, 500)[1] for t in range(20)])
    assert resets.min() >= -0.05 and resets.max() < 0.05
    assert abs(resets.mean()) < 0.002


def test_gymnasium_random_variant_is_plausible(request: pytest.FixtureRequest) -> None:
    peer = REGISTRY["gymnasium"]
    runnable(peer, request)
    workload = w.Workload(w.initial_states(RANDOM_ENVS, SEED), RANDOM_STEPS, seed=SEED)
    result = peer.factory(workload).run()
    numpy_result = NumpyRunner(workload).run()
    assert np.isfinite(result.states).all()
    # Same policy bits, resets one step late: about as many episodes, a few fewer.
    assert 0.8 * numpy_result.episodes <= result.episodes <= numpy_result.episodes


@pytest.mark.needs_cc
def test_c_kernel_sincos_error() -> None:
    from hlofuse.studies.peers.c_peer import sincosf

    x = np.concatenate([
        np.linspace(-8192, 8192, 400_001, dtype=np.float32),
        np.linspace(-1, 1, 200_001, dtype=np.float32),
        (np.arange(-5000, 5000) * (np.pi / 2)).astype(np.float32),
        np.array([0.0, -0.0, 1e-30, -1e-30, 8192.0, -8192.0], dtype=np.float32),
    ])
    s, c = sincosf(x)
    for got, exact in ((s, np.sin(x.astype(np.float64))), (c, np.cos(x.astype(np.float64)))):
        error = np.abs(got.astype(np.float64) - exact)
        ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
        ulps = error / ulp
        assert error.max() < 1e-7
        assert ulps[np.abs(x) <= 1].max() <= 1.5
        assert ulps[np.abs(exact) > 1e-3].max() <= 1.6
    zero = np.array([0.0], dtype=np.float32)
    assert sincosf(zero) == (zero, np.ones(1, np.float32))


@pytest.mark.needs_cc
@pytest.mark.parametrize("name", ["c", "c-scalar"])
def test_c_kernel_handles_large_theta(name: str) -> None:
    # Initial |theta| beyond the inline sincos's range: those blocks use libm's sinf/cosf.
    init = w.deterministic_initial_states(20)
    init[3, 2] = 1.0e5
    init[17, 2] = -3.0e4
    workload = w.Workload(init, 30, deterministic=True)
    result = REGISTRY[name].factory(workload).run()
    expected = NumpyRunner(workload).run()
    np.testing.assert_allclose(result.states, expected.states, rtol=1e-4, atol=1e-4)
    assert result.episodes == expected.episodes


def test_rollouts_get_shorter_at_large_n() -> None:
    config = BenchConfig(steps=1000, eager_steps=100, max_work=1 << 22, max_eager_work=1 << 20,
                         min_steps=20)
    assert config.rollout_steps(False, 1024) == 1000
    assert config.rollout_steps(False, 16384) == 256
    assert config.rollout_steps(True, 1) == 100
    assert config.rollout_steps(True, 16384) == 64
    assert config.rollout_steps(False, 1 << 20) == 20  # never below min_steps
    assert replace(config, steps=10).rollout_steps(False, 1 << 20) == 10  # nor above --steps
    assert replace(config, max_work=0).rollout_steps(False, 1 << 20) == 1000


def tiny_config() -> BenchConfig:
    return BenchConfig(envs=(1, 5), steps=20, eager_steps=4, repeats=2, seed=3)


@pytest.mark.needs_cc
def test_bench_json_has_every_record(tmp_path: Path) -> None:
    selected = ["numpy", "c", "c-scalar"]
    labels: list[str] = []
    done: list[None] = []
    result = run_bench(REGISTRY, selected, tiny_config(), on_task=labels.append,
                       on_done=lambda: done.append(None))
    assert len(done) == len(selected) * 2 and len(labels) == len(selected) * 2
    write_json(result, tmp_path / "peers.json")
    write_plot(result, tmp_path / "peers.png")
    data = json.loads((tmp_path / "peers.json").read_text())
    assert (tmp_path / "peers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {(r["peer"], r["envs"]) for r in data["records"]} == {
        (p, n) for p in selected for n in (1, 5)
    }
    for record in data["records"]:
        for key in ("seconds", "env_steps_per_s", "ratio"):
            assert record[key] > 0, (record["peer"], key)
        assert record["compile_s"] >= 0
        assert record["steps"] == (4 if record["peer"] == "numpy" else 20)
        assert record["env_steps_per_s"] == pytest.approx(
            record["envs"] * record["steps"] / record["seconds"])
        assert record["reference"].startswith("c")
    for n in (1, 5):
        best = max(r["ratio"] for r in data["records"]
                   if r["envs"] == n and r["peer"] in ("c", "c-scalar"))
        assert best == pytest.approx(1.0)
    # The same workload in every peer: the C kernels agree on what happened.
    by_peer = {(r["peer"], r["envs"]): r for r in data["records"]}
    for n in (1, 5):
        assert by_peer["c", n]["episodes"] == by_peer["c-scalar", n]["episodes"]
    machine = data["machine"]
    assert machine["cores"] >= 1 and machine["cpu"] and machine["versions"]["numpy"]


def test_ratios_prefer_hlofuse_peers() -> None:
    from hlofuse.studies.peers.bench import Measurement, with_ratios

    registry = PeerRegistry()
    registry.register_peer(Peer("c", "", NumpyRunner))
    registry.register_peer(Peer("hlofuse-x", "", NumpyRunner, is_hlofuse=True))

    def record(peer: str, rate: float) -> Measurement:
        return Measurement(peer, 8, 10, 1, 80 / rate, rate, 0.0, 0, 0.0)

    rows = with_ratios([record("c", 400.0), record("hlofuse-x", 100.0)], registry)
    assert {r.peer: r.ratio for r in rows} == {"c": 4.0, "hlofuse-x": 1.0}
    assert {r.reference for r in rows} == {"hlofuse-x"}
    # Without hlofuse the fastest C kernel is the reference; without either, there is none.
    rows = with_ratios([record("c", 400.0), record("numpy", 100.0)], registry)
    assert {r.peer: r.ratio for r in rows} == {"c": 1.0, "numpy": 0.25}
    assert [r.ratio for r in with_ratios([record("numpy", 100.0)], registry)] == [None]


@pytest.mark.needs_cc
def test_cli_bench_peers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results"
    status = main(["bench", "peers", "--envs", "3", "--steps", "10", "--eager-steps", "3",
                   "--repeats", "1", "--peers", "numpy,c", "--out", str(out)])
    assert status == 0
    data = json.loads((out / "peers.json").read_text())
    assert [r["peer"] for r in data["records"]] == ["numpy", "c"]
    assert (out / "peers.png").exists()
    assert "env-steps/s" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--envs", "0"], "--envs: 0 is not positive"),
        (["--envs", "4,x"], "--envs: 'x' is not an integer"),
        (["--peers", "nope"], "--peers: unknown peer 'nope'"),
        (["--repeats", "0"], "--repeats: 0 is not positive"),
        (["--max-work", "-1"], "--max-work: -1 is negative"),
    ],
)
def test_cli_bench_peers_bad_input(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "peers", *args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert not (tmp_path / "peers.json").exists()


def test_missing_peer_is_skipped_with_a_note() -> None:
    registry = PeerRegistry()
    registry.register_peer(Peer("numpy", "", NumpyRunner, is_eager=True))
    registry.register_peer(Peer("absent", "", NumpyRunner,
                                availability=lambda: "absent is not installed"))
    done: list[None] = []
    result = run_bench(registry, ["absent", "numpy"], tiny_config(),
                       on_done=lambda: done.append(None))
    assert [(s.peer, s.note) for s in result.skipped] == [("absent", "absent is not installed")]
    assert {r.peer for r in result.records} == {"numpy"} and len(done) == 4
