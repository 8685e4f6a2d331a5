"""XLA's ScatterExpander for scatters of one index, HandleAdd's rule for an addition of a
dynamic-update-slice of zeros, and today's ShouldFuseInPlaceOp for a producer that is the
buffer updated in place, as `xla-gpu` runs them: HLO text in, HLO text out, values the
reference interpreter's."""

from __future__ import annotations

import numpy as np

from hlofuse.api import compile_module
from hlofuse.fusion.xla_gpu.scatter_expander import ScatterExpander
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.parser import parse_module
from hlofuse.passes.arithmetic_identities import ArithmeticIdentities
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.decision_log import DecisionLog
from hlofuse.passes.manager import Pass, Pipeline
from hlofuse.reference.interpreter import evaluate, flatten_value

from tests.xla_gpu.test_gather_scatter import _same_values, _text

# rollout_jacobi_rope's scatter-add.11 (x.at[:, 1:].add(u) under jax.vmap) and
# rollout_spring_chain's scatter.5 (x.at[:, k].set(v) into zeros, then added to a broadcast).
SCATTERS = """
HloModule scatters
add_f32 {
  lhs = f32[] parameter(0)
  rhs = f32[] parameter(1)
  ROOT sum = f32[] add(lhs, rhs)
}
second {
  old = f32[] parameter(0)
  ROOT new = f32[] parameter(1)
}
ENTRY e {
  x = f32[8,10,2] parameter(0)
  u = f32[8,9,2] parameter(1)
  v = f32[8,2] parameter(2)
  one = s32[1] constant({1})
  last = s32[1] constant({9})
  s = f32[8,10,2] scatter(x, one, u), update_window_dims={0,1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={1}, index_vector_dim=0, indices_are_sorted=true, unique_indices=true, to_apply=add_f32
  zero = f32[] constant(0)
  zeros = f32[8,10,2] broadcast(zero), dimensions={}
  t = f32[8,10,2] scatter(zeros, last, v), update_window_dims={0,1}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, index_vector_dim=0, indices_are_sorted=true, unique_indices=true, to_apply=second
  g = f32[2] constant({0, -9.8})
  gravity = f32[8,10,2] broadcast(g), dimensions={2}
  w = f32[8,10,2] add(t, gravity)
  ROOT r = (f32[8,10,2], f32[8,10,2]) tuple(s, w)
}
"""


def _run(module: Module, passes: list[Pass]) -> tuple[Module, DecisionLog]:
    log = DecisionLog()
    out, _ = Pipeline([*passes, DeadCodeElimination()], debug=True, log=log).run(module)
    return out, log


def _args() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape).astype(np.float32)
            for shape in ((8, 10, 2), (8, 9, 2), (8, 2))]


def _chain(inst: Instruction) -> list[str]:
    """The ops from `inst` down its first operands."""
    ops = [inst.op.text]
    while inst.operands:
        inst = inst.operands[0]
        ops.append(inst.op.text)
    return ops


def test_a_scatter_of_one_constant_index_is_a_dynamic_update_slice() -> None:
    """XLA's per-pass dump of the scatter-add: `dynamic-update-slice(x, add(slice(x), u), 0,
    1, 0)` once the loop of one iteration, the map and the validity check are gone; an
    overwriting scatter writes the reshaped update without reading the old window."""
    module = parse_module(SCATTERS)
    out, log = _run(module, [ScatterExpander()])
    added, overwritten = out.entry.root.operands[0], out.entry.root.operands[1].operands[0]
    assert added.op.text == overwritten.op.text == "dynamic-update-slice"
    update = added.operands[1]
    assert _text(update) == "sum.0 = f32[8,9,2]{2,1,0} add(slice.0, u)"
    assert _text(update.operands[0]) == ("slice.0 = f32[8,9,2]{2,1,0} slice(x), "
                                         "slice={[0:8], [1:10], [0:2]}")
    assert [_text(i).split(" = ")[1] for i in added.operands[2:]] == [
        "s32[] constant(0)", "s32[] constant(1)", "s32[] constant(0)"]
    assert _chain(overwritten.operands[1]) == ["reshape", "parameter"]
    assert overwritten.operands[1].shape.dims == (8, 1, 2)
    assert [r.rule for r in log] == ["simple-scatter-expanded"] * 2
    _same_values(module, out, _args())


