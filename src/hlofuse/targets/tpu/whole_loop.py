"""A whole-loop fusion (fusion/beyond_xla/whole_loop.py) as one `pallas_call` on the TPU.

The plan whole-loop fusion recorded (analysis/parallel_loop.py, the one the C target reads)
says which loop elements each lane holds (and along which dimension), which are uniform,
which are accumulated sums over the lanes and which are stacked per-step outputs. The
kernel:

- a grid over blocks of B = rows x 128 lanes (N padded to whole blocks); each per-lane
  element is laid out outside the kernel as (positions, N / 128, 128): its lane dimension
  last, on (rows, 128) tiles, one tile per position of the lane's own part (`lane_values.py`
  computes every value position by position on such tiles);
- the time loop a `lax.while_loop` inside the kernel, its carry the held elements' tiles,
  the uniform elements as scalars (computed on the scalar unit, identically in every block)
  and one tile of partial results per accumulator (lanes past N masked out afterwards);
- a stacked output's block in VMEM for the whole loop, written a slice per step at the
  uniform position the body computes; hlofuse's Threefry calls are u32 operations on the
  tiles, bit-equal to JAX's;
- after the loop, the held elements' and stacked outputs' blocks written back, the
  accumulators' partial tiles reduced (in block order) and combined with their initial
  values outside the kernel.

Per-step reductions across the lanes (a scan's [T] output summed over the lanes) are
whole_loop_steps.py, step logs of uniform values whole_loop_logs.py. What cannot be lowered
this way (an op with no per-lane form, a block that would not fit VMEM) is refused with a
named rule before the kernel is built; the fusion then runs as one XLA operation (XLA's own
per-step kernels inside its loop), and the listing says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from hlofuse.analysis.parallel_loop import LoopPlan, apply_recorded_plan
from hlofuse.analysis.parallel_loop_refusals import Refusal
from hlofuse.analysis.rare_selects import rare_selects
from hlofuse.analysis.whole_loop_config import read_recorded_plan, read_whole_loop_config
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape
from hlofuse.targets.tpu import product_plan
from hlofuse.targets.tpu import whole_loop_logs as logs
from hlofuse.targets.tpu.lane_ops import first_unlowered
from hlofuse.targets.tpu.lane_products import matrix
from hlofuse.targets.tpu.lane_values import (
    LaneValues,
    Position,
    Unlowerable,
    flat_position,
    static_positions,
    strides,
)
from hlofuse.targets.tpu.lane_wide import wide_refusal
from hlofuse.targets.tpu.lane_words import (
    ScalarReads,
    copy_tiles,
    from_word,
    narrowed,
    to_word,
    word,
)
from hlofuse.targets.tpu.lax_ops import (
    BINARY,
    BLOCK_ZERO,
    REDUCTIONS,
    Value,
    constant,
    whole_block,
)
from hlofuse.targets.tpu.product_plan import Product, fixed_elements, mxu_matrices
from hlofuse.targets.tpu.whole_loop_held import HeldWriter, compaction_note, stored_elements
from hlofuse.targets.tpu.whole_loop_steps import (
    finish,
    start_tables,
    table_outputs,
    table_words,
    write_step,
)
from hlofuse.targets.tpu.whole_loop_uniform import StepRecorder, UniformTables, uniform_tables

LANES = 128
# Rows of a block: at most BLOCK_ROWS, fewer for a small N, for the carry's registers and for
# VMEM. Larger blocks spend less of each grid step on its fixed cost until the carried tiles
# no longer fit the 64 vector registers (8 x 128 words each; a tile of `rows` rows takes
# rows / 8) and spill to VMEM every step. On the v5e CartPole's kernel (7 carried tiles a
# lane: 56 registers at 64 rows) ran 7-14 % faster with 64 rows than 32, and 3-4 % faster
# than 128 (112 registers) (docs/tpu.md).
BLOCK_ROWS = 64
MIN_ROWS = 8
CARRY_REGISTERS = 64
# Read-only elements (a policy's weights) are whole kernel inputs in SMEM, read a scalar per
# position; SMEM is small (1 MiB on v5e) and also holds the uniform values and tables.
READ_ONLY_WORDS = 64 * 1024
# The per-step reductions' tables of one block (a partial per written position and component,
# whole_loop_steps.py) and its step logs (whole_loop_logs.py) share SMEM with those: 128 KiB.
STEP_TABLE_WORDS = 32 * 1024
# What the blocks of one grid step may take of VMEM (inputs and outputs double-buffered,
# plus the carry): v5e has 128 MiB, the kernel is compiled with a 100 MiB limit.
VMEM_BUDGET = 48 * 2**20
# 32-bit words in the kernel (booleans and 8- and 16-bit integers as int32).
_WORD_TYPES = frozenset({DType.F32, DType.S32, DType.U32, DType.PRED, DType.S8, DType.U8,
                         DType.S16, DType.U16})

# Rule ids of a refusal (the listing's words).
NOT_PLANNED = "tpu-whole-loop-no-plan"
TYPES_RULE = "tpu-whole-loop-types"
VMEM_RULE = "tpu-whole-loop-vmem"
READ_ONLY_RULE = "tpu-whole-loop-read-only"


@dataclass(frozen=True)
class WholeLoopRefusal:
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


@dataclass
class LaneLayout:
    """How the loop's elements cross the kernel boundary and what a block holds."""

    loop: Instruction
    plan: LoopPlan
    init_params: tuple[int, ...]  # element -> the fusion parameter holding its initial value
    rows: int  # rows of a block (B = rows x 128 lanes)
    grid: int
    # The step's lane-uniform dots (lane_products.py), by id(): on the MXU or written out;
    # the fixed elements only MXU products read (VMEM inputs, not SMEM ones).
    products: dict[int, Product] = field(default_factory=dict)
    in_vmem: frozenset[int] = frozenset()

    @property
    def size(self) -> int:
        return self.plan.size

    @property
    def padded(self) -> int:
        return self.grid * self.rows * LANES

    def element_shape(self, element: int) -> Shape:
        return self.loop.shape.elements[element]

    def positions(self, element: int) -> int:
        """The positions of one lane's part of a per-lane element."""
        return self.element_shape(element).num_elements // self.size

    def other_dims(self, element: int) -> tuple[int, ...]:
        dims = self.element_shape(element).dims
        lane_dim = self.plan.lane_dims[element]
        return tuple(d for k, d in enumerate(dims) if k != lane_dim)

    def fixed_elements(self) -> list[int]:
        """Elements the loop passes on unchanged and no lane holds: the read-only ones and
        the uniform ones the body returns as it got them (a policy's 64 biases): inputs, not
        scalars carried through the time loop."""
        return fixed_elements(self.plan)

    def smem_elements(self) -> list[int]:
        """The fixed elements read from SMEM where used (all but those in VMEM only)."""
        return [e for e in self.fixed_elements() if e not in self.in_vmem]

    def carried_uniform(self) -> list[int]:
        """The uniform elements the time loop carries (the step counter, the RNG key)."""
        fixed = set(self.fixed_elements())
        return [e for e in self.plan.uniform if e not in fixed]

    def lane_elements(self) -> list[int]:
        """Held elements, then stacked outputs: the kernel's per-lane inputs and outputs."""
        return [*self.plan.per_lane, *(s.element for s in self.plan.streamed)]

    def describe(self) -> str:
        held = len(self.plan.per_lane)
        return (f"pallas_call lanes: grid ({self.grid},), blocks of {self.rows} x 128 lanes "
                f"(N = {self.size}), the time loop inside; {held} held, "
                f"{len(self.plan.streamed)} stacked, {len(self.plan.accumulators)} "
                f"accumulated and {len(self.plan.uniform)} uniform element(s)"
                f"{product_plan.describe(self.products)}{compaction_note(self)}")


