"""Reshapes that Mosaic's layout inference refuses inside a whole-array kernel on the chip.

Lowering without a TPU accepts every reshape; libtpu's compiler refuses some (`infer-vector-
layout: unsupported shape cast`), and a program holding one fails its first compile, after
which its kernels are compiled one at a time to find the refused ones (program.py). Kernels
with a reshape of a kind measured to fail on a v5e (JAX 0.10.2; `benchmarks/tpu_shape_casts.py`,
1,196 pairs of 32-bit shapes, `docs/results/tpu/shape_casts.json`) are planned as XLA
operations up front instead. The model predicts 568 of the 593 refusals measured and refuses
one pair that compiled ((4, 16) to (16, 4)); a reshape it lets through that the chip refuses
still takes the one-at-a-time path.

What the measurements show, for shapes whose last dimension (the lane dimension) is
- 1-d or (1, n) on both sides: compiles;
- a column (n, 1) as the source: compiles; as the result of a matrix: refused;
- a row (1-d or (1, n)) to or from a matrix: compiles only when the matrix's last dimension is a
  multiple of 128 (whole lane tiles);
- matrix to matrix: compiles when the last dimension is kept, when both last dimensions are
  multiples of 128, or when the leading dimension is kept; otherwise refused.
Narrower types pack several values a word (other tilings): not measured, so not refused here.
"""

from __future__ import annotations

from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op

LANES = 128


def _is_row(dims: tuple[int, ...]) -> bool:
    """At most one dimension over 1: a scalar, a 1-d array, (1, n) or (n, 1)."""
    return sum(1 for d in dims if d != 1) <= 1


def _is_column(dims: tuple[int, ...]) -> bool:
    return len(dims) == 2 and dims[1] == 1 and dims[0] != 1


def refused_on_chip(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """Whether a reshape of 32-bit values from `src` to `dst` is of a kind the chip's
    Mosaic refuses (see the module's docstring)."""
    if src == dst or (_is_row(src) and _is_row(dst)) or _is_column(src):
        return False
    if _is_row(dst):
        return _is_column(dst) or src[-1] % LANES != 0
    if _is_row(src):
        return dst[-1] % LANES != 0
    if src[-1] == dst[-1] or (src[-1] % LANES == 0 and dst[-1] % LANES == 0):
        return False
    return src[0] != dst[0]


def shape_cast_refusal(body: list[Instruction]) -> str | None:
    """Why a whole-array kernel of these instructions would be refused on the chip: its
    first reshape of a refused kind, named; None when there is none."""
    for inst in body:
        if inst.op not in (Op.RESHAPE, Op.BITCAST) or inst.shape.is_tuple:
            continue
        src, dst = inst.operands[0].shape, inst.shape
        if src.dtype.bits != 32 or dst.dtype.bits != 32:
            continue
        if refused_on_chip(src.dims, dst.dims):
            return (f"%{inst.name} ({inst.op.text} {src.text(False)} to {dst.text(False)}): "
                    "Mosaic's layout inference refuses this reshape in a kernel on the chip "
                    "(unsupported shape cast)")
    return None
