"""The decision log names the study's fusion barriers with stable rule ids: the opaque RNG
custom call, tuples and get-tuple-elements, a concatenate with several users, and the while
loop boundary; the relaxed-concatenate strategy removes exactly the concatenate barrier.

The concatenate barrier comes from XLA's rule as XLA places it (instruction fusion, a bare
concatenate offered to a fusion while it has several users); in the CartPole program the
concatenate becomes a fusion root first and is merged, as XLA's fusion merger does."""

from __future__ import annotations

import pytest

from hlofuse.envs import cartpole as cp
from hlofuse.fusion.explain import blocked_edges
from hlofuse.fusion.strategies import FusionResult, run_strategy
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.passes.decision_log import DecisionRecord

from tests.conftest import load_corpus_case

# A step loop in the study's shape: random bits from an opaque custom call; the state carried
# in a tuple, packed by a concatenate that two kernels read (the new state and a reduction).
PACKED_STEP_LOOP = """HloModule packed_step_loop

add_f32 {
  l = f32[] parameter(0)
  r = f32[] parameter(1)
  ROOT sum = f32[] add(l, r)
}

body {
  state = (s32[], f32[8,1]{1,0}, f32[8,3]{1,0}, u32[8]{0}, f32[]) parameter(0)
  i = s32[] get-tuple-element(state), index=0
  x = f32[8,1]{1,0} get-tuple-element(state), index=1, metadata={source_file="cartpole.py" source_line=20}
  v = f32[8,3]{1,0} get-tuple-element(state), index=2, metadata={source_file="cartpole.py" source_line=21}
  key = u32[8]{0} get-tuple-element(state), index=3
  acc = f32[] get-tuple-element(state), index=4
  bits = u32[8]{0} custom-call(key), custom_call_target="hlofuse_threefry2x32", metadata={source_file="cartpole.py" source_line=30}
  shifted = u32[8]{0} shift-right-logical(bits, key)
  fbits = f32[8]{0} convert(shifted)
  noise = f32[8,4]{1,0} broadcast(fbits), dimensions={0}
  packed = f32[8,4]{1,0} concatenate(x, v), dimensions={1}, metadata={source_file="cartpole.py" source_line=41}
  moved = f32[8,4]{1,0} add(packed, noise), metadata={source_file="cartpole.py" source_line=42}
  nx = f32[8,1]{1,0} slice(moved), slice={[0:8], [0:1]}
  nv = f32[8,3]{1,0} slice(moved), slice={[0:8], [1:4]}
  sq = f32[8,4]{1,0} multiply(packed, packed), metadata={source_file="cartpole.py" source_line=45}
  zero = f32[] constant(0)
  total = f32[] reduce(sq, zero), dimensions={0,1}, to_apply=add_f32
  acc2 = f32[] add(acc, total)
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  ROOT out = (s32[], f32[8,1]{1,0}, f32[8,3]{1,0}, u32[8]{0}, f32[]) tuple(i2, nx, nv, shifted, acc2)
}

cond {
  cstate = (s32[], f32[8,1]{1,0}, f32[8,3]{1,0}, u32[8]{0}, f32[]) parameter(0)
  ci = s32[] get-tuple-element(cstate), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(ci, n), direction=LT
}

ENTRY main {
  x0 = f32[8,1]{1,0} parameter(0)
  v0 = f32[8,3]{1,0} parameter(1)
  k0 = u32[8]{0} parameter(2)
  zero.e = s32[] constant(0)
  acc0 = f32[] constant(0)
  init = (s32[], f32[8,1]{1,0}, f32[8,3]{1,0}, u32[8]{0}, f32[]) tuple(zero.e, x0, v0, k0, acc0)
  loop = (s32[], f32[8,1]{1,0}, f32[8,3]{1,0}, u32[8]{0}, f32[]) while(init), condition=cond, body=body, metadata={source_file="cartpole.py" source_line=60}
  ROOT final = f32[] get-tuple-element(loop), index=4
}
"""


def _refusals(result: FusionResult, rule: str) -> list[DecisionRecord]:
    return [r for r in result.decisions.unique() if r.rule == rule and r.is_refusal]


def test_study_barriers_in_a_packed_step_loop() -> None:
    result = run_strategy(parse_module(PACKED_STEP_LOOP), "xla")
    blocked = {r.rule for r in blocked_edges(result)}
    assert {"custom-call", "tuple-boundary", "control-flow-boundary",
            "code-duplication-too-high"} <= blocked

    custom = _refusals(result, "custom-call")
    assert any(r.producer == "bits" or r.consumer == "bits" for r in custom)
    assert any("cartpole.py:30" in r.source_lines for r in custom)

    concat = _refusals(result, "code-duplication-too-high")
    assert concat and all(r.figures["op"] == "concatenate" for r in concat)
    assert any(r.figures["instruction"] == "packed" and r.figures["users"] >= 2 for r in concat)
    assert any(r.figures.get("source_line") == "cartpole.py:41" for r in concat)

    loop = _refusals(result, "control-flow-boundary")
    assert {(r.producer, r.consumer) for r in loop} >= {("init", "loop"), ("loop", "final")}
    tuples = _refusals(result, "tuple-boundary")
    assert any(r.consumer == "out" for r in tuples) and any(r.producer == "x" for r in tuples)
    assert any(k.instructions == ("packed",) for k in result.kernels)

    hints = "\n".join(result.explain_dict()["hints"])  # type: ignore[arg-type]
    assert "the concatenate %packed at cartpole.py:41 has" in hints
    assert "xla+relax_concatenate" in hints
    assert "custom call %bits at cartpole.py:30" in hints


