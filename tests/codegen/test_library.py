"""The runtime library routines: the Threefry custom call and dot in every precision."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.reference.rnglib import threefry2x32
from hlofuse.runtime.target import CodegenError
from hlofuse.targets.c import compile_cpu
from hlofuse.targets.c import generate_c as generate

# The module is a FileCheck file, whose CHECK lines test the kernel's call of the library.
THREEFRY = (Path(__file__).parents[1] / "filecheck" / "codegen-c" /
            "library-threefry-call.hlo").read_text()

# Random123's known-answer test for Threefry-2x32-20 (key, counter) -> output.
KNOWN_ANSWERS = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.needs_cc
def test_threefry_custom_call_matches_the_reference_and_known_answers() -> None:
    module = parse_module(THREEFRY)
    rng = np.random.default_rng(0)
    inputs = [rng.integers(0, 2**32, (3, 5), dtype=np.uint64).astype(np.uint32)
              for _ in range(4)]
    for k, ((a, b), (c, d), _) in enumerate(KNOWN_ANSWERS):
        for array, value in zip(inputs, (a, b, c, d)):
            array[0, k] = value
    executable = compile_cpu(module)
    y0, y1, again = executable(*inputs)
    expected = threefry2x32(*inputs)
    np.testing.assert_array_equal(y0, expected[0])
    np.testing.assert_array_equal(y1, expected[1])
    np.testing.assert_array_equal(again, expected[1])
    for k, (_, _, (r0, r1)) in enumerate(KNOWN_ANSWERS):
        assert (int(y0[0, k]), int(y1[0, k])) == (r0, r1)
    assert [k.kind for k in executable.kernels] == ["custom-call"]
    interpreted = flatten_value(evaluate(module, inputs))
    for a, e in zip(flatten_value(executable(*inputs)), interpreted):
        np.testing.assert_array_equal(a, e)


def test_unknown_custom_call_target_is_refused_without_reaching_c() -> None:
    text = THREEFRY.replace('"hlofuse_threefry2x32"', '"evil */ system(\\"rm\\"); /*"')
    with pytest.raises(CodegenError, match="no library function"):
        generate(parse_module(text))


DOT = """HloModule dots
ENTRY main {
  a = $T[3,4,6]{2,1,0} parameter(0)
  b = $T[6,5]{1,0} parameter(1)
  ROOT d = $T[4,3,5]{2,1,0} dot(a, b), lhs_contracting_dims={2}, rhs_contracting_dims={0}
}
"""


@pytest.mark.needs_cc
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_low_precision_dot_accumulates_in_f32(dtype: str) -> None:
    # The interpreter's einsum cannot run bf16 and rounds f16 per step, so the reference here
    # is the f64 product, rounded once; f32 accumulation is within one unit in the last place.
    module = parse_module(DOT.replace("$T[4,3,5]{2,1,0}", "$T[3,4,5]{2,1,0}").replace("$T", dtype))
    numpy_type = module.entry.parameters[0].dtype.numpy
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4, 6)).astype(numpy_type)
    b = rng.standard_normal((6, 5)).astype(numpy_type)
    result = compile_cpu(module)(a, b)
    exact = np.einsum("ijk,kl->ijl", a.astype(np.float64), b.astype(np.float64))
    ulp = 2.0 ** -10 if dtype == "f16" else 2.0 ** -7
    np.testing.assert_allclose(result.astype(np.float64), exact, rtol=2 * ulp, atol=ulp)
