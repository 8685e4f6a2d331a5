"""The held elements' new values at each step of the TPU's whole-loop kernel (whole_loop.py).

A held element whose lane part is small is carried through the time loop as tiles, one per
position, each written out (lane_values.py). A larger one (lane_loops.py: more than
UNROLLED_POSITIONS positions a lane, grid_forage's 200-cell board) is stored: its tiles
stay in the kernel's output block in VMEM for the whole loop, the step reads them there
(at static positions, or at a position loop's index), computes the new tiles in a loop over
the positions into a scratch block, and copies them over the old ones after everything
else of the step has read those.

An element whose new value is a select with a costly operand few lanes pick (an
auto-reset's fresh draws, analysis/rare_selects.py) gets that operand computed for the
block only when one of its lanes picks it (`lax.cond` on the block's predicates), and, where
the operand depends on the lane only through its number (counter-based draws), for the
lanes that pick it only: gathered into slots and spread back (lane_compaction.py; off
unless `lane_compaction.ENABLED`: on the v5e it cost what it saved for CartPole).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from hlofuse.analysis.lane_classification import element_read
from hlofuse.analysis.parallel_loop import LoopPlan
from hlofuse.analysis.rare_selects import RareSelect, rare_selects
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op
from hlofuse.targets.tpu.lane_compaction import ROW_SLOTS, Compaction, compactable
from hlofuse.targets.tpu.lane_loops import looped, over_positions
from hlofuse.targets.tpu.lane_nested import on_lane_layout
from hlofuse.targets.tpu.lane_values import LaneValues, Position, flat_index, static_positions
from hlofuse.targets.tpu.lane_words import copy_tiles, to_word
from hlofuse.targets.tpu.lax_ops import Value

if TYPE_CHECKING:
    from hlofuse.targets.tpu.whole_loop import LaneLayout


def stored_elements(layout: LaneLayout) -> list[int]:
    """The held elements kept in VMEM and computed in position loops."""
    return [e for e in layout.plan.per_lane if looped(layout.other_dims(e))]


class HeldWriter:
    """One step's new held tiles: carried elements' as tuples of tiles, stored elements'
    written into their next-step blocks (`next_refs`), copied over `state_refs` by
    `commit` once the step has read the old ones."""

    def __init__(self, layout: LaneLayout, state_refs: Mapping[int, Any],
                 next_refs: Mapping[int, Any], first: Value) -> None:
        """`first`: the block's first lane number (a compaction's slots number lanes from it)."""
        self.layout = layout
        self.first = first
        self.state_refs = state_refs
        self.next_refs = next_refs
        self.tile = (layout.rows, 128)

    def _tile_at(self, values: LaneValues, element: int, value: Instruction,
                 position: Position) -> Value:
        shape = self.layout.element_shape(element)
        lane_dim = self.layout.plan.lane_dims[element]
        return jnp.broadcast_to(to_word(values.value(value, values.lane_position(
            shape.dims, lane_dim, position)), shape.dtype), self.tile)

    def tiles(self, values: LaneValues, element: int, value: Instruction
              ) -> tuple[Value, ...]:
        """A carried element's new tiles, one per position of a lane's part."""
        return tuple(self._tile_at(values, element, value, p)
                     for p in static_positions(self.layout.other_dims(element)))

    def store(self, values: LaneValues, element: int, value: Instruction) -> None:
        """A stored element's new tiles into its next-step block, in a position loop."""
        ref = self.next_refs[element]
        dims = self.layout.other_dims(element)

        def write(p: Position, carry: None) -> None:
            ref[flat_index(p, dims)] = self._tile_at(values, element, value, p)

        over_positions(values, dims, write)

    def new_values(self, values: LaneValues, elements: Sequence[int],
                   rare: Mapping[int, RareSelect]) -> dict[int, tuple[Value, ...]]:
        """The carried elements' new tiles (stored ones written into their blocks)."""
        root = self.layout.plan.body.root
        out: dict[int, tuple[Value, ...]] = {}
        for e in elements:
            if e in rare:
                continue
            if e in self.next_refs:
                self.store(values, e, root.operands[e])
            else:
                out[e] = self.tiles(values, e, root.operands[e])
        out.update(self._rarely_taken(values, {e: rare[e] for e in elements if e in rare}))
        return out

    def commit(self) -> None:
        """The stored elements' new tiles over the old (after the step has read them)."""
        for e, ref in self.next_refs.items():
            copy_tiles(ref, self.state_refs[e])

    def _rarely_taken(self, values: LaneValues, rare: Mapping[int, RareSelect]
                      ) -> dict[int, tuple[Value, ...]]:
        """The select's kept operand everywhere; its costly one computed for the block only
        when one of its lanes picks it (`lax.cond` on the block's predicates)."""
        if not rare:
            return {}
        wanted: Value = on_lane_layout(np.int32(0), values.lanes)
        kept: dict[int, tuple[Value, ...]] = {}
        for e, r in rare.items():
            if e in self.next_refs:
                self.store(values, e, r.kept)
            else:
                kept[e] = self.tiles(values, e, r.kept)

            def picks(p: Position, wanted: Value, r: RareSelect = r, e: int = e) -> Value:
                predicate = r.select.operands[0]
                mask = values.value(predicate, values.lane_position(
                    predicate.shape.dims, self.layout.plan.lane_dims[e], p))
                mask = lax.ne(mask, jnp.zeros((), mask.dtype))  # as bool, whatever its type
                hit = mask if r.when else lax.bitwise_not(mask)
                return lax.max(wanted, jnp.broadcast_to(
                    lax.convert_element_type(hit, np.int32), self.tile))

            wanted = over_positions(values, self.layout.other_dims(e), picks, wanted)
        any_lane = jnp.max(wanted) > 0
        carried = [e for e in rare if e not in self.next_refs]

        def taken() -> tuple[tuple[Value, ...], ...]:
            with values.branch():
                for e in rare:
                    if e in self.next_refs:
                        self.store(values, e, rare[e].select)
                return tuple(self.tiles(values, e, rare[e].select) for e in carried)

        def skipped() -> tuple[tuple[Value, ...], ...]:
            return tuple(kept[e] for e in carried)

        if self._compactable(rare):
            def gathered() -> tuple[tuple[Value, ...], ...]:
                compaction = Compaction(wanted, self.first)
                return lax.cond(compaction.fits,
                                lambda: self._compacted(values, rare, compaction, kept),
                                taken)

            chosen = lax.cond(any_lane, gathered, skipped)
        else:
            chosen = lax.cond(any_lane, taken, skipped)
        return dict(zip(carried, chosen))

    def _compactable(self, rare: Mapping[int, RareSelect]) -> bool:
        return set(rare) <= set(compacted_elements(self.layout))

    def _compacted(self, values: LaneValues, rare: Mapping[int, RareSelect],
                   compaction: Compaction, kept: Mapping[int, tuple[Value, ...]]
                   ) -> tuple[tuple[Value, ...], ...]:
        """The rare operands computed on the slots of the lanes that pick them, spread back,
        and selected per position by the predicates."""
        layout = self.layout
        slots = values.on_lanes(compaction.lanes, layout.size)
        with values.branch():
            words = []
            for e, r in rare.items():
                shape = layout.element_shape(e)
                for p in static_positions(layout.other_dims(e)):
                    word = to_word(slots.value(r.operand, slots.lane_position(
                        shape.dims, layout.plan.lane_dims[e], p)), shape.dtype)
                    words.append(jnp.broadcast_to(word, compaction.lanes.shape))
            fresh = iter(compaction.spread(words))  # one product per group for them all
            out = []
            for e, r in rare.items():
                predicate = r.select.operands[0]
                tiles = []
                for p, old in zip(static_positions(layout.other_dims(e)), kept[e]):
                    new = next(fresh)
                    mask = values.value(predicate, values.lane_position(
                        predicate.shape.dims, layout.plan.lane_dims[e], p))
                    hit = lax.ne(mask, jnp.zeros((), mask.dtype))
                    tiles.append(jnp.where(hit if r.when else lax.bitwise_not(hit), new, old))
                out.append(tuple(tiles))
        return tuple(out)


