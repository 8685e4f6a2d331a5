"""The CUDA target: the shared emitters' kernels printed as CUDA C++, launched by a host driver,
built by nvcc (`cuda`) or, without a GPU, by the C++ compiler against an emulation header
(`cuda-emulated`), which runs the same source's indexing and driver on the CPU.

Everything CUDA lives in this folder: the language table (`language.py`), the reduction
kernels written for warps and blocks (`reductions.py`), the module source with its launchers
(`driver.py`), building and running (`compile.py`), and the runtime sources
(`hlofuse_cuda_rt.cuh`, `cuda_emulation.h`).
"""

from __future__ import annotations

from hlofuse.ir.hlo import Module
from hlofuse.runtime.target import Executable, Target
from hlofuse.targets.cuda.compile import (
    CudaExecutable,
    NoCudaError,
    compile_check,
    compile_cuda,
    generate_cuda,
)
from hlofuse.toolchain.compiler import Compiler, ToolchainError, find_nvcc

__all__ = ["CudaExecutable", "CudaTarget", "EmulatedCudaTarget", "NoCudaError",
           "compile_check", "compile_cuda", "generate_cuda"]

_EMITS = {"cuda": "the generated CUDA: kernels, launchers and driver, headers by name",
          "cuda-full": "the whole CUDA file nvcc gets"}


def _emit(module: Module, what: str) -> str:
    source = generate_cuda(module).source
    return source.text if what == "cuda-full" else source.listing


class CudaTarget(Target):
    name = "cuda"
    summary = "CUDA kernels built by nvcc, run on an NVIDIA GPU"
    emits = _EMITS
    default_emit = "cuda"

    def unavailable(self) -> str | None:
        try:
            find_nvcc()
        except ToolchainError as e:
            return str(e)
        return None

    def emit(self, module: Module, what: str) -> str:
        return _emit(module, what)

    def compile(self, module: Module) -> Executable:
        return compile_cuda(module)


class EmulatedCudaTarget(Target):
    name = "cuda-emulated"
    summary = "the CUDA source built for this CPU against an emulation header"
    emits = _EMITS
    default_emit = "cuda"

    def unavailable(self) -> str | None:
        try:
            Compiler.find()
        except ToolchainError as e:
            return str(e)
        return None

    def emit(self, module: Module, what: str) -> str:
        return _emit(module, what)

    def compile(self, module: Module) -> Executable:
        return compile_cuda(module, emulate=True)
