"""The compiled-program cache: a module compiled once is loaded, not compiled, by a fresh jit
in this process or in a new one."""

from __future__ import annotations

import dataclasses
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import hlofuse.api
import hlofuse.compile_cache
import hlofuse.runtime.lowering
import hlofuse.targets.c
from hlofuse import targets
from hlofuse.api import compile_module, jit
from hlofuse.compile_cache import program_key
from hlofuse.fusion.beyond_xla.cost_model import DEFAULT_CONSTANTS
from hlofuse.ir.parser import parse_module
from hlofuse.targets.c import runtime_library
from hlofuse.toolchain import compiler

PROGRAM = '''
import hlofuse.numpy as hnp
from hlofuse import lax


def rollout(x):
    def step(carry, _):
        return hnp.sin(carry) * 0.5 + 1.0, None

    final, _ = lax.scan(step, x, None, length=7)
    return final, hnp.sum(final)
'''

CHILD = '''
import subprocess, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import hlofuse.api, hlofuse.runtime.lowering, hlofuse.targets.c
from hlofuse.api import jit
import prog

def refuse(*args, **kwargs):
    raise AssertionError("a cache hit ran the compiler, a pass or code generation")

subprocess.run = refuse
hlofuse.api.run_strategy = refuse
hlofuse.targets.c.CTarget.compile = refuse
hlofuse.runtime.lowering._generate = refuse
compiled = jit(prog.rollout, strategy=sys.argv[2]).lower(np.ones(5, np.float32)).compile()
final, total = compiled(np.ones(5, np.float32))
print(compiled.executable.cache_hit, repr(float(total)), compiled.kernels_per_iteration())
'''

STRATEGY = "xla"  # fixed costs: no calibration probe in a fresh cache directory
CPU = targets.get("cpu")


@pytest.fixture()
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path / "cache"))
    # The compiler and the runtime library are found once per process: found again, they are
    # kept in this cache directory too, as they would be in the one a user keeps.
    compiler._find_compiler.cache_clear()
    runtime_library.cache_clear()
    return tmp_path / "cache"


@pytest.fixture()
def program(tmp_path: Path) -> ModuleType:
    """A user's module, in a file of its own: the source lines in the traced module's
    metadata are the same in this process and in a child."""
    (tmp_path / "prog.py").write_text(PROGRAM)
    spec = importlib.util.spec_from_file_location("prog", tmp_path / "prog.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def refuse_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a cache hit ran the compiler, a pass or code generation")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(hlofuse.api, "run_strategy", refuse)
    monkeypatch.setattr(hlofuse.targets.c.CTarget, "compile", refuse)
    monkeypatch.setattr(hlofuse.runtime.lowering, "_generate", refuse)


@pytest.mark.needs_cc
def test_a_second_jit_loads_the_program_without_compiling(
        cache_dir: Path, program: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    first = jit(program.rollout, strategy=STRATEGY).lower(x).compile()
    assert first.executable is not None and not first.executable.cache_hit
    expected = first(x)
    fused_hlo, explained = first.fused_hlo(), first.explain(as_dict=True)
    counts = first.kernels_per_iteration()
    assert list(counts.values()) and all(v > 0 for v in counts.values())
    with monkeypatch.context() as patched:
        refuse_compiling(patched)
        again = jit(program.rollout, strategy=STRATEGY).lower(x).compile()
        assert again.executable is not None and again.executable.cache_hit
        got = again(x)
        np.testing.assert_array_equal(got[0], expected[0])
        assert got[1] == expected[1]
        assert again.kernels_per_iteration() == counts
        profile = again.profile(x)
        assert sum(r.calls for r in profile.rows if r.kind != "copy") > 0
    # What the cache does not keep is produced again on request, the same as the first time.
    assert again.fused_hlo() == fused_hlo
    assert again.explain(as_dict=True) == explained


@pytest.mark.needs_cc
def test_a_new_process_loads_the_program_without_compiling(
        cache_dir: Path, program: ModuleType, tmp_path: Path) -> None:
    x = np.ones(5, np.float32)
    compiled = jit(program.rollout, strategy=STRATEGY).lower(x).compile()
    _, total = compiled(x)
    result = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), STRATEGY],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    hit, child_total, counts = result.stdout.strip().split(" ", 2)
    assert hit == "True" and float(child_total) == float(total)
    assert counts == str(compiled.kernels_per_iteration())


