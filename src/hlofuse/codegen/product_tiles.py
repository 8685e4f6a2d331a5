"""Register tiles of a product computed by loops in lane code.

A whole-loop kernel computes a policy network's layer (a per-lane operand in the block's
scratch times weights the lanes share) in passes over the lanes: each pass keeps some
positions' sums for each of some parts of the lane block in vector registers and updates them
once per contracting position. Which tile is fastest depends on what the core issues per
cycle, how long a sum waits between updates and how many registers hold the sums: a small
model of those picks it (`best_tile`).
"""

from __future__ import annotations

from dataclasses import dataclass

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
