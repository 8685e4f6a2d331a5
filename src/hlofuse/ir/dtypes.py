"""Element types of HLO arrays, their NumPy equivalents and bit widths."""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np


class DType(enum.Enum):
    """An HLO primitive type; the value is XLA's text spelling."""

    # Members are singletons compared by identity: hash them so too, in C (Enum's __hash__
    # hashes the name in Python, and dtypes are dict keys on hot paths).
    __hash__ = object.__hash__

    PRED = "pred"
    S8 = "s8"
    S16 = "s16"
    S32 = "s32"
    S64 = "s64"
    U8 = "u8"
    U16 = "u16"
    U32 = "u32"
    U64 = "u64"
    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"
    TUPLE = "tuple"
    TOKEN = "token"

    @property
    def text(self) -> str:
        return self._value_  # not `.value`: Enum's descriptor costs more, on a very hot path

    @property
    def is_array(self) -> bool:
        return self not in (DType.TUPLE, DType.TOKEN)

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_signed_int(self) -> bool:
        return self in _SIGNED

    @property
    def is_unsigned_int(self) -> bool:
        return self in _UNSIGNED

    @property
    def is_integer(self) -> bool:
        return self in _SIGNED or self in _UNSIGNED

    @property
    def is_pred(self) -> bool:
        return self is DType.PRED

    @property
    def bits(self) -> int:
        return _BITS[self]

    @property
    def itemsize(self) -> int:
        return max(1, _BITS[self] // 8)

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype that holds values of this type exactly."""
        if not self.is_array:
            raise TypeError(f"{self.text} has no NumPy equivalent")
        return _NUMPY[self]

    @staticmethod
    def from_text(text: str) -> DType:
        try:
            return DType(text)
        except ValueError:
            raise ValueError(f"unknown element type '{text}'") from None

    @staticmethod
    def from_numpy(dtype: object) -> DType:
        np_dtype = np.dtype(dtype)  # type: ignore[call-overload]
        for dt, candidate in _NUMPY.items():
            if candidate == np_dtype:
                return dt
        raise TypeError(f"NumPy dtype {np_dtype} has no HLO element type")


_FLOATS = frozenset({DType.F16, DType.BF16, DType.F32, DType.F64})
_SIGNED = frozenset({DType.S8, DType.S16, DType.S32, DType.S64})
_UNSIGNED = frozenset({DType.U8, DType.U16, DType.U32, DType.U64})

_BITS: dict[DType, int] = {
    DType.PRED: 8,
    DType.S8: 8,
    DType.S16: 16,
    DType.S32: 32,
    DType.S64: 64,
    DType.U8: 8,
    DType.U16: 16,
    DType.U32: 32,
    DType.U64: 64,
    DType.F16: 16,
    DType.BF16: 16,
    DType.F32: 32,
    DType.F64: 64,
    DType.TUPLE: 0,
    DType.TOKEN: 0,
}

_NUMPY: dict[DType, np.dtype] = {
    DType.PRED: np.dtype(np.bool_),
    DType.S8: np.dtype(np.int8),
    DType.S16: np.dtype(np.int16),
    DType.S32: np.dtype(np.int32),
    DType.S64: np.dtype(np.int64),
    DType.U8: np.dtype(np.uint8),
    DType.U16: np.dtype(np.uint16),
    DType.U32: np.dtype(np.uint32),
    DType.U64: np.dtype(np.uint64),
    DType.F16: np.dtype(np.float16),
    DType.BF16: np.dtype(ml_dtypes.bfloat16),
    DType.F32: np.dtype(np.float32),
    DType.F64: np.dtype(np.float64),
}

ARRAY_DTYPES: tuple[DType, ...] = tuple(_NUMPY)
