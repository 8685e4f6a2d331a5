"""`hlofuse compare-xla`: the report, --json, and bad input (no extra, XLA's own errors)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hlofuse.cli import main
from hlofuse.compare_xla import oracle
from hlofuse.compare_xla.compare import Namer, input_name
from hlofuse.ir.parser import parse_module
from hlofuse.ir.verifier import verify
from hlofuse.reference.interpreter import evaluate

DATA = Path(__file__).parents[1] / "data" / "xla_gpu"
BEFORE = DATA / "pendulum_rollout.before.hlo"
OPTIMISED = DATA / "pendulum_rollout.h100.hlo"


def test_report_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare-xla", str(BEFORE), "--xla-hlo", str(OPTIMISED)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("XLA (GPU compiler, h100) vs xla-gpu+device=h100: kernel count same")
    assert "per iteration of loop %while.7: XLA 4 kernels, xla-gpu 4 kernels" in out
    assert "copies from copy insertion: XLA 4, xla-gpu 4" in out
    assert "= input_add_clamp_reduce_fusion " in out  # XLA's name on both sides


# pendulum_rollout through xla-gpu again, for another device (seconds): thorough, not make fast.
@pytest.mark.thorough
def test_json_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare-xla", str(BEFORE), "--xla-hlo", str(OPTIMISED), "--device", "a100",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["device"] == "a100" and report["strategy"] == "xla-gpu+device=a100"
    assert report["xla"]["kernels_per_iteration"] == {"while.7": 4}
    assert report["xla"]["copy_insertion_copies"] == 4
    assert {"same_count", "same_grouping", "first_difference"} <= set(report)


def test_without_the_extra_names_it_and_exits_2(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(oracle, "missing_packages", lambda: ["jax_cuda12_plugin"])
    assert main(["compare-xla", str(BEFORE)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "'xla-gpu'" in err and "Traceback" not in err


def test_xla_failure_is_reported_with_xlas_message(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    def fail(path: object, device: str) -> oracle.OracleResult:
        raise oracle.XlaCompileError("NOT_FOUND: No registered implementation for custom call "
                                     "to nope for platform CUDA")

    monkeypatch.setattr("hlofuse.cli.compare_xla.compile_file", fail)
    assert main(["compare-xla", str(BEFORE)]) == 2
    err = capsys.readouterr().err
    assert "XLA could not compile" in err and "NOT_FOUND: No registered implementation" in err
    assert "Traceback" not in err


def test_missing_file_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare-xla", "no/such/file.hlo"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_prepare_for_xla_inlines_calls_and_drops_shardy_attributes() -> None:
    text = """
HloModule m
f {
  a = f32[4] parameter(0)
  ROOT n = f32[4] negate(a)
}
ENTRY e {
  x = f32[4] parameter(0), frontend_attributes={xla.sdy.sharding="#sdy.sharding<@mesh, [{}]>"}
  ROOT c = f32[4] call(x), to_apply=f
}
"""
    prepared = oracle.prepare_for_xla(text)
    assert "call(" not in prepared and "sdy" not in prepared and "negate(" in prepared
    verify(parse_module(prepared))


def test_names_resolve_through_xlas_suffixes() -> None:
    known = frozenset({"add.3", "constant.4", "reduce_sum.7", "sin.1"})
    assert input_name("add.3.0", known) == "add.3"
    assert input_name("add.3.17", known) == "add.3"
    assert input_name("constant_4_1", known) == "constant.4"
    assert input_name("reduce_sum.7.1.clone.1", known) == "reduce_sum.7"
    assert input_name("loop_add_fusion", known) is None



_INPUT = """HloModule m
ENTRY e {
  p = f32[8,1] parameter(0)
  mul.22 = f32[8,1] multiply(p, p), metadata={op_name="mul" stack_frame_id=21}
  ROOT mul.55 = f32[8,1] multiply(mul.22, p), metadata={op_name="vmap()/mul" stack_frame_id=76}
}
"""


def _with(name: str, text: str, shape: str = "f32[8,1]") -> str:
    return (f"HloModule o\nENTRY e {{\n  p = {shape} parameter(0)\n"
            f"  ROOT {name} = {text}\n}}\n")


def test_a_new_instruction_under_an_input_name_is_not_that_instruction() -> None:
    """A pass's new instruction takes a free name, which may be an input instruction's name
    (xla-gpu's reshape mover names its multiply `mul.55`, XLA's `mul.1`): its metadata tells
    them apart, so it is no member on either side; a clone keeps the metadata and its origin."""
    namer = Namer(parse_module(_INPUT))
    new = parse_module(_with("mul.55", 'f32[8] multiply(p, p), '
                                       'metadata={op_name="mul" stack_frame_id=21}', "f32[8]"))
    assert namer.resolve(new.entry.root) is None
    clone = parse_module(_with("mul.55.3.clone", 'f32[8,1] multiply(p, p), metadata='
                                                 '{op_name="vmap()/mul" stack_frame_id=76}'))
    assert namer.resolve(clone.entry.root) == "mul.55"
    bare = parse_module(_with("mul.22.0", "f32[8,1] multiply(p, p)"))
    assert namer.resolve(bare.entry.root) == "mul.22"

@pytest.mark.thorough
def test_every_stored_xla_output_parses_and_verifies() -> None:
    files = sorted(DATA.glob("*.hlo"))
    assert len(files) >= 2 * 33
    for path in files:
        verify(parse_module(path.read_text(), filename=path.name))


def test_xlas_type_changing_bitcast_reinterprets_the_bits() -> None:
    module = parse_module("""
HloModule m
ENTRY e {
  x = f32[2] parameter(0)
  ROOT b = u32[2] bitcast(x)
}
""")
    verify(module)
    out = np.asarray(evaluate(module, [np.array([1.0, -2.0], np.float32)]))
    assert out.dtype == np.uint32 and out.tolist() == [0x3F800000, 0xC0000000]
