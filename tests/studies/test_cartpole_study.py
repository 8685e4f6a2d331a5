"""The CartPole study's driver on a tiny size: records, checks, JSON, plots and the command.

Nothing here asserts a timing; the figures only have to be there, positive and consistent.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hlofuse.cli import main
from hlofuse.studies import cartpole_study as study
from hlofuse.studies.cartpole_study import (
    Checker,
    StudyConfig,
    StudyStep,
    run_study,
    select_steps,
)

pytestmark = pytest.mark.needs_cc

TINY = ["--envs", "8,16", "--steps", "4", "--repeats", "1"]
KEYS = {"step", "variant", "strategy", "envs", "steps", "kernels_per_step", "bytes_per_step",
        "env_steps_per_s", "speedup_vs_baseline", "compile_s"}


def test_the_command_writes_every_record_and_both_plots(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["cartpole", *TINY, "--variants", "baseline,split-state,none",
                 "--strategies", "xla-no-merger", "--clock", "cpu", "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "env-steps per CPU-second" in out
    for name in ("baseline", "split-state", "none", "xla-no-merger"):
        assert name in out
    data = json.loads((tmp_path / "cartpole.json").read_text())
    records = data["records"]
    assert [(r["step"], r["envs"]) for r in records] == [
        (s, n) for s in ("baseline", "split-state", "none", "xla-no-merger") for n in (8, 16)]
    for r in records:
        assert KEYS <= r.keys()
        assert r["steps"] == 4 and 1 <= r["repeats"] <= study.MAX_REPEATS
        assert r["kernels_per_step"] > 0 and r["bytes_per_step"] > 0
        assert r["env_steps_per_s"] > 0 and r["compile_s"] > 0 and r["speedup_vs_baseline"] > 0
        assert r["env_steps_per_s"] == pytest.approx(r["envs"] * 4 / r["seconds"])
        assert r["env_steps_per_cpu_s"] == pytest.approx(r["envs"] * 4 / r["cpu_seconds"])
        assert r["cpu_speedup_vs_baseline"] > 0
        assert r["best_seconds"] <= r["seconds"]
        assert r["checked"] == (r["envs"] == 8)  # the smallest N is checked
    by_key = {(r["step"], r["envs"]): r for r in records}
    for n in (8, 16):
        base = by_key["baseline", n]
        assert base["speedup_vs_baseline"] == 1.0 and base["cpu_speedup_vs_baseline"] == 1.0
        assert base["variant"] == {"rng": "custom_call", "state": "packed", "rollout": "scan",
                                   "unroll": 1, "deterministic": False}
        for step in ("split-state", "none", "xla-no-merger"):
            r = by_key[step, n]
            assert r["speedup_vs_baseline"] == pytest.approx(
                r["env_steps_per_s"] / base["env_steps_per_s"])
            assert r["cpu_speedup_vs_baseline"] == pytest.approx(
                r["env_steps_per_cpu_s"] / base["env_steps_per_cpu_s"])
            # Every step draws the same random numbers: the same episodes end.
            assert (r["episodes"], r["return_sum"]) == (base["episodes"], base["return_sum"])
        # Without fusion every instruction is a kernel: more calls, more bytes per step.
        assert by_key["none", n]["kernels_per_step"] > base["kernels_per_step"]
        assert by_key["none", n]["bytes_per_step"] > base["bytes_per_step"]
    assert by_key["split-state", 8]["variant"]["state"] == "split"
    assert by_key["xla-no-merger", 8]["program"] == "baseline"
    assert data["machine"]["cores"] and data["machine"]["cc"]
    assert data["command"].startswith("hlofuse cartpole --envs 8,16 --steps 4 --repeats 1")
    assert "--strategies xla-no-merger" in data["command"]
    for plot in ("cartpole_speedup.png", "cartpole_rates.png"):
        assert (tmp_path / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_wrong_result_stops_the_study(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    real = Checker.reference

    def off_by_one_episode(self: Checker, *args: object) -> tuple[np.ndarray, int, float]:
        states, episodes, returns = real(self, *args)  # type: ignore[arg-type]
        return states, episodes + 1, returns

    monkeypatch.setattr(Checker, "reference", off_by_one_episode)
    code = main(["cartpole", "--envs", "8", "--steps", "4", "--repeats", "1",
                 "--variants", "baseline", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("error: step baseline (program baseline, strategy xla) at N=8, T=4: "
                          "the compiled rollout disagrees with the reference interpreter")
    assert not (tmp_path / "cartpole.json").exists()


def test_large_sizes_are_checked_at_a_small_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(study, "CHECK_MAX_ENVS", 4)
    monkeypatch.setattr(study, "CHECK_ENVS", 3)
    checked: list[tuple[str, int]] = []
    real = Checker.check

    def spy(self: Checker, step: StudyStep, built: study.Built, got: study.Outputs, *,
            n_envs: int, n_steps: int) -> None:
        checked.append((step.name, n_envs))
        real(self, step, built, got, n_envs=n_envs, n_steps=n_steps)

    monkeypatch.setattr(Checker, "check", spy)
    result = run_study(select_steps(["baseline"]), StudyConfig(envs=(16,), steps=3, repeats=1))
    assert checked == [("baseline", 3)]
    [record] = result.records
    assert record.envs == 16 and not record.checked and record.speedup_vs_baseline == 1.0


def test_step_selection() -> None:
    names = [s.name for s in select_steps()]
    assert names[:6] == ["baseline", "fused-rng", "relaxed-concat", "split-state", "unroll10",
                         "all"]
    assert "none" in names and "rewrites" not in names  # opt-in only
    # Speedups are over the baseline: it is always run, first.
    assert [s.name for s in select_steps(["unroll10"])] == ["baseline", "unroll10"]
    extra = select_steps(["baseline"], ["xla-no-horizontal", "xla"])
    assert [(s.name, s.program, s.strategy) for s in extra] == [
        ("baseline", "baseline", "xla"),
        ("xla-no-horizontal", "baseline", "xla-no-horizontal")]
    with pytest.raises(ValueError, match="unknown step 'fused'; known: baseline, fused-rng"):
        select_steps(["fused"])


def test_steps_with_unknown_strategies_are_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    later = StudyStep("later", "baseline", "no-such-strategy-yet", "a strategy to come")
    monkeypatch.setattr(study, "SEQUENCE", (*study.SEQUENCE, later))
    assert "later" not in [s.name for s in select_steps()]
    with pytest.raises(ValueError, match="needs strategy 'no-such-strategy-yet'"):
        select_steps(["later"])


@pytest.mark.parametrize("argv, message", [
    (["--variants", "bogus"], "error: --variants: unknown step 'bogus'"),
    (["--strategies", "xla+warp"], "error: --strategies: strategy 'xla+warp': unknown modifier"),
    (["--envs", "8,x"], "error: --envs: 'x' is not an integer"),
    (["--steps", "0"], "error: --steps: 0 is not positive"),
    (["--check", "--envs", "8,16"], "error: --envs: --check and --show-hlo take one N"),
])
def test_bad_options_are_one_error_line(argv: list[str], message: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cartpole", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_variants_list_names_every_step(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cartpole", "--variants", "list"]) == 0
    out = capsys.readouterr().out
    for step in study.SEQUENCE:
        assert step.name in out
    assert "not run by default" in out


def test_short_rollouts_are_timed_until_enough_time_has_passed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Instant:
        def run_flat(self, arrays: list[np.ndarray]) -> None:
            pass

    monkeypatch.setattr(study, "MIN_TIMED_S", 0.01)
    wall, cpu = study.time_rollouts(Instant(), np.zeros(2, np.uint32), 3)  # type: ignore[arg-type]
    assert len(wall) == len(cpu) and 3 <= len(wall) <= study.MAX_REPEATS
    assert len(wall) == study.MAX_REPEATS or sum(wall) >= 0.01
