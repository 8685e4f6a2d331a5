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


@pytest.mark.parametrize("name", CORPUS)
def test_jax_corpus_on_the_chip(name: str) -> None:
    text, inputs, _ = load_corpus_case(name)
    module = parse_module(text, name)
    want = flatten_value(evaluate(module, inputs))
    compiled = compile_module(module, "xla", "tpu")
    assert_close(compiled.run_flat(inputs), want, rtol=1e-4)


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
