"""Lane code of a whole-loop kernel stays a vector loop, and the forms that keep it one compute
what the interpreter computes: predicates held in 32 bits (a byte beside floats would set gcc's
lanes per vector), a narrow streamed output staged until the lane loop is done, and a per-lane
value read at a computed position as a chain of selects that gcc must not make a switch.
The kernel's C for 64 environments is checked by
tests/filecheck/codegen-c/whole-loop-lane-predicates.hlo."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hlofuse.codegen.whole_loop_lanes import lane_language, staged_storage
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.dtypes import DType
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c import compile_cpu
from hlofuse.targets.c import generate_c as generate
from hlofuse.targets.c.language import C
from hlofuse.toolchain.compiler import DEFAULT_FLAGS, Compiler

STEPS = 6


def program(n: int) -> str:
    """Each lane reads its row of `x` at its own position `p` (a gather: the select chain),
    keeps a predicate `f` as state, and streams a predicate and a float per step."""
    state = (f"(s32[], f32[{n},10], s32[{n},1], pred[{n}], pred[{STEPS},{n}], "
             f"f32[{STEPS},{n}])")
    return f"""HloModule lanes_pred
cond {{
  cs = {state} parameter(0)
  i = s32[] get-tuple-element(cs), index=0
  steps = s32[] constant({STEPS})
  ROOT lt = pred[] compare(i, steps), direction=LT
}}
body {{
  s = {state} parameter(0)
  i0 = s32[] get-tuple-element(s), index=0
  zero = s32[] constant(0)
  x = f32[{n},10] get-tuple-element(s), index=1
  p = s32[{n},1] get-tuple-element(s), index=2
  f = pred[{n}] get-tuple-element(s), index=3
  ys = pred[{STEPS},{n}] get-tuple-element(s), index=4
  rs = f32[{STEPS},{n}] get-tuple-element(s), index=5
  g = f32[{n}] gather(x, p), offset_dims={{}}, collapsed_slice_dims={{1}}, start_index_map={{1}},
      operand_batching_dims={{0}}, start_indices_batching_dims={{0}}, index_vector_dim=1,
      slice_sizes={{1,1}}
  half = f32[] constant(0.25)
  halves = f32[{n}] broadcast(half), dimensions={{}}
  up = pred[{n}] compare(g, halves), direction=GT
  f2 = pred[{n}] xor(f, up)
  one_f = f32[] constant(1)
  minus = f32[] constant(-0.5)
  ones = f32[{n}] broadcast(one_f), dimensions={{}}
  minuses = f32[{n}] broadcast(minus), dimensions={{}}
  delta = f32[{n}] select(f2, ones, minuses)
  d2 = f32[{n},10] broadcast(delta), dimensions={{0}}
  x2 = f32[{n},10] add(x, d2)
  one = s32[] constant(1)
  nine = s32[] constant(9)
  ones_i = s32[{n},1] broadcast(one), dimensions={{}}
  nines = s32[{n},1] broadcast(nine), dimensions={{}}
  moved = s32[{n},1] add(p, ones_i)
  wrap = pred[{n},1] compare(p, nines), direction=GE
  zeros_i = s32[{n},1] broadcast(zero), dimensions={{}}
  p2 = s32[{n},1] select(wrap, zeros_i, moved)
  row = pred[1,{n}] reshape(f2)
  ys2 = pred[{STEPS},{n}] dynamic-update-slice(ys, row, i0, zero)
  grow = f32[1,{n}] reshape(g)
  rs2 = f32[{STEPS},{n}] dynamic-update-slice(rs, grow, i0, zero)
  i1 = s32[] add(i0, one)
  ROOT t = {state} tuple(i1, x2, p2, f2, ys2, rs2)
}}
ENTRY e {{
  x0 = f32[{n},10] parameter(0)
  p0 = s32[{n},1] parameter(1)
  f0 = pred[{n}] parameter(2)
  start = s32[] constant(0)
  no = pred[] constant(false)
  ys0 = pred[{STEPS},{n}] broadcast(no), dimensions={{}}
  nothing = f32[] constant(0)
  rs0 = f32[{STEPS},{n}] broadcast(nothing), dimensions={{}}
  init = {state} tuple(start, x0, p0, f0, ys0, rs0)
  ROOT loop = {state} while(init), condition=cond, body=body
}}
"""


def _inputs(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(n)
    return [rng.normal(size=(n, 10)).astype(np.float32),
            rng.integers(0, 10, size=(n, 1)).astype(np.int32),
            rng.integers(0, 2, size=n).astype(bool)]


def _kernel_source(n: int) -> str:
    module = run_strategy(parse_module(program(n)), "max", debug=False).module
    return generate(module).source.text


def test_vector_lanes_hold_predicates_in_32_bits_and_stage_narrow_stores() -> None:
    wide = lane_language(C, 16)
    assert wide.register_type(DType.PRED) is DType.S32
    assert wide.type_name(wide.register_type(DType.PRED)) == "int32_t"
    assert wide.type_name(DType.PRED) == "uint8_t"  # memory keeps one byte
    assert wide.pointer(DType.PRED, True) == C.pointer(DType.PRED, True)
    assert lane_language(C, 1) is C  # one lane is scalar code: nothing to widen
    assert staged_storage(wide, DType.PRED) is DType.S32
    assert staged_storage(wide, DType.S8) is DType.S32
    assert staged_storage(wide, DType.BF16) is DType.F32
    assert staged_storage(wide, DType.F32) is None


def _whole_loop_kernel(source: str) -> tuple[list[str], int, int]:
    """The source's lines and the first and last line (0-based) of its whole-loop kernel."""
    lines = source.split("\n")
    comment = next(k for k, line in enumerate(lines)
                   if line.startswith("/* kernel") and "whole loop" in line)
    end = next(k for k in range(comment, len(lines)) if lines[k] == "}")
    return lines, comment + 1, end


