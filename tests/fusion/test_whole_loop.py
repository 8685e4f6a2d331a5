"""whole-loop-fusion: the pass, its knobs, its place in the strategies and in `explain`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hlofuse.analysis.whole_loop_config import read_whole_loop_config
from hlofuse.cli import main
from hlofuse.envs import cartpole
from hlofuse.fusion.beyond_xla.whole_loop import WholeLoopFusion
from hlofuse.fusion.strategies import STRATEGIES, parse_strategy, run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.passes.decision_log import DecisionLog
from hlofuse.passes.manager import Pipeline, parse_pass_list
from hlofuse.reference.interpreter import evaluate, flatten_value

from tests.analysis.test_parallel_loop import loop_text

ACCUMULATING_LOOP = loop_text("""
  x = f32[8]{0} get-tuple-element(p), index=1
  acc = f32[] get-tuple-element(p), index=2
  env = f32[8]{0} iota(), iota_dimension=0
  y = f32[8]{0} add(x, env)
  zero = f32[] constant(0)
  sum = f32[] reduce(y, zero), dimensions={0}, to_apply=add_f32
  acc1 = f32[] add(sum, acc)
  ROOT t = (s32[], f32[8]{0}, f32[]) tuple(next, y, acc1)""", "(s32[], f32[8]{0}, f32[])")
REDUCING_LOOP = loop_text("""
  x = f32[8]{0} get-tuple-element(p), index=1
  zero = f32[] constant(0)
  sum = f32[] reduce(x, zero), dimensions={0}, to_apply=add_f32
  sums = f32[8]{0} broadcast(sum), dimensions={}
  y = f32[8]{0} subtract(x, sums)
  ROOT t = (s32[], f32[8]{0}) tuple(next, y)""")


def custom_fusions(module: Module) -> list[str]:
    return [i.name for i in module.all_instructions()
            if i.op is Op.FUSION and i.attrs.get("kind") == "kCustom"]


def run_pass(module: Module, **knobs: int) -> tuple[Module, bool, DecisionLog]:
    log = DecisionLog()
    out, changed = Pipeline([WholeLoopFusion(**knobs)], log=log).run(module)
    return out, changed, log


def test_wraps_the_loop_and_keeps_its_results() -> None:
    module = parse_module(ACCUMULATING_LOOP)
    fused, changed, log = run_pass(module, lanes=4)
    assert changed and len(custom_fusions(fused)) == 1
    fusion = next(i for i in fused.entry.instructions if i.op is Op.FUSION)
    assert fusion is fused.entry.root and fusion.calls[0].root.op is Op.WHILE
    config = dict(fusion.extra)["backend_config"].text
    assert read_whole_loop_config(config) == 4
    (record,) = log.unique()
    assert (record.pass_name, record.verdict, record.rule, record.producer) == (
        "whole-loop-fusion", "fuse", "fusible", "loop")
    assert record.figures["lanes"] == 8 and record.figures["accumulators"] == 1
    inputs = [np.asarray(0, np.int32), np.linspace(-1, 1, 8, dtype=np.float32),
              np.asarray(0.5, np.float32)]
    expected = flatten_value(evaluate(module, inputs))
    for a, b in zip(flatten_value(evaluate(fused, inputs)), expected):
        np.testing.assert_array_equal(a, b)
    # Printed and parsed again, it is the same program.
    again = parse_module(module_text(fused))
    assert custom_fusions(again) == custom_fusions(fused)
    again_fused, changed_again, _ = run_pass(fused)
    assert not changed_again and again_fused is fused


def test_refusal_leaves_the_module_alone() -> None:
    module = parse_module(REDUCING_LOOP)
    out, changed, log = run_pass(module)
    assert not changed and out is module
    (record,) = log.unique()
    assert (record.verdict, record.rule, record.producer, record.consumer) == (
        "no", "whole-loop-cross-lane-reduce", "loop", "sum")
    assert record.producer_op == "while" and record.consumer_op == "reduce"


def test_knobs_are_checked() -> None:
    with pytest.raises(ValueError, match=r"lanes must be in 0..256 \(0: chosen per loop\)"):
        WholeLoopFusion(lanes=-1)
    with pytest.raises(ValueError, match="element limits"):
        WholeLoopFusion(max_uniform_elements=0)
    (p,) = parse_pass_list("whole-loop-fusion{lanes=16,max_state_elements_per_lane=4}",
                           [WholeLoopFusion])
    assert p == WholeLoopFusion(lanes=16, max_state_elements_per_lane=4)


def test_strategies() -> None:
    assert parse_strategy("xla+whole_loop").whole_loop
    assert not parse_strategy("xla").whole_loop
    best = STRATEGIES["max"]
    assert (best.whole_loop, best.rng_expansion, best.concat_forwarding, best.scalarize_state,
            best.priority_fusion) == (True, True, True, True, True)
    names = [type(s).__name__ for s in parse_strategy("none+whole_loop").steps()]
    assert "WholeLoopFusion" in names
    steps = parse_strategy("max").steps()
    whole = next(k for k, s in enumerate(steps) if isinstance(s, WholeLoopFusion))
    fusion = next(k for k, s in enumerate(steps) if getattr(s, "label", "") == "fusion")
    assert whole < fusion  # the fusion passes only see what is left


def cartpole_module(variant: str = "baseline", n_envs: int = 8, n_steps: int = 3) -> Module:
    return cartpole.trace(cartpole.parse_variant(variant), n_envs, n_steps)


@pytest.mark.thorough
def test_baseline_cartpole_under_max_is_one_loop_kernel() -> None:
    module = cartpole_module()
    result = run_strategy(module, "max+default_costs")
    (name,) = custom_fusions(result.module)
    kernels = {k.name: k for k in result.kernels}
    assert kernels[name].kind == "kCustom" and not kernels[name].loops
    assert not result.loops  # no loop left on the host
    fusion = next(i for i in result.module.all_instructions() if i.name == name)
    # The fusion passes left the loop's body alone: it is still plain HLO.
    body = fusion.calls[0].root.calls[1]
    assert not any(i.op is Op.FUSION for i in body.instructions)
    aux = np.asarray(cartpole._rollout_input(cartpole.PRESETS["baseline"], 8, 0, None))
    expected = flatten_value(evaluate(module, [aux]))
    for a, b in zip(flatten_value(evaluate(result.module, [aux])), expected):
        np.testing.assert_array_equal(a, b)


def test_without_rng_expansion_the_library_call_is_the_reason() -> None:
    result = run_strategy(cartpole_module(), "xla+whole_loop")
    assert not custom_fusions(result.module)
    (record,) = [r for r in result.decisions.unique() if r.pass_name == "whole-loop-fusion"]
    assert record.rule == "whole-loop-opaque-op" and record.consumer_op == "custom-call"
    text = result.explain()
    assert "whole-loop fusion" in text
    assert "refused (whole-loop-opaque-op)" in text and "custom-call" in text
    report = result.explain_dict()
    loops = report["whole_loops"]
    assert isinstance(loops, list) and [r["rule"] for r in loops] == ["whole-loop-opaque-op"]


def test_explain_command_shows_the_kernel(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    path = tmp_path / "loop.hlo"
    path.write_text(ACCUMULATING_LOOP)
    assert main(["explain", str(path), "--strategy", "none+whole_loop"]) == 0
    out = capsys.readouterr().out
    assert "kCustom" in out and "one kernel: %loop runs as one kernel" in out
    assert main(["explain", str(path), "--strategy", "none+whole_loop", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["whole_loops"][0]["verdict"] == "fuse"
    path.write_text(REDUCING_LOOP)
    assert main(["explain", str(path), "--strategy", "xla+whole_loop"]) == 0
    assert "refused (whole-loop-cross-lane-reduce)" in capsys.readouterr().out
