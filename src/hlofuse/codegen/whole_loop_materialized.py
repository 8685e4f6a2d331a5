"""Per-lane values lane code reads at many positions, computed once per step.

A product's operand is read once for every position of the product: a policy network's hidden
layer of 64 values, written out where the next layer's product reads it, would be computed
again for each of that product's 64 positions (4,096 tanh per lane and step for a 64 x 64
layer), and the C compiler's time grows with what is written out. Such a value is computed
once per step into the block's scratch `v<k>[position][lane]`, in a loop over its positions
with the lanes inside (the lane loop vectorises), before the step's lane loops, which then
read it from there. It depends on the state the step starts with only, as every value the
lane loops compute does.

A product of such a value (more than LANE_SELECTED_READ contracting positions) with a value
the lanes share (the layer's weights) is itself computed into scratch as a loop nest: for
each pass of positions, for the lanes (vectorised), a loop over the contracting positions
that reads the lane's value once and adds it, times each position's weight, to that
position's sum. The sums keep their order (from +0, ascending, one fused multiply-add per
position, as `dot_elemental`), so results are those of the written-out form; the loop keeps
the weights in memory rather than hoisted into registers that spill, about 3x faster on a
64 x 64 layer. A product with few positions (a value head, a few logits) has few sums a lane,
each a chain of multiply-adds waiting on the adder: its pass runs over part of the block and
computes the lanes of the other parts in the same iteration (reading the operand's scratch at
an offset), so a lane's sum keeps its order and the chains are independent (an output layer of
one position: 7.7 -> 2.7 ns a lane on Zen 2).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from hlofuse.analysis.parallel_loop import LoopPlan
from hlofuse.analysis.rare_selects import FREE_OPS
from hlofuse.codegen import cir
from hlofuse.codegen.cir import Binary, Expr
from hlofuse.codegen.dot_elemental import operand_index
from hlofuse.codegen.emitter_types import UNROLL_ELEMENTS, Index
from hlofuse.codegen.whole_loop_elements import L
from hlofuse.codegen.whole_loop_lane_code import LANE_SELECTED_READ, SIMD, LaneCode
from hlofuse.ir.attrs import SliceDim
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import CostClass, Op, OpKind

# Ops that only rearrange positions: the value behind them is the one worth keeping.
_REARRANGING = frozenset({Op.RESHAPE, Op.BITCAST, Op.TRANSPOSE, Op.COPY})
# Values that cost nothing to read again (or are read from memory already).
FREE_TO_READ = frozenset({Op.CONSTANT, Op.IOTA, Op.BROADCAST, Op.PARAMETER, Op.GET_TUPLE_ELEMENT})
# Positions of a value (not a product) computed together in one pass over the lanes.
POSITIONS_TOGETHER = 8
# Lanes a part of the block keeps where a product's pass computes several parts: two vectors
# of 8 (AVX2) or one of 16 (AVX-512).
MIN_PART_LANES = 16
# A product's pass keeps one sum per position and part in a vector register, and for each
# contracting position reads the operand once per part and each position's weight once (a
# broadcast), and issues one multiply-add per sum. The cores kernels run on (x86 since
# Haswell and Zen, Arm's Neoverse) issue two multiply-adds and two loads a cycle; a
# multiply-add's result is ready about five cycles later (Zen 2; four on Intel cores), so a
# sum waits that long between its updates; 16 vector registers hold the sums, the parts'
# operand values and a weight (AVX2; AVX-512 and Neon have 32).
MULTIPLY_ADDS_PER_CYCLE = 2
LOADS_PER_CYCLE = 2
MULTIPLY_ADD_LATENCY = 5
VECTOR_REGISTERS = 16


@dataclass(frozen=True)
class ProductTile:
    """A pass of a looped product: `positions` sums for each of `parts` parts of the block."""

    positions: int
    parts: int

    def fits(self) -> bool:
        return self.positions * self.parts + self.parts + 1 <= VECTOR_REGISTERS

    def cycles(self) -> float:
        """Cycles of one contracting position of one iteration, by what limits it."""
        sums = self.positions * self.parts
        return max(sums / MULTIPLY_ADDS_PER_CYCLE, (self.parts + self.positions) / LOADS_PER_CYCLE,
                   MULTIPLY_ADD_LATENCY)


def best_tile(positions: int, most_parts: int) -> ProductTile:
    """The tile that computes `positions` sums of every lane in the fewest cycles: passes of
    the tile's positions and one pass of what is left, each iteration `parts` parts of the
    block (so 1/parts of the iterations); of equal ones the one with the fewest passes over
    the operand, then one without a pass of what is left. A 64 x 64 layer: 6 positions of 2
    parts, every multiply-add port busy, where 8 positions of one part wait on the adder
    (81 -> 101 GFLOP/s on Zen 2)."""
    best: tuple[float, int, bool, ProductTile] | None = None
    parts = 1
    while parts <= most_parts:
        for together in range(1, positions + 1):
            tile = ProductTile(together, parts)
            if not tile.fits():
                break
            passes, rest = divmod(positions, together)
            cycles = passes * tile.cycles()
            if rest:
                cycles += ProductTile(rest, parts).cycles()
            key = (cycles / parts, passes + (rest > 0), rest > 0, tile)
            if best is None or key[:3] < best[:3]:
                best = key
        parts *= 2
    assert best is not None
    return best[3]


# A per-lane value read by several of the step's lane loops is kept in scratch where computing
# it costs at least this many operations (a store and, per reader, a load otherwise), and it
# has at most this many positions a lane.
SHARED_MIN_OPERATIONS = 4
SHARED_MAX_POSITIONS = 1024
# Cheap operations one operation of a cost class stands for (a math function's polynomial,
# a divider's latency).
_OPERATIONS = {CostClass.FREE: 0, CostClass.DIVISION: 4,
               CostClass.TRANSCENDENTAL: SHARED_MIN_OPERATIONS,
               CostClass.TWO_TRANSCENDENTALS: SHARED_MIN_OPERATIONS}


def materialized_values(plan: LoopPlan, kept: Mapping[int, tuple[Instruction, ...]],
                        avoided: frozenset[int], dims: Mapping[int, int]) -> list[Instruction]:
    """The per-lane values lane code computes once per step into scratch, in body order: the
    values products read at many positions (`_product_values`), and where those (or nested
    loops) split the step into several lane loops, the values several of them read
    (`_shared_values`). `kept`: by id() of a deferred select, what the main lane loop
    computes of it; `avoided`: values lane code binds itself (the speculative math); `dims`:
    each per-lane value's lane dimension (`value_lane_dims`)."""
    chosen = _product_values(plan)
    if chosen or plan.nested:
        _shared_values(plan, chosen, kept, avoided, dims)
    return [inst for inst in plan.body.instructions if id(inst) in chosen]


