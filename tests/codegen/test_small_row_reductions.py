"""Reductions over a short minor dimension (log-sum-exp over a policy's action logits,
[4096, k]) vectorise for any k (probe 43, codegen/short_rows.py): written out in the loop over
rows, gcc vectorised them only for k = 3, 4, 8, 16 (interleaved loads of those group sizes),
and for k = 5, 6, 7 the row's exp and log ran scalar: 10 ns per element against 2.4 (one
thread, `exe.profile`). Five actions (a grid's moves and a no-op), six (MinAtar) and eighteen
(Atari) are common action counts. Chunked, each row is still reduced in the reference's
order: the results are those of the loop over rows bit for bit, and the interpreter's (to
the math library's rounding where the program takes exp or log)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from hlofuse.codegen.kernel_spec import KernelOptions
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c import compile_cpu
from hlofuse.targets.c.build import CompileOptions, generate_c

from tests.codegen.test_whole_loop_vectorises import _assert_vectorised, _loop_end

pytestmark = pytest.mark.needs_cc

ROWS_BEFORE = CompileOptions(kernel=KernelOptions(short_row_chunk=0))
CHUNK_LOOP = re.compile(r"for \(int64_t chunk\d+ = ")


def program(width: int) -> str:
    return f"""
HloModule row_logsumexp

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}}

ENTRY e {{
  x = f32[4096,{width}] parameter(0)
  ex = f32[4096,{width}] exponential(x)
  z = f32[] constant(0)
  s = f32[4096] reduce(ex, z), dimensions={{1}}, to_apply=add
  ROOT l = f32[4096] log(s)
}}
"""


def stable_program(rows: int, width: int) -> str:
    """A policy's log-sum-exp as JAX writes it (the row's max subtracted before exp) over
    logits with a bias, and the log-probabilities."""
    shape = f"f32[{rows},{width}]"
    return f"""
HloModule stable_logsumexp

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}}

max {{
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT mx = f32[] maximum(p, q)
}}

