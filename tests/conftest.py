"""Shared fixtures: the JAX corpus."""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

CORPUS_DIR = Path(__file__).parent / "data" / "jax"
CORPUS = sorted(p.stem for p in CORPUS_DIR.glob("*.hlo"))


def load_corpus_case(name: str) -> tuple[str, list[np.ndarray], list[np.ndarray]]:
    """(HLO text, inputs, JAX's outputs) of one corpus program."""
    text = (CORPUS_DIR / f"{name}.hlo").read_text()
    data = np.load(CORPUS_DIR / f"{name}.npz")
    inputs = [data[f"arg{i}"] for i in range(sum(k.startswith("arg") for k in data.files))]
    outputs = [data[f"out{i}"] for i in range(sum(k.startswith("out") for k in data.files))]
    return text, inputs, outputs


def assert_matches(actual: list[np.ndarray], expected: list[np.ndarray], where: str) -> None:
    """Bit-exact for integers and pred; rtol=1e-5, atol=1e-6 for floats (NaNs equal)."""
    assert len(actual) == len(expected), f"{where}: {len(actual)} outputs, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        a = np.asarray(a)
        if a.dtype != e.dtype and e.dtype == np.uint16 and a.dtype.name == "bfloat16":
            a = a.view(np.uint16)
        assert a.shape == e.shape, f"{where} out{i}: shape {a.shape}, expected {e.shape}"
        assert a.dtype == e.dtype, f"{where} out{i}: dtype {a.dtype}, expected {e.dtype}"
        if e.dtype.kind in "fc":
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6, equal_nan=True,
                                       err_msg=f"{where} out{i}")
        else:
            np.testing.assert_array_equal(a, e, err_msg=f"{where} out{i}")


def compiled_once(request: pytest.FixtureRequest, built: dict[tuple[str, ...], Any],
                  key: tuple[str, ...], params: tuple[str, ...],
                  prepare: Callable[..., Any]) -> Any:
    """The executable for `key` (the values of `params`): on first use, every selected test
    of the calling test module is compiled at once, two compilers at a time, into `built`.
    Under pytest-xdist a worker runs only some of the module's tests (which, it learns one
    by one), so there it compiles `key` alone: the workers are the parallelism."""
    from hlofuse.targets.c import compile_many

    if key not in built:
        wanted = [key] if under_xdist() else [
            tuple(item.callspec.params[p] for p in params)
            for item in request.session.items
            if item.module is request.module and hasattr(item, "callspec")
            and all(p in item.callspec.params for p in params)]
        wanted = [w for w in wanted if w not in built]
        for w, executable in zip(wanted, compile_many([prepare(*w) for w in wanted])):
            built[w] = executable
    return built[key]


def under_xdist() -> bool:
    """Whether this process is a pytest-xdist worker (`make test` runs `-n auto`)."""
    return "PYTEST_XDIST_WORKER" in os.environ


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--no-cc", action="store_true",
                     help="run as if no C compiler were installed: a test that reaches the "
                     "compiler is skipped (the fast tier, `make fast`)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--no-cc"):
        _withhold_the_c_compiler()


def _withhold_the_c_compiler() -> None:
    """Every build asks `Compiler.find` for the compiler first (a cache hit too, whose key names
    the compiler): answering with a skip leaves out exactly the tests that need one, also those
    whose compiling fixture is shared, and also those nobody marked `needs_cc`."""
    from hlofuse.toolchain.compiler import Compiler

    def find() -> Compiler:
        pytest.skip("reaches the C compiler (--no-cc)")

    Compiler.find = staticmethod(find)  # type: ignore[method-assign]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep each `xdist_group` on one worker under `--dist loadgroup`. pytest-xdist tells its
    scheduler a test's group by appending `@group` to the node id on the worker; since pytest
    9.2 keeps node ids structured (`Node._id`), xdist's write to the old `_nodeid` field is
    lost (pytest-xdist issue 1386), and the groups' tests were spread over the workers, each
    worker repeating the work the group shares (the xla-gpu corpus comparisons, the import
    probe). Where xdist's suffix did not take, this appends it as xdist would."""
    if not (under_xdist() and config.getvalue("loadgroup")):
        return
    for item in items:
        names = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                        for mark in item.iter_markers("xdist_group")})
        if not names or item.nodeid.endswith("@" + "_".join(names)):
            continue
        # Only pytest's structured ids get here (before them, xdist's suffix took).
        item._id = type(item._id).parse(f"{item.nodeid}@{'_'.join(names)}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("needs_cc") is not None and not _has_c_compiler():
        pytest.skip("no C compiler ($CC or cc)")
    if item.get_closest_marker("needs_nvcc") is not None:
        # nvcc is a compiler too: the fast tier leaves it out even where it is installed.
        if item.config.getoption("--no-cc"):
            pytest.skip("runs nvcc (--no-cc)")
        if not _has_nvcc():
            pytest.skip("no nvcc on the PATH")


def _has_c_compiler() -> bool:
    command = shlex.split(os.environ.get("CC", "")) or ["cc"]
    return shutil.which(command[0]) is not None


def _has_nvcc() -> bool:
    return any(shutil.which(nvcc) is not None for nvcc in ("nvcc", "/usr/local/cuda/bin/nvcc"))


@pytest.fixture(params=CORPUS)
def corpus_case(request: pytest.FixtureRequest) -> tuple[str, str, list[np.ndarray],
                                                          list[np.ndarray]]:
    name = request.param
    return (name, *load_corpus_case(name))


@pytest.fixture
def large_whole_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every whole-loop kernel compiled as a large one, however little it computes: for tests
    of the vectorised, scheduled form on small programs (codegen/whole_loop_work.py)."""
    from hlofuse.codegen import whole_loop_work

    monkeypatch.setattr(whole_loop_work, "SMALL_WHOLE_LOOP_WORK", -1)
