"""The interface every code-generation target implements, and what its executables offer.

A target owns emission (kernel specs to its code), building (a compiler, or a JIT), loading and
running. The targets live in `hlofuse.targets` (one folder each) and are found through its
registry; nothing above this layer names a target's modules. `api.jit`, the command line, the
program cache and the benchmarks ask the registry for a target by name and use only this
interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from hlofuse.ir.hlo import Instruction, Module
from hlofuse.runtime.plan import KernelInfo
from hlofuse.runtime.profile import Profile


class CodegenError(ValueError):
    """The module cannot be compiled for the target; the message names the instruction."""


def first_line(error: BaseException) -> str:
    """An error's first line of text, or its type's name where it has none: what a report
    keeps of a compiler's or library's message (Mosaic's and torch's run to pages)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class TargetUnavailable(RuntimeError):
    """The target cannot run (or cannot even emit) on this machine: its toolchain, device or
    Python package is missing. The message says what to install or where to run."""


class Executable(Protocol):
    """A compiled module: call it with NumPy arrays, get NumPy arrays back."""

    compile_seconds: float
    cache_hit: bool

    def __call__(self, *args: object) -> object: ...

    def profile(self, *args: object, repeat: int = 1, runner: str = "driver") -> Profile: ...

    @property
    def kernels(self) -> list[KernelInfo]: ...

    @property
    def peak_bytes(self) -> int: ...

    @property
    def facts(self) -> Mapping[str, object]:
        """What was saved with a cached program (`Target.save_program`), else empty."""
        ...

    def source(self) -> str: ...


class Target(ABC):
    """One code-generation target. Subclasses set the class attributes and implement the
    methods; `hlofuse.targets` registers them by name."""

    name: str = ""
    summary: str = ""  # one line for `--backend` help
    # What `hlofuse compile --emit` can print for this target besides the fused HLO: each
    # name maps to a one-line description.
    emits: Mapping[str, str] = {}
    default_emit: str = ""
    # Whether `executable` runs generated code (False for the reference interpreter).
    is_compiled: bool = True

    def unavailable(self) -> str | None:
        """Why the target cannot run here (None when it can): a missing compiler, device or
        package, named with what to install."""
        return None

    def emit_unavailable(self) -> str | None:
        """Why the target cannot even generate its code here (None when it can)."""
        return None

    @abstractmethod
    def emit(self, module: Module, what: str) -> str:
        """The generated code of a fused module, as `hlofuse compile --emit WHAT` prints it.
        Raises CodegenError naming the instruction it cannot compile."""

    @abstractmethod
    def compile(self, module: Module) -> Executable:
        """A fused module compiled and loaded. Raises CodegenError or TargetUnavailable."""

    def describe_dots(self, dots: Sequence[Instruction]) -> list[str]:
        """A line per dot kernel of a fused module saying what computes it on this target (a
        library, or generated loops), for `hlofuse explain`; none where there is nothing to
        say."""
        return []

    def cache_identity(self) -> str:
        """What besides the module and strategy decides the target's output (its compiler,
        flags, device): part of every cache key made for it."""
        return self.name

    # A target whose executables can be saved and loaded again without generating code
    # implements these; `compile_cache` keys them by module, strategy and `cache_identity`.
    def load_program(self, key: str, fused: Callable[[], Module]) -> Executable | None:
        """The executable saved under `key`, or None. `fused()` gives the fused module if
        the executable is later asked for what it did not save (its source)."""
        return None

    def save_program(self, key: str, executable: Executable,
                     facts: Mapping[str, object]) -> None:
        """Keep `executable` under `key` with `facts` (best effort; by default nothing is
        kept)."""
        return None
