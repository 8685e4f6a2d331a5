"""simplify-fp-conversions (xla_gpu/fp_conversions.py): XLA's SimplifyFPConversions in
xla-gpu's pipeline."""

from __future__ import annotations

from hlofuse.fusion.xla_gpu.fp_conversions import SimplifyFPConversions
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module

from tests.xla_gpu.test_corpus_agreement import comparison

CHAINS = """
HloModule chains

ENTRY main {
  p = f32[8] parameter(0)
  h = f16[8] convert(p)
  back = f32[8] convert(h)
  b = bf16[8] convert(p)
  bh = f16[8] convert(b)
  i = s32[8] convert(p)
  fi = f32[8] convert(i)
  ROOT r = (f32[8], f16[8], f32[8], f16[8]) tuple(back, bh, fi, h)
}
"""


def test_float_convert_chains_collapse() -> None:
    module, changed = SimplifyFPConversions().run(parse_module(CHAINS))
    assert changed
    root = module.entry.root
    back, bh, fi, h = root.operands
    # f32 -> f16 -> f32 is the f32 value itself; f32 -> bf16 -> f16 one convert from f32.
    assert back.op is Op.PARAMETER
    assert bh.op is Op.CONVERT and bh.operands[0].op is Op.PARAMETER
    # A chain through an integer is no floating-point chain; a single convert stays.
    assert fi.op is Op.CONVERT and fi.operands[0].op is Op.CONVERT
    assert h.op is Op.CONVERT and h.operands[0].op is Op.PARAMETER


def test_nothing_to_simplify_leaves_the_module() -> None:
    text = CHAINS.replace("back = f32[8] convert(h)", "back = f32[8] negate(p)")
    text = text.replace("bh = f16[8] convert(b)", "bh = f16[8] convert(p)")
    module = parse_module(text)
    assert SimplifyFPConversions().run(module) == (module, False)


def test_convert_types_returns_the_parameter_as_xla_does() -> None:
    """convert_types: `hp.astype(f16).astype(f32)` and the bf16 round trip are `hp` itself in
    XLA's optimised HLO; both results are then read-only and copied."""
    result = comparison("convert_types")
    assert result.same_grouping
    assert result.ours.copies() == result.xla.copies() == 4
