"""Reduction kernels laid out as XLA's GPU reduction emitter lays them out (warp per row, block
per row, 32-column tiles through shared memory), built against the emulation header, whose
barriers and shuffles are exact: results equal the interpreter's (floats to rtol 1e-5, the
tree order of a GPU sum; integers and pred exactly)."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.fusion.strategies import run_strategy
from hlofuse.interpreter import evaluate, flatten_value
from hlofuse.ir.parser import parse_module
from hlofuse.runtime.cuda_executable import compile_cuda

from tests.cuda.conftest import needs_nvcc

OPS = {"add": "add", "max": "maximum", "min": "minimum", "mul": "multiply", "or": "or",
       "xor": "xor"}
INITS = {("add", "f32"): "0", ("add", "s32"): "0", ("max", "s32"): "-2147483648",
         ("min", "f64"): "inf", ("or", "pred"): "false", ("xor", "u8"): "0",
         ("mul", "s64"): "1", ("add", "f64"): "0"}


def _module(dtype: str, dims: tuple[int, ...], reduced: tuple[int, ...], op: str,
            epilogue: bool = False, second: bool = False) -> str:
    out = [d for k, d in enumerate(dims) if k not in reduced]
    over = ",".join(map(str, reduced))
    shape = f"{dtype}[{','.join(map(str, dims))}]"
    out_shape = f"{dtype}[{','.join(map(str, out))}]"
    lines = [
        "HloModule m",
        "",
        "red {",
        f"  a = {dtype}[] parameter(0)",
        f"  b = {dtype}[] parameter(1)",
        f"  ROOT rr = {dtype}[] {OPS[op]}(a, b)",
        "}",
        "",
        "ENTRY e {",
        f"  x = {shape} parameter(0)",
        f"  z = {dtype}[] constant({INITS[(op, dtype)]})",
        f"  r = {out_shape} reduce(x, z), dimensions={{{over}}}, "
        "to_apply=red",
    ]
    root = "r"
    if epilogue:
        lines += [f"  c = {dtype}[] constant(3)",
                  f"  cb = {out_shape} broadcast(c), dimensions={{}}",
                  f"  q = {out_shape} divide(r, cb)",
                  f"  n = {out_shape} negate(q)"]
        root = "n"
    if second:
        lines += [f"  xx = {shape} multiply(x, x)",
                  f"  r2 = {out_shape} reduce(xx, z), dimensions={{{over}}}, "
                  "to_apply=red",
                  f"  ROOT t = ({out_shape}, {out_shape}) tuple({root}, r2)"]
    else:
        lines[-1] = "  ROOT " + lines[-1].lstrip()
    lines.append("}")
    return "\n".join(lines) + "\n"


def _input(dtype: str, dims: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(0)
    if dtype == "pred":
        return rng.random(dims) < 0.02
    if dtype in ("f32", "f64"):
        return rng.standard_normal(dims).astype(np.float32 if dtype == "f32" else np.float64)
    kind = {"s32": np.int32, "s64": np.int64, "u8": np.uint8}[dtype]
    return rng.integers(-3 if dtype != "u8" else 0, 100, dims).astype(kind)


CASES = [
    ("f32", (6, 100), (1,), "add", "warp-row"),
    ("f32", (3, 5000), (1,), "add", "block-row"),
    ("f32", (300, 70), (0,), "add", "column"),
    ("f32", (4, 8, 16), (0, 1), "add", "column"),
    ("s32", (3, 50, 70), (1,), "max", "column"),
    ("s32", (40, 33), (1,), "add", "warp-row"),
    ("f64", (2, 3000), (1,), "min", "block-row"),
    ("pred", (10, 64), (1,), "or", "warp-row"),
    ("u8", (100, 40), (0,), "xor", "column"),
    ("s64", (5, 2, 3000), (1, 2), "mul", "block-row"),
]


def _check(text: str, kind: str, dtype: str) -> None:
    module = parse_module(text, "reduce.hlo")
    x = _input(dtype, module.entry.parameters[0].shape.dims)
    want = flatten_value(evaluate(module, [x]))
    executable = compile_cuda(run_strategy(module, "xla", debug=False).module, emulate=True)
    assert f"CUDA {kind} reduction" in executable.source()
    got = flatten_value(executable(x))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if np.asarray(w).dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.needs_cc
@pytest.mark.parametrize(("dtype", "dims", "reduced", "op", "kind"), CASES,
                         ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}-{c[3]}" for c in CASES])
def test_reduction_kernel_matches_interpreter(dtype: str, dims: tuple[int, ...],
                                              reduced: tuple[int, ...], op: str,
                                              kind: str) -> None:
    _check(_module(dtype, dims, reduced, op), kind, dtype)


@pytest.mark.needs_cc
def test_epilogue_after_the_reduce_is_in_the_same_grid() -> None:
    _check(_module("f32", (7, 90), (1,), "add", epilogue=True), "warp-row", "f32")


@pytest.mark.needs_cc
def test_two_reduces_of_one_input_share_the_grid() -> None:
    _check(_module("f32", (50, 40), (0,), "add", second=True), "column", "f32")


@needs_nvcc
def test_every_reduction_kind_compiles_with_nvcc() -> None:
    """One module per kind (and 8-bit, 64-bit shuffles), each compiled for sm_80 and sm_90."""
    from hlofuse.runtime.cuda_executable import compile_check, generate_cuda

    for dtype, dims, reduced, op, _ in [CASES[1], CASES[2], CASES[8], CASES[9]]:
        module = parse_module(_module(dtype, dims, reduced, op), "reduce.hlo")
        compile_check(generate_cuda(run_strategy(module, "xla", debug=False).module))


ARGMAX = """HloModule m

