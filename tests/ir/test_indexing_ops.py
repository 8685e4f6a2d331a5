"""gather, scatter, sort, topk, map, reduce-precision, select-and-scatter and convolution:
parsed, printed back, verified, shape-checked with clear errors, evaluated as XLA defines them
(hand-checked values and JAX's outputs of tests/data/indexing/), classified for fusion as XLA
does; every other XLA opcode refused at load."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hlofuse.fusion.graphs.graph import Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph
from hlofuse.fusion.legality.properties import (
    in_place_operands,
    is_elementwise,
    is_expensive,
    is_input_fusible,
    is_loop_fusible,
    reads_elements_multiple_times,
    scatter_fusion_refusal,
)
from hlofuse.ir.ops import OP_BY_NAME, UNSUPPORTED_XLA_OPCODES, XLA_OPCODES, Op
from hlofuse.ir.parser import HloParseError, parse_module
from hlofuse.ir.printer import module_text
from hlofuse.ir.verifier import verify
from hlofuse.reference.indexing import reduce_precision
from hlofuse.reference.interpreter import evaluate, flatten_value

INDEXING_DIR = Path(__file__).parent.parent / "data" / "indexing"
INDEXING = sorted(p.stem for p in INDEXING_DIR.glob("*.hlo"))
# Ops this file checks by hand (read by the interpreter's completeness test).
COVERED_HERE = frozenset({Op.GATHER, Op.SCATTER, Op.SORT, Op.TOPK, Op.MAP,
                          Op.REDUCE_PRECISION, Op.SELECT_AND_SCATTER, Op.CONVOLUTION})

ADD = """
add {
  add.a = f32[] parameter(0)
  add.b = f32[] parameter(1)
  ROOT add.s = f32[] add(add.a, add.b)
}
"""


def module(body: str, computations: str = ADD) -> str:
    return f"HloModule m\n{computations}\nENTRY e {{\n{body}\n}}\n"


def run(text: str, *args: np.ndarray) -> list[np.ndarray]:
    parsed = parse_module(text)
    verify(parsed)
    assert module_text(parse_module(module_text(parsed))) == module_text(parsed)
    return flatten_value(evaluate(parsed, list(args)))


# --- JAX's programs ------------------------------------------------------------------------


@pytest.mark.parametrize("name", INDEXING)
def test_indexing_program_matches_jax(name: str) -> None:
    parsed = parse_module((INDEXING_DIR / f"{name}.hlo").read_text(), f"{name}.hlo")
    verify(parsed)
    text = module_text(parsed)
    assert module_text(parse_module(text)) == text
    data = np.load(INDEXING_DIR / f"{name}.npz")
    args = [data[f"arg{i}"] for i in range(len(parsed.entry.parameters))]
    outputs = flatten_value(evaluate(parsed, args))
    expected = [data[f"out{i}"] for i in range(len(outputs))]
    assert len(outputs) == sum(k.startswith("out") for k in data.files)
    for i, (a, e) in enumerate(zip(outputs, expected)):
        assert a.shape == e.shape and a.dtype == e.dtype, f"{name} out{i}"
        if e.dtype.kind == "f":
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5, equal_nan=True,
                                       err_msg=f"{name} out{i}")
        else:
            np.testing.assert_array_equal(a, e, err_msg=f"{name} out{i}")


def test_indexing_corpus_has_every_new_op() -> None:
    text = "".join((INDEXING_DIR / f"{n}.hlo").read_text() for n in INDEXING)
    for op in ("gather", "scatter", "sort", "topk", "reduce-precision", "select-and-scatter",
               "convolution", "reduce-window"):
        assert f" {op}(" in text, op
    sorting = (INDEXING_DIR / "sorting.hlo").read_text()
    sorts = [ln for ln in sorting.splitlines() if " sort(" in ln]
    assert any("is_stable=true" in ln for ln in sorts)
    assert any("is_stable" not in ln for ln in sorts)


# --- hand-checked values -------------------------------------------------------------------


def test_gather_rows_and_clamped_starts() -> None:
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.array([[2], [-5], [3], [9]], np.int32)
    text = module("""
  x = f32[4,3] parameter(0)
  i = s32[4,1] parameter(1)
  ROOT g = f32[4,2,3] gather(x, i), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0}, index_vector_dim=1, slice_sizes={2,3}""")
    (out,) = run(text, x, idx)
    starts = [2, 0, 2, 2]  # clamped so that the 2-row window stays inside the 4 rows
    np.testing.assert_array_equal(out, np.stack([x[s:s + 2] for s in starts]))


def test_gather_with_batching_dims_picks_one_element_per_lane() -> None:
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    idx = np.array([5, 0, 3, 1], np.int32)
    text = module("""
  x = s32[4,6] parameter(0)
  i = s32[4] parameter(1)
  ROOT g = s32[4] gather(x, i), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=1, slice_sizes={1,1}""")
    (out,) = run(text, x, idx)
    np.testing.assert_array_equal(out, x[np.arange(4), idx])


def test_scatter_add_skips_out_of_range_and_accumulates_repeats() -> None:
    x = np.zeros(5, np.float32)
    idx = np.array([[1], [1], [7], [-1], [4]], np.int32)
    upd = np.array([1, 2, 100, 100, 5], np.float32)
    text = module("""
  x = f32[5] parameter(0)
  i = s32[5,1] parameter(1)
  u = f32[5] parameter(2)
  ROOT s = f32[5] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add""")
    (out,) = run(text, x, idx, upd)
    np.testing.assert_array_equal(out, [0, 3, 0, 0, 5])


def test_scatter_window_partly_outside_is_skipped_whole() -> None:
    x = np.zeros((4, 2), np.int32)
    idx = np.array([3, 1], np.int32)  # a 2-row window at row 3 would leave the operand
    upd = np.ones((2, 2, 2), np.int32)
    text = module("""
  x = s32[4,2] parameter(0)
  i = s32[2] parameter(1)
  u = s32[2,2,2] parameter(2)
  ROOT s = s32[4,2] scatter(x, i, u), update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=mul
