"""A small dimension of a loop nest is written out with literal indices when its columns share
their work (the packed CartPole state's four columns share one step); when they do not and
the code is large, it is looped over instead, so the code is not repeated once per column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.cli import random_inputs
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value

from tests.codegen.test_ops import assert_same

# The modules are FileCheck files, whose CHECK lines count the sine calls in the C.
CODEGEN_C = Path(__file__).parents[1] / "filecheck" / "codegen-c"


def _module(name: str) -> Module:
    return parse_module((CODEGEN_C / name).read_text(), name)


@pytest.mark.needs_cc
def test_unshared_columns_are_looped_over() -> None:
    module = _module("unshared-columns-looped.hlo")
    compiled = compile_module(module, "xla", "cpu")
    inputs = random_inputs(module, 3)
    expected = flatten_value(evaluate(module, inputs))
    for actual, want in zip(compiled.run_flat(inputs), expected, strict=True):
        assert_same(np.asarray(actual), want, "stacked chains")


@pytest.mark.needs_cc
def test_shared_columns_stay_written_out() -> None:
    module = _module("shared-columns-written-out.hlo")
    compiled = compile_module(module, "xla", "cpu")
    inputs = random_inputs(module, 3)
    expected = flatten_value(evaluate(module, inputs))
    for actual, want in zip(compiled.run_flat(inputs), expected, strict=True):
        assert_same(np.asarray(actual), want, "packed step")
