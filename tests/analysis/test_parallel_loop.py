"""The per-environment analysis of while loops (hlofuse.analysis.parallel_loop) on
hand-written loops and on CartPole's step loop."""

from __future__ import annotations

import pytest

from hlofuse.analysis import parallel_loop as pl
from hlofuse.analysis.lane_dims import CROSS_LANE_ACCESS, CROSS_LANE_REDUCE
from hlofuse.analysis.parallel_loop_refusals import (
    DATA_DEPENDENT_TRIP_COUNT,
    NO_PARALLEL_DIMENSION,
    OPAQUE_OP,
    STATE_NOT_TUPLE,
    STATE_TOO_LARGE,
    Refusal,
)
from hlofuse.analysis.whole_loop_config import read_whole_loop_config, whole_loop_config
from hlofuse.envs import cartpole
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module

REWRITES = "none+rng_expansion+concat_forwarding+scalarize_state"


def loop_text(body: str, state: str = "(s32[], f32[8]{0})", condition: str = "",
              extra: str = "") -> str:
    """A module whose entry runs one while loop over `state` (element 0 the counter)."""
    condition = condition or """
  ci = s32[] get-tuple-element(cp), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(ci, n), direction=LT"""
    elements = state[1:-1].replace("{0}", "").replace("{1,0}", "").split(", ")
    params = [f"  x{k} = {shape} parameter({k})" for k, shape in enumerate(elements)]
    names = ", ".join(f"x{k}" for k in range(len(elements)))
    return f"""HloModule m

add_f32 {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

add_s32 {{
  ia = s32[] parameter(0)
  ib = s32[] parameter(1)
  ROOT is = s32[] add(ia, ib)
}}
{extra}
cond {{
  cp = {state} parameter(0){condition}
}}

body {{
  p = {state} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  next = s32[] add(i, one)
{body}
}}

ENTRY main {{
{chr(10).join(params)}
  init = {state} tuple({names})
  ROOT loop = {state} while(init), condition=cond, body=body
}}
"""


def the_loop(module: Module) -> Instruction:
    loops = [i for i in module.all_instructions() if i.op is Op.WHILE]
    assert len(loops) == 1
    return loops[0]


def plan_of(text: str, **knobs: int) -> pl.LoopPlan | Refusal:
    return pl.plan_parallel_loop(the_loop(parse_module(text)), **knobs)


def test_elementwise_loop_with_accumulator_is_parallel() -> None:
    plan = plan_of(loop_text("""
  x = f32[8]{0} get-tuple-element(p), index=1
  acc = f32[] get-tuple-element(p), index=2
  env = f32[8]{0} iota(), iota_dimension=0
  y = f32[8]{0} add(x, env)
  zero = f32[] constant(0)
  sum = f32[] reduce(y, zero), dimensions={0}, to_apply=add_f32
  acc1 = f32[] add(sum, acc)
  ROOT t = (s32[], f32[8]{0}, f32[]) tuple(next, y, acc1)""", "(s32[], f32[8]{0}, f32[])"))
    assert isinstance(plan, pl.LoopPlan)
    assert (plan.size, plan.per_lane, plan.uniform) == (8, (1,), (0,))
    (acc,) = plan.accumulators
    assert (acc.element, acc.op, [r.name for r in acc.reduces]) == (2, Op.ADD, ["sum"])
    names = {i.name for i in plan.body.instructions if id(i) in plan.lane}
    assert {"x", "y", "env"} <= names and "sum" not in names and "next" not in names
    assert {i.name for i in plan.body.instructions if id(i) in plan.uniform_code} == {
        "i", "one", "next"}
    assert plan.value_lane_dims[id(plan.body.root.operands[1])] == 0


