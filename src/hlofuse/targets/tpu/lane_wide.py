"""64-, 16- and 8-bit integers in a whole-loop kernel's step, computed in 32-bit words.

8- and 16-bit integers (a grid world's board) are held in int32 and wrapped into their range
after every operation that computes them, which is how the narrow type wraps.

Mosaic keeps no 64-bit values, yet JAX's random bits index their counters with a u64 iota
(`iota_2x32_shape`: the linear position, then its high and low words). Such values are
positions: an iota, constants, sums and products of them, shifts and masks. When every
64-bit value of the loop is one of those and is bounded below 2^31 (checked here from the
shapes and constants, before the kernel is built), each is computed in 32 bits: its high
word is zero, a right shift by 32 or more gives 0, and a convert to 32 bits keeps it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from jax import lax

from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op
from hlofuse.targets.tpu.lax_ops import Value

_LIMIT = 2**31
_MOVES = frozenset({Op.BROADCAST, Op.RESHAPE, Op.SLICE, Op.CONCATENATE, Op.TRANSPOSE,
                    Op.COPY, Op.REVERSE})


def is_wide(inst: Instruction) -> bool:
    return inst.shape.is_array and inst.dtype.bits > 32 and not inst.dtype.is_float


def is_small_int(inst: Instruction) -> bool:
    """8- and 16-bit integers: computed in int32 and wrapped into their range (Mosaic's
    vector unit works on 32-bit words)."""
    return inst.shape.is_array and inst.dtype.bits in (8, 16) and \
        inst.dtype.numpy.kind in "iu"


def wrapped(x: Value, dtype: np.dtype) -> Value:
    """An int32 value brought into an 8- or 16-bit type's range, as that type wraps:
    sign-extended from its low bits (signed) or masked (unsigned)."""
    bits = dtype.itemsize * 8
    x = lax.convert_element_type(x, np.int32)
    if dtype.kind == "u":
        return lax.bitwise_and(x, np.int32((1 << bits) - 1))
    shift = np.int32(32 - bits)
    return lax.shift_right_arithmetic(lax.shift_left(x, shift), shift)


def narrow_dtype(inst: Instruction) -> np.dtype:
    """The 32-bit type a wide integer is computed in."""
    return np.dtype(np.uint32) if inst.dtype.numpy.kind == "u" else np.dtype(np.int32)


def wide_refusal(instructions: Sequence[Instruction]) -> str | None:
    """Why the 64-bit values among `instructions` cannot be computed in 32 bits, or None."""
    bounds: dict[int, int] = {}

    def bound(inst: Instruction) -> int | None:
        if id(inst) in bounds:
            return bounds[id(inst)]
        found = _bound(inst, bound)
        if found is not None:
            bounds[id(inst)] = found
        return found

    for inst in instructions:
        if not is_wide(inst):
            continue
        found = bound(inst)
        if found is None or found >= _LIMIT:
            return (f"%{inst.name} ({inst.op.text}) is {inst.dtype.text}: Mosaic keeps no "
                    "64-bit values, and it is not a position below 2^31 computed in 32 bits")
    return None


def _bound(inst: Instruction, bound: object) -> int | None:
    """The largest value a wide position value takes (None: not one)."""
    assert callable(bound)
    op = inst.op
    if op is Op.IOTA:
        dim = inst.attrs["iota_dimension"]
        assert isinstance(dim, int)
        return inst.shape.dims[dim] - 1
    if op is Op.CONSTANT:
        literal = np.asarray(inst.attrs["literal"])
        if literal.size == 0:
            return 0
        low, high = int(literal.min()), int(literal.max())
        return high if low >= 0 else None
    if op is Op.CONVERT:
        source = inst.operands[0].dtype
        if source.bits > 32 or source.is_float or source.numpy.kind == "i":
            return None
        return 2**source.bits - 1
    operands = [bound(o) for o in inst.operands]
    if op in _MOVES:
        return operands[0]
    if any(b is None for b in operands):
        return None
    values = [int(b) for b in operands if b is not None]
    if op is Op.ADD:
        return sum(values)
    if op is Op.MULTIPLY:
        return values[0] * values[1]
    if op is Op.SHIFT_RIGHT_LOGICAL:
        return values[0]
    if op in (Op.AND, Op.OR, Op.XOR):
        return (1 << max(values).bit_length()) - 1
    return None
