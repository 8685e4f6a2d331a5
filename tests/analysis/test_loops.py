"""Counted loops and loop-carried values (hlofuse.analysis.counted_loops), and the call graph
(hlofuse.analysis.call_graph)."""

from __future__ import annotations

import pytest

from hlofuse.analysis.call_graph import call_counts, callee_order
from hlofuse.analysis.counted_loops import NotCounted, counted_loop, element_reads, parameter_users
from hlofuse.ir.hlo import Module
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module


def _loop_module(update: str = "add(i, one)", bound: str = "constant(10)",
                 start: str = "constant(2)") -> Module:
    return parse_module(f"""HloModule m

body {{
  s = (s32[], f32[4]{{0}}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[4]{{0}} get-tuple-element(s), index=1
  one = s32[] constant(3)
  i2 = s32[] {update}
  y = f32[4]{{0}} negate(x)
  ROOT t = (s32[], f32[4]{{0}}) tuple(i2, y)
}}

cond {{
  cs = (s32[], f32[4]{{0}}) parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  n = s32[] {bound}
  ROOT lt = pred[] compare(ci, n), direction=LT
}}

ENTRY main {{
  x0 = f32[4]{{0}} parameter(0)
  i0 = s32[] {start}
  init = (s32[], f32[4]{{0}}) tuple(i0, x0)
  ROOT w = (s32[], f32[4]{{0}}) while(init), condition=cond, body=body
}}
""")


def _counted(module: Module) -> object:
    loop = module.entry.root
    cond, body = loop.calls
    return counted_loop(loop, loop.operands[0], cond, body)


def test_counted_loop_finds_the_counter_and_the_trip_count() -> None:
    loop = _counted(_loop_module())
    assert (loop.index, loop.start, loop.step, loop.trip_count) == (0, 2, 3, 3)  # 2, 5, 8


@pytest.mark.parametrize("module,rule", [
    (_loop_module(update="multiply(i, one)"), "no-induction-variable"),
    (_loop_module(start="parameter(1)"), "unknown-trip-count"),
])
def test_not_counted_says_why(module: Module, rule: str) -> None:
    with pytest.raises(NotCounted) as raised:
        _counted(module)
    assert raised.value.rule == rule


def test_loop_carried_reads() -> None:
    body = _loop_module().entry.root.calls[1]
    assert [i.name for i in parameter_users(body)] == ["i", "x"]
    assert [i.name for i in element_reads(body, 1)] == ["x"]


def test_call_graph() -> None:
    module = _loop_module()
    order = [c.name for c in callee_order(module)]
    assert order.index("cond") < order.index("main") and order.index("body") < order.index("main")
    counts = call_counts(module)
    by_name = {c.name: counts[id(c)] for c in module.computations}
    assert by_name == {"body": 1, "cond": 1, "main": 0}


def test_a_module_without_loops_has_no_callees() -> None:
    module = parse_module("HloModule m\n\nENTRY main {\n  ROOT p = f32[2]{0} parameter(0)\n}\n")
    assert [c.name for c in callee_order(module)] == ["main"]
    assert not any(i.op is Op.WHILE for i in module.all_instructions())
