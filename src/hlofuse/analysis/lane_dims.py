"""How the lane dimension of a per-lane value moves through each op.

Part of the parallel-loop analysis (parallel_loop.py): given the lane dimension of an
instruction's state-dependent operands (None for the others), `value_lane_dim` gives the
dimension of its result that holds the lanes, or `Mixed` when the op moves values between
lanes (the op, the refusal's rule id and why). Element-wise ops keep the dimension,
broadcast and transpose move it, reshape keeps it where the elements before and after it are
unchanged; slice, pad, reverse, concatenate, dynamic-(update-)slice, reduce and reduce-window
keep it where they leave that dimension whole.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from hlofuse.analysis.lane_linalg import batch_rank, lane_linalg_routine
from hlofuse.ir.attrs import PaddingDim, SliceDim, Window
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op

CROSS_LANE_REDUCE = "whole-loop-cross-lane-reduce"
CROSS_LANE_ACCESS = "whole-loop-cross-lane-access"


@dataclass(frozen=True, slots=True)
class Mixed:
    """A state-dependent value whose elements mix lanes: the op that did it, and why."""

    rule: str
    instruction: Instruction
    message: str


LaneDim = int | Mixed | tuple["LaneDim | None", ...]
Rule = Callable[[int, Instruction, "list[LaneDim | None]"], LaneDim]


def value_lane_dim(size: int, inst: Instruction, operand_lanes: list[LaneDim | None]) -> LaneDim:
    """The lane dimension of `inst`'s result (N = `size` > 1 lanes)."""
    for lane_at in operand_lanes:
        if isinstance(lane_at, Mixed):
            return lane_at
    if inst.op is Op.TUPLE:
        return tuple(operand_lanes)
    if inst.op is Op.GET_TUPLE_ELEMENT:
        source = operand_lanes[0]
        assert source is not None
        if isinstance(source, tuple):
            position = inst.attrs["index"]
            assert isinstance(position, int)
            picked = source[position]
            assert picked is not None
            return picked
        return source
    return _RULES.get(inst.op, _elementwise_lanes)(size, inst, operand_lanes)


def _single(size: int, inst: Instruction, operand_lanes: list[LaneDim | None]) -> int | Mixed:
    """The one lane dimension of the state-dependent operands."""
    dims = {lane_at for lane_at in operand_lanes if lane_at is not None}
    if len(dims) != 1:
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} ({inst.op.text}) combines values whose lanes lie "
                     "along different dimensions")
    (lane_at,) = dims
    assert isinstance(lane_at, int)
    return lane_at


def _elementwise_lanes(size: int, inst: Instruction,
                     operand_lanes: list[LaneDim | None]) -> LaneDim:
    lane_at = _single(size, inst, operand_lanes)
    if isinstance(lane_at, Mixed):
        return lane_at
    for operand, operand_dim in zip(inst.operands, operand_lanes):
        if operand_dim is None:
            continue
        if lane_at >= inst.shape.rank or operand.shape.dims[lane_at] != inst.shape.dims[lane_at]:
            return Mixed(CROSS_LANE_ACCESS, inst,
                         f"%{inst.name} ({inst.op.text}) reshapes the lane dimension")
    return lane_at


def _broadcast_lanes(size: int, inst: Instruction,
                   operand_lanes: list[LaneDim | None]) -> LaneDim:
    lane_at = operand_lanes[0]
    assert isinstance(lane_at, int)
    return inst.ints("dimensions")[lane_at]


def _transpose_lanes(size: int, inst: Instruction,
                   operand_lanes: list[LaneDim | None]) -> LaneDim:
    lane_at = operand_lanes[0]
    assert isinstance(lane_at, int)
    return inst.ints("dimensions").index(lane_at)


