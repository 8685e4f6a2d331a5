"""The C runtime's dot through OpenBLAS (targets/c/blas.py, hlofuse_rt.c): f32 and f64 dots
whose operands' strides map to a GEMM call the wheel's sgemm/dgemm, every other layout and
dtype takes the runtime's loop, and both give the reference's values (the loop bit for bit,
BLAS within a few units in the last place of the sum of |products|)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hlofuse.cli import main
from hlofuse.ir.dtypes import DType
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c import compile_cpu, runtime_library
from hlofuse.targets.c.blas import (
    BLAS_MIN_WORK,
    dot_implementation,
    find_blas,
    identity_comment,
)

needs_blas = pytest.mark.skipif(find_blas() is None, reason="scipy-openblas32 is not installed")
_EPS = {np.float32: 2.0**-23, np.float64: 2.0**-52}


def _assert_dot_close(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """|got - a @ b| within 4k ulps of sum |a||b| per element (a bound any summation order
    meets), computed in f64 (or long double sums for f64 operands)."""
    wide = np.longdouble if a.dtype == np.float64 else np.float64
    exact = np.matmul(a.astype(wide), b.astype(wide))
    scale = np.matmul(np.abs(a).astype(wide), np.abs(b).astype(wide))
    k = a.shape[-1]
    bound = 4 * k * _EPS[a.dtype.type] * scale + np.finfo(a.dtype).tiny
    assert got.shape == exact.shape and got.dtype == a.dtype
    assert np.all(np.abs(got.astype(wide) - exact) <= bound)


def _call_runtime_dot(name: str, a: np.ndarray, b: np.ndarray, batch: int, m: int, n: int,
                      k: int, a_strides: tuple[int, int, int],
                      b_strides: tuple[int, int, int]) -> np.ndarray:
    out = np.full((batch, m, n), np.nan, a.dtype)
    function = getattr(runtime_library(), name)
    function.restype = None
    function.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 10
    function(a.ctypes.data, b.ctypes.data, out.ctypes.data, batch, m, n, k, *a_strides,
             *b_strides)
    return out


def _strided(base: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    item = base.itemsize
    return np.lib.stride_tricks.as_strided(base, shape, tuple(s * item for s in strides))


# (batch, m, n, k, A's (batch, row, column) strides, B's (batch, row, column) strides): each
# operand row-major, column-major, with padded rows, a single row or column whose other
# stride is meaningless, weights shared by the batch (stride 0), all of them products large
# enough for OpenBLAS; and what takes the loop: layouts no GEMM takes (both strides > 1, a
# broadcast row) and a product too small for a library call.
LAYOUTS = [
    (1, 70, 50, 30, (0, 30, 1), (0, 50, 1)),
    (1, 70, 50, 30, (0, 1, 70), (0, 1, 30)),
    (1, 70, 50, 30, (0, 33, 1), (0, 57, 1)),
    (3, 40, 24, 30, (1200, 30, 1), (720, 1, 30)),
    (2, 1, 600, 40, (40, 0, 1), (24000, 600, 1)),
    (2, 600, 1, 40, (24000, 40, 1), (40, 1, 0)),
    (1, 1, 1, 20000, (0, 0, 1), (0, 1, 0)),
    # A matrix and a vector take OpenBLAS's GEMV: the matrix either way round, padded rows,
    # a strided vector, and products large enough to be split between threads.
    (1, 5000, 1, 64, (0, 1, 5000), (0, 1, 0)),
    (1, 4096, 1, 64, (0, 70, 1), (0, 3, 0)),
    (1, 1, 5000, 64, (0, 0, 2), (0, 1, 64)),
    (1, 1, 5000, 64, (0, 0, 1), (0, 5003, 1)),
    (3, 700, 1, 50, (35000, 50, 1), (50, 1, 0)),
    (4, 33, 70, 65, (33 * 65, 65, 1), (0, 70, 1)),
    (1, 50, 40, 30, (0, 60, 2), (0, 40, 1)),
    (1, 50, 40, 30, (0, 0, 1), (0, 40, 1)),
    (1, 7, 5, 3, (0, 3, 1), (0, 5, 1)),
]


@pytest.mark.needs_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("batch", "m", "n", "k", "sa", "sb"), LAYOUTS)
def test_runtime_dot_any_layout_equals_the_product(dtype: type, batch: int, m: int, n: int,
                                                   k: int, sa: tuple[int, int, int],
                                                   sb: tuple[int, int, int]) -> None:
    rng = np.random.default_rng(batch * 1000 + m * 100 + n * 10 + k)
    a_base = rng.standard_normal(batch * m * k * 2 + 64).astype(dtype)
    b_base = rng.standard_normal(batch * k * n * 2 + 64).astype(dtype)
    a = _strided(a_base, (batch, m, k), sa)
    b = _strided(b_base, (batch, k, n), sb)
    tag = "f32" if dtype is np.float32 else "f64"
    got = _call_runtime_dot(f"hlofuse_rt_dot_{tag}", a_base, b_base, batch, m, n, k, sa, sb)
    _assert_dot_close(got, np.ascontiguousarray(a), np.ascontiguousarray(b))


def _dot_text(dtype: str, lhs: str, rhs: str, out: str, numbers: str) -> str:
    return (f"HloModule m\n\nENTRY main {{\n  a = {dtype}[{lhs}] parameter(0)\n"
            f"  b = {dtype}[{rhs}] parameter(1)\n"
            f"  ROOT d = {dtype}[{out}] dot(a, b), {numbers}\n}}\n")


# (lhs, rhs, out, dimension numbers, contracting size): row-major and transposed operands,
# contracting sizes past OpenBLAS's K blocking, a vector-matrix product, batch dims (leading,
# and elsewhere, which the kernel copies to a canonical order first).
PROGRAMS = [
    ("300,64", "64,64", "300,64", "lhs_contracting_dims={1}, rhs_contracting_dims={0}", 64),
    ("64,300", "64,48", "300,48", "lhs_contracting_dims={0}, rhs_contracting_dims={0}", 64),
    ("1,600", "40,600", "1,40", "lhs_contracting_dims={1}, rhs_contracting_dims={1}", 600),
    ("5,70,33", "5,33,20", "5,70,20",
     "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, "
     "rhs_contracting_dims={1}", 33),
    ("4,8,16", "16,8,4", "4,8,8",
     "lhs_batch_dims={0}, rhs_batch_dims={2}, lhs_contracting_dims={2}, "
     "rhs_contracting_dims={0}", 16),
]


@pytest.mark.needs_cc
@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize(("lhs", "rhs", "out", "numbers", "k"), PROGRAMS)
def test_compiled_dot_equals_the_reference(dtype: str, lhs: str, rhs: str, out: str,
                                           numbers: str, k: int) -> None:
    text = _dot_text(dtype, lhs, rhs, out, numbers)
    np_dtype = np.float32 if dtype == "f32" else np.float64
    rng = np.random.default_rng(len(text))
    a = rng.standard_normal([int(d) for d in lhs.split(",")]).astype(np_dtype)
    b = rng.standard_normal([int(d) for d in rhs.split(",")]).astype(np_dtype)
    want = np.asarray(flatten_value(evaluate(parse_module(text), [a, b]))[0])
    got = np.asarray(compile_cpu(parse_module(text))(a, b))
    assert got.shape == want.shape and got.dtype == want.dtype
    wide = np.longdouble if np_dtype is np.float64 else np.float64
    # Operands of about 1 in size: the sum of |products| is about k, each order's error
    # within k ulps of it.
    tolerance = 4 * k * k * _EPS[np_dtype]
    assert np.max(np.abs(got.astype(wide) - want)) <= tolerance


@pytest.mark.needs_cc
def test_integer_dots_keep_the_loop_and_its_exact_wraparound() -> None:
    text = _dot_text("s32", "9,7", "7,5", "9,5",
                     "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    rng = np.random.default_rng(3)
    a = rng.integers(-2**31, 2**31, (9, 7), dtype=np.int32)
    b = rng.integers(-2**31, 2**31, (7, 5), dtype=np.int32)
    want = np.asarray(flatten_value(evaluate(parse_module(text), [a, b]))[0])
    np.testing.assert_array_equal(np.asarray(compile_cpu(parse_module(text))(a, b)), want)


@pytest.mark.needs_cc
def test_products_too_small_for_a_library_call_keep_the_references_bits() -> None:
    """Under BLAS_MIN_WORK multiply-adds the runtime's loop runs: the reference's order, bit
    for bit (the layers of examples/mlp.hlo, say)."""
    for m, k, n in ((8, 10, 32), (8, 32, 16), (16, 32, 31)):
        assert m * k * n < BLAS_MIN_WORK
        text = _dot_text("f32", f"{m},{k}", f"{k},{n}", f"{m},{n}",
                         "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
        rng = np.random.default_rng(m * k * n)
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        want = np.asarray(flatten_value(evaluate(parse_module(text), [a, b]))[0])
        got = np.asarray(compile_cpu(parse_module(text))(a, b))
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@needs_blas
@pytest.mark.needs_cc
def test_the_runtime_library_links_the_wheels_openblas() -> None:
    runtime_library()
    blas = find_blas()
    assert blas is not None
    with open("/proc/self/maps") as f:
        mapped = f.read()
    assert f"{blas.lib_dir}/lib{blas.library}" in mapped
    assert "OpenBLAS" in blas.identity and blas.identity in identity_comment(blas)


def test_hlofuse_blas_0_turns_blas_off_and_explains_why() -> None:
    code = ("from hlofuse.targets.c.blas import find_blas, dot_implementation\n"
            "from hlofuse.ir.dtypes import DType\n"
            "assert find_blas() is None\n"
            "print(dot_implementation(DType.F32, find_blas()))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "HLOFUSE_BLAS": "0"}, check=True)
    assert "the runtime's loop (no BLAS" in done.stdout
    assert identity_comment(None) == "/* BLAS: none */\n"


@needs_blas
def test_dot_implementation_names_the_routine_or_the_loop() -> None:
    blas = find_blas()
    assert dot_implementation(DType.F32, blas) == "OpenBLAS sgemm (scipy-openblas32)"
    assert dot_implementation(DType.F64, blas) == "OpenBLAS dgemm (scipy-openblas32)"
    assert dot_implementation(DType.BF16, blas) == "OpenBLAS sgemm (scipy-openblas32)"
    assert dot_implementation(DType.S32, blas) == "the runtime's loop (s32 has no BLAS routine)"
    assert dot_implementation(DType.F32, blas, BLAS_MIN_WORK) == dot_implementation(DType.F32,
                                                                                     blas)
    assert dot_implementation(DType.F32, blas, 512) == (
        "the runtime's loop (512 multiply-adds per product, under the 16384 worth a call to "
        "sgemm)")


@needs_blas
@pytest.mark.needs_cc
def test_profile_says_what_computes_the_dots() -> None:
    text = _dot_text("f32", "16,8", "8,4", "16,4",
                     "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    executable = compile_cpu(parse_module(text))
    a = np.ones((16, 8), np.float32)
    profile = executable.profile(a, np.ones((8, 4), np.float32))
    assert profile.notes and "call OpenBLAS" in profile.notes[0]
    assert profile.notes[0] in str(profile)


def test_explain_lists_each_dot_kernel_and_what_computes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dots.hlo"
    path.write_text("HloModule m\n\nENTRY main {\n  a = f32[128,32] parameter(0)\n"
                    "  b = f32[32,64] parameter(1)\n"
                    "  f = f32[128,64] dot(a, b), lhs_contracting_dims={1}, "
                    "rhs_contracting_dims={0}\n"
                    "  i = s32[16,8] parameter(2)\n  j = s32[8,4] parameter(3)\n"
                    "  s = s32[16,4] dot(i, j), lhs_contracting_dims={1}, "
                    "rhs_contracting_dims={0}\n"
                    "  c = f32[16,8] parameter(4)\n  d = f32[8,4] parameter(5)\n"
                    "  e = f32[16,4] dot(c, d), lhs_contracting_dims={1}, "
                    "rhs_contracting_dims={0}\n"
                    "  ROOT r = (f32[128,64], s32[16,4], f32[16,4]) tuple(f, s, e)\n}\n")
    assert main(["explain", str(path)]) == 0
    out = capsys.readouterr().out
    section = out[out.index("dot kernels on the C target"):].splitlines()
    assert sorted(section[1:4]) == sorted([
        f"  %f f32[128,64]: {dot_implementation(DType.F32, find_blas())}",
        "  %s s32[16,4]: the runtime's loop (s32 has no BLAS routine)",
        f"  %e f32[16,4]: {dot_implementation(DType.F32, find_blas(), 16 * 4 * 8)}"])
    assert main(["explain", "--json", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["dot_kernels_c"]) == {"f", "s", "e"}
