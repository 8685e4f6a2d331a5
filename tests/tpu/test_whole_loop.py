"""`max`'s whole-loop kernel on the TPU target (targets/tpu/whole_loop.py): one pallas_call
over blocks of lane tiles with the time loop inside, run with `interpret=True` (backend
`tpu-interpret`) equal to the reference interpreter, and lowered to Mosaic for the TPU
without one. What it cannot lower falls back to an XLA operation under a named rule."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from hlofuse import random
from hlofuse.api import compile_module
from hlofuse.envs import cartpole
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.studies.cartpole_study import known_steps
from hlofuse.targets.tpu import whole_loop
from hlofuse.targets.tpu.kernels import Kernel
from hlofuse.targets.tpu.lane_ops import _reshape_groups
from hlofuse.targets.tpu.listing import lower_for_tpu
from hlofuse.targets.tpu.program import kernel_structs, plan_kernels

from tests.tpu.test_interpret import assert_close, load_npz_case

ROLLOUTS = Path(__file__).parent.parent / "data" / "rollouts"
ALL_ROLLOUTS = sorted(p.name for p in ROLLOUTS.glob("*.cpu.hlo"))
FAST_ROLLOUTS = {"mountain_car.cpu.hlo"}
# Rollouts whose loop the kernel refuses (their loop then runs as one XLA operation, named
# by the rule): none of the corpus now (nested loops run inside the kernel, lane_nested.py;
# the policy-network rollouts' weights, read-only elements of their loops, are SMEM inputs).
REFUSED: set[str] = set()


def _lane_kernels(kernels: list[Kernel]) -> list[Kernel]:
    return [k for k in kernels if k.lanes is not None]


def _cartpole_max(n: int, steps: int) -> Module:
    return cartpole.trace(known_steps()["max"].variant, n, steps, 0)


def test_cartpole_max_is_one_lane_kernel_over_several_blocks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """N = 2,100 lanes in blocks of 8 x 128: three blocks, the last one padded; the episode
    counts (accumulated per lane, combined after the kernel) exact."""
    monkeypatch.setattr(whole_loop, "BLOCK_ROWS", 8)
    module = _cartpole_max(2100, 30)
    want = flatten_value(evaluate(module, [random.key(0)]))
    compiled = compile_module(module, "max", "tpu-interpret")
    lanes = _lane_kernels(compiled.executable.kernel_plans)  # type: ignore[union-attr]
    assert len(lanes) == 1 and lanes[0].lanes is not None
    assert (lanes[0].lanes.rows, lanes[0].lanes.grid) == (8, 3)
    got = compiled.run_flat([random.key(0)])
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=0, atol=1e-5)
    assert int(got[1]) == int(want[1]) > 0
    assert float(got[2]) == pytest.approx(float(want[2]), rel=1e-6)


def test_the_steps_uniform_work_is_a_table_made_before_the_kernel(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CartPole's keys (split from the carried key at every step) are the same in every
    block: with the trip count known they are computed before the kernel, a row per step,
    and the kernel reads them (whole_loop_uniform.py); two blocks still equal the
    interpreter bit for bit in their episode counts."""
    from hlofuse.targets.tpu import whole_loop_uniform
    from hlofuse.targets.tpu.whole_loop import LaneKernel

    monkeypatch.setattr(whole_loop, "BLOCK_ROWS", 8)
    monkeypatch.setattr(whole_loop_uniform, "TABLE_MIN_BLOCKS", 2)
    module = _cartpole_max(1100, 20)
    want = flatten_value(evaluate(module, [random.key(0)]))
    compiled = compile_module(module, "max", "tpu-interpret")
    got = compiled.run_flat([random.key(0)])
    lane = _lane_kernels(compiled.executable.kernel_plans)[0]  # type: ignore[union-attr]
    kernel = lane._call
    assert isinstance(kernel, LaneKernel) and kernel.tables is not None
    tables = kernel.tables
    assert tables.trips == 20
    words = dict(zip((str(k) for k in tables.kinds), tables.widths))
    assert words.get("uint32", 0) >= 2  # the action's and the reset's keys
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=0, atol=1e-5)
    assert int(got[1]) == int(want[1]) > 0


def test_the_time_loop_is_inside_one_kernel_for_the_tpu() -> None:
    """Lowered for the TPU without one: the lane kernel's Mosaic module holds the time loop
    (scf.while), works on (rows, 128) tiles, and computes the auto-reset's fresh draws under
    a branch (scf.if) taken when a lane of the block resets."""
    fused = run_strategy(_cartpole_max(4096, 4), "max", debug=False).module
    lanes = _lane_kernels(plan_kernels(fused, interpret=True))
    assert len(lanes) == 1
    text = lower_for_tpu(lanes[0], kernel_structs(lanes[0]))
    assert "scf.while" in text and "vector<32x128xf32>" in text
    assert "scf.if" in text