best {
  a = f32[] parameter(0)
  b = f32[] parameter(2)
  gt = pred[] compare(a, b), direction=GT
  nan = pred[] compare(a, a), direction=NE
  keep = pred[] or(gt, nan)
  value = f32[] select(keep, a, b)
  eq = pred[] compare(a, b), direction=EQ
  i = s32[] parameter(1)
  j = s32[] parameter(3)
  lower = pred[] compare(i, j), direction=LT
  tie = pred[] and(eq, lower)
  first = pred[] or(keep, tie)
  index = s32[] select(first, i, j)
  ROOT t = (f32[], s32[]) tuple(value, index)
}

ENTRY e {
  x = f32[ROWS,COLS] parameter(0)
  io = s32[ROWS,COLS] iota(), iota_dimension=AXIS
  lo = f32[] constant(-inf)
  zero = s32[] constant(0)
  r = (f32[OUT], s32[OUT]) reduce(x, io, lo, zero), dimensions={AXIS}, to_apply=best
  v = f32[OUT] get-tuple-element(r), index=0
  ROOT k = s32[OUT] get-tuple-element(r), index=1
}
"""


@pytest.mark.needs_cc
@pytest.mark.parametrize(("rows", "cols", "axis", "kind"),
                         [(6, 300, 1, "warp-row"), (2, 4000, 1, "block-row"),
                          (500, 40, 0, "column")])
def test_variadic_argmax_with_ties_is_exact(rows: int, cols: int, axis: int, kind: str) -> None:
    """A reducer without an identity (argmax: value and index) starts each thread empty; the
    first index of the maximum wins, whatever the tree order (ties are planted)."""
    out = rows if axis == 1 else cols
    text = (ARGMAX.replace("ROWS", str(rows)).replace("COLS", str(cols))
            .replace("AXIS", str(axis)).replace("OUT", str(out)))
    module = parse_module(text, "argmax.hlo")
    x = np.floor(_input("f32", (rows, cols)) * 2).astype(np.float32)  # many equal maxima
    want = flatten_value(evaluate(module, [x]))
    executable = compile_cuda(run_strategy(module, "xla", debug=False).module, emulate=True)
    assert f"CUDA {kind} reduction" in executable.source()
    got = flatten_value(executable(x))
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[0], np.argmax(x, axis=axis))