def test_relaxed_concatenate_removes_only_that_barrier() -> None:
    module = parse_module(PACKED_STEP_LOOP)
    strict = run_strategy(module, "xla")
    relaxed = run_strategy(module, "xla+relax_concatenate")
    assert not _refusals(relaxed, "code-duplication-too-high")
    assert _refusals(relaxed, "custom-call") and _refusals(relaxed, "tuple-boundary")
    loop = "loop"
    assert relaxed.kernels_per_iteration()[loop] == strict.kernels_per_iteration()[loop] - 1


def test_bare_concatenate_is_refused_by_instruction_fusion() -> None:
    """XLA's multi-user concatenate rule lives in instruction fusion's code-duplication check
    (CodeDuplicationTooHigh, asked when the consumer is a fusion already): the concatenate
    of two loop-carried pieces cannot take its operands in, so it is still bare when the
    duplicating sweep offers it to its two readers, both fusions by then."""
    result = run_strategy(parse_module(PACKED_STEP_LOOP), "xla")
    refused = [r for r in _refusals(result, "code-duplication-too-high")
               if r.figures["instruction"] == "packed"]
    # Multi-output fusion asks the same check (IsFusedIrEmitterInefficient) and refuses too.
    assert refused and "instruction-fusion" in {r.pass_name for r in refused}
    assert {r.pass_name for r in refused} <= {"instruction-fusion", "multi-output-fusion"}
    assert all(r.figures["users"] >= 2 and r.figures["emitted"] == 1 for r in refused)
    assert any(k.instructions == ("packed",) for k in result.kernels)


@pytest.mark.thorough
@pytest.mark.parametrize("rng", ["custom_call", "fused"])
def test_cartpole_packed_state_concatenate_merges_into_both_readers(rng: str) -> None:
    """The study's program: the packed state's concatenate is read whole by the termination
    test and the reset select. Instruction fusion's first sweep fuses the dynamics into it
    (each piece has one user), so it becomes the root of a fusion; XLA's fusion merger then
    merges that fusion into both readers, since inside it the concatenate has no users and
    each reader emits it once. No rule keeps it apart, so `relax_concatenate` changes
    nothing here (README, "CartPole under xla")."""
    module = cp.trace(cp.Variant(rng=rng), 6, 5)
    (loop,) = [i for i in module.entry.instructions if i.op is Op.WHILE]
    (state,) = [i.name for i in loop.calls[1].instructions
                if i.op is Op.CONCATENATE and i.shape.dims == (6, 4)]
    strict = run_strategy(module, "xla", debug=False)
    relaxed = run_strategy(module, "xla+relax_concatenate", debug=False)
    assert not [r for r in _refusals(strict, "code-duplication-too-high")
                if r.figures.get("instruction") == state]
    # The concatenate (or its clone) is inside both readers' kernels, never a kernel alone.
    readers = [k for k in strict.kernels
               if any(n == state or n.startswith(state + ".clone") for n in k.instructions)]
    assert len(readers) == 2 and all(len(k.instructions) > 1 for k in readers)
    assert all(k.loop == loop.name for k in readers)
    assert relaxed.kernels_per_iteration() == strict.kernels_per_iteration()


def test_rng_custom_call_is_its_own_kernel() -> None:
    result = run_strategy(parse_module(PACKED_STEP_LOOP), "xla")
    library = [k for k in result.kernels if k.kind == "library"]
    assert [k.instructions for k in library] == [("bits",)]
    assert library[0].loop == "loop"


def test_corpus_rollout_barriers() -> None:
    """The corpus rollout (Threefry in plain HLO, nested while loops) has no custom call and
    no concatenate with several users, but tuples and loop boundaries everywhere."""
    module = parse_module(load_corpus_case("cartpole_rollout")[0])
    result = run_strategy(module, "xla", debug=False)
    blocked = {r.rule for r in blocked_edges(result)}
    assert "custom-call" not in blocked
    assert {"tuple-boundary", "control-flow-boundary"} <= blocked
    per_iteration = result.kernels_per_iteration()
    assert len(per_iteration) == 5  # the step loop and four Threefry round loops inside it
    outer = [loop for loop in result.loops if not loop.loops]
    assert len(outer) == 1 and per_iteration[outer[0].name] > 0
