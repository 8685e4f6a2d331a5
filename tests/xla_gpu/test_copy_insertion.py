"""xla-gpu's copy insertion (xla_gpu/copy_insertion.py): the copies XLA's GPU pipeline leaves
for loop state, in-place updates and the entry's result, on small modules and on XLA's own
output for the oracle corpus."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.fusion.kernels import list_kernels
from hlofuse.fusion.xla_gpu.copy_insertion import GpuCopyInsertion, plan_copies
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value

from tests.xla_gpu.test_corpus_agreement import comparison

# A counted loop: state (i, x, y); the body adds 1 to i, and `update` to x; y passes through.
LOOP = """
HloModule loop

cond {
  cs = (s32[], f32[4], f32[4]) parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(ci, n), direction=LT
}

body {
  s = (s32[], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  x = f32[4] get-tuple-element(s), index=1
  y = f32[4] get-tuple-element(s), index=2
  UPDATE
  ROOT t = (s32[], f32[4], f32[4]) tuple(i1, x1, y)
}

ENTRY main {
  p = f32[4] parameter(0)
  zero = s32[] constant(0)
  INIT
  w = (s32[], f32[4], f32[4]) while(init), condition=cond, body=body
  RESULT
}
"""

ELEMENTWISE_UPDATE = "x1 = f32[4] multiply(x, x)"
FRESH_INIT = """e = f32[4] exponential(p)
  init = (s32[], f32[4], f32[4]) tuple(zero, e, p)"""
FINAL = """wx = f32[4] get-tuple-element(w), index=1
  ROOT r = (f32[4]) tuple(wx)"""


def loop_module(update: str = ELEMENTWISE_UPDATE, init: str = FRESH_INIT,
                result: str = FINAL) -> str:
    return LOOP.replace("UPDATE", update).replace("INIT", init).replace("RESULT", result)


def copies(text: str) -> dict[str, int]:
    """Copies per computation after the pass."""
    module, _ = GpuCopyInsertion().run(parse_module(text))
    return {c.name: n for c in module.computations
            if (n := sum(1 for i in c.instructions if i.op is Op.COPY))}


def test_a_constant_loop_counter_is_copied_and_a_fresh_state_is_not() -> None:
    """The counter starts from a constant (read-only): one copy. `e` is a fresh value read
    by the loop alone: it gives its buffer to the loop. `p` (an entry parameter) passes
    through the body unchanged: no loop copy."""
    assert copies(loop_module()) == {"main": 1}


def test_a_parameter_and_a_constant_at_two_elements_are_copied_once_each() -> None:
    init = """init = (s32[], f32[4], f32[4]) tuple(zero, p, p)"""
    # x (changed) starts from the parameter: one copy; y passes p through: none.
    assert copies(loop_module(init=init)) == {"main": 2}
    two = LOOP.replace("ROOT t = (s32[], f32[4], f32[4]) tuple(i1, x1, y)",
                       "y1 = f32[4] negate(y)\n  ROOT t = (s32[], f32[4], f32[4]) "
                       "tuple(i1, x1, y1)")
    both = two.replace("UPDATE", ELEMENTWISE_UPDATE).replace("INIT", init).replace(
        "RESULT", FINAL)
    # p feeds two changed elements: read-only, a copy for each (and the counter's).
    assert copies(both) == {"main": 3}


def test_a_fresh_init_read_after_the_loop_keeps_its_copy() -> None:
    result = """wx = f32[4] get-tuple-element(w), index=1
  later = f32[4] add(wx, e)
  ROOT r = (f32[4]) tuple(later)"""
    assert copies(loop_module(result=result)) == {"main": 2}


def test_the_body_copies_a_state_element_read_after_it_is_rewritten() -> None:
    """`x1` is written into x's buffer; `z` reads the old x and depends on x1, so it cannot
    run first: XLA keeps a copy in the body (once per iteration)."""
    update = """x1 = f32[4] multiply(x, x)
  z = f32[4] add(x1, x)
  y1 = f32[4] negate(z)"""
    text = loop_module(update=update).replace("tuple(i1, x1, y)", "tuple(i1, x1, y1)")
    # In the entry: the counter's constant, and the parameter y now starts from.
    assert copies(text) == {"main": 2, "body": 1}
    # The same reader, independent of the writer, runs before it: no copy.
    independent = loop_module(update="""x1 = f32[4] multiply(x, x)
  z = f32[4] add(x, y)""").replace("tuple(i1, x1, y)", "tuple(i1, x1, z)")
    assert copies(independent) == {"main": 2}


def test_a_writer_that_reads_the_old_state_out_of_order_needs_a_copy() -> None:
    """A reverse reads element 3 to write element 0: it cannot write in place."""
    assert copies(loop_module(update="x1 = f32[4] reverse(x), dimensions={0}")) == {
        "main": 1, "body": 1}


def test_a_constant_as_new_state_is_copied_each_iteration() -> None:
    update = "x1 = f32[4] constant({1, 2, 3, 4})"
    assert copies(loop_module(update=update)) == {"main": 1, "body": 1}


def test_entry_result_copies_parameters_constants_and_repeats() -> None:
    text = """
HloModule result

ENTRY main {
  p = f32[4] parameter(0)
  c = f32[4] constant({1, 2, 3, 4})
  e = f32[4] exponential(p)
  ROOT r = (f32[4], f32[4], f32[4], f32[4]) tuple(p, c, e, e)
}
"""
    plan = plan_copies(parse_module(text).entry, is_entry=True)
    assert plan.root == [0, 1, 3]
    assert copies(text) == {"main": 3}


def test_in_place_updates_of_one_parameter() -> None:
    """Two dynamic-update-slices of the parameter `p`: each writes into a copy of it (`p` is
    read-only), and the slice reads `p` itself."""
    text = """
HloModule dus

ENTRY main {
  p = f32[8] parameter(0)
  u = f32[2] parameter(1)
  i = s32[] parameter(2)
  a = f32[8] dynamic-update-slice(p, u, i)
  b = f32[8] dynamic-update-slice(p, u, i)
  s = f32[2] dynamic-slice(p, i), dynamic_slice_sizes={2}
  ROOT r = (f32[8], f32[8], f32[2]) tuple(a, b, s)
}
"""
    assert copies(text) == {"main": 2}
    # A fresh base updated once, and read before: it is updated in place.
    fresh = text.replace("a = f32[8] dynamic-update-slice(p, u, i)",
                         "q = f32[8] exponential(p)\n  a = f32[8] dynamic-update-slice(q, u, i)")
    fresh = fresh.replace("b = f32[8] dynamic-update-slice(p, u, i)",
                          "b = f32[8] negate(p)")
    assert copies(fresh) == {}


def test_copies_keep_the_values_and_count_as_kernels() -> None:
    text = loop_module(init="""init = (s32[], f32[4], f32[4]) tuple(zero, p, p)""")
    module = parse_module(text)
    copied, changed = GpuCopyInsertion().run(module)
    assert changed
    x = np.arange(4, dtype=np.float32) + 1
    expected = flatten_value(evaluate(module, [x]))
    got = flatten_value(evaluate(copied, [x]))
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(expected[0]))
    np.testing.assert_array_equal(np.asarray(got[0]), x ** 8)
    kernels, _ = list_kernels(copied)
    assert sum(1 for k in kernels if k.ops == ("copy",)) == 2


@pytest.mark.parametrize("name", ["fori_loop", "while_loop", "scan_cumsum",
                                  "dynamic_slice_update", "captured_constant",
                                  "special_floats"])
def test_copies_match_xla_on_the_corpus(name: str) -> None:
    result = comparison(name)
    assert result.xla.copies() > 0
    assert result.ours.copies() == result.xla.copies()
    assert result.same_grouping


def _reduction_kernel_loop(roots: str) -> str:
    """The loop with x1 an element-wise output (negate) of a reduction kernel that also
    reduces x and y; `roots` orders the kernel's outputs."""
    kernel = f"""
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT sum = f32[] add(a, b)
}}

fused_reductions {{
  fx = f32[4] parameter(0)
  fy = f32[4] parameter(1)
  zero_f = f32[] constant(0)
  rx = f32[] reduce(fx, zero_f), dimensions={{0}}, to_apply=add
  ry = f32[] reduce(fy, zero_f), dimensions={{0}}, to_apply=add
  neg = f32[4] negate(fx)
  ROOT roots = (f32[], f32[], f32[4]) tuple({roots})
}}
"""
    update = """f = (f32[], f32[], f32[4]) fusion(x, y), kind=kInput, calls=fused_reductions
  x1 = f32[4] get-tuple-element(f), index=2"""
    return loop_module(update=update).replace("HloModule loop\n", "HloModule loop\n" + kernel)


def test_only_the_hero_reduction_of_a_reduction_kernel_reads_before_the_writes() -> None:
    """GPU `FusionCanShareBufferHint`: the reduction emitter computes the kernel's hero
    reduction (its first root's) before it writes any output, so an output may overwrite a
    buffer that only the hero and element-wise ops read. Another reduction of the same
    kernel reading it is no such exception: x1 then needs a copy in the body
    (rollout_reacher_logged's state element 3, as XLA copies it)."""
    assert copies(_reduction_kernel_loop("rx, ry, neg")) == {"main": 1}
    assert copies(_reduction_kernel_loop("ry, rx, neg")) == {"main": 1, "body": 1}


def _two_output_loop(first: str) -> str:
    """The loop with x1 the output `first` of a two-output loop kernel whose other output,
    y1, reads x (rollout_implicit_pendulum's `loop_select_fusion.1`: the new angle, from the
    inner solver's result, and the new velocity, from the old angle)."""
    kernel = f"""
fused_two {{
  fx = f32[4] parameter(0)
  fy = f32[4] parameter(1)
  step = f32[4] subtract(fy, fx)
  grown = f32[4] exponential(fy)
  ROOT outs = (f32[4], f32[4]) tuple({first})
}}
"""
    update = """f = (f32[4], f32[4]) fusion(x, y), kind=kLoop, calls=fused_two
  x1 = f32[4] get-tuple-element(f), index=0
  y1 = f32[4] get-tuple-element(f), index=1"""
    text = loop_module(update=update).replace("tuple(i1, x1, y)", "tuple(i1, x1, y1)")
    return text.replace("HloModule loop\n", "HloModule loop\n" + kernel)


def test_an_output_that_does_not_read_the_old_state_cannot_take_its_buffer() -> None:
    """GPU `FusionCanShareBufferHint` returns `found_path_to_output`: a fused parameter may
    share its buffer with an output only if it reaches that output. x1 (output 0) does not
    read x, which output 1 reads: x1 is copied each iteration (XLA's `copy.28` of
    rollout_implicit_pendulum). Where x1 is computed from x element by element, it takes
    x's buffer."""
    assert copies(_two_output_loop("grown, step")) == {"main": 2, "body": 1}
    assert copies(_two_output_loop("step, grown")) == {"main": 2}
