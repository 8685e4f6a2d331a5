"""Lane-uniform products of a whole-loop kernel on the MXU (targets/tpu/lane_products.py):
the lanes' contracted tiles stacked, multiplied by the weights in VMEM, the outputs read
back as tiles; small products stay written out on the vector unit."""

from __future__ import annotations

import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.fusion.strategies import run_strategy
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.tpu import whole_loop
from hlofuse.targets.tpu.kernels import Kernel
from hlofuse.targets.tpu.listing import lower_for_tpu
from hlofuse.targets.tpu.product_plan import explain_lines, on_the_mxu
from hlofuse.targets.tpu.program import kernel_structs, plan_kernels

from tests.tpu.test_interpret import assert_close


@pytest.mark.parametrize(("k", "m", "mxu"), [(64, 64, True), (32, 32, True), (48, 32, True),
                                             (16, 16, False), (64, 3, False), (3, 64, False)])
def test_small_products_stay_on_the_vector_unit(k: int, m: int, mxu: bool) -> None:
    assert on_the_mxu(k, m) is mxu


def _module(constants: bool) -> tuple[object, list[np.ndarray]]:
    """Lanes whose 32 values go through a 32 -> 48 layer (the weights the dot's rhs) and a
    48 -> 32 layer (the weights its lhs, the lanes on the rhs's free dimension), two steps;
    weights neither square nor symmetric, so a transposed matrix or a misplaced position
    changes the result. The weights are arguments carried through the loop unchanged, or
    (`constants`) arrays the jitted function closed over: constants in the loop's body."""
    import jax
    import jax.numpy as jnp

    from hlofuse.ir.parser import parse_module

    def rollout(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
        Carry = tuple[jax.Array, jax.Array, jax.Array]

        def step(carry: Carry, _: None) -> tuple[Carry, None]:
            x, w1, w2 = carry
            h = jnp.tanh(jnp.dot(x, w1, precision="highest"))
            y = jnp.dot(w2, h.T, precision="highest").T
            return (0.5 * x + jnp.tanh(y), w1, w2), None

        (x, _, _), _ = jax.lax.scan(step, (x, w1, w2), None, length=2)
        return x

    rng = np.random.default_rng(7)
    args = [rng.standard_normal((2000, 32)).astype(np.float32),
            (rng.standard_normal((32, 48)) / 6).astype(np.float32),
            (rng.standard_normal((32, 48)) / 7).astype(np.float32)]
    if constants:
        x, w1, w2 = args
        text = jax.jit(lambda x: rollout(x, w1, w2)).lower(x).as_text(dialect="hlo")
        return parse_module(text, "products"), [x]
    text = jax.jit(rollout).lower(*args).as_text(dialect="hlo")
    return parse_module(text, "products"), args


def _lane_kernel(module: object, monkeypatch: pytest.MonkeyPatch) -> Kernel:
    # weights read only by MXU products are VMEM inputs: SMEM's limit does not apply
    monkeypatch.setattr(whole_loop, "READ_ONLY_WORDS", 64)
    fused = run_strategy(module, "max", debug=False).module  # type: ignore[arg-type]
    lanes = [k for k in plan_kernels(fused, interpret=True) if k.lanes is not None]
    assert len(lanes) == 1
    (line,) = explain_lines(fused)  # what `hlofuse explain` says of the products
    assert "on the MXU: %" in line and "(32 -> 48)" in line and "(48 -> 32)" in line
    assert "written out" not in line
    return lanes[0]


@pytest.mark.parametrize("constants", [False, True], ids=["carried", "constants"])
def test_lane_uniform_products_run_on_the_mxu_and_equal_the_interpreter(
        constants: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    module, args = _module(constants)
    kernel = _lane_kernel(module, monkeypatch)
    layout = kernel.lanes
    assert layout is not None and layout.rows == 16  # two vector registers a tile
    assert not layout.smem_elements()
    assert len(layout.in_vmem) == (0 if constants else 2)
    products = sorted((p.k, p.m, p.side, p.mxu) for p in layout.products.values())
    assert products == [(32, 48, 1, True), (48, 32, 0, True)]
    assert "on the MXU" in layout.describe()
    mosaic = lower_for_tpu(kernel, kernel_structs(kernel))
    assert "tpu.matmul" in mosaic and "contract_precision<fp32>" in mosaic
    assert "vmem>" in mosaic
    want = flatten_value(evaluate(module, args))  # type: ignore[arg-type]
    got = compile_module(module, "max", "tpu-interpret").run_flat(args)  # type: ignore[arg-type]
    assert_close(got, want, 1e-5)