def _rollout_cases() -> list[object]:
    return [pytest.param(name, id=name.split(".")[0],
                         marks=[] if name in FAST_ROLLOUTS else [pytest.mark.slow])
            for name in ALL_ROLLOUTS]


@pytest.mark.parametrize("name", _rollout_cases())
def test_rollout_under_max_equals_the_interpreter(name: str) -> None:
    module, inputs = load_npz_case(ROLLOUTS / name)
    want = flatten_value(evaluate(module, inputs))
    compiled = compile_module(module, "max", "tpu-interpret")
    kernels = compiled.executable.kernel_plans  # type: ignore[union-attr]
    refused = [k for k in kernels if k.kind == "kCustom" and k.lanes is None]
    for kernel in refused:
        assert kernel.mode == "xla-op" and kernel.reason.startswith("tpu-whole-loop-"), \
            kernel.reason
    if name in REFUSED:
        assert refused
    else:
        assert _lane_kernels(kernels) and not refused
    assert_close(compiled.run_flat(inputs), want, 1e-4)


@pytest.mark.parametrize("name", ["mountain_car.cpu.hlo", "pendulum.cpu.hlo",
                                  "inventory_logged.cpu.hlo", "implicit_pendulum.cpu.hlo"])
def test_rollout_lane_kernels_lower_for_the_tpu(name: str) -> None:
    """Lowered as the program runs them (with x64 where the program has 64-bit values, as
    pendulum's random bits do): the time loop inside, and every BlockSpec index map returns
    int32 block indices (i64 ones made Mosaic refuse the kernel on the chip: "failed to
    legalize operation 'func.return'"); no 64-bit value inside (implicit_pendulum's nested
    Newton loop asked whether any lane goes on with a bool compared to a Python 0, an
    int64 under x64: "64-bit types are not supported")."""
    from hlofuse.targets.tpu.listing import wide_block_indices
    from hlofuse.targets.tpu.program import uses_wide_types

    module, _ = load_npz_case(ROLLOUTS / name)
    fused = run_strategy(module, "max", debug=False).module
    lanes = _lane_kernels(plan_kernels(fused, interpret=True))
    assert lanes
    for kernel in lanes:
        text = lower_for_tpu(kernel, kernel_structs(kernel), uses_wide_types(fused))
        assert "scf.while" in text
        # Every index map, those of one result (`-> i32`, SMEM inputs) too.
        assert re.findall(r"func\.func @transform_\d+\(", text)
        assert not wide_block_indices(text), wide_block_indices(text)


@pytest.mark.parametrize("name", [
    "spring_chain.gpu.hlo",
    pytest.param("jacobi_rope.gpu.hlo", marks=pytest.mark.slow),
    pytest.param("implicit_pendulum.gpu.hlo", marks=pytest.mark.slow)])
def test_nested_loops_are_loops_inside_the_lane_kernel(name: str) -> None:
    """The substeps, Jacobi iterations and per-lane Newton iterations (lane_nested.py): a
    while loop inside the time loop of the one kernel (lowered without a TPU)."""
    module, _ = load_npz_case(ROLLOUTS / name)
    fused = run_strategy(module, "max", debug=False).module
    lanes = _lane_kernels(plan_kernels(fused, interpret=True))
    assert len(lanes) == 1
    assert lower_for_tpu(lanes[0], kernel_structs(lanes[0])).count("scf.while") >= 2


def test_a_block_over_vmem_falls_back_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """A per-lane state that does not fit VMEM at the smallest block: the loop runs as an
    XLA operation under the named rule, never a Mosaic out-of-memory error."""
    monkeypatch.setattr(whole_loop, "VMEM_BUDGET", 1024)
    module = _cartpole_max(256, 12)
    want = flatten_value(evaluate(module, [random.key(0)]))
    compiled = compile_module(module, "max", "tpu-interpret")
    kernels = compiled.executable.kernel_plans  # type: ignore[union-attr]
    custom = [k for k in kernels if k.kind == "kCustom"]
    assert custom and all(k.mode == "xla-op" for k in custom)
    assert all(k.reason.startswith(whole_loop.VMEM_RULE) for k in custom)
    got = compiled.run_flat([random.key(0)])
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=0, atol=1e-5)


