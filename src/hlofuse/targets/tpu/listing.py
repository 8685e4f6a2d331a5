"""What `hlofuse compile --backend tpu --emit pallas|mosaic` prints.

`pallas_listing`: each kernel as its `pallas_call` (layout, grid, blocks) and the `lax`
operations its body evaluates, one line per instruction; XLA operations with the reason.
`mosaic_listing`: each Pallas kernel lowered for the TPU without one (JAX lowers Pallas to
Mosaic on any machine), as the Mosaic module the chip's compiler would get.
"""

from __future__ import annotations

import contextlib
import io

import jax

from hlofuse.ir.hlo import Computation
from hlofuse.ir.ops import Op
from hlofuse.ir.printer import instruction_text
from hlofuse.runtime.target import CodegenError, first_line
from hlofuse.targets.tpu.kernels import Kernel


def pallas_listing(kernels: list[Kernel]) -> str:
    lines = [f"// {len(kernels)} kernel call sites: "
             f"{sum(k.mode == 'pallas' for k in kernels)} pallas_call, "
             f"{sum(k.mode == 'xla-op' for k in kernels)} xla-op"]
    for k in kernels:
        lines.append("")
        lines.append(f"{k.name}  [{k.kind}]  {_header(k)}")
        ins = ", ".join(s.text(False) for s in k.input_shapes)
        outs = ", ".join(s.text(False) for s in k.output_shapes)
        lines.append(f"  in: ({ins})  out: ({outs})")
        if k.host_ops:
            lines.append(f"  on the host (reference interpreter): {', '.join(k.host_ops)}")
        lines.extend(f"  {line}" for line in _body(k))
    return "\n".join(lines) + "\n"


def _header(k: Kernel) -> str:
    words = f"; {', '.join(k.word_types)} computed in int32 words" if k.word_types else ""
    if k.mode == "xla-op":
        return f"xla-op: {k.reason}{words}"
    if k.lanes is not None:
        return k.lanes.describe()
    if k.update is not None:
        return f"pallas_call {k.update.describe()}{words}"
    if k.reduction is not None:
        return f"pallas_call tiled-reduce: {k.reduction.describe()}, 0-d inputs in SMEM{words}"
    if k.layout == "tiled":
        return (f"pallas_call tiled: grid ({k.grid},), blocks ({k.block_rows}, 128) of the "
                f"flattened arrays, 0-d inputs in SMEM{words}")
    return f"pallas_call whole: every array one block in VMEM, 0-d values in SMEM{words}"


def _body(k: Kernel) -> list[str]:
    if k.computation is None:
        return [f"lax: {instruction_text(k.instruction)}"]
    out: list[str] = []
    _computation(k.computation, out, "lax: ")
    return out


def _computation(comp: Computation, out: list[str], prefix: str) -> None:
    for inst in comp.instructions:
        if inst.op is Op.PARAMETER:
            continue
        out.append(prefix + instruction_text(inst))
        if inst.op in (Op.WHILE, Op.CONDITIONAL, Op.CALL):
            for called in inst.calls:
                out.append(f"  {called.name}:")
                _computation(called, out, "    " + prefix)


def mosaic_listing(kernels: list[Kernel], x64: bool = False) -> str:
    """Each Pallas kernel lowered for the TPU (no chip needed), with x64 enabled when the
    program runs so (`x64`: it has 64-bit values); a kernel Mosaic cannot lower is a
    CodegenError naming it."""
    from hlofuse.targets.tpu.program import kernel_structs

    parts = []
    for k in kernels:
        if k.mode != "pallas":
            parts.append(f"// {k.name}: xla-op ({k.reason})\n")
            continue
        try:
            text = lower_for_tpu(k, kernel_structs(k), x64)
        except Exception as e:  # noqa: BLE001 - Mosaic's errors have no common type
            raise CodegenError(f"%{k.name} ({k.kind}): Mosaic cannot lower this kernel for "
                               f"the TPU: {first_line(e)[:300]}") from None
        parts.append(f"// {k.name} [{k.kind}] {_header(k)}\n{text}")
    return "\n".join(parts)


def lower_for_tpu(kernel: Kernel, structs: list[jax.ShapeDtypeStruct],
                  x64: bool = False) -> str:
    """The kernel's Mosaic module, lowered for the TPU platform without a device; `x64`: as
    a program with 64-bit values runs it (x64 enabled: Python integers become i64)."""
    interpret = kernel.interpret
    kernel.interpret, kernel.debug = False, True
    kernel._call = None
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured), jax.enable_x64(x64):
            lowered = jax.jit(lambda *a: kernel(*a)).trace(*structs).lower(
                lowering_platforms=("tpu",))
    finally:
        kernel.interpret, kernel.debug = interpret, False
        kernel._call = None
    text = captured.getvalue()
    return text if text.strip() else lowered.as_text()


def wide_block_indices(mosaic: str) -> list[str]:
    """The index maps of a Mosaic module that return 64-bit block indices: Mosaic's compiler
    refuses them on the chip (`failed to legalize operation 'func.return'`) but lowering
    without a TPU does not."""
    return [line.strip() for line in mosaic.splitlines()
            if line.strip().startswith("func.func @transform") and "i64" in line]