def _reshape_lanes(size: int, inst: Instruction,
                 operand_lanes: list[LaneDim | None]) -> LaneDim:
    lane_at = operand_lanes[0]
    assert isinstance(lane_at, int)
    source, target = inst.operands[0].shape.dims, inst.shape.dims
    outer, inner = math.prod(source[:lane_at]), math.prod(source[lane_at + 1:])
    for d, dim in enumerate(target):
        # The lanes' dimension, with the same elements before and after it (the
        # products alone would also match around a zero-size dimension).
        if dim == size and math.prod(target[:d]) == outer and math.prod(target[d + 1:]) == inner:
            return d
    return Mixed(CROSS_LANE_ACCESS, inst,
                 f"%{inst.name} (reshape {list(source)} -> {list(target)}) merges the "
                 "lane dimension with another one")


def _slice_lanes(size: int, inst: Instruction,
               operand_lanes: list[LaneDim | None]) -> LaneDim:
    lane_at = operand_lanes[0]
    assert isinstance(lane_at, int)
    spec = inst.attrs["slice"]
    assert isinstance(spec, tuple)
    part = spec[lane_at]
    assert isinstance(part, SliceDim)
    if (part.start, part.limit, part.stride) == (0, size, 1):
        return lane_at
    return Mixed(CROSS_LANE_ACCESS, inst,
                 f"%{inst.name} slices the lanes ({part.text()} of {size})")


def _pad_lanes(size: int, inst: Instruction,
             operand_lanes: list[LaneDim | None]) -> LaneDim:
    lane_at = operand_lanes[0]
    if operand_lanes[1] is not None or not isinstance(lane_at, int):
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} pads with a per-lane value")
    config = inst.attrs["padding"]
    assert isinstance(config, tuple)
    part = config[lane_at]
    assert isinstance(part, PaddingDim)
    if (part.low, part.high, part.interior) == (0, 0, 0):
        return lane_at
    return Mixed(CROSS_LANE_ACCESS, inst,
                 f"%{inst.name} pads the lane dimension ({part.text()})")


def _reverse_lanes(size: int, inst: Instruction,
                 operand_lanes: list[LaneDim | None]) -> LaneDim:
    lane_at = operand_lanes[0]
    assert isinstance(lane_at, int)
    if lane_at in inst.ints("dimensions"):
        return Mixed(CROSS_LANE_ACCESS, inst, f"%{inst.name} reverses the lanes")
    return lane_at


def _concatenate_lanes(size: int, inst: Instruction,
                     operand_lanes: list[LaneDim | None]) -> LaneDim:
    lane_at = _single(size, inst, operand_lanes)
    if isinstance(lane_at, Mixed):
        return lane_at
    if inst.ints("dimensions")[0] == lane_at:
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} concatenates along the lane dimension")
    return lane_at


def _dynamic_slice_lanes(size: int, inst: Instruction,
                       operand_lanes: list[LaneDim | None]) -> LaneDim:
    lane_at = operand_lanes[0]
    if not isinstance(lane_at, int) or any(e is not None for e in operand_lanes[1:]):
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} slices at a per-lane position")
    if inst.shape.dims[lane_at] == size:
        return lane_at
    return Mixed(CROSS_LANE_ACCESS, inst, f"%{inst.name} slices part of the lanes")


def _dynamic_update_slice_lanes(size: int, inst: Instruction,
                              operand_lanes: list[LaneDim | None]) -> LaneDim:
    if any(e is not None for e in operand_lanes[2:]):
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} updates at a per-lane position")
    lane_at = _single(size, inst, operand_lanes[:2])
    if isinstance(lane_at, Mixed):
        return lane_at
    update = inst.operands[1]
    if operand_lanes[1] is not None and update.shape.dims[lane_at] != size:
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} writes part of the lanes with another one's value")
    return lane_at


def _reduce_lanes(size: int, inst: Instruction,
                operand_lanes: list[LaneDim | None]) -> LaneDim:
    count = len(inst.operands) // 2
    if any(e is not None for e in operand_lanes[count:]):
        return Mixed(CROSS_LANE_REDUCE, inst,
                     f"%{inst.name} starts its reduction from a per-lane value")
    lane_at = _single(size, inst, operand_lanes[:count])
    if isinstance(lane_at, Mixed):
        return lane_at
    reduced = inst.ints("dimensions")
    if lane_at in reduced:
        return Mixed(CROSS_LANE_REDUCE, inst,
                     f"%{inst.name} reduces over the lanes and is not an accumulated "
                     "result (acc <op> reduce(...)) read nowhere else")
    return lane_at - sum(1 for d in reduced if d < lane_at)


