"""The executable: argument checks, outputs, buffer reuse, profiles, the source it came from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse.cli import main
from hlofuse.ir.parser import parse_module
from hlofuse.targets.c import compile_cpu
from hlofuse.targets.c import generate_c as generate

# Modules of FileCheck files (tests/filecheck/codegen-c/), whose CHECK lines test their C.
CODEGEN_C = Path(__file__).parents[1] / "filecheck" / "codegen-c"
CHAIN = (CODEGEN_C / "kernels-per-strategy.hlo").read_text()
LOOP = (CODEGEN_C / "driver-while-loop.hlo").read_text()


@pytest.fixture(scope="module")
def chain():  # type: ignore[no-untyped-def]
    return compile_cpu(parse_module(CHAIN))


@pytest.mark.needs_cc
def test_arguments_are_checked(chain) -> None:  # type: ignore[no-untyped-def]
    x = np.linspace(-1, 1, 1024, dtype=np.float32)
    with pytest.raises(TypeError, match="takes 1 argument"):
        chain()
    with pytest.raises(TypeError, match=r"argument 0: expected f32\[1024\], got float64\[1024\]"):
        chain(x.astype(np.float64))
    with pytest.raises(TypeError, match=r"expected f32\[1024\], got float32\[2, 512\]"):
        chain(x.reshape(2, 512))
    with pytest.raises(ValueError, match="expected a C-contiguous array of f32"):
        chain(np.linspace(-1, 1, 2048, dtype=np.float32)[::2])
    with pytest.raises(TypeError, match="expected a NumPy array"):
        chain([0.0] * 1024)
    expected = np.cos(np.sin(np.square(x - np.exp(x)) - np.exp(x)))
    np.testing.assert_allclose(chain(x), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.needs_cc
def test_temporaries_share_the_arena(chain) -> None:  # type: ignore[no-untyped-def]
    # Six 4 KiB temporaries in a chain: at most a few are live at once.
    assert len(chain.kernels) == 7
    assert 0 < chain.peak_bytes <= 3 * 4096


@pytest.mark.needs_cc
def test_profile_reports_every_kernel(chain) -> None:  # type: ignore[no-untyped-def]
    x = np.ones(1024, np.float32)
    for runner in ("driver", "thunks"):
        profile = chain.profile(x, repeat=3, runner=runner)
        assert profile.runs == 3 and profile.wall_s > 0
        assert [r.name for r in profile.rows] == ["a", "b", "c", "d", "e", "f", "g"]
        for row in profile.rows:
            assert row.calls == 3
            assert row.total_s > 0 and 0 < row.median_s <= row.total_s
            assert row.bytes_written == 3 * 4096
            assert row.bytes_read == 3 * 4096 * (2 if row.name in ("c", "e") else 1)
            assert 0 < row.share < 1
        assert sum(r.share for r in profile.rows) <= 1.0 + 1e-9
        assert "median us" in profile.table() and "exponential" not in profile.table()
    with pytest.raises(ValueError, match="runner"):
        chain.profile(x, runner="gpu")


@pytest.mark.needs_cc
def test_while_loop_runs_in_c_and_returns_nested_outputs() -> None:
    executable = compile_cpu(parse_module(LOOP))
    x = np.linspace(0.5, 1.5, 64, dtype=np.float32)
    expected = x.copy()
    for _ in range(25):
        expected = (expected * expected * np.float32(0.5)).astype(np.float32)
    result = executable(x)
    assert isinstance(result, tuple) and len(result) == 3 and result[2] is None
    r, (count, state), _ = result
    assert int(count) == 25
    np.testing.assert_allclose(r, expected, rtol=1e-6)
    np.testing.assert_array_equal(r, state)
    assert r is not state  # one buffer at two output positions is copied
    profile = executable.profile(x)
    by_name = {row.name: row for row in profile.rows}
    assert by_name["body.z"].calls == 25 and by_name["cond.lt"].calls == 26
    assert not [row for row in profile.rows if row.name == "copy (while-back)"]


@pytest.mark.needs_cc
def test_scalar_arguments_may_be_python_numbers() -> None:
    module = parse_module("""HloModule scalars
