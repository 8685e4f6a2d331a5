"""Code for gather (an index map, as XLA's elemental gather) and scatter (a sequential update
loop over a copy of the operand, as XLA's scatter emitter).

Gather reads one operand element per result element: the result position splits into a batch
part (which index vector) and an offset part (where inside the slice); starts are clamped so
that the whole slice lies inside the operand. Scatter copies its operands to the outputs, then
visits every update element in order: an update whose window would leave the operand is
skipped as a whole, the others are combined into the output by the update computation, which
the elemental emitter inlines (add, multiply, min, max, or, and, replace are single
instructions there; any other scalar computation is emitted the same way).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hlofuse.codegen import cir
from hlofuse.codegen.cir import Binary, Cast, Expr, Select
from hlofuse.codegen.emitter_types import (
    SCALAR,
    Binding,
    Index,
    UnsupportedInstruction,
    Value,
    conjunction,
    selected,
)
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op

if TYPE_CHECKING:
    from hlofuse.codegen.elemental import ElementalEmitter
    from hlofuse.codegen.kernel import KernelEmitter


def _optional(inst: Instruction, name: str) -> tuple[int, ...]:
    return inst.ints(name) if inst.attrs.get(name) is not None else ()


def _index_vector_dim(inst: Instruction) -> int:
    ivd = inst.attrs["index_vector_dim"]
    assert isinstance(ivd, int)
    return ivd


def _start_component(em: ElementalEmitter, indices: Instruction, ivd: int,
                     batch: tuple[Expr, ...], k: int) -> Expr:
    """Component `k` of the index vector at batch position `batch`, widened to int64."""
    dims = indices.shape.dims
    multi = list(batch)
    if ivd < len(dims):
        multi.insert(ivd, cir.Int(k))
    value = em.array_value(indices, Index(dims, None, tuple(multi), None))
    if indices.dtype.is_unsigned_int and indices.dtype.bits == 64:
        # Beyond int64's range is out of range anyway: saturate so the bounds tests see it.
        value = Select(Binary(">", value, Cast(DType.U64, cir.Int(2**62))), cir.Int(2**62),
                       value)
    return Cast(DType.S64, value)


def gather(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand, indices = inst.operands
    offset_dims = inst.ints("offset_dims")
    collapsed = inst.ints("collapsed_slice_dims")
    start_map = inst.ints("start_index_map")
    operand_batching = _optional(inst, "operand_batching_dims")
    indices_batching = _optional(inst, "start_indices_batching_dims")
    sizes = inst.ints("slice_sizes")
    ivd = _index_vector_dim(inst)
    multi = em.multi_of(index)
    batch = tuple(m for d, m in enumerate(multi) if d not in offset_dims)
    offsets = iter(m for d, m in enumerate(multi) if d in offset_dims)
    dropped = set(collapsed) | set(operand_batching)
    # The batch position as indices' dimensions (the index vector's dimension left out).
    indices_batch_dims = [d for d in range(indices.shape.rank) if d != ivd]
    operand_dims = operand.shape.dims
    operand_multi: list[Expr] = []
    computed_starts: list[tuple[int, Expr, int]] = []  # (dimension, start, highest start)
    for d, (dim, size) in enumerate(zip(operand_dims, sizes)):
        offset: Expr = cir.Int(0) if d in dropped else next(offsets)
        if d in operand_batching:
            indices_dim = indices_batching[operand_batching.index(d)]
            start: Expr = batch[indices_batch_dims.index(indices_dim)]
        elif d in start_map:
            high = dim - size
            if high <= 0:
                start = cir.Int(0)
            else:
                raw = em.body.let(cir.INDEX,
                                  _start_component(em, indices, ivd, batch, start_map.index(d)),
                                  "s")
                clamped = Select(Binary("<", raw, cir.Int(0)), cir.Int(0),
                                 Select(Binary(">", raw, cir.Int(high)), cir.Int(high), raw))
                start = em.body.let(em.lang.index_type, clamped, "s")
                if cir.folded_int(start) is None:
                    computed_starts.append((d, start, high))
        else:
            start = cir.Int(0)
        operand_multi.append(em.index_let(cir.add(offset, start)))
    if _selects_over_starts(em, operand, computed_starts):
        (d, start, high), = computed_starts
        offset = cir.sub(operand_multi[d], start)
        values = []
        for k in range(high + 1):
            at = operand_multi[:d] + [em.index_let(cir.add(offset, cir.Int(k)))] + \
                operand_multi[d + 1:]
            values.append(em.array_value(operand, Index(operand_dims, None, tuple(at), None)))
        return em.body.let(em.lang.register_type(inst.dtype), selected(start, values))
    return em.value(operand, Index(operand_dims, None, tuple(operand_multi), None))


def _selects_over_starts(em: ElementalEmitter, operand: Instruction,
                         computed_starts: list[tuple[int, Expr, int]]) -> bool:
    """Whether lane code reads a gather's computed operand at each start the index may take
    and selects (one dimension's start computed, few starts): read at the computed start
    itself, the operand's computation would index by it, with a branch wherever a padding or
    a window test depends on it, and a search reading it at several starts (searchsorted's
    bisection of a cumulative sum) would compute it again at each. Selected, each position
    is computed once and the lane loop stays a vector loop. Constants and values lane code
    keeps in arrays have reads of their own at computed positions."""
    if len(computed_starts) != 1 or em.selected_constant_reads <= 0:
        return False
    _, _, high = computed_starts[0]
    return (operand.op not in (Op.CONSTANT, Op.PARAMETER) and id(operand) not in em.bindings
            and high + 1 <= em.selected_constant_reads)


def emit_scatter(k: KernelEmitter, inst: Instruction, targets: list[str]) -> None:
    """`targets` receive the scatter's results (one per operand)."""
    n = (len(inst.operands) - 1) // 2
    operands = inst.operands[:n]
    indices = inst.operands[n]
    updates = inst.operands[n + 1:]
    em = k.em
    dims = operands[0].shape.dims
    k.layout_depends_on_aliasing = True
    for operand, target in zip(operands, targets):
        if k.arg_pointer.get(id(operand)) != target:  # not already the output's buffer
            k.loop(dims, [(k.element(operand), target, operand.dtype, None)], parallel=True)
    window_dims = inst.ints("update_window_dims")
    inserted = inst.ints("inserted_window_dims")
    to_operand = inst.ints("scatter_dims_to_operand_dims")
    input_batching = _optional(inst, "input_batching_dims")
    indices_batching = _optional(inst, "scatter_indices_batching_dims")
    ivd = _index_vector_dim(inst)
    update_dims = updates[0].shape.dims
    count = 1
    for d in update_dims:
        count *= d
    if count == 0:
        return
    window_of = [d for d in range(len(dims)) if d not in inserted and d not in input_batching]
    window_size = [1] * len(dims)
    for u, d in zip(window_dims, window_of):
        window_size[d] = update_dims[u]
    indices_batch_dims = [d for d in range(indices.shape.rank) if d != ivd]
    computation = inst.calls[0]
    root = computation.root
    if any(leaf.dims for leaf in root.shape.leaves()):
        raise UnsupportedInstruction(
            f"%{inst.name}: the update computation %{computation.name} must return scalars")
    var = k.body.fresh("u")
    # Updates are applied in order: later ones see earlier ones (a sequential loop).
    with k.body.loop(var, 0, count):
        with k.body.cache_scope():
            em._no_hoist += 1
            try:
                u_multi = em.multi_of(Index(update_dims, cir.Var(var), None, None))
                scatter_position = tuple(m for d, m in enumerate(u_multi) if d not in window_dims)
                window_position = iter(m for d, m in enumerate(u_multi) if d in window_dims)
                conditions: list[Expr] = []
                operand_multi: list[Expr] = []
                for d, dim in enumerate(dims):
                    offset: Expr = next(window_position) if d in window_of else cir.Int(0)
                    if d in input_batching:
                        indices_dim = indices_batching[input_batching.index(d)]
                        start: Expr = scatter_position[indices_batch_dims.index(indices_dim)]
                    elif d in to_operand:
                        start = em.body.let(cir.INDEX, _start_component(
                            em, indices, ivd, scatter_position, to_operand.index(d)), "s")
                        # 0 <= start <= dim - window, as one unsigned comparison.
                        conditions.append(Binary("<=", Cast(DType.U64, start),
                                                 Cast(DType.U64, cir.Int(dim - window_size[d]))))
                    else:
                        start = cir.Int(0)
                    operand_multi.append(em.index_let(cir.add(offset, start)))
                u_index = Index(update_dims, cir.Var(var), u_multi, None)
                values = [em.array_value(update, u_index) for update in updates]
                position = em.linear_of(Index(dims, None, tuple(operand_multi), None))
                guard = conjunction(conditions) if conditions else None
                with k.body.if_(guard) if guard is not None else k.body.braces():
                    current = [em.load(o.dtype, cir.Var(t), Index(dims, position, None, None))
                               for o, t in zip(operands, targets)]
                    combined = em.apply_reducer(computation, current, values)
                    for operand, target, value in zip(operands, targets, combined):
                        stored = em.lang.to_storage(operand.dtype, value)
                        k.body.assign(cir.load(target, position), stored)
            finally:
                em._no_hoist -= 1


def map_(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    """map applies its scalar computation to the operands' elements at the same position."""
    computation = inst.calls[0]
    depth = em._no_hoist

    def operand_at(operand: Instruction) -> Binding:
        def evaluate(_: Index) -> Value:
            saved = em._no_hoist
            em._no_hoist = depth  # the operands are outside the computation: they may hoist
            try:
                return em.value(operand, index if operand.shape.dims else SCALAR)
            finally:
                em._no_hoist = saved
        return evaluate

    result = em.apply(computation, [operand_at(o) for o in inst.operands])
    if not isinstance(result, Expr):
        raise UnsupportedInstruction(
            f"%{inst.name}: the map computation %{computation.name} must return one scalar")
    return result


# An element of a scatter computed on its own visits every update that may land on it; beyond
# this many per element the scatter is left to its kernel (emit_scatter).
ELEMENTAL_SCATTER_MAX_UPDATES = 16


def scatter(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    """One element of a scatter's result: computed whole by its kernel where the kernel can
    materialize values; else (the lane code of a whole-loop kernel) as the operand's element
    combined, in order, with every update landing on it. Updates paired with the element by
    batching dimensions are the element's own lane's; the others are enumerated."""
    if em.materialize is not None:
        from hlofuse.codegen.reductions_elemental import materialized

        return materialized(em, inst, index)
    n = (len(inst.operands) - 1) // 2
    operands, indices, updates = inst.operands[:n], inst.operands[n], inst.operands[n + 1:]
    dims = operands[0].shape.dims
    window_dims = inst.ints("update_window_dims")
    inserted = inst.ints("inserted_window_dims")
    to_operand = inst.ints("scatter_dims_to_operand_dims")
    input_batching = _optional(inst, "input_batching_dims")
    indices_batching = _optional(inst, "scatter_indices_batching_dims")
    ivd = _index_vector_dim(inst)
    update_dims = updates[0].shape.dims
    scatter_dims = [d for d in range(len(update_dims)) if d not in window_dims]
    indices_batch_dims = [d for d in range(indices.shape.rank) if d != ivd]
    window_of = [d for d in range(len(dims)) if d not in inserted and d not in input_batching]
    window_size = [1] * len(dims)
    for u, d in zip(window_dims, window_of):
        window_size[d] = update_dims[u]
    multi = em.multi_of(index)
    # Scatter dimensions fixed by the element (batching pairs) and the ones to enumerate.
    fixed: dict[int, Expr] = {}
    for d, indices_dim in zip(input_batching, indices_batching):
        fixed[scatter_dims[indices_batch_dims.index(indices_dim)]] = multi[d]
    free = [d for d in scatter_dims if d not in fixed]
    count = 1
    for d in free:
        count *= update_dims[d]
    if count > ELEMENTAL_SCATTER_MAX_UPDATES:
        raise UnsupportedInstruction(
            f"%{inst.name}: scatter of {count} updates per element inside a loop kernel "
            f"(at most {ELEMENTAL_SCATTER_MAX_UPDATES})")
    values: list[Expr] = [em.array_value(o, index) for o in operands]
    positions: list[dict[int, int]] = [{}]
    for d in free:
        positions = [{**p, d: k} for p in positions for k in range(update_dims[d])]
    for position in positions:  # in order: later updates combine with earlier results
        scatter_position = tuple(cir.Int(position[d]) if d in position else fixed[d]
                                 for d in scatter_dims)
        conditions: list[Expr] = []
        window: dict[int, Expr] = {}
        for d, dim in enumerate(dims):
            if d not in to_operand:
                continue
            component = _start_component(em, indices, ivd, scatter_position,
                                         to_operand.index(d))
            known = cir.folded_int(component)
            start = (cir.Int(known) if known is not None
                     else em.body.let(cir.INDEX, component, "s"))
            conditions.append(Binary("<=", Cast(DType.U64, start),
                                     Cast(DType.U64, cir.Int(dim - window_size[d]))))
            if d in inserted:
                conditions.append(Binary("==", multi[d], start))
            else:
                offset = em.index_let(cir.sub(multi[d], start))
                conditions.append(Binary("<", Cast(DType.U64, offset),
                                         Cast(DType.U64, cir.Int(window_size[d]))))
                window[d] = offset
        update_multi: list[Expr] = [cir.Int(0)] * len(update_dims)
        for d, s in zip(scatter_dims, scatter_position):
            update_multi[d] = s
        for u, d in zip(window_dims, window_of):
            update_multi[u] = window.get(d, multi[d])
        update_index = Index(update_dims, None, tuple(update_multi), None)
        guard = conjunction(conditions) if conditions else cir.Const(DType.PRED, 1)
        if cir.folded_int(guard) == 0:
            continue  # a constant index that never reaches this element
        values = [_updated(em, inst, guard, values, update_index, k) for k in range(n)]
    if n == 1:
        return values[0]
    return tuple(values)


def _updated(em: ElementalEmitter, inst: Instruction, guard: Expr, current: list[Expr],
             update_index: Index, k: int) -> Expr:
    """Operand k's element after one update: combined where `guard` holds, else kept."""
    n = (len(inst.operands) - 1) // 2

    def combined() -> Expr:
        updates = [em.array_value(u, update_index) for u in inst.operands[n + 1:]]
        return em.apply_reducer(inst.calls[0], current, updates)[k]

    if cir.folded_int(guard) == 1:
        return combined()
    return em.branch(inst.operands[k].dtype, guard, combined, lambda: current[k])