ENTRY e {{
  x = {shape} parameter(0)
  bias = f32[{width}] parameter(1)
  bb = {shape} broadcast(bias), dimensions={{1}}
  y = {shape} add(x, bb)
  ninf = f32[] constant(-inf)
  m = f32[{rows}] reduce(y, ninf), dimensions={{1}}, to_apply=max
  mb = {shape} broadcast(m), dimensions={{0}}
  d = {shape} subtract(y, mb)
  ex = {shape} exponential(d)
  z = f32[] constant(0)
  s = f32[{rows}] reduce(ex, z), dimensions={{1}}, to_apply=add
  l = f32[{rows}] log(s)
  lse = f32[{rows}] add(l, m)
  lb = {shape} broadcast(lse), dimensions={{0}}
  logp = {shape} subtract(d, lb)
  ROOT t = (f32[{rows}], {shape}) tuple(lse, logp)
}}
"""


def _source(text: str, strategy: str = "xla") -> str:
    fused = run_strategy(parse_module(text), strategy, debug=False)
    return generate_c(fused.module).source.text


def _loops_computing(source: str, call: str) -> list[int]:
    """The 1-based lines of the innermost loops around each use of `call` in the kernels
    (the runtime header before them defines the math functions)."""
    lines = source.split("\n")
    kernels = next(k for k, line in enumerate(lines) if line.startswith("/* kernel "))
    loops = []
    for k, line in enumerate(lines):
        if call not in line or k < kernels:
            continue
        heads = [h for h in range(k, -1, -1) if re.match(r"\s*for \(", lines[h])
                 and _loop_end(lines, h + 1) >= k + 1]
        assert heads, f"{call} outside a loop"
        loops.append(heads[0] + 1)
    assert loops, f"no {call} in the kernel"
    return sorted(set(loops))


def _check_vectorised(tmp_path: Path, source: str) -> None:
    """The loops that take exp and log, the costly part of a row, are vector loops."""
    loops = _loops_computing(source, "hlofuse_expf(") + _loops_computing(source, "hlofuse_logf(")
    _assert_vectorised(tmp_path, source, loops)


def _assert_matches(text: str, inputs: list[np.ndarray], strategy: str = "xla",
                    exact: bool = True) -> None:
    """Chunked, the compiled program gives the loop over rows' bits and the interpreter's
    values (its bits where `exact`)."""
    expected = [np.asarray(v) for v in flatten_value(evaluate(parse_module(text), inputs))]
    fused = run_strategy(parse_module(text), strategy, debug=False).module
    got = [np.asarray(v) for v in flatten_value(compile_cpu(fused)(*inputs))]
    before = [np.asarray(v) for v in flatten_value(compile_cpu(fused, ROWS_BEFORE)(*inputs))]
    assert len(got) == len(expected) == len(before)
    for g, b, e in zip(got, before, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert g.tobytes() == b.tobytes()
        if exact:
            assert g.tobytes() == e.tobytes(), (g, e)
        else:
            np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("width", [4, 5, 6, 7, 8, 18])
def test_a_row_reduction_over_a_short_row_vectorises(tmp_path: Path, width: int) -> None:
    _check_vectorised(tmp_path, _source(program(width)))


@pytest.mark.parametrize("width", [5, 6, 7, 18])
def test_a_row_log_sum_exp_equals_the_interpreter(width: int) -> None:
    x = np.random.default_rng(width).standard_normal((4096, width)).astype(np.float32)
    _assert_matches(program(width), [x], exact=False)


@pytest.mark.parametrize("strategy", ["xla", "max"])
def test_the_max_subtracted_before_exp_keeps_the_row_vectorised(tmp_path: Path,
                                                                 strategy: str) -> None:
    """The row's max reaches exp broadcast along the row, the bias broadcast to every row;
    4099 rows leave a last chunk part full."""
    text = stable_program(4099, 6)
    source = _source(text, strategy)
    assert CHUNK_LOOP.search(source)
    _check_vectorised(tmp_path, source)
    rng = np.random.default_rng(6)
    inputs = [rng.standard_normal((4099, 6)).astype(np.float32) * 4,
              rng.standard_normal(6).astype(np.float32)]
    _assert_matches(text, inputs, strategy, exact=False)


def reduce_program(dtype: str, op: str, init: str, dims: tuple[int, ...],
                   producer: str) -> str:
    """reduce(producer(x)) over the dims after the first, then the rows' values plus `y`
    (for pred, `or`ed with it): a consumer reading another input at the row."""
    shape = f"{dtype}[{','.join(map(str, dims))}]"
    rows = dims[0]
    reduced = ",".join(str(d) for d in range(1, len(dims)))
    element = "pred" if producer.startswith("compare") else dtype
    consumer = "or" if element == "pred" else "add"
    return f"""
HloModule short_rows

f {{
  a = {element}[] parameter(0)
  b = {element}[] parameter(1)
  ROOT r = {element}[] {op}(a, b)
}}

