"""The reference interpreter as a target: the fused module evaluated with NumPy, nothing
generated. `jit(..., backend="interpreter")` and `hlofuse run --backend interpreter` use it to
check a strategy's fused module without any compiler."""

from __future__ import annotations

from collections.abc import Mapping

from hlofuse.ir.hlo import Module
from hlofuse.ir.printer import module_text
from hlofuse.reference.interpreter import evaluate
from hlofuse.runtime.plan import KernelInfo
from hlofuse.runtime.profile import Profile
from hlofuse.runtime.target import Executable, Target, TargetUnavailable


class ReferenceExecutable:
    """Evaluates the fused module on every call."""

    compile_seconds = 0.0
    cache_hit = False

    def __init__(self, module: Module) -> None:
        self.module = module

    def __call__(self, *args: object) -> object:
        return evaluate(self.module, args)

    def profile(self, *args: object, repeat: int = 1, runner: str = "driver") -> Profile:
        raise TargetUnavailable("the interpreter runs no kernels to profile: use a compiled "
                                "backend (cpu or cuda)")

    @property
    def kernels(self) -> list[KernelInfo]:
        return []

    @property
    def peak_bytes(self) -> int:
        return 0

    @property
    def facts(self) -> Mapping[str, object]:
        return {}

    def source(self) -> str:
        return module_text(self.module)


class ReferenceTarget(Target):
    name = "interpreter"
    summary = "the reference interpreter (NumPy), no code generated"
    emits = {"hlo": "the fused HLO the interpreter evaluates"}
    default_emit = "hlo"
    is_compiled = False

    def emit(self, module: Module, what: str) -> str:
        return module_text(module)

    def compile(self, module: Module) -> Executable:
        return ReferenceExecutable(module)
