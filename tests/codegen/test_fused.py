"""Hand-written fused modules (tests/codegen/data/*.hlo) compiled == interpreted, and the
shape of the code they become: one kernel per fusion, updates in place, no stray copies."""

from __future__ import annotations

import re
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

DATA = Path(__file__).parent / "data"
FILES = sorted(p.name for p in DATA.glob("*.hlo"))


def load(name: str) -> Module:
    module = parse_module((DATA / name).read_text(), name)
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


def _driver(source: str) -> str:
    return source[source.index("int hlofuse_run"):]


def kernel_text(source: str, label: str) -> str:
    """The C function of the kernel whose comment starts with `label`."""
    start = source.index(f"): {label}:")
    return source[start:source.index("\n}\n", start)]


def test_loop_state_is_updated_in_place() -> None:
    generated = generate(load("loop_in_place.hlo"))
    copies = [t for t in walk(generated.program.thunks) if isinstance(t, CopyThunk)
              and t.reason == "while-back" and id(t) not in generated.assignment.elided]
    assert copies == []
    loop = _driver(generated.source.text).split("while (1)")[1]
    assert "memcpy" not in loop
    # The dynamic-update-slice writes straight into the output array it is returned in.
    update = [t for t in generated.program.kernel_thunks() if t.spec.label == "body.updated"][0]
    assert generated.assignment.of(update.outputs[0]) == generated.assignment.of(update.inputs[0])
    assert generated.assignment.of(update.outputs[0]).kind.value == "output"


def test_kernels_list_the_instructions_they_fuse() -> None:
    source = generate(load("reductions.hlo")).source.text
    comments = re.findall(r"/\* kernel (\w+) \((\w+)\): ([^*]*)\*/", source)
    assert [kind for _, kind, _ in comments] == ["kInput"] * 4
    listed = " ".join(c for _, _, c in comments)
    for name in ("fused_row.sq", "fused_column.e", "fused_argmax.am", "fused_epilogue.total"):
        assert name in listed


def test_reduction_kernels_put_the_reduced_loop_inside() -> None:
    source = generate(load("reductions.hlo")).source.text
    row = kernel_text(source, "main.row")
    # The reduced values and the second output (the producer, of the input's shape) are
    # computed in one pass; then each of the 16 contiguous rows of 40 is summed in NumPy's
    # pairwise order, as the reference sums them.
    first, second = row.split("for (int64_t i", 2)[1:]
    assert "< 640;" in first and re.search(r"t\d+\[i\d+\] = ", first)
    assert "out_fused_row_e_h[" in first  # named after the instruction it stores
    assert re.search(r"< 16;.*\n.*\n.*hlofuse_pairwise_f32\(\(t\d+ \+ j\d+\), 40\)", second)
    column = kernel_text(source, "main.col")
    # Column reduction: rows of the input outside, the 48 contiguous columns inside.
    assert re.search(r"for \(int64_t red\d+ = 0; red\d+ < 64;.*\n\s*for \(int64_t j\d+ = b\d+;",
                     column)


def test_horizontal_fusion_is_one_kernel_with_two_loops() -> None:
    generated = generate(load("output_fusion.hlo"))
    source = generated.source.text
    body = kernel_text(source, "main.h")
    assert len(re.findall(r"for \(int64_t i\d+ = 0; i\d+ < (\d+);", body)) == 2
    dense = kernel_text(source, "main.dense")
    assert "hlofuse_rt_dot_f32(" in dense


def test_flat_loops_for_elementwise_and_nests_for_transposes() -> None:
    source = generate(load("loop_index_maps.hlo")).source.text
    kernel = kernel_text(source, "main.f")
    # The transpose needs per-dimension indices; the second output (sum) is a flat loop over
    # its 24 elements reading the bias with a modulo.
    assert re.search(r"for \(int64_t i\d+ = 0; i\d+ < 24; \+\+i\d+\)", kernel)
    assert "% 4" in kernel


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


PACKED = """HloModule packed
fused_pack {
  x = f32[64,1]{1,0} parameter(0)
  v = f32[64,1]{1,0} parameter(1)
  done = pred[64,4]{1,0} parameter(2)
  fresh = f32[64,4]{1,0} parameter(3)
  s = f32[64,1]{1,0} sine(x)
  c = f32[64,1]{1,0} cosine(x)
  n = f32[64,1]{1,0} negate(v)
  packed = f32[64,4]{1,0} concatenate(x, s, c, n), dimensions={1}
  ROOT r = f32[64,4]{1,0} select(done, fresh, packed)
}
ENTRY main {
  a = f32[64,1]{1,0} parameter(0)
  b = f32[64,1]{1,0} parameter(1)
  d = pred[64,4]{1,0} parameter(2)
  f = f32[64,4]{1,0} parameter(3)
  ROOT k = f32[64,4]{1,0} fusion(a, b, d, f), kind=kLoop, calls=fused_pack
}
"""


