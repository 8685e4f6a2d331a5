"""The reset draws of a state of many positions (a chain's masses, a swarm's particles) are
computed in loops over the positions once written out they would be a long straight-line
block (codegen/whole_loop_deferred.py, DEFERRED_WRITTEN_OUT): the kernel stays short enough
for gcc's scheduler and equal to the interpreter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.codegen import whole_loop_deferred
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c.build import generate_c

ROLLOUTS = Path(__file__).parent.parent / "data" / "rollouts"
SCHEDULED = '"schedule-insns", "sched-pressure"'
WHOLE_LOOP = "HLOFUSE_WIDE_VECTORS void"


@pytest.mark.parametrize("name", ["spring_chain.cpu.hlo", "particles.cpu.hlo"])
def test_many_positions_drawn_on_reset_keep_the_kernel_scheduled(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fused = run_strategy(parse_module((ROLLOUTS / name).read_text(), name), "max").module
    text = generate_c(fused).source.text
    whole_loops = text.count(WHOLE_LOOP)  # the time loop's kernel, and others large enough
    assert whole_loops >= 1 and text.count(SCHEDULED) == whole_loops
    # Written out (the limit out of reach), the reset draws alone pass the scheduler's limit.
    monkeypatch.setattr(whole_loop_deferred, "DEFERRED_WRITTEN_OUT", 10**9)
    assert generate_c(fused).source.text.count(SCHEDULED) == whole_loops - 1


@pytest.mark.needs_cc
def test_the_position_loops_compute_the_interpreters_values() -> None:
    name = "spring_chain.cpu.hlo"
    module = parse_module((ROLLOUTS / name).read_text(), name)
    data = np.load(ROLLOUTS / "spring_chain.npz")
    inputs = [data[k] for k in sorted(k for k in data.files if k.startswith("arg"))]
    compiled = compile_module(module, "max", "cpu")
    actual = compiled.run_flat(inputs)
    expected = flatten_value(evaluate(module, inputs))
    for got, want in zip(actual, expected, strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
