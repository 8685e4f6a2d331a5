"""The CPU cost model with injected constants: profiles (reads, operations, writes) and times
computed by hand, the composition of a producer into a consumer against a walk of the fused
kernel, and per-iteration loop estimates."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings

from hlofuse.fusion.beyond_xla.cost_model import (
    AT_OUTPUT,
    DEFAULT_CONSTANTS,
    CostModel,
    MachineConstants,
    estimate_module,
    profile_kernel,
)
from hlofuse.fusion.beyond_xla.priority import can_fuse, fuse
from hlofuse.fusion.graphs.graph import Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph
from hlofuse.ir.parser import parse_module

from tests.hlo_programs import RandomProgram, programs

# Round numbers, so every figure below can be checked by hand.
C = MachineConstants(
    threads=4, call_overhead=1e-6, parallel_overhead=1e-5, op_rate=1e9, transcendental_ops=20.0,
    divide_ops=4.0, memory_bandwidth=1e9, parallel_memory_bandwidth=2e9, cache_bandwidth=1e10,
    cache_bytes=4096, parallel_min_elements=1000, loop_iteration_overhead=1e-7,
    memory_compute_overlap=0.0, source="injected")


def _nodes(text: str) -> dict[str, Node]:
    graphs = ModuleGraph.from_module(parse_module(text))
    return {n.name: n for g in graphs.graphs for n in g.nodes}


def _module(body: str, extra: str = "") -> str:
    return f"HloModule m\n\n{extra}\nENTRY main {{\n{body}\n}}\n"


ADD = _module("""
  p0 = f32[100]{0} parameter(0)
  p1 = f32[100]{0} parameter(1)
  ROOT a = f32[100]{0} add(p0, p1)""")


def test_elementwise_kernel_by_hand() -> None:
    nodes = _nodes(ADD)
    model = CostModel(C)
    profile = model.profile(nodes["a"])
    assert profile.reads() == {nodes["p0"]: 100.0, nodes["p1"]: 100.0}
    assert profile.bytes_read() == 800.0
    assert profile.bytes_written == 400.0
    assert profile.operations == 100.0
    priced = model.price(profile)
    assert not priced.is_parallel
    # call 1 us + 100 ops at 1e9/s + (400 + 400 read + 400 written) B at cache speed 1e10 B/s
    assert priced.total == pytest.approx(1e-6 + 1e-7 + 1.2e-7)


@pytest.mark.parametrize("op, dtype, operations", [
    ("exponential", "f32", 100 * 20.0),  # transcendental: 20 cheap operations each
    ("sine", "f32", 100 * 20.0),
    ("divide", "f32", 100 * 4.0),
    ("add", "f64", 100 * 2.0),  # 8-byte lanes: twice the work of f32
    ("add", "s32", 100.0),
])
def test_operation_costs(op: str, dtype: str, operations: float) -> None:
    binary = op in ("add", "divide")
    operands = "p0, p0" if binary else "p0"
    nodes = _nodes(_module(f"""
  p0 = {dtype}[100]{{0}} parameter(0)
  ROOT r = {dtype}[100]{{0}} {op}({operands})"""))
    assert CostModel(C).profile(nodes["r"]).operations == operations


BROADCAST_FUSION = _module("""
  x = f32[10]{0} parameter(0)
  y = f32[10,20]{1,0} parameter(1)
  ROOT f = f32[10,20]{1,0} fusion(x, y), kind=kLoop, calls=fused""", """
fused {
  px = f32[10]{0} parameter(0)
  py = f32[10,20]{1,0} parameter(1)
  b = f32[10,20]{1,0} broadcast(px), dimensions={0}
  ROOT m = f32[10,20]{1,0} multiply(b, py)
}
""")


def test_broadcast_operand_is_read_once_per_use() -> None:
    nodes = _nodes(BROADCAST_FUSION)
    model = CostModel(C)
    profile = model.profile(nodes["f"])
    assert profile.reads() == {nodes["x"]: 200.0, nodes["y"]: 200.0}
    assert profile.reads_at_output(nodes["y"]) == 200.0
    assert profile.reads_at_output(nodes["x"]) == 0.0  # through the broadcast
    assert profile.operations == 200.0  # the multiply; a broadcast only indexes
    # x: its 40 B once, the other 760 B re-read, y 800 B, 800 B written: all at cache speed
    assert model.price(profile).memory == pytest.approx((40 + 760 + 800 + 800) / 1e10)


def test_reduction_reads_its_input_per_output() -> None:
    nodes = _nodes(_module("""
  x = f32[8,32]{1,0} parameter(0)
  init = f32[] parameter(1)
  ROOT r = f32[8]{0} reduce(x, init), dimensions={1}, to_apply=add""", """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""))
    profile = CostModel(C).profile(nodes["r"])
    assert profile.reads() == {nodes["x"]: 256.0, nodes["init"]: 1.0}  # a scalar: once
    assert profile.operations == 8 * 32 * 1.0
    assert profile.bytes_written == 32.0