@pytest.mark.parametrize("rule,body,state,offender", [
    (CROSS_LANE_REDUCE, """
  x = f32[8]{0} get-tuple-element(p), index=1
  zero = f32[] constant(0)
  sum = f32[] reduce(x, zero), dimensions={0}, to_apply=add_f32
  sums = f32[8]{0} broadcast(sum), dimensions={}
  y = f32[8]{0} subtract(x, sums)
  ROOT t = (s32[], f32[8]{0}) tuple(next, y)""", "(s32[], f32[8]{0})", "sum"),
    # The accumulated value is also read by the next step: not a plain accumulator.
    (CROSS_LANE_REDUCE, """
  x = f32[8]{0} get-tuple-element(p), index=1
  acc = f32[] get-tuple-element(p), index=2
  accs = f32[8]{0} broadcast(acc), dimensions={}
  y = f32[8]{0} add(x, accs)
  zero = f32[] constant(0)
  sum = f32[] reduce(y, zero), dimensions={0}, to_apply=add_f32
  acc1 = f32[] add(acc, sum)
  ROOT t = (s32[], f32[8]{0}, f32[]) tuple(next, y, acc1)""", "(s32[], f32[8]{0}, f32[])", "sum"),
    # An initial value that is not the identity is added once per step, not once.
    (CROSS_LANE_REDUCE, """
  x = f32[8]{0} get-tuple-element(p), index=1
  acc = f32[] get-tuple-element(p), index=2
  seven = f32[] constant(7)
  sum = f32[] reduce(x, seven), dimensions={0}, to_apply=add_f32
  acc1 = f32[] add(acc, sum)
  ROOT t = (s32[], f32[8]{0}, f32[]) tuple(next, x, acc1)""", "(s32[], f32[8]{0}, f32[])", "sum"),
    (CROSS_LANE_ACCESS, """
  x = f32[8]{0} get-tuple-element(p), index=1
  r = f32[8]{0} reverse(x), dimensions={0}
  ROOT t = (s32[], f32[8]{0}) tuple(next, r)""", "(s32[], f32[8]{0})", "r"),
    (CROSS_LANE_ACCESS, """
  x = f32[8,2]{1,0} get-tuple-element(p), index=1
  flat = f32[16]{0} reshape(x)
  back = f32[2,8]{1,0} reshape(flat)
  tr = f32[8,2]{1,0} transpose(back), dimensions={1,0}
  ROOT t = (s32[], f32[8,2]{1,0}) tuple(next, tr)""", "(s32[], f32[8,2]{1,0})", "flat"),
    (CROSS_LANE_ACCESS, """
  x = f32[8]{0} get-tuple-element(p), index=1
  first = f32[1]{0} slice(x), slice={[0:1]}
  f = f32[] reshape(first)
  ROOT t = (s32[], f32[8]{0}, f32[]) tuple(next, x, f)""", "(s32[], f32[8]{0}, f32[])", "first"),
    (OPAQUE_OP, """
  x = f32[8]{0} get-tuple-element(p), index=1
  y = f32[8]{0} custom-call(x), custom_call_target="my_library"
  ROOT t = (s32[], f32[8]{0}) tuple(next, y)""", "(s32[], f32[8]{0})", "y"),
    (OPAQUE_OP, """
  x = s32[8,8]{1,0} get-tuple-element(p), index=1
  y = s32[8,8]{1,0} dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (s32[], s32[8,8]{1,0}) tuple(next, y)""", "(s32[], s32[8,8]{1,0})", "y"),
    (CROSS_LANE_REDUCE, """
  x = f32[8,8]{1,0} get-tuple-element(p), index=1
  y = f32[8,8]{1,0} dot(x, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (s32[], f32[8,8]{1,0}) tuple(next, y)""", "(s32[], f32[8,8]{1,0})", "y"),
])
def test_refusals_name_the_rule_and_the_instruction(rule: str, body: str, state: str,
                                                    offender: str) -> None:
    refusal = plan_of(loop_text(body, state))
    assert isinstance(refusal, Refusal), refusal
    assert (refusal.rule, refusal.instruction.name) == (rule, offender), refusal.message
    assert refusal.message.startswith("%loop: ") and f"%{offender}" in refusal.message


def test_condition_reading_per_lane_state_is_a_data_dependent_trip_count() -> None:
    refusal = plan_of(loop_text("""
  x = f32[8]{0} get-tuple-element(p), index=1
  ROOT t = (s32[], f32[8]{0}) tuple(next, x)""", condition="""
  cx = f32[8]{0} get-tuple-element(cp), index=1
  zero = f32[] constant(0)
  total = f32[] reduce(cx, zero), dimensions={0}, to_apply=add_f32
  bound = f32[] constant(3)
  ROOT lt = pred[] compare(total, bound), direction=LT"""))
    assert isinstance(refusal, Refusal)
    assert (refusal.rule, refusal.instruction.name) == (DATA_DEPENDENT_TRIP_COUNT, "total")


def test_state_limits() -> None:
    text = loop_text("""
  x = f32[8,4]{1,0} get-tuple-element(p), index=1
  ROOT t = (s32[], f32[8,4]{1,0}) tuple(next, x)""", "(s32[], f32[8,4]{1,0})")
    assert isinstance(plan_of(text), pl.LoopPlan)
    refusal = plan_of(text, max_state_elements_per_lane=3)
    assert isinstance(refusal, Refusal) and refusal.rule == STATE_TOO_LARGE
    assert dict(refusal.figures) == {"element": 1, "per_lane": 4, "limit": 3}
    # With 100 environments (tried first: the larger of two equally common sizes) x would be
    # uniform and too large for it; with 8 the table would be.
    table = loop_text("""
  x = f32[8,10]{1,0} get-tuple-element(p), index=1
  doubled = f32[8,10]{1,0} add(x, x)
  tab = f32[100]{0} get-tuple-element(p), index=2
  tab_doubled = f32[100]{0} add(tab, tab)
  ROOT t = (s32[], f32[8,10]{1,0}, f32[100]{0}) tuple(next, doubled, tab_doubled)""",
                      "(s32[], f32[8,10]{1,0}, f32[100]{0})")
    refusal = plan_of(table, max_uniform_elements=64)
    assert isinstance(refusal, Refusal) and refusal.rule == STATE_TOO_LARGE
    assert "uniform loop element 1 has 80 elements, over 64" in refusal.message


