"""Which instructions compute an earlier one's value (hlofuse.analysis.same_values), as code
generation uses it to visit each value once."""

from __future__ import annotations

from hlofuse.analysis.same_values import same_values
from hlofuse.ir.parser import parse_module

MODULE = """HloModule m

ENTRY main {
  p = u32[8]{0} parameter(0)
  q = u32[8]{0} parameter(1)
  i1 = u32[8]{0} iota(), iota_dimension=0
  i2 = u32[8]{0} iota(), iota_dimension=0
  c1 = u32[] constant(13)
  c2 = u32[] constant(13)
  c3 = u32[] constant(14)
  b1 = u32[8]{0} broadcast(c1), dimensions={}
  b2 = u32[8]{0} broadcast(c2), dimensions={}
  b3 = u32[8]{0} broadcast(c3), dimensions={}
  a1 = u32[8]{0} add(i1, p)
  a2 = u32[8]{0} add(i2, p)
  a3 = u32[8]{0} add(i2, q)
  s1 = u32[8]{0} shift-left(a1, b1)
  s2 = u32[8]{0} shift-left(a2, b2)
  s3 = u32[8]{0} shift-left(a2, b3)
  ROOT t = (u32[8]{0}, u32[8]{0}, u32[8]{0}, u32[8]{0}) tuple(s1, s2, s3, a3)
}
"""


def test_equal_chains_from_identical_iotas_are_one_value() -> None:
    module = parse_module(MODULE)
    by_name = {inst.name: inst for inst in module.entry.instructions}
    name_of = {id(inst): name for name, inst in by_name.items()}
    same = same_values([module.entry.root])
    named = {name_of[later]: name_of[first] for later, first in same.items()}
    # The second iota and constant 13 and all they start are the first ones again; a different
    # parameter (a3) or constant (s3, through b3) makes a value of its own.
    assert named == {"i2": "i1", "c2": "c1", "b2": "b1", "a2": "a1", "s2": "s1"}


def test_parameters_and_bound_inputs_are_never_merged() -> None:
    module = parse_module("""HloModule m

ENTRY main {
  p = f32[4]{0} parameter(0)
  q = f32[4]{0} parameter(1)
  c1 = f32[4]{0} constant({1, 2, 3, 4})
  c2 = f32[4]{0} constant({1, 2, 3, 4})
  x = f32[4]{0} add(p, c1)
  y = f32[4]{0} add(p, c2)
  ROOT t = (f32[4]{0}, f32[4]{0}, f32[4]{0}) tuple(x, y, q)
}
""")
    by_name = {inst.name: inst for inst in module.entry.instructions}
    # c1 is bound to an argument (an array constant the kernel reads): c2 stays apart, and so
    # does y, which reads it.
    assert same_values([module.entry.root], [by_name["c1"]]) == {}
    assert same_values([module.entry.root]) == {id(by_name["c2"]): id(by_name["c1"]),
                                                id(by_name["y"]): id(by_name["x"])}
