"""8- and 16-bit integers of the per-step kernels (tiled, whole-array and XLA operations)
computed in int32 words, as the whole-loop kernel computes them (lane_wide.py).

Mosaic keeps no 8- or 16-bit values in a kernel, and on the v5e XLA's own s8 scatter
(grid_forage's board reset, `walls.at[pos].set(0)` under `vmap`) left a wall in 21 of
102,400 cells where HLO's scatter clears it (docs/tpu.md, "which side departs"). So a
kernel with such values takes them as int32 words (widened at its edge: sign-extended for
signed types, zero-extended for unsigned), computes every instruction on words, wraps each
result back into its type's range where the operation can leave it (sums, products, shifts,
conversions), and narrows its outputs at its edge. Whether the kernel is then a Pallas
kernel or an XLA operation, the values it computes are int32; only the edges convert.

An instruction with no word form (a bitcast to or from another type, one evaluated on the
host) computes on its operands narrowed to their own type and its result widened again; in a
Pallas kernel that is refused (`native_refusal`), so such a kernel is an XLA operation.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape
from hlofuse.targets.tpu.evaluate import LaxEvaluator
from hlofuse.targets.tpu.lane_wide import wrapped
from hlofuse.targets.tpu.lax_ops import (
    ELEMENTWISE,
    Value,
    dot,
    elementwise,
    reduce,
    runs_on_host,
    scatter_form,
)

NARROW = frozenset({DType.S8, DType.U8, DType.S16, DType.U16})
_SIGNED_OF: dict[DType, np.dtype] = {DType.U8: np.dtype(np.int8), DType.U16: np.dtype(np.int16),
              DType.S8: np.dtype(np.int8), DType.S16: np.dtype(np.int16)}
# Moves and selections: a word in, the same word out (no wrap needed).
_MOVES = frozenset({
    Op.BROADCAST, Op.RESHAPE, Op.COPY, Op.OPT_BARRIER, Op.TRANSPOSE, Op.SLICE,
    Op.CONCATENATE, Op.PAD, Op.REVERSE, Op.DYNAMIC_SLICE, Op.DYNAMIC_UPDATE_SLICE,
    Op.GATHER, Op.TUPLE, Op.GET_TUPLE_ELEMENT, Op.SELECT, Op.CLAMP, Op.MAXIMUM, Op.MINIMUM})
# Evaluated by the evaluator itself, their bodies in words.
_CONTROL = frozenset({Op.CALL, Op.FUSION, Op.WHILE, Op.CONDITIONAL})


def is_narrow(dtype: DType) -> bool:
    return dtype in NARROW


def has_narrow(shape: Shape) -> bool:
    return any(is_narrow(leaf.dtype) for leaf in shape.leaves())


def touches_narrow(inst: Instruction) -> bool:
    """Whether the instruction computes or reads an 8- or 16-bit integer."""
    return has_narrow(inst.shape) or any(has_narrow(o.shape) for o in inst.operands)


def widen(x: Value, dtype: DType) -> Value:
    """A value of `dtype` as the kernel holds it: narrow integers as int32 words."""
    return lax.convert_element_type(x, np.int32) if is_narrow(dtype) else x


def narrowed(x: Value, dtype: DType) -> Value:
    """A word back in its own type (exact: words are kept in the type's range)."""
    return lax.convert_element_type(x, np.dtype(dtype.numpy)) if is_narrow(dtype) else x


def _wrap(x: Value, dtype: DType) -> Value:
    return wrapped(x, np.dtype(dtype.numpy)) if is_narrow(dtype) else x


def _low_bits(x: Value, dtype: DType) -> Value:
    """The type's own bits of a word, zero-extended (what a logical shift or a bit count
    sees)."""
    return lax.bitwise_and(x, np.int32((1 << dtype.bits) - 1))


def _retyped(value: Value, shape: Shape, convert: Any) -> Value:
    """`convert(leaf, dtype)` applied to each array leaf of a (tuple-shaped) value."""
    if shape.is_tuple:
        return tuple(_retyped(v, s, convert) for v, s in zip(value, shape.elements))
    return convert(value, shape.dtype) if shape.is_array else value


def native_refusal(inst: Instruction) -> str | None:
    """Why an instruction's narrow values cannot stay int32 words in a Pallas kernel (its
    word form computes on the narrow type itself), or None."""
    if touches_narrow(inst) and _needs_native(inst):
        return (f"{inst.dtype.text if inst.shape.is_array else 'tuple'} result from narrow "
                "integers has no int32-word form (Mosaic keeps no 8- or 16-bit values)")
    return None


def _needs_native(inst: Instruction) -> bool:
    op = inst.op
    if op is Op.BITCAST_CONVERT:
        return not (is_narrow(inst.dtype) and is_narrow(inst.operands[0].dtype))
    if op is Op.BITCAST:
        return inst.dtype is not inst.operands[0].dtype
    if op in ELEMENTWISE or op in _MOVES or op in _CONTROL:
        return False
    if op in (Op.PARAMETER, Op.CONSTANT, Op.IOTA, Op.REDUCE, Op.DOT):
        return False
    return scatter_form(inst) is None or runs_on_host(inst)


class WordEvaluator(LaxEvaluator):
    """`LaxEvaluator` with 8- and 16-bit integers held as int32 words (module docstring):
    its arguments and results are words where the computation's types are narrow."""

    def instruction(self, inst: Instruction, ops: list[Value]) -> Value:
        if inst.op in _CONTROL or not touches_narrow(inst):
            return super().instruction(inst, ops)
        if _needs_native(inst):
            native = [_retyped(v, o.shape, narrowed) for v, o in zip(ops, inst.operands)]
            return _retyped(super().instruction(inst, native), inst.shape, widen)
        op = inst.op
        dtype = inst.dtype if inst.shape.is_array else None
        if op is Op.CONSTANT:
            if id(inst) in self.constants:
                return self.constants[id(inst)]
            literal = inst.attrs["literal"]
            return jnp.asarray(np.asarray(literal, inst.dtype.numpy).astype(np.int32))
        if op is Op.IOTA:
            return _wrap(self._word_iota(inst), inst.dtype)
        if op is Op.BITCAST:  # the same narrow type: the words reshaped
            return jnp.reshape(ops[0], self.shape(inst))
        if op is Op.COMPARE:  # words order as their type does (the compare's type is it)
            return elementwise(inst, ops)
        if op is Op.CONVERT:
            return _convert(inst, ops[0])
        if op is Op.BITCAST_CONVERT:  # between the two narrow types of one width
            return _wrap(ops[0], inst.dtype)
        if op in _MOVES:
            return super().instruction(inst, ops)
        if op is Op.DOT and dtype is not None and is_narrow(dtype):
            return _wrap(dot(inst, ops[0], ops[1], np.dtype(np.int32)), dtype)
        if op is Op.REDUCE:
            return _retyped(reduce(inst, ops, self.run), inst.shape, _wrap)
        if op in ELEMENTWISE and dtype is not None and is_narrow(dtype):
            return _wrap(_elementwise(inst, ops, dtype), dtype)
        return _retyped(super().instruction(inst, ops), inst.shape, _wrap)

    def _word_iota(self, inst: Instruction) -> Value:
        dim = inst.attrs["iota_dimension"]
        assert isinstance(dim, int)
        if self.block_start is not None and self.block_shape is not None:
            rows, lanes = self.block_shape
            return lax.broadcasted_iota(np.int32, (rows, lanes), 0) * np.int32(lanes) + \
                lax.broadcasted_iota(np.int32, (rows, lanes), 1) + self.block_start
        return lax.broadcasted_iota(np.int32, self.shape(inst), dim)


def _elementwise(inst: Instruction, ops: list[Value], dtype: DType) -> Value:
    """An element-wise op with a narrow result on words, before the wrap: the ops that see
    the type's bits (logical shifts, bit counts, arithmetic shifts of unsigned types) get
    them first."""
    op = inst.op
    if op is Op.SHIFT_RIGHT_LOGICAL or op is Op.POPCNT:
        return elementwise(inst, [_low_bits(ops[0], dtype), *ops[1:]])
    if op is Op.SHIFT_RIGHT_ARITHMETIC:
        return elementwise(inst, [wrapped(ops[0], _SIGNED_OF[dtype]), *ops[1:]])
    if op is Op.CLZ:
        return lax.clz(_low_bits(ops[0], dtype)) - np.int32(32 - dtype.bits)
    return elementwise(inst, ops)


def _convert(inst: Instruction, x: Value) -> Value:
    """XLA's convert with narrow words on either side: to a narrow type from a float
    saturates into the type's range (NaN gives 0), from an integer wraps."""
    target, source = inst.dtype, inst.operands[0].dtype
    if not is_narrow(target):  # a word holds the value exactly
        return elementwise(inst, [x])
    if source.is_float:
        info = np.iinfo(np.dtype(target.numpy))
        f = lax.convert_element_type(x, np.float32)
        inside = lax.min(lax.max(f, np.float32(info.min)), np.float32(info.max))
        inside = lax.select(lax.ne(f, f), jnp.zeros_like(inside), inside)  # NaN
        return lax.convert_element_type(inside, np.int32)
    if source.bits == 32:  # u32 keeps its bits
        return _wrap(lax.bitcast_convert_type(x, np.int32), target)
    return _wrap(lax.convert_element_type(x, np.int32), target)
