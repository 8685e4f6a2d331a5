"""How kernels lay their arrays out in blocks: the VMEM model that sizes a block, and the
values across the kernel boundary (booleans as int32, 8- and 16-bit integers as int32 words,
0-d values as (1, 1) arrays in SMEM, 1-d arrays as one row).

Shared by the per-step kernels (`kernels.py`), the tiled reductions (`reduce_tiled.py`) and
dynamic-update-slices in place (`update_in_place.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape
from hlofuse.reference.rnglib import THREEFRY_TARGET
from hlofuse.targets.tpu.lax_ops import ELEMENTWISE, Value, whole_block
from hlofuse.targets.tpu.words import narrowed

LANES = 128
BLOCK_ROWS = 4096  # the most rows of a tiled kernel's block: (4096, 128) f32 is 2 MiB
# What a tiled kernel's blocks may take of VMEM: its arrays' blocks double-buffered, plus one
# block-sized value per instruction of its body (an upper bound on what Mosaic keeps live),
# within the VMEM_LIMIT the kernels are compiled with. Larger blocks spend less of each grid
# step on the step's fixed cost; a long body gets fewer rows. Measured on the v5e
# (docs/tpu.md, kernel_costs.json): `v + y` over 64 M floats reached 75 % of HBM bandwidth
# with blocks of 1,728 rows (a 6 MiB budget), hand-written blocks of 4,096 rows 88 %.
BLOCK_VMEM_BYTES = 16 * 2**20
ROW_MULTIPLE = 32  # rows of a block: a whole number of (8, 128) f32, (16, 128) bf16 tiles
WHOLE_MAX_ELEMENTS = 65536  # 64 vector registers per operation on a dense whole array
# Vector registers (8 x 128 words) one value of a whole-array kernel may take, counted on
# its padded tiles: Mosaic unrolls every operation over the whole value, so a 1-d array of
# 65,536 (one row, 512 registers an eighth full) or a [65536, 1] column (8,192 registers, a
# lane each) makes a kernel far larger than its elements say. 128 keeps a 1-d array of
# 16,384 (the study's N) whole.
WHOLE_MAX_VREGS = 128
VMEM_LIMIT = 100 * 2**20  # v5e has 128 MiB; whole-array kernels may need most of it


def block_rows(rows: int, arrays: Sequence[Shape], instructions: int) -> int:
    """Rows per block of a tiled kernel over `rows` rows of 128 (see BLOCK_VMEM_BYTES)."""
    moved = sum(LANES * max(np.dtype(s.dtype.numpy).itemsize, 4) for s in arrays if s.rank)
    per_row = 2 * moved + instructions * LANES * 4
    fit = BLOCK_VMEM_BYTES // per_row // ROW_MULTIPLE * ROW_MULTIPLE
    return divided_block(rows, min(BLOCK_ROWS, max(fit, ROW_MULTIPLE)), ROW_MULTIPLE)


def divided_block(extent: int, limit: int, multiple: int) -> int:
    """A block's extent along an axis of `extent`: the whole axis within `limit`, else a
    multiple of `multiple` from `limit` down to half of it that divides the axis, else
    `limit` (the caller pads the axis to whole blocks). A partial last block reads and
    writes past the array's end: on the v5e a program with one (Threefry over 1,048,576
    lanes in blocks of 2,496 of its 8,192 rows) did not return, though the kernel alone did
    (docs/tpu.md, `benchmarks/tpu_hang.py`)."""
    if extent <= limit:
        return extent
    for candidate in range(limit, limit // 2 - 1, -multiple):
        if extent % candidate == 0:
            return candidate
    return limit


def vector_registers(shape: Shape) -> int:
    """The (8, 128) tiles a value takes in a whole-array kernel (its last two dimensions
    padded; the kernel keeps 32-bit words)."""
    dims = kernel_dims(shape)
    lead = int(np.prod(dims[:-2])) if len(dims) > 2 else 1
    return lead * -(-dims[-2] // 8) * -(-dims[-1] // LANES)


def kernel_dtype(dtype: DType) -> np.dtype:
    """How a value of `dtype` is held in a kernel: booleans and narrow integers as int32."""
    return np.dtype(np.int32) if dtype in _WORDS else np.dtype(dtype.numpy)


_WORDS = frozenset({DType.PRED, DType.S8, DType.U8, DType.S16, DType.U16})


def kernel_dims(shape: Shape) -> tuple[int, ...]:
    """A whole-array kernel's view of a value: 0-d as (1,) in SMEM, 1-d as one row (Mosaic
    tiles the last two dimensions), higher ranks as they are."""
    if shape.rank == 0:
        return (1, 1)
    return (1, shape.dims[0]) if shape.rank == 1 else shape.dims


def kernel_struct(shape: Shape) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(kernel_dims(shape), kernel_dtype(shape.dtype))


def to_kernel(x: Value) -> Value:
    x = jnp.asarray(x)
    if x.dtype == jnp.bool_ or (x.dtype.kind in "iu" and x.dtype.itemsize < 4):
        x = x.astype(jnp.int32)
    return x.reshape((1, 1)) if x.ndim == 0 else x


def from_kernel(x: Value, shape: Shape) -> Value:
    if shape.dtype is DType.PRED:
        x = x != 0
    return narrowed(x, shape.dtype).reshape(shape.dims)


def tiles_dims(size: int) -> tuple[int, int]:
    """The (rows, columns) layout of a flattened array: 128 lanes when they divide it."""
    return (size // LANES, LANES) if size % LANES == 0 else (1, size)


def tiles(x: Value) -> Value:
    return x.reshape(tiles_dims(x.size))


def whole_spec(shape: Shape) -> pl.BlockSpec:
    ndim = len(kernel_dims(shape))
    return whole_block(ndim, pltpu.SMEM if shape.rank == 0 else pltpu.VMEM)


def read(ref: Any, shape: Shape, whole: bool = True) -> Value:
    """A value from its ref: a block of a tiled kernel as it is; a whole 1-d array from its
    one row."""
    value = ref[0, 0] if shape.rank == 0 else ref[...]
    if whole and shape.rank == 1 and value.ndim == 2:
        value = value.reshape(shape.dims)
    return value != 0 if shape.dtype is DType.PRED else value


def write(ref: Any, value: Value) -> None:
    if value.dtype == jnp.bool_:
        value = value.astype(jnp.int32)
    if jnp.ndim(value) == 0:
        ref[0, 0] = value
    else:
        ref[...] = value.reshape(ref.shape)


@functools.cache
def kernel_name(label: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in label)


def is_blockwise(inst: Instruction, dims: tuple[int, ...]) -> bool:
    """Whether an instruction of a kernel over arrays of `dims` computes each block of its
    value from the same block of its operands: element-wise (bitcasts of one width), a 0-d
    constant or parameter, a broadcast of a 0-d value, Threefry, a tuple element, or a 1-d
    iota (the flattened position, known per block)."""
    op = inst.op
    if op is Op.PARAMETER:
        return True
    if inst.shape.is_array and inst.shape.dims not in (dims, ()):
        return False
    if op is Op.GET_TUPLE_ELEMENT:
        return True
    if op is Op.CONSTANT:
        return inst.shape.rank == 0
    if op is Op.BROADCAST:
        return inst.operands[0].shape.rank == 0
    if op is Op.BITCAST_CONVERT:
        return inst.dtype.itemsize == inst.operands[0].dtype.itemsize
    if op is Op.CUSTOM_CALL:
        return inst.attrs.get("custom_call_target") == THREEFRY_TARGET
    if op is Op.IOTA:
        return len(dims) == 1
    return op in ELEMENTWISE
