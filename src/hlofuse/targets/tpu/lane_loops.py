"""Position loops: a lane's large part of a held element computed in a loop over its
positions inside the whole-loop kernel's step, rather than written out.

lane_values.py computes a value position by position, each position traced on its own, so
a held element of P positions per lane costs P copies of the work that makes it: grid_forage's
board (2 x 10 x 10 per lane, reset from two Bernoulli draws of 100 Threefry evaluations) was
46,668 values a step, 5.8 MB of Mosaic and 45-58 s of tracing and lowering. The work is the
same at every position but for the position itself, so where a lane's part has more than
UNROLLED_POSITIONS positions the step computes it in a `lax.while_loop` (an int32 counter:
fori_loop's is int64 under x64): the loop's index becomes uniform int32 scalars (one per
looped dimension, with their bounds), which the ops treat as they treat any index that is
not static (the lane tile is one too), and the element's new tiles are stored into a VMEM
scratch at the index (whole_loop_held.py). A trip computes up to POSITIONS_PER_TRIP
positions: a position's chain alone (a Threefry evaluation) leaves the vector unit waiting
on each result; on the v5e grid_forage ran at 103 M env-steps/s with one position a trip
and 130 M with 10 (docs/tpu.md).

- Which dimensions: the trailing ones, the fewest whose positions reach LOOP_TRIPS; the
  leading ones stay static inside the loop body (written out there). A new leading axis is
  how a lane's part is stacked from pieces (`jnp.stack`: a concatenate along it), and a
  concatenate read at a looped index computes every piece at every trip.
- The first trip is peeled, computed at static position zero outside the loop. What the
  step computes there that does not depend on the position (per-lane keys, the reset flag,
  the agent's position) is memoised for the step, so the loop body finds it rather than
  computing it at every trip: the loop holds only the work that depends on the position.
- Values the loop body computes stay in it (the step's memo is restored after it).
- A body that cannot be traced with a looped index (an op that needs its index static)
  raises `Unlowerable` while the loop is traced; then the remaining positions are written
  out as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from jax import lax

from hlofuse.targets.tpu.lane_values import (
    Index,
    LaneValues,
    Position,
    Unlowerable,
    static_positions,
    strides,
)
from hlofuse.targets.tpu.lax_ops import Value

# A lane's part of up to this many positions is written out (a policy layer's 64 units, a
# particle system's 8 x 2); larger parts are computed in a loop over their positions.
UNROLLED_POSITIONS = 64
# The loop covers the fewest trailing dimensions that give it at least this many positions.
LOOP_TRIPS = 16
# Positions one trip of the loop computes: independent chains the chip can interleave (one
# position's chain alone leaves the vector unit waiting on each result).
POSITIONS_PER_TRIP = 8


def looped(dims: Sequence[int]) -> bool:
    """Whether a lane's part of these dimensions is computed in a loop over positions."""
    return int(np.prod(dims, dtype=np.int64)) > UNROLLED_POSITIONS


def loop_split(dims: Sequence[int]) -> int:
    """How many trailing dimensions the loop runs over (0: written out)."""
    if not looped(dims):
        return 0
    trips = 1
    for count, dim in enumerate(reversed(dims), start=1):
        trips *= dim
        if trips >= LOOP_TRIPS:
            return count
    return len(dims)


def positions_per_trip(count: int) -> int:
    """Looped positions one trip computes: the largest divisor of `count` within
    POSITIONS_PER_TRIP, so that every trip is alike."""
    return max(d for d in range(1, min(count, POSITIONS_PER_TRIP) + 1) if count % d == 0)


def over_positions(values: LaneValues, dims: Sequence[int],
                   body: Callable[[Position, Any], Any], carry: Any = None) -> Any:
    """body(position, carry) -> carry for every position of `dims`, those of a large part in
    a loop (see the module docstring); the final carry."""
    split = loop_split(dims)
    if split == 0:
        for p in static_positions(dims):
            carry = body(p, carry)
        return carry
    outer, inner = list(dims[:len(dims) - split]), list(dims[len(dims) - split:])
    count = int(np.prod(inner))
    group = positions_per_trip(count)
    trips = count // group

    def trip(first: Index, carry: Any) -> Any:
        """The positions of looped flat indices first .. first + group - 1."""
        for u in range(group):
            inner_position = _unravel(values, values.add(first, u), inner)
            for p in static_positions(outer):
                carry = body((*p, *inner_position), carry)
        return carry

    carry = trip(0, carry)  # peeled: the step keeps what it computes

    # A while loop with an int32 counter: fori_loop's index is int64 under x64 (programs
    # with 64-bit values run so), and Mosaic has no 64-bit types.
    def looped_trip(state: tuple[Value, Any]) -> tuple[Value, Any]:
        q, carry = state
        first = values.uniform_index(q * np.int32(group), group, count - group)
        return q + np.int32(1), trip(first, carry)

    def more(state: tuple[Value, Any]) -> Value:
        return state[0] < np.int32(trips)

    try:
        with values.branch():
            return lax.while_loop(more, looped_trip, (np.int32(1), carry))[1]
    except Unlowerable:
        for q in range(1, trips):
            carry = trip(q * group, carry)
        return carry


def _unravel(values: LaneValues, flat: Index, dims: Sequence[int]) -> Position:
    """A looped flat index (static, or uniform with bounds) as one index per dimension."""
    out: list[Index] = []
    for k, stride in enumerate(strides(dims)):
        at = values.div(flat, stride)
        out.append(at if k == 0 else values.rem(at, dims[k]))
    return tuple(out)
