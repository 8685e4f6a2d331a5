"""How the lane dimension of a per-lane value moves through each op.

Part of the parallel-loop analysis (parallel_loop.py): given the lane dimension of an
instruction's state-dependent operands (None for the others), `env_dim` gives the dimension of
its result that holds the lanes, or `Mixed` when the op moves values between
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


EnvDim = int | Mixed | tuple["EnvDim | None", ...]
Rule = Callable[[int, Instruction, "list[EnvDim | None]"], EnvDim]


def env_dim(size: int, inst: Instruction, operand_env: list[EnvDim | None]) -> EnvDim:
    """The lane dimension of `inst`'s result (N = `size` > 1 lanes)."""
    for env in operand_env:
        if isinstance(env, Mixed):
            return env
    if inst.op is Op.TUPLE:
        return tuple(operand_env)
    if inst.op is Op.GET_TUPLE_ELEMENT:
        source = operand_env[0]
        assert source is not None
        if isinstance(source, tuple):
            position = inst.attrs["index"]
            assert isinstance(position, int)
            picked = source[position]
            assert picked is not None
            return picked
        return source
    return _RULES.get(inst.op, _elementwise_env)(size, inst, operand_env)


def _single(size: int, inst: Instruction, operand_env: list[EnvDim | None]) -> int | Mixed:
    """The one lane dimension of the state-dependent operands."""
    dims = {env for env in operand_env if env is not None}
    if len(dims) != 1:
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} ({inst.op.text}) combines values whose lanes lie "
                     "along different dimensions")
    (env,) = dims
    assert isinstance(env, int)
    return env


def _elementwise_env(size: int, inst: Instruction,
                     operand_env: list[EnvDim | None]) -> EnvDim:
    env = _single(size, inst, operand_env)
    if isinstance(env, Mixed):
        return env
    for operand, operand_dim in zip(inst.operands, operand_env):
        if operand_dim is None:
            continue
        if env >= inst.shape.rank or operand.shape.dims[env] != inst.shape.dims[env]:
            return Mixed(CROSS_LANE_ACCESS, inst,
                         f"%{inst.name} ({inst.op.text}) reshapes the lane dimension")
    return env


def _broadcast_env(size: int, inst: Instruction,
                   operand_env: list[EnvDim | None]) -> EnvDim:
    env = operand_env[0]
    assert isinstance(env, int)
    return inst.ints("dimensions")[env]


def _transpose_env(size: int, inst: Instruction,
                   operand_env: list[EnvDim | None]) -> EnvDim:
    env = operand_env[0]
    assert isinstance(env, int)
    return inst.ints("dimensions").index(env)


def _reshape_env(size: int, inst: Instruction,
                 operand_env: list[EnvDim | None]) -> EnvDim:
    env = operand_env[0]
    assert isinstance(env, int)
    source, target = inst.operands[0].shape.dims, inst.shape.dims
    outer, inner = math.prod(source[:env]), math.prod(source[env + 1:])
    for d, dim in enumerate(target):
        # The lanes' dimension, with the same elements before and after it (the
        # products alone would also match around a zero-size dimension).
        if dim == size and math.prod(target[:d]) == outer and math.prod(target[d + 1:]) == inner:
            return d
    return Mixed(CROSS_LANE_ACCESS, inst,
                 f"%{inst.name} (reshape {list(source)} -> {list(target)}) merges the "
                 "lane dimension with another one")


def _slice_env(size: int, inst: Instruction,
               operand_env: list[EnvDim | None]) -> EnvDim:
    env = operand_env[0]
    assert isinstance(env, int)
    spec = inst.attrs["slice"]
    assert isinstance(spec, tuple)
    part = spec[env]
    assert isinstance(part, SliceDim)
    if (part.start, part.limit, part.stride) == (0, size, 1):
        return env
    return Mixed(CROSS_LANE_ACCESS, inst,
                 f"%{inst.name} slices the lanes ({part.text()} of {size})")


def _pad_env(size: int, inst: Instruction,
             operand_env: list[EnvDim | None]) -> EnvDim:
    env = operand_env[0]
    if operand_env[1] is not None or not isinstance(env, int):
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} pads with a per-lane value")
    config = inst.attrs["padding"]
    assert isinstance(config, tuple)
    part = config[env]
    assert isinstance(part, PaddingDim)
    if (part.low, part.high, part.interior) == (0, 0, 0):
        return env
    return Mixed(CROSS_LANE_ACCESS, inst,
                 f"%{inst.name} pads the lane dimension ({part.text()})")


def _reverse_env(size: int, inst: Instruction,
                 operand_env: list[EnvDim | None]) -> EnvDim:
    env = operand_env[0]
    assert isinstance(env, int)
    if env in inst.ints("dimensions"):
        return Mixed(CROSS_LANE_ACCESS, inst, f"%{inst.name} reverses the lanes")
    return env