WIDE = """HloModule m
ENTRY e {
  i = u64[8] iota(), iota_dimension=0
  c = u64[] constant(%d)
  b = u64[8] broadcast(c), dimensions={}
  ROOT s = u64[8] add(i, b)
}
"""


@pytest.mark.parametrize(("offset", "refused"), [(32, False), (2**31, True)])
def test_64_bit_positions_are_computed_in_32_bits_only_below_2_to_the_31(
        offset: int, refused: bool) -> None:
    from hlofuse.ir.parser import parse_module
    from hlofuse.targets.tpu.lane_wide import wide_refusal

    module = parse_module(WIDE % offset, "wide")
    why = wide_refusal(list(module.entry.instructions))
    assert (why is not None) == refused
    if refused:
        assert why is not None and "u64" in why and "2^31" in why


@pytest.mark.parametrize(("out", "operand", "groups"), [
    ([8, 1], [1, 8], [([0, 1], [0, 1])]),
    ([1024], [4, 256], [([0], [0, 1])]),
    ([2, 3, 4], [6, 4], [([0, 1], [0]), ([2], [1])]),
    ([], [1, 1], [([], [0, 1])]),
])
def test_reshape_groups_keep_whole_dimensions_apart(out: list[int], operand: list[int],
                                                    groups: list[object]) -> None:
    assert _reshape_groups(out, operand) == groups


def test_read_only_weights_are_inputs_of_one_lane_kernel() -> None:
    """A whole loop with read-only elements (a policy's weights, 4 x 64, 64 x 64, 64 x 4) is
    planned as one lane kernel that takes them as inputs."""
    from tests.codegen.test_whole_loop_policy import _module as policy_module

    fused = run_strategy(policy_module(9, 1), "max", debug=False).module
    lanes = _lane_kernels(plan_kernels(fused, interpret=True))
    assert len(lanes) == 1 and lanes[0].lanes is not None
    plan = lanes[0].lanes.plan
    assert sorted(lanes[0].lanes.element_shape(e).dims for e in plan.read_only) == \
        sorted([(4, 64), (64, 64), (64, 4)])


@pytest.mark.slow
def test_read_only_weights_in_smem_equal_the_interpreter() -> None:
    """The policy loop's kernel reads its small layers' weights from SMEM and its 64 x 64
    layer's from VMEM (the MXU's, lane_products.py), equals the reference interpreter, and
    returns the weights unchanged."""
    from tests.codegen.test_whole_loop_policy import _arguments
    from tests.codegen.test_whole_loop_policy import _module as policy_module

    args = _arguments(9)
    module = policy_module(9, 1)
    compiled = compile_module(module, "max", "tpu-interpret")
    assert compiled.executable is not None
    lanes = _lane_kernels(compiled.executable.kernel_plans)  # type: ignore[attr-defined]
    assert len(lanes) == 1
    mosaic = lower_for_tpu(lanes[0], kernel_structs(lanes[0]))
    assert "memref<256xf32, #tpu.memory_space<smem>>" in mosaic
    assert "memref<64x64xf32, #tpu.memory_space<vmem>>" in mosaic
    assert "memref<4096xf32, #tpu.memory_space<smem>>" not in mosaic
    expected = flatten_value(evaluate(module, args))
    got = flatten_value(compiled(*args))
    for k, (a, e) in enumerate(zip(got, expected)):
        np.testing.assert_allclose(np.asarray(a), e, rtol=2e-5, atol=2e-6, err_msg=f"out{k}")
    for weights in args[2:]:
        assert any(np.array_equal(np.asarray(a), weights) for a in got)


