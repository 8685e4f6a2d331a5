"""hlofuse_rt.h against the runtime library's sources: every routine a generated module may
call is declared as it is defined (the same functions, parameter counts, pointers where the
definition takes pointers, the same scalar types elsewhere)."""

from __future__ import annotations

import re
import subprocess
from importlib import resources

import pytest

from hlofuse.targets.c.blas import find_blas
from hlofuse.targets.c.driver import RUNTIME_HEADER, library_declarations
from hlofuse.toolchain.compiler import Compiler

_SIGNATURE = re.compile(r"\bvoid\s+(hlofuse_rt_\w+)\s*\(([^)]*)\)\s*([;{])")


def _parameters(text: str) -> list[str]:
    """Each parameter's type: `const float *a` -> `pointer`, `int64_t n` -> `int64_t`."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if "*" in part:
            out.append("pointer")
        else:
            out.append(part.split()[0])
    return out


def _signatures(text: str, terminator: str) -> dict[str, list[str]]:
    return {m.group(1): _parameters(m.group(2)) for m in _SIGNATURE.finditer(text)
            if m.group(3) == terminator}


@pytest.fixture(scope="module", params=["loop", "blas"])
def definitions(request: pytest.FixtureRequest) -> dict[str, list[str]]:
    """The routines the runtime's sources define, after the preprocessor expanded the
    per-type macros that generate them: built without BLAS, and with the wheel's OpenBLAS
    (targets/c/blas.py) where it is installed."""
    flags: tuple[str, ...] = ()
    if request.param == "blas":
        blas = find_blas()
        if blas is None:
            pytest.skip("scipy-openblas32 is not installed")
        flags = ("-DHLOFUSE_BLAS", f"-I{blas.include_dir}")
    files = resources.files("hlofuse.targets.c")
    source = "\n".join(files.joinpath(name).read_text()
                       for name in ("hlofuse_rt.c", "hlofuse_linalg.c"))
    try:
        compiler = Compiler.find()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"no C compiler: {e}")
    expanded = subprocess.run([*compiler.command, "-E", "-P", "-fopenmp", *flags, "-x", "c", "-"],
                              input=source, capture_output=True, text=True, check=True).stdout
    return _signatures(expanded, "{")


@pytest.mark.needs_cc
def test_every_declared_routine_is_defined_with_its_parameters(
        definitions: dict[str, list[str]]) -> None:
    declared = _signatures(library_declarations(), ";")
    assert declared, RUNTIME_HEADER
    assert set(declared) == set(definitions)
    assert {name: params for name, params in declared.items()
            if params != definitions[name]} == {}


def test_the_generated_files_get_the_header_after_its_comment() -> None:
    text = resources.files("hlofuse.targets.c").joinpath(RUNTIME_HEADER).read_text()
    declarations = library_declarations()
    assert text.startswith("/*") and "*/" not in declarations
    assert declarations.startswith("void hlofuse_rt_") and declarations.endswith(";")
    assert len(_signatures(declarations, ";")) == declarations.count(";")
