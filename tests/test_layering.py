"""The layers of docs/architecture.md: each layer imports only the layers its row allows, not even
lazily inside a function, and no layer imports the command line. Importing a lower layer does
not load an upper one (the package's `__init__` is lazy)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import hlofuse

PACKAGE = Path(hlofuse.__file__).parent

# The reference semantics sit just above ir and analysis: the interpreter (constant folding in
# the simplifier, eager evaluation in the front end; it shares analysis's reducer recogniser)
# and rnglib (Threefry as NumPy and as a sequence of HLO ops, shared by the front end and rng
# expansion).
REFERENCE = "hlofuse.reference"

# layer -> the hlofuse modules it may import besides its own. A name covers its submodules.
ALLOWED: dict[str, tuple[str, ...]] = {
    "hlofuse.ir": (),
    "hlofuse.reference": ("hlofuse.ir", "hlofuse.analysis"),
    "hlofuse.analysis": ("hlofuse.ir",),
    "hlofuse.passes": ("hlofuse.ir", "hlofuse.analysis", REFERENCE),
    "hlofuse.fusion": ("hlofuse.ir", "hlofuse.analysis", "hlofuse.passes", REFERENCE),
    # rnglib names the one library call codegen emits (its target and convention).
    "hlofuse.codegen": ("hlofuse.ir", "hlofuse.analysis", "hlofuse.reference.rnglib"),
    "hlofuse.toolchain": (),
    # Target-neutral lowering. It pauses the garbage collector as the pass manager does,
    # nothing more of passes.
    "hlofuse.runtime": ("hlofuse.ir", "hlofuse.analysis", "hlofuse.codegen",
                        "hlofuse.toolchain", "hlofuse.passes.manager"),
    # The registry itself imports no target (each loads on first use).
    "hlofuse.targets": ("hlofuse.runtime.target",),
    # One folder per target over the lowering layer; no target imports another, except that
    # CUDA C++ extends the C target (its language table and fixed text) and both load shared
    # objects the same way.
    "hlofuse.targets.native": ("hlofuse.ir", "hlofuse.runtime", "hlofuse.toolchain"),
    "hlofuse.targets.c": ("hlofuse.ir", "hlofuse.analysis", "hlofuse.codegen",
                          "hlofuse.runtime", "hlofuse.toolchain", "hlofuse.targets.native"),
    "hlofuse.targets.cuda": ("hlofuse.ir", "hlofuse.analysis", "hlofuse.codegen",
                             "hlofuse.runtime", "hlofuse.toolchain", "hlofuse.targets.native",
                             "hlofuse.targets.c"),
    "hlofuse.targets.reference": ("hlofuse.ir", REFERENCE, "hlofuse.runtime"),
    "hlofuse.frontend": ("hlofuse.ir", "hlofuse.analysis", REFERENCE),
    "hlofuse.lax": ("hlofuse.frontend",),
    "hlofuse.numpy": ("hlofuse.frontend",),
    "hlofuse.random": ("hlofuse.frontend",),
}
# Every other module (api, compile_cache, envs, studies, ...) may import anything but the
# command line, which sits on top and imports them.
CLI = "hlofuse.cli"

# What importing a module must not load: the layers above it (the package root is lazy).
NOT_LOADED_BY: dict[str, tuple[str, ...]] = {
    "hlofuse.ir.ops": ("hlofuse.runtime", "hlofuse.codegen", "hlofuse.toolchain", "hlofuse.api",
                       "hlofuse.fusion", "hlofuse.passes", "hlofuse.frontend", "hlofuse.cli",
                       "hlofuse.compile_cache", "hlofuse.reference.interpreter"),
    "hlofuse.random": ("hlofuse.runtime", "hlofuse.codegen", "hlofuse.toolchain", "hlofuse.api",
                       "hlofuse.fusion", "hlofuse.passes", "hlofuse.cli", "hlofuse.compile_cache"),
    "hlofuse.fusion.strategies": ("hlofuse.runtime", "hlofuse.codegen", "hlofuse.toolchain",
                                  "hlofuse.api", "hlofuse.frontend", "hlofuse.cli",
                                  "hlofuse.compile_cache"),
}


def covers(name: str, module: str) -> bool:
    return module == name or module.startswith(name + ".")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, package: str | None = None) -> list[tuple[int, str]]:
    """Every module an import statement anywhere in `path` names, with its line; relative
    imports are resolved against `package` (by default the file's own package)."""
    if package is None:
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[:len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def resolve(module: str) -> str | None:
    """The hlofuse module an imported name stands for; None for the lazy package root itself
    and for modules outside hlofuse."""
    if not covers("hlofuse", module) or module == "hlofuse":
        return None
    top = module.split(".")[1]
    lazy = hlofuse._LAZY.get(top)
    return lazy[0] if lazy is not None and module.count(".") == 1 else module


def layer_of(module: str) -> str | None:
    matches = [name for name in ALLOWED if covers(name, module)]
    return max(matches, key=len) if matches else None


def violation(importer: str, imported: str) -> bool:
    target = resolve(imported)
    if target is None:
        return False
    if covers(CLI, target):
        return not covers(CLI, importer)
    layer = layer_of(importer)
    if layer is None or covers(layer, target):
        return False
    return not any(covers(name, target) for name in ALLOWED[layer])


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_layer_imports_only_what_its_row_allows() -> None:
    violations = [f"{path.relative_to(PACKAGE)}:{line}: {module}"
                  for path in sources() for line, module in imported_modules(path)
                  if violation(module_name(path), module)]
    assert violations == []


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_every_layer_of_the_table_exists(layer: str) -> None:
    path = PACKAGE.parent / Path(*layer.split("."))
    assert path.is_dir() or path.with_suffix(".py").is_file(), layer


# Outside the targets' folders, a target is reached through the registry only. The peers of
# the study are hand-written kernels built with the CUDA target's emulation support.
TARGET_FOLDERS = ("hlofuse.targets.c", "hlofuse.targets.cuda", "hlofuse.targets.native",
                  "hlofuse.targets.reference")
TARGET_USERS_ALLOWED = ("hlofuse.targets", "hlofuse.studies.peers.cuda_peer")


def test_only_the_registry_reaches_into_a_target_folder() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{line}: {module}"
             for path in sources() for line, module in imported_modules(path)
             if any(covers(folder, module) for folder in TARGET_FOLDERS)
             and not covers("hlofuse.targets", module_name(path))
             and module_name(path) not in TARGET_USERS_ALLOWED]
    assert found == []


def test_target_sources_live_in_their_target_folders() -> None:
    """C, C++ and CUDA files belong to a target (the math library's header is read by the
    emitters' vector-math table until the kernel IR stops naming C functions; the peers'
    kernels are hand-written programs, not generated code)."""
    kept_elsewhere = ("codegen/mathlib/", "studies/peers/")
    stray = [str(p.relative_to(PACKAGE)) for suffix in ("*.c", "*.h", "*.cu", "*.cuh")
             for p in PACKAGE.rglob(suffix)
             if not str(p.relative_to(PACKAGE)).startswith(("targets/", *kept_elsewhere))]
    assert stray == []


def test_the_command_line_is_a_package_on_top() -> None:
    assert (PACKAGE / "cli" / "__init__.py").is_file()
    assert not list(PACKAGE.rglob("commands.py"))


def test_the_scan_sees_lazy_relative_and_from_imports(tmp_path: Path) -> None:
    probe = tmp_path / "x.py"
    probe.write_text("def f():\n    from hlofuse import toolchain\n"
                     "    import hlofuse.runtime.plan\n    from ..codegen import c\n"
                     "    from hlofuse import jit\n    from . import dce\n"
                     "    import hlofuse.cli\n")
    names = [m for _, m in imported_modules(probe, package="hlofuse.passes")]
    flagged = [m for m in names if violation("hlofuse.passes.x", m)]
    assert flagged == ["hlofuse.toolchain", "hlofuse.runtime.plan", "hlofuse.codegen",
                       "hlofuse.codegen.c", "hlofuse.jit", "hlofuse.cli"]


def test_the_table_reads_as_architecture_md_says() -> None:
    assert module_name(PACKAGE / "passes" / "dce.py") == "hlofuse.passes.dce"
    assert module_name(PACKAGE / "cli" / "__init__.py") == "hlofuse.cli"
    assert violation("hlofuse.passes.dce", "hlofuse.codegen.c")
    assert not violation("hlofuse.passes.dce", "hlofuse.analysis.graph")
    assert not violation("hlofuse.runtime.lowering", "hlofuse.passes.manager")
    assert violation("hlofuse.runtime.lowering", "hlofuse.passes.dce")
    assert violation("hlofuse.runtime.lowering", "hlofuse.targets.c")
    assert violation("hlofuse.targets.c.build", "hlofuse.targets.cuda.compile")
    assert not violation("hlofuse.targets.cuda.language", "hlofuse.targets.c.language")
    assert violation("hlofuse.targets.native.executable", "hlofuse.targets.c")
    assert violation("hlofuse.codegen.kernel", "hlofuse.targets.c.language")
    assert violation("hlofuse.api", "hlofuse.cli.errors")
    assert not violation("hlofuse.cli.run", "hlofuse.api")
    assert not violation("hlofuse.studies.cartpole_study", "hlofuse.random")


# One fresh interpreter for every check: each module is imported after every hlofuse module
# has been dropped from sys.modules, so it loads exactly what it needs; the package root last.
_IMPORT_PROBE = """
import json, sys
def fresh(name):
    for m in [m for m in sys.modules if m == 'hlofuse' or m.startswith('hlofuse.')]:
        del sys.modules[m]
    __import__(name)
    return sorted(m for m in sys.modules if m.startswith('hlofuse'))
report = {name: fresh(name) for name in sys.argv[1:]}
root = fresh('hlofuse')
import hlofuse
report['hlofuse'] = root
report['after hlofuse.jit'] = [callable(hlofuse.jit), 'hlofuse.api' in sys.modules,
                               hlofuse.random.key.__name__]
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def import_report() -> dict[str, list[object]]:
    done = subprocess.run([sys.executable, "-c", _IMPORT_PROBE, *sorted(NOT_LOADED_BY)],
                          capture_output=True, text=True, check=True)
    report: dict[str, list[object]] = json.loads(done.stdout)
    return report


@pytest.mark.parametrize("module", sorted(NOT_LOADED_BY))
def test_importing_a_layer_loads_no_layer_above_it(module: str,
                                                    import_report: dict[str, list[str]]) -> None:
    loaded = import_report[module]
    assert module in loaded
    assert [m for m in loaded if any(covers(name, m) for name in NOT_LOADED_BY[module])] == []


def test_the_package_root_loads_its_names_on_first_use(
        import_report: dict[str, list[object]]) -> None:
    assert import_report["hlofuse"] == ["hlofuse"]
    assert import_report["after hlofuse.jit"] == [True, True, "key"]


def test_the_import_probe_sees_what_a_module_loads(
        import_report: dict[str, list[object]]) -> None:
    # A control: fusion needs the pass manager, so the probe must report it.
    assert "hlofuse.passes.manager" in import_report["hlofuse.fusion.strategies"]
