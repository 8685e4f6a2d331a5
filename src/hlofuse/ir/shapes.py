"""Array and tuple shapes, with XLA's default (major-to-minor) layout."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hlofuse.ir.dtypes import DType

# Buffers larger than this are refused before anything is allocated.
DEFAULT_MAX_BUFFER_BYTES = 4 * 1024**3


@dataclass(frozen=True, slots=True)
class Shape:
    """An array shape (dtype + dims) or a tuple shape (DType.TUPLE + elements)."""

    dtype: DType
    dims: tuple[int, ...] = ()
    elements: tuple[Shape, ...] = ()
    # minor_to_major as printed; None is the default major-to-minor layout. Layouts are physical
    # only: HLO semantics are logical, so shapes compare equal whatever their layouts.
    layout: tuple[int, ...] | None = field(default=None, compare=False)

    @staticmethod
    def array(dtype: DType, dims: tuple[int, ...] | list[int] = ()) -> Shape:
        return Shape(dtype, tuple(int(d) for d in dims))

    @staticmethod
    def scalar(dtype: DType) -> Shape:
        return Shape(dtype, ())

    @staticmethod
    def tuple_of(elements: tuple[Shape, ...] | list[Shape]) -> Shape:
        return Shape(DType.TUPLE, (), tuple(elements))

    @staticmethod
    def token() -> Shape:
        return Shape(DType.TOKEN)

    @property
    def is_tuple(self) -> bool:
        return self.dtype is DType.TUPLE

    @property
    def is_array(self) -> bool:
        return self.dtype.is_array

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def is_scalar(self) -> bool:
        return self.is_array and not self.dims

    @property
    def num_elements(self) -> int:
        return math.prod(self.dims)

    @property
    def byte_size(self) -> int:
        """Bytes of this array, or of all leaves of a tuple."""
        if self.is_tuple:
            return sum(e.byte_size for e in self.elements)
        if not self.is_array:
            return 0
        return self.num_elements * self.dtype.itemsize

    def with_dtype(self, dtype: DType) -> Shape:
        return Shape(dtype, self.dims, (), self.layout)

    def with_dims(self, dims: tuple[int, ...]) -> Shape:
        return Shape(self.dtype, tuple(dims))

    def leaves(self) -> list[Shape]:
        if not self.is_tuple:
            return [self]
        out: list[Shape] = []
        for e in self.elements:
            out.extend(e.leaves())
        return out

    def text(self, with_layout: bool = True) -> str:
        """XLA's spelling: f32[2,3]{1,0}, (f32[], s32[4]{0}), token[]."""
        if self.is_tuple:
            return "(" + ", ".join(e.text(with_layout) for e in self.elements) + ")"
        if self.dtype is DType.TOKEN:
            return "token[]"
        body = f"{self.dtype.text}[{','.join(str(d) for d in self.dims)}]"
        if with_layout and self.dims:
            layout = self.layout if self.layout is not None else default_layout(len(self.dims))
            body += "{" + ",".join(str(i) for i in layout) + "}"
        return body

    def __str__(self) -> str:
        return self.text()


def default_layout(rank: int) -> tuple[int, ...]:
    """Major-to-minor layout: minor_to_major = (rank-1, ..., 0)."""
    return tuple(range(rank - 1, -1, -1))


def broadcast_shapes(*dims_list: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy broadcasting of several dim tuples; raises ValueError naming them."""
    rank = max((len(d) for d in dims_list), default=0)
    out: list[int] = []
    for axis in range(rank):
        size = 1
        for dims in dims_list:
            pos = axis - (rank - len(dims))
            if pos < 0:
                continue
            d = dims[pos]
            if d == 1 or d == size:
                continue
            if size != 1:
                shapes = ", ".join(str(list(x)) for x in dims_list)
                raise ValueError(f"shapes {shapes} cannot be broadcast together")
            size = d
        out.append(size)
    return tuple(out)
