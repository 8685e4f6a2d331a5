"""The code-generation targets, by name: the registry every user of a target reads.

Each target is one folder here (`c/`, `cuda/`, ...) implementing `runtime.target.Target`, and
one entry below: its name, where its class lives, and a one-line summary for help texts.
`api.jit(backend=...)`, the command line's `--backend` choices, the program cache and the
benchmarks ask this registry; importing it loads no target (each is imported on first use), so
a target whose toolchain or Python package is missing costs nothing until it is asked for.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hlofuse.runtime.target import Target


@dataclass(frozen=True)
class TargetEntry:
    name: str
    module: str  # where the target's class lives
    attribute: str  # the class (constructed without arguments)
    summary: str
    is_compiled: bool = True  # False: runs no generated code (the interpreter)


ENTRIES: tuple[TargetEntry, ...] = (
    TargetEntry("cpu", "hlofuse.targets.c", "CTarget",
                "C + OpenMP kernels built by the system C compiler (the default)"),
    TargetEntry("interpreter", "hlofuse.targets.reference", "ReferenceTarget",
                "the reference interpreter (NumPy), no code generated", is_compiled=False),
    TargetEntry("cuda", "hlofuse.targets.cuda", "CudaTarget",
                "CUDA kernels built by nvcc, run on an NVIDIA GPU"),
    TargetEntry("cuda-emulated", "hlofuse.targets.cuda", "EmulatedCudaTarget",
                "the CUDA source built for this CPU against an emulation header"),
    TargetEntry("tpu", "hlofuse.targets.tpu", "TpuTarget",
                "Pallas kernels (pallas_call) in one jitted JAX program, run on a TPU"),
    TargetEntry("tpu-interpret", "hlofuse.targets.tpu", "InterpretTpuTarget",
                "the TPU target's Pallas kernels run with interpret=True on the CPU"),
)
_BY_NAME = {entry.name: entry for entry in ENTRIES}


def names(compiled_only: bool = False) -> tuple[str, ...]:
    """Every registered target's name, the default first (only those that run generated
    code, with `compiled_only`)."""
    return tuple(entry.name for entry in ENTRIES if entry.is_compiled or not compiled_only)


def entry(name: str) -> TargetEntry:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; the targets are {', '.join(names())}"
                         ) from None


@functools.cache
def get(name: str) -> Target:
    """The target registered as `name` (its module imported now)."""
    found = entry(name)
    module = importlib.import_module(found.module)
    target: Target = getattr(module, found.attribute)()
    return target


def help_text(compiled_only: bool = False) -> str:
    """The targets and their summaries, for `--backend` help."""
    return "; ".join(f"{e.name}: {e.summary}" for e in ENTRIES
                     if e.is_compiled or not compiled_only)