def _reduce_window_lanes(size: int, inst: Instruction,
                       operand_lanes: list[LaneDim | None]) -> LaneDim:
    count = len(inst.operands) // 2
    lane_at = _single(size, inst, operand_lanes[:count])
    if isinstance(lane_at, Mixed):
        return lane_at
    window = inst.attrs["window"]
    assert isinstance(window, Window)
    trivial = (window.size[lane_at], window.stride[lane_at], window.pad_low[lane_at],
               window.pad_high[lane_at], window.lhs_dilate[lane_at],
               window.rhs_dilate[lane_at]) == (1, 1, 0, 0, 1, 1)
    if trivial and all(e is None for e in operand_lanes[count:]):
        return lane_at
    return Mixed(CROSS_LANE_ACCESS, inst,
                 f"%{inst.name} has a window over the lane dimension")


def _optional_ints(inst: Instruction, name: str) -> tuple[int, ...]:
    return inst.ints(name) if inst.attrs.get(name) is not None else ()


def _index_batch_to_result(inst: Instruction, indices_dim: int, window_dims: tuple[int, ...],
                           ivd: int, rank: int) -> int:
    """The result (gather) or update (scatter) dimension that indices' dimension
    `indices_dim` becomes: batch dimensions keep the indices' order, the index vector's
    dimension left out."""
    position = indices_dim - (1 if ivd < indices_dim else 0)
    return [d for d in range(rank) if d not in window_dims][position]


def _gather_lanes(size: int, inst: Instruction, operand_lanes: list[LaneDim | None]) -> LaneDim:
    """Per lane when each lane reads its own rows (the operand's lane dimension is an
    operand batching dimension paired with the indices' lane dimension, or paired with a
    dimension of indices the same in every step), or when per-lane indices read a table the
    same for every lane."""
    operand_dim, indices_dim = operand_lanes
    ivd = inst.attrs["index_vector_dim"]
    assert isinstance(ivd, int)
    offset_dims = inst.ints("offset_dims")
    rank = inst.shape.rank
    batching = _optional_ints(inst, "operand_batching_dims")
    indices_batching = _optional_ints(inst, "start_indices_batching_dims")
    if isinstance(indices_dim, int) and indices_dim != ivd:
        result = _index_batch_to_result(inst, indices_dim, offset_dims, ivd, rank)
        if operand_dim is None:
            return result
        if (isinstance(operand_dim, int) and operand_dim in batching
                and indices_batching[batching.index(operand_dim)] == indices_dim):
            return result
    if indices_dim is None and isinstance(operand_dim, int) and operand_dim in batching:
        # Indices the same in every step (a constant, or drawn from the shared key), paired
        # with the operand's lanes by a batching dimension: lane l reads its own rows at the
        # indices' row l (vmap of `x[i]` with i not batched, or of `jnp.take(x, k)`).
        paired = indices_batching[batching.index(operand_dim)]
        return _index_batch_to_result(inst, paired, offset_dims, ivd, rank)
    if indices_dim is None and isinstance(operand_dim, int):
        window = _whole_window_dim(inst, operand_dim, "slice_sizes", "collapsed_slice_dims",
                                   batching, offset_dims)
        if window is not None:
            return window
    return Mixed(CROSS_LANE_ACCESS, inst,
                 f"%{inst.name} (gather) reads values of other lanes: its lane dimension is "
                 "not a batching dimension of both operand and indices")


