"""Malformed HLO text: each input gets the right error class, position and caret excerpt, and the
command line answers it with exit status 2 and one `error:` line, never a traceback."""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hlofuse.cli import main
from hlofuse.ir.parser import HloParseError, parse_file, parse_module
from hlofuse.ir.printer import module_text
from hlofuse.ir.verifier import HloVerifyError, verify

from tests.conftest import CORPUS, CORPUS_DIR

HLOFUSE = Path(sys.executable).parent / "hlofuse"

# Line 1 is the header, line 3 opens ENTRY, instructions start on line 4.
H = "HloModule m\n\nENTRY main {\n"
P = "  p = f32[2]{0} parameter(0)\n"  # line 4
END = "}\n"


def _reducer(params: str, root: str) -> str:
    return f"add_f32 {{\n{params}  ROOT r = {root}\n}}\n\n"


# (id, text, line, column, a fragment of the message). Columns are 1-based and were counted by
# hand: they point at the offending token (or at the instruction's name for whole-instruction
# problems such as a shape mismatch).
PARSE_CASES: list[tuple[str, str, int, int, str]] = [
    ("empty-file", "", 1, 1, "empty input"),
    ("only-whitespace", "  \n\n", 3, 1, "empty input"),
    ("only-comment", "// nothing here\n", 2, 1, "empty input"),
    ("binary-garbage", "\x7fELF\x02\x01\x01\x00\x00junk", 1, 8, "binary data"),
    ("text-garbage", "hello world\n", 1, 1, "expected 'HloModule'"),
    ("no-header", "ENTRY main {\n  ROOT p = f32[] parameter(0)\n}\n", 1, 1,
     "expected 'HloModule'"),
    ("header-without-name", "HloModule {\n", 1, 11, "expected the module name"),
    ("header-only", "HloModule m\n", 2, 1, "module has no computations"),
    ("header-truncated-layout", "HloModule m, entry_computation_layout={()->f32[]", 1, 39,
     "unbalanced '{'"),
    ("unknown-opcode", H + P + "  ROOT r = f32[2]{0} frobnicate(p)\n" + END, 5, 22,
     "unknown opcode 'frobnicate'"),
    ("unknown-element-type", H + "  ROOT p = c64[2] parameter(0)\n" + END, 4, 12,
     "unknown element type 'c64'"),
    ("undefined-operand", H + P + "  ROOT r = f32[2]{0} negate(q)\n" + END, 5, 29,
     "undefined operand 'q' of 'r'"),
    ("duplicate-name", H + P + "  a = f32[2] negate(p)\n  a = f32[2] abs(p)\n" + END, 6, 3,
     "duplicate instruction name 'a'"),
    ("duplicate-name-across-computations",
     "HloModule m\n\nf {\n  p = f32[] parameter(0)\n  ROOT n = f32[] negate(p)\n}\n\n"
     "ENTRY main {\n  p = f32[] parameter(0)\n  ROOT c = f32[] call(p), to_apply=f\n}\n",
     9, 3, "duplicate instruction name %p"),
    ("cycle", H + P + "  a = f32[2] add(p, b)\n  ROOT b = f32[2] negate(a)\n" + END, 6, 26,
     "cycle: 'a' depends on itself through 'b'"),
    ("self-cycle", H + "  ROOT a = f32[] negate(a)\n" + END, 4, 25, "cycle"),
    ("too-many-operands", H + P + "  ROOT r = f32[2] negate(p, p)\n" + END, 5, 8,
     "negate takes 1 operand(s), 'r' has 2"),
    ("too-few-operands", H + P + "  ROOT r = f32[2] add(p)\n" + END, 5, 8,
     "add takes 2 operand(s), 'r' has 1"),
    ("select-missing-operand", H + P + "  ROOT r = f32[2] clamp()\n" + END, 5, 8,
     "clamp takes 3 operand(s)"),
    ("operand-shape-mismatch",
     H + P + "  q = f32[3] parameter(1)\n  ROOT r = f32[2] add(p, q)\n" + END, 6, 8,
     "operands must have the same shape, got f32[2] and f32[3]"),
    ("operand-type-mismatch",
     H + P + "  q = s32[2] parameter(1)\n  ROOT r = f32[2] add(p, q)\n" + END, 6, 8,
     "got f32[2] and s32[2]"),
    ("declared-shape-mismatch", H + P + "  ROOT r = f32[3] negate(p)\n" + END, 5, 8,
     "negate produces f32[2], but f32[3] was declared"),
    ("declared-type-mismatch", H + P + "  ROOT r = s32[2] negate(p)\n" + END, 5, 8,
     "negate produces f32[2], but s32[2] was declared"),
    ("bad-enum-value", H + P + "  ROOT r = pred[2] compare(p, p), direction=SIDEWAYS\n" + END,
     5, 45, "bad value 'SIDEWAYS' for direction"),
    ("bad-int-list", H + P + "  ROOT r = f32[2] reverse(p), dimensions={a}\n" + END, 5, 43,
     "expected an integer for dimensions, found 'a}'"),
    ("bad-index-value", H + "  t = (f32[]) parameter(0)\n"
     "  ROOT g = f32[] get-tuple-element(t), index=zero\n" + END, 5, 46,
     "expected an integer for index"),
    ("missing-attribute", H + P + "  ROOT r = f32[3,2] broadcast(p)\n" + END, 5, 8,
     "broadcast %r needs dimensions="),
    ("attribute-twice", H + P + "  ROOT r = f32[2] reverse(p), dimensions={0}, dimensions={0}\n"
     + END, 5, 47, "attribute 'dimensions' given twice"),
    ("call-attribute-on-wrong-op", H + P + "  ROOT r = f32[2] negate(p), to_apply=f\n" + END,
     5, 30, "negate does not take to_apply="),
    ("compare-type-mismatch",
     H + P + "  ROOT r = pred[2] compare(p, p), direction=LT, type=SIGNED\n" + END, 5, 8,
     "compare type=SIGNED does not fit f32 operands"),
    ("subtract-of-pred", H + "  p = pred[] parameter(0)\n  ROOT r = pred[] subtract(p, p)\n"
     + END, 5, 8, "subtract does not accept pred operands"),
    ("unbalanced-attribute-brace", H + "  ROOT p = f32[] parameter(0), sharding={maximal\n",
     4, 41, "unbalanced '{' in attribute value"),
    ("mismatched-attribute-bracket", H + "  ROOT p = f32[] parameter(0), sharding={x)\n" + END,
     4, 43, "unbalanced ')'"),
    ("computation-not-closed", H + P, 5, 1, "computation 'main' is not closed"),
    ("extra-closing-brace", H + P + END + "}\n", 6, 1,
     "expected a computation name, found '}'"),
    ("unclosed-operand-list", H + P + "  ROOT r = f32[2] negate(p\n" + END, 6, 1,
     "expected ',' between operands"),
    ("missing-equals", H + "  ROOT p f32[] parameter(0)\n" + END, 4, 10,
     "expected '=' after instruction name 'p'"),
    ("absurd-dimensions", H + "  ROOT p = f32[100000,100000,100000] parameter(0)\n" + END, 4,
     12, "needs 4000000000000000 bytes, above the cap of 4294967296 bytes per buffer"),
    ("absurd-dimension-digits", H + "  ROOT p = u8[" + "9" * 40 + "] parameter(0)\n" + END,
     4, 12, "above the cap"),
    ("absurd-iota", H + "  ROOT i = s32[2000000000] iota(), iota_dimension=0\n" + END, 4, 12,
     "needs 8000000000 bytes"),
    ("negative-dimension", H + "  ROOT p = f32[-1] parameter(0)\n" + END, 4, 18,
     "negative dimension size -1"),
    ("rank-too-high", H + "  ROOT p = f32[" + ",".join(["1"] * 65) + "] parameter(0)\n" + END,
     4, 12, "rank above 64"),
    ("deep-tuple-nesting", H + "  ROOT p = " + "(" * 100_000 + "f32[] parameter(0)\n" + END,
     4, 76, "tuple shapes nested deeper than 64 levels"),
    ("deep-operand-nesting", H + P + "  ROOT r = f32[2] negate(" + "(" * 100_000 + "p)\n" + END,
     5, 90, "tuple shapes nested deeper than 64 levels"),
    ("deep-constant-braces", H + "  ROOT c = f32[] constant(" + "{" * 100_000 + "1"
     + "}" * 100_000 + ")\n" + END, 4, 28, "expected a number, found '{{{{"),
    ("elided-constant", H + "  ROOT c = f32[4]{0} constant({...})\n" + END, 4, 31,
     "the constant's value was elided"),
    ("tiled-layout", H + "  ROOT p = f32[8,128]{1,0:T(8,128)} parameter(0)\n" + END, 4, 26,
     "tiled or memory-space layouts are not supported"),
    ("memory-space-layout", H + "  ROOT p = f32[8]{0:S(1)} parameter(0)\n" + END, 4, 20,
     "tiled or memory-space layouts are not supported"),
    ("layout-not-permutation", H + "  ROOT p = f32[2,3]{0,0} parameter(0)\n" + END, 4, 20,
     "layout {0,0} is not a permutation of the 2 dimensions"),
    ("bounded-dynamic-dimension", H + "  ROOT p = f32[<=4] parameter(0)\n" + END, 4, 16,
     "dynamic dimensions are not supported"),
    ("unbounded-dynamic-dimension", H + "  ROOT p = f32[2,?] parameter(0)\n" + END, 4, 18,
     "dynamic dimensions are not supported"),
    ("two-entries",
     "HloModule m\nENTRY a {\n  ROOT p = f32[] parameter(0)\n}\n"
     "ENTRY b {\n  ROOT q = f32[] parameter(0)\n}\n", 5, 7,
     "more than one ENTRY"),
    ("two-roots", H + "  ROOT p = f32[] parameter(0)\n  ROOT q = f32[] negate(p)\n" + END, 5,
     8, "more than one ROOT"),
    ("empty-computation", H + END, 3, 7, "computation 'main' has no instructions"),
    ("duplicate-computation",
     "HloModule m\nf {\n  ROOT a = f32[] parameter(0)\n}\nf {\n  ROOT b = f32[] parameter(0)\n}\n",
     5, 1, "duplicate computation name 'f'"),
    ("undefined-computation", H + P + "  ROOT c = f32[2] call(p), to_apply=nowhere\n" + END, 5,
     37, "undefined computation 'nowhere'"),
    ("missing-called-computation", H + P + "  ROOT c = f32[2] call(p)\n" + END, 5, 8,
     "call %c needs to_apply="),
    ("self-recursion",
     "HloModule m\nf {\n  a = f32[] parameter(0)\n  ROOT b = f32[] call(a), to_apply=f\n}\n"
     "ENTRY main {\n  p = f32[] parameter(0)\n  ROOT c = f32[] call(p), to_apply=f\n}\n",
     4, 36, "computation 'f' calls itself (recursion is not allowed)"),
    ("mutual-recursion",
     "HloModule m\nf {\n  a = f32[] parameter(0)\n  ROOT b = f32[] call(a), to_apply=g\n}\n"
     "g {\n  c = f32[] parameter(0)\n  ROOT d = f32[] call(c), to_apply=f\n}\n"
     "ENTRY main {\n  p = f32[] parameter(0)\n  ROOT e = f32[] call(p), to_apply=f\n}\n",
     8, 36, "computation 'f' calls itself (recursion is not allowed), here from 'g'"),
    ("reducer-with-wrong-parameters",
     "HloModule m\n\n" + _reducer("  a = f32[] parameter(0)\n", "f32[] negate(a)")
     + "ENTRY main {\n  p = f32[4]{0} parameter(0)\n  z = f32[] constant(0)\n"
     "  ROOT s = f32[] reduce(p, z), dimensions={0}, to_apply=add_f32\n}\n", 11, 8,
     "reduce reducer %add_f32 must take 2 scalars (f32[], f32[]), takes (f32[])"),
    ("reducer-with-wrong-result",
     "HloModule m\n\n" + _reducer("  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n",
                                  "pred[] compare(a, b), direction=LT")
     + "ENTRY main {\n  p = f32[4]{0} parameter(0)\n  z = f32[] constant(0)\n"
     "  ROOT s = f32[] reduce(p, z), dimensions={0}, to_apply=add_f32\n}\n", 12, 8,
     "must return f32[], returns pred[]"),
    ("while-body-mismatch",
     "HloModule m\ncond {\n  a = s32[] parameter(0)\n"
     "  ROOT lt = pred[] compare(a, a), direction=LT\n}\n"
     "body {\n  b = f32[] parameter(0)\n  ROOT n = f32[] negate(b)\n}\n"
     "ENTRY main {\n  p = s32[] parameter(0)\n"
     "  ROOT w = s32[] while(p), condition=cond, body=body\n}\n",
     12, 8, "while body %body must map s32[] to itself"),
    ("while-condition-not-pred",
     "HloModule m\ncond {\n  a = s32[] parameter(0)\n  ROOT n = s32[] negate(a)\n}\n"
     "body {\n  b = s32[] parameter(0)\n  ROOT m = s32[] negate(b)\n}\n"
     "ENTRY main {\n  p = s32[] parameter(0)\n"
     "  ROOT w = s32[] while(p), condition=cond, body=body\n}\n",
     12, 8, "while condition %cond must return pred[]"),
    ("conditional-branch-mismatch",
     "HloModule m\nt {\n  a = f32[] parameter(0)\n  ROOT n = f32[] negate(a)\n}\n"
     "f {\n  b = s32[] parameter(0)\n  ROOT m = s32[] negate(b)\n}\n"
     "ENTRY main {\n  i = pred[] parameter(0)\n  x = f32[] parameter(1)\n"
     "  ROOT c = f32[] conditional(i, x, x), true_computation=t, false_computation=f\n}\n",
     13, 8, "conditional branch %f must take f32[]"),
    ("conditional-missing-branch",
     "HloModule m\nt {\n  a = f32[] parameter(0)\n  ROOT n = f32[] negate(a)\n}\n"
     "ENTRY main {\n  i = pred[] parameter(0)\n  x = f32[] parameter(1)\n"
     "  ROOT c = f32[] conditional(i, x, x), true_computation=t\n}\n", 9, 8,
     "conditional needs branch_computations= or both true_computation= and "
     "false_computation="),
    ("call-signature-mismatch",
     "HloModule m\nf {\n  a = s32[] parameter(0)\n  ROOT n = s32[] negate(a)\n}\n"
     "ENTRY main {\n  p = f32[] parameter(0)\n  ROOT c = s32[] call(p), to_apply=f\n}\n",
     8, 8, "call passes (f32[]) to %f which takes (s32[])"),
    ("s8-constant-out-of-range", H + "  ROOT c = s8[] constant(128)\n" + END, 4, 26,
     "bad s8 constant: 128 is out of range"),
    ("u8-constant-negative", H + "  ROOT c = u8[2]{0} constant({1, -1})\n" + END, 4, 30,
     "bad u8 constant: -1 is out of range"),
    ("s32-constant-out-of-range", H + "  ROOT c = s32[] constant(-2147483649)\n" + END, 4, 27,
     "-2147483649 is out of range"),
    ("u64-constant-out-of-range", H + "  ROOT c = u64[] constant(18446744073709551616)\n" + END,
     4, 27, "18446744073709551616 is out of range"),
    ("f16-constant-out-of-range", H + "  ROOT c = f16[] constant(70000)\n" + END, 4, 27,
     "bad f16 constant: 70000 is out of range"),
    ("float-in-int-constant", H + "  ROOT c = s32[] constant(1.5)\n" + END, 4, 27,
     "'1.5' is not an integer"),
    ("bad-pred-constant", H + "  ROOT c = pred[] constant(2)\n" + END, 4, 28,
     "'2' is not a pred value"),
    ("constant-element-count", H + "  ROOT c = f32[2]{0} constant({1, 2, 3})\n" + END, 4, 38,
     "constant has more than 2 elements in dimension 0, its shape says 2"),
    ("constant-too-few-elements", H + "  ROOT c = s32[2,2]{1,0} constant({{1, 2}, {3}})\n" + END,
     4, 46, "constant has 1 elements in dimension 1, its shape says 2"),
    ("constant-not-a-number", H + "  ROOT c = f32[] constant(one)\n" + END, 4, 27,
     "expected a number, found 'one)'"),
    ("unterminated-comment", H + "  /* p = f32[] parameter(0)\n" + END, 4, 3,
     "unterminated /* comment"),
    ("unterminated-string",
     H + '  ROOT c = f32[] custom-call(), custom_call_target="abc\n' + END, 4, 52,
     "unterminated string"),
    ("parameter-gap", H + "  ROOT p = f32[] parameter(1)\n" + END, 4, 8,
     "has parameter(1) but no parameter(0)"),
    ("duplicate-parameter-number",
     H + "  a = f32[] parameter(0)\n  b = f32[] parameter(0)\n  ROOT c = f32[] add(a, b)\n"
     + END, 5, 3, "computation 'main' has parameter(0) twice"),
    ("negative-parameter-number", H + "  ROOT p = f32[] parameter(-1)\n" + END, 4, 30,
     "parameter number must be >= 0"),
    ("slice-out-of-bounds", H + P + "  ROOT s = f32[3] slice(p), slice={[0:3]}\n" + END, 5, 8,
     "slice [0:3:1] is out of bounds for dimension 0 of size 2"),
    ("slice-zero-stride", H + P + "  ROOT s = f32[1] slice(p), slice={[0:2:0]}\n" + END, 5, 8,
     "slice [0:2:0] is out of bounds"),
    ("slice-malformed", H + P + "  ROOT s = f32[1] slice(p), slice={0:2}\n" + END, 5, 36,
     "expected '[' to open a slice range"),
    ("padding-malformed", H + P + "  z = f32[] constant(0)\n"
     "  ROOT q = f32[4] pad(p, z), padding=0_1_2_3\n" + END, 6, 38,
     "bad padding entry '0_1_2_3'"),
    ("negative-interior-padding", H + P + "  z = f32[] constant(0)\n"
     "  ROOT q = f32[2] pad(p, z), padding=0_0_-1\n" + END, 6, 8,
     "interior padding must be >= 0"),
    ("window-unknown-field", H + P + "  z = f32[] constant(0)\n"
     "  ROOT w = f32[2] reduce-window(p, z), window={size=1 flip=1}, to_apply=main\n" + END,
     6, 47, "unsupported window field flip"),
    ("window-rank-mismatch", H + P + "  z = f32[] constant(0)\n"
     "  ROOT w = f32[2] reduce-window(p, z), window={size=1 stride=1x1}, to_apply=main\n"
     + END, 6, 47, "window stride does not match size's rank 1"),
    ("get-tuple-element-out-of-range",
     H + "  t = (f32[], f32[]) parameter(0)\n  ROOT g = f32[] get-tuple-element(t), index=2\n"
     + END, 5, 8, "index=2 out of range for (f32[], f32[])"),
    ("iota-dimension-out-of-range", H + "  ROOT i = s32[4]{0} iota(), iota_dimension=1\n" + END,
     4, 8, "iota_dimension=1 out of range for rank 1"),
    ("transpose-not-permutation",
     H + "  p = f32[2,3] parameter(0)\n  ROOT t = f32[3,2] transpose(p), dimensions={0,0}\n"
     + END, 5, 8, "is not a permutation of rank 2"),
    ("broadcast-dimension-out-of-range",
     H + P + "  ROOT b = f32[3,2] broadcast(p), dimensions={2}\n" + END, 5, 8,
     "broadcast dimensions [2] has dimension 2 out of range for rank 2"),
    ("reshape-element-count", H + P + "  ROOT r = f32[3] reshape(p)\n" + END, 5, 8,
     "changes the number of elements"),
    ("dot-contracting-mismatch",
     H + "  a = f32[2,3] parameter(0)\n  b = f32[4,5] parameter(1)\n"
     "  ROOT d = f32[2,5] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
     + END, 6, 8, "dot dimension 1 of lhs f32[2,3] does not match dimension 0 of rhs f32[4,5]"),
    ("bitcast-convert-width", H + P + "  ROOT b = s16[2] bitcast-convert(p)\n" + END, 5, 8,
     "the result must have the operand's dimensions with one more of size 2"),
    ("fusion-bad-kind",
     "HloModule m\nf {\n  a = f32[] parameter(0)\n  ROOT n = f32[] negate(a)\n}\n"
     "ENTRY main {\n  p = f32[] parameter(0)\n"
     "  ROOT x = f32[] fusion(p), kind=kSideways, calls=f\n}\n",
     8, 34, "bad value 'kSideways' for kind"),
    ("metadata-malformed", H + "  ROOT p = f32[] parameter(0), metadata={op_name=}\n" + END, 4,
     50, "expected a word, found '}'"),
]


