"""Reductions over inputs too large for one block run as tiled reductions (`tiled-reduce`:
a grid over blocks, the reduced axes 'arbitrary', accumulators in VMEM scratch), equal to the
reference interpreter in interpret mode (floats within the project's tolerance: the sums are
grouped differently; integers exactly), and lower to Mosaic without a TPU."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.tpu.program import plan_kernels

from tests.tpu.test_interpret import assert_close
from tests.tpu.test_lowering import assert_every_kernel_lowers


def reduce_module(dims: tuple[int, ...], reduced: tuple[int, ...], op: str, dtype: str,
                  init: str = "0", extra: str = "") -> Module:
    """`reduce(p * p + 1, init)` over `reduced` of p: dtype[dims] (the producers fused in);
    `init` a constant's literal or "parameter"; `extra` another parameter's type, passed
    through (a program with 64-bit values)."""
    def text(ds: tuple[int, ...]) -> str:
        return f"{dtype}[{','.join(map(str, ds))}]"

    out = tuple(d for k, d in enumerate(dims) if k not in reduced)
    init_line = f"z = {dtype}[] " + ("parameter(1)" if init == "parameter" else
                                     f"constant({init})")
    root = f"ROOT r = {text(out)} reduce(a, z), dimensions={{{','.join(map(str, reduced))}}}, " \
        "to_apply=red"
    if extra:
        root = (f"r = {text(out)} reduce(a, z), dimensions={{{','.join(map(str, reduced))}}}, "
                f"to_apply=red\n  w = {extra} parameter(1)\n  ROOT t = ({text(out)}, {extra}) "
                "tuple(r, w)")
    return parse_module(f"""HloModule m