def _product_values(plan: LoopPlan) -> set[int]:
    """The computed per-lane values behind a product's operands (through reshapes and
    transposes) of more than one position per lane: where the product has more than one
    position per lane (each reads all of it), or where the value has more than
    UNROLL_ELEMENTS positions (its positions would be written out one by one where the
    product's sum reads them)."""
    chosen: set[int] = set()
    for inst in plan.body.instructions:
        if inst.op is not Op.DOT or id(inst) not in plan.lane:
            continue
        if looped_product(plan, inst):
            chosen.add(id(inst))
        many_outputs = positions_per_lane(plan, inst) > 1
        for operand in inst.operands:
            value = _behind_rearranging(operand)
            if id(value) not in plan.lane or value.op in FREE_TO_READ or \
                    id(value) not in plan.value_lane_dims:
                continue
            positions = positions_per_lane(plan, value)
            if positions > 1 and (many_outputs or positions > UNROLL_ELEMENTS):
                chosen.add(id(value))
    return chosen


def _shared_values(plan: LoopPlan, chosen: set[int], kept: Mapping[int, tuple[Instruction, ...]],
                   avoided: frozenset[int], dims: Mapping[int, int]) -> None:
    """Adds to `chosen` the values more than one of the step's lane loops would compute: each
    chosen value's loop, each nested loop's and the main loop compute what they read that is
    not in scratch, so a value two of them read is computed twice, and a chain of them (a
    substep's velocity, read by the next substep) ever more often down the chain. The latest
    such value (in body order) is taken first, so a shared chain goes into scratch at its
    top; only values costing more than SHARED_MIN_OPERATIONS, the scratch's store and loads."""
    instructions = plan.body.instructions
    added: list[Instruction] = []
    while True:
        stops = chosen | set(plan.nested)
        readers: Counter[int] = Counter()
        for roots in _lane_loop_roots(plan, chosen):
            readers.update(_computed(plan, roots, stops, kept))
        shared = [inst for inst in instructions if readers[id(inst)] > 1
                  and id(inst) not in avoided and _worth_keeping(plan, inst, stops, dims)]
        if not shared:
            break
        chosen.add(id(shared[-1]))
        added.append(shared[-1])
    # A value taken early may cost little once what it reads was taken after it (the
    # negation of a sine): its readers compute it again.
    for inst in added:
        chosen.discard(id(inst))
        if not _worth_keeping(plan, inst, chosen | set(plan.nested), dims):
            continue
        chosen.add(id(inst))