""", """
mul {
  mul.a = s32[] parameter(0)
  mul.b = s32[] parameter(1)
  mul.c = s32[] constant(7)
  mul.m = s32[] multiply(mul.b, mul.c)
  ROOT mul.s = s32[] add(mul.a, mul.m)
}""")
    (out,) = run(text, x, idx, upd)
    np.testing.assert_array_equal(out, [[0, 0], [7, 7], [7, 7], [0, 0]])


def test_variadic_scatter_with_any_computation() -> None:
    keys = np.array([5, 5, 5], np.int32)
    vals = np.array([0, 0, 0], np.int32)
    idx = np.array([[0], [2], [0]], np.int32)
    uk = np.array([3, 9, 1], np.int32)
    uv = np.array([10, 20, 30], np.int32)
    # Keep the (key, value) pair with the smaller key: a variadic min-by-key.
    text = module("""
  k = s32[3] parameter(0)
  v = s32[3] parameter(1)
  i = s32[3,1] parameter(2)
  uk = s32[3] parameter(3)
  uv = s32[3] parameter(4)
  ROOT s = (s32[3], s32[3]) scatter(k, v, i, uk, uv), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=minby""", """
minby {
  ak = s32[] parameter(0)
  av = s32[] parameter(1)
  bk = s32[] parameter(2)
  bv = s32[] parameter(3)
  lt = pred[] compare(bk, ak), direction=LT
  mk = s32[] select(lt, bk, ak)
  mv = s32[] select(lt, bv, av)
  ROOT t = (s32[], s32[]) tuple(mk, mv)
}""")
    out_k, out_v = run(text, keys, vals, idx, uk, uv)
    np.testing.assert_array_equal(out_k, [1, 5, 5])
    np.testing.assert_array_equal(out_v, [30, 0, 0])  # key 9 at index 2 loses to 5


SORT_DESCENDING_BY_KEY = """
cmp {
  cmp.a = f32[] parameter(0)
  cmp.b = f32[] parameter(1)
  cmp.c = s32[] parameter(2)
  cmp.d = s32[] parameter(3)
  ROOT cmp.gt = pred[] compare(cmp.a, cmp.b), direction=GT
}
"""


@pytest.mark.parametrize("stable", ["true", "false"])
def test_sort_several_operands_with_a_comparator(stable: str) -> None:
    keys = np.array([[1, 3, 3, 2], [0, 0, 5, 1]], np.float32)
    payload = np.array([[0, 1, 2, 3], [0, 1, 2, 3]], np.int32)
    text = module(f"""
  k = f32[2,4] parameter(0)
  p = s32[2,4] parameter(1)
  ROOT s = (f32[2,4], s32[2,4]) sort(k, p), dimensions={{1}}, is_stable={stable}, to_apply=cmp""",
                  SORT_DESCENDING_BY_KEY)
    out_k, out_p = run(text, keys, payload)
    np.testing.assert_array_equal(out_k, [[3, 3, 2, 1], [5, 1, 0, 0]])
    np.testing.assert_array_equal(out_p, [[1, 2, 3, 0], [2, 3, 0, 1]])


def test_topk_largest_ties_keep_lower_index() -> None:
    x = np.array([[1, 4, 4, -2, 9]], np.float32)
    text = module("""
  x = f32[1,5] parameter(0)
  ROOT t = (f32[1,3], s32[1,3]) topk(x), k=3, largest=true""", "")
    values, indices = run(text, x)
    np.testing.assert_array_equal(values, [[9, 4, 4]])
    np.testing.assert_array_equal(indices, [[4, 1, 2]])


def test_map_applies_the_computation_per_element() -> None:
    a = np.array([1, 2, 3], np.float32)
    b = np.array([10, 20, 30], np.float32)
    text = module("""
  a = f32[3] parameter(0)
  b = f32[3] parameter(1)
  ROOT m = f32[3] map(a, b), dimensions={0}, to_apply=add""")
    (out,) = run(text, a, b)
    np.testing.assert_array_equal(out, [11, 22, 33])


def test_reduce_precision_rounds_saturates_and_flushes() -> None:
    x = np.array([1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 70000.0, -1e-30, np.nan, -np.inf, 0.1],
                 np.float32)
    out = reduce_precision(x, 5, 10)  # IEEE half's range and precision
    np.testing.assert_array_equal(out[:4], [1.0, 1.0 + 2 * 2.0**-10, np.inf, -0.0])
    assert np.signbit(out[3]) and np.isnan(out[4]) and out[5] == -np.inf
    assert out[6] == np.float32(np.float16(0.1))
    text = module("""
  x = f32[7] parameter(0)
  ROOT r = f32[7] reduce-precision(x), exponent_bits=5, mantissa_bits=10""", "")
    (via_module,) = run(text, x)
    np.testing.assert_array_equal(via_module, out)


def test_select_and_scatter_adds_source_at_each_windows_max() -> None:
    x = np.array([[1, 5, 2, 0], [3, 4, 8, 1]], np.float32)
    source = np.array([[10, 20]], np.float32)
    text = module("""
  x = f32[2,4] parameter(0)
  s = f32[1,2] parameter(1)
  z = f32[] constant(0)
  ROOT r = f32[2,4] select-and-scatter(x, s, z), window={size=2x2 stride=2x2}, select=ge, scatter=add""", ADD + """
