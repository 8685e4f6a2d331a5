"""The backend_config of a whole-loop fusion: the emitter's name, the lanes per block and the
parallel-loop plan's decisions, written by whole-loop fusion and read back by code generation."""

from __future__ import annotations

import json

from hlofuse.analysis.parallel_loop import LoopPlan

# A whole-loop fusion is a kCustom fusion whose backend_config names this emitter, as XLA's
# custom fusions name theirs; it also carries the number of lanes per block.
WHOLE_LOOP_FUSION = "whole_loop"
MAX_LANES = 256


def whole_loop_config(lanes: int, plan: LoopPlan | None = None) -> str:
    """The backend_config text of a whole-loop fusion: the emitter, the lanes per block and
    the plan's decisions (the parallel dimension's size and the per-lane elements),
    which code generation applies instead of planning again."""
    config: dict[str, object] = {"custom_fusion": WHOLE_LOOP_FUSION, "lanes": lanes}
    if plan is not None:
        config["size"] = plan.size
        config["per_lane"] = sorted([*plan.per_lane, *(s.element for s in plan.streamed)])
        moved = {str(i): d for i, d in sorted(plan.lane_dims.items()) if d != 0}
        if moved:
            config["lane_dims"] = moved
    return json.dumps(config, separators=(",", ":"))


def block_lanes(lanes: int, size: int) -> int:
    """Lanes per block: `lanes`, or the power of two at or above N when N is smaller
    (a block of one lane runs scalar code)."""
    return min(lanes, 1 << max(0, (size - 1).bit_length()))


def read_recorded_plan(text: str) -> tuple[int, dict[int, int]] | None:
    """(size, per-lane elements with their lane dimensions) recorded in a whole-loop
    fusion's backend_config, or None when it records none (hand-written HLO with the lanes
    only)."""
    try:
        config = json.loads(text)
    except ValueError:
        return None
    if not isinstance(config, dict):
        return None
    # "per_env" is the key programs saved before the lane vocabulary carry.
    size, per_lane = config.get("size"), config.get("per_lane", config.get("per_env"))
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        return None
    if not isinstance(per_lane, list) or not all(_is_index(i) for i in per_lane):
        return None
    moved = config.get("lane_dims", {})
    if not isinstance(moved, dict) or not all(
            isinstance(k, str) and k.isdigit() and _is_index(d) for k, d in moved.items()):
        return None
    return size, {i: moved.get(str(i), 0) for i in per_lane}


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_whole_loop_config(text: str) -> int | None:
    """The lanes of a whole-loop fusion's backend_config, or None if it is not one."""
    try:
        config = json.loads(text)
    except ValueError:
        return None
    if not isinstance(config, dict) or config.get("custom_fusion") != WHOLE_LOOP_FUSION:
        return None
    lanes = config.get("lanes")
    if not isinstance(lanes, int) or isinstance(lanes, bool) or not 1 <= lanes <= MAX_LANES:
        return None
    return lanes
