"""A known gap (probe 43), kept as a strict expected failure so its fix shows: a reduction
over a short minor dimension (log-sum-exp over a policy's action logits, [4096, k]) is
emitted as a loop over the rows with the k elements of a row written out. gcc vectorises that
loop for k = 3, 4, 8, 16 (interleaved loads of those group sizes) but not for k = 5, 6, 7,
and the row's exp and log then run scalar: 10 ns per element against 2.4 (one thread,
`exe.profile`; `.probe/row_logsumexp.hlo` on branch probe43). Five actions (a grid's moves and
a no-op), six (MinAtar) and eighteen (Atari) are common action counts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.parser import parse_module
from hlofuse.targets.c.build import generate_c

from tests.codegen.test_whole_loop_vectorises import _assert_vectorised


def program(width: int) -> str:
    return f"""
HloModule row_logsumexp

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}}

ENTRY e {{
  x = f32[4096,{width}] parameter(0)
  ex = f32[4096,{width}] exponential(x)
  z = f32[] constant(0)
  s = f32[4096] reduce(ex, z), dimensions={{1}}, to_apply=add
  ROOT l = f32[4096] log(s)
}}
"""


def _check(tmp_path: Path, width: int) -> None:
    fused = run_strategy(parse_module(program(width)), "xla", debug=False)
    source = generate_c(fused.module).source.text
    lines = source.split("\n")
    loops = [k + 1 for k, line in enumerate(lines)
             if re.match(r"\s*for \(int64_t i\d+ = ", line)]
    _assert_vectorised(tmp_path, source, loops)


@pytest.mark.needs_cc
@pytest.mark.parametrize("width", [4, 8])
def test_a_row_reduction_over_a_power_of_two_vectorises(tmp_path: Path, width: int) -> None:
    _check(tmp_path, width)


@pytest.mark.needs_cc
@pytest.mark.xfail(strict=True, reason="gcc does not vectorise interleaved loads of 5")
def test_a_row_reduction_over_five_vectorises(tmp_path: Path) -> None:
    _check(tmp_path, 5)
