"""XLA's layout assignment and layout normalisation for `xla-gpu`
(`xla_gpu/layout_assignment.py`, `layout_propagation.py`, `layout_normalization.py`): text in,
text out, values checked against the interpreter, and the layouts XLA's own
`after_layout-assignment` dumps show."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from hlofuse.compare_xla.layouts import same_layouts, xla_gpu_layouts
from hlofuse.fusion.xla_gpu.dynamic_dimension_simplifier import DynamicDimensionSimplifier
from hlofuse.fusion.xla_gpu.layout_assignment import (
    align_layouts,
    assign_layouts,
    reshape_is_bitcast,
)
from hlofuse.fusion.xla_gpu.layout_normalization import GpuLayoutAssignment
from hlofuse.fusion.xla_gpu.transpose_folding import TransposeFolding
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.passes.cse import CommonSubexpressionElimination
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.decision_log import DecisionLog
from hlofuse.reference.interpreter import evaluate, flatten_value

DATA = Path(__file__).parents[1] / "data" / "xla_gpu"


def normalised(text: str) -> tuple[str, list[np.ndarray], list[np.ndarray]]:
    """The module after layout assignment, normalisation, CSE and DCE, and both modules'
    results on random arguments."""
    before = parse_module(text)
    after, _ = GpuLayoutAssignment().run(before)
    after, _ = CommonSubexpressionElimination().run(after)
    after, _ = DeadCodeElimination().run(after)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32)
            for p in sorted((i for i in before.entry.instructions if i.op is Op.PARAMETER),
                            key=lambda i: i.parameter_number)]
    return (module_text(after), flatten_value(evaluate(before, args)),
            flatten_value(evaluate(after, args)))


# rollout_acrobot's `stack` of a step: two [1,8] rows concatenated and transposed to [8,2],
# which the step's element-wise ops read row-major. XLA gives the transpose's operand the
# permuted layout: the reshapes and the concatenate run column-major, the concatenate along
# the minor dimension, and the transpose is a bitcast. The rewritten instructions are new ones
# with new names, as XLA's normaliser makes them.
STACK = """
HloModule m
ENTRY e {
  a = f32[8] parameter(0)
  b = f32[8] parameter(1)
  ra = f32[1,8] reshape(a)
  rb = f32[1,8] reshape(b)
  c = f32[2,8] concatenate(ra, rb), dimensions={0}
  t = f32[8,2] transpose(c), dimensions={1,0}
  ROOT m = f32[8,2] multiply(t, t)
}
"""

STACK_AFTER = """\
HloModule m, entry_computation_layout={(f32[8]{0}, f32[8]{0})->f32[8,2]{1,0}}

