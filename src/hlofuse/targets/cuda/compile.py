"""Compile a module to CUDA and run it: `compile_cuda(module)(*arrays)`.

The module's code comes from the same emitters as the CPU's, printed by the CUDA language
table (targets/cuda/language.py), with a host driver of launches (targets/cuda/driver.py).
`nvcc` builds it into a shared object, cached like the CPU's (the key holds nvcc's version
and the target architecture). `emulate=True` builds the same source with the C++ compiler
against cuda_emulation.h instead, so the kernels' indexing and the driver run on a machine
without a GPU.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from hlofuse.codegen.kernel import emit_kernel
from hlofuse.codegen.kernel_spec import EmittedKernel, KernelOptions, KernelSpec
from hlofuse.ir.hlo import Module
from hlofuse.runtime.buffers import Assignment
from hlofuse.runtime.lowering import Generated, ModuleSource, generate
from hlofuse.runtime.program import Program
from hlofuse.targets.cuda.driver import module_source, support_text
from hlofuse.targets.cuda.language import CUDA, CudaLanguage
from hlofuse.targets.cuda.reductions import emit_cuda_reduction
from hlofuse.targets.native.executable import ProfilePointers, SharedObjectExecutable
from hlofuse.toolchain.cache import Cache
from hlofuse.toolchain.compiler import (
    Compiler,
    ToolchainError,
    build_shared_object,
    find_nvcc,
    load_library,
    nvcc_flags,
)

# Every loop of two or more elements is shared among threads: on a GPU even a small loop
# is better spread over a warp than run by one thread. Short rows stay in the loop over rows:
# a thread per row already reads them, and a chunk's buffers would be per-thread memory.
CUDA_KERNEL_OPTIONS = KernelOptions(parallel_min_elements=2, short_row_chunk=0)
DEFAULT_ARCH = "sm_80"
EMULATION_FLAGS: tuple[str, ...] = (
    "-O1", "-std=gnu++17", "-x", "c++", "-ffp-contract=off", "-fno-math-errno", "-fPIC",
    "-shared", "-fvisibility=hidden", "-w",
)


class NoCudaError(ToolchainError):
    """No nvcc (compile time) or no usable GPU (run time)."""


@dataclass(frozen=True)
class CudaCodegen:
    """The generate loop's questions (runtime/lowering.py), answered for CUDA."""

    options: KernelOptions = field(default_factory=lambda: CUDA_KERNEL_OPTIONS)
    lang: CudaLanguage = CUDA

    def prepare(self, spec: KernelSpec) -> KernelSpec:
        if not spec.own_emitter:
            return spec
        return dataclasses.replace(spec, backend_config=one_lane(spec.backend_config))

    def emit(self, spec: KernelSpec) -> EmittedKernel:
        """A reduction kernel as a grid of warps or blocks where reductions.py takes it;
        every other kernel from the shared emitters, printed by the CUDA table."""
        if not spec.own_emitter:
            grid = emit_cuda_reduction(spec, self.lang, self.options)
            if grid is not None:
                return grid
        return emit_kernel(spec, self.lang, self.options)

    def emit_aliased(self, first: EmittedKernel, spec: KernelSpec) -> EmittedKernel:
        return self.emit(spec)

    def module_source(self, program: Program, emitted: Mapping[int, EmittedKernel],
                      assignment: Assignment, constant_offsets: list[int],
                      constant_bytes: int, what: str) -> ModuleSource:
        return module_source(program, emitted, assignment, constant_offsets, self.lang, what,
                             constant_bytes)


def generate_cuda(module: Module, lang: CudaLanguage = CUDA,
                  options: KernelOptions = CUDA_KERNEL_OPTIONS) -> Generated:
    """The CUDA source and runtime plan of a module, without compiling it."""
    return generate(module, CudaCodegen(options, lang))


def one_lane(backend_config: str) -> str:
    """A whole-loop fusion's config with one lane per block: on a GPU each environment is a
    thread of its own (its state in registers), where the CPU packs 16 into SIMD lanes."""
    try:
        config = json.loads(backend_config)
    except ValueError:
        return backend_config
    if not isinstance(config, dict) or "lanes" not in config:
        return backend_config
    return json.dumps({**config, "lanes": 1})


