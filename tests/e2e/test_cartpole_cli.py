"""`hlofuse cartpole --check` (the variant table) and --show-hlo."""

from __future__ import annotations

import pytest

from hlofuse.cli import main
from hlofuse.envs import cartpole as cp
from hlofuse.ir.parser import parse_module
from hlofuse.ir.verifier import verify


def test_show_hlo_prints_a_verifiable_module(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cartpole", "--show-hlo", "split-state", "--envs", "3", "--steps", "4"]) == 0
    text = capsys.readouterr().out
    module = parse_module(text)
    verify(module)
    assert 'custom_call_target="hlofuse_threefry2x32"' in text
    assert module.result_shape.text(False) == "(f32[3,4], s32[], f32[])"


def test_show_hlo_accepts_specs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cartpole", "--show-hlo", "rng=fused,rollout=python,deterministic",
                 "--envs", "2"]) == 0
    text = capsys.readouterr().out
    assert "custom-call(" not in text and "while(" not in text


def test_bad_variant_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cartpole", "--show-hlo", "rng=mersenne"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: variant rng must be one of") and err.count("\n") == 1


@pytest.mark.thorough
def test_table_lists_every_variant_and_they_agree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cartpole", "--check", "--envs", "3", "--steps", "10"]) == 0
    out = capsys.readouterr().out
    for name in cp.all_variants():
        assert name in out
    assert "NO" not in out and out.count("yes") == len(cp.all_variants())