ENTRY main {
  a = f32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] convert(b)
  ROOT d = f32[] add(a, c)
}
""")
    assert compile_cpu(module)(1.5, 2) == np.float32(3.5)


@pytest.mark.needs_cc
def test_compile_command_emits_hlo_and_names_a_bad_strategy(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "chain.hlo"
    path.write_text(CHAIN)
    # The C it prints is checked by tests/filecheck/codegen-c/kernels-per-strategy.hlo.
    assert main(["compile", str(path), "--strategy", "xla", "--emit", "hlo"]) == 0
    fused = capsys.readouterr().out
    assert "fusion(" in fused and "kind=kLoop" in fused
    assert main(["compile", str(path), "--strategy", "nonsense"]) == 2
    assert "unknown strategy" in capsys.readouterr().err


SWAP = (CODEGEN_C / "driver-conditional.hlo").read_text()


@pytest.mark.needs_cc
def test_loop_state_that_swaps_places_and_branches_inside_loops() -> None:
    from hlofuse.reference.interpreter import evaluate, flatten_value

    module = parse_module(SWAP)
    a = np.array([1, 2, 3], np.float32)
    b = np.array([10, 20, 30], np.float32)
    expected = flatten_value(evaluate(module, [a, b]))
    executable = compile_cpu(module)
    for run in (executable, executable.run_thunks):
        actual = flatten_value(run(a, b))
        for x, e in zip(actual, expected):
            np.testing.assert_array_equal(x, e)
    np.testing.assert_array_equal(a, [1, 2, 3])  # inputs are never written


def _module_of(n: int, small: int = 0) -> str:
    """sin(x) + x over f32[n], and, where `small`, the same over f32[small] besides."""
    extra = (f"  y = f32[{small}] parameter(1)\n  t = f32[{small}] sine(y)\n"
             f"  b = f32[{small}] add(t, y)\n") if small else ""
    root = "  ROOT r = (f32[{n}], f32[{small}]) tuple(a, b)\n" if small else ""
    return (f"HloModule m\nENTRY e {{\n  x = f32[{n}] parameter(0)\n  s = f32[{n}] sine(x)\n"
            f"  {'' if small else 'ROOT '}a = f32[{n}] add(s, x)\n{extra}"
            + root.format(n=n, small=small) + "}")


def test_the_combiner_is_off_only_for_small_kernels() -> None:
    """gcc's combiner is switched off (SMALL_MODULE_FLAGS) for small (-O1) kernels only: for a
    module of them, or for their own translation unit in a module with -O3 kernels too, once
    their code is large enough to pay for the second unit; -O3 kernels lose run time with it,
    and flags a user chose are kept as they are."""
    from hlofuse.targets.c import CompileOptions
    from hlofuse.targets.c import build as executable
    from hlofuse.targets.c.build import SMALL_MODULE_FLAGS, compile_units
    from hlofuse.toolchain.compiler import DEFAULT_FLAGS, Compiler, Unit

    gcc = Compiler(("cc",), "cc (Debian 12.2.0-14) 12.2.0")
    small = generate(parse_module(_module_of(256)))
    large = generate(parse_module(_module_of(4096)))
    mixed = generate(parse_module(_module_of(4096, small=4)))
    assert compile_units(small, DEFAULT_FLAGS, gcc) == (Unit(small.source.text,
                                                             SMALL_MODULE_FLAGS),)
    assert compile_units(large, DEFAULT_FLAGS, gcc) == (Unit(large.source.text),)
    assert large.source.split is None and mixed.source.split is not None
    # The small kernels' code of `mixed` is far under the limit: one unit.
    assert 0 < mixed.source.small_code_bytes < executable.SPLIT_MIN_SMALL_BYTES
    assert compile_units(mixed, DEFAULT_FLAGS, gcc) == (Unit(mixed.source.text),)
    clang = Compiler(("clang",), "Debian clang version 16.0.6")
    assert compile_units(small, DEFAULT_FLAGS, clang) == (Unit(small.source.text),)
    mine = ("-O2", "-fPIC", "-shared")
    assert compile_units(generate(parse_module(_module_of(256)), CompileOptions(flags=mine)),
                         mine, gcc) == (Unit(generate(parse_module(_module_of(256))).source.text),)


@pytest.mark.needs_cc
def test_small_kernels_in_their_own_unit_run_as_in_one(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """A module with -O3 and small kernels, built as two translation units (the small kernels
    without the combiner, called by the driver across units), computes what the
    interpreter does, and its cache entry keeps both sources."""
    from hlofuse.reference.interpreter import evaluate, flatten_value
    from hlofuse.targets.c import build as executable
    from hlofuse.toolchain.compiler import Compiler

    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(executable, "SPLIT_MIN_SMALL_BYTES", 0)
    module = parse_module(_module_of(4096, small=4))
    generated = generate(module)
    units = executable.compile_units(generated, executable.DEFAULT_FLAGS)
    if "gcc" not in Compiler.find().version.lower() and len(units) == 1:
        pytest.skip("the split is for gcc")
    assert len(units) == 2 and units[1].extra_flags == executable.SMALL_MODULE_FLAGS
    main_unit, small_unit = units
    small_names = [f.name for f in generated.source.functions
                   if f"void {f.name}(" in small_unit.source]
    assert len(small_names) == 2  # the sine and the add of f32[4]
    for name in small_names:  # the driver's prototypes
        assert f"\nvoid {name}(" in main_unit.source
        assert f"static __attribute__((noinline)) __attribute__((optimize(\"O1\"))) void {name}(" \
            not in small_unit.source
    assert "hlofuse_run" in main_unit.source and "hlofuse_run" not in small_unit.source
    x = np.linspace(-3, 3, 4096, dtype=np.float32)
    y = np.array([0.5, -1.0, 2.0, 1e-3], np.float32)
    ex = compile_cpu(module)
    for got, want in zip(ex(x, y), flatten_value(evaluate(module, [x, y])), strict=True):
        np.testing.assert_array_equal(got, want)
    sources = sorted(p.name.split(".", 1)[1] for p in (tmp_path / "cache").glob("*.c"))
    assert "1.c" in sources and "c" in sources
