"""A small dimension of a loop nest is written out with literal indices when its columns share
their work (the packed CartPole state's four columns share one step); when they do not and
the code is large, it is looped over instead, so the code is not repeated once per column."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.cli import random_inputs
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c import generate_c as generate

from tests.codegen.test_ops import assert_same

STEPS = 80  # long enough that writing the rows out would pass WRITE_OUT_BUDGET


def _sine_calls(source: str) -> int:
    """Calls of the f32 sine in the kernels (the math library's own text excluded)."""
    return source[source.index("/* kernel"):].count("hlofuse_sinf(")


def _chain(name: str, param: str) -> tuple[list[str], str]:
    lines, value = [], param
    for k in range(STEPS):
        lines.append(f"  {name}s{k} = f32[4,8] sine({value})")
        lines.append(f"  {name}m{k} = f32[4,8] multiply({name}s{k}, {param})")
        value = f"{name}m{k}"
    return lines, value


def _stacked_chains() -> str:
    a_lines, a = _chain("a", "p0")
    b_lines, b = _chain("b", "p1")
    body = "\n".join(a_lines + b_lines)
    return f"""HloModule stacked
ENTRY e {{
  p0 = f32[4,8] parameter(0)
  p1 = f32[4,8] parameter(1)
{body}
  ROOT c = f32[8,8] concatenate({a}, {b}), dimensions={{0}}
}}"""


def _packed_step() -> str:
    # One column's value feeds every column: written out, the columns share it.
    lines, value = [], "x"
    for k in range(STEPS):
        lines.append(f"  s{k} = f32[64] sine({value})")
        lines.append(f"  m{k} = f32[64] multiply(s{k}, x)")
        value = f"m{k}"
    body = "\n".join(lines)
    return f"""HloModule packed
ENTRY e {{
  p = f32[64,4] parameter(0)
  col = f32[64,1] slice(p), slice={{[0:64], [0:1]}}
  x = f32[64] reshape(col)
{body}
  b = f32[64,4] broadcast({value}), dimensions={{0}}
  ROOT r = f32[64,4] add(b, p)
}}"""


@pytest.mark.needs_cc
def test_unshared_columns_are_looped_over() -> None:
    module = parse_module(_stacked_chains())
    compiled = compile_module(module, "xla", "cpu")
    source = generate(compiled.fusion.module).source.text
    # Written out, each of the 8 rows of the concatenate would repeat its chain: 8 * 30 calls.
    assert _sine_calls(source) == 2 * STEPS
    inputs = random_inputs(module, 3)
    expected = flatten_value(evaluate(module, inputs))
    for actual, want in zip(compiled.run_flat(inputs), expected, strict=True):
        assert_same(np.asarray(actual), want, "stacked chains")


@pytest.mark.needs_cc
def test_shared_columns_stay_written_out() -> None:
    module = parse_module(_packed_step())
    compiled = compile_module(module, "xla", "cpu")
    source = generate(compiled.fusion.module).source.text
    assert _sine_calls(source) == STEPS  # the chain once, shared by the columns
    inputs = random_inputs(module, 3)
    expected = flatten_value(evaluate(module, inputs))
    for actual, want in zip(compiled.run_flat(inputs), expected, strict=True):
        assert_same(np.asarray(actual), want, "packed step")
