"""Reference semantics of the indexing, sorting and windowed ops: gather, scatter, sort, topk,
map, reduce-precision, select-and-scatter and convolution (XLA's operation semantics).

Part of the reference interpreter (`interpreter.py` registers `HANDLERS`); kept apart
because these ops have index arithmetic of their own. Simple rather than fast: loops run over index
vectors or window positions, and called computations (scatter's update, sort's comparator,
map's function) are evaluated on whole arrays at once, as the interpreter does for reducers.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from hlofuse.ir.attrs import ConvDimLabels, PaddingDim, Window
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op
from hlofuse.reference.common import (
    Handler,
    InterpreterError,
    Runner,
    Value,
    as_array,
    combine,
    flush_denormals,
    pad_axis,
)

# --- gather and scatter -------------------------------------------------------------------


def _batch_positions(indices: np.ndarray, index_vector_dim: int) -> tuple[list[int], list[int]]:
    """The indices' dimensions other than the index vector's, and their sizes."""
    dims = [d for d in range(indices.ndim) if d != index_vector_dim]
    return dims, [indices.shape[d] for d in dims]


def _index_vector(indices: np.ndarray, index_vector_dim: int, position: tuple[int, ...],
                  batch_dims: list[int]) -> list[int]:
    if index_vector_dim == indices.ndim:
        return [int(indices[position])]
    where: list[int | slice] = [0] * indices.ndim
    for d, p in zip(batch_dims, position):
        where[d] = p
    where[index_vector_dim] = slice(None)
    return [int(v) for v in indices[tuple(where)]]


def _starts(inst: Instruction, operand_dims: Sequence[int], indices: np.ndarray,
            position: tuple[int, ...], batch_dims: list[int], keys: tuple[str, str, str]
            ) -> list[int]:
    """Unclamped start of the slice (or window) for one index vector, in operand dimensions."""
    index_map, operand_batching, indices_batching = (inst.ints(k) for k in keys)
    ivd = inst.attrs["index_vector_dim"]
    assert isinstance(ivd, int)
    vector = _index_vector(indices, ivd, position, batch_dims)
    start = [0] * len(operand_dims)
    for k, d in enumerate(index_map):
        start[d] = vector[k]
    for operand_dim, indices_dim in zip(operand_batching, indices_batching):
        start[operand_dim] = position[batch_dims.index(indices_dim)]
    return start


def _gather(self: Runner, inst: Instruction, ops: list[Value]) -> Value:
    operand, indices = as_array(ops[0]), as_array(ops[1])
    offset_dims = inst.ints("offset_dims")
    collapsed = inst.ints("collapsed_slice_dims")
    operand_batching = inst.ints("operand_batching_dims")
    sizes = inst.ints("slice_sizes")
    ivd = inst.attrs["index_vector_dim"]
    assert isinstance(ivd, int)
    batch_dims, batch_shape = _batch_positions(indices, ivd)
    dropped = tuple(sorted(set(collapsed) | set(operand_batching)))
    out = np.empty(inst.shape.dims, dtype=inst.dtype.numpy)
    out_rank = len(inst.shape.dims)
    for position in np.ndindex(*batch_shape):
        start = _starts(inst, operand.shape, indices, position, batch_dims,
                        ("start_index_map", "operand_batching_dims",
                         "start_indices_batching_dims"))
        # XLA clamps every start so that the whole slice lies inside the operand.
        start = [min(max(s, 0), dim - size) for s, dim, size in zip(start, operand.shape, sizes)]
        piece = operand[tuple(slice(s, s + n) for s, n in zip(start, sizes))]
        piece = piece.reshape([n for d, n in enumerate(sizes) if d not in dropped])
        where: list[int | slice] = []
        batch = iter(position)
        for i in range(out_rank):
            where.append(slice(None) if i in offset_dims else next(batch))
        out[tuple(where)] = piece
    return out


def _scatter(self: Runner, inst: Instruction, ops: list[Value]) -> Value:
    n = (len(ops) - 1) // 2
    outs = [as_array(o).copy() for o in ops[:n]]
    indices = as_array(ops[n])
    updates = [as_array(u) for u in ops[n + 1:]]
    window_dims = inst.ints("update_window_dims")
    inserted = inst.ints("inserted_window_dims")
    input_batching = inst.ints("input_batching_dims")
    ivd = inst.attrs["index_vector_dim"]
    assert isinstance(ivd, int)
    batch_dims, _ = _batch_positions(indices, ivd)
    rank = outs[0].ndim
    operand_window = [d for d in range(rank) if d not in inserted and d not in input_batching]
    window_size = [1] * rank
    for u, d in zip(window_dims, operand_window):
        window_size[d] = updates[0].shape[u]
    scatter_dims = [d for d in range(updates[0].ndim) if d not in window_dims]
    scatter_shape = [updates[0].shape[d] for d in scatter_dims]
    reducer = inst.calls[0]
    for position in np.ndindex(*scatter_shape):
        start = _starts(inst, outs[0].shape, indices, position, batch_dims,
                        ("scatter_dims_to_operand_dims", "input_batching_dims",
                         "scatter_indices_batching_dims"))
        # An update whose window would leave the operand is skipped as a whole (XLA).
        if any(s < 0 or s + w > dim for s, w, dim in zip(start, window_size, outs[0].shape)):
            continue
        where_update: list[int | slice] = [slice(None)] * updates[0].ndim
        for d, p in zip(scatter_dims, position):
            where_update[d] = p
        region = tuple(slice(s, s + w) for s, w in zip(start, window_size))
        values = [u[tuple(where_update)].reshape(window_size) for u in updates]
        current = [o[region] for o in outs]
        combined = combine(self, reducer, current, values)
        for o, c in zip(outs, combined):
            o[region] = np.broadcast_to(c, window_size)
    return outs[0] if n == 1 else tuple(outs)


# --- sort and top-k -----------------------------------------------------------------------


def _comparisons(self: Runner, comparator: Computation, rows: list[np.ndarray]
                 ) -> np.ndarray:
    """less[..., i, j] = comparator(element i, element j) over the last axis, for all pairs."""
    args: list[Value] = []
    for r in rows:
        args += [np.ascontiguousarray(r[..., :, None] + np.zeros_like(r[..., None, :])),
                 np.ascontiguousarray(r[..., None, :] + np.zeros_like(r[..., :, None]))]
    result = self.run(comparator, args)
    if isinstance(result, tuple):
        result = result[0]
    return np.broadcast_to(as_array(result), rows[0].shape + rows[0].shape[-1:]).astype(bool)


def _sort(self: Runner, inst: Instruction, ops: list[Value]) -> Value:
    inputs = [as_array(o) for o in ops]
    axis = inst.ints("dimensions")[0]
    moved = [np.moveaxis(x, axis, -1) for x in inputs]
    length = moved[0].shape[-1]
    if length == 0:
        return inputs[0] if len(inputs) == 1 else tuple(inputs)
    less = _comparisons(self, inst.calls[0], moved)
    # For a strict weak order, an element's place in the stable order is the number of
    # elements before it, plus the equivalent ones to its left. An unstable sort may place
    # equivalent elements anyhow; the stable order is one of the valid answers.
    equivalent = ~less & ~np.swapaxes(less, -1, -2)
    left = np.tril(np.ones((length, length), dtype=bool), k=-1)
    rank = less.sum(axis=-2) + (equivalent & left).sum(axis=-1)
    if not np.array_equal(np.sort(rank, axis=-1),
                          np.broadcast_to(np.arange(length), rank.shape)):
        raise InterpreterError(f"%{inst.name}: the comparator %{inst.calls[0].name} is not a "
                               "strict weak order on these values")
    order = np.argsort(rank, axis=-1)
    outs = [np.ascontiguousarray(np.moveaxis(np.take_along_axis(m, order, axis=-1), -1, axis))
            for m in moved]
    return outs[0] if len(outs) == 1 else tuple(outs)


def _total_order_key(x: np.ndarray) -> np.ndarray:
    """int64 keys ordered as the elements: floats in their total order (-NaN < -inf < ... <
    inf < NaN, as XLA's top-k compares them), unsigned integers by value."""
    if x.dtype.kind == "f" or x.dtype.name == "bfloat16":  # bfloat16's kind is "V"
        bits = x.astype(np.float64).view(np.int64)
        return np.where(bits < 0, np.int64(np.iinfo(np.int64).min) - bits - 1, bits)
    if x.dtype.kind == "u":
        # Unsigned values as int64 with the top bit flipped: u64 above 2^63 stays in order.
        return (x.astype(np.uint64) ^ np.uint64(1 << 63)).view(np.int64)
    return x.astype(np.int64)


def _topk(self: Runner, inst: Instruction, ops: list[Value]) -> Value:
    x = as_array(ops[0])
    k = inst.attrs["k"]
    assert isinstance(k, int)
    largest = inst.attrs.get("largest", True)
    key = _total_order_key(x)
    # Ties keep the lower index first; ~key reverses the order without overflow.
    order = np.argsort(~key if largest else key, axis=-1, kind="stable")[..., :k]
    values = np.take_along_axis(x, order, axis=-1)
    return np.ascontiguousarray(values), np.ascontiguousarray(order.astype(np.int32))


# --- map and reduce-precision -------------------------------------------------------------


def _map(self: Runner, inst: Instruction, ops: list[Value]) -> Value:
    result = self.run(inst.calls[0], list(ops))
    if isinstance(result, tuple):
        result = result[0]
    out = np.broadcast_to(as_array(result), inst.shape.dims)
    return np.ascontiguousarray(out.astype(inst.dtype.numpy))


_FLOAT_LAYOUT = {np.dtype(np.float16): (5, 10, np.uint16), np.dtype(np.float32): (8, 23, np.uint32),
                 np.dtype(np.float64): (11, 52, np.uint64)}


def reduce_precision(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """Round to `mantissa_bits` (nearest, ties to even), then saturate to infinity above and
    flush to zero below the range of `exponent_bits` (XLA's reduce-precision)."""
    if x.dtype.name == "bfloat16":
        wide = reduce_precision(x.astype(np.float32), min(exponent_bits, 8),
                                min(mantissa_bits, 7))
        return wide.astype(x.dtype)
    src_exponent, src_mantissa, uint = _FLOAT_LAYOUT[x.dtype]
    bits = x.view(uint).astype(np.uint64)
    total = x.dtype.itemsize * 8
    mask = np.uint64((1 << total) - 1)
    if mantissa_bits < src_mantissa:
        shift = src_mantissa - mantissa_bits
        last_bit = np.uint64(1 << shift)
        bias = (bits & last_bit) >> np.uint64(shift)
        bias = bias + np.uint64((1 << (shift - 1)) - 1)
        bits = ((bits + bias) & ~(last_bit - np.uint64(1))) & mask
    if exponent_bits < src_exponent:
        sign = np.uint64(1 << (total - 1))
        exponent_mask = np.uint64(((1 << src_exponent) - 1) << src_mantissa)
        exponent_bias = (1 << (src_exponent - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        exponent = bits & exponent_mask
        overflow = exponent > np.uint64((exponent_bias + reduced_bias) << src_mantissa)
        underflow = exponent <= np.uint64((exponent_bias - reduced_bias) << src_mantissa)
        signed_zero = bits & sign
        bits = np.where(overflow, signed_zero | exponent_mask,
                        np.where(underflow, signed_zero, bits))
    result = bits.astype(uint).view(x.dtype).reshape(x.shape)
    if mantissa_bits > 0:
        result = np.where(np.isnan(x), x, result)
    else:  # no mantissa left to keep a NaN: XLA makes it an infinity's pattern with a bit set
        result = np.where(np.isnan(x), np.array(np.nan, x.dtype), result)
    return np.asarray(result, dtype=x.dtype)


def _reduce_precision(self: Runner, inst: Instruction, ops: list[Value]) -> Value:
    exponent, mantissa = inst.attrs["exponent_bits"], inst.attrs["mantissa_bits"]
    assert isinstance(exponent, int) and isinstance(mantissa, int)
    return reduce_precision(as_array(ops[0]), exponent, mantissa)


# --- select-and-scatter and convolution ---------------------------------------------------


def _window_positions(dims: Sequence[int], window: Window) -> tuple[int, ...]:
    out = []
    for axis, size in enumerate(dims):
        padded = size + window.pad_low[axis] + window.pad_high[axis]
        extent = (window.size[axis] - 1) * window.rhs_dilate[axis] + 1
        out.append(0 if padded < extent else (padded - extent) // window.stride[axis] + 1)
    return tuple(out)


def _select_and_scatter(self: Runner, inst: Instruction, ops: list[Value]) -> Value:
    x, source, init = as_array(ops[0]), as_array(ops[1]), as_array(ops[2])
    window = inst.attrs["window"]
    assert isinstance(window, Window)
    select, scatter = inst.calls
    out = np.array(np.broadcast_to(init, x.shape), dtype=inst.dtype.numpy)
    positions = _window_positions(x.shape, window)
    for where in np.ndindex(*positions):
        chosen: tuple[int, ...] | None = None
        chosen_value: np.ndarray | None = None
        for offset in np.ndindex(*window.size):
            element = tuple(w * window.stride[a] + o * window.rhs_dilate[a] - window.pad_low[a]
                            for a, (w, o) in enumerate(zip(where, offset)))
            if any(not 0 <= e < n for e, n in zip(element, x.shape)):
                continue  # padding is never selected
            value = x[element]
            if chosen_value is not None:
                keep = self.run(select, [np.asarray(chosen_value), np.asarray(value)])
                if bool(as_array(keep)):
                    continue
            chosen, chosen_value = element, value
        if chosen is None:
            continue
        combined = self.run(scatter, [np.asarray(out[chosen]), np.asarray(source[where])])
        out[chosen] = as_array(combined)
    return out


def _convolution(self: Runner, inst: Instruction, ops: list[Value]) -> Value:
    labels = inst.attrs["dim_labels"]
    assert isinstance(labels, ConvDimLabels)
    spatial = labels.spatial_rank
    window = inst.attrs.get("window", Window.of((1,) * spatial))
    assert isinstance(window, Window)
    groups = inst.attrs.get("feature_group_count", 1)
    batch_groups = inst.attrs.get("batch_group_count", 1)
    assert isinstance(groups, int) and isinstance(batch_groups, int)
    dtype = inst.dtype.numpy
    accumulate = np.float64 if np.dtype(dtype).kind == "f" else np.int64
    # Canonical layouts: input [b, f, s...], kernel [o, i, s...], output [b, f, s...].
    lhs = np.transpose(as_array(ops[0]),
                       (labels.input_batch, labels.input_feature) + labels.input_spatial)
    rhs = np.transpose(as_array(ops[1]), (labels.kernel_output_feature,
                                        labels.kernel_input_feature) + labels.kernel_spatial)
    lhs, rhs = lhs.astype(accumulate), rhs.astype(accumulate)
    zero = np.zeros((), accumulate)
    for axis in range(spatial):
        p = PaddingDim(window.pad_low[axis], window.pad_high[axis], window.lhs_dilate[axis] - 1)
        lhs = pad_axis(lhs, axis + 2, p, zero)
    out_spatial = _window_positions(lhs.shape[2:], Window(
        window.size, window.stride, (0,) * spatial, (0,) * spatial, (1,) * spatial,
        window.rhs_dilate))
    batch, features = lhs.shape[0], lhs.shape[1]
    kernel_out = rhs.shape[0]
    out = np.zeros((batch // batch_groups, kernel_out) + out_spatial, dtype=accumulate)
    out_per_group = kernel_out // max(groups, batch_groups)
    in_per_group = features // groups
    batch_per_group = batch // batch_groups
    for g in range(max(groups, batch_groups)):
        kernel = rhs[g * out_per_group:(g + 1) * out_per_group]
        if groups > 1:
            source = lhs[:, g * in_per_group:(g + 1) * in_per_group]
        elif batch_groups > 1:
            source = lhs[g * batch_per_group:(g + 1) * batch_per_group]
        else:
            source = lhs
        total = np.zeros((source.shape[0], kernel.shape[0]) + out_spatial, dtype=accumulate)
        for offset in itertools.product(*(range(k) for k in window.size)):
            index = (slice(None), slice(None)) + tuple(
                slice(o * window.rhs_dilate[a],
                      o * window.rhs_dilate[a] + (out_spatial[a] - 1) * window.stride[a] + 1,
                      window.stride[a]) if out_spatial[a] else slice(0, 0)
                for a, o in enumerate(offset))
            taps = kernel[(slice(None), slice(None)) + offset]  # [o, i]
            total += np.einsum("bi...,oi->bo...", source[index], taps)
        out[:, g * out_per_group:(g + 1) * out_per_group] = total
    result = np.moveaxis(out, range(spatial + 2),
                         (labels.output_batch, labels.output_feature) + labels.output_spatial)
    with np.errstate(all="ignore"):
        cast = np.ascontiguousarray(result.astype(dtype))
    return flush_denormals(cast)


HANDLERS: dict[Op, Handler] = {
    Op.CONVOLUTION: _convolution,
    Op.GATHER: _gather,
    Op.MAP: _map,
    Op.REDUCE_PRECISION: _reduce_precision,
    Op.SCATTER: _scatter,
    Op.SELECT_AND_SCATTER: _select_and_scatter,
    Op.SORT: _sort,
    Op.TOPK: _topk,
}
