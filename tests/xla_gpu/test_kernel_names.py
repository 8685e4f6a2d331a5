"""XLA's kernel names for xla-gpu's kernels (xla_gpu/kernel_names.py: RenameFusions,
FusionWrapper) and the copies CopyFusion folds into fusions (xla_gpu/copy_fusion.py)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from hlofuse.compare_xla.compare import report_text
from hlofuse.fusion.xla_gpu.copy_fusion import CopyFusion
from hlofuse.fusion.xla_gpu.kernel_names import fusion_name, same_name, xla_kernel_names
from hlofuse.ir.ops import FusionKind, Op
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value

from tests.xla_gpu.test_corpus_agreement import DATA, comparison


# Parses XLA's output of every stored program (over 10 s): thorough (make test), not make fast.
@pytest.mark.thorough
def test_fusion_names_are_xlas_on_xlas_own_output() -> None:
    """Every loop and input fusion of XLA's optimised HLO (h100, every stored program) is
    named as `fusion_name` names it (copies among the roots came after renaming)."""
    checked, wrong = 0, []
    for path in sorted(DATA.glob("*.h100.hlo")):
        for comp in parse_module(path.read_text()).computations:
            for inst in comp.instructions:
                if inst.op is not Op.FUSION or inst.name.startswith("wrapped_") \
                        or inst.attrs.get("kind") == FusionKind.CUSTOM:
                    continue
                checked += 1
                if fusion_name(inst) != re.sub(r"\.\d+$", "", inst.name):
                    wrong.append((path.name, inst.name, fusion_name(inst)))
    assert checked > 300 and not wrong, wrong


def test_xla_gpu_kernels_carry_xlas_names() -> None:
    """cartpole_rollout_deterministic: every kernel of xla-gpu has its XLA twin's name (but
    the uniquifying suffix), the concatenate kernel included (an input fusion in XLA)."""
    result = comparison("cartpole_rollout_deterministic")
    assert result.same_grouping
    ours = sorted(re.sub(r"\.\d+$", "", k.xla_name) for k in result.ours.kernels)
    xla = sorted(re.sub(r"\.\d+$", "", k.name) for k in result.xla.kernels)
    assert ours == xla
    assert "input_concatenate_fusion" in ours
    text = report_text(result)
    assert "input_concatenate_fusion" in text and "\n~ " not in text and "\nx " not in text


def test_unfused_instructions_are_wrapped_and_names_are_unique() -> None:
    module = parse_module("""
HloModule names

fa {
  a = f32[4] parameter(0)
  ROOT n = f32[4] add(a, a)
}

ENTRY main {
  p = f32[8] parameter(0)
  s = f32[4] slice(p), slice={[0:4]}
  t = f32[4] slice(p), slice={[4:8]}
  f = f32[4] fusion(s), kind=kLoop, calls=fa
  g = f32[4] fusion(t), kind=kLoop, calls=fa
  ROOT r = (f32[4], f32[4]) tuple(f, g)
}
""")
    names = xla_kernel_names(module)
    assert names[("main", "s")] == "wrapped_slice"
    assert names[("main", "t")] == "wrapped_slice.1"
    assert {names[("main", "f")], names[("main", "g")]} == {"loop_add_fusion",
                                                           "loop_add_fusion.1"}
    assert same_name("loop_add_fusion.3", "loop_add_fusion") and not same_name(
        "loop_add_fusion", "input_add_fusion")


COPIED = """
HloModule copied

fused_exp {
  fp = f32[4] parameter(0)
  ROOT fe = f32[4] exponential(fp)
}

fused_rev {
  rp = f32[4] parameter(0)
  ROOT rv = f32[4] reverse(rp), dimensions={0}
}

ENTRY main {
  p = f32[4] parameter(0)
  e = f32[4] fusion(p), kind=kLoop, calls=fused_exp
  c = f32[4] copy(e)
  v = f32[4] fusion(p), kind=kLoop, calls=fused_rev
  d = f32[4] copy(v)
  ROOT r = (f32[4], f32[4], f32[4], f32[4]) tuple(e, c, v, d)
}
"""


def test_copy_fusion_folds_an_elementwise_fusions_copy_into_it() -> None:
    """The copy of `e` (an element-wise fusion) becomes its second output; the copy of `v`
    stays a kernel: `v` reverses its parameter (not element-wise from its parameters)."""
    module = parse_module(COPIED)
    fused, changed = CopyFusion().run(module)
    assert changed
    copies = [i.name for i in fused.entry.instructions if i.op is Op.COPY]
    assert copies == ["d"]
    (e,) = [i for i in fused.entry.instructions if i.name == "e"]
    assert e.shape.is_tuple and len(e.shape.elements) == 2
    x = np.array([0.5, 1.0, -2.0, 3.0], np.float32)
    for got, want in zip(flatten_value(evaluate(fused, [x])),
                         flatten_value(evaluate(module, [x])), strict=True):
        np.testing.assert_array_equal(got, want)


# minatar_rollout through xla-gpu takes half a minute: thorough (make test), not make fast.
@pytest.mark.thorough
def test_copy_fusion_takes_minatars_zero_board_copy_as_xla_does() -> None:
    """minatar_rollout: two loop-state elements start from one zero broadcast; XLA's copy
    for the second becomes an output of the broadcast's fusion, so outside the loop XLA and
    xla-gpu launch the same kernels and one copy (the counter's constant)."""
    result = comparison("minatar_rollout")
    assert result.xla.outside_loops() == result.ours.outside_loops()
    assert result.xla.copies() == 1


def test_data_dir_holds_the_styles() -> None:
    assert (Path(DATA) / "styles.py").exists()