def test_large_kernel_is_parallel_and_reads_from_memory() -> None:
    nodes = _nodes(ADD.replace("[100]", "[2048]"))
    priced = CostModel(C).price(CostModel(C).profile(nodes["a"]))
    assert priced.is_parallel  # 2048 >= 1000 elements
    assert priced.overhead == pytest.approx(1e-6 + 1e-5)
    assert priced.compute == pytest.approx(2048 / (1e9 * 4))
    # 8 KiB operands exceed the 4 KiB cache: DRAM at the all-thread bandwidth
    assert priced.memory == pytest.approx(3 * 8192 / 2e9)


def test_loop_invariant_scalar_is_read_once() -> None:
    nodes = _nodes(_module("""
  x = f32[100]{0} parameter(0)
  s = f32[] parameter(1)
  ROOT f = f32[100]{0} fusion(x, s), kind=kLoop, calls=fused""", """
fused {
  px = f32[100]{0} parameter(0)
  ps = f32[] parameter(1)
  n = f32[] negate(ps)
  b = f32[100]{0} broadcast(n), dimensions={}
  ROOT m = f32[100]{0} multiply(px, b)
}
"""))
    profile = CostModel(C).profile(nodes["f"])
    assert profile.reads() == {nodes["x"]: 100.0, nodes["s"]: 1.0}
    assert profile.operations == 100.0 + 1.0  # the negate runs once per call


def test_shared_reads_at_the_output_index_count_once() -> None:
    nodes = _nodes(_module("""
  x = f32[100]{0} parameter(0)
  ROOT f = f32[100]{0} fusion(x), kind=kLoop, calls=fused""", """
fused {
  px = f32[100]{0} parameter(0)
  n = f32[100]{0} negate(px)
  e = f32[100]{0} abs(px)
  ROOT m = f32[100]{0} multiply(n, e)
}
"""))
    assert CostModel(C).profile(nodes["f"]).reads() == {nodes["x"]: 100.0}


def test_dynamic_update_slice_updates_in_place() -> None:
    nodes = _nodes(_module("""
  buf = f32[100]{0} parameter(0)
  upd = f32[10]{0} parameter(1)
  i = s32[] parameter(2)
  ROOT d = f32[100]{0} dynamic-update-slice(buf, upd, i)"""))
    profile = CostModel(C).profile(nodes["d"])
    assert profile.bytes_written == 40.0  # only the window
    assert profile.reads() == {nodes["upd"]: 10.0, nodes["i"]: 1.0}
    assert profile.in_place is nodes["buf"]


def test_free_reshape_costs_nothing() -> None:
    nodes = _nodes(_module("""
  x = f32[4,25]{1,0} parameter(0)
  ROOT r = f32[100]{0} reshape(x)"""))
    model = CostModel(C)
    assert model.profile(nodes["r"]).is_free
    assert model.time(nodes["r"]) == 0.0


def test_fusing_a_producer_by_hand() -> None:
    nodes = _nodes(_module("""
  p0 = f32[100]{0} parameter(0)
  p1 = f32[100]{0} parameter(1)
  n = f32[100]{0} negate(p0)
  ROOT a = f32[100]{0} add(n, p1)"""))
    model = CostModel(C)
    n, a = nodes["n"], nodes["a"]
    assert model.time(n) == pytest.approx(1e-6 + 1e-7 + 8e-8)
    assert model.time(a) == pytest.approx(1e-6 + 1e-7 + 1.2e-7)
    fused = model.fused_profile(n, a)
    assert fused.reads() == {nodes["p0"]: 100.0, nodes["p1"]: 100.0}
    assert fused.operations == 200.0
    assert model.fused_time(n, a) == pytest.approx(1e-6 + 2e-7 + 1.2e-7)


def test_recomputing_through_a_broadcast_scales_the_producer() -> None:
    nodes = _nodes(_module("""
  x = f32[10]{0} parameter(0)
  y = f32[10,20]{1,0} parameter(1)
  e = f32[10]{0} exponential(x)
  b = f32[10,20]{1,0} broadcast(e), dimensions={0}
  ROOT m = f32[10,20]{1,0} multiply(b, y)"""))
    model = CostModel(C)
    # fused into the broadcast, the exponential is computed for each of its 200 elements
    fused = model.fused_profile(nodes["e"], nodes["b"])
    assert fused.operations == 200 * 20.0
    assert fused.reads() == {nodes["x"]: 200.0}