def _lane_loop_roots(plan: LoopPlan, chosen: set[int]) -> list[tuple[Instruction, ...]]:
    """What each of the step's lane loops computes: each chosen value, each nested loop's
    initial state, and the main loop's new state."""
    loops: list[tuple[Instruction, ...]] = [
        (inst,) for inst in plan.body.instructions if id(inst) in chosen]
    loops += [inst.operands for inst in plan.body.instructions if id(inst) in plan.nested]
    loops.append(plan.body.root.operands)
    return loops


def _computed(plan: LoopPlan, roots: tuple[Instruction, ...], stops: set[int],
              kept: Mapping[int, tuple[Instruction, ...]]) -> set[int]:
    """id() of the per-lane values a lane loop computing `roots` computes (scratch and nested
    loops' results are read; of a deferred select, what the main loop keeps)."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        x = stack.pop()
        if id(x) in seen or id(x) not in plan.lane:
            continue
        seen.add(id(x))
        if id(x) in stops and not any(x is root for root in roots):
            continue
        stack.extend(kept.get(id(x), x.operands))
    return {key for key in seen if key not in stops or key in {id(r) for r in roots}}


def _worth_keeping(plan: LoopPlan, inst: Instruction, stops: set[int],
                   dims: Mapping[int, int]) -> bool:
    """A per-lane array value whose computation from what is already read costs more than
    keeping it, of at most SHARED_MAX_POSITIONS positions a lane."""
    if inst.op in FREE_OPS or inst.shape.is_tuple or id(inst) not in dims:
        return False
    if positions_per_lane(plan, inst, dims) > SHARED_MAX_POSITIONS:
        return False
    count = 0
    seen: set[int] = set()
    stack = [inst]
    while stack and count < SHARED_MIN_OPERATIONS:
        x = stack.pop()
        if id(x) in seen or id(x) not in plan.lane or (x is not inst and id(x) in stops):
            continue
        seen.add(id(x))
        if x.op not in FREE_OPS:
            count += _OPERATIONS.get(x.op.definition.cost, 1)
        stack.extend(x.operands)
    return count >= SHARED_MIN_OPERATIONS


def value_lane_dims(plan: LoopPlan) -> dict[int, int]:
    """By id(), the dimension holding the lanes of each per-lane value of lane code: as the
    analysis recorded it for the values depending on the state, and for the others (a step's
    draws, computed from the step's key and the lane's position) the dimension at which every
    reader holds the lanes, read through element-wise ops, broadcasts, transposes, reshapes
    and slices keeping the dimension whole, and concatenations along other dimensions. A
    value some reader reads otherwise (across lanes, as the new state) has none."""
    dims = dict(plan.value_lane_dims)
    readers: dict[int, list[Instruction]] = {}
    for inst in plan.body.instructions:
        for operand in inst.operands:
            readers.setdefault(id(operand), []).append(inst)
    readers.setdefault(id(plan.body.root), [])
    for inst in reversed(plan.body.instructions):
        if id(inst) in dims or id(inst) not in plan.lane or inst.shape.is_tuple or \
                inst is plan.body.root:
            continue
        found = {_read_lane_dim(reader, inst, dims) for reader in readers.get(id(inst), ())}
        if len(found) == 1:
            dim = found.pop()
            if dim is not None:
                dims[id(inst)] = dim
    return dims


def _read_lane_dim(reader: Instruction, operand: Instruction, dims: Mapping[int, int]
                   ) -> int | None:
    """The dimension of `operand` holding the lanes where `reader` reads it (None: unknown)."""
    dim = dims.get(id(reader))
    if dim is None:
        return None
    if reader.op.definition.kind is OpKind.ELEMENTWISE:
        return dim if operand.shape.dims == reader.shape.dims else None
    if reader.op is Op.BROADCAST:
        mapping = reader.ints("dimensions")
        return mapping.index(dim) if dim in mapping else None
    if reader.op is Op.SLICE:
        spec = reader.attrs["slice"]
        assert isinstance(spec, tuple)
        whole = operand.shape.dims[dim] == reader.shape.dims[dim]
        return dim if whole and isinstance(spec[dim], SliceDim) and spec[dim].start == 0 else None
    if reader.op is Op.CONCATENATE and reader.ints("dimensions")[0] != dim:
        return dim
    if reader.op is Op.TRANSPOSE:
        return reader.ints("dimensions")[dim]
    if reader.op is Op.DOT:
        return _dot_operand_lane_dim(reader, operand, dim)
    if reader.op in (Op.RESHAPE, Op.BITCAST):
        # The lanes' dimension kept whole, with as many elements before it.
        before = math.prod(reader.shape.dims[:dim])
        for k, size in enumerate(operand.shape.dims):
            if math.prod(operand.shape.dims[:k]) == before and size == reader.shape.dims[dim]:
                return k
    return None


def _dot_operand_lane_dim(dot: Instruction, operand: Instruction, dim: int) -> int | None:
    """The dimension of a product's operand at the product's dimension `dim`: a batch
    dimension, or one of the operand's free dimensions (batch, then the left operand's free,
    then the right's)."""
    sides = [("lhs", dot.operands[0]), ("rhs", dot.operands[1])]
    batch = dot.ints("lhs_batch_dims")
    if not any(o is operand for _, o in sides):
        return None
    found: set[int] = set()
    offset = len(batch)
    for side, value in sides:
        batch_dims = dot.ints(f"{side}_batch_dims")
        free = [k for k in range(value.shape.rank)
                if k not in batch_dims and k not in dot.ints(f"{side}_contracting_dims")]
        if value is operand:
            if dim < len(batch):
                found.add(batch_dims[dim])
            elif offset <= dim < offset + len(free):
                found.add(free[dim - offset])
            else:
                return None
        offset += len(free)
    return found.pop() if len(found) == 1 else None


