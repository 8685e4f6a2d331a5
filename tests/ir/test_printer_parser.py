"""HLO text in, canonical HLO text out: every attribute kind survives parse -> print -> parse."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from hlofuse.ir.attrs import Metadata, PaddingDim, RawAttr, SliceDim, Window
from hlofuse.ir.builder import ComputationBuilder
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction, Module, make_module
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text
from hlofuse.ir.shapes import Shape
from hlofuse.ir.verifier import verify

from tests.conftest import CORPUS_DIR

# (id, text in, canonical text out). The output is what `hlofuse fmt` prints: no `%` sigils,
# no operand shapes or signatures, default layouts written out, callees before callers.
CASES: list[tuple[str, str, str]] = [
    ("sigils-signature-operand-shapes-slice-strides",
     """HloModule m, entry_computation_layout={(f32[8,6]{1,0})->f32[3,2]{1,0}}

ENTRY %main.3 (Arg_0.1: f32[8,6]) -> f32[3,2] {
  %Arg_0.1 = f32[8,6]{1,0} parameter(0)
  ROOT %slice.2 = f32[3,2]{1,0} slice(f32[8,6]{1,0} %Arg_0.1), slice={[1:7:2], [0:6:3]}
}
""",
     """HloModule m, entry_computation_layout={(f32[8,6]{1,0})->f32[3,2]{1,0}}

ENTRY main.3 {
  Arg_0.1 = f32[8,6]{1,0} parameter(0)
  ROOT slice.2 = f32[3,2]{1,0} slice(Arg_0.1), slice={[1:7:2], [0:6:3]}
}
"""),
    ("padding-negative-and-interior",
     """HloModule m
ENTRY main {
  p = f32[4,5] parameter(0)
  z = f32[] constant(-1.5)
  ROOT q = f32[8,13] pad(p, z), padding=-1_2_1x0_0_2
}
""",
     """HloModule m, entry_computation_layout={(f32[4,5]{1,0})->f32[8,13]{1,0}}

ENTRY main {
  p = f32[4,5]{1,0} parameter(0)
  z = f32[] constant(-1.5)
  ROOT q = f32[8,13]{1,0} pad(p, z), padding=-1_2_1x0_0_2
}
"""),
    ("window-with-all-fields",
     """HloModule m
ENTRY main {
  p = f32[4,6]{1,0} parameter(0)
  z = f32[] constant(0)
  ROOT w = f32[4,3]{1,0} reduce-window(p, z), window={size=2x3 stride=2x1 pad=1_1x0_1 lhs_dilate=2x1 rhs_dilate=1x2}, to_apply=%add
}
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}
""",
     """HloModule m, entry_computation_layout={(f32[4,6]{1,0})->f32[4,3]{1,0}}

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[4,6]{1,0} parameter(0)
  z = f32[] constant(0)
  ROOT w = f32[4,3]{1,0} reduce-window(p, z), window={size=2x3 stride=2x1 pad=1_1x0_1 lhs_dilate=2x1 rhs_dilate=1x2}, to_apply=add
}
"""),
    ("dot-dimensions",
     """HloModule m
ENTRY main {
  a = f32[4,2,3]{2,1,0} parameter(0)
  b = f32[4,3,5]{2,1,0} parameter(1)
  ROOT d = f32[4,2,5]{2,1,0} dot(a, b), rhs_contracting_dims={1}, lhs_contracting_dims={2}, rhs_batch_dims={0}, lhs_batch_dims={0}
}
""",
     """HloModule m, entry_computation_layout={(f32[4,2,3]{2,1,0}, f32[4,3,5]{2,1,0})->f32[4,2,5]{2,1,0}}

ENTRY main {
  a = f32[4,2,3]{2,1,0} parameter(0)
  b = f32[4,3,5]{2,1,0} parameter(1)
  ROOT d = f32[4,2,5]{2,1,0} dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}
"""),
    ("compare-type-and-broadcast",
     """HloModule m
