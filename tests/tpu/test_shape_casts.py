"""Whole-array kernels holding a reshape the chip's Mosaic refuses (`unsupported shape cast`,
found only by libtpu's compiler) are planned as XLA operations up front, saying which
reshape; the model of what the chip refuses agrees with the measurements it came from."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.tpu.program import plan_kernels
from hlofuse.targets.tpu.shape_casts import refused_on_chip

from tests.tpu.test_interpret import assert_close

MEASURED = Path(__file__).parents[2] / "docs" / "results" / "tpu" / "shape_casts.json"


def test_the_model_agrees_with_the_chip() -> None:
    """1,196 reshapes compiled on a v5e (benchmarks/tpu_shape_casts.py): the model predicts
    568 of the 593 refused and wrongly refuses only (4, 16) -> (16, 4), loaded and computed."""
    records = json.loads(MEASURED.read_text())
    predicted = [refused_on_chip(tuple(r["src"]), tuple(r["dst"])) for r in records]
    refused = [not r["compiles"] for r in records]
    assert (len(records), sum(refused)) == (1196, 593)
    assert sum(p and f for p, f in zip(predicted, refused)) == 568
    wrong = {(tuple(r["src"]), tuple(r["dst"]))
             for p, r in zip(predicted, records) if p and r["compiles"]}
    assert wrong == {((4, 16), (16, 4))}


@pytest.mark.parametrize(("src", "dst", "refused"), [
    ((4000,), (4, 1000), True),  # CartPole's reset counters at N = 1,000
    ((1024,), (8, 128), False),  # whole lane tiles
    ((1024,), (16, 64), True),
    ((8, 125), (2, 4, 125), False),  # the last dimension kept
    ((1000, 1), (4, 250), False),  # from a column
    ((4, 250), (1000, 1), True),  # to a column
    ((2, 500), (2, 4, 125), False),  # the leading dimension kept
    ((), (1, 1), False),
])
def test_reshape_kinds(src: tuple[int, ...], dst: tuple[int, ...], refused: bool) -> None:
    assert refused_on_chip(src, dst) is refused


def _module(src: str, dst: str) -> str:
    return f"""HloModule m
ENTRY e {{
  p = u32[{src}] parameter(0)
  one = u32[] constant(1)
  b = u32[{src}] broadcast(one), dimensions={{}}
  a = u32[{src}] add(p, b)
  r = u32[{dst}] reshape(a)
  ROOT x = u32[{dst}] multiply(r, r)
}}"""


def test_a_refused_reshape_makes_the_kernel_an_xla_operation() -> None:
    module = parse_module(_module("4000", "4,1000"), "m")
    [kernel] = plan_kernels(run_strategy(module, "xla", debug=False).module, True)
    assert kernel.mode == "xla-op" and "reshape u32[4000] to u32[4,1000]" in kernel.reason
    assert "unsupported shape cast" in kernel.reason
    inputs = [np.arange(4000, dtype=np.uint32)]
    got = compile_module(module, "xla", "tpu-interpret").run_flat(inputs)
    assert_close(got, flatten_value(evaluate(module, inputs)), 0)


def test_an_accepted_reshape_stays_a_pallas_kernel() -> None:
    module = parse_module(_module("1024", "8,128"), "m")
    [kernel] = plan_kernels(run_strategy(module, "xla", debug=False).module, True)
    assert (kernel.mode, kernel.layout) == ("pallas", "whole"), kernel.reason