ENTRY e {
  a = f32[8]{0} parameter(0)
  b = f32[8]{0} parameter(1)
  reshape.0 = f32[8,1]{1,0} reshape(a)
  reshape.1 = f32[8,1]{1,0} reshape(b)
  concatenate.0 = f32[8,2]{1,0} concatenate(reshape.0, reshape.1), dimensions={1}
  ROOT m = f32[8,2]{1,0} multiply(concatenate.0, concatenate.0)
}
"""


def test_a_transposed_concatenate_runs_along_the_minor_dimension() -> None:
    text, want, got = normalised(STACK)
    assert text == STACK_AFTER
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(w, g)


# iota_transpose's third and fourth results: XLA's log copies `x` twice (the transpose's
# operand and the reshape's are wanted laid out {1,0,2}); normalisation writes both copies as
# the same transpose, the reshape and second transpose as bitcasts, and CSE keeps one.
COPIES = """
HloModule m
ENTRY e {
  x = f32[2,3,4] parameter(0)
  t2 = f32[4,2,3] transpose(x), dimensions={2,0,1}
  r = f32[6,4] reshape(x)
  t3 = f32[4,6] transpose(r), dimensions={1,0}
  ROOT out = (f32[4,2,3], f32[4,6]) tuple(t2, t3)
}
"""


def test_copies_where_constraints_meet_become_one_transpose() -> None:
    module = parse_module(COPIES)
    assignment = assign_layouts(module)
    layouts = {inst.name: layout for (inst, index), layout in assignment.buffers.items()
               if not index}
    assert layouts["r"] == (0, 1) and layouts["x"] == (2, 1, 0)
    assert sorted(user.name for user, _ in assignment.copies()) == ["r", "t2"]
    text, want, got = normalised(COPIES)
    assert text.count(" transpose(") == 1 and " reshape(" in text
    for w, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(w, g)


# vmap_params_rollout's loop: the body reads the state's two columns and writes the new state
# as the transpose of their stacked rows. The transpose's bitcast layout reaches the body's
# parameter through the loop's back edge (XLA's first round), so the state is column-major in
# the loop; the entry copies the parameter into that layout before the loop and back after
# it (XLA's dump of this module shows the same layouts and copies).
LOOP = """
HloModule m
cond {
  p = (s32[], f32[4,2]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  q = (s32[], f32[4,2]) parameter(0)
  k = s32[] get-tuple-element(q), index=0
  one = s32[] constant(1)
  j = s32[] add(k, one)
  s = f32[4,2] get-tuple-element(q), index=1
  c0 = f32[4,1] slice(s), slice={[0:4], [0:1]}
  c1 = f32[4,1] slice(s), slice={[0:4], [1:2]}
  r0 = f32[1,4] reshape(c0)
  r1 = f32[1,4] reshape(c1)
  e0 = f32[1,4] exponential(r0)
  e1 = f32[1,4] sine(r1)
  st = f32[2,4] concatenate(e0, e1), dimensions={0}
  t = f32[4,2] transpose(st), dimensions={1,0}
  ROOT r = (s32[], f32[4,2]) tuple(j, t)
}
ENTRY e {
  x = f32[4,2] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4,2]) tuple(zero, x)
  w = (s32[], f32[4,2]) while(init), condition=cond, body=body
  ROOT out = f32[4,2] get-tuple-element(w), index=1
}
"""


def test_loop_state_takes_the_layout_its_body_reads_it_in() -> None:
    module = parse_module(LOOP)
    assignment = assign_layouts(module)
    loop = next(i for i in module.entry.instructions if i.op is Op.WHILE)
    assert assignment.layout_of(loop, (1,)) == (0, 1)
    assert [(user.name, k) for user, k in assignment.copies()] == [("w", 0), ("out", -1)]
    text, want, got = normalised(LOOP)
    assert text.count(" transpose(") == 2  # into the loop and out of it; none in the body
    for w, g in zip(want, got, strict=True):
        np.testing.assert_allclose(w, g, rtol=1e-6)


def test_an_unmodelled_op_leaves_the_module_and_says_why() -> None:
    text = """