def test_large_unchanged_elements_are_read_only() -> None:
    """A uniform element the loop passes on unchanged and larger than READ_ONLY_MIN_ELEMENTS
    is read where it lies, under no size limit; a small one, or one that changes, is not."""
    state = "(s32[], f32[8,3]{1,0}, f32[8]{0}, f32[6,100]{1,0}, f32[7]{0}, f32[7,100]{1,0})"
    text = loop_text(f"""
  x = f32[8,3]{{1,0}} get-tuple-element(p), index=1
  y = f32[8]{{0}} get-tuple-element(p), index=2
  w = f32[6,100]{{1,0}} get-tuple-element(p), index=3
  small = f32[7]{{0}} get-tuple-element(p), index=4
  moved = f32[7,100]{{1,0}} get-tuple-element(p), index=5
  moved_doubled = f32[7,100]{{1,0}} add(moved, moved)
  ROOT t = {state} tuple(next, x, y, w, small, moved_doubled)""", state)
    plan = plan_of(text, max_uniform_elements=1000)
    assert isinstance(plan, pl.LoopPlan)
    assert plan.size == 8 and plan.read_only == (3,)
    assert 4 in plan.uniform and 5 in plan.uniform
    # The changing one is still limited: with 8 lanes it is too large to be uniform.
    limited = plan_of(text, max_uniform_elements=64)
    assert not (isinstance(limited, pl.LoopPlan) and limited.size == 8)


def test_weights_the_loop_passes_through_do_not_make_it_serial() -> None:
    """A network stepped over a state of one array: the weights' hidden width is the state's
    most common dimension, but weights passed through unchanged are read, not computed once
    per step, so they do not count against the lanes' plan."""
    state = ("(s32[], f32[8,4]{1,0}, f32[4,16]{1,0}, f32[16]{0}, f32[16,16]{1,0}, "
             "f32[16,4]{1,0})")
    plan = plan_of(loop_text(f"""
  x = f32[8,4]{{1,0}} get-tuple-element(p), index=1
  w1 = f32[4,16]{{1,0}} get-tuple-element(p), index=2
  b1 = f32[16]{{0}} get-tuple-element(p), index=3
  w2 = f32[16,16]{{1,0}} get-tuple-element(p), index=4
  w3 = f32[16,4]{{1,0}} get-tuple-element(p), index=5
  d1 = f32[8,16]{{1,0}} dot(x, w1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  bb = f32[8,16]{{1,0}} broadcast(b1), dimensions={{1}}
  a1 = f32[8,16]{{1,0}} add(d1, bb)
  h1 = f32[8,16]{{1,0}} tanh(a1)
  h2 = f32[8,16]{{1,0}} dot(h1, w2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  out = f32[8,4]{{1,0}} dot(h2, w3), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT t = {state} tuple(next, out, w1, b1, w2, w3)""", state))
    assert isinstance(plan, pl.LoopPlan), plan
    assert plan.size == 8 and plan.per_lane == (1,)
    assert set(plan.uniform) | set(plan.read_only) == {0, 2, 3, 4, 5}


def test_structure_refusals() -> None:
    scalar = plan_of(loop_text("""
  x = f32[] get-tuple-element(p), index=1
  ROOT t = (s32[], f32[]) tuple(next, x)""", "(s32[], f32[])"))
    assert isinstance(scalar, Refusal) and scalar.rule == NO_PARALLEL_DIMENSION
    whole = plan_of(loop_text("""
  x = f32[8]{0} get-tuple-element(p), index=1
  q = (s32[], f32[8]{0}) opt-barrier(p)
  ROOT t = (s32[], f32[8]{0}) tuple(next, x)"""))
    assert isinstance(whole, Refusal) and whole.rule == STATE_NOT_TUPLE


