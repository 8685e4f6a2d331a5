"""Shapes of tuples and control flow: tuple, get-tuple-element, while, conditional, call
(and fusion), opt-barrier, and rng-bit-generator, which returns a (state, bits) tuple."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hlofuse.ir.dtypes import DType
from hlofuse.ir.shape_inference.checks import (
    Attrs,
    Calls,
    ShapeError,
    declared_shape,
    require,
    require_array,
)
from hlofuse.ir.shapes import Shape

if TYPE_CHECKING:
    from hlofuse.ir.hlo import Computation


def tuple_(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
           op: str = "tuple") -> Shape:
    return Shape.tuple_of(list(operands))


def get_tuple_element(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                      declared: Shape | None, op: str = "get-tuple-element") -> Shape:
    t = operands[0]
    if not t.is_tuple:
        raise ShapeError(f"get-tuple-element operand must be a tuple, got {t.text(False)}")
    index = attrs.get("index")
    assert isinstance(index, int)
    if not 0 <= index < len(t.elements):
        raise ShapeError(f"get-tuple-element index={index} out of range for {t.text(False)}")
    return t.elements[index]


def _signature(comp: Computation) -> tuple[list[Shape], Shape]:
    return [p.shape for p in comp.parameters], comp.root.shape


def while_(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
           op: str = "while") -> Shape:
    require(len(calls) == 2, "while needs condition= and body=")
    state = operands[0]
    cond_params, cond_root = _signature(calls[0])
    body_params, body_root = _signature(calls[1])
    if cond_params != [state]:
        raise ShapeError(f"while condition %{calls[0].name} must take {state.text(False)}")
    if cond_root != Shape.scalar(DType.PRED):
        raise ShapeError(f"while condition %{calls[0].name} must return pred[]")
    if not (body_params == [state] and body_root == state):
        raise ShapeError(f"while body %{calls[1].name} must map {state.text(False)} to itself")
    return state


def conditional(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
                op: str = "conditional") -> Shape:
    selector = operands[0]
    if not (selector.is_array and selector.is_scalar
            and selector.dtype in (DType.PRED, DType.S32)):
        raise ShapeError("conditional selector must be pred[] or s32[], got "
                         f"{selector.text(False)}")
    if not (len(calls) >= 1 and len(operands) == len(calls) + 1):
        raise ShapeError(f"conditional has {len(calls)} branches and {len(operands) - 1} branch "
                         "operands")
    if selector.dtype is DType.PRED:
        require(len(calls) == 2, "a pred conditional needs exactly two branches")
    result = calls[0].root.shape
    for comp, arg in zip(calls, operands[1:]):
        params, root = _signature(comp)
        if params != [arg]:
            raise ShapeError(f"conditional branch %{comp.name} must take {arg.text(False)}")
        if root != result:
            raise ShapeError(f"conditional branches return different shapes: "
                             f"{result.text(False)} and {root.text(False)}")
    return result


def call(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
         op: str = "call") -> Shape:
    if len(calls) != 1:
        raise ShapeError(f"{op} needs exactly one called computation")
    params, root = _signature(calls[0])
    if params != list(operands):
        raise ShapeError(f"{op} passes ({', '.join(s.text(False) for s in operands)}) to "
                         f"%{calls[0].name} "
                         f"which takes ({', '.join(s.text(False) for s in params)})")
    return root


def rng_bit_generator(operands: Sequence[Shape], attrs: Attrs, calls: Calls,
                      declared: Shape | None, op: str = "rng-bit-generator") -> Shape:
    state = require_array(operands[0], "rng-bit-generator state")
    out = declared_shape(declared, op)
    if not (out.is_tuple and len(out.elements) == 2 and out.elements[0] == state):
        raise ShapeError(f"rng-bit-generator must return (state, bits), got {out.text(False)}")
    if not (state.dtype is DType.U64 and state.rank == 1):
        raise ShapeError(f"rng-bit-generator state must be u64[n], got {state.text(False)}")
    bits = out.elements[1]
    require(bits.is_array and bits.dtype.is_unsigned_int or bits.dtype.is_signed_int,
            "rng-bit-generator bits must be integers")
    return out


def opt_barrier(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
                op: str = "opt-barrier") -> Shape:
    return operands[0]
