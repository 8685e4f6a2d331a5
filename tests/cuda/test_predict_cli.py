"""`hlofuse cartpole --predict`, the V100 description, and the CUDA backend's command-line
errors (no nvcc: exit 2; no GPU at run time: the CUDA runtime's message, exit 2)."""

from __future__ import annotations

import pytest

from hlofuse.cli import main
from hlofuse.fusion.xla_gpu.devices import UnknownDeviceError
from hlofuse.studies.gpu_predict import PREDICT_DEVICES, predict_device, price_call

from tests.cuda.conftest import needs_nvcc


def test_v100_from_its_data_sheet() -> None:
    v100 = predict_device("V100")
    assert (v100.core_count, v100.fpus_per_core, v100.compute_capability) == (80, 64, (7, 0))
    assert v100.memory_bandwidth == 900e9
    assert set(PREDICT_DEVICES) >= {"v100", "a100", "h100", "h200"}
    with pytest.raises(UnknownDeviceError, match="known: v100"):
        predict_device("p100")


def test_price_of_one_launch() -> None:
    h100, v100 = predict_device("h100"), predict_device("v100")
    assert price_call(h100, 0.0, 1, 0.0) == pytest.approx(1e-6)  # kKernelLaunchOverhead
    moved = 1e9  # a memory-bound kernel: time follows bandwidth
    ratio = (price_call(v100, 0.0, 1 << 20, moved) - 1e-6) / (
        price_call(h100, 0.0, 1 << 20, moved) - 1e-6)
    assert ratio == pytest.approx(h100.memory_bandwidth / v100.memory_bandwidth)


@pytest.mark.needs_cc
def test_cartpole_predict_prints_the_model_beside_the_study(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cartpole", "--predict", "a100", "--envs", "256", "--steps", "10",
                 "--variants", "baseline,fused-rng"]) == 0
    out = capsys.readouterr().out
    assert "A100" in out and "a MODEL, not a measurement" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.startswith(("baseline ", "fused-rng "))}
    assert rows["baseline"][6] == "1.00x"
    assert rows["fused-rng"][-1] == "1.87x"  # the study's figure beside the prediction
    assert float(rows["fused-rng"][6].rstrip("x")) > 1.0  # fewer launches: faster


def test_predict_unknown_gpu_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cartpole", "--predict", "p100"]) == 2
    assert "--predict: unknown GPU" in capsys.readouterr().err


def test_run_without_nvcc_exits_2(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    from hlofuse.toolchain.compiler import _find_nvcc

    monkeypatch.setenv("NVCC", "/nonexistent/nvcc")
    _find_nvcc.cache_clear()
    try:
        assert main(["run", "tests/data/jax/cond.hlo", "--backend", "cuda"]) == 2
    finally:
        _find_nvcc.cache_clear()
    assert "needs nvcc" in capsys.readouterr().err


@needs_nvcc
def test_run_without_gpu_names_the_cuda_runtime_error(capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    if shutil.which("nvidia-smi"):
        pytest.skip("a GPU may be present")
    assert main(["run", "tests/data/jax/fori_loop.hlo", "--backend", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "the CUDA runtime failed" in err and "cuda" in err.lower()