ge {
  ge.a = f32[] parameter(0)
  ge.b = f32[] parameter(1)
  ROOT ge.c = pred[] compare(ge.a, ge.b), direction=GE
}""")
    (out,) = run(text, x, source)
    np.testing.assert_array_equal(out, [[0, 10, 0, 0], [0, 0, 20, 0]])


def test_convolution_1d_with_padding_and_stride() -> None:
    x = np.array([[[1, 2, 3, 4, 5]]], np.float32)  # b=1, f=1, w=5
    w = np.array([[[1, 0, -1]]], np.float32)  # o=1, i=1, w=3
    text = module("""
  x = f32[1,1,5] parameter(0)
  w = f32[1,1,3] parameter(1)
  ROOT c = f32[1,1,3] convolution(x, w), window={size=3 stride=2 pad=1_1}, dim_labels=bf0_oi0->bf0""", "")
    (out,) = run(text, x, w)
    # padded: 0 1 2 3 4 5 0; windows at 0, 2, 4: (0-2), (2-4), (4-0)
    np.testing.assert_array_equal(out, [[[-2, -2, 4]]])


# --- bad input: clear errors with line and column -------------------------------------------


GATHER_LINE = ("  ROOT g = f32[4,3] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, "
               "start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}")


@pytest.mark.parametrize(("line", "message"), [
    (GATHER_LINE.replace("start_index_map={0}", "start_index_map={0,1}"),
     "start_index_map=[0, 1] must have one entry per index vector component (1)"),
    (GATHER_LINE.replace("slice_sizes={1,3}", "slice_sizes={2,3}"),
     "slice size must be at most 1"),
    (GATHER_LINE.replace("offset_dims={1}", "offset_dims={}"), "offset_dims=[] must have 1"),
    (GATHER_LINE.replace("index_vector_dim=1", "index_vector_dim=3"),
     "index_vector_dim=3 out of range"),
    (GATHER_LINE.replace("collapsed_slice_dims={0}", "collapsed_slice_dims={5}"),
     "collapsed_slice_dims [5] has dimension 5 out of range"),
])
def test_gather_with_inconsistent_dimension_numbers(line: str, message: str) -> None:
    text = module("  x = f32[4,3] parameter(0)\n  i = s32[4,1] parameter(1)\n" + line, "")
    with pytest.raises(HloParseError) as info:
        parse_module(text, "bad.hlo")
    assert message in info.value.message
    assert (info.value.line, info.value.column) == (text.splitlines().index(line) + 1, 8)


def test_scatter_with_a_non_scalar_update_computation() -> None:
    text = module("""
  x = f32[5] parameter(0)
  i = s32[5,1] parameter(1)
  u = f32[5] parameter(2)
  ROOT s = f32[5] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=vec""", """
