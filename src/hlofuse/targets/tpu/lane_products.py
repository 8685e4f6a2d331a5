"""Lane-uniform products of a whole-loop kernel on the TPU's MXU.

A dot in a whole-loop kernel's step whose one operand is the same for every lane and step
(a policy's weights: a loop element passed on unchanged, `LaneLayout.fixed_elements`, or a
constant a jitted function closed over) and whose other operand is per-lane is, per lane, a
small matrix-vector product. Written out (lane_ops.py) each of its M outputs is a chain of
K scalar-times-tile multiply-adds on the vector unit, the weights read one scalar at a time
from SMEM. On the MXU instead:

- the K tiles of the contracted positions (each (rows, 128), one value per lane) are
  stacked into a (K, rows, 128) value;
- per row r of the tile, the (K, 128) slice is multiplied by the weights held in VMEM as
  an (M, K) matrix (`lax.dot_general` at `Precision.HIGHEST`: f32 products in several bf16
  passes, within the interpreter's rtol; JAX's own default is one bf16 pass);
- the (M, 128) results are stacked back into (M, rows, 128): output position j is tile j.

Of the layouts tried on the v5e (`benchmarks/tpu_mxu_forms.py`, docs/tpu.md) this one,
with no scratch, was the fastest: per-row operands through strided loads from a VMEM
scratch, one (K, rows x 128) operand, and block-diagonal copies of W filling the MXU's
128 x 128 were as fast or slower, and the lanes as the streamed rows (W^T stationary)
slower still. Its cost is about a fixed amount per tile moved in or out (K + M) while the
written-out form's is one multiply-add per weight and tile (K x M); on the v5e one tile
moved cost about MOVE_COST multiply-adds, so small products (a first layer from a few
observations, a last layer to a few actions) stay on the vector unit (the choice:
product_plan.py, which `hlofuse explain` reads without JAX).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from hlofuse.ir.hlo import Instruction
from hlofuse.targets.tpu.lane_values import (
    LaneValues,
    Position,
    flat_position,
    is_static,
)
from hlofuse.targets.tpu.lax_ops import Value


def matrix(x: Value, order: Sequence[int], m: int, k: int) -> Value:
    """Outside the kernel: a fixed element as the (M, K) matrix a product multiplies."""
    return jnp.transpose(jnp.asarray(x, jnp.float32), tuple(order)).reshape(m, k)


def mxu_dot(values: LaneValues, inst: Instruction, position: Position, weights: Any
            ) -> Value | None:
    """The dot at a position from the MXU form, or None where the position reads the
    per-lane operand at no per-lane index (its values are then scalars: written out)."""
    product = values.products[id(inst)]
    lhs_c, rhs_c = inst.ints("lhs_contracting_dims"), inst.ints("rhs_contracting_dims")
    lanes_operand = inst.operands[1 - product.side]
    uniform = inst.operands[product.side]
    lane_contracted = rhs_c if product.side == 0 else lhs_c
    lane_free = [d for d in range(lanes_operand.shape.rank) if d not in lane_contracted]
    uniform_free = product.order[:len(product.order) - len(lane_contracted)]
    if product.side == 1:
        lane_at, uniform_at = position[:len(lane_free)], position[len(lane_free):]
    else:
        uniform_at, lane_at = position[:len(uniform_free)], position[len(uniform_free):]
    if all(is_static(i) for i in lane_at) or not all(is_static(i) for i in uniform_at):
        return None
    contracted = [lanes_operand.shape.dims[d] for d in lane_contracted]

    def compute() -> list[Value]:
        tiles = []
        for choice in itertools.product(*(range(n) for n in contracted)):
            at: list[Any] = [0] * lanes_operand.shape.rank
            for d, i in zip(lane_free, lane_at):
                at[d] = i
            for d, c in zip(lane_contracted, choice):
                at[d] = c
            tile = lax.convert_element_type(values.value(lanes_operand, tuple(at)),
                                            np.float32)
            tiles.append(jnp.broadcast_to(tile, values.lanes.shape))
        return products_on_mxu(tiles, weights())

    outputs = values.cached(("mxu", id(inst)), tuple(lane_at), compute)
    return outputs[flat_position([int(i) for i in uniform_at],
                                 [uniform.shape.dims[d] for d in uniform_free])]


def products_on_mxu(tiles: Sequence[Value], w: Value) -> list[Value]:
    """The M output tiles of W (M, K) times the K tiles of each lane: per row of the tile,
    an (M, K) x (K, 128) product on the MXU in exact f32."""
    x3 = jnp.stack(list(tiles))  # (K, rows, 128)
    rows = x3.shape[1]
    ys = [lax.dot_general(w, x3[:, r, :], (((1,), (0,)), ((), ())),
                          precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32)
          for r in range(rows)]
    y3 = jnp.stack(ys, axis=1)  # (M, rows, 128)
    return [y3[j] for j in range(y3.shape[0])]
