"""A computation evaluated with `lax` on JAX values: the body of every TPU kernel and of the
program around them.

Control flow becomes JAX's: a `while` with a known trip count a `lax.fori_loop` (its condition
never runs, as the CPU driver skips it), any other `while` a `lax.while_loop`, a
`conditional` a `lax.switch` (an out-of-range index runs the last branch, as in XLA). Inside a
Pallas kernel these lower to Mosaic's `scf` loops and branches; outside one they are XLA's.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jax import lax

from hlofuse.analysis.loop_config import known_trip_count
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op
from hlofuse.targets.tpu.lax_ops import Value, evaluate_op


class LaxEvaluator:
    """Evaluates computations on JAX values.

    `block_shape`: in an element-wise tiled kernel, the (rows, 128) block every array value
    of the computation has (0-d values stay 0-d). `constants`: array constants read from the
    kernel's inputs (a Pallas kernel may not capture an array), by instruction id.
    """

    def __init__(self, block_shape: tuple[int, ...] | None = None,
                 constants: dict[int, Value] | None = None,
                 block_start: Value | None = None) -> None:
        self.block_shape = block_shape
        self.constants = constants or {}
        # In a tiled kernel: the flattened index of the block's first element (a 1-d iota's
        # values are the flattened positions).
        self.block_start = block_start

    def run(self, comp: Computation, arguments: Sequence[Value]) -> Value:
        env: dict[int, Value] = {}
        for inst in comp.instructions:
            if inst.op is Op.PARAMETER:
                env[id(inst)] = arguments[inst.parameter_number]
            else:
                env[id(inst)] = self.instruction(inst, [env[id(o)] for o in inst.operands])
        return env[id(comp.root)]

    def shape(self, inst: Instruction) -> tuple[int, ...]:
        if self.block_shape is not None and inst.shape.rank > 0:
            return self.block_shape
        return inst.shape.dims

    def instruction(self, inst: Instruction, ops: list[Value]) -> Value:
        op = inst.op
        if op is Op.CONSTANT and id(inst) in self.constants:
            return self.constants[id(inst)]
        if op is Op.IOTA and self.block_start is not None and self.block_shape is not None:
            rows, lanes = self.block_shape
            flat = lax.broadcasted_iota(np.int32, (rows, lanes), 0) * np.int32(lanes) + \
                lax.broadcasted_iota(np.int32, (rows, lanes), 1) + self.block_start
            return lax.convert_element_type(flat, np.dtype(inst.dtype.numpy))
        if op in (Op.CALL, Op.FUSION):
            return self.run(inst.calls[0], ops)
        if op is Op.WHILE:
            return self.while_loop(inst, ops[0])
        if op is Op.CONDITIONAL:
            return self.conditional(inst, ops)
        return evaluate_op(inst, ops, self.shape(inst), self.run)

    def while_loop(self, inst: Instruction, init: Value) -> Value:
        condition, body = inst.calls
        trips = known_trip_count(inst)
        if trips is not None:
            return lax.fori_loop(0, trips, lambda _, state: self.run(body, [state]), init)
        return lax.while_loop(lambda state: jnp.reshape(self.run(condition, [state]), ()),
                              lambda state: self.run(body, [state]), init)

    def conditional(self, inst: Instruction, ops: list[Value]) -> Value:
        selector = jnp.reshape(ops[0], ())
        count = len(inst.calls)
        if selector.dtype == jnp.bool_:
            index = lax.select(selector, np.int32(0), np.int32(1))
        else:
            index = lax.convert_element_type(selector, np.int32)
            outside = (index < 0) | (index >= count)
            index = lax.select(outside, np.int32(count - 1), index)
        arguments = tuple(ops[1:])
        branches = [lambda args, k=k: self.run(inst.calls[k], [args[k]]) for k in range(count)]
        return lax.switch(index, branches, arguments)