def _concatenate_env(size: int, inst: Instruction,
                     operand_env: list[EnvDim | None]) -> EnvDim:
    env = _single(size, inst, operand_env)
    if isinstance(env, Mixed):
        return env
    if inst.ints("dimensions")[0] == env:
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} concatenates along the lane dimension")
    return env


def _dynamic_slice_env(size: int, inst: Instruction,
                       operand_env: list[EnvDim | None]) -> EnvDim:
    env = operand_env[0]
    if not isinstance(env, int) or any(e is not None for e in operand_env[1:]):
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} slices at a per-lane position")
    if inst.shape.dims[env] == size:
        return env
    return Mixed(CROSS_LANE_ACCESS, inst, f"%{inst.name} slices part of the lanes")


def _dynamic_update_slice_env(size: int, inst: Instruction,
                              operand_env: list[EnvDim | None]) -> EnvDim:
    if any(e is not None for e in operand_env[2:]):
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} updates at a per-lane position")
    env = _single(size, inst, operand_env[:2])
    if isinstance(env, Mixed):
        return env
    update = inst.operands[1]
    if operand_env[1] is not None and update.shape.dims[env] != size:
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} writes part of the lanes with another one's value")
    return env


def _reduce_env(size: int, inst: Instruction,
                operand_env: list[EnvDim | None]) -> EnvDim:
    count = len(inst.operands) // 2
    if any(e is not None for e in operand_env[count:]):
        return Mixed(CROSS_LANE_REDUCE, inst,
                     f"%{inst.name} starts its reduction from a per-lane value")
    env = _single(size, inst, operand_env[:count])
    if isinstance(env, Mixed):
        return env
    reduced = inst.ints("dimensions")
    if env in reduced:
        return Mixed(CROSS_LANE_REDUCE, inst,
                     f"%{inst.name} reduces over the lanes and is not an accumulated "
                     "result (acc <op> reduce(...)) read nowhere else")
    return env - sum(1 for d in reduced if d < env)


def _reduce_window_env(size: int, inst: Instruction,
                       operand_env: list[EnvDim | None]) -> EnvDim:
    count = len(inst.operands) // 2
    env = _single(size, inst, operand_env[:count])
    if isinstance(env, Mixed):
        return env
    window = inst.attrs["window"]
    assert isinstance(window, Window)
    trivial = (window.size[env], window.stride[env], window.pad_low[env], window.pad_high[env],
               window.lhs_dilate[env], window.rhs_dilate[env]) == (1, 1, 0, 0, 1, 1)
    if trivial and all(e is None for e in operand_env[count:]):
        return env
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


def _gather_env(size: int, inst: Instruction, operand_env: list[EnvDim | None]) -> EnvDim:
    """Per lane when each lane reads its own rows (the operand's lane dimension is an
    operand batching dimension paired with the indices' lane dimension), or when per-lane
    indices read a table the same for every lane."""
    operand_dim, indices_dim = operand_env
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
    if indices_dim is None and isinstance(operand_dim, int):
        window = _whole_window_dim(inst, operand_dim, "slice_sizes", "collapsed_slice_dims",
                                   batching, offset_dims)
        if window is not None:
            return window
    return Mixed(CROSS_LANE_ACCESS, inst,
                 f"%{inst.name} (gather) reads values of other lanes: its lane dimension is "
                 "not a batching dimension of both operand and indices")


def _scatter_env(size: int, inst: Instruction, operand_env: list[EnvDim | None]) -> EnvDim:
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
    operand_dims = {e for e in operand_env[:n] if e is not None}
    indices_dim = operand_env[n]
    update_dims = {e for e in operand_env[n + 1:] if e is not None}
    if len(operand_dims) > 1 or len(update_dims) > 1:
        return refusal
    if indices_dim is None:
        whole = _whole_window_scatter(size, inst, operand_dims, update_dims, batching,
                                      window_dims)
        if whole is not None:
            return whole
    env: EnvDim | None = next(iter(operand_dims)) if operand_dims else None
    if env is None and isinstance(indices_dim, int) and indices_dim in indices_batching:
        env = batching[indices_batching.index(indices_dim)]
    if not isinstance(env, int) or env not in batching or inst.shape.dims[env] != size:
        return refusal
    paired = indices_batching[batching.index(env)]
    if indices_dim is not None and indices_dim != paired:
        return refusal
    update_rank = inst.operands[n + 1].shape.rank
    expected = _index_batch_to_result(inst, paired, window_dims, ivd, update_rank)
    if update_dims and update_dims != {expected}:
        return refusal
    return env


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


