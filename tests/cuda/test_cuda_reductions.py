"""Reduction kernels laid out as XLA's GPU reduction emitter lays them out (warp per row, block
per row, 32-column tiles through shared memory), built against the emulation header, whose
barriers and shuffles are exact: results equal the interpreter's (floats to rtol 1e-5, the
tree order of a GPU sum; integers and pred exactly). That each case's kernel is of its kind
and a grid (launched on more than one thread) is checked on the CUDA source by
tests/filecheck/codegen-cuda/reduction-<kind>.hlo and reduce-*.hlo."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.cuda.compile import compile_cuda

from tests.conftest import assert_matches, load_corpus_case
from tests.cuda.conftest import fused_corpus, needs_nvcc

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
    ("f32", (64, 8, 40), (0, 1), "add", "column"),
    # XLA's IsUnnestedReductionFasterThanElemental: 32 rows x 16 columns, a thread per output
    ("f32", (4, 8, 16), (0, 1), "add", "elemental"),
    ("s32", (3, 50, 70), (1,), "max", "column"),
    ("s32", (40, 33), (1,), "add", "warp-row"),
    ("f64", (2, 3000), (1,), "min", "block-row"),
    ("pred", (10, 64), (1,), "or", "warp-row"),
    ("u8", (100, 40), (0,), "xor", "column"),
    ("s64", (5, 2, 3000), (1, 2), "mul", "block-row"),
    # Reduced dimensions that are not contiguous. (R, K, R): XLA's batched row reduction, each
    # kept index's elements are major x minor; up to 8 batch rows stay one reduce.
    ("s32", (6, 20, 64), (0, 2), "add", "warp-row"),
    ("f32", (4, 3, 1000), (0, 2), "add", "block-row"),
    # Neither the kept nor the reduced dimensions contiguous: XLA's loop emitter.
    ("s32", (7, 5, 9, 6), (0, 2), "add", "elemental"),
    ("f64", (3, 4, 5, 6), (1, 3), "min", "elemental"),
]


def _check(text: str, dtype: str, x: np.ndarray | None = None) -> None:
    module = parse_module(text, "reduce.hlo")
    if x is None:
        x = _input(dtype, module.entry.parameters[0].shape.dims)
    want = flatten_value(evaluate(module, [x]))
    executable = compile_cuda(run_strategy(module, "xla", debug=False).module, emulate=True)
    got = flatten_value(executable(x))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if np.asarray(w).dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.needs_cc
@pytest.mark.parametrize(("dtype", "dims", "reduced", "op"), [c[:4] for c in CASES],
                         ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}-{c[3]}" for c in CASES])
def test_reduction_kernel_matches_interpreter(dtype: str, dims: tuple[int, ...],
                                              reduced: tuple[int, ...], op: str) -> None:
    _check(_module(dtype, dims, reduced, op), dtype)


@pytest.mark.needs_cc
def test_epilogue_after_the_reduce_is_in_the_same_grid() -> None:
    _check(_module("f32", (7, 90), (1,), "add", epilogue=True), "f32")


@pytest.mark.needs_cc
def test_two_reduces_of_one_input_share_the_grid() -> None:
    _check(_module("f32", (50, 40), (0,), "add", second=True), "f32")


def _case(dims: tuple[int, ...], reduced: tuple[int, ...], kind: str
          ) -> tuple[str, tuple[int, ...], tuple[int, ...], str, str]:
    return next(c for c in CASES if c[1] == dims and c[2] == reduced and c[4] == kind)


@needs_nvcc
def test_every_reduction_kind_compiles_with_nvcc() -> None:
    """One module per kind (8-bit and 64-bit shuffles, the batched row, the elemental kernel,
    f16 and bf16 accumulators, side outputs, loop kernels with reduces), each compiled for
    sm_80 and sm_90."""
    from hlofuse.targets.cuda.compile import compile_check, generate_cuda

    texts = [_module(c[0], c[1], c[2], c[3]) for c in
             [CASES[1], CASES[2], CASES[9], CASES[10], _case((6, 20, 64), (0, 2), "warp-row"),
              _case((7, 5, 9, 6), (0, 2), "elemental")]]
    texts += [_module("f16", (6, 100), (1,), "add"), _module("bf16", (100, 70), (0,), "add"),
              _side_module(300, 70, 0)]
    for text in texts:
        module = parse_module(text, "reduce.hlo")
        compile_check(generate_cuda(run_strategy(module, "xla", debug=False).module))
    # Loop kernels computing their reduces element by element.
    compile_check(generate_cuda(fused_corpus("layer_norm", "priority")))
    compile_check(generate_cuda(fused_corpus("mlp_grad", "priority")))


INITS.update({("add", "f16"): "0", ("add", "bf16"): "0", ("max", "bf16"): "-inf",
              ("max", "f16"): "-inf"})
LOW = {"f16": (np.float16, 2.0**-11), "bf16": (ml_dtypes.bfloat16, 2.0**-8)}


@pytest.mark.needs_cc
@pytest.mark.parametrize(("dtype", "dims", "reduced", "op"), [
    ("f16", (6, 100), (1,), "add"),  # warp-row
    ("f16", (3, 5000), (1,), "add"),  # block-row
    ("bf16", (300, 70), (0,), "add"),  # column
    ("bf16", (3, 5000), (1,), "max"),  # block-row
    ("f16", (300, 70), (0,), "max"),  # column
])
def test_low_precision_reduction_is_a_grid(dtype: str, dims: tuple[int, ...],
                                           reduced: tuple[int, ...], op: str) -> None:
    """f16 and bf16 reduces run as grids. The reference sums f16 in f32 (rounded once) and
    bf16 in order (rounded each step); the grid applies an f16 reducer in f16 and accumulates
    a bf16 sum in f32 (XLA on sm_80), so sums agree to the bound of a low-precision
    summation, 2 (n - 1) u sum|x| + u |sum|; max is exact."""
    numpy_type, unit = LOW[dtype]
    x = np.random.default_rng(1).standard_normal(dims).astype(numpy_type)
    module = parse_module(_module(dtype, dims, reduced, op), "reduce.hlo")
    want = flatten_value(evaluate(module, [x]))[0].astype(np.float64)
    executable = compile_cuda(run_strategy(module, "xla", debug=False).module, emulate=True)
    got = flatten_value(executable(x))[0]
    assert got.dtype == x.dtype
    got = got.astype(np.float64)
    if op == "max":
        np.testing.assert_array_equal(got, np.max(x.astype(np.float64), axis=reduced))
        np.testing.assert_array_equal(got, want)
        return
    n = math.prod(dims[d] for d in reduced)
    wide = x.astype(np.float64)
    bound = 2 * (n - 1) * unit * np.abs(wide).sum(axis=reduced) + unit * np.abs(want)
    assert np.all(np.abs(got - want) <= bound)
    # Small integers: every partial sum is exact in any order, so the results are equal.
    rng = np.random.default_rng(2)
    small = (rng.integers(-2, 3, dims) * (rng.random(dims) < 100 / n)).astype(numpy_type)
    assert np.abs(small.astype(np.float64)).sum(axis=reduced).max() <= 256
    np.testing.assert_array_equal(flatten_value(executable(small))[0],
                                  flatten_value(evaluate(module, [small]))[0])


@pytest.mark.needs_cc
def test_bf16_sum_accumulates_in_f32() -> None:
    """XLA on sm_80 computes a bf16 add reduce in f32 (FloatNormalization: bf16 add needs
    Hopper): 256 + 63 ones is 319 in f32, 320 once rounded; rounded after every step it
    would stay at 256 (the reference's in-order bf16 sum)."""
    module = parse_module(_module("bf16", (2, 64), (1,), "add"), "reduce.hlo")
    x = np.ones((2, 64), dtype=ml_dtypes.bfloat16)
    x[:, 0] = 256
    executable = compile_cuda(run_strategy(module, "xla", debug=False).module, emulate=True)
    np.testing.assert_array_equal(flatten_value(executable(x))[0].astype(np.float32), [320, 320])
    want = flatten_value(evaluate(module, [x]))[0].astype(np.float32)
    assert np.all(np.abs(want - 320) <= 2 * 63 * 2.0**-8 * 319)


SIDE = """HloModule m

red {
  a = DT[] parameter(0)
  b = DT[] parameter(1)
  ROOT rr = DT[] add(a, b)
}

ENTRY e {
  x = DT[R,C] parameter(0)
  two = DT[] constant(2)
  tb = DT[R,C] broadcast(two), dimensions={}
  e = DT[R,C] multiply(x, tb)
  z = DT[] constant(0)
  r = DT[OUT] reduce(e, z), dimensions={AXIS}, to_apply=red
  ROOT t = (DT[R,C], DT[OUT]) tuple(e, r)
}
"""


def _side_module(rows: int, cols: int, axis: int, dtype: str = "f32") -> str:
    return (SIDE.replace("DT", dtype).replace("R,C", f"{rows},{cols}")
            .replace("OUT", str(rows if axis == 1 else cols)).replace("AXIS", str(axis)))


@pytest.mark.needs_cc
@pytest.mark.parametrize(("rows", "cols", "axis", "dtype"),
                         [(6, 300, 1, "f32"), (300, 70, 0, "s32"), (2, 3000, 1, "s32"),
                          (20, 12, 1, "f32")])  # warp-row, column, block-row, elemental
def test_side_output_of_the_input_shape_shares_the_grid(rows: int, cols: int, axis: int,
                                                        dtype: str) -> None:
    """XLA's multi-output reduction fusion: an output of the reduce input's shape beside the
    reduce, written by the thread that reads the element for the reduction."""
    module = parse_module(_side_module(rows, cols, axis, dtype), "side.hlo")
    fused = run_strategy(module, "xla", debug=False).module.entry.instructions
    assert [i.op for i in fused].count(Op.FUSION) == 1  # one multi-output fusion, one kernel
    _check(_side_module(rows, cols, axis, dtype), dtype)


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
@pytest.mark.parametrize(("rows", "cols", "axis"),
                         [(6, 300, 1), (2, 4000, 1), (500, 40, 0),
                          (30, 20, 1)])  # warp-row, block-row, column, elemental
def test_variadic_argmax_with_ties_is_exact(rows: int, cols: int, axis: int) -> None:
    """A reducer without an identity (argmax: value and index) starts each thread empty; the
    first index of the maximum wins, whatever the tree order (ties are planted)."""
    out = rows if axis == 1 else cols
    text = (ARGMAX.replace("ROWS", str(rows)).replace("COLS", str(cols))
            .replace("AXIS", str(axis)).replace("OUT", str(out)))
    module = parse_module(text, "argmax.hlo")
    x = np.floor(_input("f32", (rows, cols)) * 2).astype(np.float32)  # many equal maxima
    want = flatten_value(evaluate(module, [x]))
    executable = compile_cuda(run_strategy(module, "xla", debug=False).module, emulate=True)
    got = flatten_value(executable(x))
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[0], np.argmax(x, axis=axis))