def plan_lanes(fusion: Instruction) -> LaneLayout | WholeLoopRefusal:
    """The layout of a whole-loop fusion's kernel, or the rule that refuses it."""
    config = next((raw.text for key, raw in fusion.extra if key == "backend_config"), "")
    recorded = read_recorded_plan(config) if read_whole_loop_config(config) else None
    comp = fusion.calls[0]
    loop = comp.root
    if recorded is None or loop.op is not Op.WHILE:
        return WholeLoopRefusal(NOT_PLANNED, "the fusion records no whole-loop plan")
    plan = apply_recorded_plan(loop, *recorded)
    if isinstance(plan, Refusal):
        return WholeLoopRefusal(plan.rule, plan.message)
    if plan.size < 2:
        return WholeLoopRefusal(NOT_PLANNED, "one lane: nothing to lay out on tiles")
    products = product_plan.plan_products(plan.body, fixed_elements(plan),
                                          plan.value_lane_dims)
    in_vmem = product_plan.vmem_only(plan, products)
    read_only_words = sum(loop.shape.elements[e].num_elements for e in plan.read_only
                          if e not in in_vmem)
    if read_only_words > READ_ONLY_WORDS:
        return WholeLoopRefusal(READ_ONLY_RULE, f"read-only elements {list(plan.read_only)} "
                                f"hold {read_only_words} values, over the {READ_ONLY_WORDS} "
                                "the kernel keeps in SMEM")
    for element, shape in enumerate(loop.shape.elements):
        if shape.dtype not in _WORD_TYPES:
            return WholeLoopRefusal(TYPES_RULE, f"element {element} is {shape.text(False)}: "
                                    "the kernel keeps 32-bit words")
    wide = wide_refusal([*plan.condition.instructions, *plan.body.instructions])
    if wide is not None:
        return WholeLoopRefusal(TYPES_RULE, wide)
    tables = table_words(plan.step_reductions) + logs.log_words(plan.step_logs)
    if tables > STEP_TABLE_WORDS:
        return WholeLoopRefusal("tpu-whole-loop-op", f"the per-step reductions over the lanes "
                                f"and step logs take {tables} words of SMEM per block (over "
                                f"{STEP_TABLE_WORDS}: a partial per written position and "
                                "component, a log's row and initial value)")
    init = loop.operands[0]
    if init.op is not Op.TUPLE or any(o.op is not Op.PARAMETER for o in init.operands):
        return WholeLoopRefusal(NOT_PLANNED, "the loop's initial values are not the fusion's "
                                "parameters")
    unlowered = first_unlowered([*plan.condition.instructions, *plan.body.instructions])
    if unlowered is not None:
        return WholeLoopRefusal("tpu-whole-loop-op", f"%{unlowered.name} "
                                f"({unlowered.op.text}) has no per-lane form in the kernel")
    layout = LaneLayout(loop, plan, tuple(o.parameter_number for o in init.operands), 0, 0,
                        products, in_vmem)
    rows = _block_rows(layout)
    if rows == 0:
        return WholeLoopRefusal(VMEM_RULE, f"a block of {MIN_ROWS} x 128 lanes needs over "
                                f"{VMEM_BUDGET >> 20} MiB of VMEM")
    needed = -(-plan.size // (rows * LANES))
    layout.rows, layout.grid = rows, needed
    return layout


def _block_rows(layout: LaneLayout) -> int:
    """Rows per block: BLOCK_ROWS, fewer for a small N, fewer while the carried tiles (held
    positions and accumulators; stored elements stay in VMEM, whole_loop_held.py) take
    more than CARRY_REGISTERS vector registers (never below MIN_ROWS for it), fewer again
    for VMEM; 0 if even MIN_ROWS do not fit. The VMEM model: every per-lane block in and
    out twice (double buffering), stacked outputs once more (copied in the kernel), the
    carry once, a stored element's next-step block once, the MXU products' stacked tiles
    and weights."""
    rows_needed = -(-layout.size // LANES)
    rows = min(BLOCK_ROWS, -(-rows_needed // MIN_ROWS) * MIN_ROWS)
    held = sum(layout.positions(e) for e in layout.plan.per_lane)
    stored = sum(layout.positions(e) for e in stored_elements(layout))
    carried = held - stored + len(layout.plan.accumulators)
    while rows > MIN_ROWS and carried * (rows // MIN_ROWS) > CARRY_REGISTERS:
        rows //= 2
    stacked = sum(layout.positions(s.element) for s in layout.plan.streamed)
    product_tiles, weight_words = product_plan.mxu_vmem(layout.products)
    tiles = (5 * held + stored + 5 * stacked + 3 * len(layout.plan.accumulators)
             + product_tiles)
    while rows >= MIN_ROWS:
        if (tiles * rows * LANES + weight_words) * 4 <= VMEM_BUDGET:
            return rows
        rows //= 2
    return 0


# --- the kernel -------------------------------------------------------------------------

class LaneKernel:
    """The whole-loop kernel of one layout: called with the fusion's leaves, it returns the
    loop's elements."""

    def __init__(self, layout: LaneLayout, interpret: bool, name: str, debug: bool) -> None:
        self.layout = layout
        self.interpret = interpret
        self.name = name
        self.debug = debug
        # The step's uniform values computed before the kernel (whole_loop_uniform.py),
        # and the recorder that finds them while the step is traced once.
        self.tables: UniformTables | None = None
        self.recorder: StepRecorder | None = None

    # --- across the boundary ------------------------------------------------------------

    def _to_tiles(self, x: Value, element: int) -> Value:
        """(positions, padded N / 128, 128): the lane dimension last, padded, on tiles."""
        layout = self.layout
        shape = layout.element_shape(element)
        x = to_word(jnp.asarray(x), shape.dtype)
        x = jnp.moveaxis(x, layout.plan.lane_dims[element], -1)
        x = x.reshape(layout.positions(element), layout.size)
        x = jnp.pad(x, ((0, 0), (0, layout.padded - layout.size)))
        return x.reshape(layout.positions(element), layout.padded // LANES, LANES)

    def _from_tiles(self, x: Value, element: int) -> Value:
        layout = self.layout
        shape = layout.element_shape(element)
        x = x.reshape(layout.positions(element), layout.padded)[:, :layout.size]
        x = x.reshape(*layout.other_dims(element), layout.size)
        x = jnp.moveaxis(x, -1, layout.plan.lane_dims[element])
        return narrowed(from_word(x, shape.dtype), shape.dtype)

    def __call__(self, *leaves: Value) -> list[Value]:
        layout = self.layout
        plan = layout.plan
        inits = [leaves[p] for p in layout.init_params]
        lane_elements = layout.lane_elements()
        uniform = layout.carried_uniform()
        fixed = layout.fixed_elements()
        accumulators = list(plan.accumulators)
        tiled_in = [self._to_tiles(inits[e], e) for e in lane_elements]
        uniform_in = [to_word(jnp.asarray(inits[e]), layout.element_shape(e).dtype)
                      .reshape(-1) for e in uniform]
        fixed_in = [to_word(jnp.asarray(inits[e]), layout.element_shape(e).dtype)
                    .reshape(-1) for e in layout.smem_elements()]
        matrix_in = [matrix(inits[p.element] if p.element is not None else
                            np.asarray(p.source.attrs["literal"]), p.order, p.m, p.k)
                     for p in mxu_matrices(layout.products)]
        first_matrix = len(lane_elements) + len(uniform_in) + len(fixed_in)
        rows = layout.rows
        def block(positions: int) -> pl.BlockSpec:
            return pl.BlockSpec((positions, rows, LANES), lambda i: (BLOCK_ZERO, i, BLOCK_ZERO))

        out_shapes = [jax.ShapeDtypeStruct(t.shape, t.dtype) for t in tiled_in]
        out_shapes += [jax.ShapeDtypeStruct((layout.padded // LANES, LANES),
                                            word(layout.element_shape(a.element).dtype))
                       for a in accumulators]
        out_shapes += [jax.ShapeDtypeStruct(u.shape, u.dtype) for u in uniform_in]
        out_specs = [block(layout.positions(e)) for e in lane_elements]
        out_specs += [pl.BlockSpec((rows, LANES), lambda i: (i, BLOCK_ZERO))
                      for _ in accumulators]
        out_specs += [whole_block(u.ndim, pltpu.SMEM) for u in uniform_in]
        table_shapes, table_specs = table_outputs(plan.step_reductions, layout.grid)
        log_shapes, log_specs = logs.log_outputs(plan.step_logs, layout.grid)
        out_shapes += table_shapes + log_shapes
        out_specs += table_specs + log_specs

        scratch = [pltpu.VMEM((layout.positions(e), rows, LANES),
                              word(layout.element_shape(e).dtype))
                   for e in stored_elements(layout)]

        def call(*inputs: Value) -> Any:
            return pl.pallas_call(
                self._kernel, grid=(layout.grid,), out_shape=out_shapes,
                scratch_shapes=scratch,
                in_specs=[*(block(layout.positions(e)) for e in lane_elements),
                          *(whole_block(x.ndim, pltpu.VMEM if first_matrix <= k <
                                        first_matrix + len(matrix_in) else pltpu.SMEM)
                            for k, x in enumerate(inputs) if k >= len(lane_elements))],
                out_specs=out_specs, interpret=self.interpret, debug=self.debug,
                name=self.name, compiler_params=pltpu.CompilerParams(
                    dimension_semantics=("parallel",), vmem_limit_bytes=100 * 2**20),
            )(*inputs)

        # The logs' initial values come after the tables, which the step traced first lacks.
        log_in = logs.log_inputs(plan.step_logs, inits)
        tables_in = uniform_tables(self, call, [*tiled_in, *uniform_in, *fixed_in,
                                                *matrix_in, *log_in], uniform_in, fixed_in)
        outputs = call(*tiled_in, *uniform_in, *fixed_in, *matrix_in, *tables_in, *log_in)
        result: dict[int, Value] = {}
        for k, e in enumerate(lane_elements):
            result[e] = self._from_tiles(outputs[k], e)
        offset = len(lane_elements)
        for k, a in enumerate(accumulators):
            result[a.element] = self._combined(a, outputs[offset + k], inits[a.element])
        offset += len(accumulators)
        for k, e in enumerate(uniform):
            shape = layout.element_shape(e)
            result[e] = narrowed(from_word(outputs[offset + k].reshape(shape.dims),
                                             shape.dtype), shape.dtype)
        offset += len(uniform)
        result.update(finish(plan.step_reductions, outputs[offset:],
                             {s.element: inits[s.element] for s in plan.step_reductions}))
        result.update(logs.finish_logs(plan.step_logs, outputs[offset + len(table_shapes):]))
        for e in fixed:  # unchanged by the loop
            result[e] = inits[e]
        return [result[e] for e in range(len(layout.loop.shape.elements))]

    def _combined(self, accumulator: Any, partials: Value, init: Value) -> Value:
        """The accumulator's final value: its partial tiles (lanes past N the identity)
        reduced, combined with the initial value."""
        layout = self.layout
        dtype = layout.element_shape(accumulator.element).dtype
        flat = from_word(partials.reshape(-1), dtype)[:layout.size]  # lanes past N cut off
        reduced = narrowed(REDUCTIONS[accumulator.op](flat, (0,)), dtype)
        return BINARY[accumulator.op](jnp.asarray(init), reduced)

    def values(self, lanes: Value, read_held: Any, scalars: Any, fixed_in: Sequence[Any],
               matrix_in: Sequence[Any] = (), stored: Any = None) -> LaneValues:
        """The step's values: held elements read by `read_held`, carried uniform elements
        from `scalars`, fixed ones from `fixed_in` (refs in the kernel, arrays before it),
        the MXU products' weights from `matrix_in` (none: every dot written out)."""
        layout = self.layout
        plan = layout.plan
        carried, smem = layout.carried_uniform(), layout.smem_elements()

        def read_uniform(element: int) -> Sequence[Value]:
            dtype = layout.element_shape(element).dtype
            if element in smem:
                return ScalarReads(fixed_in[smem.index(element)], dtype)
            if element not in carried:  # in VMEM for the MXU products only
                raise Unlowerable("tpu-whole-loop-op", f"element {element} read other than "
                                  "as an MXU product's weights")
            return [from_word(v, dtype) for v in scalars[carried.index(element)]]

        lane_dims = {e: plan.lane_dims[e] for e in plan.per_lane}
        values = LaneValues(lanes, layout.size, lane_dims, read_held, read_uniform)
        values.nested = plan.nested
        values.stored = stored or {}
        values.products = layout.products
        if matrix_in:
            keys = [p.matrix_key for p in mxu_matrices(layout.products)]

            def reader(ref: Any) -> Any:
                return lambda: ref[...]

            values.weights = {i: reader(matrix_in[keys.index(p.matrix_key)])
                              for i, p in layout.products.items() if p.mxu}
        return values

    def new_scalars(self, values: LaneValues) -> tuple[tuple[Value, ...], ...]:
        """The carried uniform elements' values after the step, as words."""
        layout = self.layout
        root = layout.plan.body.root
        return tuple(
            tuple(to_word(values.value(root.operands[e], p), layout.element_shape(e).dtype)
                  for p in static_positions(layout.element_shape(e).dims))
            for e in layout.carried_uniform())

    # --- inside ----------------------------------------------------------------------------

    def _kernel(self, *refs: Any) -> None:
        layout = self.layout
        plan = layout.plan
        lane_elements = layout.lane_elements()
        carried, fixed = layout.carried_uniform(), layout.smem_elements()
        n_lane, n_uniform = len(lane_elements), len(carried)
        n_acc = len(plan.accumulators)
        lane_in = refs[:n_lane]
        uniform_in = refs[n_lane:n_lane + n_uniform]
        fixed_in = refs[n_lane + n_uniform:n_lane + n_uniform + len(fixed)]
        n_inputs = n_lane + n_uniform + len(fixed)
        matrix_in = refs[n_inputs:n_inputs + len(mxu_matrices(layout.products))]
        n_inputs += len(matrix_in)
        tables = self.tables
        n_tables = len(tables.kinds) if tables is not None else 0
        table_in = refs[n_inputs:n_inputs + n_tables]
        n_logs = len(plan.step_logs)
        log_in = refs[n_inputs + n_tables:n_inputs + n_tables + n_logs]
        outs = refs[n_inputs + n_tables + n_logs:]
        lane_out, acc_out = outs[:n_lane], outs[n_lane:n_lane + n_acc]
        uniform_out = outs[n_lane + n_acc:n_lane + n_acc + n_uniform]
        n_tables_out = len(table_outputs(plan.step_reductions, layout.grid)[0])
        table_refs = outs[n_lane + n_acc + n_uniform:n_lane + n_acc + n_uniform + n_tables_out]
        stored = stored_elements(layout)
        log_rows = outs[n_lane + n_acc + n_uniform + n_tables_out:][:n_logs]
        next_refs = outs[n_lane + n_acc + n_uniform + n_tables_out + n_logs:]
        start_tables(plan.step_reductions, table_refs)
        logs.start_logs(log_in, log_rows)
        rows = layout.rows
        first = pl.program_id(0) * np.int32(rows * LANES)
        lanes = (lax.broadcasted_iota(np.int32, (rows, LANES), 0) * np.int32(LANES)
                 + lax.broadcasted_iota(np.int32, (rows, LANES), 1) + first)
        # Stored elements stay in their output blocks for the whole loop (whole_loop_held.py).
        state_refs = {e: lane_out[lane_elements.index(e)] for e in stored}
        for e in stored:
            copy_tiles(lane_in[lane_elements.index(e)], state_refs[e])
        held = [e for e in plan.per_lane if e not in stored]
        streamed = {s.element: k for k, s in enumerate(plan.streamed)}
        # Stacked outputs start as their initial values; the steps overwrite slices. Copied
        # a tile at a time in a loop: one copy of the whole block is one vector value of
        # T x rows x 128 words, which Mosaic unrolls into thousands of registers.
        for s in plan.streamed:
            k = n_lane - len(plan.streamed) + streamed[s.element]
            copy_tiles(lane_in[k], lane_out[k])
        carry0 = (
            tuple(tuple(lane_in[lane_elements.index(e)][p] for p in range(layout.positions(e)))
                  for e in held),
            tuple(tuple(ref[j] for j in range(ref.shape[0])) for ref in uniform_in),
            tuple(jnp.full((rows, LANES), constant(a.identity), word(
                layout.element_shape(a.element).dtype)) for a in plan.accumulators),
            np.int32(0),  # the step
        )
        rare = {r.element: r for r in rare_selects(plan)}
        streamed_refs = {s.element: lane_out[n_lane - len(plan.streamed) + k]
                         for k, s in enumerate(plan.streamed)}

        def values_of(carry: Any) -> LaneValues:
            tiles, scalars, _, _ = carry

            def read_held(element: int, position: Position) -> Value:
                dims = layout.other_dims(element)
                flat = flat_position(position, dims)
                dtype = layout.element_shape(element).dtype
                if element in state_refs:
                    return from_word(state_refs[element][flat], dtype)
                return from_word(tiles[held.index(element)][flat], dtype)

            def reader(element: int) -> Any:
                dtype = layout.element_shape(element).dtype
                return lambda flat: from_word(state_refs[element][flat], dtype)

            return self.values(lanes, read_held, scalars, fixed_in, matrix_in,
                               {e: reader(e) for e in stored})

        def condition(carry: Any) -> Value:
            if tables is not None:  # a known trip count
                return carry[3] < np.int32(tables.trips)
            return values_of(carry).scalar(plan.condition.root)

        def step(carry: Any) -> Any:
            values = values_of(carry)
            values.recorder = self.recorder
            if tables is not None:
                values.precomputed = tables.readers(table_in, carry[3])
            writer = HeldWriter(layout, state_refs, dict(zip(stored, next_refs)), first)
            new_tiles = writer.new_values(values, plan.per_lane, rare)
            new_scalars = self.new_scalars(values)
            partials = []
            for a, partial in zip(plan.accumulators, carry[2]):
                dtype = layout.element_shape(a.element).dtype
                for x in a.operands:
                    partial = self._accumulate(values, a, x, partial, dtype)
                partials.append(partial)
            for s in plan.streamed:
                self._write_slice(values, s, streamed_refs[s.element])
            write_step(values, plan.step_reductions, table_refs, lanes, layout.size,
                       self._lane_dim_of)
            logs.write_logs(values, plan.step_logs, log_rows)
            writer.commit()
            return (tuple(new_tiles[e] for e in held), new_scalars, tuple(partials),
                    carry[3] + np.int32(1))

        tiles, scalars, partials, _ = lax.while_loop(condition, step, carry0)
        for k, e in enumerate(held):
            for p, tile in enumerate(tiles[k]):
                lane_out[lane_elements.index(e)][p] = tile
        for ref, partial in zip(acc_out, partials):
            ref[...] = partial
        for ref, values in zip(uniform_out, scalars):
            for j, v in enumerate(values):
                ref[j] = v

    def _accumulate(self, values: LaneValues, accumulator: Any, x: Instruction,
                    partial: Value, dtype: DType) -> Value:
        """The partial tile combined with a lane's reduction of its own part of x."""
        lane_dim = self._lane_dim_of(x)
        others = [d for k, d in enumerate(x.shape.dims) if k != lane_dim]
        op = BINARY[accumulator.op]
        for p in static_positions(others):
            item = values.value(x, values.lane_position(x.shape.dims, lane_dim, p))
            item = jnp.broadcast_to(to_word(item, dtype), partial.shape)
            partial = op(partial, item)
        return partial

    def _lane_dim_of(self, x: Instruction) -> int:
        """The dimension holding the lanes of a value reduced over all of them."""
        lane_dim = self.layout.plan.value_lane_dims.get(id(x))
        if lane_dim is not None:
            return lane_dim
        candidates = [k for k, d in enumerate(x.shape.dims) if d == self.layout.size]
        if len(candidates) != 1:
            raise Unlowerable("tpu-whole-loop-op", f"%{x.name}: a value reduced over the "
                              "lanes without one lane dimension")
        return candidates[0]

    def _write_slice(self, values: LaneValues, streamed: Any, ref: Any) -> None:
        """One step's slice of a stacked output, at the uniform position the body writes."""
        update = streamed.update
        element = streamed.element
        layout = self.layout
        shape = layout.element_shape(element)
        lane_dim = streamed.lane_dim
        slice_value = update.operands[1]
        other_dims = layout.other_dims(element)
        slice_dims = [d for k, d in enumerate(slice_value.shape.dims) if k != lane_dim]
        starts = []
        for k, (start, dim, size) in enumerate(zip(update.operands[2:], shape.dims,
                                                   slice_value.shape.dims)):
            if k == lane_dim:
                continue
            s = lax.convert_element_type(values.scalar(start), np.int32)
            starts.append(lax.clamp(np.int32(0), s, np.int32(dim - size)))
        element_strides = strides(other_dims)
        for p in static_positions(slice_dims):
            tile = values.value(slice_value, values.lane_position(
                slice_value.shape.dims, lane_dim, p))
            tile = jnp.broadcast_to(to_word(tile, shape.dtype), (layout.rows, LANES))
            flat: Any = np.int32(0)
            for start, offset, stride in zip(starts, p, element_strides):
                flat = flat + (start + np.int32(offset)) * np.int32(stride)
            ref[flat] = tile

