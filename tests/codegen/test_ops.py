"""Every op of the op table, for every element type it supports, compiled == interpreted."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.codegen.elemental import NOT_ELEMENTAL, STRUCTURAL
from hlofuse.codegen.kernel_spec import KernelOptions
from hlofuse.codegen.op_expressions import ELEMENTWISE
from hlofuse.ir.dtypes import ARRAY_DTYPES, DType
from hlofuse.ir.ops import ELEMENTWISE_OPS, OP_TABLE, Op
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c import CompileOptions, compile_cpu

from tests.codegen.op_programs import (
    SAMPLED_IN_TEXT,
    STRUCTURAL_SAMPLES,
    UNSUPPORTED,
    elementwise_module,
    non_elementwise_ops,
    structural_module,
)

# Transcendental functions come from libm here and from NumPy's own SIMD loops in the
# interpreter: they may differ in the last f32 bit, which rounding to f16/bf16 can turn into
# one unit in the last place of those types.
_LOW_PRECISION_ULP = {DType.F16: 2.0 ** -10, DType.BF16: 2.0 ** -7}


def assert_same(actual: np.ndarray, expected: np.ndarray, where: str) -> None:
    assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{where}: shape {actual.shape} != {expected.shape}"
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected, err_msg=where)
        return
    with np.errstate(invalid="ignore"):
        a, e = actual.astype(np.float64), expected.astype(np.float64)
    rtol = _LOW_PRECISION_ULP.get(DType.from_numpy(expected.dtype), 1e-5)
    np.testing.assert_allclose(a, e, rtol=rtol, atol=1e-6, equal_nan=True, err_msg=where)


def test_every_op_is_compiled_or_listed_as_unsupported() -> None:
    # cholesky and triangular-solve: compiled against the interpreter in tests/linalg.
    from tests.linalg.test_linalg_ops import COVERED_HERE as LINALG_COMPILED

    for op in OP_TABLE:
        if op in ELEMENTWISE_OPS and op is not Op.MAP:  # map applies a computation
            assert op in ELEMENTWISE, f"{op.text}: element-wise but has no C expression"
            continue
        assert (op in STRUCTURAL_SAMPLES or op in UNSUPPORTED or op in SAMPLED_IN_TEXT
                or op in LINALG_COMPILED), \
            f"{op.text}: neither sampled in the op tests nor listed as unsupported"
        assert op in STRUCTURAL or op in NOT_ELEMENTAL, \
            f"{op.text}: the elemental emitter neither handles nor lists it"
    assert set(non_elementwise_ops()) <= (set(STRUCTURAL_SAMPLES) | set(UNSUPPORTED)
                                          | SAMPLED_IN_TEXT | LINALG_COMPILED)
    from tests.codegen.test_indexing_codegen import CASES

    sampled = {op for text in CASES.values() for op in OP_TABLE if f" {op.text}(" in text}
    assert sampled >= SAMPLED_IN_TEXT


def test_every_element_type_has_a_c_and_a_cuda_type() -> None:
    from hlofuse.targets.c.language import C
    from hlofuse.targets.cuda.language import CUDA

    for dtype in ARRAY_DTYPES:
        assert C.type_name(dtype) == CUDA.type_name(dtype)
        assert C.type_name(C.register_type(dtype))
    with pytest.raises(ValueError, match="no C type for element type tuple"):
        C.type_name(DType.TUPLE)


@pytest.mark.needs_cc
@pytest.mark.parametrize("dtype", ARRAY_DTYPES, ids=lambda d: d.text)
def test_elementwise_ops(dtype: DType) -> None:
    module, inputs, labels = elementwise_module(dtype)
    expected = flatten_value(evaluate(module, inputs))
    executable = compile_cpu(module)
    actual = flatten_value(executable(*inputs))
    assert len(labels) == len(expected) == len(actual)
    assert len(executable.kernels) == len(labels)
    for label, a, e in zip(labels, actual, expected):
        assert_same(a, e, f"{label} on {dtype.text}")


@pytest.mark.needs_cc
@pytest.mark.parametrize("dtype", [DType.F32, DType.F16, DType.S32, DType.U8, DType.S64],
                         ids=lambda d: d.text)
def test_elementwise_ops_vectorised(dtype: DType) -> None:
    """The same ops with every kernel compiled at -O3 and split across threads: vector code
    and parallel loops must keep the semantics."""
    module, inputs, labels = elementwise_module(dtype)
    options = CompileOptions(kernel=KernelOptions(parallel_min_elements=64,
                                                  small_kernel_elements=0))
    expected = flatten_value(evaluate(module, inputs))
    actual = flatten_value(compile_cpu(module, options)(*inputs))
    for label, a, e in zip(labels, actual, expected):
        assert_same(a, e, f"{label} on {dtype.text} (vectorised)")


@pytest.mark.needs_cc
@pytest.mark.parametrize("dtype", ARRAY_DTYPES, ids=lambda d: d.text)
def test_structural_ops(dtype: DType) -> None:
    module, inputs = structural_module(dtype)
    expected = flatten_value(evaluate(module, inputs))
    executable = compile_cpu(module)
    actual = flatten_value(executable(*inputs))
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        assert_same(a, e, f"output {k} on {dtype.text}")
    thunked = flatten_value(executable.run_thunks(*inputs))
    for k, (a, e) in enumerate(zip(thunked, expected)):
        assert_same(a, e, f"output {k} on {dtype.text} (thunk runner)")
