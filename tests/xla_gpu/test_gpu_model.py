"""The device descriptions, XLA's GPU performance model and the GPU fusion rules of xla-gpu."""

from __future__ import annotations

import pytest

from hlofuse.fusion.graphs.module_graph import ModuleGraph
from hlofuse.fusion.strategies import StrategyError, parse_strategy, run_strategy
from hlofuse.fusion.xla_gpu.devices import DEVICES, UnknownDeviceError, device
from hlofuse.fusion.xla_gpu.performance_model import (
    KERNEL_LAUNCH_OVERHEAD,
    GpuCostModel,
    flops_per_element,
)
from hlofuse.fusion.xla_gpu.priority import gpu_is_fusible, ir_profile, merged_not_too_large
from hlofuse.ir.ops import FusionKind
from hlofuse.ir.parser import parse_module

ELEMENTWISE = """
HloModule m
ENTRY e {
  x = f32[1048576] parameter(0)
  s = f32[1048576] sine(x)
  c = f32[] constant(2)
  b = f32[1048576] broadcast(c), dimensions={}
  m = f32[1048576] multiply(s, b)
  ROOT a = f32[1048576] add(m, x)
}
"""

# r1 reduces columns: reducing rows would make x - broadcast(r1) a normalisation diamond,
# which XLA gives to Triton (test_softmax_rewriter.py), not to the native emitters.
TWO_REDUCTIONS = """
HloModule m
add {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT r = f32[] add(p, q)
}
ENTRY e {
  x = f32[64,128] parameter(0)
  z = f32[] constant(0)
  r1 = f32[128] reduce(x, z), dimensions={0}, to_apply=add
  b = f32[64,128] broadcast(r1), dimensions={1}
  d = f32[64,128] subtract(x, b)
  ROOT r2 = f32[64] reduce(d, z), dimensions={1}, to_apply=add
}
"""


def test_device_descriptions_carry_the_data_sheet_figures() -> None:
    assert set(DEVICES) == {"a100", "h100", "h200"}
    h100, h200, a100 = device("h100"), device("H200"), device("a100")
    assert (h100.core_count, h100.compute_capability, h100.clock_rate_ghz) == (132, (9, 0), 1.98)
    assert h100.memory_bandwidth == 3.35232e12 and h200.memory_bandwidth == 4.8e12
    assert h200.core_count == h100.core_count and h200.l2_cache_size == h100.l2_cache_size
    assert (a100.core_count, a100.compute_capability, a100.fpus_per_core) == (108, (8, 0), 64)
    assert "gpu_device_info" in h100.target_config
    with pytest.raises(UnknownDeviceError, match="known: a100, h100, h200"):
        device("v100")


def test_strategy_names_the_device() -> None:
    assert parse_strategy("xla-gpu").device == "h100"
    assert parse_strategy("xla-gpu+device=a100").device == "a100"
    with pytest.raises(StrategyError, match="unknown GPU"):
        parse_strategy("xla-gpu+device=tpu")


def test_time_is_launch_plus_memory_and_compute_per_device() -> None:
    module = parse_module(ELEMENTWISE)
    with ModuleGraph.from_module(module) as graphs:
        entry = graphs.entry
        assert entry is not None
        sine = next(n for n in entry.nodes if n.name == "s")
        times = {name: GpuCostModel(device(name)).time(sine) for name in DEVICES}
        # 4 MiB read and 4 MiB written at the device's bandwidth, 958 flops per element.
        assert all(t > KERNEL_LAUNCH_OVERHEAD for t in times.values())
        assert times["a100"] > times["h100"] >= times["h200"]
        assert flops_per_element(sine) == 958.0
        model = GpuCostModel(device("h100"))
        fused = model.fused_time(sine, next(n for n in entry.nodes if n.name == "m"))
        assert fused < model.time(sine) + model.time(next(n for n in entry.nodes
                                                            if n.name == "m"))


def test_xla_gpu_fuses_an_elementwise_chain_into_one_kernel() -> None:
    result = run_strategy(parse_module(ELEMENTWISE), "xla-gpu")
    assert len(result.kernels) == 1
    assert set(result.kernels[0].instructions) >= {"s", "m", "a"}


def test_two_significant_reductions_stay_apart() -> None:
    result = run_strategy(parse_module(TWO_REDUCTIONS), "xla-gpu")
    assert len(result.kernels) == 2
    rules = {d.rule for d in result.decisions if d.verdict == "no"}
    assert rules & {"both-contain-reduce", "reduction-epilogue-becomes-loop"}


def test_fusible_ops_are_xlas_list() -> None:
    module = parse_module(TWO_REDUCTIONS)
    with ModuleGraph.from_module(module) as graphs:
        entry = graphs.entry
        assert entry is not None
        fusible = {n.name: gpu_is_fusible(n) for n in entry.nodes}
    assert fusible == {"x": False, "z": True, "r1": True, "b": True, "d": True, "r2": True}