HloModule m
ENTRY e {
  x = f32[4,4] parameter(0)
  ROOT c = f32[4,4] custom-call(x), custom_call_target="Cholesky"
}
"""
    module = parse_module(text)
    log = DecisionLog()
    after, changed = GpuLayoutAssignment().run(module, log)
    assert after is module and not changed
    assert any(d.rule == "layout-not-modelled" and "custom-call" in d.message for d in log)


@pytest.mark.parametrize(("in_dims", "in_layout", "out_dims"), [
    ((8, 2), (1, 0), (8, 2, 1)),
    ((3, 8, 5, 7, 11), (3, 2, 1, 0, 4), (4, 3, 2, 7, 5, 11)),
    ((2, 8), (0, 1), (16,)),
    ((4, 6), (0, 1), (4, 2, 3)),
])
def test_aligned_layouts_make_the_reshape_a_bitcast(in_dims: tuple[int, ...],
                                                    in_layout: tuple[int, ...],
                                                    out_dims: tuple[int, ...]) -> None:
    aligned = align_layouts(in_dims, in_layout, out_dims)
    every = [tuple(p) for p in itertools.permutations(range(len(out_dims)))]
    if aligned is None:  # only where no layout of the output makes the reshape a bitcast
        assert not any(reshape_is_bitcast(in_dims, in_layout, out_dims, p) for p in every)
    else:
        assert reshape_is_bitcast(in_dims, in_layout, out_dims, aligned)


# rollout_mountain_car_mlp's policy layer: the observation rows are stacked and transposed
# for the dot; XLA's TransposeFolding makes the dot contract the stack's dimension 0 instead
# (its dump after transpose-folding), so layout assignment sees no transpose.
FOLD = """
HloModule m
ENTRY e {
  s = f32[2,8] parameter(0)
  w = f32[2,64] parameter(1)
  t = f32[8,2] transpose(s), dimensions={1,0}
  ROOT d = f32[8,64] dot(t, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_a_transposed_dot_operand_folds_into_the_dot() -> None:
    before = parse_module(FOLD)
    after, changed = TransposeFolding().run(before)
    assert changed
    dot = after.entry.root
    assert [o.name for o in dot.operands] == ["s", "w"]
    assert dot.ints("lhs_contracting_dims") == (0,) and dot.name == "d"
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((2, 8)).astype(np.float32),
            rng.standard_normal((2, 64)).astype(np.float32)]
    np.testing.assert_allclose(flatten_value(evaluate(after, args))[0],
                               flatten_value(evaluate(before, args))[0], rtol=1e-5)
    # A transpose that moves the batch dimension off the major end stays (no matrix layout).
    batched = parse_module("""
HloModule m
ENTRY e {
  x = f32[3,4,5] parameter(0)
  y = f32[5,4,3] parameter(1)
  t = f32[5,4,3] transpose(x), dimensions={2,1,0}
  ROOT d = f32[5,4,4] dot(t, y), lhs_batch_dims={0}, rhs_batch_dims={0},
    lhs_contracting_dims={2}, rhs_contracting_dims={2}
}
""")
    assert TransposeFolding().run(batched)[1] is False


# XLA's own layouts (its after_layout-assignment dumps of the stored corpus, read by
# `benchmarks/xla_gpu_layouts.py --extract`): the same arrays laid out other than row-major
# and the same copies on 52 of the 54 programs (docs/xla-fidelity.md, "Layouts").
XLA_LAYOUTS = json.loads((DATA / "h100.layouts.json").read_text())
LAYOUTS_AS_XLA = 52


@pytest.mark.thorough
@pytest.mark.parametrize("name", ["iota_transpose", "vmap_params_rollout",
                                  "rollout_mountain_car_continuous"])
def test_layouts_are_xlas_on_programs_that_lay_arrays_out(name: str) -> None:
    ours = xla_gpu_layouts((DATA / f"{name}.before.hlo").read_text())
    assert XLA_LAYOUTS[name]["laid_out"], name  # XLA lays something out other than row-major
    assert same_layouts(XLA_LAYOUTS[name], ours), (XLA_LAYOUTS[name], ours)


@pytest.mark.slow
def test_layouts_are_xlas_on_the_corpus() -> None:
    same = [name for name in sorted(XLA_LAYOUTS)
            if same_layouts(XLA_LAYOUTS[name],
                            xla_gpu_layouts((DATA / f"{name}.before.hlo").read_text()))]
    assert len(same) >= LAYOUTS_AS_XLA, same


# rollout_grid_forage's batched gather: the normaliser's iota column in front of JAX's
# concatenate of the index columns; XLA's DynamicDimensionSimplifier flattens the two (its dump
# after dynamic-dimension-simplifier: one s32[8,4] concatenate of four operands).
NESTED = """
HloModule m
ENTRY e {
  i = s32[8,1] parameter(0)
  a = s32[8,1] parameter(1)
  b = s32[8,1] parameter(2)
  c = s32[8,1] parameter(3)
  inner = s32[8,3] concatenate(a, b, c), dimensions={1}
  outer = s32[8,4] concatenate(i, inner), dimensions={1}
  other = s32[16,3] concatenate(inner, inner), dimensions={0}
  ROOT r = (s32[8,4], s32[16,3]) tuple(outer, other)
}
"""


def test_nested_concatenates_along_one_dimension_are_one() -> None:
    after, changed = DynamicDimensionSimplifier().run(parse_module(NESTED))
    assert changed
    outer = next(i for i in after.entry.instructions if i.name == "outer")
    assert [o.name for o in outer.operands] == ["i", "a", "b", "c"]
    other = next(i for i in after.entry.instructions if i.name == "other")
    assert [o.name for o in other.operands] == ["inner", "inner"]  # another dimension