ENTRY e {{
  x = {shape} parameter(0)
  y = {element}[{rows}] parameter(1)
  zero = {dtype}[] constant(0)
  zeros = {shape} broadcast(zero), dimensions={{}}
  v = {element}[{','.join(map(str, dims))}] {producer}
  c = {element}[] constant({init})
  s = {element}[{rows}] reduce(v, c), dimensions={{{reduced}}}, to_apply=f
  ROOT o = {element}[{rows}] {consumer}(s, y)
}}
"""


REDUCERS = [
    ("f32", "add", "0.5", "negate(x)"),
    ("f32", "maximum", "-inf", "negate(x)"),
    ("f32", "maximum", "0.25", "multiply(x, x)"),
    ("f32", "minimum", "inf", "subtract(x, zeros)"),
    ("f32", "multiply", "1", "negate(x)"),
    ("f16", "add", "0", "multiply(x, x)"),
    ("f64", "add", "-1", "abs(x)"),
    ("s32", "add", "3", "multiply(x, x)"),
    ("s32", "maximum", "-2147483648", "negate(x)"),
    ("s64", "multiply", "1", "add(x, x)"),
    ("u8", "xor", "0", "add(x, x)"),
    ("s32", "and", "-1", "negate(x)"),
    ("f32", "or", "false", "compare(x, zeros), direction=GT"),
    ("s32", "and", "true", "compare(x, zeros), direction=NE"),
]


def _inputs(dtype: str, dims: tuple[int, ...], element: str,
            rng: np.random.Generator) -> list[np.ndarray]:
    if dtype in ("f16", "f32", "f64"):
        x = rng.standard_normal(dims).astype(np.dtype(dtype.replace("f", "float")))
    else:
        x = rng.integers(-3, 4, dims).astype(np.dtype(dtype.replace("s", "int")
                                                      .replace("u", "uint")))
    y = rng.random(dims[0]) < 0.1 if element == "pred" else x.reshape(dims[0], -1)[:, 0].copy()
    return [x, y]


@pytest.mark.parametrize("dims", [(4099, 5), (37, 7), (4099, 2, 3), (600, 18)])
@pytest.mark.parametrize("dtype, op, init, producer", REDUCERS)
def test_every_reducer_over_short_rows_equals_the_interpreter(
        dtype: str, op: str, init: str, producer: str, dims: tuple[int, ...]) -> None:
    text = reduce_program(dtype, op, init, dims, producer)
    assert CHUNK_LOOP.search(_source(text))
    element = "pred" if producer.startswith("compare") else dtype
    inputs = _inputs(dtype, dims, element, np.random.default_rng(len(dims) + dims[-1]))
    _assert_matches(text, inputs)


def test_rows_of_two_dimensions_are_chunked() -> None:
    text = reduce_program("f32", "add", "0", (8, 512, 5), "negate(x)").replace(
        "dimensions={1,2}", "dimensions={2}").replace("f32[8]", "f32[8,512]")
    assert CHUNK_LOOP.search(_source(text))
    rng = np.random.default_rng(2)
    _assert_matches(text, [rng.standard_normal((8, 512, 5)).astype(np.float32),
                           rng.standard_normal((8, 512)).astype(np.float32)])


def test_a_reduce_also_read_at_another_row_keeps_the_loop_over_rows() -> None:
    """A value kept for the chunk's rows only cannot serve another row's reader."""
    text = reduce_program("f32", "add", "0", (300, 5), "negate(x)").replace(
        "ROOT o = f32[300] add(s, y)",
        "rv = f32[300] reverse(s), dimensions={0}\n  ROOT o = f32[300] add(s, rv)")
    assert not CHUNK_LOOP.search(_source(text))
    rng = np.random.default_rng(3)
    _assert_matches(text, [rng.standard_normal((300, 5)).astype(np.float32),
                           rng.standard_normal(300).astype(np.float32)])


@pytest.mark.parametrize("width, chunked", [(5, True), (7, True), (4, False), (8, False)])
def test_a_row_value_spread_along_short_rows(tmp_path: Path, width: int,
                                             chunked: bool) -> None:
    """Without a reduce, a loop reading a computed row value along rows gcc would not
    vectorise written out (5, 7) is chunked: the row values, then the elements, are vector
    loops; rows of 4 or 8 keep the loop over rows, which gcc vectorises."""
    text = f"""
HloModule spread

ENTRY e {{
  x = f32[4099,{width}] parameter(0)
  m = f32[4099] parameter(1)
  sm = f32[4099] sine(m)
  lm = f32[4099] log(sm)
  mb = f32[4099,{width}] broadcast(lm), dimensions={{0}}
  d = f32[4099,{width}] subtract(x, mb)
  ROOT ex = f32[4099,{width}] exponential(d)
}}
"""
    source = _source(text)
    assert bool(CHUNK_LOOP.search(source)) is chunked
    _check_vectorised(tmp_path, source)
    rng = np.random.default_rng(width)
    inputs = [rng.standard_normal((4099, width)).astype(np.float32),
              rng.uniform(0.5, 2.5, 4099).astype(np.float32)]
    _assert_matches(text, inputs, exact=False)