def _assert_caret(error: HloParseError, text: str) -> None:
    """The message's second line is the offending source line, the third a caret under it."""
    lines = str(error).splitlines()
    source_line = text.split("\n")[error.line - 1]
    if not source_line:  # at the end of the input, on an empty line: nothing to show
        assert len(lines) == 1
        return
    assert lines[1] == "  " + source_line[:200]
    assert lines[2] == "  " + " " * (error.column - 1) + "^"


@pytest.mark.parametrize("case", PARSE_CASES, ids=[c[0] for c in PARSE_CASES])
def test_parse_error_position(case: tuple[str, str, int, int, str]) -> None:
    _, text, line, column, fragment = case
    with pytest.raises(HloParseError) as info:
        parse_module(text, "bad.hlo")
    error = info.value
    assert fragment in error.message
    assert (error.line, error.column) == (line, column), error.message
    assert str(error).startswith(f"bad.hlo:{line}:{column}: ")
    _assert_caret(error, text)


def test_caret_excerpt_of_a_long_line_shows_the_column() -> None:
    line = '  ROOT p = f32[] parameter(0), metadata={op_name="' + "x" * 400 + '"}, sharding={x)'
    with pytest.raises(HloParseError) as info:
        parse_module(H + line + "\n" + END)
    error = info.value
    assert (error.line, error.column) == (4, len(line))
    _, excerpt, caret = str(error).splitlines()
    assert excerpt.startswith("  ...") and excerpt.endswith("sharding={x)")
    assert len(excerpt) <= 2 + 3 + 200
    assert caret.index("^") == len(excerpt) - 1  # under the offending ')'


