"""Resource limits on a module (instructions, nesting depth, bytes per buffer), checked
before any work starts, each naming how to raise it.

Defaults are far above any real program (the unrolled CartPole rollouts have about 30,000
instructions and nest 3 deep) and below what would exhaust memory:
`HLOFUSE_MAX_INSTRUCTIONS`, `HLOFUSE_MAX_NESTING` and `HLOFUSE_MAX_BUFFER_BYTES` change them,
as do the `limits` arguments of `verify`, `check_limits` and `hlofuse.api.compile_module`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hlofuse.ir.hlo import Module
from hlofuse.ir.shapes import DEFAULT_MAX_BUFFER_BYTES, Shape

DEFAULT_MAX_INSTRUCTIONS = 2_000_000
DEFAULT_MAX_NESTING = 10_000
VARIABLES = {"max_instructions": "HLOFUSE_MAX_INSTRUCTIONS",
             "max_nesting": "HLOFUSE_MAX_NESTING",
             "max_buffer_bytes": "HLOFUSE_MAX_BUFFER_BYTES"}


class ResourceLimitError(ValueError):
    """A module beyond a resource limit; `limit` names it, `value` and `maximum` the figures."""

    def __init__(self, limit: str, value: int, maximum: int, what: str,
                 instruction: str | None = None, computation: str | None = None) -> None:
        self.limit = limit
        self.value = value
        self.maximum = maximum
        self.instruction = instruction
        self.computation = computation
        super().__init__(f"{what}: {value:,} is above the limit {limit}={maximum:,}; to raise "
                         f"it set ${VARIABLES[limit]} or pass limits=Limits({limit}=...)")


@dataclass(frozen=True)
class Limits:
    max_instructions: int = DEFAULT_MAX_INSTRUCTIONS
    max_nesting: int = DEFAULT_MAX_NESTING
    max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES

    @staticmethod
    def from_env() -> Limits:
        """The defaults, each replaced by its environment variable when set."""
        values: dict[str, int] = {}
        for name, variable in VARIABLES.items():
            text = os.environ.get(variable, "").strip().replace("_", "")
            if not text:
                continue
            try:
                values[name] = int(text)
            except ValueError:
                raise ValueError(f"${variable}={os.environ[variable]!r} is not a whole "
                                 "number") from None
            if values[name] <= 0:
                raise ValueError(f"${variable} must be positive, got {values[name]}")
        return Limits(**values)


def nesting_depth(module: Module) -> int:
    """How deep computations call each other (1: the entry calls nothing). A call cycle is
    left to the verifier's recursion check."""
    depth: dict[int, int] = {}
    for comp in module.computations:  # callees come before their callers
        deepest = 0
        for inst in comp.instructions:
            for callee in inst.calls:
                deepest = max(deepest, depth.get(id(callee), 0))
        depth[id(comp)] = deepest + 1
    return depth.get(id(module.entry), 1)


def _largest_buffer(shape: Shape) -> int:
    return max((leaf.byte_size for leaf in shape.leaves()), default=0)


def check_limits(module: Module, limits: Limits | None = None, buffers: bool = True) -> None:
    """Raise ResourceLimitError when `module` is beyond a limit (default: `Limits.from_env`);
    without `buffers`, the buffer sizes are left to the caller (the verifier checks them as it
    passes each instruction). Costs one pass over the instructions, nothing else."""
    limits = limits if limits is not None else Limits.from_env()
    count = sum(len(c.instructions) for c in module.computations)
    if count > limits.max_instructions:
        raise ResourceLimitError("max_instructions", count, limits.max_instructions,
                                 f"module {module.name} has {count:,} instructions")
    depth = nesting_depth(module)
    if depth > limits.max_nesting:
        raise ResourceLimitError("max_nesting", depth, limits.max_nesting,
                                 f"module {module.name} nests computations {depth} deep")
    if not buffers:
        return
    for comp in module.computations:
        for inst in comp.instructions:
            size = _largest_buffer(inst.shape)
            if size > limits.max_buffer_bytes:
                raise ResourceLimitError(
                    "max_buffer_bytes", size, limits.max_buffer_bytes,
                    f"%{inst.name} in %{comp.name} ({inst.shape.text(False)}) needs {size:,} "
                    "bytes", inst.name, comp.name)
