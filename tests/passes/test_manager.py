"""Pass manager: pass lists with knobs, pipelines, fixed points, dumps, debug verification."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

import pytest

from hlofuse.fusion.strategies import ALL_PASSES
from hlofuse.fusion.xla2022.instruction_fusion import InstructionFusion
from hlofuse.ir.hlo import Computation, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.manager import (
    PASSES,
    DecisionSink,
    FixedPoint,
    Pass,
    PassError,
    Pipeline,
    describe,
    parse_pass_list,
)
from hlofuse.passes.simplify import AlgebraicSimplifier

TEXT = """HloModule m

ENTRY main {
  p0 = f32[4]{0} parameter(0)
  dead = f32[4]{0} negate(p0)
  r = f32[4]{0} reshape(p0)
  ROOT a = f32[4]{0} add(r, p0)
}
"""


def test_registry_names_are_unique_kebab_case() -> None:
    names = [cls.name for cls in ALL_PASSES]
    assert len(names) == len(set(names))
    for name in names:
        assert name == name.lower() and " " not in name and "_" not in name
    assert {"dce", "cse", "simplify", "call-inliner"} <= {cls.name for cls in PASSES}
    for cls in ALL_PASSES:
        assert dataclasses.is_dataclass(cls)
        assert cls.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_parse_pass_list_with_knobs() -> None:
    passes = parse_pass_list("dce, instruction-fusion{may_duplicate=false,relax_concatenate=true}",
                             ALL_PASSES)
    assert isinstance(passes[0], DeadCodeElimination)
    fusion = passes[1]
    assert isinstance(fusion, InstructionFusion)
    assert fusion.may_duplicate is False and fusion.relax_concatenate is True
    assert describe(fusion) == "instruction-fusion{may_duplicate=false,relax_concatenate=true}"
    assert describe(DeadCodeElimination()) == "dce"
    simplify = parse_pass_list("simplify{max_folded_elements=8}", ALL_PASSES)[0]
    assert isinstance(simplify, AlgebraicSimplifier) and simplify.max_folded_elements == 8


@pytest.mark.parametrize("text, message", [
    ("nonsense", "unknown pass 'nonsense'"),
    ("dce{x=1}", "has no knob 'x'"),
    ("instruction-fusion{may_duplicate=maybe}", "takes true or false"),
    ("simplify{max_folded_elements=many}", "takes an integer"),
    ("", "no passes named"),
    ("dce{", "cannot read pass"),
])
def test_parse_pass_list_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_pass_list(text, ALL_PASSES)


def test_pipeline_dumps_after_each_pass(tmp_path: Path) -> None:
    module = parse_module(TEXT)
    steps = [FixedPoint((AlgebraicSimplifier(), DeadCodeElimination()))]
    result, changed = Pipeline(steps, dump_dir=tmp_path).run(module)
    assert changed
    dumps = sorted(p.name for p in tmp_path.iterdir())
    # round 1 changes things, round 2 confirms the fixed point
    assert dumps == ["01-simplify.hlo", "02-dce.hlo", "03-simplify.hlo", "04-dce.hlo"]
    first = (tmp_path / "01-simplify.hlo").read_text()
    assert first.startswith("// after pass simplify (changed: true)")
    assert "reshape" not in first and "dead" in first
    assert "dead" not in (tmp_path / "02-dce.hlo").read_text()
    assert "changed: false" in (tmp_path / "04-dce.hlo").read_text()
    assert [i.name for i in result.entry.instructions] == ["p0", "a"]
    parse_module((tmp_path / "04-dce.hlo").read_text())  # dumps are valid HLO text


@dataclasses.dataclass(frozen=True)
class _BreaksTheModule:
    """Drops the root's operand definitions: the verifier must catch it."""

    name: ClassVar[str] = "break-things"

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        entry = module.entry
        kept = tuple(i for i in entry.instructions if i.op is not Op.RESHAPE)
        broken = Computation(entry.name, kept, entry.root)
        return Module(module.name, (broken,), broken), True


def test_debug_pipeline_verifies_after_every_pass() -> None:
    assert isinstance(_BreaksTheModule(), Pass)
    module = parse_module(TEXT)
    with pytest.raises(PassError, match="pass break-things produced an invalid module"):
        Pipeline([_BreaksTheModule()]).run(module)
    result, _ = Pipeline([_BreaksTheModule()], debug=False).run(module)  # no check: no error
    assert len(result.entry.instructions) == 3


def test_unchanged_module_comes_back_as_is() -> None:
    module = parse_module("HloModule m\n\nENTRY e {\n  p = f32[2]{0} parameter(0)\n"
                          "  ROOT n = f32[2]{0} negate(p)\n}\n")
    for cls in PASSES:
        result, changed = cls().run(module)
        assert not changed and result is module, cls.name


def test_fixed_point_stops_at_its_limit() -> None:
    @dataclasses.dataclass(frozen=True)
    class AlwaysChanges:
        name: ClassVar[str] = "always-changes"

        def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
            return module, True

    module = parse_module(TEXT)
    pipeline = Pipeline([FixedPoint((AlwaysChanges(),), max_iterations=3)])
    _, changed = pipeline.run(module)
    assert changed and pipeline._count == 3

