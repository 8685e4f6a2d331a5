"""The `hlofuse` command line: `run` and `fmt`, their outputs and their answers to bad input."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from hlofuse.cli import build_parser, main, random_inputs
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.reference.interpreter import evaluate, flatten_value

from tests.conftest import CORPUS, CORPUS_DIR, assert_matches, load_corpus_case

HLOFUSE = Path(sys.executable).parent / "hlofuse"
EXAMPLE = Path(__file__).parent.parent / "examples" / "mlp.hlo"

SCALAR_ROOT = """HloModule scalar
ENTRY main {
  x = f32[3]{0} parameter(0)
  zero = f32[] constant(0)
  ROOT total = f32[] reduce(x, zero), dimensions={0}, to_apply=add
}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""

BF16 = """HloModule bf
ENTRY main {
  p = bf16[3]{0} parameter(0)
  ROOT n = bf16[3]{0} negate(p)
}
"""


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(args)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _assert_one_error(status: int, out: str, err: str, starts: str) -> None:
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: {starts}"), err
    assert "Traceback" not in err


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
@pytest.mark.parametrize("name", ["argmax", "cond", "layer_norm"])
def test_run_with_inputs_writes_the_interpreter_outputs(
        name: str, backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, inputs, expected = load_corpus_case(name)
    out = tmp_path / "out.npz"
    status, stdout, _ = _run(["run", str(CORPUS_DIR / f"{name}.hlo"), "--inputs",
                              str(CORPUS_DIR / f"{name}.npz"), "--out", str(out),
                              "--backend", backend], capsys)
    assert status == 0
    written = np.load(out)
    assert written.files == [f"out{i}" for i in range(len(expected))]
    reference = flatten_value(evaluate(parse_module(text), inputs))
    # The interpreter is bit-exact with itself; compiled kernels sum in another order.
    if backend == "interpreter":
        for i, array in enumerate(reference):
            np.testing.assert_array_equal(written[f"out{i}"], array)
    else:
        assert_matches([written[k] for k in written.files], reference, name)
    for i, array in enumerate(reference):
        assert written[f"out{i}"].dtype == array.dtype
        assert f"out{i}" in stdout
    assert_matches([written[k] for k in written.files], expected, name)


def test_run_with_random_inputs_is_deterministic(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    module = parse_module(EXAMPLE.read_text())
    expected = flatten_value(evaluate(module, random_inputs(module, 7)))
    outs = []
    for attempt in range(2):
        out = tmp_path / f"out{attempt}.npz"
        status, stdout, _ = _run(["run", str(EXAMPLE), "--random-inputs", "7", "--out",
                                  str(out)], capsys)
        assert status == 0
        assert "float32" in stdout and "[8, 4]" in stdout
        outs.append(np.load(out))
    # The same inputs each time, so the same bits; the interpreter's within the tolerance of
    # the math library (tanh within 1.07 ulp, log and exp).
    for i in range(len(expected)):
        np.testing.assert_array_equal(outs[0][f"out{i}"], outs[1][f"out{i}"])
    assert_matches([outs[0][f"out{i}"] for i in range(len(expected))], expected, "run")
    other = flatten_value(evaluate(module, random_inputs(module, 8)))
    assert not np.array_equal(other[0], expected[0])


def test_array_root_gives_out0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "scalar.hlo"
    path.write_text(SCALAR_ROOT)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=np.array([1.5, 2.0, -0.25], np.float32))
    out = tmp_path / "out.npz"
    status, _, _ = _run(["run", str(path), "--inputs", str(inputs), "--out", str(out)], capsys)
    assert status == 0
    written = np.load(out)
    assert written.files == ["out0"]
    assert written["out0"].dtype == np.float32 and written["out0"].shape == ()
    assert float(written["out0"]) == 3.25


def test_bf16_inputs_and_outputs_travel_as_uint16_bits(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bf.hlo"
    path.write_text(BF16)
    values = np.array([1.0, -2.5, 0.1], ml_dtypes.bfloat16)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=values.view(np.uint16))
    out = tmp_path / "out.npz"
    status, _, _ = _run(["run", str(path), "--inputs", str(inputs), "--out", str(out)], capsys)
    assert status == 0
    written = np.load(out)["out0"]
    assert written.dtype == np.uint16
    np.testing.assert_array_equal(written.view(ml_dtypes.bfloat16), -values)


@pytest.mark.parametrize("name", CORPUS[:6] + ["cartpole_step", "elementwise_math"])
def test_fmt_output_parses_back_identical(name: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    source = CORPUS_DIR / f"{name}.hlo"
    status, printed, err = _run(["fmt", str(source)], capsys)
    assert status == 0 and err == ""
    assert printed == module_text(parse_module(source.read_text()))
    assert module_text(parse_module(printed)) == printed
    again = tmp_path / "again.hlo"
    again.write_text(printed)
    status, reprinted, _ = _run(["fmt", str(again)], capsys)
    assert status == 0 and reprinted == printed


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "absent.hlo"
    for command in (["run", str(path)], ["fmt", str(path)]):
        status, out, err = _run(command, capsys)
        _assert_one_error(status, out, err, f"{path}: no such file")


def test_directory_instead_of_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run(["fmt", str(tmp_path)], capsys)
    _assert_one_error(status, out, err, f"{tmp_path}: cannot read")


def test_missing_input_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg1=np.zeros(3, np.float32))
    status, out, err = _run(["run", str(EXAMPLE), "--inputs", str(inputs)], capsys)
    _assert_one_error(status, out, err, f"{inputs}: missing input 'arg0' for parameter 0 "
                      "(f32[8,10])")


@pytest.mark.parametrize("array, got", [
    (np.zeros((8, 11), np.float32), "float32[8, 11]"),
    (np.zeros((8, 10), np.float64), "float64[8, 10]"),
    (np.zeros((), np.float32), "float32[]"),
])
def test_wrong_input_shape_or_type(array: np.ndarray, got: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    module = parse_module(EXAMPLE.read_text())
    args = {f"arg{i}": a for i, a in enumerate(random_inputs(module, 0))}
    args["arg0"] = array
    inputs = tmp_path / "in.npz"
    np.savez(inputs, **args)
    status, out, err = _run(["run", str(EXAMPLE), "--inputs", str(inputs)], capsys)
    _assert_one_error(status, out, err, f"{EXAMPLE}: argument 0: expected f32[8,10], got {got}")


@pytest.mark.parametrize("content", [b"", b"not an archive at all", b"\x93NUMPY\x01\x00"])
def test_inputs_that_are_not_npz(content: bytes, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    inputs = tmp_path / "in.npz"
    inputs.write_bytes(content)
    status, out, err = _run(["run", str(EXAMPLE), "--inputs", str(inputs)], capsys)
    _assert_one_error(status, out, err, f"{inputs}: ")


def test_inputs_that_are_a_single_npy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = tmp_path / "in.npy"
    np.save(inputs, np.zeros((8, 10), np.float32))
    status, out, err = _run(["run", str(EXAMPLE), "--inputs", str(inputs)], capsys)
    _assert_one_error(status, out, err, f"{inputs}: not an .npz archive")


def test_missing_inputs_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs = tmp_path / "absent.npz"
    status, out, err = _run(["run", str(EXAMPLE), "--inputs", str(inputs)], capsys)
    _assert_one_error(status, out, err, f"{inputs}: no such file")


def test_unwritable_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "no" / "such" / "dir" / "out.npz"
    status = main(["run", str(EXAMPLE), "--out", str(out)])
    captured = capsys.readouterr()
    assert status == 2
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"error: {out}: cannot write")


def test_evaluation_failure_is_one_error_line(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cc.hlo"
    path.write_text('HloModule m\nENTRY main {\n  ROOT c = f32[] custom-call(), '
                    'custom_call_target="not_a_library_function"\n}\n')
    status, out, err = _run(["run", str(path), "--backend", "interpreter"], capsys)
    _assert_one_error(status, out, err, f"{path}: %c: no library function for custom-call "
                      "target 'not_a_library_function'")
    status, out, err = _run(["run", str(path)], capsys)
    _assert_one_error(status, out, err, f"{path}: cannot compile: m: %c: custom-call target "
                      "'not_a_library_function' has no library function")


@pytest.mark.needs_cc
def test_installed_command_runs_the_example(tmp_path: Path) -> None:
    out = tmp_path / "out.npz"
    result = subprocess.run([str(HLOFUSE), "run", str(EXAMPLE), "--random-inputs", "3", "--out",
                             str(out)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    module = parse_module(EXAMPLE.read_text())
    expected = flatten_value(evaluate(module, random_inputs(module, 3)))
    written = np.load(out)
    assert_matches([written[f"out{i}"] for i in range(len(expected))], expected, "installed")


@pytest.mark.thorough
def test_installed_command_reports_bad_input(tmp_path: Path) -> None:
    inputs = tmp_path / "in.npz"
    np.savez(inputs, arg0=np.zeros(1))
    result = subprocess.run([str(HLOFUSE), "run", str(EXAMPLE), "--inputs", str(inputs)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == f"error: {inputs}: missing input 'arg1' for parameter 1 (s32[8])\n"


def test_every_command_group_is_registered() -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert {"run", "fmt", "opt", "explain", "compile", "cache", "cartpole",
            "bench"} <= set(sub.choices)


@pytest.mark.thorough
def test_python_m_runs_the_same_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "hlofuse.cli", "fmt", str(EXAMPLE)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    status, out, _ = _run(["fmt", str(EXAMPLE)], capsys)
    assert status == 0 and result.stdout == out


def test_a_lower_layers_error_becomes_one_error_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """opt's pass list is parsed by the pass manager, which raises its own ValueError; the
    command line turns it into `error: ...` and exit status 2."""
    path = tmp_path / "m.hlo"
    path.write_text(SCALAR_ROOT)
    status, out, err = _run(["opt", str(path), "-p", "no-such-pass"], capsys)
    _assert_one_error(status, out, err, "")
    assert "no-such-pass" in err


def test_run_on_a_backend_that_cannot_run_here_names_why(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The target says why it cannot run before any pass: no C compiler for cpu."""
    from hlofuse.toolchain.compiler import _find_compiler

    monkeypatch.setenv("CC", "no-such-compiler-hlofuse")
    _find_compiler.cache_clear()
    try:
        assert main(["run", "tests/data/jax/cond.hlo", "--backend", "cpu",
                     "--strategy", "none"]) == 2
    finally:
        _find_compiler.cache_clear()
    err = capsys.readouterr().err
    assert "backend cpu: no C compiler found" in err and "Traceback" not in err
