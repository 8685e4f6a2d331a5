"""What a kernel computes (`KernelSpec`), how it may be emitted, and what emission returns.

"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hlofuse.analysis.graph import post_order
from hlofuse.codegen import cir
from hlofuse.codegen.naming import Names, sanitize
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.shapes import Shape
from hlofuse.reference.rnglib import THREEFRY_TARGET

_KIND_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


@dataclass(frozen=True)
class KernelSpec:
    """What one kernel computes.

    `inputs` and `outputs` list the kernel's arguments in order, each as (instruction, tuple
    path): an input binds that leaf of the instruction's value to a pointer argument; an
    output stores that leaf of the instruction's value. For a fusion the inputs are its fused
    parameters (and array constants); for an unfused instruction they are its operands.
    """

    label: str
    kind: str
    inputs: tuple[tuple[Instruction, tuple[int, ...]], ...]
    outputs: tuple[tuple[Instruction, tuple[int, ...]], ...]
    instructions: tuple[str, ...] = ()
    # (output, input) pairs the runtime would like to share a buffer (a loop's new state and
    # its old value); tried first when the kernel decides what may be updated in place.
    in_place_hints: tuple[tuple[int, int], ...] = ()
    # (output, input) pairs that do share a buffer in this call: the kernel then reads the
    # input through the output's pointer, so every pointer stays `restrict` (no two name the
    # same memory) and loops still vectorise.
    aliased: tuple[tuple[int, int], ...] = ()
    # A fusion's backend_config text: which emitter a kCustom fusion needs (whole_loop.py).
    backend_config: str = ""
    # Launched once a run: the program's top level, inside no loop or branch (the runtime
    # knows; a kernel emitted alone is taken to be launched any number of times).
    runs_once: bool = False

    @property
    def own_emitter(self) -> bool:
        """A kCustom fusion with an emitter of its own (the whole loop). A Triton GEMM fusion
        (fusion/xla_gpu/gemm_fusion.py) is kCustom too, but is emitted as any other kernel."""
        return self.kind == "kCustom" and "__triton" not in self.backend_config

    def argument_names(self, names: Names) -> tuple[list[str], list[str]]:
        """C names of the input and output pointers, from the instructions they bind."""
        inputs = [names.unique(_leaf_name(inst, path)) for inst, path in self.inputs]
        outputs = [names.unique(_leaf_name(inst, path, "out_")) for inst, path in self.outputs]
        return inputs, outputs


def _leaf_name(inst: Instruction, path: tuple[int, ...], prefix: str = "") -> str:
    suffix = "".join(f"_{k}" for k in path)
    return f"{prefix}{inst.name}{suffix}"


@dataclass(frozen=True)
class KernelOptions:
    parallel_min_elements: int = 16384
    small_kernel_elements: int = 2048
    # Rows per chunk where a loop over rows reduces a short minor dimension (codegen/
    # short_rows.py); 0 keeps each row's elements written out in the loop over rows.
    short_row_chunk: int = 64
    # True: the values a reduce of a multi-output reduction (or a pairwise sum) reduces are
    # stored in rows first, then each row reduced, as before issue 32's change
    # (benchmarks/reduction_copies.py measures both); False: reduced where computed.
    store_reduced_rows: bool = False


@dataclass(frozen=True)
class Retargetable:
    """A kernel function kept as statements, so that a version reading some inputs through
    the outputs that got their buffers can be printed without emitting it again."""

    function: cir.Function
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]


@dataclass(frozen=True)
class EmittedKernel:
    """A kernel's functions with its name left as $name (identical kernels share them)."""

    code: str  # its parallel parts, then the kernel function
    parameter_types: tuple[cir.Pointer, ...]
    # (output argument, input argument) pairs whose buffers may be the same one: an in-place
    # dynamic-update-slice. The kernel copies the input first when they differ.
    in_place: tuple[tuple[int, int], ...]
    comment: str
    is_small: bool
    kind: str
    part_count: int = 0  # functions `$name_part<k>` the code holds
    retargetable: Retargetable | None = field(default=None, compare=False, repr=False)

    @property
    def definition(self) -> str:
        """The code headed by the comment naming the kernel and what it fuses."""
        return f"\n/* kernel $name ({_KIND_UNSAFE.sub('_', self.kind)}): {self.comment} */\n" \
            + self.code


def leaf_shape(inst: Instruction, path: tuple[int, ...]) -> Shape:
    shape = inst.shape
    for k in path:
        shape = shape.elements[k]
    return shape


def kernel_instructions(spec: KernelSpec) -> list[Instruction]:
    """Every instruction the kernel computes (operands before users), bound inputs excluded."""
    return post_order((root for root, _ in spec.outputs),
                      stop_at=(inst for inst, _ in spec.inputs))


def kernel_comment(spec: KernelSpec) -> str:
    """`label: the fused instructions`, sanitised for a C comment."""
    every = spec.instructions or (spec.label,)
    names = [sanitize(n) for n in every[:40]]  # a large kernel fuses tens of thousands
    if len(every) > 40:
        names.append(f"and {len(every) - 40} more")
    return f"{sanitize(spec.label)}: " + " ".join(names)


__all__ = ["THREEFRY_TARGET", "EmittedKernel", "KernelOptions", "KernelSpec", "Names",
           "kernel_comment", "kernel_instructions", "leaf_shape",
           "sanitize"]
