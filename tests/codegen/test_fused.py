"""Hand-written fused modules compiled == interpreted, and the buffers they update in place.

The modules are FileCheck files (tests/filecheck/codegen-c/), whose CHECK lines test the C
they become: one kernel per fusion, loop structure, no stray copies or branches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse.cli import random_inputs
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.ir.verifier import verify
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.runtime.program import CopyThunk, walk
from hlofuse.targets.c import compile_cpu
from hlofuse.targets.c import generate_c as generate

from tests.codegen.test_ops import assert_same

CODEGEN_C = Path(__file__).parents[1] / "filecheck" / "codegen-c"
FILES = ["dot-epilogue-and-horizontal.hlo", "loop-index-maps.hlo", "reduction-fusions.hlo",
         "while-state-in-place.hlo"]


def load(name: str) -> Module:
    module = parse_module((CODEGEN_C / name).read_text(), name)
    verify(module)
    return module


@pytest.mark.needs_cc
@pytest.mark.parametrize("name", FILES)
def test_fused_module_matches_interpreter(name: str) -> None:
    module = load(name)
    inputs = random_inputs(module, 7)
    expected = flatten_value(evaluate(module, inputs))
    executable = compile_cpu(module)
    fusions = [i for i in module.entry.instructions if i.op.text == "fusion"]
    assert len([k for k in executable.kernels if k.kind.startswith("k")]) >= len(fusions)
    for run in (executable, executable.run_thunks):
        actual = flatten_value(run(*inputs))
        assert len(actual) == len(expected)
        for k, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{name} output {k}")


def test_loop_state_is_updated_in_place() -> None:
    generated = generate(load("while-state-in-place.hlo"))
    copies = [t for t in walk(generated.program.thunks) if isinstance(t, CopyThunk)
              and t.reason == "while-back" and id(t) not in generated.assignment.elided]
    assert copies == []
    # The dynamic-update-slice writes straight into the output array it is returned in.
    update = [t for t in generated.program.kernel_thunks() if t.spec.label == "body.updated"][0]
    assert generated.assignment.of(update.outputs[0]) == generated.assignment.of(update.inputs[0])
    assert generated.assignment.of(update.outputs[0]).kind.value == "output"


@pytest.mark.needs_cc
def test_fused_constants_are_read_from_the_pool() -> None:
    text = """HloModule consts
fused {
  p = f32[4]{0} parameter(0)
  c = f32[4]{0} constant({1, 2, 3, 4})
  ROOT m = f32[4]{0} multiply(p, c)
}
ENTRY main {
  x = f32[4]{0} parameter(0)
  ROOT f = f32[4]{0} fusion(x), kind=kLoop, calls=fused
}
"""
    module = parse_module(text)
    x = np.array([1, -1, 0.5, 2], np.float32)
    np.testing.assert_array_equal(compile_cpu(module)(x), x * np.array([1, 2, 3, 4], np.float32))


@pytest.mark.needs_cc
@pytest.mark.parametrize("name", ["concatenate-small-dimension.hlo", "concatenate-seams.hlo",
                                  "clones-computed-once.hlo"])
def test_concatenates_and_clones_match_the_interpreter(name: str) -> None:
    """Concatenates along a small dimension (written out) and a large one (a loop per
    operand), and clones of one value computed once: the same values as the interpreter."""
    module = load(name)
    inputs = random_inputs(module, 3)
    expected = flatten_value(evaluate(module, inputs))
    actual = flatten_value(compile_cpu(module)(*inputs))
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert_same(a, e, f"{name} output {k}")


EULER = """HloModule euler
fused_step {
  fx = f32[256]{0} parameter(0)
  fv = f32[256]{0} parameter(1)
  dt = f32[] constant(0.01)
  dtb = f32[256]{0} broadcast(dt), dimensions={}
  dx = f32[256]{0} multiply(fv, dtb)
  nx = f32[256]{0} add(fx, dx)
  acc = f32[256]{0} negate(fx)
  dv = f32[256]{0} multiply(acc, dtb)
  nv = f32[256]{0} add(fv, dv)
  ROOT out = (f32[256]{0}, f32[256]{0}) tuple(nv, nx)
}
cond {
  cs = (s32[], f32[256]{0}, f32[256]{0}) parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  cn = s32[] constant(100)
  ROOT clt = pred[] compare(ci, cn), direction=LT
}
body {
  bs = (s32[], f32[256]{0}, f32[256]{0}) parameter(0)
  bi = s32[] get-tuple-element(bs), index=0
  bx = f32[256]{0} get-tuple-element(bs), index=1
  bv = f32[256]{0} get-tuple-element(bs), index=2
  step = (f32[256]{0}, f32[256]{0}) fusion(bx, bv), kind=kLoop, calls=fused_step
  bnv = f32[256]{0} get-tuple-element(step), index=0
  bnx = f32[256]{0} get-tuple-element(step), index=1
  one = s32[] constant(1)
  bj = s32[] add(bi, one)
  ROOT bt = (s32[], f32[256]{0}, f32[256]{0}) tuple(bj, bnx, bnv)
}
ENTRY main {
  x = f32[256]{0} parameter(0)
  v = f32[256]{0} parameter(1)
  zero = s32[] constant(0)
  t = (s32[], f32[256]{0}, f32[256]{0}) tuple(zero, x, v)
  ROOT w = (s32[], f32[256]{0}, f32[256]{0}) while(t), condition=cond, body=body
}
"""


@pytest.mark.needs_cc
def test_multi_output_fusion_updates_loop_state_in_place() -> None:
    module = parse_module(EULER)
    generated = generate(module)
    copies = [t for t in walk(generated.program.thunks) if isinstance(t, CopyThunk)
              and t.reason == "while-back" and id(t) not in generated.assignment.elided]
    assert copies == []
    step = [t for t in generated.program.kernel_thunks() if t.spec.label == "step"][0]
    storage = generated.assignment
    # Output 0 (new v) overwrites input 1 (v), output 1 (new x) overwrites input 0 (x).
    assert storage.of(step.outputs[0]) == storage.of(step.inputs[1])
    assert storage.of(step.outputs[1]) == storage.of(step.inputs[0])
    inputs = random_inputs(module, 5)
    expected = flatten_value(evaluate(module, inputs))
    for a, e in zip(flatten_value(compile_cpu(module)(*inputs)), expected):
        assert_same(a, e, "euler")
