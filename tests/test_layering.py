"""The layers of docs/architecture.md: each layer imports only the layers its row allows, not even
lazily inside a function, and no layer imports the command line. Importing a lower layer does
not load an upper one (the package's `__init__` is lazy)."""

from __future__ import annotations

import ast
import functools
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
    # The TPU target evaluates ops without a lax form with the interpreter (host operations).
    "hlofuse.targets.tpu": ("hlofuse.ir", "hlofuse.analysis", REFERENCE, "hlofuse.runtime",
                            "hlofuse.toolchain"),
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


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The syntax tree of `path`, parsed once for all the checks."""
    return ast.parse(path.read_text(), filename=str(path))


def package_of(path: Path) -> str:
    """The package relative imports in `path` are resolved against."""
    name = module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def from_base(node: ast.ImportFrom, package: str) -> str:
    """The module a `from ... import` statement imports from, relative levels resolved."""
    base = node.module or ""
    if not node.level:
        return base
    parts = package.split(".")
    anchor = parts[:len(parts) - node.level + 1]
    return ".".join([*anchor, base] if base else anchor)


def imported_modules(path: Path, package: str | None = None) -> list[tuple[int, str]]:
    """Every module an import statement anywhere in `path` names, with its line; relative
    imports are resolved against `package` (by default the file's own package)."""
    package = package_of(path) if package is None else package
    found: list[tuple[int, str]] = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = from_base(node, package)
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


# Import cycles. Only the imports that run when a module is imported count: those at module
# level (also inside a module-level `if`, `try`, `with` or class body), not those inside a
# function, which run later, nor those under `if TYPE_CHECKING:`, which never run.


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module of `tree` is imported."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            pending += node.orelse if _is_type_checking(node.test) else node.body + node.orelse
        elif isinstance(node, ast.Try | ast.TryStar):
            pending += node.body + node.orelse + node.finalbody
            pending += [stmt for handler in node.handlers for stmt in handler.body]
        elif isinstance(node, ast.With | ast.For | ast.While):
            pending += node.body + (node.orelse if not isinstance(node, ast.With) else [])
        elif isinstance(node, ast.ClassDef):
            pending += node.body
    return sorted(found, key=lambda node: node.lineno)


def import_edges(path: Path, modules: set[str], package: str | None = None
                 ) -> list[tuple[int, str]]:
    """The hlofuse modules that importing `path` runs, with the line of each import.

    `from pkg import name` imports the module `pkg.name` when there is one and `pkg` itself
    otherwise (a name its `__init__` defines); a package's own `__init__`, which Python runs
    before any of its modules, is not an edge of its modules."""
    package = package_of(path) if package is None else package
    edges: list[tuple[int, str]] = []
    for node in module_level_imports(parsed(path)):
        if isinstance(node, ast.Import):
            named = [resolve(alias.name) for alias in node.names]
        else:
            base = from_base(node, package)
            named = [resolve(f"{base}.{alias.name}") if resolve(f"{base}.{alias.name}")
                     in modules else resolve(base) for alias in node.names]
        edges += [(node.lineno, target) for target in named if target in modules]
    return edges


def import_graph(paths: list[Path]) -> dict[str, dict[str, int]]:
    """importer -> {imported module: line of the first import}, over hlofuse's modules."""
    modules = {module_name(path) for path in paths}
    graph: dict[str, dict[str, int]] = {}
    for path in paths:
        targets = graph.setdefault(module_name(path), {})
        for line, target in import_edges(path, modules):
            targets.setdefault(target, line)
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules (Tarjan), each as the modules along
    it, the first repeated at the end."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph.get(module, {}):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] != index[module]:
            return
        group: list[str] = []
        while not group or group[-1] != module:
            group.append(stack.pop())
            on_stack.discard(group[-1])
        if len(group) > 1 or module in graph.get(module, {}):
            groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_cycle_through(sorted(group)[0], set(group), graph) for group in groups]


