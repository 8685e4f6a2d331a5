"""The lanes of a block that want a rare value, gathered into a few slots and spread back.

An auto-reset's fresh draws (analysis/rare_selects.py) are needed by the few lanes that
reset at a step (CartPole: about 4.5 %), but a block of 4,096-8,192 lanes has such a lane at
almost every step, so computing them for the block only when one lane wants them saves
nothing. Here the wanting lanes of each row of 128 are given one of ROW_SLOTS slots, the
value is computed on the slots (one tile of rows / 8 rows for the block, an eighth of the
work) and spread back to the lanes. Mosaic lowers none of the usual pieces in a kernel
(cumulative sums, gathers across rows, scatters), so each is a product on the MXU:

- a lane's rank in its row: the wanted mask times an upper triangular matrix of ones;
- per group of 8 rows, a one-hot matrix H (128 slots x 128 lanes): slot 16 r + s is the
  (s+1)-th wanting lane of the group's row r;
- the slots' lane numbers: the lanes' column numbers times H transposed;
- the value spread back: its 32-bit words split into bytes, placed block-diagonally (a
  slot's bytes only in its own row), times H.

Every product has one non-zero term per output, a 0/1 times an integer below 256 in bf16,
summed in f32: exact. Rows with more than ROW_SLOTS wanting lanes do not fit: the caller
computes the value for the whole block then (`fits`).

Measured on the v5e (docs/tpu.md) the 17 products a block and step, each loading a new
one-hot into the MXU on the step's path, cost what the slots save for CartPole's four draws
a lane, so the whole-loop kernel uses this only when ENABLED is set.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np
from jax import lax

from hlofuse.targets.tpu.lax_ops import Value

LANES = 128
# Off by default: on the v5e the compaction costs what it saves for CartPole's four reset
# draws a lane (4.16 G env-steps/s with it, 4.26 G without, N = 65,536; docs/tpu.md), the
# MXU products' latency on each step's path. Benchmarks switch it on to compare the forms.
ENABLED = False
# Slots per row of 128 lanes: an eighth, so the slots of 8 rows fill one row of a tile.
ROW_SLOTS = 16
GROUP_ROWS = LANES // ROW_SLOTS  # rows whose slots share one row of the compact tile
_BYTES = 4


def _dot(a: Value, b: Value, contract: tuple[int, int]) -> Value:
    return lax.dot_general(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16),
                           (((contract[0],), (contract[1],)), ((), ())),
                           preferred_element_type=jnp.float32)


def _as_int(x: Value) -> Value:
    """An f32 tile of whole numbers in [0, 2**23) as int32: its bits after adding 2**23
    (exact, and no float-to-integer conversion, which Mosaic lowers by generation)."""
    return lax.bitcast_convert_type(x + np.float32(2.0**23), jnp.int32) - np.int32(0x4B000000)


def compactable(rows: int) -> bool:
    """Blocks whose rows fill whole groups of 8 (the lane kernel's blocks all do)."""
    return ENABLED and rows % GROUP_ROWS == 0


class Compaction:
    """The slots of one step's wanting lanes in a block of (rows, 128) lanes."""

    def __init__(self, wanted: Value, first: Value) -> None:
        """`wanted`: an int32 (rows, 128) tile, non-zero where a lane wants the value;
        `first`: the block's first lane number (its lanes are row-major from there)."""
        rows = wanted.shape[0]
        self.rows = rows
        self.groups = rows // GROUP_ROWS
        want = (wanted != 0).astype(jnp.float32)
        upper = (lax.broadcasted_iota(np.int32, (LANES, LANES), 0)
                 <= lax.broadcasted_iota(np.int32, (LANES, LANES), 1)).astype(jnp.float32)
        # A wanting lane's rank in its row (1, 2, ...); 0 where the lane does not want.
        self.rank = _dot(want, upper, (1, 0)) * want
        self.fits = jnp.max(self.rank) <= np.float32(ROW_SLOTS)
        slot_row = lax.broadcasted_iota(np.int32, (ROW_SLOTS, LANES), 0).astype(
            jnp.float32) + np.float32(1)
        self.one_hot = [self._one_hot(g, slot_row) for g in range(self.groups)]
        # Each slot's column in its row: column + 1 gathered (0 for an empty slot).
        column = lax.broadcasted_iota(np.int32, (GROUP_ROWS, LANES), 1).astype(jnp.float32)
        pick = lax.broadcasted_iota(np.int32, (GROUP_ROWS, LANES), 0)
        gathered = []
        for g in range(self.groups):
            lhs = jnp.where(pick == g % GROUP_ROWS, column + np.float32(1), np.float32(0))
            gathered.append(_dot(lhs, self.one_hot[g], (1, 1)))
        columns = self._rows_of(gathered)
        slot_rows = (lax.broadcasted_iota(np.int32, (self.groups, LANES), 0) * GROUP_ROWS
                     + lax.div(lax.broadcasted_iota(np.int32, (self.groups, LANES), 1),
                             np.int32(ROW_SLOTS)))
        # An empty slot takes its row's first lane: a lane of the block, so whatever reads
        # the lane number stays in the block's range; its value is never spread back.
        self.lanes = (first + slot_rows * np.int32(LANES)
                      + jnp.maximum(_as_int(columns) - np.int32(1), np.int32(0)))

    def _one_hot(self, group: int, slot_row: Value) -> Value:
        pieces = []
        for r in range(GROUP_ROWS):
            row = group * GROUP_ROWS + r
            rank = jnp.broadcast_to(self.rank[row:row + 1, :], (ROW_SLOTS, LANES))
            pieces.append((rank == slot_row).astype(jnp.float32))
        return jnp.concatenate(pieces, axis=0)

    def _rows_of(self, gathered: Sequence[Value]) -> Value:
        """Group g's gathered row (row g % 8 of its product) as row g of one tile."""
        chunks = []
        for start in range(0, self.groups, GROUP_ROWS):
            total = gathered[start]
            for part in gathered[start + 1:start + GROUP_ROWS]:
                total = total + part
            chunks.append(total[:min(GROUP_ROWS, self.groups - start)])
        return chunks[0] if len(chunks) == 1 else jnp.concatenate(chunks, axis=0)

    def spread(self, tiles: Sequence[Value]) -> list[Value]:
        """32-bit tiles over the slots ((groups, 128)) as (rows, 128) tiles over the lanes:
        a wanting lane gets its slot's word; the others 0."""
        words = [lax.bitcast_convert_type(t, jnp.uint32) for t in tiles]
        in_row = (lax.div(lax.broadcasted_iota(np.int32, (GROUP_ROWS, LANES), 1),
                          np.int32(ROW_SLOTS))
                  == lax.broadcasted_iota(np.int32, (GROUP_ROWS, LANES), 0))
        planes = [((w >> np.uint32(8 * k)) & np.uint32(255)).astype(jnp.float32)
                  for w in words for k in range(_BYTES)]
        per_group: list[list[Value]] = [[] for _ in tiles]
        for g in range(self.groups):
            lhs = jnp.concatenate(
                [jnp.where(in_row, jnp.broadcast_to(p[g:g + 1, :], (GROUP_ROWS, LANES)),
                           np.float32(0)) for p in planes], axis=0)
            out = _dot(lhs, self.one_hot[g], (1, 0))
            for t in range(len(tiles)):
                word = None
                for k in range(_BYTES):
                    row = (t * _BYTES + k) * GROUP_ROWS
                    part = _as_int(out[row:row + GROUP_ROWS]).astype(jnp.uint32) << np.uint32(8 * k)
                    word = part if word is None else word | part
                per_group[t].append(word)
        return [lax.bitcast_convert_type(jnp.concatenate(parts, axis=0), t.dtype)
                for parts, t in zip(per_group, tiles)]