def test_values_moved_within_an_environment_keep_it_apart() -> None:
    """Structural ops along other dimensions (reverse, slice + concatenate, pad, reduce,
    transpose, reshape keeping the environment dimension) are fine."""
    plan = plan_of(loop_text("""
  x = f32[8,4]{1,0} get-tuple-element(p), index=1
  r = f32[8,4]{1,0} reverse(x), dimensions={1}
  head = f32[8,1]{1,0} slice(r), slice={[0:8], [0:1]}
  tail = f32[8,3]{1,0} slice(r), slice={[0:8], [1:4]}
  rot = f32[8,4]{1,0} concatenate(tail, head), dimensions={1}
  zero = f32[] constant(0)
  rows = f32[8]{0} reduce(rot, zero), dimensions={1}, to_apply=add_f32
  bc = f32[4,8]{1,0} broadcast(rows), dimensions={1}
  tb = f32[8,4]{1,0} transpose(bc), dimensions={1,0}
  split = f32[8,2,2]{2,1,0} reshape(tb)
  flat = f32[8,4]{1,0} reshape(split)
  y = f32[8,4]{1,0} add(flat, rot)
  ROOT t = (s32[], f32[8,4]{1,0}) tuple(next, y)""", "(s32[], f32[8,4]{1,0})"))
    assert isinstance(plan, pl.LoopPlan), plan
    dims = {i.name: plan.value_lane_dims[id(i)] for i in plan.body.instructions if id(i) in
            plan.value_lane_dims}
    assert dims["bc"] == 1 and dims["tb"] == 0 and dims["split"] == 0 and dims["rows"] == 0


def test_small_uniform_values_are_computed_once_per_step() -> None:
    plan = plan_of(loop_text("""
  x = f32[8]{0} get-tuple-element(p), index=1
  fi = f32[] convert(i)
  step = f32[] multiply(fi, fi)
  steps = f32[8]{0} broadcast(step), dimensions={}
  y = f32[8]{0} add(x, steps)
  ROOT t = (s32[], f32[8]{0}) tuple(next, y)"""))
    assert isinstance(plan, pl.LoopPlan)
    assert [i.name for i in plan.lane_inputs] == ["step"]


def rewritten_cartpole(variant: str, n_envs: int, n_steps: int = 3) -> Module:
    module = cartpole.trace(cartpole.parse_variant(variant), n_envs, n_steps)
    return run_strategy(module, REWRITES, debug=False).module


def test_cartpole_step_loop_is_parallel_over_environments() -> None:
    plan = pl.plan_parallel_loop(the_loop(rewritten_cartpole("baseline", 37)))
    assert isinstance(plan, pl.LoopPlan)
    assert plan.size == 37
    shapes = plan.loop.shape.elements
    assert all(shapes[i].dims == (37,) for i in plan.per_lane) and len(plan.per_lane) == 5
    assert sorted(shapes[i].text(False) for i in plan.uniform) == ["s32[]", "s32[]", "u32[2]"]
    # The episode count and the return sum only accumulate.
    assert sorted(shapes[a.element].dtype.text for a in plan.accumulators) == ["f32", "s32"]
    # Lanes read the step's keys, computed once per step.
    assert plan.lane_inputs and all(i.shape.dims == () and i.dtype.text == "u32"
                                    for i in plan.lane_inputs)


def test_unrolled_steps_accumulate_through_a_chain() -> None:
    plan = pl.plan_parallel_loop(the_loop(rewritten_cartpole("unroll=3", 8, 6)))
    assert isinstance(plan, pl.LoopPlan)
    assert sorted(len(a.reduces) for a in plan.accumulators) == [3, 3]


def test_key_of_two_words_becomes_uniform_when_there_are_two_environments() -> None:
    """u32[2] looks per-environment when N = 2; uniform code needs it whole, so it is made
    uniform and the analysis repeated."""
    module = rewritten_cartpole("rng=fused,state=packed", 2)
    loop = the_loop(module)
    plan = pl.plan_parallel_loop(loop)
    assert isinstance(plan, pl.LoopPlan) and plan.size == 2
    keys = [i for i, e in enumerate(loop.shape.elements) if e.dtype.text == "u32"]
    assert keys and all(k in plan.uniform for k in keys)


def test_one_environment() -> None:
    plan = pl.plan_parallel_loop(the_loop(rewritten_cartpole("baseline", 1)))
    assert isinstance(plan, pl.LoopPlan) and plan.size == 1 and len(plan.per_lane) == 5


def test_config_round_trip() -> None:
    text = whole_loop_config(16)
    assert text == '{"custom_fusion":"whole_loop","lanes":16}'
    assert read_whole_loop_config(text) == 16
    for bad in ("", "{", "[]", '{"custom_fusion":"other","lanes":8}',
                '{"custom_fusion":"whole_loop","lanes":0}',
                '{"custom_fusion":"whole_loop","lanes":true}',
                '{"custom_fusion":"whole_loop"}'):
        assert read_whole_loop_config(bad) is None, bad
