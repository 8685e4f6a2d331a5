"""Schedule, buffer assignment, the compiled executable and its per-kernel profile."""

from hlofuse.runtime.executable import (
    CodegenError,
    CompileOptions,
    Executable,
    KernelInfo,
    compile_cpu,
    compile_many,
    generate,
)
from hlofuse.runtime.profile import KernelProfile, Profile
from hlofuse.runtime.saved import load_plan, save_plan

__all__ = ["CodegenError", "CompileOptions", "Executable", "KernelInfo", "KernelProfile",
           "Profile", "compile_cpu", "compile_many", "generate", "load_plan", "save_plan"]
