"""The emulation itself (runtime/cuda_emulation.h): hand-written kernels that exchange values
through shared memory and warp shuffles give the GPU's results. Each result here would be
wrong if `__syncthreads` did nothing or a shuffle returned the caller's value."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

from hlofuse.targets.cuda.compile import EMULATION_FLAGS
from hlofuse.targets.cuda.driver import support_text
from hlofuse.toolchain.cache import Cache
from hlofuse.toolchain.compiler import Compiler, build_shared_object, load_library

from tests.cuda.conftest import needs_nvcc

KERNELS = Path(__file__).with_name("exchange_kernels.cu")


@pytest.fixture(scope="module")
def emulated() -> ctypes.CDLL:
    source = support_text("cuda_emulation.h") + "\n" + KERNELS.read_text(encoding="utf-8")
    built = build_shared_object(source, EMULATION_FLAGS, Cache.open(), Compiler.find())
    return load_library(built.path)


def _pointer(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


@pytest.mark.needs_cc
@pytest.mark.parametrize("threads", [256, 64])
def test_block_sum_through_shared_memory(emulated: ctypes.CDLL, threads: int) -> None:
    n = 1000  # the last block is partial
    x = np.arange(n, dtype=np.float32) % 17
    blocks = -(-n // threads)
    out = np.zeros(blocks, np.float32)
    assert emulated.run_block_sum(_pointer(x), _pointer(out), n, threads) == 0
    padded = np.zeros(blocks * threads, np.float32)
    padded[:n] = x
    np.testing.assert_array_equal(out, padded.reshape(blocks, threads).sum(axis=1))


@pytest.mark.needs_cc
def test_warp_shuffle_sum(emulated: ctypes.CDLL) -> None:
    n, threads = 200, 96  # a partial warp at the end of the grid
    x = (np.arange(n, dtype=np.int32) * 7919) % 1000
    out = np.zeros(-(-n // 32), np.int32)
    assert emulated.run_warp_sum(_pointer(x), _pointer(out), n, threads) == 0
    padded = np.zeros(out.size * 32, np.int32)
    padded[:n] = x
    np.testing.assert_array_equal(out, padded.reshape(-1, 32).sum(axis=1))


@pytest.mark.needs_cc
def test_shuffle_xor_butterfly_broadcast_and_up(emulated: ctypes.CDLL) -> None:
    n = 128
    x = np.sin(np.arange(n, dtype=np.float64) * 1.7)
    top, left = np.zeros(n), np.zeros(n)
    assert emulated.run_warp_butterfly(_pointer(x), _pointer(top), _pointer(left), n) == 0
    warps = x.reshape(-1, 32)
    np.testing.assert_array_equal(top, np.repeat(warps.max(axis=1), 32))
    # __shfl_up_sync: lane 0 keeps its own value; the others read their left neighbour.
    shifted = np.concatenate([warps[:, :1], warps[:, :-1]], axis=1)
    np.testing.assert_array_equal(left, (shifted - warps[:, :1]).ravel())


@pytest.mark.needs_cc
@pytest.mark.parametrize(("blocks", "threads"), [(3, 256), (2, 1024), (1, 64)])
def test_two_level_block_sum(emulated: ctypes.CDLL, blocks: int, threads: int) -> None:
    n = 5000
    x = np.arange(n, dtype=np.float32) % 13
    out = np.zeros(blocks, np.float32)
    assert emulated.run_two_level_sum(_pointer(x), _pointer(out), n, blocks, threads) == 0
    assert float(out.sum()) == float(x.sum())  # small integers: every order is exact
    grid = np.arange(n) % (blocks * threads) // threads
    np.testing.assert_array_equal(out, [x[grid == b].sum() for b in range(blocks)])


@pytest.mark.needs_cc
def test_a_barrier_thread_0_skips_is_an_error_not_a_wrong_result(emulated: ctypes.CDLL) -> None:
    out = np.zeros(64, np.int32)
    assert emulated.run_thread0_skips_barrier(_pointer(out), 64) == 1
    emulated.last_error.restype = ctypes.c_char_p
    assert b"thread 0 of its block finished without" in emulated.last_error()


@needs_nvcc
def test_exchange_kernels_compile_with_nvcc(tmp_path: Path) -> None:
    import subprocess

    from hlofuse.toolchain.compiler import find_nvcc

    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in (80, 90)]
    result = subprocess.run([*find_nvcc().command, "-std=c++17", *gencode, "-c", str(KERNELS),
                             "-o", str(tmp_path / "k.o")], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
