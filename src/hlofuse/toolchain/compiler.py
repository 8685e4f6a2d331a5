"""Find the C compiler, build shared objects through the cache, load them with ctypes.

Flags: -O3 -march=native -fopenmp, and deliberately no -ffast-math. -ffp-contract=off keeps
a*b+c as two roundings (GNU C would fuse it into an FMA and differ from the reference);
-fno-math-errno only drops errno, so sqrt and friends can be inlined and vectorised.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from hlofuse.toolchain.cache import Cache, CacheError, is_unwritable

DEFAULT_FLAGS: tuple[str, ...] = (
    "-O3", "-march=native", "-fopenmp", "-ffp-contract=off", "-fno-math-errno", "-std=gnu11",
    "-fPIC", "-shared", "-fvisibility=hidden",
)
COMPILE_TIMEOUT_S = 600


class ToolchainError(RuntimeError):
    """No usable C compiler, or it could not be run."""


class CompileError(ToolchainError):
    """The C compiler rejected generated source; `source_path` is kept for inspection."""

    def __init__(self, source_path: Path, message: str) -> None:
        self.source_path = source_path
        self.compiler_message = message
        super().__init__(f"C compilation failed (source: {source_path}):\n{message.strip()}")


@dataclass(frozen=True)
class Compiler:
    command: tuple[str, ...]
    version: str

    @staticmethod
    def find() -> Compiler:
        """$CC (which may carry arguments, e.g. 'ccache gcc'), else `cc` on the PATH."""
        return _find_compiler(os.environ.get("CC", ""))


@functools.cache
def _find_compiler(cc: str) -> Compiler:
    command = shlex.split(cc) if cc.strip() else ["cc"]
    executable = shutil.which(command[0])
    if executable is None:
        origin = "$CC" if cc.strip() else "cc"
        raise ToolchainError(f"no C compiler found: {origin} ({command[0]!r}) is not on the PATH; "
                             "install gcc or clang, or set CC")
    full = (executable, *command[1:])
    return Compiler(full, _compiler_version(full))


def _compiler_version(command: tuple[str, ...]) -> str:
    """The first line of `<compiler> --version`, remembered in the cache directory by the size
    and modification time of the programs the command names (as ccache checks a compiler):
    a new process loading a cached program need not start the compiler to learn it."""
    stamps = []
    for word in command:
        found = shutil.which(word)
        if found is not None:
            info = os.stat(found)  # the program a symlink (cc -> gcc-12) leads to
            stamps.append(f"{found}:{info.st_size}:{info.st_mtime_ns}")
    memo = hashlib.sha256("\0".join([*command, *stamps]).encode()).hexdigest()[:40]
    cache: Cache | None
    try:
        cache = Cache.open()
        known = cache.read_record(memo, ".version")
    except (CacheError, OSError):
        cache, known = None, None
    if known is not None:
        return known.decode(errors="replace")
    try:
        result = subprocess.run([*command, "--version"], capture_output=True, text=True,
                                timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolchainError(f"cannot run the C compiler {command[0]}: {e}") from None
    lines = (result.stdout or result.stderr).strip().splitlines()
    version = lines[0] if lines else "unknown"
    if cache is not None:
        try:
            cache.write_record(memo, version.encode(), ".version")
        except OSError:
            pass
    return version


@functools.lru_cache(maxsize=1)
def host_signature() -> str:
    """What -march=native depends on: a cache shared between machines must not mix them."""
    parts = [platform.machine(), platform.system()]
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "flags", "Features", "CPU part")):
                    parts.append(line.strip())
                if line.strip() == "":
                    break
    except OSError:
        parts.append(platform.processor())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class BuildResult:
    path: Path
    key: str
    cache_hit: bool
    seconds: float


@dataclass(frozen=True)
class Unit:
    """One translation unit of a shared object: its source, and the flags it is compiled
    with besides the object's own (the units of one object are compiled apart, in parallel,
    and linked together)."""

    source: str
    extra_flags: tuple[str, ...] = ()


def cache_key(source: str | Sequence[Unit], flags: Sequence[str], compiler: Compiler) -> str:
    units = _units(source)
    if len(units) == 1:  # one unit: the key of its source and every flag it is compiled with
        parts = [units[0].source, *flags, *units[0].extra_flags]
    else:
        parts = [*flags, *(f"\0unit {len(u.source)} {' '.join(u.extra_flags)}\0{u.source}"
                           for u in units)]
    text = "\0".join([*parts, *compiler.command, compiler.version, host_signature()])
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _units(source: str | Sequence[Unit]) -> tuple[Unit, ...]:
    units = (Unit(source),) if isinstance(source, str) else tuple(source)
    if not units:
        raise ValueError("a shared object needs at least one translation unit")
    return units


def build_shared_object(source: str | Sequence[Unit], flags: Sequence[str] = DEFAULT_FLAGS,
                        cache: Cache | None = None,
                        compiler: Compiler | None = None) -> BuildResult:
    """The shared object of `source` (one source text, or several translation units), from
    the cache or freshly compiled into it."""
    start = time.perf_counter()
    compiler = compiler or Compiler.find()
    cache = cache or Cache.open()
    units = _units(source)
    key = cache_key(units, flags, compiler)
    found = cache.lookup(key)
    if found is not None:
        return BuildResult(found, key, True, time.perf_counter() - start)
    try:
        path = _compile_into(cache, key, units, flags, compiler)
    except OSError as e:
        if not is_unwritable(e):
            raise
        # A full disk or a read-only cache must not fail the user's program: warn, and
        # compile into this process's temporary cache.
        path = _compile_into(cache.unwritable(e), key, units, flags, compiler)
    return BuildResult(path, key, False, time.perf_counter() - start)


_DISK_FULL = ("No space left on device", "Read-only file system", "Disk quota exceeded")


def _compile_into(cache: Cache, key: str, units: Sequence[Unit], flags: Sequence[str],
                  compiler: Compiler) -> Path:
    """Compile `units` and install the shared object in `cache` under `key`. Every file is
    written under a temporary name and renamed into place, so an interrupted compile (Ctrl-C,
    a kill) leaves no entry that `lookup` would accept. Several units are compiled to objects
    at once and then linked. Raises OSError when the cache cannot be written."""
    sources = [cache.write_source(key, unit.source, index)
               for index, unit in enumerate(units)]
    workdir = cache.temporary_dir()
    try:
        output = workdir / "module.so"
        if len(units) == 1:
            _run_compiler([*compiler.command, *flags, *units[0].extra_flags, str(sources[0]),
                           "-o", str(output), "-lm"], sources[0], output)
        else:
            objects = [workdir / f"unit{index}.o" for index in range(len(units))]
            with ThreadPoolExecutor(len(units)) as pool:
                jobs = [pool.submit(_run_compiler,
                                    [*compiler.command, *flags, *unit.extra_flags, "-c",
                                     str(path), "-o", str(obj)], path, obj)
                        for unit, path, obj in zip(units, sources, objects, strict=True)]
                for job in jobs:
                    job.result()
            _run_compiler([*compiler.command, *flags, *map(str, objects), "-o", str(output),
                           "-lm"], sources[0], output)
        return cache.install(key, output, len(units))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run_compiler(command: list[str], source_path: Path, output: Path) -> None:
    """Run one compiler command that writes `output`; CompileError (naming `source_path`)
    when it fails, OSError when the failure is the output directory's."""
    try:
        result = subprocess.run(command, capture_output=True, text=True,
                                timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CompileError(source_path, f"the compiler took longer than "
                           f"{COMPILE_TIMEOUT_S} s") from None
    except OSError as e:
        raise ToolchainError(f"cannot run {command[0]}: {e}") from None
    if result.returncode != 0 or not output.exists():
        message = result.stderr or result.stdout or f"exit status {result.returncode}"
        # The compiler (or the assembler under it) could not write its output: a fault
        # of the cache directory, not of the generated code.
        for text, number in zip(_DISK_FULL, (errno.ENOSPC, errno.EROFS, errno.EDQUOT),
                                strict=True):
            if text in message:
                raise OSError(number, text, str(output))
        raise CompileError(source_path, message)


def load_library(path: Path, global_symbols: bool = False) -> ctypes.CDLL:
    """dlopen a shared object; global_symbols makes its symbols visible to later ones."""
    mode = ctypes.RTLD_GLOBAL if global_symbols else ctypes.RTLD_LOCAL
    try:
        return ctypes.CDLL(str(path), mode=mode)
    except OSError as e:
        raise ToolchainError(f"cannot load {path}: {e}") from None


# --- nvcc (the CUDA backend) -------------------------------------------------------------------

class NvccNotFound(ToolchainError):
    """The CUDA backend was asked for and no nvcc can be found."""


def find_nvcc() -> Compiler:
    """$NVCC, else `nvcc` on the PATH, else /usr/local/cuda/bin/nvcc; the version recorded is
    nvcc's release line (its first line names no version)."""
    return _find_nvcc(os.environ.get("NVCC", ""))


@functools.cache
def _find_nvcc(nvcc: str) -> Compiler:
    candidates = [nvcc] if nvcc.strip() else ["nvcc", "/usr/local/cuda/bin/nvcc"]
    for candidate in candidates:
        found = shutil.which(candidate)
        if found is not None:
            break
    else:
        origin = "$NVCC" if nvcc.strip() else "nvcc"
        raise NvccNotFound(f"the CUDA backend needs nvcc: {origin} is not on the PATH (install "
                           "the CUDA toolkit, or set NVCC)")
    try:
        result = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolchainError(f"cannot run {found}: {e}") from None
    lines = [line for line in result.stdout.splitlines() if "release" in line]
    return Compiler((found,), lines[0].strip() if lines else result.stdout.strip())


def nvcc_flags(arch: str, debug: bool = False) -> tuple[str, ...]:
    """-x cu (the cached source is a .c file); --fmad=false as -ffp-contract=off on the CPU;
    -ftz=true as the CPU's FTZ/DAZ, which the reference models."""
    flags = ("-O3", "-std=c++17", "-x", "cu", f"-arch={arch}", "--fmad=false", "-ftz=true",
             "-shared", "-Xcompiler", "-fPIC,-fvisibility=hidden", "-w")
    return flags + (("-DHLOFUSE_CUDA_DEBUG",) if debug else ())
