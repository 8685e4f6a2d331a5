"""A kernel's structure as a hashable key: two kernels with equal keys compile to the same
Mosaic kernel (same layout, blocks, shapes and body, instruction names and metadata aside),
so a check of the kernels on the chip (`TpuExecutable.check_kernels_on_chip`) compiles each
structure once. The `none` strategy's program has hundreds of kernels, most of them the same
few element-wise ops over the same shapes."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.printer import attr_value_text, literal_text
from hlofuse.targets.tpu.kernels import Kernel


def kernel_key(kernel: Kernel) -> Hashable | None:
    """The kernel's structure, or None where it is not compared (whole-loop kernels: their
    plan and layout are more than the body)."""
    if kernel.lanes is not None:
        return None
    body = (_computation_key(kernel.computation) if kernel.computation is not None
            else _instructions_key([kernel.instruction]))
    return (kernel.kind, kernel.mode, kernel.layout, kernel.block_rows, kernel.grid,
            kernel.reduction, kernel.update,
            tuple(s.text(False) for s in kernel.input_shapes),
            tuple(s.text(False) for s in kernel.output_shapes),
            tuple(_instruction_key(c, {}) for c in kernel.constants), body)


def _computation_key(comp: Computation) -> Hashable:
    return _instructions_key(list(comp.instructions))


def _instructions_key(instructions: list[Instruction]) -> Hashable:
    index = {id(inst): n for n, inst in enumerate(instructions)}
    return tuple(_instruction_key(inst, index) for inst in instructions)


def _instruction_key(inst: Instruction, index: dict[int, int]) -> Hashable:
    # An operand outside the listed instructions (a single-instruction kernel's inputs)
    # counts by its shape: the kernel gets it as an input of that shape.
    operands = tuple(index[id(o)] if id(o) in index else o.shape.text(False)
                     for o in inst.operands)
    attrs = tuple((key, attr_value_text(spec.type, inst.attrs[key]))
                  for key, spec in inst.definition.attrs.items()
                  if key in inst.attrs and key != "literal")
    literal = inst.attrs.get("literal")
    literal_key = literal_text(literal) if isinstance(literal, np.ndarray) else ""
    return (inst.op, inst.shape.text(False), operands, attrs, literal_key,
            tuple(_computation_key(c) for c in inst.calls),
            tuple((key, raw.text) for key, raw in inst.extra))