def _behind_rearranging(value: Instruction) -> Instruction:
    """The value a chain of reshapes, transposes and copies reads."""
    while value.op in _REARRANGING:
        value = value.operands[0]
    return value


def looped_product(plan: LoopPlan, dot: Instruction) -> bool:
    """Whether a per-lane product is computed as a loop nest: one contracting dimension of
    more than LANE_SELECTED_READ positions, no batch dimensions, one operand per lane and
    the other shared by the lanes."""
    if (dot.ints("lhs_batch_dims") or len(dot.ints("lhs_contracting_dims")) != 1
            or id(dot) not in plan.value_lane_dims or not dot.dtype.is_float):
        return False
    lhs, rhs = dot.operands
    if lhs.shape.dims[dot.ints("lhs_contracting_dims")[0]] <= LANE_SELECTED_READ:
        return False
    return (id(lhs) in plan.value_lane_dims) != (id(rhs) in plan.value_lane_dims)


def positions_per_lane(plan: LoopPlan, inst: Instruction,
                       dims: Mapping[int, int] | None = None) -> int:
    """Positions of a lane's part of a value lane code computes (all of a uniform one)."""
    dim = (plan.value_lane_dims if dims is None else dims).get(id(inst))
    if dim is None:
        return inst.shape.num_elements
    return inst.shape.num_elements // max(1, inst.shape.dims[dim])


