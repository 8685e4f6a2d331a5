"""The one reducer recogniser and identity table (hlofuse.analysis.reducers), and the layer
rule of the analysis package."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import hlofuse.analysis
from hlofuse.analysis.reducers import identity, is_identity, reducer_op, regrouping_refusal
from hlofuse.ir.builder import ComputationBuilder
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.ir.shapes import Shape


def _reducer(op: Op, dtype: DType = DType.F32, swapped: bool = False,
             same: bool = False) -> Computation:
    b = ComputationBuilder("r")
    x = b.parameter(0, Shape.array(dtype, ()))
    y = b.parameter(1, Shape.array(dtype, ()))
    operands = [x, x] if same else [y, x] if swapped else [x, y]
    b.add(op, operands)
    return b.build()


@pytest.mark.parametrize("op", [Op.ADD, Op.MULTIPLY, Op.MAXIMUM, Op.MINIMUM])
def test_reducer_op_recognises_one_op_in_either_order(op: Op) -> None:
    assert reducer_op(_reducer(op)) is op
    assert reducer_op(_reducer(op, swapped=True)) is op
    assert reducer_op(_reducer(op, same=True)) is None  # op(a, a) ignores b


def test_reducer_op_refuses_other_ops_and_shapes() -> None:
    assert reducer_op(_reducer(Op.SUBTRACT)) is None  # not commutative
    assert reducer_op(_reducer(Op.AND, DType.PRED)) is Op.AND
    module = parse_module("""HloModule m

r {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  s = f32[] add(a, b)
  ROOT n = f32[] negate(s)
}

ENTRY main {
  p = f32[4]{0} parameter(0)
  z = f32[] constant(0)
  ROOT red = f32[] reduce(p, z), dimensions={0}, to_apply=r
}
""")
    assert reducer_op(module.entry.root.calls[0]) is None


@pytest.mark.parametrize("op,dtype,expected", [
    (Op.ADD, DType.F32, 0.0), (Op.MULTIPLY, DType.S32, 1), (Op.MAXIMUM, DType.F32, -np.inf),
    (Op.MINIMUM, DType.S32, np.iinfo(np.int32).max), (Op.AND, DType.U8, 255),
    (Op.AND, DType.PRED, True), (Op.OR, DType.PRED, False), (Op.MAXIMUM, DType.U32, 0),
    (Op.MINIMUM, DType.PRED, True), (Op.XOR, DType.S64, 0),
])
def test_identities(op: Op, dtype: DType, expected: object) -> None:
    value = identity(op, dtype)
    assert value is not None
    assert value.dtype == dtype.numpy and value == np.asarray(expected, dtype.numpy)


def test_no_identity_for_bitwise_ops_on_floats_or_non_associative_ops() -> None:
    assert identity(Op.AND, DType.F32) is None
    assert identity(Op.SUBTRACT, DType.S32) is None


def test_is_identity_is_bit_exact() -> None:
    b = ComputationBuilder("c")
    assert is_identity(b.constant(0.0, DType.F32), Op.ADD)
    assert not is_identity(b.constant(-0.0, DType.F32), Op.ADD)  # -0.0 + 0.0 = 0.0
    assert is_identity(b.constant(-np.inf, DType.F32), Op.MAXIMUM)
    assert not is_identity(b.constant(1, DType.S32), Op.ADD)
    assert not is_identity(b.parameter(0, Shape.array(DType.S32, ())), Op.ADD)


def _reduce_module(dtype: str, op: str, init: str) -> Computation:
    return parse_module(f"""HloModule m

r {{
  a = {dtype}[] parameter(0)
  b = {dtype}[] parameter(1)
  ROOT c = {dtype}[] {op}(a, b)
}}

ENTRY main {{
  p = {dtype}[4]{{0}} parameter(0)
  z = {dtype}[] constant({init})
  ROOT red = {dtype}[] reduce(p, z), dimensions={{0}}, to_apply=r
}}
""").entry


@pytest.mark.parametrize("dtype,op,init,rule", [
    ("s32", "add", "0", None), ("f32", "maximum", "5", None),
    ("f32", "add", "0", "reducer-not-exact"), ("s32", "add", "3", "init-not-identity"),
    ("s32", "subtract", "0", "reducer-not-associative"),
])
def test_regrouping_refusal(dtype: str, op: str, init: str, rule: str | None) -> None:
    entry = _reduce_module(dtype, op, init)
    refusal = regrouping_refusal(entry.root, entry.root.calls[0])
    assert (refusal[0] if refusal else None) == rule


def test_analysis_imports_only_ir() -> None:
    package = Path(hlofuse.analysis.__file__).parent
    outside = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0
                     else [])
            outside += [f"{path.name}: {n}" for n in names if n.startswith("hlofuse")
                        and not n.startswith(("hlofuse.ir", "hlofuse.analysis"))]
    assert outside == []