def emulation_source(generated: Generated) -> str:
    """The same CUDA text, preceded by the emulation header (built as plain C++)."""
    return support_text("cuda_emulation.h") + "\n" + generated.source.text


class CudaExecutable(SharedObjectExecutable):
    """A compiled CUDA module; calls copy inputs to the GPU and outputs back once each."""

    emulated: bool = False

    def _call_driver(self, arrays: list, outputs: list,  # type: ignore[type-arg, unused-ignore]
                     profile: ProfilePointers | None) -> None:
        params = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        outs = (ctypes.c_void_p * max(len(outputs), 1))(*[o.ctypes.data for o in outputs])
        status = self._run(ctypes.addressof(params), ctypes.addressof(outs), None,
                           self.plan.constants.ctypes.data,
                           ctypes.addressof(profile) if profile is not None else None)
        if status != 0:
            error = self._library.hlofuse_cuda_error
            error.restype = ctypes.c_char_p
            message = (error() or b"unknown error").decode(errors="replace")
            raise NoCudaError(f"{self.plan.name}: the CUDA runtime failed: {message}")

    def run_thunks(self, *args: object) -> object:
        raise NotImplementedError("the CUDA backend runs through its driver only")


def compile_cuda(module: Module, *, arch: str | None = None, emulate: bool = False,
                 debug: bool | None = None) -> CudaExecutable:
    """Generate CUDA for `module`, build it (nvcc, or the C++ compiler when emulating) through
    the cache and load it. `arch` defaults to $HLOFUSE_CUDA_ARCH or sm_80; `debug` (default
    $HLOFUSE_CUDA_DEBUG=1) synchronises after every launch, so a failing kernel is named."""
    import os

    arch = arch or os.environ.get("HLOFUSE_CUDA_ARCH", DEFAULT_ARCH)
    if debug is None:
        debug = os.environ.get("HLOFUSE_CUDA_DEBUG", "") == "1"
    start = time.perf_counter()
    generated = generate_cuda(module)
    if emulate:
        source = emulation_source(generated)
        flags = EMULATION_FLAGS + (("-DHLOFUSE_CUDA_DEBUG",) if debug else ())
        built = build_shared_object(source, flags, Cache.open(), Compiler.find())
    else:
        nvcc = find_nvcc()
        flags = nvcc_flags(arch, debug)
        built = build_shared_object(generated.source.text, flags, Cache.open(), nvcc)
    library = load_library(built.path)
    executable = CudaExecutable(generated, library, built.cache_hit,
                                time.perf_counter() - start, built.key)
    executable.emulated = emulate
    return executable


def compile_check(generated: Generated, archs: tuple[str, ...] = ("sm_80", "sm_90"),
                  timeout_s: int = 600) -> None:
    """Compile the module's CUDA to an object for each of `archs` (nvcc -c, one call); raises
    CompileError with nvcc's message when it rejects the source."""
    import subprocess
    import tempfile
    from pathlib import Path

    from hlofuse.toolchain.compiler import CompileError

    nvcc = find_nvcc()
    gencode = [f"-gencode=arch=compute_{a[3:]},code={a}" for a in archs]
    with tempfile.TemporaryDirectory(prefix="hlofuse-cuda-") as work:
        source = Path(work) / "module.cu"
        source.write_text(generated.source.text, encoding="utf-8")
        flags = [f for f in nvcc_flags(archs[0]) if not f.startswith("-arch=")
                 and f != "-shared"]
        command = [*nvcc.command, *flags, *gencode, "-c", str(source), "-o",
                   str(Path(work) / "module.o")]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        if result.returncode != 0:
            kept = Path(tempfile.mkdtemp(prefix="hlofuse-cuda-failed-")) / "module.cu"
            kept.write_text(generated.source.text, encoding="utf-8")
            raise CompileError(kept, result.stderr or result.stdout)
