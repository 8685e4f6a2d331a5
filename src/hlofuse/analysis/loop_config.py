"""A while loop's trip count as XLA's backend_config states it: for the driver, and for code
generation's estimate of a loop's work.

XLA's WhileLoopBackendConfig carries `{"known_trip_count":{"n":"N"}}` (passes/trip_count.py
writes it for loops whose count it proves; hand-written HLO may carry it too). The driver then
runs a counted loop and never evaluates the condition, as XLA's while thunk does.
"""

from __future__ import annotations

import json

from hlofuse.analysis.counted_loops import NotCounted, counted_loop
from hlofuse.ir.attrs import RawAttr
from hlofuse.ir.hlo import Instruction


def known_trip_count(inst: Instruction) -> int | None:
    """The trip count a while instruction's backend_config states, or None."""
    return stated_trip_count(inst.extra)


def loop_trip_count(loop: Instruction) -> int | None:
    """How often a while loop runs: as its backend_config states, else as its counter proves
    (a counted loop), else None."""
    known = known_trip_count(loop)
    if known is not None:
        return known
    condition, body = loop.calls
    try:
        return counted_loop(loop, loop.operands[0], condition, body).trip_count
    except NotCounted:
        return None


def stated_trip_count(extra: tuple[tuple[str, RawAttr], ...]) -> int | None:
    """The trip count a backend_config among an instruction's `extra` attributes states, or
    None (none there, not JSON, no count, or a count that is not a non-negative integer)."""
    text = next((raw.text for key, raw in extra if key == "backend_config"), None)
    if text is None:
        return None
    try:
        config = json.loads(text)
    except ValueError:
        return None
    known = config.get("known_trip_count") if isinstance(config, dict) else None
    n = known.get("n") if isinstance(known, dict) else None
    if isinstance(n, bool) or not isinstance(n, int | str):
        return None
    try:
        count = int(n)
    except ValueError:
        return None
    return count if count >= 0 else None