def test_caret_follows_tabs() -> None:
    with pytest.raises(HloParseError) as info:
        parse_module("HloModule m\nENTRY main {\n\tROOT p = f32[] bogus(0)\n}\n")
    assert str(info.value).splitlines()[2] == "  \t" + " " * 15 + "^"


def test_at_least_forty_malformed_inputs() -> None:
    assert len(PARSE_CASES) >= 40
    assert len({c[0] for c in PARSE_CASES}) == len(PARSE_CASES)


def test_buffer_cap_is_configurable() -> None:
    text = H + "  ROOT p = f32[1024]{0} parameter(0)\n" + END
    parse_module(text)  # 4 KiB is fine under the default cap
    with pytest.raises(HloParseError) as info:
        parse_module(text, max_buffer_bytes=4095)
    assert (info.value.line, info.value.column) == (4, 12)
    assert "needs 4096 bytes, above the cap of 4095 bytes per buffer" in info.value.message
    parse_module(text, max_buffer_bytes=4096)


def test_buffer_cap_applies_to_each_tuple_element() -> None:
    text = H + "  ROOT p = (f32[1024]{0}, f32[2048]{0}) parameter(0)\n" + END
    with pytest.raises(HloParseError) as info:
        parse_module(text, max_buffer_bytes=6000)
    assert "f32[2048] needs 8192 bytes" in info.value.message
    assert (info.value.line, info.value.column) == (4, 27)


