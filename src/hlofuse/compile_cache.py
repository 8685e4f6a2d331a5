"""The compiled-program cache: a module compiled once under a strategy is loaded, not compiled.

`compile_module` looks a module up by a key made of its HLO text, the strategy, hlofuse's own
code (the size and modification time of every source file of the package), the cost model's
measured constants when the strategy prices with them, and the target's identity (for the C
target: its compiler, flags and host). A hit loads what the target saved (the C target: the
plan and its shared object): no pass, no code generation, no compiler; the fused module, the
decision log and the source are produced again only if asked for. A miss runs the strategy,
compiles (the shared-object cache may still hold the object) and saves the program. Targets
that save nothing (`Target.load_program` gives None) compile every time.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from collections.abc import Callable, Sequence

from hlofuse.fusion.beyond_xla.cost_model import MachineConstants, constants_from_figures
from hlofuse.fusion.beyond_xla.priority import PriorityFusion
from hlofuse.fusion.strategies import FusionResult, Strategy, parse_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.printer import module_text
from hlofuse.passes.manager import Step
from hlofuse.runtime.target import Executable, Target
from hlofuse.toolchain.calibration import measured_figures

# Bump when what a plan means changes in a way the source fingerprint cannot see.
KEY_FORMAT = "hlofuse-program-2"
_SOURCE_SUFFIXES = (".py", ".c", ".h")


@functools.cache
def source_fingerprint() -> str:
    """Changes whenever a source file of the hlofuse package does (by size or mtime: reading
    every file would cost a compile from the cache more than the rest of it)."""
    entries: list[str] = []
    _stamp_sources(os.path.dirname(os.path.abspath(__file__)), "", entries)
    return hashlib.sha256("\n".join(sorted(entries)).encode()).hexdigest()


def _stamp_sources(directory: str, prefix: str, out: list[str]) -> None:
    with os.scandir(directory) as found:
        for entry in found:
            if entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
                _stamp_sources(entry.path, f"{prefix}{entry.name}/", out)
            elif entry.name.endswith(_SOURCE_SUFFIXES):
                info = entry.stat()
                out.append(f"{prefix}{entry.name}:{info.st_size}:{info.st_mtime_ns}")


def _cost_constants(strategy: str) -> str:
    """The machine constants priority fusion decides with, when the strategy measures them."""
    constants = strategy_constants(strategy)
    return "" if constants is None else repr(dataclasses.astuple(constants))


@functools.cache
def measured_machine_constants() -> MachineConstants:
    """This machine's cost-model constants from the toolchain's probe, once per process."""
    return constants_from_figures(measured_figures())


def strategy_constants(strategy: str | Strategy) -> MachineConstants | None:
    """The measured constants to pass to `run_strategy` when the strategy prices with them
    (priority fusion without `default_costs`), else None: the probe runs only when needed."""
    parsed = parse_strategy(strategy) if isinstance(strategy, str) else strategy
    return measured_machine_constants() if parsed.measures_costs else None


def with_measured_constants(steps: Sequence[Step]) -> list[Step]:
    """`steps` with this machine's constants given to each priority fusion that prices with
    measured ones and has none (`hlofuse opt -p priority-fusion`)."""
    return [dataclasses.replace(step, constants=measured_machine_constants())
            if isinstance(step, PriorityFusion) and step.costs == "measured"
            and step.constants is None else step for step in steps]


def program_key(module: Module, strategy: str, target: Target) -> str:
    """The cache key of `module` compiled for `target` under `strategy`."""
    text = "\0".join([KEY_FORMAT, source_fingerprint(), strategy, _cost_constants(strategy),
                      target.cache_identity(), module_text(module)])
    return "p" + hashlib.sha256(text.encode()).hexdigest()[:40]


def cached_executable(target: Target, module: Module, strategy: str,
                      fusion: Callable[[], FusionResult]) -> Executable:
    """`module` under `strategy` compiled for `target`: from the cache, or compiled
    (`fusion()` runs the strategy) and saved."""
    key = program_key(module, strategy, target)
    executable = target.load_program(key, lambda: fusion().module)
    if executable is not None:
        return executable
    fused = fusion()
    executable = target.compile(fused.module)
    target.save_program(key, executable,
                        {"kernels_per_iteration": fused.kernels_per_iteration()})
    return executable
