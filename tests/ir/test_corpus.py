"""Every JAX corpus program parses, verifies, round-trips, and evaluates to JAX's outputs."""

from __future__ import annotations

from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.ir.verifier import verify
from hlofuse.reference.interpreter import evaluate, flatten_value

from tests.conftest import CORPUS, assert_matches


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 20


def test_round_trip(corpus_case) -> None:
    name, text, _, _ = corpus_case
    module = parse_module(text, f"{name}.hlo")
    verify(module)
    printed = module_text(module)
    again = parse_module(printed)
    verify(again)
    assert module_text(again) == printed
    assert len(list(again.all_instructions())) == len(list(module.all_instructions()))


def test_interpreter_matches_jax(corpus_case) -> None:
    name, text, inputs, expected = corpus_case
    module = parse_module(text, f"{name}.hlo")
    actual = flatten_value(evaluate(module, inputs))
    assert_matches(actual, expected, name)