def test_read_only_elements_over_smem_fall_back_with_the_rule_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Read-only elements larger than the kernel keeps in SMEM: the loop runs as an XLA
    operation, the listing names the rule. (The 64 x 64 layer's weights, read only by its
    product on the MXU, are in VMEM and do not count: the two small layers' 512 do.)"""
    from tests.codegen.test_whole_loop_policy import _module as policy_module

    monkeypatch.setattr(whole_loop, "READ_ONLY_WORDS", 256)
    fused = run_strategy(policy_module(37, 2), "max", debug=False).module
    refused = [k for k in plan_kernels(fused, interpret=True) if k.kind == "kCustom"]
    assert refused and all(k.lanes is None for k in refused)
    assert any(k.reason.startswith("tpu-whole-loop-read-only") and "SMEM" in k.reason
               for k in refused), [k.reason for k in refused]


def test_per_step_reductions_lower_over_several_blocks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A rollout whose scan logs reductions over the lanes every step (per-step tables in
    SMEM, a row per block) lowers for the TPU with more than one block: a block's last two
    dimensions must equal the array's, so the tables are (grid, 1, positions). The same
    kernel run over several blocks in interpret mode equals JAX."""
    import jax

    from hlofuse.ir.parser import parse_module
    from hlofuse.studies.rollouts_bench import load_programs

    monkeypatch.setattr(whole_loop, "BLOCK_ROWS", 8)
    rollout = load_programs(ROLLOUTS).ROLLOUTS["reacher_logged"](n=2048, t=3)
    # JAX's lowering for the TPU (Threefry unrolled; the CPU's has loops inside the body).
    text = jax.jit(rollout).trace(jax.random.PRNGKey(0)).lower(
        lowering_platforms=("tpu",)).as_text(dialect="hlo")
    fused = run_strategy(parse_module(text, "reacher_logged"), "max", debug=False).module
    lanes = [k for k in _lane_kernels(plan_kernels(fused, interpret=True))
             if k.lanes is not None and k.lanes.plan.step_reductions]
    assert lanes and lanes[0].lanes is not None and lanes[0].lanes.grid == 2
    assert "scf.while" in lower_for_tpu(lanes[0], kernel_structs(lanes[0]))
    key = np.asarray(jax.random.PRNGKey(0))
    want = jax.tree_util.tree_leaves(jax.jit(rollout)(key))
    got = compile_module(parse_module(text, "reacher_logged"), "max",
                         "tpu-interpret").run_flat([key])
    assert_close(got, [np.asarray(w) for w in want], 1e-4)


def test_uniform_elements_passed_on_unchanged_are_inputs_not_carried() -> None:
    """A uniform element the loop returns as it got it (a bias of 5 values, too small to be
    read-only) is an SMEM input read where used, not 5 scalars carried through the time
    loop; the rollout equals JAX."""
    import jax
    import jax.numpy as jnp

    from hlofuse.ir.parser import parse_module

    def rollout(x: jax.Array, bias: jax.Array) -> tuple[jax.Array, jax.Array]:
        def step(carry: tuple[jax.Array, jax.Array, jax.Array], _: None) -> tuple[
                tuple[jax.Array, jax.Array, jax.Array], None]:
            x, bias, t = carry
            return (jnp.tanh(x * bias[t % 5] + bias[4]), bias, t + 1), None

        (x, bias, _), _ = jax.lax.scan(step, (x, bias, jnp.int32(0)), None, length=3)
        return x, bias

    x = np.linspace(-1, 1, 300, dtype=np.float32)
    bias = np.array([0.5, -1.0, 2.0, 0.25, 0.1], np.float32)
    text = jax.jit(rollout).lower(x, bias).as_text(dialect="hlo")
    fused = run_strategy(parse_module(text, "bias"), "max", debug=False).module
    lanes = _lane_kernels(plan_kernels(fused, interpret=True))
    assert len(lanes) == 1 and lanes[0].lanes is not None
    layout = lanes[0].lanes
    fixed = layout.fixed_elements()
    assert any(layout.element_shape(e).dims == (5,) for e in fixed)
    assert all(layout.element_shape(e).num_elements == 1 for e in layout.carried_uniform())
    got = compile_module(parse_module(text, "bias"), "max", "tpu-interpret").run_flat([x, bias])
    want = [np.asarray(w) for w in jax.jit(rollout)(x, bias)]
    assert_close(got, want, 1e-5)


def test_vector_statistics_across_the_lanes_are_one_lane_kernel(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan logging [2] statistics over the lanes every step (a mean, a maximum, a count
    and a spread made of two reductions): one lane kernel whose per-step tables hold a
    partial per component, over two blocks (1,100 lanes in blocks of 8 x 128, the second
    padded), equal to the interpreter and lowered for the TPU; with too little SMEM for its
    tables the loop falls back and says why."""
    from tests.codegen.test_whole_loop_step_reductions import KEY, _module, _particles

    monkeypatch.setattr(whole_loop, "BLOCK_ROWS", 8)
    n = 1100
    p0 = np.linspace(-0.5, 0.5, 2 * n, dtype=np.float32).reshape(n, 2)
    module = _module(_particles(n, 4), KEY, p0)
    fused = run_strategy(module, "max", debug=False).module
    (kernel,) = _lane_kernels(plan_kernels(fused, interpret=True))
    assert kernel.lanes is not None and kernel.lanes.grid == 2
    assert any(r.components == 2 for s in kernel.lanes.plan.step_reductions for r in s.reduces)
    assert "scf.while" in lower_for_tpu(kernel, kernel_structs(kernel))
    want = flatten_value(evaluate(module, [KEY, p0]))
    assert_close(compile_module(module, "max", "tpu-interpret").run_flat([KEY, p0]), want,
                 1e-5)
    monkeypatch.setattr(whole_loop, "STEP_TABLE_WORDS", 16)
    refused = [k for k in plan_kernels(fused, interpret=True) if k.kind == "kCustom"]
    assert refused and all(k.lanes is None for k in refused)
    assert any(k.reason.startswith("tpu-whole-loop-op") and "words of SMEM" in k.reason
               for k in refused), [k.reason for k in refused]


def test_statistics_of_draws_alone_are_one_lane_kernel(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """A random policy logging statistics of its draws alone (values made from the step's
    key and the lane's number): the blocks reduce them; as uniform code the sum over 1,100
    lanes was written out position by position, past the step's budget, and the loop fell
    back to an XLA operation."""
    from tests.codegen.test_whole_loop_step_reductions import KEY, _module, _random_policy

    monkeypatch.setattr(whole_loop, "BLOCK_ROWS", 8)
    n = 1100
    x0 = np.zeros(n, np.float32)
    module = _module(_random_policy(n, 5), KEY, x0)
    fused = run_strategy(module, "max", debug=False).module
    (kernel,) = _lane_kernels(plan_kernels(fused, interpret=True))
    assert kernel.lanes is not None and len(kernel.lanes.plan.step_reductions) == 3
    want = flatten_value(evaluate(module, [KEY, x0]))
    assert_close(compile_module(module, "max", "tpu-interpret").run_flat([KEY, x0]), want,
                 1e-5)


def test_a_blocks_int32_sum_is_exact_and_wraps_like_int32() -> None:
    """32-bit integer sums under x64 are byte sums in f32 (Pallas lowers an int32 reduce_sum
    through a 64-bit one there, which Mosaic refuses): exact for any words, negative ones
    and sums past 2^31 wrapping as int32 addition does, over all dimensions or some, and
    for uint32."""
    from hlofuse.targets.tpu.lax_ops import exact_int_sum

    rng = np.random.default_rng(0)
    words = rng.integers(-2**31, 2**31, size=(64, 128), dtype=np.int64).astype(np.int32)
    words[0, :4] = [2**31 - 1, 2**31 - 1, -2**31, -1]
    assert int(exact_int_sum(words, (0, 1))) == int(np.sum(words, dtype=np.int32))
    np.testing.assert_array_equal(np.asarray(exact_int_sum(words, (1,))),
                                  np.sum(words, axis=1, dtype=np.int32))
    unsigned = words.view(np.uint32)
    np.testing.assert_array_equal(np.asarray(exact_int_sum(unsigned, (0,))),
                                  np.sum(unsigned, axis=0, dtype=np.uint32))


def test_block_rows_follow_the_carry_and_n(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of up to 64 rows while the carried tiles fit CARRY_REGISTERS vector registers
    (CartPole: 5 held positions and 2 accumulators, 56 registers at 64 rows), half as many
    rows when they would not (a register file of 28 for the same carry), and fewer for a
    small N (1,000 lanes: one block of 8 rows)."""
    def lanes_of(n: int) -> whole_loop.LaneLayout:
        fused = run_strategy(_cartpole_max(n, 4), "max", debug=False).module
        (kernel,) = _lane_kernels(plan_kernels(fused, interpret=True))
        assert kernel.lanes is not None
        return kernel.lanes

    layout = lanes_of(65536)
    assert (layout.rows, layout.grid) == (64, 8)
    carried = sum(layout.positions(e) for e in layout.plan.per_lane) + \
        len(layout.plan.accumulators)
    assert carried == 7
    small = lanes_of(1000)
    assert (small.rows, small.grid) == (8, 1)
    monkeypatch.setattr(whole_loop, "CARRY_REGISTERS", 28)
    assert (lanes_of(65536).rows, lanes_of(65536).grid) == (32, 16)


def test_a_lanes_own_row_read_by_position_is_one_lane_kernel() -> None:
    """`q[arange(n), s]` (own-row-gather's batched form) inside the time loop: one lane
    kernel, equal to the interpreter."""
    from tests.passes.test_own_row_gather import TABLE_LOOP

    module = parse_module(TABLE_LOOP)
    rng = np.random.default_rng(5)
    args = [np.int32(0), rng.standard_normal((8, 3)).astype(np.float32),
            rng.integers(0, 3, 8).astype(np.int32)]
    want = flatten_value(evaluate(module, args))
    compiled = compile_module(module, "max", "tpu-interpret")
    assert len(_lane_kernels(compiled.executable.kernel_plans)) == 1  # type: ignore[union-attr]
    for got, expected in zip(compiled.run_flat(args), want):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
