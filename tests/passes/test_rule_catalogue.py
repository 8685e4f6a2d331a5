"""Every rule id a pass logs is in the rule catalogue, under that pass.

Two nets: the ids logged when every strategy (and the rewrites before fusion) runs over the
JAX corpus and the CartPole variants, and a scan of the passes', fusion's and analysis's
sources for kebab-case string literals, which catches rules no program here triggers."""

from __future__ import annotations

import ast
import functools
import itertools
import re
from pathlib import Path

import pytest

import hlofuse
from hlofuse.envs import cartpole as cp
from hlofuse.fusion.strategies import _SWITCHES, ALL_PASSES, STRATEGIES, run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.passes.rule_catalogue import CATALOGUE, OURS, RULES, catalogue_text

from tests.conftest import CORPUS, CORPUS_DIR

PACKAGE = Path(hlofuse.__file__).parent
KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$")
RULE_ID = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
# The strategies, plus one that turns on every rewrite before fusion (unrolling included),
# run over the programs with loops only (the rewrites do nothing to the others).
REWRITES = "xla+rng_expansion+concat_forwarding+scalarize_state+unroll=2"
# Kebab-case strings in those sources that are not rule ids (a FixedPoint's default label).
NOT_RULES = frozenset({"fixed-point"})


@functools.cache
def _programs() -> tuple[tuple[str, Module], ...]:
    programs = [(name, parse_module((CORPUS_DIR / f"{name}.hlo").read_text(), f"{name}.hlo"))
                for name in CORPUS]
    for rng, state in itertools.product(("custom_call", "fused"), ("packed", "split")):
        programs.append((f"cartpole {rng}/{state}",
                         cp.trace(cp.Variant(rng=rng, state=state), 4, 3)))
    programs.append(("cartpole deterministic",
                     cp.trace(cp.Variant(state="packed", deterministic=True), 4, 3)))
    return tuple(programs)


@pytest.mark.thorough
@pytest.mark.parametrize("strategy", [*STRATEGIES, REWRITES])
def test_logged_rules_are_catalogued(strategy: str) -> None:
    missing: set[str] = set()
    for name, module in _programs():
        if strategy == REWRITES and not any(i.op is Op.WHILE
                                            for i in module.all_instructions()):
            continue
        for record in run_strategy(module, strategy, debug=False).decisions:
            rule = RULES.get(record.rule)
            if rule is None or record.pass_name not in rule.passes:
                missing.add(f"{record.pass_name} {record.rule} (first seen in {name})")
    assert sorted(missing) == []


def _literals() -> dict[str, str]:
    """Every kebab-case string literal of passes/, fusion/ and analysis/, with one place."""
    found: dict[str, str] = {}
    for layer in ("passes", "fusion", "analysis"):
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            if path.name == "rule_catalogue.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                        and KEBAB.match(node.value)):
                    found.setdefault(node.value, f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_rule_literals_in_the_sources_are_catalogued() -> None:
    other_names = ({cls.name for cls in ALL_PASSES} | {op.text for op in Op} | set(STRATEGIES)
                   | set(_SWITCHES) | NOT_RULES)
    unknown = [f"{where}: {text}" for text, where in _literals().items()
               if text not in RULES and text not in other_names]
    assert unknown == []


def test_the_scan_sees_rule_literals() -> None:
    literals = _literals()
    assert {"code-duplication-too-high", "whole-loop-cross-lane-access", "slice-forwarded",
            "cost-model-loss"} <= literals.keys()


def test_rows_are_complete() -> None:
    pass_names = {cls.name for cls in ALL_PASSES}
    for rule in CATALOGUE:
        assert RULE_ID.match(rule.id), rule.id
        assert rule.passes and set(rule.passes) <= pass_names, rule
        assert rule.meaning and rule.xla, rule
        assert rule.xla == OURS or re.match(r"^xla/[\w/]+\.cc: \w", rule.xla), rule
    text = catalogue_text()
    assert "cost-model-gain  [priority-fusion, gpu-priority-fusion]" in text
    assert "follows: xla/service/gpu/gpu_fusible.cc: FusionFitsInBudget" in text


def test_explain_rules_prints_the_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    from hlofuse.cli import main

    assert main(["explain", "--rules"]) == 0
    out = capsys.readouterr().out
    assert out == catalogue_text()
    assert all(f"{rule.id}  [" in out for rule in CATALOGUE)
    assert main(["explain"]) == 2
    assert "--rules" in capsys.readouterr().err
