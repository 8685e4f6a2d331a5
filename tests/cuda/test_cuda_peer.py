"""The hand-written CUDA CartPole kernel (studies/peers/cartpole_kernel.cu): built against the
emulation header it gives the C kernel's results bit for bit (same arithmetic, same random
scheme); nvcc compiles it for sm_80 and sm_90; without a GPU the `cuda` peer says why."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from hlofuse.studies.peers import cuda_peer
from hlofuse.studies.peers import workload as w
from hlofuse.studies.peers.numpy_peer import NumpyRunner
from hlofuse.studies.peers.registry import default_registry

from tests.cuda.conftest import needs_nvcc


def _c_scalar(workload: w.Workload) -> w.RolloutResult:
    return default_registry()["c-scalar"].factory(workload).run()


@pytest.mark.needs_cc
@pytest.mark.parametrize("n_envs", [40, 300])  # 300: two blocks, the second partial
def test_emulated_cuda_kernel_equals_the_c_kernel(n_envs: int) -> None:
    workload = w.Workload(w.initial_states(n_envs, 11), 50, seed=11)
    got = cuda_peer.CudaRunner(workload, emulate=True).run()
    want = _c_scalar(workload)
    np.testing.assert_array_equal(got.states, want.states)
    assert (got.episodes, got.return_sum) == (want.episodes, want.return_sum)
    reference = NumpyRunner(workload).run()
    assert got.episodes == reference.episodes > n_envs  # resets happened


@pytest.mark.needs_cc
def test_emulated_cuda_kernel_deterministic_and_large_theta() -> None:
    init = w.deterministic_initial_states(20)
    init[3, 2] = 1.0e5  # beyond the inline sincos: that thread uses sinf/cosf
    workload = w.Workload(init, 30, deterministic=True)
    got = cuda_peer.CudaRunner(workload, emulate=True).run()
    want = _c_scalar(workload)
    np.testing.assert_array_equal(got.states, want.states)
    assert (got.episodes, got.return_sum) == (want.episodes, want.return_sum)


@needs_nvcc
def test_cuda_kernel_compiles_with_nvcc(tmp_path: Path) -> None:
    from hlofuse.toolchain.compiler import find_nvcc

    flags = [f for f in cuda_peer.nvcc_peer_flags("sm_80")
             if not f.startswith("-arch") and f != "-shared"]
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in (80, 90)]
    result = subprocess.run([*find_nvcc().command, *flags, *gencode, "-c",
                             str(cuda_peer.KERNEL_SOURCE), "-o", str(tmp_path / "peer.o")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def test_cuda_peer_is_registered_and_says_why_it_cannot_run() -> None:
    peer = default_registry()["cuda"]
    note = peer.availability()
    if cuda_peer.DEVICE_NODE.exists():
        pytest.skip("an NVIDIA device is present")
    assert note is not None and ("no NVIDIA GPU" in note or "needs nvcc" in note)
