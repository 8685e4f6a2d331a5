"""HLO text in, canonical HLO text out: every attribute kind survives parse -> print -> parse."""

from __future__ import annotations

import re
from pathlib import Path

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

# Each case is a pair of files: NAME.in.hlo (as XLA or jax may write it) and NAME.out.hlo (what
# `hlofuse fmt` prints: no `%` sigils, operand shapes or signatures, layouts written out, callees
# before callers).
ROUND_TRIP_DIR = Path(__file__).parent / "data" / "round_trip"
CASES: list[tuple[str, str, str]] = [
    (path.name.removesuffix(".in.hlo"), path.read_text(),
     path.with_name(path.name.replace(".in.hlo", ".out.hlo")).read_text())
    for path in sorted(ROUND_TRIP_DIR.glob("*.in.hlo"))
]
EXPECTED_CASES = {
    "compare-type-and-broadcast", "conditional-both-spellings", "custom-call-kept-verbatim",
    "dot-dimensions", "non-default-layout-kept", "padding-negative-and-interior",
    "sharding-frontend-attributes-metadata", "sigils-signature-operand-shapes-slice-strides",
    "special-and-low-precision-constants", "while-fusion-call-gte-iota", "window-with-all-fields",
}


def test_all_round_trip_files_are_present() -> None:
    assert {c[0] for c in CASES} == EXPECTED_CASES


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
