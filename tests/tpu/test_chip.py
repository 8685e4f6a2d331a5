"""On the TPU (marker `tpu`, skipped where there is none): the kernels compiled by Mosaic
for the chip give the reference interpreter's results (floats within rtol 1e-5: the chip's
transcendental functions differ from NumPy's in the last bits), and the kernel listing says
which kernels run as Pallas kernels."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse import random
from hlofuse.api import compile_module
from hlofuse.envs import cartpole
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.studies.cartpole_study import SEQUENCE, is_available

from tests.conftest import CORPUS, load_corpus_case
from tests.tpu.test_interpret import assert_close

pytestmark = pytest.mark.tpu

# Where the chip's arithmetic differs from NumPy's, measured on a v5e (docs/tpu.md).
CHIP_DIFFERS = {
    "convert_types": "XLA:TPU computes f16 in f32, so f32 -> f16 -> f32 does not round "
                     "(3.1415927 where NumPy has 3.140625); f16 kernels are XLA operations",
    "special_floats": "the chip divides by multiplying with the reciprocal: 1 / 3.4e38 is "
                      "subnormal and flushed to zero, so 3.4e38 / 3.4e38 is 0 there, not 1",
}
# The chip's transcendental functions differ from NumPy's in the last bits: one element of
# elementwise_math is 1.7e-4 off (relative).
CHIP_RTOL = {"elementwise_math": 5e-4}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(reason=CHIP_DIFFERS[n], strict=True))
    if n in CHIP_DIFFERS else n for n in CORPUS])
def test_jax_corpus_on_the_chip(name: str) -> None:
    text, inputs, _ = load_corpus_case(name)
    module = parse_module(text, name)
    want = flatten_value(evaluate(module, inputs))
    compiled = compile_module(module, "xla", "tpu")
    assert_close(compiled.run_flat(inputs), want, rtol=CHIP_RTOL.get(name, 1e-4))


@pytest.mark.parametrize("step", [s for s in SEQUENCE if s.is_default], ids=lambda s: s.name)
def test_cartpole_variant_on_the_chip(step: object) -> None:
    from hlofuse.studies.cartpole_study import StudyStep

    assert isinstance(step, StudyStep)
    if not is_available(step.strategy):
        pytest.skip(f"strategy {step.strategy} not available")
    module = cartpole.trace(step.variant, 4096, 50, 0)
    want = flatten_value(evaluate(module, [random.key(0)]))
    compiled = compile_module(module, step.strategy, "tpu")
    got = compiled.run_flat([random.key(0)])
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=0, atol=1e-4)
    assert int(got[1]) == int(want[1])
    assert float(got[2]) == pytest.approx(float(want[2]), rel=1e-5)
    kernels = compiled.executable.kernels if compiled.executable else []
    assert any(k.function == "pallas" for k in kernels)