red {{
  x = {dtype}[] parameter(0)
  y = {dtype}[] parameter(1)
  ROOT s = {dtype}[] {op}(x, y)
}}
ENTRY e {{
  p = {text(dims)} parameter(0)
  m = {text(dims)} multiply(p, p)
  one = {dtype}[] constant(1)
  b = {text(dims)} broadcast(one), dimensions={{}}
  a = {text(dims)} add(m, b)
  {init_line}
  {root}
}}""", "m")


def random_input(dims: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "s32":
        return rng.integers(-3000, 3000, dims, dtype=np.int32)
    return rng.uniform(-1, 1, dims).astype(np.float32)


def assert_tiled_and_equal(module: Module, inputs: list[np.ndarray], strategy: str,
                           backend: str = "tpu-interpret") -> None:
    compiled = compile_module(module, strategy, backend)
    plans = compiled.executable.kernel_plans  # type: ignore[union-attr]
    assert any(k.layout == "tiled-reduce" for k in plans), \
        [(k.name, k.layout, k.reason) for k in plans]
    assert_close(compiled.run_flat(inputs), flatten_value(evaluate(module, inputs)), 1e-5)


CASES = [  # (dims, reduced, op, dtype): full, row and column reductions over 1M elements
    ((1048576,), (0,), "add", "f32"),  # whole blocks
    ((1000003,), (0,), "add", "s32"),  # the last row and block padded: masked
    ((1000003,), (0,), "minimum", "f32"),
    ((1024, 1024), (1,), "maximum", "f32"),
    ((1000, 1100), (1,), "add", "s32"),  # rows not a multiple of the block's: padded
    ((600, 3000), (1,), "add", "f32"),  # rows longer than a block's lanes: masked lanes
    ((1024, 1024), (0,), "add", "f32"),
    ((3000, 300), (0,), "minimum", "s32"),  # columns over a padded, masked reduced axis
    ((8, 3000, 70), (1,), "maximum", "f32"),  # [A, R, C] -> [A, C]
]


@pytest.mark.parametrize(("dims", "reduced", "op", "dtype"), CASES,
                         ids=[f"{c[2]}-{c[3]}-{'x'.join(map(str, c[0]))}-{c[1]}" for c in CASES])
def test_reductions_are_tiled_and_equal_the_interpreter(
        dims: tuple[int, ...], reduced: tuple[int, ...], op: str, dtype: str) -> None:
    module = reduce_module(dims, reduced, op, dtype)
    assert_tiled_and_equal(module, [random_input(dims, dtype)], "xla")


@pytest.mark.parametrize("strategy", ["none", "priority", "max"])
def test_every_strategy_forms_tiled_reductions(strategy: str) -> None:
    dims = (1000, 1100)
    module = reduce_module(dims, (1,), "add", "f32")
    assert_tiled_and_equal(module, [random_input(dims, "f32")], strategy)


def test_an_init_that_is_not_the_identity_is_added_once() -> None:
    """A sum from 5 over a padded input: the padding adds 0 (the identity), the init once.
    Under `none` (unfused): `xla`'s tree reduction pads the input with the init value itself
    (as XLA's rewriter does, taking the init for the identity), which the fused module's
    own result then counts 1,998 times more."""
    dims = (1000003,)
    module = reduce_module(dims, (0,), "add", "s32", init="5")
    assert_tiled_and_equal(module, [random_input(dims, "s32")], "none")


def test_an_int32_sum_under_x64_is_exact() -> None:
    """A program with 64-bit values runs with x64 enabled: the accumulator's int32 sum is
    summed as bytes (an int32 reduce_sum lowers through a 64-bit one there), exactly, and
    the kernel lowers."""
    dims = (1000, 1100)
    module = reduce_module(dims, (1,), "add", "s32", extra="s64[4]")
    inputs = [random_input(dims, "s32"), np.arange(4, dtype=np.int64)]
    assert_tiled_and_equal(module, inputs, "xla")
    assert assert_every_kernel_lowers(run_strategy(module, "xla", debug=False).module) >= 1


def test_what_does_not_qualify_keeps_the_old_path() -> None:
    """A non-constant init, a bf16 sum (HLO rounds it after every element) and a transposing
    reduction (dimensions {0, 2} of three) are not tiled: XLA operations, saying why."""
    dims = (8, 3000, 70)
    cases = [reduce_module((1024, 1024), (1,), "add", "bf16"),
             reduce_module(dims, (0, 2), "add", "f32"),
             reduce_module((1024, 1024), (1,), "add", "f32", init="parameter")]
    for module in cases:
        fused = run_strategy(module, "none", debug=False).module
        large = [k for k in plan_kernels(fused, True) if k.kind == "reduce"]
        assert large and all(k.mode == "xla-op" and "reduce_tiled" in k.reason for k in large)


def test_the_listing_says_the_layout() -> None:
    dims = (3000, 300)
    fused = run_strategy(reduce_module(dims, (0,), "minimum", "s32"), "xla", debug=False).module
    from hlofuse.targets.tpu.listing import pallas_listing

    listing = pallas_listing(plan_kernels(fused, True))
    assert "pallas_call tiled-reduce: column reduction of the input as (1, 3000, 300)" in listing
    assert "VMEM scratch" in listing and "masked to the identity" in listing


def test_blocks_keep_to_the_vmem_model() -> None:
    """Each block's inputs double-buffered, a value per instruction and the accumulator fit
    BLOCK_VMEM_BYTES, counted on lanes padded to 128 (VMEM's tiles); lanes are whole rows up
    to LANE_BLOCK, else multiples of 128."""
    from hlofuse.targets.tpu.blocks import BLOCK_VMEM_BYTES
    from hlofuse.targets.tpu.reduce_tiled import LANE_BLOCK

    for dims, reduced, op, dtype in CASES:
        fused = run_strategy(reduce_module(dims, reduced, op, dtype), "none", debug=False).module
        for kernel in plan_kernels(fused, True):
            layout = kernel.reduction
            if layout is None:
                continue
            rows, lanes = layout.block
            assert lanes <= LANE_BLOCK and (lanes == layout.view[2] or lanes % 128 == 0)
            assert rows == layout.view[1] or rows % 32 == 0
            per_element = 2 * 4 + 4 * 2  # one f32 input; the reduce and its accumulator
            assert rows * -(-lanes // 128) * 128 * per_element <= BLOCK_VMEM_BYTES


@pytest.mark.parametrize(("dims", "reduced", "op", "dtype"), CASES[::2],
                         ids=[f"{c[2]}-{c[3]}-{'x'.join(map(str, c[0]))}" for c in CASES[::2]])
def test_tiled_reductions_lower_to_mosaic(dims: tuple[int, ...], reduced: tuple[int, ...],
                                          op: str, dtype: str) -> None:
    """Lowered for the TPU without one: the grid's reduced axis 'arbitrary' and the
    accumulator a VMEM scratch buffer in the Mosaic module."""
    from hlofuse.targets.tpu.listing import lower_for_tpu
    from hlofuse.targets.tpu.program import kernel_structs

    fused = run_strategy(reduce_module(dims, reduced, op, dtype), "xla", debug=False).module
    kernels = [k for k in plan_kernels(fused, True) if k.layout == "tiled-reduce"]
    assert kernels
    for kernel in kernels:
        text = lower_for_tpu(kernel, kernel_structs(kernel))
        assert "#tpu.dimension_semantics<arbitrary>" in text
        assert "memref<" in text and "#tpu.memory_space<vmem>" in text


MULTI_OUTPUT = """HloModule mo
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
mx {
  ma = f32[] parameter(0)
  mb = f32[] parameter(1)
  ROOT ms = f32[] maximum(ma, mb)
}
fused {
  p = f32[1000,1100] parameter(0)
  m = f32[1000,1100] multiply(p, p)
  z = f32[] constant(0)
  r1 = f32[1000] reduce(m, z), dimensions={1}, to_apply=add
  ninf = f32[] constant(-inf)
  r2 = f32[1000] reduce(p, ninf), dimensions={1}, to_apply=mx
  ROOT t = (f32[1000], f32[1000]) tuple(r1, r2)
}
ENTRY e {
  x = f32[1000,1100] parameter(0)
  ROOT f = (f32[1000], f32[1000]) fusion(x), kind=kInput, calls=fused
}"""


def test_a_multi_output_reduction_is_one_call_with_two_accumulators() -> None:
    """Sibling reductions fused into one kernel (a sum of squares and a max of one input):
    one tiled call, an accumulator per reduce, both outputs equal to the interpreter."""
    module = parse_module(MULTI_OUTPUT, "mo")
    fused = run_strategy(module, "none", debug=False).module
    [kernel] = plan_kernels(fused, True)
    assert kernel.reduction is not None and len(kernel.reduction.ops) == 2
    assert_tiled_and_equal(module, [random_input((1000, 1100), "f32")], "none")