@pytest.mark.needs_cc
def test_another_strategy_or_module_is_compiled(cache_dir: Path) -> None:
    text = textwrap.dedent("""\
        HloModule m
        ENTRY main {
          x = f32[16]{0} parameter(0)
          c = f32[] constant(3)
          b = f32[16]{0} broadcast(c), dimensions={}
          ROOT y = f32[16]{0} multiply(x, b)
        }
        """)
    x = np.arange(16, dtype=np.float32)
    assert not compile_module(parse_module(text), "xla", "cpu").executable.cache_hit
    assert compile_module(parse_module(text), "xla", "cpu").executable.cache_hit
    none = compile_module(parse_module(text), "none", "cpu")
    assert not none.executable.cache_hit
    changed = compile_module(parse_module(text.replace("constant(3)", "constant(4)")), "xla", "cpu")
    assert not changed.executable.cache_hit
    np.testing.assert_array_equal(changed(x), x * 4)
    np.testing.assert_array_equal(none(x), x * 3)


def test_the_key_follows_strategy_module_and_measured_costs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    module = parse_module("HloModule k\nENTRY main {\n  ROOT x = f32[4]{0} parameter(0)\n}\n")
    other = parse_module("HloModule k\nENTRY main {\n  ROOT x = f32[5]{0} parameter(0)\n}\n")
    monkeypatch.setattr(hlofuse.compile_cache, "measured_machine_constants",
                        lambda: DEFAULT_CONSTANTS)
    keys = {program_key(module, "xla", CPU), program_key(module, "none", CPU),
            program_key(other, "xla", CPU), program_key(module, "priority", CPU)}
    assert len(keys) == 4
    assert program_key(module, "xla", CPU) == program_key(parse_module(
        "HloModule k\nENTRY main {\n  ROOT x = f32[4]{0} parameter(0)\n}\n"), "xla", CPU)
    measured = program_key(module, "priority", CPU)
    fixed = program_key(module, "priority+default_costs", CPU)
    slower = dataclasses.replace(DEFAULT_CONSTANTS,
                                 call_overhead=2 * DEFAULT_CONSTANTS.call_overhead)
    monkeypatch.setattr(hlofuse.compile_cache, "measured_machine_constants", lambda: slower)
    assert program_key(module, "priority", CPU) != measured  # decided with other constants
    assert program_key(module, "priority+default_costs", CPU) == fixed
    assert program_key(module, "xla", CPU) == program_key(module, "xla", CPU)


@pytest.mark.needs_cc
def test_jit_called_from_threads_compiles_once(cache_dir: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    import hlofuse.numpy as hnp

    compiles = []
    real_compile = hlofuse.api.compile_module

    def counted(*args: Any, **kwargs: Any) -> Any:
        compiles.append(threading.get_ident())
        return real_compile(*args, **kwargs)

    monkeypatch.setattr(hlofuse.api, "compile_module", counted)

    def affine(x: Any, k: Any) -> Any:
        return hnp.tanh(x) * k + 1.0

    def other(x: Any) -> Any:  # traced concurrently with `affine`: traces are per thread
        return hnp.sum(x * 2.0) + x

    f, g = jit(affine, strategy=STRATEGY), jit(other, strategy=STRATEGY)
    start = threading.Barrier(8)
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            x = np.full(33, k, np.float32)
            start.wait()
            results[k] = f(x, np.float32(k)) if k % 2 == 0 else g(x)
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert len(compiles) == 2 and f.cache_size == 1 and g.cache_size == 1
    for k, got in results.items():
        x = np.full(33, k, np.float32)
        want = f(x, np.float32(k)) if k % 2 == 0 else g(x)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        if k % 2 == 0:
            np.testing.assert_allclose(got, np.tanh(x) * k + 1.0, rtol=1e-6)