def test_add_of_a_dynamic_update_slice_of_zeros_adds_only_the_window() -> None:
    """HandleAdd: `A + dynamic-update-slice(broadcast(0), U, s)` is
    `dynamic-update-slice(A, slice(A) + U, s)` (a slice: the starts are constants)."""
    module = parse_module(SCATTERS)
    out, log = _run(module, [ScatterExpander(), ArithmeticIdentities()])
    result = out.entry.root.operands[1]
    assert _chain(result)[:2] == ["dynamic-update-slice", "broadcast"]
    window = result.operands[1]
    assert _text(window) == "add.0 = f32[8,1,2]{2,1,0} add(slice.1, reshape.0)"
    assert _text(window.operands[0]) == ("slice.1 = f32[8,1,2]{2,1,0} slice(gravity), "
                                         "slice={[0:8], [9:10], [0:2]}")
    assert "add-of-zero-update" in {r.rule for r in log}
    _same_values(module, out, _args())


def test_other_scatters_of_one_index_stay_scatters() -> None:
    """Not modelled: an index known only at run time (XLA keeps a validity check and a
    select), a window outside the operand, a computation of more than one op (a map in XLA);
    and a scatter of several indices is the ScatterSimplifier's."""
    module = parse_module("""
HloModule left
twice {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  pq = f32[] add(p, q)
  ROOT pqq = f32[] add(pq, q)
}
add_f32 {
  lhs = f32[] parameter(0)
  rhs = f32[] parameter(1)
  ROOT sum = f32[] add(lhs, rhs)
}
ENTRY e {
  x = f32[8,10,2] parameter(0)
  u = f32[8,9,2] parameter(1)
  i = s32[1] parameter(2)
  far = s32[1] constant({2})
  one = s32[1] constant({1})
  many = s32[2,1] constant({ {0}, {1} })
  w = f32[2,8,9,2] parameter(3)
  a = f32[8,10,2] scatter(x, i, u), update_window_dims={0,1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={1}, index_vector_dim=0, to_apply=add_f32
  b = f32[8,10,2] scatter(x, far, u), update_window_dims={0,1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={1}, index_vector_dim=0, to_apply=add_f32
  c = f32[8,10,2] scatter(x, one, u), update_window_dims={0,1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={1}, index_vector_dim=0, to_apply=twice
  d = f32[8,10,2] scatter(x, many, w), update_window_dims={1,2,3}, inserted_window_dims={}, scatter_dims_to_operand_dims={1}, index_vector_dim=1, to_apply=add_f32
  ROOT r = (f32[8,10,2], f32[8,10,2], f32[8,10,2], f32[8,10,2]) tuple(a, b, c, d)
}
""")
    out, log = _run(module, [ScatterExpander()])
    assert [o.op.text for o in out.entry.root.operands] == ["scatter"] * 4
    assert not list(log)


def test_xla_gpu_keeps_a_broadcast_updated_in_place_a_kernel_of_its_own() -> None:
    """Today's ShouldFuseInPlaceOp: the broadcast a dynamic-update-slice updates in place is
    not fused into it ("unrecognized inplace update non-elementwise output pair", XLA's
    priority-fusion log of rollout_spring_chain); the compiled values stay the reference's."""
    module = parse_module(SCATTERS)
    args = _args()
    compiled = compile_module(module, "xla-gpu", "cpu")
    refusals = [r for r in compiled.fusion.decisions
                if r.rule == "in-place-conflict" and r.producer == "gravity"]
    assert refusals and "updates in place" in refusals[0].message
    rules = {r.rule for r in compiled.fusion.decisions}
    assert {"simple-scatter-expanded", "add-of-zero-update"} <= rules
    for got, want in zip(compiled(*args), flatten_value(evaluate(module, args)), strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
