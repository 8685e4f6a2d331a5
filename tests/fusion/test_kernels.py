"""Kernel listing: what launches work, kinds, source lines, and kernels per loop iteration."""

from __future__ import annotations

from pathlib import Path

import pytest

from hlofuse.fusion.kernels import count_kernels_per_iteration, kernels_per_iteration, list_kernels
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module

NESTED = """HloModule nested

inner_body {
  ib = (s32[], f32[4]{0}) parameter(0)
  ii = s32[] get-tuple-element(ib), index=0
  iv = f32[4]{0} get-tuple-element(ib), index=1
  one.i = s32[] constant(1)
  ii2 = s32[] add(ii, one.i)
  iv2 = f32[4]{0} multiply(iv, iv), metadata={source_file="sim.py" source_line=7}
  ROOT ir = (s32[], f32[4]{0}) tuple(ii2, iv2)
}

inner_cond {
  ic = (s32[], f32[4]{0}) parameter(0)
  ici = s32[] get-tuple-element(ic), index=0
  two = s32[] constant(2)
  ROOT ilt = pred[] compare(ici, two), direction=LT
}

outer_body {
  ob = (s32[], f32[4]{0}) parameter(0)
  oi = s32[] get-tuple-element(ob), index=0
  ov = f32[4]{0} get-tuple-element(ob), index=1
  zero.o = s32[] constant(0)
  neg = f32[4]{0} negate(ov)
  istate = (s32[], f32[4]{0}) tuple(zero.o, neg)
  iloop = (s32[], f32[4]{0}) while(istate), condition=inner_cond, body=inner_body
  res = f32[4]{0} get-tuple-element(iloop), index=1
  r = f32[4]{0} reshape(res)
  one.o = s32[] constant(1)
  oi2 = s32[] add(oi, one.o)
  d = f32[4]{0} dot(r, r), lhs_batch_dims={0}, rhs_batch_dims={0}
  ROOT orr = (s32[], f32[4]{0}) tuple(oi2, d)
}

outer_cond {
  oc = (s32[], f32[4]{0}) parameter(0)
  oci = s32[] get-tuple-element(oc), index=0
  three = s32[] constant(3)
  ROOT olt = pred[] compare(oci, three), direction=LT
}

ENTRY main {
  p = f32[4]{0} parameter(0)
  z = s32[] constant(0)
  e = f32[4]{0} exponential(p)
  s = (s32[], f32[4]{0}) tuple(z, e)
  oloop = (s32[], f32[4]{0}) while(s), condition=outer_cond, body=outer_body
  ROOT out = f32[4]{0} get-tuple-element(oloop), index=1
}
"""


def test_unfused_kernels_and_loops() -> None:
    kernels, loops = list_kernels(parse_module(NESTED))
    names = [k.name for k in kernels]
    # free: parameters, constants, tuples, get-tuple-elements, the bitcast-like reshape, whiles
    assert sorted(names) == sorted(["e", "olt", "neg", "ilt", "ii2", "iv2", "oi2", "d"])
    assert names[0] == "e" and names.index("neg") < names.index("d")
    assert [(loop.name, loop.loops) for loop in loops] == [("oloop", ()), ("iloop", ("oloop",))]
    by_name = {k.name: k for k in kernels}
    assert by_name["d"].kind == "library" and not by_name["d"].is_fusion
    assert by_name["iv2"].loops == ("oloop", "iloop") and by_name["iv2"].loop == "iloop"
    assert by_name["iv2"].source_lines == ("sim.py:7",)
    assert by_name["e"].loop is None
    assert kernels_per_iteration(kernels, loops) == {"oloop": 4, "iloop": 3}


def test_fused_kernels_list_their_instructions() -> None:
    result = run_strategy(parse_module(NESTED), "xla")
    per_iteration = result.kernels_per_iteration()
    # The counter and the multiply (nothing to fuse); the condition never runs: both loops
    # count to a constant, so the trip-count annotation makes them counted loops.
    assert per_iteration["iloop"] == 2
    assert {loop.name: loop.trip_count for loop in result.loops} == {"oloop": 3, "iloop": 2}
    assert result.kernels_outside_loops() == 1
    fused = [k for k in result.kernels if k.is_fusion]
    for kernel in fused:
        assert kernel.kind in ("kLoop", "kInput", "kOutput")
        assert "parameter" not in kernel.ops and "tuple" not in kernel.ops
        assert len(kernel.instructions) == len(kernel.ops) >= 1


DATA = Path(__file__).resolve().parents[1] / "data"


def test_counted_on_nested_loops_and_conditionals() -> None:
    # Unfused: the conditions of loops without a known trip count count too.
    module = parse_module(NESTED)
    assert count_kernels_per_iteration(module) == {"oloop": 4, "iloop": 3}


# program -> its loops; the two larger programs are thorough (seconds under both strategies).
COUNTED = [pytest.param(DATA / "xla_gpu" / "cartpole_rollout.before.hlo", 1),
           pytest.param(DATA / "xla_gpu" / "mountain_car_rollout.before.hlo", 1,
                        marks=pytest.mark.thorough),
           pytest.param(DATA / "xla_gpu" / "cond.before.hlo", 0),
           pytest.param(DATA / "xla_gpu" / "while_loop.before.hlo", 1),
           pytest.param(DATA / "rollouts" / "bandit.gpu.hlo", 1, marks=pytest.mark.thorough)]


@pytest.mark.parametrize(("path", "loops"), COUNTED, ids=lambda v: getattr(v, "stem", str(v)))
def test_counted_on_the_frozen_module_as_listed(path: Path, loops: int) -> None:
    # Unfused and fused, loops and conditionals.
    module = parse_module(path.read_text())
    for strategy in ("none", "xla"):
        fused = run_strategy(module, strategy, debug=False).module
        expected = kernels_per_iteration(*list_kernels(fused))
        assert len(expected) == loops, strategy
        assert count_kernels_per_iteration(fused) == expected, strategy