vec {
  vec.a = f32[2] parameter(0)
  vec.b = f32[2] parameter(1)
  ROOT vec.s = f32[2] add(vec.a, vec.b)
}""")
    with pytest.raises(HloParseError) as info:
        parse_module(text, "bad.hlo")
    assert "update computation %vec must take (f32[], f32[])" in info.value.message
    assert info.value.line == text.splitlines().index(
        [ln for ln in text.splitlines() if "ROOT s = f32[5] scatter" in ln][0]) + 1


def test_sort_comparator_that_is_not_a_predicate() -> None:
    text = module("""
  k = f32[4] parameter(0)
  ROOT s = f32[4] sort(k), dimensions={0}, to_apply=add""")
    with pytest.raises(HloParseError) as info:
        parse_module(text, "bad.hlo")
    assert "comparator %add must return pred[], returns f32[]" in info.value.message


def test_sort_comparator_that_is_not_an_order_fails_on_the_interpreter() -> None:
    text = module("""
  k = f32[3] parameter(0)
  ROOT s = f32[3] sort(k), dimensions={0}, to_apply=always""", """
always {
  always.a = f32[] parameter(0)
  always.b = f32[] parameter(1)
  ROOT always.t = pred[] constant(true)
}""")
    with pytest.raises(Exception, match="not a strict weak order"):
        evaluate(parse_module(text), [np.array([1, 2, 3], np.float32)])


def test_bad_dim_labels_point_at_the_value() -> None:
    line = "  ROOT c = f32[1,1,3] convolution(x, w), window={size=3}, dim_labels=bf0_oi1->bf0"
    text = module("  x = f32[1,1,5] parameter(0)\n  w = f32[1,1,3] parameter(1)\n" + line, "")
    with pytest.raises(HloParseError) as info:
        parse_module(text, "bad.hlo")
    assert "kernel 'oi1' must name" in info.value.message
    assert info.value.column == line.index("bf0_oi1") + 1


def test_every_xla_opcode_is_known_or_refused_by_name() -> None:
    assert set(OP_BY_NAME) <= XLA_OPCODES
    assert {"real", "imag", "complex", "cosh", "all-reduce", "fft"} <= UNSUPPORTED_XLA_OPCODES
    for opcode in sorted(UNSUPPORTED_XLA_OPCODES):
        text = module(f"  p = f32[4] parameter(0)\n  ROOT r = f32[4] {opcode}(p)", "")
        with pytest.raises(HloParseError) as info:
            parse_module(text, "x.hlo")
        assert info.value.message.startswith(f"opcode '{opcode}' is not supported by hlofuse")
        assert (info.value.line, info.value.column) == (5, 19)
    text = module("  p = f32[4] parameter(0)\n  ROOT r = f32[4] frobnicate(p)", "")
    with pytest.raises(HloParseError, match="unknown opcode 'frobnicate'"):
        parse_module(text)


@pytest.mark.thorough
def test_cli_refuses_an_unsupported_opcode_with_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "complex.hlo"
    path.write_text(module("  p = f32[4] parameter(0)\n  ROOT r = f32[4] imag(p)", ""))
    hlofuse = str(Path(sys.executable).parent / "hlofuse")
    result = subprocess.run([hlofuse, "run", str(path),
                             "--random-inputs", "0"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        f"error: {path}:5:19: opcode 'imag' is not supported by hlofuse (complex numbers are "
        "not supported)")


# --- fusion properties as XLA classifies the ops -----------------------------------------


FUSION_PROGRAM = module("""
  x = f32[4,3] parameter(0)
  i = s32[6,1] parameter(1)
  n = f32[4,3] negate(x)
  g = f32[6,3] gather(n, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}
  u = f32[6,3] exponential(g)
  s = f32[4,3] scatter(n, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
  r = f32[4,3] reduce-precision(s), exponent_bits=5, mantissa_bits=10
  ROOT t = (f32[4,3], f32[6,3]) tuple(r, g)""")


def test_fusion_classification_follows_xla() -> None:
    graph = ModuleGraph.from_module(parse_module(FUSION_PROGRAM))
    nodes: dict[str, Node] = {n.name: n for g in graph.graphs for n in g.nodes}
    g, s, r, n, u = nodes["g"], nodes["s"], nodes["r"], nodes["n"], nodes["u"]
    assert is_loop_fusible(g) and not is_input_fusible(g)
    assert is_input_fusible(s) and not is_loop_fusible(s)
    assert is_elementwise(r) and not is_expensive(r)
    assert is_expensive(g) and is_expensive(s)
    assert reads_elements_multiple_times(g)  # 18 outputs from 12 inputs
    assert in_place_operands(s) == [0]
    assert scatter_fusion_refusal(n, s) is not None  # n is the operand updated in place
    assert scatter_fusion_refusal(u, s) is None  # the updates may fuse in
    assert scatter_fusion_refusal(s, r) is not None  # nothing fuses into a scatter's output
