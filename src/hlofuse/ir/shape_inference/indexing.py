"""Shapes of gather and scatter: index vectors, batching dimensions, windows of the operand."""

from __future__ import annotations

from collections.abc import Sequence

from hlofuse.ir.shape_inference.checks import (
    Attrs,
    Calls,
    ShapeError,
    check_dims,
    check_scalar_computation,
    int_attrs,
    require_array,
)
from hlofuse.ir.shapes import Shape


def _sorted_unique_in_range(dims: tuple[int, ...], rank: int, what: str,
                            need_sorted: bool = True) -> None:
    check_dims(dims, rank, what)
    if need_sorted and list(dims) != sorted(dims):
        raise ShapeError(f"{what} {list(dims)} must be sorted")


def _index_vector(indices: Shape, index_vector_dim: int, op: str) -> tuple[int, list[int]]:
    """(length of the index vectors, the indices' other dimensions = the batch dimensions)."""
    if not indices.dtype.is_integer:
        raise ShapeError(f"{op} indices must be integers, got {indices.text(False)}")
    if not 0 <= index_vector_dim <= indices.rank:
        raise ShapeError(f"{op} index_vector_dim={index_vector_dim} out of range for indices "
                         f"{indices.text(False)} (0..{indices.rank})")
    if index_vector_dim == indices.rank:
        return 1, list(range(indices.rank))
    return (indices.dims[index_vector_dim],
            [d for d in range(indices.rank) if d != index_vector_dim])


def _batching(operand_dims: tuple[int, ...], index_dims: tuple[int, ...], operand: Shape,
              indices: Shape, index_vector_dim: int, names: tuple[str, str], op: str) -> None:
    if len(operand_dims) != len(index_dims):
        raise ShapeError(f"{op} {names[0]}={list(operand_dims)} and {names[1]}="
                         f"{list(index_dims)} must have the same length")
    _sorted_unique_in_range(operand_dims, operand.rank, f"{op} {names[0]}", need_sorted=False)
    check_dims(index_dims, indices.rank, f"{op} {names[1]}")
    if index_vector_dim in index_dims:
        raise ShapeError(f"{op} {names[1]}={list(index_dims)} contains index_vector_dim="
                         f"{index_vector_dim}")
    for a, b in zip(operand_dims, index_dims):
        if operand.dims[a] != indices.dims[b]:
            raise ShapeError(f"{op} batching dimension {a} of the operand (size "
                             f"{operand.dims[a]}) does not match dimension {b} of the indices "
                             f"(size {indices.dims[b]})")


def gather(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
           op: str = "gather") -> Shape:
    operand = require_array(operands[0], "gather operand")
    indices = require_array(operands[1], "gather indices")
    offset_dims = int_attrs(attrs, "offset_dims")
    collapsed = int_attrs(attrs, "collapsed_slice_dims")
    start_index_map = int_attrs(attrs, "start_index_map")
    operand_batching = int_attrs(attrs, "operand_batching_dims")
    indices_batching = int_attrs(attrs, "start_indices_batching_dims")
    slice_sizes = int_attrs(attrs, "slice_sizes")
    ivd = attrs.get("index_vector_dim")
    assert isinstance(ivd, int)
    vector_size, batch_dims = _index_vector(indices, ivd, op)
    if len(slice_sizes) != operand.rank:
        raise ShapeError(f"gather slice_sizes={list(slice_sizes)} must have one entry per "
                         f"operand dimension (rank {operand.rank})")
    for d, (size, bound) in enumerate(zip(slice_sizes, operand.dims)):
        if not 0 <= size <= bound:
            raise ShapeError(f"gather slice_sizes[{d}]={size} out of range for operand "
                             f"{operand.text(False)}")
    if len(start_index_map) != vector_size:
        raise ShapeError(f"gather start_index_map={list(start_index_map)} must have one entry "
                         f"per index vector component ({vector_size})")
    check_dims(start_index_map, operand.rank, "gather start_index_map")
    _sorted_unique_in_range(collapsed, operand.rank, "gather collapsed_slice_dims")
    _batching(operand_batching, indices_batching, operand, indices, ivd,
              ("operand_batching_dims", "start_indices_batching_dims"), op)
    for d in collapsed + operand_batching:
        if slice_sizes[d] > 1:
            raise ShapeError(f"gather collapses or batches operand dimension {d}, so its "
                             f"slice size must be at most 1, got {slice_sizes[d]}")
    overlap = set(collapsed) & set(operand_batching) or set(start_index_map) & set(
        operand_batching)
    if overlap:
        raise ShapeError(f"gather operand_batching_dims={list(operand_batching)} overlaps "
                         f"collapsed_slice_dims or start_index_map at {sorted(overlap)}")
    window = [d for d in range(operand.rank) if d not in collapsed and d not in operand_batching]
    if len(offset_dims) != len(window):
        raise ShapeError(f"gather offset_dims={list(offset_dims)} must have {len(window)} "
                         f"entries (operand rank {operand.rank} minus collapsed and batching "
                         "dimensions)")
    out_rank = len(batch_dims) + len(offset_dims)
    _sorted_unique_in_range(offset_dims, out_rank, "gather offset_dims")
    out: list[int] = []
    window_iter = iter(window)
    batch_iter = iter(batch_dims)
    for i in range(out_rank):
        if i in offset_dims:
            out.append(slice_sizes[next(window_iter)])
        else:
            out.append(indices.dims[next(batch_iter)])
    return Shape.array(operand.dtype, tuple(out))