def _scatter_lanes(size: int, inst: Instruction, operand_lanes: list[LaneDim | None]) -> LaneDim:
    """Per lane when the lanes lie along an input batching dimension paired with the
    indices' (each lane scatters into its own rows): every state-dependent operand, the
    indices and the updates hold the lanes where that pairing puts them. Operands that do
    not depend on the state (a fresh board) are computed per lane at the lane's rows."""
    n = (len(inst.operands) - 1) // 2
    ivd = inst.attrs["index_vector_dim"]
    assert isinstance(ivd, int)
    batching = _optional_ints(inst, "input_batching_dims")
    indices_batching = _optional_ints(inst, "scatter_indices_batching_dims")
    window_dims = inst.ints("update_window_dims")
    refusal = Mixed(CROSS_LANE_ACCESS, inst,
                    f"%{inst.name} (scatter) writes values into other lanes: its lane "
                    "dimension is not an input batching dimension paired with the indices'")
    operand_dims = {e for e in operand_lanes[:n] if e is not None}
    indices_dim = operand_lanes[n]
    update_dims = {e for e in operand_lanes[n + 1:] if e is not None}
    if len(operand_dims) > 1 or len(update_dims) > 1:
        return refusal
    if indices_dim is None:
        whole = _whole_window_scatter(size, inst, operand_dims, update_dims, batching,
                                      window_dims)
        if whole is not None:
            return whole
    lane_at: LaneDim | None = next(iter(operand_dims)) if operand_dims else None
    if lane_at is None and isinstance(indices_dim, int) and indices_dim in indices_batching:
        lane_at = batching[indices_batching.index(indices_dim)]
    if not isinstance(lane_at, int) or lane_at not in batching or inst.shape.dims[lane_at] != size:
        return refusal
    paired = indices_batching[batching.index(lane_at)]
    if indices_dim is not None and indices_dim != paired:
        return refusal
    update_rank = inst.operands[n + 1].shape.rank
    expected = _index_batch_to_result(inst, paired, window_dims, ivd, update_rank)
    if update_dims and update_dims != {expected}:
        return refusal
    return lane_at


def _whole_window_dim(inst: Instruction, operand_dim: int, sizes_attr: str,
                      dropped_attr: str, batching: tuple[int, ...],
                      window_dims: tuple[int, ...]) -> int | None:
    """Where the window of a gather (or scatter) with the same start for every lane puts the
    operand's lane dimension, when the window covers that dimension whole: the start along
    it is then 0 (gather clamps it there; a scatter skips a window it would push out), so
    each lane reads (writes) only its own elements. None otherwise."""
    dims = inst.operands[0].shape.dims
    dropped = set(inst.ints(dropped_attr)) | set(batching)
    if operand_dim in dropped:
        return None
    if sizes_attr and inst.ints(sizes_attr)[operand_dim] != dims[operand_dim]:
        return None
    kept = [d for d in range(len(dims)) if d not in dropped]
    return window_dims[kept.index(operand_dim)]