def _cycle_through(start: str, group: set[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """A shortest cycle from `start` back to itself inside `group` (breadth first)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for module in frontier:
            for target in sorted(graph[module]):
                if target == start:
                    path = [module]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if target in group and target not in came_from:
                    came_from[target] = module
                    following.append(target)
        frontier = following
    raise AssertionError(f"{start} is in a strongly connected group but on no cycle")


def describe_cycle(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    steps = [f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])]
    return " -> ".join([*steps, cycle[-1]])


def test_no_module_import_cycles() -> None:
    # A cycle works only when its modules happen to be imported in one order (issue 33 found
    # `import hlofuse.reference.dot` failing on its own): the shared piece belongs in a module
    # of its own that both import.
    graph = import_graph(sources())
    assert [describe_cycle(cycle, graph) for cycle in import_cycles(graph)] == []


def test_the_cycle_check_sees_relative_from_and_class_level_imports(tmp_path: Path) -> None:
    root = tmp_path / "hlofuse" / "pkg"
    root.mkdir(parents=True)
    files = {
        "__init__.py": "from hlofuse.pkg.a import A\n",
        "a.py": "from . import b\nA = 1\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import D\n"
                "class B:\n    from hlofuse.pkg.c import C\n",
        "c.py": "def later():\n    from hlofuse.pkg import d\nfrom hlofuse.pkg import A\n",
        "d.py": "import hlofuse.pkg.c\n",
    }
    for name, text in files.items():
        (root / name).write_text(text)
    modules = {f"hlofuse.pkg.{name[:-3]}" if name != "__init__.py" else "hlofuse.pkg": root / name
               for name in files}
    names = set(modules)
    graph = {module: dict((target, line) for line, target in
                          import_edges(path, names, "hlofuse.pkg"))
             for module, path in modules.items()}
    assert graph == {"hlofuse.pkg": {"hlofuse.pkg.a": 1}, "hlofuse.pkg.a": {"hlofuse.pkg.b": 1},
                     "hlofuse.pkg.b": {"hlofuse.pkg.c": 5}, "hlofuse.pkg.c": {"hlofuse.pkg": 3},
                     "hlofuse.pkg.d": {"hlofuse.pkg.c": 1}}
    assert import_cycles(graph) == [["hlofuse.pkg", "hlofuse.pkg.a", "hlofuse.pkg.b",
                                     "hlofuse.pkg.c", "hlofuse.pkg"]]
    assert describe_cycle(import_cycles(graph)[0], graph).startswith(
        "hlofuse.pkg (line 1) -> hlofuse.pkg.a (line 1) -> hlofuse.pkg.b (line 5)")
    del graph["hlofuse.pkg.c"]["hlofuse.pkg"]
    assert import_cycles(graph) == []


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


# The import probe (a subprocess, seconds) is made once per process and shared by the tests
# below: under pytest-xdist they run on one worker.
LAYER_PROBE_GROUP = pytest.mark.xdist_group("layering_import_probe")


@pytest.fixture(scope="module")
def import_report() -> dict[str, list[object]]:
    done = subprocess.run([sys.executable, "-c", _IMPORT_PROBE, *sorted(NOT_LOADED_BY)],
                          capture_output=True, text=True, check=True)
    report: dict[str, list[object]] = json.loads(done.stdout)
    return report


@LAYER_PROBE_GROUP
@pytest.mark.parametrize("module", sorted(NOT_LOADED_BY))
def test_importing_a_layer_loads_no_layer_above_it(module: str,
                                                    import_report: dict[str, list[str]]) -> None:
    loaded = import_report[module]
    assert module in loaded
    assert [m for m in loaded if any(covers(name, m) for name in NOT_LOADED_BY[module])] == []


@LAYER_PROBE_GROUP
def test_the_package_root_loads_its_names_on_first_use(
        import_report: dict[str, list[object]]) -> None:
    assert import_report["hlofuse"] == ["hlofuse"]
    assert import_report["after hlofuse.jit"] == [True, True, "key"]


@LAYER_PROBE_GROUP
def test_the_import_probe_sees_what_a_module_loads(
        import_report: dict[str, list[object]]) -> None:
    # A control: fusion needs the pass manager, so the probe must report it.
    assert "hlofuse.passes.manager" in import_report["hlofuse.fusion.strategies"]


# Every module imports on its own, as `python -c "import hlofuse.x.y"` would: one interpreter
# drops every hlofuse module before each import, so no module leans on one imported earlier.
_EACH_ON_ITS_OWN = """
import importlib, json, sys, traceback
failures = {}
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == 'hlofuse' or m.startswith('hlofuse.')]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except BaseException as e:  # noqa: BLE001 - every failure is reported, not only the first
        where = traceback.extract_tb(e.__traceback__)[-1]
        failures[name] = f"{type(e).__name__}: {e} ({where.filename}:{where.lineno})"
print(json.dumps(failures))
"""
# Run, not imported: `python -m hlofuse.cli` executes it.
NOT_IMPORTED = ("hlofuse.cli.__main__",)


def import_each_on_its_own(modules: list[str]) -> dict[str, str]:
    """module -> why importing it in a fresh interpreter failed, for the modules that failed."""
    done = subprocess.run([sys.executable, "-c", _EACH_ON_ITS_OWN, *modules],
                          capture_output=True, text=True, check=True)
    failures: dict[str, str] = json.loads(done.stdout)
    return failures


# Each of some 200 modules is imported with its dependencies from scratch: about 20 s.
@pytest.mark.thorough
def test_every_module_imports_on_its_own() -> None:
    modules = [name for name in map(module_name, sources()) if name not in NOT_IMPORTED]
    assert len(modules) > 150
    assert import_each_on_its_own(modules) == {}


@pytest.mark.thorough
def test_the_fresh_import_check_reports_every_failure() -> None:
    failures = import_each_on_its_own(["hlofuse.ir.ops", "hlofuse.no_such_module",
                                       "hlofuse.ir.no_such_module"])
    assert sorted(failures) == ["hlofuse.ir.no_such_module", "hlofuse.no_such_module"]
    assert failures["hlofuse.no_such_module"].startswith(
        "ModuleNotFoundError: No module named 'hlofuse.no_such_module'")