class MaterializedLanes(LaneCode):
    """The block's scratch of values read at many positions, and the loops computing it."""

    materialized: list[Instruction]
    value_dims: Mapping[int, int]  # by id(), each per-lane value's lane dimension

    def _declare_materialized(self) -> None:
        for k, value in enumerate(self.materialized):
            # Every position is written in every step before lane code reads one.
            self.body.declare(self._register_type(value.dtype), f"v{k}",
                              dims=(positions_per_lane(self.plan, value, self.value_dims),
                                    self.lanes),
                              speculable=True)

    def _materialize(self, k: int, value: Instruction) -> None:
        """The value into its scratch v<k>, a few positions per pass with the lanes inside;
        later reads (the next value's, the lane loops') read the scratch."""
        body = self.body
        dims = value.shape.dims
        dim = self.value_dims[id(value)]
        positions = positions_per_lane(self.plan, value, self.value_dims)
        # A few positions are written out: in a loop over passes, each read of a small array
        # at the pass's position would be a select over its positions.
        written_out = positions <= UNROLL_ELEMENTS
        tile = self._product_tile(value, positions)
        if tile is None:
            together = positions if written_out else \
                next(u for u in (POSITIONS_TOGETHER, 4, 2, 1) if positions % u == 0)
            tile = ProductTile(together, 1)
        looped = 0 if written_out else positions - positions % tile.positions
        if looped:
            q = body.fresh("q")
            with body.cache_scope(), body.loop(q, 0, looped, counter=cir.Special.INT,
                                               step=tile.positions):
                self._materialize_pass(k, value, [
                    cir.Var(q) if u == 0 else Binary("+", cir.Var(q), cir.Int(u))
                    for u in range(tile.positions)], tile.parts)
        # What the loop leaves (or every position, written out): passes at known positions.
        for first in range(looped, positions, tile.positions):
            with body.cache_scope(), body.braces():
                self._materialize_pass(k, value, [
                    cir.Int(u) for u in range(first, min(positions, first + tile.positions))],
                    tile.parts)
        self.lane_em.bindings[id(value)] = self._lane_reader(f"v{k}", value.dtype, dims, dim)

    def _materialize_pass(self, k: int, value: Instruction, at: list[Expr],
                          groups: int) -> None:
        """One pass: the value at positions `at` for every lane, `groups` parts of the block
        an iteration."""
        body, em = self.body, self.lane_em
        dims = value.shape.dims
        dim = self.value_dims[id(value)]
        span = self.lanes // groups
        with self._lane_loop(SIMD) if groups == 1 else \
                body.loop("l", 0, span, SIMD, counter=cir.Special.INT):
            if groups == 1:
                self._declare_lane_index()
            indices = [self._index_at(dims, dim, position) for position in at]
            if value.op is Op.DOT and looped_product(self.plan, value):
                grouped = self._looped_sums(value, indices, groups)
            else:
                grouped = [[em.array_value(value, index) for index in indices]]
            for g, values in enumerate(grouped):
                lane = L if g == 0 else Binary("+", L, cir.Int(g * span))
                for position, computed in zip(at, values):
                    body.assign(cir.load(f"v{k}", position, lane), computed)

    def _product_tile(self, value: Instruction, positions: int) -> ProductTile | None:
        """The register tile of a looped product whose per-lane operand is a materialised
        value (its reads take a part's offset): the one of `best_tile` over the parts the
        block splits into, each keeping MIN_PART_LANES lanes to vectorise over."""
        if value.op is not Op.DOT or not looped_product(self.plan, value):
            return None
        operand = _behind_rearranging(
            next(o for o in value.operands if id(o) in self.plan.value_lane_dims))
        if not any(m is operand for m in self.materialized):
            return None
        most_parts = 1
        while self.lanes % (most_parts * 2) == 0 and \
                self.lanes // (most_parts * 2) >= MIN_PART_LANES:
            most_parts *= 2
        return best_tile(positions, most_parts)

    def _looped_sums(self, dot: Instruction, outputs: list[Index],
                     groups: int = 1) -> list[list[Expr]]:
        """The product at each of `outputs` (the pass's positions of one lane), for each of
        `groups` parts of the block: one sum per position and part, updated in one loop over
        the contracting positions."""
        body, em = self.body, self.lane_em
        lhs, rhs = dot.operands
        lhs_contracting = dot.ints("lhs_contracting_dims")
        rhs_contracting = dot.ints("rhs_contracting_dims")
        n_lhs_free = lhs.shape.rank - 1
        register = self._register_type(dot.dtype)
        fma = self.lang.math("fma", dot.dtype)
        span = self.lanes // groups
        sums = [[body.variable(register, "sum", self.lang.literal(dot.dtype, 0))
                 for _ in outputs] for _ in range(groups)]
        c = body.fresh("c")
        with body.loop(c, 0, lhs.shape.dims[lhs_contracting[0]], counter=cir.Special.INT):
            for g in range(groups):
                # Each part's reads are its own (the same elements at another lane).
                with body.cache_scope():
                    self.lane_offset = g * span
                    try:
                        for total, out in zip(sums[g], outputs):
                            multi = em.multi_of(out)
                            a = em.array_value(lhs, operand_index(
                                lhs.shape.dims, (), lhs_contracting, (),
                                tuple(multi[:n_lhs_free]), (cir.Var(c),)))
                            b = em.array_value(rhs, operand_index(
                                rhs.shape.dims, (), rhs_contracting, (),
                                tuple(multi[n_lhs_free:]), (cir.Var(c),)))
                            body.assign(total, cir.call(fma, a, b, total))
                    finally:
                        self.lane_offset = 0
        return [list(part) for part in sums]
