"""The C + OpenMP target: kernels as C functions, a C driver, built by the system C compiler.

Everything C lives in this folder: the language table (`language.py`), the fixed text of every
generated file (`templates.py`), the module source (`driver.py`), building and the runtime
library (`build.py`, `hlofuse_rt.c`, `hlofuse_linalg.c`, `hlofuse_rt.h`), and saved programs
(`saved.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from hlofuse.ir.hlo import Instruction, Module
from hlofuse.runtime.target import Executable, Target
from hlofuse.targets.c.blas import dot_kernel_lines, find_blas
from hlofuse.targets.c.build import (
    CompileOptions,
    compile_cpu,
    compile_many,
    generate_c,
    runtime_library,
)
from hlofuse.targets.native.executable import SharedObjectExecutable
from hlofuse.toolchain.compiler import Compiler, ToolchainError, host_signature

__all__ = ["CTarget", "CompileOptions", "compile_cpu", "compile_many", "generate_c",
           "runtime_library"]


class CTarget(Target):
    name = "cpu"
    summary = "C + OpenMP kernels built by the system C compiler (the default)"
    emits = {"c": "the generated C: kernels first, the headers included by name",
             "c-full": "the whole C file the compiler gets"}
    default_emit = "c"

    def __init__(self, options: CompileOptions = CompileOptions()) -> None:
        self.options = options

    def unavailable(self) -> str | None:
        try:
            Compiler.find()
        except ToolchainError as e:
            return str(e)
        return None

    def emit(self, module: Module, what: str) -> str:
        source = generate_c(module, self.options).source
        return source.text if what == "c-full" else source.listing

    def compile(self, module: Module) -> Executable:
        return compile_cpu(module, self.options)

    def describe_dots(self, dots: Sequence[Instruction]) -> list[str]:
        return dot_kernel_lines(dots)

    def cache_identity(self) -> str:
        compiler = Compiler.find()
        blas = find_blas()
        return "\0".join(["cpu", repr(self.options.kernel), str(self.options.verify),
                          *self.options.flags, *compiler.command, compiler.version,
                          host_signature(), blas.identity if blas else "no BLAS"])

    def load_program(self, key: str, fused: Callable[[], Module]) -> Executable | None:
        from hlofuse.targets.c.saved import load_plan

        return load_plan(key, lambda: generate_c(fused(), self.options), self.options)

    def save_program(self, key: str, executable: Executable,
                     facts: Mapping[str, object]) -> None:
        from hlofuse.targets.c.saved import save_plan

        assert isinstance(executable, SharedObjectExecutable)
        save_plan(key, executable, facts)
