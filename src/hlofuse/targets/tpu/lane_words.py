"""32-bit words of the whole-loop kernel (whole_loop.py): booleans and 8- and 16-bit integers
travel and are held as int32 words (Mosaic keeps neither in tiles), converted at the kernel's
edges; read-only elements are read a scalar at a time from SMEM."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from jax import lax

from hlofuse.ir.dtypes import DType
from hlofuse.targets.tpu.lax_ops import Value


def in_word(dtype: DType) -> bool:
    return dtype is DType.PRED or (dtype.bits < 32 and not dtype.is_float)


def word(dtype: DType) -> np.dtype:
    return np.dtype(np.int32) if in_word(dtype) else np.dtype(dtype.numpy)


def to_word(value: Value, dtype: DType) -> Value:
    if in_word(dtype):
        return lax.convert_element_type(value, np.int32)
    return value


def from_word(value: Value, dtype: DType) -> Value:
    """A word of the kernel as its type: booleans from int32 outside and inside; 8- and
    16-bit integers stay int32 inside the kernel (lane_wide.py) and are narrowed outside."""
    if dtype is DType.PRED:
        return value != 0
    return value


def narrowed(value: Value, dtype: DType) -> Value:
    return lax.convert_element_type(value, np.dtype(dtype.numpy)) if in_word(dtype) and \
        dtype is not DType.PRED else value


def copy_tiles(source: Any, dest: Any) -> None:
    def copy(p: Value, carry: None) -> None:
        dest[p] = source[p]

    lax.fori_loop(0, source.shape[0], copy, None)


class ScalarReads(Sequence[Value]):
    """A read-only element's values, each read from its SMEM input when a position is used
    (a 64 x 64 layer's weights are not all loaded up front into the step's values)."""

    def __init__(self, ref: Any, dtype: DType) -> None:
        self.ref, self.dtype = ref, dtype

    def __len__(self) -> int:
        return int(self.ref.shape[0])

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, int):
            raise TypeError("read-only values are read one position at a time")
        return from_word(self.ref[index], self.dtype)
