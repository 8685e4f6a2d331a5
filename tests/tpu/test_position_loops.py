"""Loops inside the TPU's whole-loop kernel that the step itself makes: a large held element
computed in a loop over its positions (lane_loops.py, whole_loop_held.py), and the carries
of a nested loop laid out as the lane tile (lane_nested.on_lane_layout)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hlofuse.api import compile_module
from hlofuse.fusion.strategies import run_strategy
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.tpu import lane_loops
from hlofuse.targets.tpu.listing import lower_for_tpu
from hlofuse.targets.tpu.program import kernel_structs, plan_kernels, uses_wide_types
from hlofuse.targets.tpu.whole_loop_held import stored_elements

from tests.tpu.test_interpret import assert_close, load_npz_case

ROLLOUTS = Path(__file__).parent.parent / "data" / "rollouts"


def _lane_kernels(name: str) -> tuple[list[object], bool]:
    module, _ = load_npz_case(ROLLOUTS / name)
    fused = run_strategy(module, "max", debug=False).module
    return [k for k in plan_kernels(fused, interpret=True) if k.lanes is not None], \
        uses_wide_types(fused)


def test_loop_split_keeps_leading_dimensions_static() -> None:
    """The loop runs over the trailing dimensions, the fewest that give LOOP_TRIPS positions;
    small parts are written out."""
    assert lane_loops.loop_split((2, 10, 10)) == 2  # the channels stay static
    assert lane_loops.loop_split((200,)) == 1
    assert lane_loops.loop_split((8, 8)) == 0  # 64 positions: written out
    assert lane_loops.positions_per_trip(100) == 5
    assert lane_loops.positions_per_trip(97) == 1


def test_held_elements_in_position_loops_equal_the_interpreter(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """bandit's per-arm estimates and counts (10 positions a lane) computed in position loops
    (the budget lowered for the test: 2 positions a trip, the first trip peeled): equal to
    the interpreter, the arms' elements stored in VMEM."""
    monkeypatch.setattr(lane_loops, "UNROLLED_POSITIONS", 4)
    monkeypatch.setattr(lane_loops, "LOOP_TRIPS", 4)
    monkeypatch.setattr(lane_loops, "POSITIONS_PER_TRIP", 2)
    module, inputs = load_npz_case(ROLLOUTS / "bandit.cpu.hlo")
    want = flatten_value(evaluate(module, inputs))
    compiled = compile_module(module, "max", "tpu-interpret")
    lanes = [k.lanes for k in compiled.executable.kernel_plans  # type: ignore[union-attr]
             if k.lanes is not None]
    assert any(stored_elements(layout) for layout in lanes)
    assert_close(compiled.run_flat(inputs), want, 1e-4)


def test_grid_forage_board_is_a_loop_not_written_out() -> None:
    """grid_forage's step wrote its board's 200 positions out (5.8 MB of Mosaic, 45-58 s to
    trace and lower); computed in position loops the kernel is a fraction of that."""
    lanes, x64 = _lane_kernels("grid_forage.cpu.hlo")
    loop = max(lanes, key=lambda k: sum(k.lanes.positions(e)  # type: ignore[attr-defined]
                                         for e in k.lanes.plan.per_lane))  # type: ignore
    assert stored_elements(loop.lanes)  # type: ignore[attr-defined]
    text = lower_for_tpu(loop, kernel_structs(loop), x64)  # type: ignore[arg-type]
    assert len(text) < 3_000_000, len(text)
    assert text.count("scf.while") >= 3  # the time loop and the positions' loops


def test_nested_loop_carries_do_not_start_as_constants() -> None:
    """implicit_pendulum's Newton loop: every tile its carry starts from is laid out as the
    lane tile. Started from splat constants (the step count 0, the change inf) the chip's
    compiler refused the kernel ("Invalid relayout ... replicated in destination"), which
    lowering without a TPU does not find; here the loop's initial operands are checked."""
    lanes, x64 = _lane_kernels("implicit_pendulum.cpu.hlo")
    text = lower_for_tpu(lanes[-1], kernel_structs(lanes[-1]), x64)  # type: ignore[arg-type]
    defined = {m.group(1): m.group(2) for m in re.finditer(r"(%[\w#]+) = ([\w.]+)", text)}
    loops = re.findall(r"scf\.while \(([^)]*)\) : \(([^)]*)\)", text)
    nested = [(inits, types) for inits, types in loops if "memref.load" not in
              {defined.get(i) for i in re.findall(r"= (%[\w#]+)", inits)}]
    assert nested
    for inits, types in nested:
        for value, kind in zip(re.findall(r"= (%[\w#]+)", inits), types.split(", ")):
            if kind.startswith("vector"):
                assert defined.get(value) not in ("arith.constant", "vector.broadcast"), \
                    (value, defined.get(value))