def test_ir_size_counts_emissions_through_non_elementwise_users() -> None:
    module = parse_module(ELEMENTWISE)
    fused = run_strategy(module, "xla-gpu").module
    with ModuleGraph.from_module(fused) as graphs:
        entry = graphs.entry
        assert entry is not None
        fusion = next(n for n in entry.nodes if n.is_fusion)
        size, emitted = ir_profile(fusion)
        # x (read twice, element-wise: once), sine, constant, broadcast, multiply, add.
        assert size == 6 and emitted == {0: 1.0}
        assert bool(merged_not_too_large(next(iter(fusion.operands)), fusion))


def test_a_transpose_of_size_one_dimensions_launches_nothing() -> None:
    module = parse_module("""
HloModule m
ENTRY e {
  x = f32[1,4] parameter(0)
  ROOT t = f32[4,1] transpose(x), dimensions={1,0}
}
""")
    result = run_strategy(module, "xla-gpu")
    # Only the copy XLA's copy insertion makes of a parameter returned as the result: layout
    # assignment lays x out so the transpose is a bitcast, as XLA's log shows.
    assert [k.ops for k in result.kernels] == [("copy",)]
    assert [d.rule for d in result.decisions if d.pass_name == "layout-assignment"] == [
        "layout-bitcast"]
    kept = run_strategy(parse_module("""
HloModule m
ENTRY e {
  x = f32[2,4] parameter(0)
  ROOT t = f32[4,2] transpose(x), dimensions={1,0}
}
"""), "xla-gpu")
    assert [k.ops for k in kept.kernels] == [("transpose",)]


BITCAST_CONVERTS = """
HloModule m
ENTRY e {
  x = f32[12] parameter(0)
  u = u32[6] parameter(1)
  w = u32[2,2] parameter(2)
  b1 = u32[12] bitcast-convert(x)
  b2 = f32[6] bitcast-convert(u)
  one = u32[] constant(1)
  ones = u32[12] broadcast(one), dimensions={}
  s = u32[12] add(b1, ones)
  b3 = f32[12] bitcast-convert(s)
  h = f32[12] multiply(b3, x)
  wide = u64[2] bitcast-convert(w)
  ROOT t = (u32[12], f32[6], f32[12], u64[2]) tuple(b1, b2, h, wide)
}
"""


@pytest.mark.needs_cc
@pytest.mark.parametrize("backend", ["cpu", "cuda-emulated"])
def test_a_bitcast_convert_of_one_width_is_a_bitcast(backend: str) -> None:
    """XLA's layout-sensitive simplifier (HandleBitcastConvert) makes a same-width
    bitcast-convert a bitcast: free where unfused, fused as a bitcast elsewhere; the compiled
    bits are the interpreter's."""
    import numpy as np

    from hlofuse.reference.interpreter import evaluate
    from hlofuse.targets.c import compile_cpu
    from hlofuse.targets.cuda.compile import compile_cuda

    module = parse_module(BITCAST_CONVERTS)
    result = run_strategy(module, "xla-gpu")
    rewritten = [d.producer for d in result.decisions if d.rule == "bitcast-convert-is-bitcast"]
    assert sorted(rewritten) == ["b1", "b2", "b3"]
    # One loop kernel (s, b3, h with b1 as a second output) and the width-changing
    # bitcast-convert, which hlofuse's bitcast cannot express; b2 launches nothing.
    # And the copy of b2, a bitcast of a parameter in the result (XLA's copy insertion).
    assert sorted(tuple(sorted(k.ops)) for k in result.kernels) == [
        ("add", "bitcast", "bitcast", "broadcast", "constant", "multiply"),
        ("bitcast-convert",), ("copy",)]
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(12).astype(np.float32),
            rng.integers(0, 2**32, 6, dtype=np.uint64).astype(np.uint32),
            rng.integers(0, 2**32, (2, 2), dtype=np.uint64).astype(np.uint32)]
    expected = evaluate(module, args)
    compiled = (compile_cpu(result.module) if backend == "cpu"
                else compile_cuda(result.module, emulate=True))
    for want, have in zip(expected, compiled(*args), strict=True):
        assert np.asarray(have).dtype == np.asarray(want).dtype
        assert np.asarray(have).tobytes() == np.asarray(want).tobytes()


# A slice read only through a reshape that is a bitcast in XLA (rollout_mountain_car's key
# slice into the loop state), and a negation read by an exponential and by such a reshape.
BITCAST_USERS = """
HloModule m
ENTRY e {
  x = u32[3,2] parameter(0)
  y = f32[8] parameter(1)
  s = u32[1,2] slice(x), slice={[0:1], [0:2]}
  r = u32[2] reshape(s)
  n = f32[8] negate(y)
  e = f32[8] exponential(n)
  rn = f32[2,4] reshape(n)
  ROOT t = (u32[2], f32[8], f32[2,4]) tuple(r, e, rn)
}
"""