def test_deeply_nested_balanced_attribute_is_kept() -> None:
    """Attributes hlofuse does not interpret are scanned without recursion and kept verbatim."""
    raw = "{" * 50_000 + "}" * 50_000
    module = parse_module(H + f"  ROOT p = f32[] parameter(0), sharding={raw}\n" + END)
    assert module.entry.root.extra[0][1].text == raw


def test_long_chain_of_called_computations_parses() -> None:
    """Callers may precede callees; building them must not recurse once per call level."""
    depth = 2000
    parts = ["HloModule chain"]
    for i in range(depth, 0, -1):
        body = f"negate(a{i})" if i == 1 else f"call(a{i}), to_apply=c{i - 1}"
        parts.append(f"c{i} {{\n  a{i} = f32[] parameter(0)\n  ROOT r{i} = f32[] {body}\n}}")
    parts.append(f"ENTRY main {{\n  p = f32[] parameter(0)\n  ROOT r = f32[] call(p), "
                 f"to_apply=c{depth}\n}}")
    module = parse_module("\n".join(parts))
    verify(module)
    assert len(module.computations) == depth + 1
    assert module.computations[0].name == "c1"  # callees before callers


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.hlo"
    path.write_bytes(("HloModule m\nENTRY main {\n  ROOT p = f32[] parameter(0) // é\n}\n")
                     .encode("latin-1"))
    with pytest.raises(HloParseError) as info:
        parse_file(str(path))
    assert (info.value.line, info.value.column) == (3, 34)
    assert "not UTF-8" in info.value.message
    assert str(info.value).startswith(f"{path}:3:34: ")


