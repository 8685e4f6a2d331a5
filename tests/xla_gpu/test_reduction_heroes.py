"""A reduction with an element-wise epilogue is a reduction kernel in today's XLA (its
outputs' heroes decide, FindNonTrivialHero): CanFuse keeps it out of a dynamic-update-slice,
and multi-output fusion runs it over the reduction's input shape. HLO text in, kernels out,
values the reference interpreter's."""

from __future__ import annotations

import numpy as np

from hlofuse.api import compile_module
from hlofuse.fusion.kernels import Kernel
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value

# rollout_jacobi_rope's logging step: the distance of the last bead (a row reduction with a
# sqrt and a negation after it) written into the log by a dynamic-update-slice, and its
# out-of-range flag (a reduce_or of a pred over the same slice).
LOGGED = """
HloModule logged
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT sum = f32[] add(a, b)
}
or_pred {
  p = pred[] parameter(0)
  q = pred[] parameter(1)
  ROOT either = pred[] or(p, q)
}
ENTRY e {
  x = f32[8,10,2] parameter(0)
  log = f32[30,8] parameter(1)
  step = s32[] parameter(2)
  last = f32[8,1,2] slice(x), slice={[0:8], [9:10], [0:2]}
  flat = f32[8,2] reshape(last)
  four = f32[] constant(4)
  fours = f32[8,2] broadcast(four), dimensions={}
  far = pred[8,2] compare(flat, fours), direction=GT
  no = pred[] constant(false)
  out = pred[8] reduce(far, no), dimensions={1}, to_apply=or_pred
  squares = f32[8,2] multiply(flat, flat)
  zero = f32[] constant(0)
  total = f32[8] reduce(squares, zero), dimensions={1}, to_apply=add_f32
  distance = f32[8] sqrt(total)
  negated = f32[8] negate(distance)
  row = f32[1,8] reshape(negated)
  first = s32[] constant(0)
  logged = f32[30,8] dynamic-update-slice(log, row, step, first)
  ROOT r = (pred[8], f32[30,8]) tuple(out, logged)
}
"""


def _args() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [(4 * rng.standard_normal((8, 10, 2))).astype(np.float32),
            rng.standard_normal((30, 8)).astype(np.float32), np.int32(3)]


def _kernel_of(kernels: list[Kernel], name: str) -> tuple[str, ...]:
    (kernel,) = [k for k in kernels if name in k.instructions]
    return tuple(kernel.instructions)


def test_a_reduction_with_an_epilogue_stays_out_of_a_dynamic_update_slice() -> None:
    """XLA's CanFuse: the producer's emitter kind is kReduction (the hero of `negated` is
    `total`), the fused kernel's would be kLoop (a dynamic-update-slice's hero is itself):
    refused; the reduction shares its kernel with the sibling reduce_or, as XLA's
    input_reduce_fusion.1 does."""
    result = run_strategy(parse_module(LOGGED), "xla-gpu")
    refused = [r for r in result.decisions if r.rule == "reduction-epilogue-becomes-loop"]
    assert refused and all(r.pass_name == "gpu-priority-fusion" for r in refused)
    reduction = _kernel_of(result.kernels, "total")
    assert {"distance", "negated", "out"} <= set(reduction)
    assert "logged" not in reduction and "logged" in _kernel_of(result.kernels, "row")
    # The two kernels, and the copy of the log (an entry parameter updated in place).
    assert sorted(k.kind for k in result.kernels if k.ops != ("copy",)) == ["kInput", "kLoop"]


def test_the_compiled_kernels_compute_the_reference_values() -> None:
    module = parse_module(LOGGED)
    args = _args()
    compiled = compile_module(module, "xla-gpu", "cpu")
    for got, want in zip(compiled(*args), flatten_value(evaluate(module, args)), strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