def _whole_window_scatter(size: int, inst: Instruction, operand_dims: set[EnvDim],
                          update_dims: set[EnvDim], batching: tuple[int, ...],
                          window_dims: tuple[int, ...]) -> int | None:
    """A scatter at the same position in every lane whose update windows span the
    operand's lane dimension whole: each lane writes its own elements."""
    env = next(iter(operand_dims), None)
    if env is None:  # a table the same in every lane (an iota) gets per-lane updates
        update_dim = next(iter(update_dims), None)
        if not isinstance(update_dim, int) or update_dim not in window_dims:
            return None
        dropped = set(inst.ints("inserted_window_dims")) | set(batching)
        kept = [d for d in range(inst.operands[0].shape.rank) if d not in dropped]
        env = kept[window_dims.index(update_dim)]
    assert isinstance(env, int)
    if inst.operands[0].shape.dims[env] != size:
        return None
    update_dim = _whole_window_dim(inst, env, "", "inserted_window_dims", batching,
                                   window_dims)
    if update_dim is None:
        return None
    updates = inst.operands[(len(inst.operands) + 1) // 2]
    if updates.shape.dims[update_dim] != size or (update_dims and update_dims != {update_dim}):
        return None
    return env


def _dot_env(size: int, inst: Instruction, operand_env: list[EnvDim | None]) -> EnvDim:
    """Per lane when the lanes lie along a batch dimension of the dependent operands (the
    same one on both), or along a free dimension of the one dependent operand; never along
    a contracting dimension (that sums over lanes)."""
    lhs_env, rhs_env = operand_env
    lhs_batch, rhs_batch = inst.ints("lhs_batch_dims"), inst.ints("rhs_batch_dims")
    contracting = (inst.ints("lhs_contracting_dims"), inst.ints("rhs_contracting_dims"))
    if (isinstance(lhs_env, int) and lhs_env in contracting[0]) or \
            (isinstance(rhs_env, int) and rhs_env in contracting[1]):
        return Mixed(CROSS_LANE_REDUCE, inst, f"%{inst.name} (dot) sums over the lanes")
    if isinstance(lhs_env, int) and isinstance(rhs_env, int):
        if lhs_env in lhs_batch and rhs_env in rhs_batch and \
                lhs_batch.index(lhs_env) == rhs_batch.index(rhs_env):
            return lhs_batch.index(lhs_env)
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} (dot) pairs the lanes of one operand with other lanes of "
                     "the other")
    side = 0 if isinstance(lhs_env, int) else 1
    env = lhs_env if side == 0 else rhs_env
    assert isinstance(env, int)
    batch = lhs_batch if side == 0 else rhs_batch
    if env in batch:
        return batch.index(env)
    operand = inst.operands[side]
    free = [d for d in range(operand.shape.rank) if d not in batch and d not in contracting[side]]
    lhs_free = inst.operands[0].shape.rank - len(lhs_batch) - len(contracting[0])
    return len(lhs_batch) + (0 if side == 0 else lhs_free) + free.index(env)


def _matrices_env(size: int, inst: Instruction, operand_env: list[EnvDim | None]) -> EnvDim:
    """A factorisation or solve of batched matrices (the two minor dimensions) is per lane
    when the lanes lie along one batch dimension, the same in every dependent operand; each
    result (a tuple's leaves: the factor, pivots, LAPACK's info) holds them there too."""
    env = _single(size, inst, operand_env)
    if isinstance(env, Mixed):
        return env
    if env >= batch_rank(inst):
        return Mixed(CROSS_LANE_ACCESS, inst,
                     f"%{inst.name} ({inst.op.text}) works on matrices whose rows or columns "
                     "are the lanes")
    if inst.shape.is_tuple:
        return tuple(env for _ in inst.shape.elements)
    return env


def _custom_call_env(size: int, inst: Instruction,
                     operand_env: list[EnvDim | None]) -> EnvDim:
    if lane_linalg_routine(inst) is not None:
        return _matrices_env(size, inst, operand_env)
    return _elementwise_env(size, inst, operand_env)


_RULES: dict[Op, Rule] = {
    Op.CHOLESKY: _matrices_env,
    Op.CUSTOM_CALL: _custom_call_env,
    Op.TRIANGULAR_SOLVE: _matrices_env,
    Op.DOT: _dot_env,
    Op.GATHER: _gather_env,
    Op.SCATTER: _scatter_env,
    Op.BITCAST: _reshape_env,
    Op.BROADCAST: _broadcast_env,
    Op.CONCATENATE: _concatenate_env,
    Op.DYNAMIC_SLICE: _dynamic_slice_env,
    Op.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice_env,
    Op.PAD: _pad_env,
    Op.REDUCE: _reduce_env,
    Op.REDUCE_WINDOW: _reduce_window_env,
    Op.RESHAPE: _reshape_env,
    Op.REVERSE: _reverse_env,
    Op.SLICE: _slice_env,
    Op.TRANSPOSE: _transpose_env,
}