def test_non_utf8_column_counts_characters(tmp_path: Path) -> None:
    path = tmp_path / "mixed.hlo"
    path.write_bytes("HloModule m // ü\xff".encode()[:-2] + b"\xff\n")
    with pytest.raises(HloParseError) as info:
        parse_file(str(path))
    assert (info.value.line, info.value.column) == (1, 17)


def test_missing_file() -> None:
    with pytest.raises(HloParseError) as info:
        parse_file("/nonexistent/x.hlo")
    assert "cannot read file" in info.value.message


def test_missing_entry_and_root_use_the_last_ones() -> None:
    """Without ENTRY the last computation runs; without ROOT the last instruction is the root,
    as XLA's parser does."""
    text = ("HloModule m\nf {\n  a = f32[] parameter(0)\n  b = f32[] negate(a)\n}\n"
            "g {\n  c = f32[] parameter(0)\n  d = f32[] call(c), to_apply=f\n"
            "  e = f32[] abs(c)\n}\n")
    module = parse_module(text)
    verify(module)
    assert module.entry.name == "g"
    assert module.entry.root.name == "e"
    assert module.computation("f").root.name == "b"


# --- truncation and corruption: never anything but HloParseError / HloVerifyError ----------


class _Hang(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def on_alarm(_signum: int, _frame: object) -> None:
        raise _Hang(f"parsing took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _parse_and_verify(text: str) -> bool:
    """True if the text is a valid module; False for HloParseError/HloVerifyError. Anything
    else (IndexError, KeyError, RecursionError, a hang) propagates and fails the test."""
    with _time_limit(10):
        try:
            module = parse_module(text)
            verify(module)
        except (HloParseError, HloVerifyError):
            return False
        # Whatever parses must also print and parse back to the same text.
        printed = module_text(module)
        assert module_text(parse_module(printed)) == printed
    return True


def _is_complete(prefix: str) -> bool:
    """A cut right after a computation's closing brace leaves a valid (shorter) module."""
    return prefix.rstrip().endswith("\n}")


@pytest.mark.thorough
@pytest.mark.parametrize("name", ["concat_stack_slice", "cond", "argmax"])
def test_every_truncation_is_a_parse_error(name: str) -> None:
    text = (CORPUS_DIR / f"{name}.hlo").read_text()
    step = max(1, len(text) // 600)
    for cut in range(0, len(text), step):
        prefix = text[:cut]
        assert _parse_and_verify(prefix) == _is_complete(prefix), f"{name} cut at {cut}"


@pytest.mark.thorough
def test_truncations_of_every_corpus_file() -> None:
    rng = random.Random(2)
    for name in CORPUS:
        text = (CORPUS_DIR / f"{name}.hlo").read_text()
        for cut in sorted(rng.sample(range(len(text)), 12)):
            prefix = text[:cut]
            assert _parse_and_verify(prefix) == _is_complete(prefix), f"{name} cut at {cut}"


_SMALL_CORPUS = [n for n in CORPUS if (CORPUS_DIR / f"{n}.hlo").stat().st_size < 15_000]
_NOISE = b"{}()[],=%:_-.0123456789abxyz \n\"/*<>?T\x00\xff\xc3"


@settings(max_examples=250, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(_SMALL_CORPUS),
       edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.sampled_from(_NOISE),
                                st.sampled_from(["replace", "insert", "delete"])),
                      min_size=1, max_size=6))
def test_random_corruptions_give_only_hlo_errors(
        name: str, edits: list[tuple[float, int, str]]) -> None:
    data = bytearray((CORPUS_DIR / f"{name}.hlo").read_bytes())
    for where, byte, how in edits:
        i = int(where * len(data))
        if how == "replace":
            data[i] = byte
        elif how == "insert":
            data.insert(i, byte)
        elif len(data) > 1:
            del data[i]
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        with tempfile.NamedTemporaryFile(suffix=".hlo") as f:
            f.write(data)
            f.flush()
            with pytest.raises(HloParseError, match="not UTF-8"):
                parse_file(f.name)
        return
    _parse_and_verify(text)


# --- the command line ---------------------------------------------------------------------


def _run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(args)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


_CLI_CASES = [c for c in PARSE_CASES if "\x00" not in c[1] and len(c[1]) < 10_000]


@pytest.mark.parametrize("case", _CLI_CASES, ids=[c[0] for c in _CLI_CASES])
@pytest.mark.parametrize("command", ["run", "fmt"])
def test_cli_reports_one_error_line(case: tuple[str, str, int, int, str], command: str,
                                    tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, text, line, column, fragment = case
    path = tmp_path / "bad.hlo"
    path.write_text(text)
    status, out, err = _run_cli([command, str(path)], capsys)
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"error: {path}:{line}:{column}: ")
    assert fragment in err
    assert "Traceback" not in err


def test_cli_binary_and_deeply_nested_files(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    for name, data, where in [
        ("garbage.hlo", b"\x7fELF\x02\x01\x01\x00\x00\x00", "1:8"),
        ("latin1.hlo", "HloModule m\n// é\n".encode("latin-1"), "2:4"),
        ("deep.hlo", (H + "  ROOT p = " + "(" * 100_000 + "f32[] parameter(0)\n}\n").encode(),
         "4:76"),
    ]:
        path = tmp_path / name
        path.write_bytes(data)
        status, _, err = _run_cli(["run", str(path)], capsys)
        assert status == 2
        assert err.count("\n") == 1 and err.startswith(f"error: {path}:{where}: "), err


def test_cli_verify_error_names_the_definition_site(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A module that parses but fails verification (here: a tighter buffer cap) is reported at
    the offending instruction's definition, with the rule."""
    import hlofuse.cli.errors

    path = tmp_path / "big.hlo"
    path.write_text(H + "  p = f32[] parameter(0)\n"
                    "  ROOT big = f32[1024]{0} broadcast(p), dimensions={}\n}\n")
    monkeypatch.setattr(hlofuse.cli.errors, "verify", lambda m: verify(m, max_buffer_bytes=1000))
    status, _, err = _run_cli(["run", str(path)], capsys)
    assert status == 2
    assert err == (f"error: {path}:5:8: %big in %main: buffer of 4096 bytes is above the cap of "
                   "1000 (max_buffer_bytes; to raise it set $HLOFUSE_MAX_BUFFER_BYTES or pass "
                   "limits=Limits(max_buffer_bytes=...)) [buffer-size]\n")


@pytest.mark.thorough
@pytest.mark.parametrize("case", [c for c in PARSE_CASES if c[0] in {
    "empty-file", "unknown-opcode", "cycle", "absurd-dimensions", "deep-tuple-nesting"}],
    ids=lambda c: c[0])
def test_installed_command_exit_status(case: tuple[str, str, int, int, str],
                                       tmp_path: Path) -> None:
    _, text, line, column, fragment = case
    path = tmp_path / "bad.hlo"
    path.write_text(text)
    result = subprocess.run([str(HLOFUSE), "run", str(path)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: {path}:{line}:{column}: ")
    assert fragment in result.stderr
