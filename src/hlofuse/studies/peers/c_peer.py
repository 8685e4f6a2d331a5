"""The hand-written C kernel (cartpole_kernel.c): compiled once, cached, loaded with ctypes.

Two peers share the library: `c` (OpenMP over blocks of environments, SIMD over the lanes of
a block) and `c-scalar` (one thread, one environment at a time, for small N). The shared
object is cached under $HLOFUSE_CACHE_DIR (default ~/.cache/hlofuse), in `peers/`, named by a
hash of the source, the flags and the compiler's version; it is written to a temporary name
and renamed, and an entry that fails to load is rebuilt.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path

import numpy as np

from hlofuse.studies.peers.registry import Peer, PeerUnavailable
from hlofuse.studies.peers.workload import RolloutResult, Workload

KERNEL_SOURCE = Path(__file__).with_name("cartpole_kernel.c")
# gnu11, not c11: ISO mode would also turn off FMA contraction.
BASE_FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-std=gnu11")
OPENMP_FLAG = "-fopenmp"
# Without libgomp the `omp simd` loops still vectorise; the blocks then run on one thread.
FALLBACK_FLAG = "-fopenmp-simd"

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


def cache_dir() -> Path:
    root = os.environ.get("HLOFUSE_CACHE_DIR") or str(Path.home() / ".cache" / "hlofuse")
    path = Path(root) / "peers"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def compiler() -> str | None:
    return shutil.which("cc")


def compiler_version(cc: str) -> str:
    result = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False)
    return result.stdout.splitlines()[0] if result.stdout else "unknown"


@dataclass(frozen=True, slots=True)
class KernelLibrary:
    """The loaded kernel and how it was built (`has_openmp` False: one thread)."""

    library: ctypes.CDLL
    path: Path
    has_openmp: bool


def availability() -> str | None:
    if compiler() is None:
        return "no C compiler: `cc` is not on PATH"
    return None


@cache
def load_kernel() -> KernelLibrary:
    """Compile (or find in the cache) and load the kernel library; cached per process."""
    cc = compiler()
    if cc is None:
        raise PeerUnavailable("no C compiler: `cc` is not on PATH")
    source = KERNEL_SOURCE.read_bytes()
    version = compiler_version(cc)
    errors = []
    for flag in (OPENMP_FLAG, FALLBACK_FLAG):
        flags = (*BASE_FLAGS, flag)
        try:
            path = build_cached(cc, flags, source, version)
        except PeerUnavailable as e:
            errors.append(str(e))
            continue
        return KernelLibrary(open_library(path), path, flag == OPENMP_FLAG)
    raise PeerUnavailable("; ".join(errors))


def build_cached(cc: str, flags: tuple[str, ...], source: bytes, version: str) -> Path:
    digest = hashlib.sha256(b"\0".join([source, " ".join(flags).encode(), version.encode()]))
    path = cache_dir() / f"cartpole_kernel-{digest.hexdigest()[:24]}.so"
    if path.exists() and is_loadable(path):
        return path
    compile_kernel(cc, flags, path)
    return path


def is_loadable(path: Path) -> bool:
    try:
        library = ctypes.CDLL(str(path))
        return hasattr(library, "hf_cartpole_rollout")
    except OSError:
        return False


def compile_kernel(cc: str, flags: tuple[str, ...], path: Path) -> None:
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
    os.close(fd)
    try:
        command = [cc, *flags, "-o", tmp, str(KERNEL_SOURCE), "-lm"]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            first = (result.stderr.strip().splitlines() or ["(no message)"])[0]
            raise PeerUnavailable(f"cc {' '.join(flags)} failed: {first}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def open_library(path: Path) -> ctypes.CDLL:
    library = ctypes.CDLL(str(path))
    for name in ("hf_cartpole_rollout", "hf_cartpole_rollout_scalar"):
        function = getattr(library, name)
        function.argtypes = ROLLOUT_ARGTYPES
        function.restype = None
    library.hf_sincosf_array.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * 3
    library.hf_sincosf_array.restype = None
    return library


def sincosf(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's inline sin and cos over a float32 array (for measuring its error)."""
    library = load_kernel().library
    x = np.ascontiguousarray(x, dtype=np.float32)
    s, c = np.empty_like(x), np.empty_like(x)
    library.hf_sincosf_array(x.size, x.ctypes.data, s.ctypes.data, c.ctypes.data)
    return s, c


class CRunner:
    def __init__(self, workload: Workload, entry: str) -> None:
        self.workload = workload
        self.initial = np.ascontiguousarray(workload.initial)
        self.function = getattr(load_kernel().library, entry)

    def run(self) -> RolloutResult:
        wl = self.workload
        out = np.empty_like(self.initial)
        episodes = ctypes.c_int64(0)
        reward = ctypes.c_double(0.0)
        self.function(
            wl.n_envs, wl.n_steps, wl.seed, int(wl.deterministic), self.initial.ctypes.data,
            out.ctypes.data, ctypes.byref(episodes), ctypes.byref(reward),
        )
        return RolloutResult(out, int(episodes.value), float(reward.value))


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