COMPOSITION_CASES = {
    "elementwise": ("n", "a", _module("""
  p0 = f32[16,8]{1,0} parameter(0)
  n = f32[16,8]{1,0} negate(p0)
  e = f32[16,8]{1,0} exponential(p0)
  ROOT a = f32[16,8]{1,0} add(n, e)""")),
    # n and the consumer read p0 at the same (transposed) indices: one read, not two.
    "transposed context": ("n", "t", _module("""
  p0 = f32[16,8]{1,0} parameter(0)
  n = f32[16,8]{1,0} negate(p0)
  ROOT t = f32[8,16]{1,0} fusion(n, p0), kind=kLoop, calls=fused""", """
fused {
  pn = f32[16,8]{1,0} parameter(0)
  pp = f32[16,8]{1,0} parameter(1)
  x = f32[16,8]{1,0} add(pn, pp)
  ROOT tr = f32[8,16]{1,0} transpose(x), dimensions={1,0}
}
""")),
    "reduction": ("n", "r", _module("""
  p0 = f32[16,8]{1,0} parameter(0)
  init = f32[] parameter(1)
  n = f32[16,8]{1,0} negate(p0)
  ROOT r = f32[16]{0} reduce(n, init), dimensions={1}, to_apply=add""", """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
""")),
    "in-place buffer computed": ("b", "d", _module("""
  p0 = f32[100]{0} parameter(0)
  upd = f32[10]{0} parameter(1)
  i = s32[] parameter(2)
  b = f32[100]{0} negate(p0)
  ROOT d = f32[100]{0} dynamic-update-slice(b, upd, i)""")),
}


def _assert_composition_matches_walk(text: str, producer: str, consumer: str,
                                     constants: MachineConstants) -> None:
    nodes = _nodes(text)
    model = CostModel(constants)
    composed = model.fused_profile(nodes[producer], nodes[consumer])
    fusion = fuse(nodes[producer], nodes[consumer])
    walked = profile_kernel(fusion, constants)
    assert composed.reads() == pytest.approx(walked.reads())
    assert composed.operations == pytest.approx(walked.operations)
    assert composed.bytes_written == walked.bytes_written
    assert model.price(composed).total == pytest.approx(model.price(walked).total)


@pytest.mark.parametrize("case", list(COMPOSITION_CASES))
def test_composition_matches_the_fused_kernel(case: str) -> None:
    producer, consumer, text = COMPOSITION_CASES[case]
    _assert_composition_matches_walk(text, producer, consumer, C)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_composition_matches_the_fused_kernel_on_random_programs(program: RandomProgram) -> None:
    """For every edge priority fusion could take: what the model predicts for the fused kernel
    is what it computes once the kernel exists (so grown fusions need not be walked)."""
    module = program.module
    graphs = ModuleGraph.from_module(module)
    assert graphs.entry is not None
    edges = [(p.name, c.name) for c in graphs.entry.nodes for p in dict.fromkeys(c.operands)
             if p.op.text not in ("parameter", "constant") and can_fuse(p, c)]
    for producer, consumer in edges[:6]:
        fresh = ModuleGraph.from_module(module)
        assert fresh.entry is not None
        nodes = {n.name: n for n in fresh.entry.nodes}
        model = CostModel(DEFAULT_CONSTANTS)
        composed = model.fused_profile(nodes[producer], nodes[consumer])
        walked = profile_kernel(fuse(nodes[producer], nodes[consumer]), DEFAULT_CONSTANTS)
        assert composed.reads() == pytest.approx(walked.reads()), (producer, consumer)
        assert composed.operations == pytest.approx(walked.operations), (producer, consumer)


def test_estimate_module_per_loop_iteration() -> None:
    module = parse_module(_module("""
  x = f32[100]{0} parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[100]{0}) tuple(zero, x)
  w = (s32[], f32[100]{0}) while(init), condition=cond, body=body
  ROOT out = f32[100]{0} get-tuple-element(w), index=1""", """
body {
  p = (s32[], f32[100]{0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[100]{0} get-tuple-element(p), index=1
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  v2 = f32[100]{0} negate(v)
  ROOT r = (s32[], f32[100]{0}) tuple(i2, v2)
}

cond {
  cp = (s32[], f32[100]{0}) parameter(0)
  ci = s32[] get-tuple-element(cp), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(ci, three), direction=LT
}
"""))
    kernels, per_iteration = estimate_module(module, C)
    times = {k.name: k.time.total for k in kernels}
    assert set(times) == {"i2", "v2", "lt"}
    assert times["v2"] == pytest.approx(1e-6 + 1e-7 + 8e-8)
    assert per_iteration == {"w": pytest.approx(1e-7 + sum(times.values()))}


def test_constants_are_frozen_and_documented() -> None:
    assert DEFAULT_CONSTANTS.source == "default"
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_CONSTANTS.threads = 8  # type: ignore[misc]
    assert AT_OUTPUT == ()


def test_reads_in_one_context_are_shared_after_composition() -> None:
    producer, consumer, text = COMPOSITION_CASES["transposed context"]
    nodes = _nodes(text)
    composed = CostModel(C).fused_profile(nodes[producer], nodes[consumer])
    assert composed.reads() == {nodes["p0"]: 128.0}
