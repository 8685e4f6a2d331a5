"""8- and 16-bit integer kernels computed in int32 words (targets/tpu/words.py): every op's
word form equal to the interpreter over every pair of 8-bit values (wrap-around, division by
zero, shift counts past the width), the kernels that held s8 as s8 now Pallas kernels or XLA
operations on int32, named so in the listing, and lowered for the TPU without one."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.tpu.listing import pallas_listing
from hlofuse.targets.tpu.program import kernel_structs, plan_kernels

from tests.tpu.test_interpret import assert_close
from tests.tpu.test_lowering import assert_every_kernel_lowers

BINARY = ["add", "subtract", "multiply", "divide", "remainder", "and", "or", "xor",
          "shift-left", "shift-right-logical", "shift-right-arithmetic", "maximum", "minimum"]
UNARY = ["negate", "abs", "not", "popcnt", "count-leading-zeros", "sign"]


def _pairs(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of 8-bit values; for 16 bits the edges and a random sample."""
    info = np.iinfo(dtype)
    if info.bits == 8:
        values = np.arange(info.min, info.max + 1)
        x, y = np.meshgrid(values, values)
        return x.ravel().astype(dtype), y.ravel().astype(dtype)
    edges = np.array([info.min, info.min + 1, -1 if info.min else 1, 0, 1, 2, 7, 15, 16,
                      17, 31, 32, 33, info.max - 1, info.max], np.int64) % (info.max + 1 -
                                                                            info.min) + info.min
    rng = np.random.default_rng(0)
    sample = rng.integers(info.min, info.max + 1, 4096 - edges.size ** 2)
    x, y = np.meshgrid(edges, edges)
    return (np.concatenate([x.ravel(), sample]).astype(dtype),
            np.concatenate([y.ravel(), rng.permutation(sample)]).astype(dtype))


def _ops_module(t: str, n: int) -> str:
    lines = [f"  x = {t}[{n}] parameter(0)", f"  y = {t}[{n}] parameter(1)",
             f"  f = f32[{n}] parameter(2)"]
    names = []
    for op in BINARY:
        lines.append(f"  {op.replace('-', '_')} = {t}[{n}] {op}(x, y)")
        names.append(op.replace("-", "_"))
    for op in UNARY:
        lines.append(f"  {op.replace('-', '_')} = {t}[{n}] {op}(x)")
        names.append(op.replace("-", "_"))
    kind = "UNSIGNED" if t.startswith("u") else "SIGNED"
    other = {"s8": "u8", "u8": "s8", "s16": "u16", "u16": "s16"}[t]
    lines += [
        f"  lt = pred[{n}] compare(x, y), direction=LT, type={kind}",
        f"  ge = pred[{n}] compare(x, y), direction=GE",
        f"  to_f32 = f32[{n}] convert(x)",
        f"  to_s32 = s32[{n}] convert(x)",
        f"  to_u32 = u32[{n}] convert(x)",
        f"  to_other = {other}[{n}] convert(x)",
        f"  bits_other = {other}[{n}] bitcast-convert(x)",
        f"  from_f32 = {t}[{n}] convert(f)",
        f"  s32_sum = s32[{n}] add(to_s32, to_s32)",
        f"  from_s32 = {t}[{n}] convert(s32_sum)",
        f"  from_u32 = {t}[{n}] convert(to_u32)",
    ]
    names += ["lt", "ge", "to_f32", "to_s32", "to_u32", "to_other",
              "bits_other", "from_f32", "from_s32", "from_u32"]
    shapes = {line.split(" = ")[0].strip(): line.split(" = ")[1].split(" ")[0]
              for line in lines}
    root = f"({', '.join(shapes[n] for n in names)}) tuple({', '.join(names)})"
    return f"HloModule ops_{t}\nENTRY e {{\n" + "\n".join(lines) + f"\n  ROOT r = {root}\n}}\n"


@pytest.mark.parametrize("t", ["s8", "u8", "s16", "u16"])
def test_every_op_in_words_equals_the_interpreter(t: str) -> None:
    """Each instruction a kernel of its own, run as an XLA operation on int32 words (the
    form grid_forage's s8 kernels now take): equal to the interpreter bit for bit."""
    x, y = _pairs(np.dtype({"s8": "int8", "u8": "uint8", "s16": "int16", "u16": "uint16"}[t]))
    f = np.concatenate([np.array([np.nan, np.inf, -np.inf, 1e9, -1e9, 300.5, -300.5, 127.9,
                                  -128.9, 255.5, 65535.7, -0.9], np.float32),
                        np.linspace(-70000, 70000, x.size - 12, dtype=np.float32)])
    module = parse_module(_ops_module(t, x.size), "ops")
    inputs = [x, y, f]
    want = flatten_value(evaluate(module, inputs))
    kernels = plan_kernels(module, interpret=True)
    for k in kernels:
        k.as_xla_op("word forms tested outside Pallas")
    values = {"x": x, "y": y, "f": f}
    got = []
    for k in kernels:
        leaves = [values[o.name] for o in k.instruction.operands]
        (out,) = jax.jit(lambda *a, k=k: k(*a))(*leaves)
        values[k.name] = np.asarray(out)
        assert values[k.name].dtype == np.dtype(k.instruction.dtype.numpy), k.name
    got = [values[o.name] for o in module.entry.root.operands]
    for name, g, w in zip((o.name for o in module.entry.root.operands), got, want):
        np.testing.assert_array_equal(g, w, err_msg=f"{t} {name}")