def _compiler() -> list[str]:
    return list(Compiler.find().command)


@pytest.mark.usefixtures("large_whole_loops")
@pytest.mark.needs_cc
def test_every_simd_lane_loop_of_the_kernel_is_vectorised(tmp_path: Path) -> None:
    """gcc reports each `#pragma omp simd` loop over a block's lanes vectorised: none keeps a
    branch (a switch made of the select chain) or a byte-wide store that would change the
    lanes per vector."""
    source = _kernel_source(64)
    lines, start, end = _whole_loop_kernel(source)
    lane_loops = [k + 2 for k in range(start, end)  # 1-based line of the `for`
                  if lines[k].strip().startswith("#pragma omp simd")
                  and "for (int l = 0;" in lines[k + 1]]
    assert lane_loops, "\n".join(lines[start:end])
    _assert_vectorised(tmp_path, source, lane_loops)


def _assert_vectorised(tmp_path: Path, source: str, loops: list[int]) -> None:
    """gcc reports each loop of `source` at the 1-based lines `loops` vectorised."""
    version = subprocess.run([*_compiler(), "--version"], capture_output=True, text=True,
                             check=False)
    if "gcc" not in version.stdout.lower() and "free software" not in version.stdout.lower():
        pytest.skip("-fopt-info-vec-optimized is a gcc option")
    path = tmp_path / "kernel.c"
    path.write_text(source)
    report = subprocess.run([*_compiler(), *DEFAULT_FLAGS, "-fPIC", "-c", str(path), "-o",
                             str(tmp_path / "kernel.o"), "-fopt-info-vec-optimized"],
                            capture_output=True, text=True, check=True).stderr
    vectorised = {int(m) for m in re.findall(r"kernel\.c:(\d+):\d+: optimized: loop vectorized",
                                             report)}
    # gcc names the loop's line or a line of its body
    lines = source.split("\n")
    missing = [k for k in loops
               if not any(k <= line <= _loop_end(lines, k) for line in vectorised)]
    assert not missing, f"loops at lines {missing} not vectorised\n{report}"


def _loop_end(lines: list[str], first: int) -> int:
    """The 1-based line closing the loop whose `for` is at 1-based line `first`."""
    depth = 0
    for k in range(first - 1, len(lines)):
        depth += lines[k].count("{") - lines[k].count("}")
        if depth <= 0 and k >= first - 1 and "{" in "".join(lines[first - 1:k + 1]):
            return k + 1
    return len(lines)


@pytest.mark.needs_cc
@pytest.mark.parametrize("n", [1, 37, 64])
def test_predicate_state_and_streams_equal_the_interpreter(n: int) -> None:
    inputs = _inputs(n)
    expected = flatten_value(evaluate(parse_module(program(n)), inputs))
    fused = run_strategy(parse_module(program(n)), "max", debug=False)
    assert not fused.kernels_per_iteration()  # the loop is one kernel
    actual = flatten_value(compile_cpu(fused.module)(*inputs))
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert np.asarray(a).dtype == np.asarray(e).dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