def scatter(operands: Sequence[Shape], attrs: Attrs, calls: Calls, declared: Shape | None,
            op: str = "scatter") -> Shape:
    if len(operands) < 3 or len(operands) % 2 == 0:
        raise ShapeError(f"scatter takes N operands, the indices and N updates; got "
                         f"{len(operands)} operands")
    n = (len(operands) - 1) // 2
    inputs = [require_array(s, "scatter operand") for s in operands[:n]]
    indices = require_array(operands[n], "scatter indices")
    updates = [require_array(s, "scatter update") for s in operands[n + 1:]]
    first = inputs[0]
    for s in inputs[1:]:
        if s.dims != first.dims:
            raise ShapeError(f"scatter operands {first.text(False)} and {s.text(False)} differ "
                             "in shape")
    for s, upd in zip(inputs, updates):
        if s.dtype != upd.dtype:
            raise ShapeError(f"scatter update {upd.text(False)} must have the element type of "
                             f"its operand {s.text(False)}")
        if upd.dims != updates[0].dims:
            raise ShapeError("scatter updates differ in shape")
    update = updates[0]
    window_dims = int_attrs(attrs, "update_window_dims")
    inserted = int_attrs(attrs, "inserted_window_dims")
    to_operand = int_attrs(attrs, "scatter_dims_to_operand_dims")
    input_batching = int_attrs(attrs, "input_batching_dims")
    indices_batching = int_attrs(attrs, "scatter_indices_batching_dims")
    ivd = attrs.get("index_vector_dim")
    assert isinstance(ivd, int)
    vector_size, batch_dims = _index_vector(indices, ivd, op)
    _sorted_unique_in_range(window_dims, update.rank, "scatter update_window_dims")
    _sorted_unique_in_range(inserted, first.rank, "scatter inserted_window_dims")
    if len(to_operand) != vector_size:
        raise ShapeError(f"scatter scatter_dims_to_operand_dims={list(to_operand)} must have one "
                         f"entry per index vector component ({vector_size})")
    check_dims(to_operand, first.rank, "scatter scatter_dims_to_operand_dims")
    _batching(input_batching, indices_batching, first, indices, ivd,
              ("input_batching_dims", "scatter_indices_batching_dims"), op)
    overlap = set(inserted) & set(input_batching) or set(to_operand) & set(input_batching)
    if overlap:
        raise ShapeError(f"scatter input_batching_dims={list(input_batching)} overlaps "
                         f"inserted_window_dims or scatter_dims_to_operand_dims at "
                         f"{sorted(overlap)}")
    if len(window_dims) + len(inserted) + len(input_batching) != first.rank:
        raise ShapeError(f"scatter update_window_dims ({len(window_dims)}), "
                         f"inserted_window_dims ({len(inserted)}) and input_batching_dims "
                         f"({len(input_batching)}) must add up to the operand rank {first.rank}")
    if update.rank != len(batch_dims) + len(window_dims):
        raise ShapeError(f"scatter update {update.text(False)} must have rank "
                         f"{len(batch_dims) + len(window_dims)} ({len(batch_dims)} scatter and "
                         f"{len(window_dims)} window dimensions)")
    operand_window = [d for d in range(first.rank) if d not in inserted
                      and d not in input_batching]
    for u, d in zip(window_dims, operand_window):
        if update.dims[u] > first.dims[d]:
            raise ShapeError(f"scatter update window dimension {u} (size {update.dims[u]}) is "
                             f"larger than operand dimension {d} (size {first.dims[d]})")
    scatter_dims = [d for d in range(update.rank) if d not in window_dims]
    for u, b in zip(scatter_dims, batch_dims):
        if update.dims[u] != indices.dims[b]:
            raise ShapeError(f"scatter update dimension {u} (size {update.dims[u]}) does not "
                             f"match indices dimension {b} (size {indices.dims[b]})")
    if len(calls) != 1:
        raise ShapeError("scatter needs a to_apply computation")
    scalars = [Shape.scalar(s.dtype) for s in inputs]
    check_scalar_computation(calls[0], scalars * 2,
                             scalars[0] if n == 1 else Shape.tuple_of(scalars), op,
                             "update computation")
    outs = [Shape.array(s.dtype, s.dims) for s in inputs]
    return outs[0] if n == 1 else Shape.tuple_of(outs)
