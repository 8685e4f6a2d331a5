"""xla-gpu's Triton GEMM fusions (fusion/xla_gpu/gemm_fusion.py) against XLA's own output in the
stored corpus, and the fused modules run on the CPU backend as the interpreter does."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from hlofuse.compare_xla.compare import compare_texts
from hlofuse.fusion.strategies import run_strategy
from hlofuse.fusion.xla_gpu.gemm_fusion import TRITON_GEMM_KIND
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.parser import parse_module

DATA = Path(__file__).parents[1] / "data" / "xla_gpu"
_CLONE = re.compile(r"(\.clone(\.\d+)?)+$")  # a duplicated instruction's clone


def _module(name: str) -> Module:
    return parse_module((DATA / f"{name}.before.hlo").read_text())


def _gemm_fusions(module: Module) -> dict[str, set[str]]:
    """Each Triton GEMM fusion's dot -> the names of the instructions it computes."""
    found: dict[str, set[str]] = {}
    for computation in module.computations:
        for inst in computation.instructions:
            if not _is_gemm(inst):
                continue
            body = {_CLONE.sub("", i.name): i for i in inst.calls[0].instructions}
            dots = [n for n, i in body.items() if i.op.text == "dot"]
            assert len(dots) == 1
            found[dots[0]] = {n for n, i in body.items() if i.op.text != "parameter"}
    return found


def _is_gemm(inst: Instruction) -> bool:
    return inst.op.text == "fusion" and inst.attrs.get("kind") == "kCustom" and any(
        key == "backend_config" and TRITON_GEMM_KIND in raw.text for key, raw in inst.extra)


def test_bias_and_relu_join_the_gemm_as_in_xla() -> None:
    """matmul_bias_relu: XLA launches one kernel, the Triton GEMM with the bias add and the
    maximum as its epilogue (and the broadcasts they read)."""
    result = compare_texts((DATA / "matmul_bias_relu.before.hlo").read_text(),
                           (DATA / "matmul_bias_relu.h100.hlo").read_text())
    assert result.same_grouping and result.first_difference is None
    (kernel,) = result.ours.kernels
    assert kernel.kind == "kCustom"
    assert kernel.members == {"dot_general.1", "add.2", "add.3", "max.2", "max.3"}


def test_mlp_grad_gemms_follow_xla_rules() -> None:
    """mlp_grad: each gemm's epilogue stops where XLA's does (a user with several users, an
    operand that is neither a parameter nor a broadcast), its prologue takes the cheap
    element-wise producers (duplicated: `max.1` feeds two GEMMs), and the dot of 96 elements
    ((8 + 16) x 4) stays a dot for the loop emitter."""
    result = run_strategy(_module("mlp_grad"), "xla-gpu", debug=True)
    gemms = _gemm_fusions(result.module)
    assert "dot_general.11" not in gemms
    assert set(gemms) == {f"dot_general.{n}" for n in (8, 9, 10, 12, 13, 14, 15)}
    assert {"add.7", "tanh.1"} <= gemms["dot_general.8"]
    assert gemms["dot_general.9"] >= {"add.9"} and "max.1" not in gemms["dot_general.9"]
    # Epilogue add, then subtract of the parameter y; the prologue recomputes max.1.
    assert {"max.1", "add.11", "sub.4"} <= gemms["dot_general.10"]
    assert "square.1" not in gemms["dot_general.10"]
    # mul.6 reads sub.5 as well: "has multiple inputs", so the GEMM ends at its dot.
    assert {"gt.1", "select_n.1"} <= gemms["dot_general.12"]
    assert "mul.6" not in gemms["dot_general.12"]
    assert {"mul.6", "mul.7", "add_any.1", "sub.5"} <= gemms["dot_general.13"]
    assert "max.1" in gemms["dot_general.15"]
    rules = {(r.rule, r.producer) for r in result.decisions if r.pass_name == "gemm-fusion"}
    assert ("gemm-too-small", "dot_general.11") in rules


def test_gemm_fusions_are_left_alone_by_later_passes() -> None:
    """XLA's priority and multi-output fusion do not fuse into or out of kCustom fusions: the
    mlp's three GEMMs stay separate kernels with their epilogues."""
    result = run_strategy(_module("mlp"), "xla-gpu")
    gemms = _gemm_fusions(result.module)
    assert set(gemms) == {"dot_general.3", "dot_general.4", "dot_general.5"}
    assert {"add.7", "tanh.1"} <= gemms["dot_general.3"]
    assert {"add.9", "max.4"} <= gemms["dot_general.4"]
    assert "reduce_max.7" not in gemms["dot_general.5"]


def test_tiny_dots_stay_dots() -> None:
    """batched_matmul's dots are all under the threshold: no GEMM fusion."""
    result = run_strategy(_module("batched_matmul"), "xla-gpu")
    assert not _gemm_fusions(result.module)


@pytest.mark.needs_cc
@pytest.mark.parametrize("name", ["matmul_bias_relu", "mlp_grad"])
def test_gemm_fusions_run_on_the_cpu_backend(name: str) -> None:
    from hlofuse.reference.interpreter import evaluate, flatten_value
    from hlofuse.targets.c import compile_cpu

    module = _module(name)
    fused = run_strategy(module, "xla-gpu").module
    assert _gemm_fusions(fused)
    rng = np.random.default_rng(7)
    entry = module.entry
    arguments = [rng.standard_normal(p.shape.dims).astype(np.float32)
                 for p in entry.parameters]
    expected = flatten_value(evaluate(module, arguments))
    for actual, want in zip(flatten_value(evaluate(fused, arguments)), expected, strict=True):
        np.testing.assert_allclose(actual, want, rtol=1e-5, atol=1e-5)
    compiled = compile_cpu(fused)
    for actual, want in zip(flatten_value(compiled(*arguments)), expected, strict=True):
        np.testing.assert_allclose(actual, want, rtol=1e-4, atol=1e-4)
