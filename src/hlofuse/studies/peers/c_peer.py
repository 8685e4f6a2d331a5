"""The hand-written C kernel (cartpole_kernel.c): compiled once, cached, loaded with ctypes.

Two peers share the library: `c` (OpenMP over blocks of environments, SIMD over the lanes of
a block) and `c-scalar` (one thread, one environment at a time, for small N). It is built by
hlofuse's toolchain with the very flags hlofuse's generated kernels get (-O3 -march=native
-fopenmp, no -ffast-math, no FMA contraction), so a comparison with hlofuse measures the code,
not the compiler settings; the toolchain's cache keeps the shared object.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import cache, partial
from pathlib import Path

import numpy as np

from hlofuse.studies.peers.registry import Peer, PeerUnavailable
from hlofuse.studies.peers.sources import kernel_source
from hlofuse.studies.peers.workload import RolloutResult, Workload

KERNEL_SOURCE = Path(__file__).with_name("cartpole_kernel.c")
ROLLOUT_ENTRIES = ("hf_cartpole_rollout", "hf_cartpole_rollout_scalar")

ROLLOUT_ARGTYPES = [
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_uint32,
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_int64),
    ctypes.POINTER(ctypes.c_double),
]


def availability() -> str | None:
    from hlofuse.toolchain import Compiler, ToolchainError

    try:
        Compiler.find()
    except ToolchainError as e:
        return str(e)
    return None


@cache
def load_kernel() -> ctypes.CDLL:
    """Compile (or find in the cache) and load the kernel library; once per process."""
    from hlofuse.toolchain import (
        DEFAULT_FLAGS,
        CacheError,
        ToolchainError,
        build_shared_object,
        load_library,
    )

    try:
        built = build_shared_object(kernel_source(KERNEL_SOURCE), DEFAULT_FLAGS)
        library = load_library(built.path)
    except (ToolchainError, CacheError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise PeerUnavailable(f"the C kernel does not build here: {first}") from e
    for name in ROLLOUT_ENTRIES:
        function = getattr(library, name)
        function.argtypes = ROLLOUT_ARGTYPES
        function.restype = ctypes.c_int
    library.hf_sincosf_array.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * 3
    library.hf_sincosf_array.restype = None
    return library


def sincosf(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's inline sin and cos over a float32 array (for measuring its error)."""
    library = load_kernel()
    x = np.ascontiguousarray(x, dtype=np.float32)
    s, c = np.empty_like(x), np.empty_like(x)
    library.hf_sincosf_array(x.size, x.ctypes.data, s.ctypes.data, c.ctypes.data)
    return s, c


class CRunner:
    def __init__(self, workload: Workload, entry: str) -> None:
        self.workload = workload
        self.initial = np.ascontiguousarray(workload.initial)
        self.function = getattr(load_kernel(), entry)

    def run(self) -> RolloutResult:
        status, result = call_rollout(self.function, self.workload, self.initial)
        if status != 0:
            raise MemoryError(f"C kernel: no memory for the keys of {self.workload.n_steps} "
                              "steps")
        return result


def call_rollout(function: Callable[..., int], wl: Workload, initial: np.ndarray
                 ) -> tuple[int, RolloutResult]:
    """Call a hand-written kernel's rollout entry point, `(n, steps, seed, deterministic, init,
    out, &episodes, &return_sum) -> status`, the C and CUDA kernels' shared signature."""
    out = np.empty_like(initial)
    episodes = ctypes.c_int64(0)
    return_sum = ctypes.c_double(0.0)
    status = function(wl.n_envs, wl.n_steps, wl.seed, int(wl.deterministic),
                      initial.ctypes.data, out.ctypes.data, ctypes.byref(episodes),
                      ctypes.byref(return_sum))
    return status, RolloutResult(out, int(episodes.value), float(return_sum.value))


def peers() -> list[Peer]:
    return [
        Peer(
            "c",
            "hand-written C: OpenMP over blocks of 16 envs, SIMD lanes, time loop inside",
            partial(CRunner, entry="hf_cartpole_rollout"),
            availability=availability,
        ),
        Peer(
            "c-scalar",
            "hand-written C: one thread, one env at a time, time loop inside",
            partial(CRunner, entry="hf_cartpole_rollout_scalar"),
            availability=availability,
        ),
    ]