@pytest.mark.needs_cc
def test_concatenate_along_a_small_dimension_is_written_out() -> None:
    module = parse_module(PACKED)
    source = generate(module).source.text
    kernel = kernel_text(source, "k")
    # One branch-free loop over the rows writes the four columns, each from its own operand;
    # x is loaded once for its column, the sine and the cosine.
    assert len(re.findall(r"for \(int64_t i\d+ = 0; i\d+ <", kernel)) == 1
    assert "if (" not in kernel and "< 1 ?" not in kernel
    assert kernel.count("x_h[") == 1 and kernel.count("out_r_h[") == 4
    inputs = random_inputs(module, 3)
    expected = flatten_value(evaluate(module, inputs))
    assert_same(compile_cpu(module)(*inputs), expected[0], "packed")


SPLIT = """HloModule split
fused_join {
  a = f32[40]{0} parameter(0)
  b = f32[24]{0} parameter(1)
  s = f32[40]{0} sine(a)
  n = f32[24]{0} negate(b)
  ROOT j = f32[64]{0} concatenate(s, n), dimensions={0}
}
ENTRY main {
  x = f32[40]{0} parameter(0)
  y = f32[24]{0} parameter(1)
  ROOT k = f32[64]{0} fusion(x, y), kind=kLoop, calls=fused_join
}
"""


@pytest.mark.needs_cc
def test_concatenate_along_a_large_dimension_splits_the_loop() -> None:
    module = parse_module(SPLIT)
    kernel = kernel_text(generate(module).source.text, "k")
    # One branch-free loop per operand, each over its own range of the output.
    assert re.search(r"for \(int64_t i\d+ = 0; i\d+ < 40;", kernel)
    assert re.search(r"for \(int64_t i\d+ = 40; i\d+ < 64;", kernel)
    assert "if (" not in kernel and " ? " not in kernel
    inputs = random_inputs(module, 3)
    expected = flatten_value(evaluate(module, inputs))
    assert_same(compile_cpu(module)(*inputs), expected[0], "split")


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


CLONES = """HloModule clones
fused_hash {
  p = u32[64]{0} parameter(0)
  k = u32[] parameter(1)
  q = u32[64]{0} parameter(2)
  kb = u32[64]{0} broadcast(k), dimensions={}
  c13 = u32[] constant(13)
  c13b = u32[64]{0} broadcast(c13), dimensions={}
  a1 = u32[64]{0} add(p, kb)
  s1 = u32[64]{0} shift-left(a1, c13b)
  x1 = u32[64]{0} xor(s1, a1)
  a2 = u32[64]{0} add(p, kb)
  s2 = u32[64]{0} shift-left(a2, c13b)
  x2 = u32[64]{0} xor(s2, a2)
  o2 = u32[64]{0} multiply(x2, x2)
  joined = u32[128]{0} concatenate(q, x1), dimensions={0}
  back = u32[64]{0} slice(joined), slice={[64:128]}
  o3 = u32[64]{0} add(back, q)
  ROOT t = (u32[64]{0}, u32[64]{0}, u32[64]{0}) tuple(x1, o2, o3)
}
ENTRY main {
  x = u32[64]{0} parameter(0)
  y = u32[] parameter(1)
  z = u32[64]{0} parameter(2)
  ROOT f = (u32[64]{0}, u32[64]{0}, u32[64]{0}) fusion(x, y, z), kind=kLoop, calls=fused_hash
}
"""


@pytest.mark.needs_cc
def test_clones_and_respellings_of_one_value_are_computed_once() -> None:
    # Fusion with duplication leaves clones of a producer in one fused computation (a2 of
    # a1), and a slice of a concatenate reads x1 at (i + 64) - 64: one hash per element, and
    # the range of i + 64 picks the concatenate's operand without a branch.
    module = parse_module(CLONES)
    kernel = kernel_text(generate(module).source.text, "f")
    assert kernel.count("<< 13") == 1
    assert "if (" not in kernel and " ? " not in kernel
    assert "hlofuse_shl" not in kernel  # a literal shift amount is C's own shift
    inputs = random_inputs(module, 5)
    expected = flatten_value(evaluate(module, inputs))
    actual = flatten_value(compile_cpu(module)(*inputs))
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert_same(a, e, f"clones output {k}")
