"""maximum and minimum against a constant bound (a clip, a ReLU) take shorter forms in C
(templates.HEADER, hlofuse_max_f_plain/_flush, hlofuse_max_zero_f_*) with XLA's results: NaN
wins, operands read flushed, -0 < +0; the general form where the bound is -0, subnormal,
infinite or NaN (or +0 for minimum). Which form each bound takes is checked on the C by
tests/filecheck/codegen-c/extremum-*.hlo."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c import compile_cpu

pytestmark = pytest.mark.needs_cc

BOUNDS = ["2", "-2", "1.5e-38", "-1.5e-38", "3e+38", "1e-40", "-0", "0", "inf", "nan"]


def _module(dtype: str, bound: str) -> str:
    n = len(_values(np.float32))
    lines = [f"  x = {dtype}[{n}] parameter(0)",
             f"  c = {dtype}[] constant({bound})",
             f"  cs = {dtype}[{n}] broadcast(c), dimensions={{}}"]
    outs = []
    for k, (op, a, b) in enumerate([("maximum", "x", "cs"), ("maximum", "cs", "x"),
                                    ("minimum", "x", "cs"), ("minimum", "cs", "x")]):
        lines.append(f"  r{k} = {dtype}[{n}] {op}({a}, {b})")
        outs.append(f"r{k}")
    shape = ", ".join(f"{dtype}[{n}]" for _ in outs)
    lines.append(f"  ROOT t = ({shape}) tuple({', '.join(outs)})")
    return "HloModule m\n\nENTRY main {\n" + "\n".join(lines) + "\n}\n"


def _values(dtype: type) -> np.ndarray:
    info = np.finfo(dtype)
    tiny = info.smallest_subnormal
    values = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 2.5, -2.5, 1.9, -1.9, np.inf, -np.inf, np.nan,
              -np.nan, tiny, -tiny, tiny * 5, -tiny * 5, info.tiny, -info.tiny, 1.5e-38,
              -1.5e-38, 3e38, -3e38, info.max, -info.max]
    return np.array(values, dtype=dtype)


@pytest.mark.parametrize("bound", BOUNDS)
@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_extremum_against_a_constant(dtype: str, bound: str) -> None:
    np_dtype = np.float32 if dtype == "f32" else np.float64
    x = _values(np_dtype)
    if dtype == "f64" and bound == "1e-40":
        bound = "1e-310"  # a subnormal double
    module = parse_module(_module(dtype, bound))
    # fused, so that the bound reaches the kernel as a literal
    executable = compile_cpu(run_strategy(module, "xla", debug=False).module)
    actual = flatten_value(executable(x))
    expected = flatten_value(evaluate(module, [x]))
    bits = np.uint32 if dtype == "f32" else np.uint64
    for k, (a, e) in enumerate(zip(actual, expected)):
        # bit for bit: signed zeros, flushed subnormals and NaN payloads included
        np.testing.assert_array_equal(np.asarray(a).view(bits), e.view(bits),
                                      err_msg=f"r{k} bound {bound}")


def test_a_computed_operand_needs_no_flush() -> None:
    """max/min of a product against a bound: the product is never subnormal (FTZ flushes it),
    so both take the unflushed form, with the reference's bits where products underflow."""
    x = _values(np.float32)
    z = np.resize(np.array([1e-20, -1e-20, 1e-30, 3.0, -0.5, np.nan, np.inf, 0.0], np.float32),
                  x.size)
    n = x.size
    module = parse_module(f"""HloModule m

ENTRY main {{
  x = f32[{n}] parameter(0)
  z = f32[{n}] parameter(1)
  p = f32[{n}] multiply(x, z)
  lo = f32[] constant(-2)
  los = f32[{n}] broadcast(lo), dimensions={{}}
  hi = f32[] constant(2)
  his = f32[{n}] broadcast(hi), dimensions={{}}
  up = f32[{n}] maximum(p, los)
  clipped = f32[{n}] minimum(up, his)
  ROOT t = (f32[{n}], f32[{n}]) tuple(up, clipped)
}}
""")
    executable = compile_cpu(run_strategy(module, "xla", debug=False).module)
    actual = flatten_value(executable(x, z))
    expected = flatten_value(evaluate(module, [x, z]))
    for k, (a, e) in enumerate(zip(actual, expected)):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint32), e.view(np.uint32),
                                      err_msg=f"out{k}")
    relu_module = parse_module(f"""HloModule m

ENTRY main {{
  x = f32[{n}] parameter(0)
  z = f32[{n}] parameter(1)
  p = f32[{n}] multiply(x, z)
  zero = f32[] constant(0)
  zeros = f32[{n}] broadcast(zero), dimensions={{}}
  ROOT r = f32[{n}] maximum(zeros, p)
}}
""")
    relu = compile_cpu(run_strategy(relu_module, "xla", debug=False).module)
    np.testing.assert_array_equal(np.asarray(relu(x, z)).view(np.uint32),
                                  evaluate(relu_module, [x, z]).view(np.uint32))