@pytest.mark.needs_cc
def test_the_listed_lanes_loop_of_a_rare_select_is_vectorised(tmp_path: Path) -> None:
    """A rare select's operand (a reset's draws) for the block's listed lanes runs in a simd
    loop that stores to contiguous arrays, which gcc vectorises on any x86 (stored straight to
    the listed lanes it would scatter: AVX2 has no scatter, and the loop ran scalar); a plain
    loop then copies the values to the lanes."""
    text = (Path(__file__).parent.parent / "filecheck" / "codegen-c" /
            "whole-loop-rare-select.hlo").read_text()
    source = generate(run_strategy(parse_module(text), "max", debug=False).module).source.text
    lines = source.split("\n")
    listed = [k + 2 for k in range(len(lines) - 1)
              if lines[k].strip() == "#pragma omp simd"
              and re.match(r"\s*for \(int k\d+ = 0; k\d+ < ", lines[k + 1])]
    assert listed, source
    _assert_vectorised(tmp_path, source, listed)


# Each lane moves by a row of a small constant table picked by its own action (a grid world's
# moves): a read of a constant at a per-lane position, a gather gcc does not emit for every CPU.
MOVE_TABLE = """
HloModule move_table

cond {
  cp = (s32[], s32[64]{0}, f32[64]{0}) parameter(0)
  ci = s32[] get-tuple-element(cp), index=0
  n = s32[] constant(6)
  ROOT lt = pred[] compare(ci, n), direction=LT
}

body {
  p = (s32[], s32[64]{0}, f32[64]{0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  next = s32[] add(i, one)
  x = s32[64]{0} get-tuple-element(p), index=1
  y = f32[64]{0} get-tuple-element(p), index=2
  three = s32[] constant(3)
  threes = s32[64]{0} broadcast(three), dimensions={}
  action = s32[64]{0} and(x, threes)
  at = s32[64,1]{1,0} reshape(action)
  moves = s32[4,2]{1,0} constant({ {1, 0}, {0, 1}, {-1, 0}, {0, -1} })
  move2 = s32[64,2]{1,0} gather(moves, at), offset_dims={1}, collapsed_slice_dims={0},
      start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}
  mx2 = s32[64,1]{1,0} slice(move2), slice={[0:64], [0:1]}
  my2 = s32[64,1]{1,0} slice(move2), slice={[0:64], [1:2]}
  mx = s32[64]{0} reshape(mx2)
  my = s32[64]{0} reshape(my2)
  ten = s32[] constant(10)
  tens = s32[64]{0} broadcast(ten), dimensions={}
  myt = s32[64]{0} multiply(my, tens)
  move = s32[64]{0} add(mx, myt)
  scales = f32[4]{0} constant({0.5, 1.5, -0.25, 2})
  scale = f32[64]{0} gather(scales, at), offset_dims={}, collapsed_slice_dims={0},
      start_index_map={0}, index_vector_dim=1, slice_sizes={1}
  seven = s32[] constant(7)
  sevens = s32[64]{0} broadcast(seven), dimensions={}
  stirred = s32[64]{0} multiply(x, sevens)
  nx = s32[64]{0} add(stirred, move)
  ny = f32[64]{0} multiply(y, scale)
  ROOT t = (s32[], s32[64]{0}, f32[64]{0}) tuple(next, nx, ny)
}

ENTRY main {
  x0 = s32[64]{0} parameter(0)
  y0 = f32[64]{0} parameter(1)
  start = s32[] constant(0)
  init = (s32[], s32[64]{0}, f32[64]{0}) tuple(start, x0, y0)
  ROOT loop = (s32[], s32[64]{0}, f32[64]{0}) while(init), condition=cond, body=body
}
"""


