"""`hlofuse.random`: counter-based random numbers, bit-for-bit those of jax.random.

Keys are uint32[2] arrays, as `jax.random.PRNGKey` makes them (`key` and `PRNGKey` are the
same here). Bits come from Threefry-2x32 applied to counters, following jax.random's default
("partitionable") Threefry scheme: the counters of an array of shape S are the pairs
(0, flat index); `bits` xors the two output words; `split` returns the two words as the new
keys; `fold_in(key, d)` is Threefry of the single pair (0, d).

Threefry itself comes in two implementations with identical bits:
- "fused": element-wise integer HLO (add, xor, shifts), which fusion can merge with its users;
- "custom_call": one opaque `custom-call` to "hlofuse_threefry2x32" (see reference/rnglib.py), the
  fusion barrier the study measured (XLA's GPU Threefry kernel).
Choose per call (`impl=`) or for everything traced later (`set_default_impl`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

import hlofuse.reference.rnglib as rnglib
from hlofuse.frontend import primitives as prim
from hlofuse.frontend.dtype_rules import to_dtype
from hlofuse.frontend.eager import eager
from hlofuse.frontend.shape_ops import _to_shape, broadcast_shapes
from hlofuse.frontend.tracer import Tracer, constant, to_tracer
from hlofuse.frontend.tracing import located, name_scope
from hlofuse.ir.dtypes import DType
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape

IMPLS = ("fused", "custom_call")

_default = {"impl": "fused"}


def _check_impl(impl: str) -> str:
    if impl not in IMPLS:
        raise ValueError(f"unknown random implementation {impl!r}; choose one of "
                         f"{', '.join(IMPLS)}")
    return impl


def set_default_impl(impl: str) -> None:
    """Make `impl` ("fused" or "custom_call") the Threefry implementation of later traces."""
    _default["impl"] = _check_impl(impl)


def get_default_impl() -> str:
    return _default["impl"]


@contextmanager
def default_impl(impl: str) -> Iterator[None]:
    """Use `impl` for random numbers traced inside the block."""
    previous = get_default_impl()
    set_default_impl(impl)
    try:
        yield
    finally:
        set_default_impl(previous)


# --- Threefry -------------------------------------------------------------------------------


def _u32(value: int, shape: tuple[int, ...]) -> Tracer:
    return prim.full(shape, value, DType.U32)


def _threefry_fused(k0: Tracer, k1: Tracer, x0: Tracer, x1: Tracer) -> tuple[Tracer, Tracer]:
    shape = x0.shape
    constants: dict[int, Tracer] = {}

    def u32(value: int) -> Tracer:  # each constant broadcast once per call
        if value not in constants:
            constants[value] = _u32(value, shape)
        return constants[value]

    # The key words are scalars here: the third is computed once, then all are broadcast.
    k2 = prim.binary(Op.XOR, prim.binary(Op.XOR, k0, k1), constant(rnglib.PARITY, DType.U32))
    k0b, k1b, k2b = (prim.broadcast_in_dim(k, shape, ()) for k in (k0, k1, k2))
    return rnglib.threefry2x32_ops(prim.binary, u32, (k0b, k1b, k2b), x0, x1)


def _threefry_custom_call(k0: Tracer, k1: Tracer, x0: Tracer,
                          x1: Tracer) -> tuple[Tracer, Tracer]:
    shape = x0.shape
    keys = [prim.broadcast_in_dim(k, shape, ()) for k in (k0, k1)]
    words = Shape.array(DType.U32, shape)
    pair = prim.custom_call(rnglib.THREEFRY_TARGET, [*keys, x0, x1], Shape.tuple_of([words, words]))
    return prim.get_tuple_element(pair, 0), prim.get_tuple_element(pair, 1)


@eager
def threefry2x32(k0: Any, k1: Any, x0: Any, x1: Any, *,
                 impl: str | None = None) -> tuple[Tracer, Tracer]:
    """Threefry-2x32 of the counters (x0, x1) under the key words (k0, k1), all uint32.

    The key words are scalars; x0 and x1 share a shape."""
    args = [to_tracer(a, f"threefry2x32 {n}") for a, n in zip((k0, k1, x0, x1),
                                                              ("k0", "k1", "x0", "x1"))]
    for a in args:
        if a.hlo_dtype is not DType.U32:
            raise TypeError(located(f"threefry2x32 needs uint32 operands, got {a.aval.text()}"))
    if args[0].shape or args[1].shape or args[2].shape != args[3].shape:
        raise ValueError(located("threefry2x32 needs scalar key words and counters of one "
                                 f"shape, got {[a.aval.text() for a in args]}"))
    which = _check_impl(impl or get_default_impl())
    with name_scope("threefry2x32"):
        if which == "custom_call":
            return _threefry_custom_call(*args)
        return _threefry_fused(*args)


def _key_words(key: Any, what: str) -> tuple[Tracer, Tracer]:
    k = to_tracer(key, f"{what} key")
    if k.shape != (2,) or k.hlo_dtype is not DType.U32:
        raise TypeError(located(f"{what} expects a key, a uint32[2] array from "
                                f"hlofuse.random.key, got {k.aval.text()}"))
    return prim.reshape(prim.slice_(k, [0], [1]), ()), prim.reshape(prim.slice_(k, [1], [2]), ())


def _counters(shape: tuple[int, ...]) -> tuple[Tracer, Tracer]:
    """(high, low) words of the flat index of each element: high is 0 below 2**32 elements."""
    size = int(np.prod(shape, dtype=np.int64))
    if size >= 2**32:
        raise ValueError(located(f"random arrays of {size} elements (2**32 or more) are not "
                                 "supported"))
    low = prim.reshape(prim.iota(DType.U32, (size,)), shape) if shape else constant(0, DType.U32)
    return _u32(0, shape), low


def _shape(shape: Any, what: str) -> tuple[int, ...]:
    dims = _to_shape(shape, what)
    if any(d < 0 for d in dims):
        raise ValueError(located(f"{what}: negative dimension in shape {shape!r}"))
    return dims


# --- keys -----------------------------------------------------------------------------------


def key(seed: Any, *, impl: str | None = None) -> Any:
    """A key from an integer seed: [0, seed mod 2**32], as jax.random with 64-bit types off.

    A Python or NumPy integer gives a NumPy array at once; a traced seed gives a traced key."""
    del impl  # keys are the same for both implementations
    if isinstance(seed, int | np.integer) and not isinstance(seed, bool):
        return np.array([0, int(seed) & 0xFFFFFFFF], dtype=np.uint32)
    s = to_tracer(seed, "key seed")
    if s.shape or not s.hlo_dtype.is_integer:
        raise TypeError(located(f"key seed must be an integer scalar, got {s.aval.text()}"))
    low = prim.convert(s, DType.U32)
    return prim.concatenate([prim.reshape(_u32(0, ()), (1,)), prim.reshape(low, (1,))], 0)


PRNGKey = key


@eager
def split(key: Any, num: Any = 2, *, impl: str | None = None) -> Tracer:
    """`num` new keys (an int or a shape), stacked along new leading axes."""
    shape = _shape(num, "split")
    k0, k1 = _key_words(key, "split")
    with name_scope("split"):
        high, low = _counters(shape)
        y0, y1 = threefry2x32(k0, k1, high, low, impl=impl)
        pair = [prim.reshape(y, (*shape, 1)) for y in (y0, y1)]
        return prim.concatenate(pair, len(shape))


@eager
def fold_in(key: Any, data: Any, *, impl: str | None = None) -> Tracer:
    """A new key from `key` and a 32-bit integer `data` (e.g. a step number)."""
    if isinstance(data, int | np.integer) and not isinstance(data, bool):
        if not 0 <= int(data) < 2**32:
            raise OverflowError(located(f"fold_in data {int(data)} does not fit in uint32"))
        d = constant(int(data), DType.U32)
    else:
        d = to_tracer(data, "fold_in data")
        if d.shape or not d.hlo_dtype.is_integer:
            raise TypeError(located(f"fold_in data must be an integer scalar, got "
                                    f"{d.aval.text()}"))
        d = prim.convert(d, DType.U32)
    k0, k1 = _key_words(key, "fold_in")
    with name_scope("fold_in"):
        y0, y1 = threefry2x32(k0, k1, _u32(0, ()), d, impl=impl)
        return prim.concatenate([prim.reshape(y0, (1,)), prim.reshape(y1, (1,))], 0)


# --- samplers -------------------------------------------------------------------------------


def _bits32(key: Any, shape: tuple[int, ...], impl: str | None, what: str) -> Tracer:
    k0, k1 = _key_words(key, what)
    high, low = _counters(shape)
    y0, y1 = threefry2x32(k0, k1, high, low, impl=impl)
    return prim.binary(Op.XOR, y0, y1)


@eager
def bits(key: Any, shape: Any = (), dtype: Any = None, *, impl: str | None = None) -> Tracer:
    """Uniform random unsigned integers (uint32 by default; uint8 and uint16 truncate)."""
    out_dtype = DType.U32 if dtype is None else to_dtype(dtype)
    if not out_dtype.is_unsigned_int:
        raise ValueError(located(f"bits: dtype must be unsigned, got {out_dtype.numpy}"))
    with name_scope("bits"):
        return prim.convert(_bits32(key, _shape(shape, "bits"), impl, "bits"), out_dtype)


_MANTISSA_BITS = {DType.F32: 23, DType.F16: 10, DType.BF16: 7}
_ONE_BITS = {DType.F32: 0x3F800000, DType.F16: 0x3C00, DType.BF16: 0x3F80}
_WORDS = {DType.F32: DType.U32, DType.F16: DType.U16, DType.BF16: DType.U16}


def _float_dtype(dtype: Any, what: str) -> DType:
    out = DType.F32 if dtype is None else to_dtype(dtype)
    if out not in _MANTISSA_BITS:
        raise ValueError(located(f"{what}: dtype must be float32, float16 or bfloat16, got "
                                 f"{out.numpy}"))
    return out


def _uniform(key: Any, shape: tuple[int, ...], dtype: DType, minval: Any, maxval: Any,
             impl: str | None) -> Tracer:
    """JAX's construction: random mantissa bits under the exponent of 1.0 give [1, 2); subtract
    1, scale and shift, and clamp below at minval against rounding."""
    word = _WORDS[dtype]
    width = 8 if dtype is DType.BF16 else word.bits  # JAX draws 8 bits for bfloat16
    raw = _bits32(key, shape, impl, "uniform")
    if width != 32:
        raw = prim.convert(prim.convert(raw, DType.U8 if width == 8 else DType.U16), word)
    shift = prim.full(shape, width - _MANTISSA_BITS[dtype], word)
    mantissa = prim.binary(Op.SHIFT_RIGHT_LOGICAL, raw, shift)
    one_bits = prim.binary(Op.OR, mantissa, prim.full(shape, _ONE_BITS[dtype], word))
    floats = prim.binary(Op.SUBTRACT, prim.bitcast_convert(one_bits, dtype),
                         prim.full(shape, 1, dtype))
    low = _scalar(minval, dtype, "minval")
    span = prim.binary(Op.SUBTRACT, _scalar(maxval, dtype, "maxval"), low)
    low = prim.broadcast_in_dim(low, shape, ())
    scaled = prim.binary(Op.ADD, prim.binary(
        Op.MULTIPLY, floats, prim.broadcast_in_dim(span, shape, ())), low)
    return prim.binary(Op.MAXIMUM, low, scaled)


def _scalar(value: Any, dtype: DType, what: str) -> Tracer:
    t = to_tracer(value, what)
    if t.shape:
        raise ValueError(located(f"{what} must be a scalar here, got {t.aval.text()}"))
    return prim.convert(t, dtype)


@eager
def uniform(key: Any, shape: Any = (), dtype: Any = None, minval: Any = 0.0, maxval: Any = 1.0,
            *, impl: str | None = None) -> Tracer:
    """Uniform floats in [minval, maxval)."""
    out_dtype = _float_dtype(dtype, "uniform")
    with name_scope("uniform"):
        return _uniform(key, _shape(shape, "uniform"), out_dtype, minval, maxval, impl)


@eager
def bernoulli(key: Any, p: Any = 0.5, shape: Any = None, *, impl: str | None = None) -> Tracer:
    """Booleans that are True with probability p: uniform(key, shape) < p."""
    prob = to_tracer(p, "bernoulli p")
    if not prob.hlo_dtype.is_float:
        raise TypeError(located(f"bernoulli p must be a float, got {prob.aval.text()}"))
    out_shape = prob.shape if shape is None else _shape(shape, "bernoulli")
    if shape is not None and broadcast_shapes([out_shape, prob.shape],
                                              "bernoulli") != out_shape:
        raise ValueError(located(f"bernoulli: p of shape {prob.shape} does not broadcast to "
                                 f"shape {out_shape}"))
    with name_scope("bernoulli"):
        u = _uniform(key, out_shape, _float_dtype(prob.dtype, "bernoulli"), 0.0, 1.0, impl)
        offset = len(out_shape) - prob.ndim
        p_full = prim.broadcast_in_dim(prim.convert(prob, u.hlo_dtype), out_shape,
                                       tuple(range(offset, len(out_shape))))
        return prim.compare(u, p_full, "LT")


@eager
def normal(key: Any, shape: Any = (), dtype: Any = None, *, impl: str | None = None) -> Tracer:
    """Standard normal floats: sqrt(2) * erfinv(u) for u uniform in (-1, 1), as jax.random."""
    out_dtype = _float_dtype(dtype, "normal")
    dims = _shape(shape, "normal")
    lowest = np.nextafter(np.array(-1.0, out_dtype.numpy), np.array(0.0, out_dtype.numpy))
    with name_scope("normal"):
        u = _uniform(key, dims, out_dtype, lowest, 1.0, impl)
        z = prim.erf_inv(prim.convert(u, DType.F32)) if out_dtype is not DType.F32 else \
            prim.erf_inv(u)
        z = prim.convert(z, out_dtype)
        return prim.binary(Op.MULTIPLY, prim.full(dims, np.sqrt(2), out_dtype), z)
