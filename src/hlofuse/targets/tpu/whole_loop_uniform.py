"""The uniform work of a whole-loop kernel's step, computed once before the kernel.

Every block of the whole-loop kernel (`whole_loop.py`) runs the same time loop, and the
step's uniform values (the step counter, the RNG key and the keys split from it: the same
for every lane of every block) were computed on the scalar unit in every block at every
step: CartPole's step has about 380 scalar operations (Threefry on the keys) beside about
1,000 on tiles. When the loop's trip count is known they do not depend on the block, so a
`lax.scan` over the steps computes them before the kernel, one row of a table per step (in
SMEM, one table per type); inside the kernel each is one scalar load from the step's row.
The scan has a cost of its own, so kernels of fewer than TABLE_MIN_BLOCKS blocks keep the
work inside (measured on the v5e, below).

Which values: the step is traced once with a `StepRecorder` that notes each value the step
computes and which values it read. A value at a static position that is a scalar, and
that reaches no per-lane tile through what it reads, is uniform; those a tile (or the
kernel itself: a stacked output's slice position, the carried elements' new values) reads
are the table's columns. Constants and reads of loop elements stay where they are (they
cost nothing). Loops with nested loops keep their uniform work in the kernel (a nested
loop's uniform results come out of a loop over tiles).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from hlofuse.analysis.lane_classification import element_read
from hlofuse.analysis.loop_config import known_trip_count
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op
from hlofuse.targets.tpu.lane_values import LaneValues, Position, is_static
from hlofuse.targets.tpu.lax_ops import Value

if TYPE_CHECKING:
    from hlofuse.targets.tpu.whole_loop import LaneKernel

# The table costs a loop of T steps in XLA before the kernel (about 2.8 us a step on the v5e:
# CartPole at N = 65,536, 8 blocks of 64 rows, fell from 4.08 to 3.46 G env-steps/s with it)
# and saves scalar work in every block at every step (about 0.07-0.1 us per block and step:
# at N = 1,048,576, 128-256 blocks, 5.74 -> 5.93 G with 64 rows, 5.02 -> 5.61 G with 32;
# docs/tpu.md). It pays from about 30 blocks: kernels with fewer keep the work inside.
TABLE_MIN_BLOCKS = 32
# SMEM is 1 MiB on v5e and also holds read-only weights (whole_loop.READ_ONLY_WORDS): the
# tables of one kernel stay within this many 32-bit words, else the work stays inside.
TABLE_WORDS = 64 * 1024
# The types a column may have; booleans are stored as int32.
_TABLE_TYPES = (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.uint32))
Key = tuple[object, ...]


@dataclass
class _Entry:
    inst: Instruction
    position: tuple[int, ...] | None  # static positions only
    dtype: np.dtype | None  # a scalar's type; None for a tile


class StepRecorder:
    """What one traced step computed: each value's kind and which values it read."""

    def __init__(self) -> None:
        self.entries: dict[Key, _Entry] = {}
        self.reads: dict[Key, set[Key]] = defaultdict(set)
        self.top_level: set[Key] = set()
        self._stack: list[Key] = []

    def computing(self, key: Key, inst: Instruction, position: Position,
                  compute: Callable[[], Value]) -> Value:
        self._stack.append(key)
        try:
            value = compute()
        finally:
            self._stack.pop()
        static = all(is_static(i) for i in position)
        scalar = static and not isinstance(value, tuple) and jnp.ndim(value) == 0
        self.entries[key] = _Entry(inst, tuple(int(i) for i in position) if static else None,
                                   np.dtype(jnp.result_type(value)) if scalar else None)
        return value

    def used(self, key: Key, value: Value) -> None:
        if self._stack:
            self.reads[self._stack[-1]].add(key)
        else:
            self.top_level.add(key)

    def columns(self) -> list[Key]:
        """The uniform values a tile or the kernel reads (see the module docstring)."""
        tiled: dict[Key, bool] = {}

        def reaches_tile(key: Key) -> bool:
            found = tiled.get(key)
            if found is None:
                tiled[key] = True  # a cycle cannot happen; be safe while computing
                entry = self.entries.get(key)
                found = (entry is None or entry.dtype is None
                         or any(reaches_tile(k) for k in self.reads.get(key, ())))
                tiled[key] = found
            return found

        # What the kernel still computes (a tile, or a scalar made from tiles) reads these.
        read_by_tile = {child for parent, children in self.reads.items()
                        if reaches_tile(parent) for child in children}
        out = []
        for key, entry in self.entries.items():
            if reaches_tile(key) or entry.inst.op is Op.CONSTANT:
                continue
            if element_read(entry.inst) is not None:
                continue
            if _table_type(entry.dtype) is None:
                continue
            if key in self.top_level or key in read_by_tile:
                out.append(key)
        return out


