"""The hand-written CUDA kernel (cartpole_kernel.cu): one thread per environment, the whole
rollout in one launch; built by nvcc, cached by hlofuse's toolchain, loaded with ctypes.

The `cuda` peer runs it on a GPU. It is available only where nvcc is found and the machine
has an NVIDIA device node; building it (and the CUDA runtime seeing a GPU) is checked when the
peer is built, and failures name the CUDA runtime's message. A timed `run()` includes the
step-key table made on the host and the copies of the states in and out.

`load_kernel(emulate=True)` builds the same source with the C++ compiler after
runtime/cuda_emulation.h, so tests on a machine without a GPU check its indexing and random
scheme against the C kernel (same arithmetic, so the same final states bit for bit).
"""

from __future__ import annotations

import ctypes
import os
from functools import cache
from pathlib import Path

import numpy as np

from hlofuse.studies.peers.c_peer import call_rollout
from hlofuse.studies.peers.registry import Peer, PeerUnavailable
from hlofuse.studies.peers.sources import kernel_source
from hlofuse.studies.peers.workload import RolloutResult, Workload

KERNEL_SOURCE = Path(__file__).with_name("cartpole_kernel.cu")
DEVICE_NODE = Path("/dev/nvidiactl")

ROLLOUT_ARGTYPES: list[type] = [
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_uint32,
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_int64),
    ctypes.POINTER(ctypes.c_double),
]


def nvcc_peer_flags(arch: str) -> tuple[str, ...]:
    """As the C kernel is built: no FMA contraction (--fmad=false), no flush to zero."""
    return ("-O3", "-std=c++17", "-x", "cu", f"-arch={arch}", "--fmad=false", "-shared",
            "-Xcompiler", "-fPIC,-fvisibility=hidden", "-w")


def availability() -> str | None:
    from hlofuse.toolchain.compiler import ToolchainError, find_nvcc

    try:
        find_nvcc()
    except ToolchainError as e:
        return str(e)
    if not DEVICE_NODE.exists():
        return f"no NVIDIA GPU here ({DEVICE_NODE} is missing)"
    return None


@cache
def load_kernel(emulate: bool = False) -> ctypes.CDLL:
    """Compile (or find in the cache) and load the kernel library; once per process."""
    from hlofuse.targets.cuda.compile import DEFAULT_ARCH, EMULATION_FLAGS
    from hlofuse.targets.cuda.driver import support_text
    from hlofuse.toolchain import CacheError, ToolchainError, build_shared_object, load_library
    from hlofuse.toolchain.compiler import Compiler, find_nvcc

    source = kernel_source(KERNEL_SOURCE)
    try:
        if emulate:
            built = build_shared_object(support_text("cuda_emulation.h") + "\n" + source,
                                        EMULATION_FLAGS, compiler=Compiler.find())
        else:
            arch = os.environ.get("HLOFUSE_CUDA_ARCH", DEFAULT_ARCH)
            built = build_shared_object(source, nvcc_peer_flags(arch), compiler=find_nvcc())
        library = load_library(built.path)
    except (ToolchainError, CacheError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise PeerUnavailable(f"the CUDA kernel does not build here: {first}") from e
    library.hf_cuda_cartpole_rollout.argtypes = ROLLOUT_ARGTYPES
    library.hf_cuda_cartpole_rollout.restype = ctypes.c_int
    library.hf_cuda_error.restype = ctypes.c_char_p
    library.hf_cuda_devices.restype = ctypes.c_int
    return library


def _error(library: ctypes.CDLL) -> str:
    return (library.hf_cuda_error() or b"unknown error").decode(errors="replace")


class CudaRunner:
    def __init__(self, workload: Workload, emulate: bool = False) -> None:
        self.workload = workload
        self.initial = np.ascontiguousarray(workload.initial, dtype=np.float32)
        self.library = load_kernel(emulate)
        if not emulate and self.library.hf_cuda_devices() < 1:
            raise PeerUnavailable(f"the CUDA runtime sees no GPU: {_error(self.library)}")

    def run(self) -> RolloutResult:
        status, result = call_rollout(self.library.hf_cuda_cartpole_rollout, self.workload,
                                      self.initial)
        if status == -1:
            raise MemoryError(f"CUDA kernel: no memory for the keys of "
                              f"{self.workload.n_steps} steps")
        if status != 0:
            raise RuntimeError(f"CUDA kernel: the CUDA runtime failed: {_error(self.library)}")
        return result


def peers() -> list[Peer]:
    return [
        Peer(
            "cuda",
            "hand-written CUDA: one thread per env, whole rollout in one launch (needs a GPU)",
            CudaRunner,
            availability=availability,
        ),
    ]