ENTRY main {
  a = f32[3]{0} parameter(0)
  s = f32[] parameter(1)
  b = f32[3]{0} broadcast(s), dimensions={}
  ROOT c = pred[3]{0} compare(a, b), direction=LT, type=TOTALORDER
}
""",
     """HloModule m, entry_computation_layout={(f32[3]{0}, f32[])->pred[3]{0}}

ENTRY main {
  a = f32[3]{0} parameter(0)
  s = f32[] parameter(1)
  b = f32[3]{0} broadcast(s), dimensions={}
  ROOT c = pred[3]{0} compare(a, b), direction=LT, type=TOTALORDER
}
"""),
    ("conditional-both-spellings",
     """HloModule m
t { a = f32[] parameter(0)
 ROOT n = f32[] negate(a) }
f { b = f32[] parameter(0)
 ROOT y = f32[] abs(b) }
ENTRY main {
  i = pred[] parameter(0)
  j = s32[] parameter(1)
  x = f32[] parameter(2)
  c1 = f32[] conditional(i, x, x), true_computation=t, false_computation=f
  ROOT c2 = f32[] conditional(j, x, x, c1), branch_computations={t, f, t}
}
""",
     """HloModule m, entry_computation_layout={(pred[], s32[], f32[])->f32[]}

t {
  a = f32[] parameter(0)
  ROOT n = f32[] negate(a)
}

f {
  b = f32[] parameter(0)
  ROOT y = f32[] abs(b)
}

ENTRY main {
  i = pred[] parameter(0)
  j = s32[] parameter(1)
  x = f32[] parameter(2)
  c1 = f32[] conditional(i, x, x), true_computation=t, false_computation=f
  ROOT c2 = f32[] conditional(j, x, x, c1), branch_computations={t, f, t}
}
"""),
    ("custom-call-kept-verbatim",
     r"""HloModule m
ENTRY main {
  p = f32[2]{0} parameter(0)
  ROOT c = (f32[2]{0}, s32[]) custom-call(p), custom_call_target="my_target", api_version=API_VERSION_STATUS_RETURNING, backend_config="{\"k\": [1, 2]}", custom_call_has_side_effect=true
}
""",
     r"""HloModule m, entry_computation_layout={(f32[2]{0})->(f32[2]{0}, s32[])}

ENTRY main {
  p = f32[2]{0} parameter(0)
  ROOT c = (f32[2]{0}, s32[]) custom-call(p), custom_call_target="my_target", custom_call_has_side_effect=true, api_version=API_VERSION_STATUS_RETURNING, backend_config="{\"k\": [1, 2]}"
}
"""),
    ("sharding-frontend-attributes-metadata",
     """HloModule m, is_scheduled=true, entry_computation_layout={(f32[2]{0})->f32[2]{0}}, frontend_attributes={fingerprint="abc"}
ENTRY main {
  p = f32[2]{0} parameter(0), sharding={devices=[2]0,1}, metadata={op_name="x" source_file="/a/b.py" source_line=12}
  ROOT n = f32[2]{0} negate(p), frontend_attributes={_xla_compute_type="host"}, metadata={op_type="neg" op_name="jit(f)/neg" source_file="f.py" source_line=3}
}
""",
     """HloModule m, entry_computation_layout={(f32[2]{0})->f32[2]{0}}

ENTRY main {
  p = f32[2]{0} parameter(0), metadata={op_name="x" source_file="/a/b.py" source_line=12}, sharding={devices=[2]0,1}
  ROOT n = f32[2]{0} negate(p), metadata={op_type="neg" op_name="jit(f)/neg" source_file="f.py" source_line=3}, frontend_attributes={_xla_compute_type="host"}
}
"""),
    ("special-and-low-precision-constants",
     """HloModule m