@pytest.mark.needs_cc
@pytest.mark.parametrize("strategy", ["priority", "xla-gpu"])
@pytest.mark.parametrize("name", ["layer_norm", "mlp_grad", "softmax"])
def test_corpus_loop_kernels_with_reduces_match_jax(name: str, strategy: str) -> None:
    """Corpus fusions whose outputs are broadcasts or concatenated slices of sums, their
    reduces computed in grids (reduce-kernels-are-grids-*.hlo): the emulated build equals
    JAX's outputs."""
    _, inputs, expected = load_corpus_case(name)
    executable = compile_cuda(fused_corpus(name, strategy), emulate=True)
    assert_matches(flatten_value(executable(*inputs)), expected, f"{name} ({strategy})")


@pytest.mark.needs_cc
def test_reduce_over_a_size_one_dimension_is_a_grid() -> None:
    """Nothing reduced but the initial value, compiled as written (the `none` strategy now
    simplifies such a reduce to a reshape); its grid is checked by
    reduce-of-size-one-dimension.hlo."""
    text = _module("s32", (1, 300), (0,), "add")
    module = parse_module(text, "degenerate.hlo")
    x = _input("s32", (1, 300))
    executable = compile_cuda(module, emulate=True)
    np.testing.assert_array_equal(flatten_value(executable(x))[0],
                                  flatten_value(evaluate(module, [x]))[0])