def _whole_window_scatter(size: int, inst: Instruction, operand_dims: set[LaneDim],
                          update_dims: set[LaneDim], batching: tuple[int, ...],
                          window_dims: tuple[int, ...]) -> int | None:
    """A scatter at the same position in every lane whose update windows span the
    operand's lane dimension whole: each lane writes its own elements."""
    lane_at = next(iter(operand_dims), None)
    if lane_at is None:  # a table the same in every lane (an iota) gets per-lane updates
        update_dim = next(iter(update_dims), None)
        if not isinstance(update_dim, int) or update_dim not in window_dims:
            return None
        dropped = set(inst.ints("inserted_window_dims")) | set(batching)
        kept = [d for d in range(inst.operands[0].shape.rank) if d not in dropped]
        lane_at = kept[window_dims.index(update_dim)]
    assert isinstance(lane_at, int)
    if inst.operands[0].shape.dims[lane_at] != size:
        return None
    update_dim = _whole_window_dim(inst, lane_at, "", "inserted_window_dims", batching,
                                   window_dims)
    if update_dim is None:
        return None
    updates = inst.operands[(len(inst.operands) + 1) // 2]
    if updates.shape.dims[update_dim] != size or (update_dims and update_dims != {update_dim}):
        return None
    return lane_at


def _dot_lanes(size: int, inst: Instruction, operand_lanes: list[LaneDim | None]) -> LaneDim:
    """Per lane when the lanes lie along a batch dimension of the dependent operands (the
    same one on both), or along a free dimension of the one dependent operand; never along
    a contracting dimension (that sums over lanes)."""
    lhs_lanes, rhs_lanes = operand_lanes
    lhs_batch, rhs_batch = inst.ints("lhs_batch_dims"), inst.ints("rhs_batch_dims")
    contracting = (inst.ints("lhs_contracting_dims"), inst.ints("rhs_contracting_dims"))
    if (isinstance(lhs_lanes, int) and lhs_lanes in contracting[0]) or \
            (isinstance(rhs_lanes, int) and rhs_lanes in contracting[1]):
        return Mixed(CROSS_LANE_REDUCE, inst, f"%{inst.name} (dot) sums over the lanes")
    if isinstance(lhs_lanes, int) and isinstance(rhs_lanes, int):
        if lhs_lanes in lhs_batch and rhs_lanes in rhs_batch and \
                lhs_batch.index(lhs_lanes) == rhs_batch.index(rhs_lanes):
            return lhs_batch.index(lhs_lanes)
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} (dot) pairs the lanes of one operand with other lanes of "
                     "the other")
    side = 0 if isinstance(lhs_lanes, int) else 1
    lane_at = lhs_lanes if side == 0 else rhs_lanes
    assert isinstance(lane_at, int)
    batch = lhs_batch if side == 0 else rhs_batch
    if lane_at in batch:
        return batch.index(lane_at)
    operand = inst.operands[side]
    free = [d for d in range(operand.shape.rank) if d not in batch and d not in contracting[side]]
    lhs_free = inst.operands[0].shape.rank - len(lhs_batch) - len(contracting[0])
    return len(lhs_batch) + (0 if side == 0 else lhs_free) + free.index(lane_at)


def _matrices_lanes(size: int, inst: Instruction, operand_lanes: list[LaneDim | None]) -> LaneDim:
    """A factorisation or solve of batched matrices (the two minor dimensions) is per lane
    when the lanes lie along one batch dimension, the same in every dependent operand; each
    result (a tuple's leaves: the factor, pivots, LAPACK's info) holds them there too."""
    lane_at = _single(size, inst, operand_lanes)
    if isinstance(lane_at, Mixed):
        return lane_at
    if lane_at >= batch_rank(inst):
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} ({inst.op.text}) works on matrices whose rows or columns "
                     "are the lanes")
    if inst.shape.is_tuple:
        return tuple(lane_at for _ in inst.shape.elements)
    return lane_at


def _custom_call_lanes(size: int, inst: Instruction,
                     operand_lanes: list[LaneDim | None]) -> LaneDim:
    if lane_linalg_routine(inst) is not None:
        return _matrices_lanes(size, inst, operand_lanes)
    return _elementwise_lanes(size, inst, operand_lanes)


_RULES: dict[Op, Rule] = {
    Op.CHOLESKY: _matrices_lanes,
    Op.CUSTOM_CALL: _custom_call_lanes,
    Op.TRIANGULAR_SOLVE: _matrices_lanes,
    Op.DOT: _dot_lanes,
    Op.GATHER: _gather_lanes,
    Op.SCATTER: _scatter_lanes,
    Op.BITCAST: _reshape_lanes,
    Op.BROADCAST: _broadcast_lanes,
    Op.CONCATENATE: _concatenate_lanes,
    Op.DYNAMIC_SLICE: _dynamic_slice_lanes,
    Op.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice_lanes,
    Op.PAD: _pad_lanes,
    Op.REDUCE: _reduce_lanes,
    Op.REDUCE_WINDOW: _reduce_window_lanes,
    Op.RESHAPE: _reshape_lanes,
    Op.REVERSE: _reverse_lanes,
    Op.SLICE: _slice_lanes,
    Op.TRANSPOSE: _transpose_lanes,
}