ENTRY main {
  a = f32[] constant(inf)
  b = f32[] constant(-inf)
  c = f32[] constant(nan)
  n = f32[] constant(-nan)
  d = f32[3]{0} constant({-0, 1e-45, 3.40282347e+38})
  e = f16[2]{0} constant({0.1, 65504})
  f = bf16[2]{0} constant({0.1, -3.38953139e+38})
  g = pred[2,2]{1,0} constant({ { 1, 0 }, { false, true } })
  h = s8[3]{0} constant({-128, 0, 127})
  i = u64[] constant(18446744073709551615)
  j = f64[] constant(0.1)
  k = pred[] constant(true)
  ROOT t = (f32[], f32[], f32[], f32[], f32[3]{0}, f16[2]{0}, bf16[2]{0}, pred[2,2]{1,0}, s8[3]{0}, u64[], f64[], pred[]) tuple(a, b, c, n, d, e, f, g, h, i, j, k)
}
""",
     """HloModule m, entry_computation_layout={()->(f32[], f32[], f32[], f32[], f32[3]{0}, /*index=5*/f16[2]{0}, bf16[2]{0}, pred[2,2]{1,0}, s8[3]{0}, u64[], /*index=10*/f64[], pred[])}

ENTRY main {
  a = f32[] constant(inf)
  b = f32[] constant(-inf)
  c = f32[] constant(nan)
  n = f32[] constant(-nan)
  d = f32[3]{0} constant({-0, 1e-45, 3.4028235e+38})
  e = f16[2]{0} constant({0.1, 65504})
  f = bf16[2]{0} constant({0.10009765625, -3.3895313892515355e+38})
  g = pred[2,2]{1,0} constant({ {true, false}, {false, true} })
  h = s8[3]{0} constant({-128, 0, 127})
  i = u64[] constant(18446744073709551615)
  j = f64[] constant(0.1)
  k = pred[] constant(true)
  ROOT t = (f32[], f32[], f32[], f32[], f32[3]{0}, /*index=5*/f16[2]{0}, bf16[2]{0}, pred[2,2]{1,0}, s8[3]{0}, u64[], /*index=10*/f64[], pred[]) tuple(a, b, c, n, d, e, f, g, h, i, j, k)
}
"""),
    ("non-default-layout-kept",
     """HloModule m
ENTRY main {
  p = f32[2,3]{0,1} parameter(0)
  ROOT n = f32[2,3]{0,1} negate(p)
}
""",
     """HloModule m, entry_computation_layout={(f32[2,3]{0,1})->f32[2,3]{0,1}}

ENTRY main {
  p = f32[2,3]{0,1} parameter(0)
  ROOT n = f32[2,3]{0,1} negate(p)
}
"""),
    ("while-fusion-call-gte-iota",
     """HloModule m
/* comments of both kinds are skipped */
%fused (x: s32[4]) -> s32[4] {
  %x = s32[4]{0} parameter(0)
  ROOT %neg = s32[4]{0} negate(s32[4]{0} %x) // trailing comment
}
cond {
  s = (s32[], s32[4]{0}) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  lim = s32[] constant(3)
  ROOT lt = pred[] compare(k, lim), direction=LT
}
body {
  s2 = (s32[], s32[4]{0}) parameter(0)
  k2 = s32[] get-tuple-element((s32[], s32[4]{0}) s2), index=0
  v = s32[4]{0} get-tuple-element(s2), index=1
  one = s32[] constant(1)
  k3 = s32[] add(k2, one)
  v2 = s32[4]{0} fusion(v), kind=kLoop, calls=%fused
  ROOT t = (s32[], s32[4]{0}) tuple(k3, v2)
}
ENTRY main {
  zero = s32[] constant(0)
  io = s32[4]{0} iota(), iota_dimension=0
  init = (s32[], s32[4]{0}) tuple(zero, io)
  ROOT w = (s32[], s32[4]{0}) while(init), condition=cond, body=body
}
""",
     """HloModule m, entry_computation_layout={()->(s32[], s32[4]{0})}