# grid_forage's reset kernel in small: an s8 board from a float draw, a wall cleared at each
# lane's position by a batched scatter, and s8 sums and products that wrap.
BOARD = """HloModule board
set {
  a = s8[] parameter(0)
  ROOT b = s8[] parameter(1)
}
add {
  l = s8[] parameter(0)
  r = s8[] parameter(1)
  ROOT s = s8[] add(l, r)
}
ENTRY e {
  u = f32[16,10,10] parameter(0)
  pos = s32[16,2] parameter(1)
  x = s8[2048] parameter(2)
  y = s8[2048] parameter(3)
  limit = f32[] constant(0.5)
  limits = f32[16,10,10] broadcast(limit), dimensions={}
  wall = pred[16,10,10] compare(u, limits), direction=LT
  walls = s8[16,10,10] convert(wall)
  zero = s8[] constant(0)
  zeros = s8[16] broadcast(zero), dimensions={}
  cleared = s8[16,10,10] scatter(walls, pos, zeros), update_window_dims={},
    inserted_window_dims={1,2}, scatter_dims_to_operand_dims={1,2}, input_batching_dims={0},
    scatter_indices_batching_dims={0}, index_vector_dim=1, indices_are_sorted=true,
    unique_indices=true, to_apply=set
  count = s8[16] reduce(cleared, zero), dimensions={1,2}, to_apply=add
  three = s8[] constant(3)
  threes = s8[2048] broadcast(three), dimensions={}
  sum = s8[2048] add(x, y)
  product = s8[2048] multiply(sum, threes)
  shifted = s8[2048] shift-right-logical(product, threes)
  ROOT out = (s8[16,10,10], s8[16], s8[2048], s8[2048]) tuple(cleared, count, product, shifted)
}
"""


def _board_inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.random((16, 10, 10), dtype=np.float32),
            rng.integers(0, 10, (16, 2)).astype(np.int32),
            rng.integers(-128, 128, 2048).astype(np.int8),
            rng.integers(-128, 128, 2048).astype(np.int8)]


def test_narrow_kernels_run_on_words() -> None:
    """The s8 kernels: the element-wise one and the reduction Pallas kernels (before, s8
    made both XLA operations), the scatter an XLA operation whose scatter is on int32, the
    listing naming the words; the values equal to the interpreter (sums past 127 wrap)."""
    module = parse_module(BOARD, "board")
    fused = run_strategy(module, "xla", debug=False).module
    kernels = plan_kernels(fused, interpret=True)
    narrow = [k for k in kernels if k.word_types]
    assert narrow and all(k.word_types == ("s8",) for k in narrow)
    listing = pallas_listing(kernels)
    assert sum(k.mode == "pallas" for k in narrow) == 3, listing  # element-wise, reduce
    assert listing.count("s8 computed in int32 words") == len(narrow) == 4
    (scatter,) = [k for k in narrow if k.mode == "xla-op"]
    assert "(scatter)" in scatter.reason
    jaxpr = jax.make_jaxpr(lambda *a: scatter(*a))(*kernel_structs(scatter))
    scatters = [e for e in jaxpr.eqns if e.primitive.name.startswith("scatter")]
    assert scatters and all(str(e.invars[0].aval.dtype) == "int32" for e in scatters)
    assert assert_every_kernel_lowers(fused) >= 2

    inputs = _board_inputs()
    want = flatten_value(evaluate(module, inputs))
    assert np.abs(inputs[2].astype(int) + inputs[3]).max() > 127  # the sums wrap
    got = compile_module(module, "xla", "tpu-interpret").run_flat(inputs)
    assert_close(got, want, 0.0)


def test_a_scatters_sorted_and_unique_hints_are_not_passed_on() -> None:
    """grid_forage's batched scatter says its indices are sorted and unique; XLA:TPU trusting
    that left walls uncleared in 2 % of 65,536 lanes (and JAX's own TPU result in 67 %),
    without them the chip equals the interpreter. The hints change speed, not meaning."""
    module = parse_module(BOARD, "board")
    fused = run_strategy(module, "xla", debug=False).module
    (scatter,) = [k for k in plan_kernels(fused, interpret=True)
                  if k.mode == "xla-op" and "(scatter)" in k.reason]
    jaxpr = jax.make_jaxpr(lambda *a: scatter(*a))(*kernel_structs(scatter))
    scatters = [e for e in jaxpr.eqns if e.primitive.name.startswith("scatter")]
    assert scatters
    assert not any(e.params["indices_are_sorted"] or e.params["unique_indices"]
                   for e in scatters)
