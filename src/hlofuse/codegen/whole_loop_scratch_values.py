"""Which per-lane values a whole-loop step computes once into the block's scratch.

Lane code computes a value where it is read. A product's operand is read once for every
position of the product (a policy network's hidden layer of 64 values, read by each of the
next layer's 64 positions), and the products themselves; those are computed once per step
into scratch, in loops of their own, before the step's lane loops (`_product_values`). Those
loops, and nested loops, split the step into several lane loops, each computing what it reads
that is not in scratch, so a value several of them read is kept there too (`_shared_values`).
Values that do not depend on the state carry no lane dimension from the loop's analysis;
`value_lane_dims` finds it from their readers.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

from hlofuse.analysis.graph import users
from hlofuse.analysis.parallel_loop import LoopPlan
from hlofuse.analysis.rare_selects import FREE_OPS
from hlofuse.codegen.emitter_types import UNROLL_ELEMENTS, WRITE_OUT_BUDGET
from hlofuse.ir.attrs import SliceDim
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import CostClass, Op, OpKind

# A per-lane product of more contracting positions than this is computed by a loop over them
# into scratch, a register tile of sums a pass (`looped_product`). Written out, each of a
# pass's positions is a chain of multiply-adds whose weights gcc hoists out of the lane loop
# and spills once a pass needs more of them than there are registers (8 positions of 32
# terms: 256 weights); a few terms (a policy's observation of 2 to 6 values) stay written out.
LOOPED_MIN_CONTRACTING = 8
# Ops that only rearrange positions: the value behind them is the one worth keeping.
_REARRANGING = frozenset({Op.RESHAPE, Op.BITCAST, Op.TRANSPOSE, Op.COPY})
# Values that cost nothing to read again (or are read from memory already).
FREE_TO_READ = frozenset({Op.CONSTANT, Op.IOTA, Op.BROADCAST, Op.PARAMETER, Op.GET_TUPLE_ELEMENT})
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
    chosen |= _reduced_values(plan, dims, chosen)
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
        looped = looped_product(plan, inst)
        if looped:
            chosen.add(id(inst))
        many_outputs = positions_per_lane(plan, inst) > 1
        for operand in inst.operands:
            value = behind_rearranging(operand)
            if id(value) not in plan.lane or value.op in FREE_TO_READ or \
                    id(value) not in plan.value_lane_dims:
                continue
            positions = positions_per_lane(plan, value)
            # A looped product reads its operand at the loop's position: a plain load from
            # scratch, where computed in place it would be a select over the positions.
            if positions > 1 and (many_outputs or looped or positions > UNROLL_ELEMENTS):
                chosen.add(id(value))
    return chosen


def _reduced_values(plan: LoopPlan, dims: Mapping[int, int], products: set[int]) -> set[int]:
    """The computed per-lane values a reduction reads at several positions a lane whose
    positions, written out, would cost more than WRITE_OUT_BUDGET operations (a categorical
    draw over a board's 64 cells: a Threefry evaluation and two logarithms per cell). Lane
    code writes a reduction over a few positions out, each position's value computed where it
    is read; kept in scratch, the value is computed in a loop over its positions instead, and
    the reduction reads it from there. `products`: the values kept for products."""
    chosen: set[int] = set()
    readers = users(plan.body)
    for inst in plan.body.instructions:
        if inst.op is not Op.REDUCE or id(inst) not in plan.lane:
            continue
        for operand in inst.operands[:len(inst.operands) // 2]:
            value = behind_rearranging(operand)
            if id(value) not in plan.lane or value.op in FREE_TO_READ or id(value) not in dims:
                continue
            if positions_per_lane(plan, value, dims) <= 1:
                continue
            if _written_out_operations(plan, value, chosen | products, dims,
                                       readers) > WRITE_OUT_BUDGET:
                chosen.add(id(value))
    return chosen


def _written_out_operations(plan: LoopPlan, inst: Instruction, stops: set[int],
                            dims: Mapping[int, int],
                            readers: Mapping[Instruction, list[Instruction]]) -> int:
    """The operations lane code spends on the positions of a lane's part of `inst` alone,
    written out: each value only `inst` reads (directly or through others only it reads;
    `readers`: each body value's users), once per position, from what is in scratch
    (`stops`). Values other code reads are computed at their positions anyway."""
    own = {id(inst)}
    count = 0
    # Body order is a topological order: a value's users come after it.
    for x in reversed(plan.body.instructions):
        if x is not inst:
            read_by = readers.get(x, [])
            if id(x) in stops or id(x) not in plan.lane or not read_by or \
                    not all(id(u) in own for u in read_by):
                continue
        own.add(id(x))
        if x.op not in FREE_OPS and not x.shape.is_tuple:
            positions = positions_per_lane(plan, x, dims) if id(x) in dims else \
                x.shape.num_elements // (plan.size if plan.size in x.shape.dims else 1)
            count += positions * _OPERATIONS.get(x.op.definition.cost, 1)
    return count


def _operations(plan: LoopPlan, inst: Instruction, stops: set[int], enough: int) -> int:
    """The operations lane code computes `inst` with, from what is in scratch (`stops`),
    counted up to `enough`."""
    count = 0
    seen: set[int] = set()
    stack = [inst]
    while stack and count < enough:
        x = stack.pop()
        if id(x) in seen or id(x) not in plan.lane or (x is not inst and id(x) in stops):
            continue
        seen.add(id(x))
        if x.op not in FREE_OPS:
            count += _OPERATIONS.get(x.op.definition.cost, 1)
        stack.extend(x.operands)
    return count


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
        # (A value kept in scratch that is also the new state is its own loop's and the
        # main loop's root: counted twice, but already kept.)
        shared = [inst for inst in instructions if readers[id(inst)] > 1
                  and id(inst) not in chosen and id(inst) not in avoided
                  and _worth_keeping(plan, inst, stops, dims)]
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
    own = {id(root) for root in roots}
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        x = stack.pop()
        if id(x) in seen or id(x) not in plan.lane:
            continue
        seen.add(id(x))
        if id(x) in stops and id(x) not in own:
            continue
        stack.extend(kept.get(id(x), x.operands))
    return {key for key in seen if key not in stops or key in own}


def _worth_keeping(plan: LoopPlan, inst: Instruction, stops: set[int],
                   dims: Mapping[int, int]) -> bool:
    """A per-lane array value whose computation from what is already read costs more than
    keeping it, of at most SHARED_MAX_POSITIONS positions a lane."""
    if inst.op in FREE_OPS or inst.shape.is_tuple or id(inst) not in dims:
        return False
    if positions_per_lane(plan, inst, dims) > SHARED_MAX_POSITIONS:
        return False
    return _operations(plan, inst, stops, SHARED_MIN_OPERATIONS) >= SHARED_MIN_OPERATIONS


def value_lane_dims(plan: LoopPlan) -> dict[int, int]:
    """By id(), the dimension holding the lanes of each per-lane value of lane code: as the
    analysis recorded it for the values depending on the state, and for the others (a step's
    draws, computed from the step's key and the lane's position) the dimension at which every
    reader holds the lanes, read through element-wise ops, broadcasts, transposes, reshapes
    and slices keeping the dimension whole, and concatenations along other dimensions. A
    value some reader reads otherwise (across lanes, as the new state) has none."""
    dims = dict(plan.value_lane_dims)
    readers = users(plan.body)
    for inst in reversed(plan.body.instructions):
        if id(inst) in dims or id(inst) not in plan.lane or inst.shape.is_tuple or \
                inst is plan.body.root:
            continue
        found = {_read_lane_dim(reader, inst, dims) for reader in readers.get(inst, ())}
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


def behind_rearranging(value: Instruction) -> Instruction:
    """The value a chain of reshapes, transposes and copies reads."""
    while value.op in _REARRANGING:
        value = value.operands[0]
    return value


def looped_product(plan: LoopPlan, dot: Instruction) -> bool:
    """Whether a per-lane product is computed as a loop nest: one contracting dimension of
    more than LOOPED_MIN_CONTRACTING positions, no batch dimensions, one operand per lane
    and the other shared by the lanes. Such a product is computed once per step into
    scratch (`_product_values`), whoever reads it and however (the gates of a recurrent
    cell read theirs through slices of one product)."""
    if (dot.ints("lhs_batch_dims") or len(dot.ints("lhs_contracting_dims")) != 1
            or id(dot) not in plan.value_lane_dims or not dot.dtype.is_float):
        return False
    lhs, rhs = dot.operands
    if lhs.shape.dims[dot.ints("lhs_contracting_dims")[0]] <= LOOPED_MIN_CONTRACTING:
        return False
    return (id(lhs) in plan.value_lane_dims) != (id(rhs) in plan.value_lane_dims)


def positions_per_lane(plan: LoopPlan, inst: Instruction,
                       dims: Mapping[int, int] | None = None) -> int:
    """Positions of a lane's part of a value lane code computes (all of a uniform one)."""
    dim = (plan.value_lane_dims if dims is None else dims).get(id(inst))
    if dim is None:
        return inst.shape.num_elements
    return inst.shape.num_elements // max(1, inst.shape.dims[dim])
