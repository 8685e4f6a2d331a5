"""The random-number library behind hlofuse's opaque custom call, in NumPy.

`custom-call(k0, k1, x0, x1), custom_call_target="hlofuse_threefry2x32"` takes four u32 arrays
of one shape (the key words broadcast to the counters' shape, as JAX's GPU Threefry kernel
takes them) and returns the tuple (y0, y1): Threefry-2x32 with 20 rounds of the counters
(x0, x1) under the key (k0, k1), the function jax.random builds on. The interpreter calls this
module; the compiled runtime implements the same convention in C.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import THREEFRY_TARGET as THREEFRY_TARGET  # the analyses read it there
from hlofuse.ir.ops import Op

ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
PARITY = 0x1BD11BDA  # Skein's key-schedule constant
_PARITY = np.uint32(PARITY)

Word = TypeVar("Word")


def _rotate_left(v: np.ndarray, r: int) -> np.ndarray:
    return (v << np.uint32(r)) | (v >> np.uint32(32 - r))


def threefry2x32(k0: np.ndarray, k1: np.ndarray, x0: np.ndarray,
                 x1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32 (20 rounds) of the counter pairs (x0, x1) under the key (k0, k1).

    Arguments broadcast against each other; arithmetic wraps modulo 2**32.
    """
    k0, k1, x0, x1 = (np.asarray(a, dtype=np.uint32) for a in (k0, k1, x0, x1))
    with np.errstate(over="ignore"):  # NumPy warns about wrapping in 0-d arithmetic only
        ks = (k0, k1, k0 ^ k1 ^ _PARITY)
        y0 = x0 + ks[0]
        y1 = x1 + ks[1]
        for block in range(5):
            for r in ROTATIONS[block % 2]:
                y0 = y0 + y1
                y1 = _rotate_left(y1, r) ^ y0
            y0 = y0 + ks[(block + 1) % 3]
            y1 = y1 + ks[(block + 2) % 3] + np.uint32(block + 1)
    shape = np.broadcast_shapes(k0.shape, k1.shape, x0.shape, x1.shape)
    return (np.broadcast_to(y0, shape).astype(np.uint32),
            np.broadcast_to(y1, shape).astype(np.uint32))


def threefry2x32_ops(binary: Callable[[Op, Word, Word], Word], constant: Callable[[int], Word],
                      keys: tuple[Word, Word, Word], x0: Word, x1: Word) -> tuple[Word, Word]:
    """Threefry-2x32 (20 rounds) as a sequence of u32 HLO operations, for any way of emitting them.

    `binary(op, a, b)` emits one element-wise op (add, xor, shifts, or); `constant(v)` gives the
    u32 value v in the counters' shape; `keys` is (k0, k1, k0 ^ k1 ^ PARITY) in that shape.
    The front end's traced Threefry and the rng-expansion pass both emit through this function,
    so they produce the same instructions in the same order; `threefry2x32` above is the
    independent NumPy reference they are tested against.
    """

    def rotate_left(v: Word, r: int) -> Word:
        left = binary(Op.SHIFT_LEFT, v, constant(r))
        right = binary(Op.SHIFT_RIGHT_LOGICAL, v, constant(32 - r))
        return binary(Op.OR, left, right)

    y0 = binary(Op.ADD, x0, keys[0])
    y1 = binary(Op.ADD, x1, keys[1])
    for block in range(5):
        for r in ROTATIONS[block % 2]:
            y0 = binary(Op.ADD, y0, y1)
            y1 = binary(Op.XOR, rotate_left(y1, r), y0)
        y0 = binary(Op.ADD, y0, keys[(block + 1) % 3])
        y1 = binary(Op.ADD, binary(Op.ADD, y1, keys[(block + 2) % 3]), constant(block + 1))
    return y0, y1


def threefry2x32_custom_call(instruction: Instruction,
                             operands: Sequence[object]) -> tuple[np.ndarray, np.ndarray]:
    """The interpreter's handler for target "hlofuse_threefry2x32"."""
    where = f"%{instruction.name} (custom-call hlofuse_threefry2x32)"
    if len(operands) != 4:
        raise ValueError(f"{where}: needs 4 operands (k0, k1, x0, x1), got {len(operands)}")
    arrays = []
    for i, operand in enumerate(operands):
        if not isinstance(operand, np.ndarray) or operand.dtype != np.uint32:
            raise ValueError(f"{where}: operand {i} must be a u32 array")
        arrays.append(operand)
    if len({a.shape for a in arrays}) != 1:
        raise ValueError(f"{where}: operands must have one shape, got "
                         f"{[list(a.shape) for a in arrays]}")
    return threefry2x32(*arrays)