def compacted_elements(layout: LaneLayout) -> tuple[int, ...]:
    """The rarely picked elements whose operand is computed on a compaction's slots: all
    the loop's, when each is a carried element of at most 32 bits whose operand depends on
    the lane only through its number (none otherwise: they share one branch)."""
    rare = rare_selects(layout.plan)
    stored = set(stored_elements(layout))
    if not rare or not compactable(layout.rows) or not all(
            r.element not in stored and layout.element_shape(r.element).dtype.bits <= 32
            and reads_lane_number_only(layout.plan, r.operand) for r in rare):
        return ()
    return tuple(r.element for r in rare)


def compaction_note(layout: LaneLayout) -> str:
    """What the kernel's listing says of its compacted elements."""
    n = len(compacted_elements(layout))
    return (f"; {n} rarely picked element(s) computed for the picking lanes only ("
            f"{ROW_SLOTS} slots a row of 128, gathered and spread on the MXU)") if n else ""


def reads_lane_number_only(plan: LoopPlan, inst: Instruction) -> bool:
    """Whether `inst` depends on the lane through the lane number alone (an iota, a counter
    of the lane's draws), not through a per-lane element or a nested loop."""
    seen: set[int] = set()
    stack = [inst]
    while stack:
        x = stack.pop()
        if id(x) in seen or id(x) not in plan.lane:
            continue
        seen.add(id(x))
        if element_read(x) is not None or x.op in (Op.WHILE, Op.CALL, Op.CONDITIONAL):
            return False
        stack.extend(x.operands)
    return True
