"""The layers of architecture.md: fusion and passes never import what sits above them (the
toolchain, code generation, the runtime, the api), not even lazily inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hlofuse

PACKAGE = Path(hlofuse.__file__).parent
FORBIDDEN = ("hlofuse.toolchain", "hlofuse.codegen", "hlofuse.runtime", "hlofuse.api",
             "hlofuse.compile_cache")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every absolute module an import statement anywhere in `path` names, with its line."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def is_forbidden(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in FORBIDDEN)


@pytest.mark.parametrize("layer", ["fusion", "passes"])
def test_lower_layers_do_not_import_higher_ones(layer: str) -> None:
    sources = sorted((PACKAGE / layer).rglob("*.py"))
    assert sources
    violations = [f"{path.relative_to(PACKAGE)}:{line}: {module}"
                  for path in sources for line, module in imported_modules(path)
                  if is_forbidden(module)]
    assert violations == []


def test_the_scan_sees_lazy_and_from_imports(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from hlofuse import toolchain\n"
                      "    import hlofuse.runtime.plan\n")
    flagged = [m for _, m in imported_modules(source) if is_forbidden(m)]
    assert flagged == ["hlofuse.toolchain", "hlofuse.runtime.plan"]