def _table_type(dtype: np.dtype | None) -> np.dtype | None:
    if dtype is None:
        return None
    if dtype == np.bool_:
        return np.dtype(np.int32)
    return dtype if dtype in _TABLE_TYPES else None


def table_trips(loop: Instruction, nested: bool) -> int | None:
    """The trip count the tables are made for, or None when the step's uniform work stays
    in the kernel (no known trip count, nested loops)."""
    if nested:
        return None
    trips = known_trip_count(loop)
    return trips if trips is not None and trips > 0 else None


@dataclass
class UniformTables:
    """The columns (by memo key) and their tables: column k of type d at step t is
    tables[d][t * width[d] + index]."""

    trips: int
    columns: dict[Key, tuple[int, int]]  # key -> (table, index in its row)
    kinds: list[np.dtype]  # each table's type
    widths: list[int]
    bools: set[Key]

    def readers(self, refs: Sequence[Any], step: Value) -> dict[Key, Callable[[], Value]]:
        """In the kernel: each column read at `step` from its table's ref."""
        def reader(key: Key, table: int, index: int) -> Callable[[], Value]:
            def read() -> Value:
                value = refs[table][step * np.int32(self.widths[table]) + np.int32(index)]
                return value != 0 if key in self.bools else value
            return read
        return {key: reader(key, t, i) for key, (t, i) in self.columns.items()}


def plan_tables(recorder: StepRecorder, trips: int) -> UniformTables | None:
    keys = recorder.columns()
    kinds: list[np.dtype] = []
    columns: dict[Key, tuple[int, int]] = {}
    widths: list[int] = []
    bools: set[Key] = set()
    for key in keys:
        dtype = recorder.entries[key].dtype
        kind = _table_type(dtype)
        assert kind is not None
        if dtype == np.bool_:
            bools.add(key)
        if kind not in kinds:
            kinds.append(kind)
            widths.append(0)
        table = kinds.index(kind)
        columns[key] = (table, widths[table])
        widths[table] += 1
    if not columns or trips * sum(widths) > TABLE_WORDS:
        return None
    return UniformTables(trips, columns, kinds, widths, bools)


def compute_tables(tables: UniformTables, recorder: StepRecorder,
                   step_values: Callable[[Any], LaneValues],
                   new_scalars: Callable[[LaneValues], Any], scalars0: Any) -> list[Value]:
    """Before the kernel: the steps' uniform values, a `lax.scan` from the carried uniform
    elements' initial scalars; each table flattened (steps x its columns)."""
    order = sorted(tables.columns, key=lambda k: tables.columns[k])

    def step(scalars: Any, _: None) -> tuple[Any, tuple[Value, ...]]:
        values = step_values(scalars)
        row = []
        for key in order:
            entry = recorder.entries[key]
            assert entry.position is not None
            kind = tables.kinds[tables.columns[key][0]]
            row.append(jnp.asarray(values.value(entry.inst, entry.position)).astype(kind))
        return new_scalars(values), tuple(row)

    _, rows = lax.scan(step, scalars0, None, length=tables.trips)
    out = []
    for table, kind in enumerate(tables.kinds):
        picked = [rows[k] for k, key in enumerate(order) if tables.columns[key][0] == table]
        out.append(jnp.stack(picked, axis=1).astype(kind).reshape(-1))
    return out


def uniform_tables(kernel: LaneKernel, call: Callable[..., Any], inputs: Sequence[Value],
                   uniform_in: Sequence[Value], fixed_in: Sequence[Value]) -> list[Value]:
    """The whole-loop kernel's tables (set on `kernel.tables`), or none: the kernel's step
    traced once by `call` on `inputs` (its inputs without tables) to find the columns."""
    layout = kernel.layout
    kernel.tables = None
    trips = table_trips(layout.loop, bool(layout.plan.nested))
    if trips is None or layout.grid < TABLE_MIN_BLOCKS:
        return []
    recorder = kernel.recorder = StepRecorder()
    try:
        jax.eval_shape(call, *(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs))
    finally:
        kernel.recorder = None
    tables = plan_tables(recorder, trips)
    if tables is None:
        return []
    dummy = jnp.zeros((8, 128), np.int32)  # no uniform value reads the lanes

    def step_values(scalars: Any) -> LaneValues:
        return kernel.values(dummy, _no_held, scalars, fixed_in)

    scalars0 = tuple(tuple(x[j] for j in range(x.shape[0])) for x in uniform_in)
    computed = compute_tables(tables, recorder, step_values, kernel.new_scalars, scalars0)
    kernel.tables = tables
    return computed


def _no_held(element: int, position: Position) -> Value:
    raise AssertionError(f"a uniform value of the step read held element {element}")
