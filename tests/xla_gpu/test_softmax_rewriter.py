"""xla-gpu's Triton normalisation fusions (fusion/xla_gpu/softmax_rewriter.py and the Triton path
of gpu_priority.py) against XLA's own output in the stored corpus; the fused modules run on
the CPU backend as the interpreter does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse.compare_xla.compare import Comparison, compare_texts
from hlofuse.fusion.graphs.graph import Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph
from hlofuse.fusion.strategies import run_strategy
from hlofuse.fusion.xla_gpu.softmax_rewriter import match_diamond
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module

DATA = Path(__file__).parents[1] / "data" / "xla_gpu"


def _module(name: str) -> Module:
    return parse_module((DATA / f"{name}.before.hlo").read_text())


def _compare(name: str) -> Comparison:
    return compare_texts((DATA / f"{name}.before.hlo").read_text(),
                         (DATA / f"{name}.h100.hlo").read_text())


def _node(graphs: ModuleGraph, name: str) -> Node:
    return next(n for g in graphs.graphs for n in g.nodes if n.name == name)


def test_row_softmax_is_one_triton_kernel_and_the_column_one_is_not() -> None:
    """softmax: XLA makes the row softmax (both diamonds) one Triton kernel; the column
    log-softmax reduces dimension 0, not the last one, so it stays a loop fusion."""
    result = _compare("softmax")
    assert result.same_count and result.same_grouping
    kinds = sorted(k.kind for k in result.ours.kernels)
    assert kinds == ["kCustom", "kLoop"]
    (triton,) = [k for k in result.ours.kernels if k.kind == "kCustom"]
    assert {"reduce_max.14", "reduce_sum.14", "exp.2", "div.3"} <= triton.members
    assert "reduce_max.15" not in triton.members


def test_diamonds_match_as_in_xla() -> None:
    with ModuleGraph.from_module(_module("softmax")) as graphs:
        diamond = match_diamond(_node(graphs, "div.3"))
        assert not isinstance(diamond, str)
        assert diamond.producer.name == "exp.2"  # two users: the walk stops there
        first = match_diamond(_node(graphs, "sub.8"))  # x - max(x): the producer is x
        assert not isinstance(first, str) and first.producer.name == "x.1"
        assert match_diamond(_node(graphs, "sub.10")) == \
            "the reduction does not reduce exactly the last dimension"


ROW_DIAMOND_THEN_REDUCE = """
HloModule m
add {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT r = f32[] add(p, q)
}
ENTRY e {
  x = f32[64,128] parameter(0)
  z = f32[] constant(0)
  r1 = f32[64] reduce(x, z), dimensions={1}, to_apply=add
  b = f32[64,128] broadcast(r1), dimensions={0}
  d = f32[64,128] subtract(x, b)
  ROOT r2 = f32[64] reduce(d, z), dimensions={1}, to_apply=add
}
"""


def test_a_row_diamond_takes_its_consumer_reduction_along() -> None:
    """x - broadcast(sum(x)) is a diamond; the row reduction reading it joins the Triton
    fusion (Triton's rules, not the native emitters' `both-contain-reduce`)."""
    result = run_strategy(parse_module(ROW_DIAMOND_THEN_REDUCE), "xla-gpu", debug=True)
    (kernel,) = result.kernels
    assert kernel.kind == "kCustom" and {"r1", "d", "r2"} <= set(kernel.instructions)
    assert not any(r.rule == "both-contain-reduce" for r in result.decisions)


def test_layer_norm_is_one_kernel_as_in_xla() -> None:
    """layer_norm: the mean and variance diamonds and the scale-and-shift epilogue (gamma,
    beta) become one Triton fusion through priority fusion's Triton path."""
    result = _compare("layer_norm")
    assert result.same_grouping
    (kernel,) = result.ours.kernels
    assert kernel.kind == "kCustom"
    assert {"reduce_sum.14", "reduce_sum.15", "mul.9", "add.5"} <= kernel.members


def test_mlp_loss_diamonds_become_triton_and_priority_fusion_logs_triton_rules() -> None:
    """mlp: the log-softmax is a Triton fusion. The one-hot mask multiplies by a convert from
    pred, which Triton does not emit; XLA's simplifier makes that multiply a select first (as
    `arithmetic-identities` does), which Triton emits, so the mask joins the fusion."""
    result = run_strategy(_module("mlp"), "xla-gpu", debug=True)
    rules = {r.rule for r in result.decisions if r.pass_name == "gpu-priority-fusion"}
    assert "triton-not-fusible" in rules
    # The only kernel Triton refuses is the loss's sum, which XLA's simplifier makes one
    # reduce of both dimensions (`reduce-of-reduce`) and XLA emits with its reduction
    # emitter (`fused_reduce`), not the mask.
    unsupported = [r for r in result.decisions if r.rule == "triton-unsupported"]
    assert unsupported and all("reduce_sum.23" in r.message for r in unsupported)
    # The one-hot's broadcast iota becomes an iota first (XLA's HandleBroadcast), and the
    # mean's division by the batch size a multiplication (HandleDivide: XLA's `multiply.2`
    # carries `div.1`'s op name).
    identities = [r.rule for r in result.decisions if r.pass_name == "arithmetic-identities"]
    assert sorted(identities) == ["broadcast-iota", "divide-by-constant", "pred-product-select"]
    fused = [r for r in result.decisions if r.pass_name == "softmax-rewriter-triton"]
    assert len(fused) == 2 and all(r.verdict == "fuse" for r in fused)


@pytest.mark.needs_cc
@pytest.mark.parametrize("name", ["softmax", "layer_norm", "mlp"])
def test_triton_fusions_run_on_the_cpu_backend(name: str) -> None:
    from hlofuse.reference.interpreter import evaluate, flatten_value
    from hlofuse.targets.c import compile_cpu

    module = _module(name)
    fused = run_strategy(module, "xla-gpu").module
    rng = np.random.default_rng(3)
    arguments = []
    for p in module.entry.parameters:
        if p.shape.dtype.text.startswith("s"):
            arguments.append(rng.integers(0, 4, p.shape.dims).astype(np.int32))
        else:
            arguments.append(rng.standard_normal(p.shape.dims).astype(np.float32))
    expected = flatten_value(evaluate(module, arguments))
    for actual, want in zip(flatten_value(evaluate(fused, arguments)), expected, strict=True):
        np.testing.assert_allclose(actual, want, rtol=1e-5, atol=1e-6)
    for actual, want in zip(flatten_value(compile_cpu(fused)(*arguments)), expected,
                            strict=True):
        np.testing.assert_allclose(actual, want, rtol=1e-4, atol=1e-5)


@pytest.mark.needs_cc
@pytest.mark.parametrize("name", ["layer_norm", "mlp_grad"])
def test_triton_and_gemm_fusions_run_on_the_emulated_cuda_backend(name: str) -> None:
    """The CUDA backend emits them as ordinary kernels too (built against its emulation)."""
    from hlofuse.reference.interpreter import evaluate, flatten_value
    from hlofuse.targets.cuda.compile import compile_cuda

    module = _module(name)
    fused = run_strategy(module, "xla-gpu").module
    rng = np.random.default_rng(5)
    arguments = [rng.standard_normal(p.shape.dims).astype(np.float32)
                 for p in module.entry.parameters]
    expected = flatten_value(evaluate(module, arguments))
    executable = compile_cuda(fused, emulate=True)
    assert executable.emulated
    for actual, want in zip(flatten_value(executable(*arguments)), expected, strict=True):
        np.testing.assert_allclose(actual, want, rtol=1e-4, atol=1e-4)