@pytest.mark.usefixtures("large_whole_loops")
@pytest.mark.needs_cc
def test_a_small_constant_table_read_per_lane_keeps_the_lane_loop_a_vector(tmp_path: Path
                                                                          ) -> None:
    """Lane code reads a constant of at most 32 elements at a computed position as a select
    over its literals, so the lane loop vectorises; results equal the interpreter."""
    module = run_strategy(parse_module(MOVE_TABLE), "max", debug=False).module
    source = generate(module).source.text
    lines, start, end = _whole_loop_kernel(source)
    lane_loops = [k + 2 for k in range(start, end)
                  if lines[k].strip().startswith("#pragma omp simd")
                  and "for (int l = 0;" in lines[k + 1]]
    assert lane_loops and "moves" not in "\n".join(lines[start:end]).split("{", 1)[1]
    _assert_vectorised(tmp_path, source, lane_loops)
    rng = np.random.default_rng(4)
    inputs = [rng.integers(-1000, 1000, 64).astype(np.int32),
              rng.normal(size=64).astype(np.float32)]
    expected = flatten_value(evaluate(parse_module(MOVE_TABLE), inputs))
    actual = flatten_value(compile_cpu(module)(*inputs))
    for a, e in zip(actual, expected, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


# A float table whose literals repeat (moves of 0.1 in four directions, and staying put): the
# select chain's arms of equal value are one test of the position against several literals.
FLOAT_MOVES = """
HloModule float_moves

cond {
  cp = (s32[], s32[64]{0}, f32[64,2]{1,0}) parameter(0)
  ci = s32[] get-tuple-element(cp), index=0
  n = s32[] constant(6)
  ROOT lt = pred[] compare(ci, n), direction=LT
}

body {
  p = (s32[], s32[64]{0}, f32[64,2]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  next = s32[] add(i, one)
  x = s32[64]{0} get-tuple-element(p), index=1
  pos = f32[64,2]{1,0} get-tuple-element(p), index=2
  five = s32[] constant(5)
  fives = s32[64]{0} broadcast(five), dimensions={}
  action = s32[64]{0} remainder(x, fives)
  at = s32[64,1]{1,0} reshape(action)
  moves = f32[5,2]{1,0} constant({ {0, 0}, {0.1, 0}, {-0.1, 0}, {0, 0.1}, {0, -0.1} })
  move = f32[64,2]{1,0} gather(moves, at), offset_dims={1}, collapsed_slice_dims={0},
      start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}
  moved = f32[64,2]{1,0} add(pos, move)
  seven = s32[] constant(7)
  sevens = s32[64]{0} broadcast(seven), dimensions={}
  three = s32[] constant(3)
  threes = s32[64]{0} broadcast(three), dimensions={}
  stirred = s32[64]{0} multiply(x, sevens)
  nx = s32[64]{0} add(stirred, threes)
  ROOT t = (s32[], s32[64]{0}, f32[64,2]{1,0}) tuple(next, nx, moved)
}

ENTRY main {
  x0 = s32[64]{0} parameter(0)
  p0 = f32[64,2]{1,0} parameter(1)
  start = s32[] constant(0)
  init = (s32[], s32[64]{0}, f32[64,2]{1,0}) tuple(start, x0, p0)
  ROOT loop = (s32[], s32[64]{0}, f32[64,2]{1,0}) while(init), condition=cond, body=body
}
"""


@pytest.mark.usefixtures("large_whole_loops")
@pytest.mark.needs_cc
def test_a_table_of_repeated_literals_read_per_lane_keeps_the_lane_loop_a_vector(
        tmp_path: Path) -> None:
    """gcc's reassociation made the chain's tests for the repeated literal a bit test, a shift
    of a 64-bit mask by the position, which AVX2 has no vector form for with the 32-bit
    position: the lane loop ran scalar (a GRU policy's rollout, a third of its kernel) until
    whole-loop kernels turned the pass off (targets/c/language.py). Results equal the
    interpreter."""
    module = run_strategy(parse_module(FLOAT_MOVES), "max", debug=False).module
    source = generate(module).source.text
    lines, start, end = _whole_loop_kernel(source)
    lane_loops = [k + 2 for k in range(start, end)
                  if lines[k].strip().startswith("#pragma omp simd")
                  and "for (int l = 0;" in lines[k + 1]]
    assert lane_loops and "0x0.0p+0f : ((j" in source  # the chain with repeated literals
    _assert_vectorised(tmp_path, source, lane_loops)
    rng = np.random.default_rng(5)
    inputs = [rng.integers(0, 1000, 64).astype(np.int32),
              rng.normal(size=(64, 2)).astype(np.float32)]
    expected = flatten_value(evaluate(parse_module(FLOAT_MOVES), inputs))
    actual = flatten_value(compile_cpu(module)(*inputs))
    for a, e in zip(actual, expected, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e))