fused {
  x = s32[4]{0} parameter(0)
  ROOT neg = s32[4]{0} negate(x)
}

cond {
  s = (s32[], s32[4]{0}) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  lim = s32[] constant(3)
  ROOT lt = pred[] compare(k, lim), direction=LT
}

body {
  s2 = (s32[], s32[4]{0}) parameter(0)
  k2 = s32[] get-tuple-element(s2), index=0
  v = s32[4]{0} get-tuple-element(s2), index=1
  one = s32[] constant(1)
  k3 = s32[] add(k2, one)
  v2 = s32[4]{0} fusion(v), kind=kLoop, calls=fused
  ROOT t = (s32[], s32[4]{0}) tuple(k3, v2)
}

ENTRY main {
  zero = s32[] constant(0)
  io = s32[4]{0} iota(), iota_dimension=0
  init = (s32[], s32[4]{0}) tuple(zero, io)
  ROOT w = (s32[], s32[4]{0}) while(init), condition=cond, body=body
}
"""),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_canonical_text(case: tuple[str, str, str]) -> None:
    _, text_in, text_out = case
    module = parse_module(text_in)
    verify(module)
    assert module_text(module) == text_out
    assert module_text(parse_module(text_out)) == text_out


def _instruction(module: Module, name: str) -> Instruction:
    for inst in module.all_instructions():
        if inst.name == name:
            return inst
    raise AssertionError(name)


def _case(name: str) -> Module:
    return parse_module(next(c[1] for c in CASES if c[0] == name))


def test_attribute_values() -> None:
    assert _instruction(_case("sigils-signature-operand-shapes-slice-strides"), "slice.2").attrs[
        "slice"] == (SliceDim(1, 7, 2), SliceDim(0, 6, 3))
    assert _instruction(_case("padding-negative-and-interior"), "q").attrs["padding"] == (
        PaddingDim(-1, 2, 1), PaddingDim(0, 0, 2))
    assert _instruction(_case("window-with-all-fields"), "w").attrs["window"] == Window(
        (2, 3), (2, 1), (1, 0), (1, 1), (2, 1), (1, 2))
    dot = _instruction(_case("dot-dimensions"), "d")
    assert [dot.ints(k) for k in ("lhs_batch_dims", "rhs_batch_dims", "lhs_contracting_dims",
                                  "rhs_contracting_dims")] == [(0,), (0,), (2,), (1,)]
    compare = _instruction(_case("compare-type-and-broadcast"), "c")
    assert (compare.attrs["direction"], compare.attrs["type"]) == ("LT", "TOTALORDER")


def test_conditional_calls_are_in_branch_order() -> None:
    module = _case("conditional-both-spellings")
    assert [c.name for c in _instruction(module, "c1").calls] == ["t", "f"]
    assert [c.name for c in _instruction(module, "c2").calls] == ["t", "f", "t"]


def test_unused_attributes_are_kept_verbatim() -> None:
    call = _instruction(_case("custom-call-kept-verbatim"), "c")
    assert call.attrs["custom_call_target"] == "my_target"
    assert call.attrs["custom_call_has_side_effect"] is True
    assert call.extra == (("api_version", RawAttr("API_VERSION_STATUS_RETURNING")),
                          ("backend_config", RawAttr(r'"{\"k\": [1, 2]}"')))
    module = _case("sharding-frontend-attributes-metadata")
    assert _instruction(module, "p").extra == (("sharding", RawAttr("{devices=[2]0,1}")),)
    negate = _instruction(module, "n")
    assert negate.extra == (("frontend_attributes", RawAttr('{_xla_compute_type="host"}')),)
    assert negate.metadata is not None
    assert negate.metadata.get("op_type") == "neg"
    assert negate.source_location == "f.py:3"
    assert _instruction(module, "p").source_location == "/a/b.py:12"


def test_constant_values() -> None:
    module = _case("special-and-low-precision-constants")

    def literal(name: str) -> np.ndarray:
        value = _instruction(module, name).attrs["literal"]
        assert isinstance(value, np.ndarray)
        return value

    assert literal("a") == np.inf and literal("b") == -np.inf
    assert np.isnan(literal("c")) and not np.signbit(literal("c"))
    assert np.isnan(literal("n")) and np.signbit(literal("n"))
    d = literal("d")
    assert d.dtype == np.float32 and np.signbit(d[0]) and d[0] == 0
    assert d[1] == np.float32(1e-45) and d[2] == np.finfo(np.float32).max
    e = literal("e")
    assert e.dtype == np.float16 and e[0] == np.float16(0.1) and e[1] == np.float16(65504)
    f = literal("f")
    assert f.dtype == ml_dtypes.bfloat16
    assert f.view(np.uint16).tolist() == [0x3DCD, 0xFF7F]  # 0.1 rounded; -max bf16
    np.testing.assert_array_equal(literal("g"), [[True, False], [False, True]])
    assert literal("h").tolist() == [-128, 0, 127] and literal("h").dtype == np.int8
    assert literal("i") == np.uint64(2**64 - 1)
    assert literal("j").dtype == np.float64 and literal("j") == 0.1
    assert literal("k").dtype == np.bool_ and bool(literal("k"))


def test_layouts_are_kept_and_shapes_still_compare_equal() -> None:
    module = _case("non-default-layout-kept")
    shape = _instruction(module, "n").shape
    assert shape.layout == (0, 1)
    assert shape == Shape.array(DType.F32, (2, 3))


def test_jax_debug_info_tables_round_trip() -> None:
    text = (CORPUS_DIR / "reductions.hlo").read_text()
    module = parse_module(text)
    names = [name for name, _ in module.debug_tables]
    assert names == ["FileNames", "FunctionNames", "FileLocations", "StackFrames"]
    printed = module_text(module)
    # jax's text exactly, but for the number of blank lines between blocks
    assert re.sub(r"\n\n+", "\n\n", printed.strip()) == re.sub(r"\n\n+", "\n\n", text.strip())
    again = parse_module(printed)
    assert again.debug_tables == module.debug_tables
    located = [i for i in again.all_instructions() if i.source_location]
    assert located
    assert all(i.source_location.startswith("tests/data/jax/generate.py:") for i in located)
    assert all(isinstance(i.metadata, Metadata) and i.metadata.get("stack_frame_id")
               for i in located)


def test_builder_module_prints_and_parses_back() -> None:
    b = ComputationBuilder("main")
    x = b.parameter(0, Shape.array(DType.F32, (2, 3)))
    c = b.constant([[1, 2, 3], [4, 5, 6]], DType.F32)
    s = b.add(Op.ADD, [x, c])
    b.add(Op.TRANSPOSE, [s], attrs={"dimensions": (1, 0)})
    module = make_module("built", b.build())
    text = module_text(module)
    again = parse_module(text)
    verify(again)
    assert module_text(again) == text
    assert [i.name for i in again.entry.instructions] == [i.name for i in module.entry.instructions]


def test_xla_spellings_in_headers_and_long_tuples() -> None:
    shapes = ", ".join(f"f32[{i + 1}]{{0}}" for i in range(7))
    text = (f"HloModule t, entry_computation_layout={{()->({shapes})}}\n\nENTRY main {{\n"
            + "".join(f"  c{i} = f32[{i + 1}]{{0}} constant({{{', '.join(['1'] * (i + 1))}}})\n"
                      for i in range(7))
            + f"  ROOT t = ({shapes}) tuple({', '.join(f'c{i}' for i in range(7))})\n}}\n")
    printed = module_text(parse_module(text))
    assert "f32[5]{0}, /*index=5*/f32[6]{0}, f32[7]{0})" in printed
    assert printed.startswith("HloModule t, entry_computation_layout={()->(f32[1]{0}, ")
    assert module_text(parse_module(printed)) == printed