def test_a_reshape_that_is_a_bitcast_is_a_bitcast_user() -> None:
    """priority_fusion.cc: CanFuse fuses nothing into a bitcast, and a producer's priority
    covers its non-bitcast users only (CanFuseWithAllNonBitcastUsers); a row-major reshape is
    a bitcast in XLA. The slice stays a kernel of its own (XLA's `wrapped_slice`), and the
    negation is priced for the exponential alone."""
    result = run_strategy(parse_module(BITCAST_USERS), "xla-gpu")
    fusion = [d for d in result.decisions if d.pass_name == "gpu-priority-fusion"]
    assert [(d.verdict, d.rule) for d in fusion if d.producer == "s"] == [
        ("no", "consumer-is-bitcast")]
    assert {d.consumer for d in fusion if d.producer == "n"} == {"e"}
    assert ("s",) in [k.instructions for k in result.kernels]


# A scatter-add whose updates are computed, and a user of its result (rollout_bandit's and
# rollout_catch's per-step counters); a gather read by an element-wise op.
SCATTER = """
HloModule m
add_s32 {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}
ENTRY e {
  buf = s32[10] parameter(0)
  idx = s32[4,1] parameter(1)
  u = s32[4] parameter(2)
  one = s32[] constant(1)
  b1 = s32[4] broadcast(one), dimensions={}
  upd = s32[4] add(u, b1)
  sc = s32[10] scatter(buf, idx, upd), update_window_dims={}, inserted_window_dims={0},
    scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add_s32
  n = s32[10] negate(sc)
  g = s32[4,1] gather(n, idx), offset_dims={1}, collapsed_slice_dims={}, start_index_map={0},
    index_vector_dim=1, slice_sizes={1}
  ROOT m = s32[4,1] multiply(g, g)
}
"""


def test_scatter_and_gather_are_fusible_and_a_scatter_fusion_is_an_input_fusion() -> None:
    """priority_fusion.cc IsFusible lists gather and scatter. The updates' producers join the
    scatter, whose fusion is kInput (PriorityFusion::ChooseKind: the scatter emitter), and
    nothing fuses into a scatter's output (CanEmitInputFusedScatter); the negation joins the
    gather and its user."""
    with ModuleGraph.from_module(parse_module(SCATTER)) as graphs:
        entry = graphs.entry
        assert entry is not None
        fusible = {n.name: gpu_is_fusible(n) for n in entry.nodes}
    assert fusible["sc"] and fusible["g"]
    result = run_strategy(parse_module(SCATTER), "xla-gpu")
    kernels = {k.instructions: k.kind for k in result.kernels if k.ops != ("copy",)}
    # XLA's ScatterSimplifier reshapes the updates to [4, 1] (the inserted window dimension
    # back, xla_gpu/gather_scatter_simplifier.py): the reshape joins the scatter's kernel.
    (reshape,) = [inst.name for comp in result.module.computations
                  if any(i.op.text == "scatter" for i in comp.instructions)
                  for inst in comp.instructions if inst.op.text == "reshape"]
    assert kernels == {("one", "b1", "upd", reshape, "sc"): FusionKind.INPUT,
                       ("n", "g", "m"): FusionKind.LOOP}
    # The scatter updates the parameter `buf` in place: XLA copies it first.
    assert sum(1 for k in result.kernels if k.ops == ("copy",)) == 1
    refused = [d.message for d in result.decisions
               if d.pass_name == "gpu-priority-fusion" and d.verdict == "no"]
    assert any("do not fuse into the output of a scatter" in m for m in refused)


# A select of a concatenate (`sel`, the concatenate emitter's kernel once fused) and a
# sibling reading the same `old`, as rollout_jacobi_rope's observation and reset selects.
CONCATENATE_SIBLINGS = """
HloModule m
ENTRY e {
  x = f32[64,1] parameter(0)
  y = f32[64,1] parameter(1)
  p = pred[64,2] parameter(2)
  old = f32[64,2] parameter(3)
  e1 = f32[64,1] exponential(x)
  cat = f32[64,2] concatenate(e1, y), dimensions={1}
  sel = f32[64,2] select(p, cat, old)
  neg = f32[64,2] negate(old)
  ROOT t = (f32[64,2], f32[64,2]) tuple(sel, neg)
}
"""


def test_a_concatenate_fusion_is_an_input_fusion_no_multi_output_root() -> None:
    """PriorityFusion::ChooseKind gives the concatenate emitter's fusion kInput; multi-output
    fusion takes only loop fusions (IsFusibleAsMultiOutputFusionRoot), so the negation of the
    shared `old` stays a kernel of its own, as XLA keeps jacobi_rope's loop_select_fusion
    apart from its input_concatenate_fusion.1."""
    result = run_strategy(parse_module(CONCATENATE_SIBLINGS), "xla-gpu")
    kernels = {k.instructions: k.kind for k in result.kernels}
    # Without the kind, multi-output fusion made one kernel of the four instructions.
    assert kernels == {("e1", "cat", "sel"): FusionKind.INPUT, ("neg",): FusionKind.LOOP}
