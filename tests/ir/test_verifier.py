"""Verifier rules: each one triggers on a module built directly (bypassing the parser and the
builder's shape inference), and names the instruction and the rule."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

import numpy as np
import pytest

from hlofuse.ir.attrs import SliceDim
from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction, Module, make_module
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.ir.shapes import Shape
from hlofuse.ir.verifier import HloVerifyError, verify

from tests.conftest import CORPUS, load_corpus_case

F32 = Shape.scalar(DType.F32)
F32_4 = Shape.array(DType.F32, (4,))
S32 = Shape.scalar(DType.S32)
PRED = Shape.scalar(DType.PRED)


def _param(number: int, shape: Shape, name: str | None = None) -> Instruction:
    return Instruction(name or f"p{number}", Op.PARAMETER, (), shape,
                       MappingProxyType({"parameter_number": number}))


def _inst(name: str, op: Op, operands: tuple[Instruction, ...], shape: Shape,
          attrs: dict[str, object] | None = None,
          calls: tuple[Computation, ...] = ()) -> Instruction:
    return Instruction(name, op, operands, shape, MappingProxyType(attrs or {}), calls)


def _module(*instructions: Instruction, extra: tuple[Computation, ...] = ()) -> Module:
    entry = Computation("main", instructions, instructions[-1])
    return Module("m", (*extra, entry), entry)


def _reducer(name: str, params: list[Shape], names: NameUniquer | None = None) -> Computation:
    b = ComputationBuilder(name, names)
    ps = [b.parameter(i, s, name=f"{name}_a{i}") for i, s in enumerate(params)]
    b.add(Op.ADD, ps[:2], name=f"{name}_sum")
    return b.build()


def _expect(module: Module, rule: str, instruction: str | None, fragment: str,
            **kwargs: int) -> HloVerifyError:
    with pytest.raises(HloVerifyError) as info:
        verify(module, **kwargs)
    error = info.value
    assert error.rule == rule
    assert error.instruction == instruction
    assert fragment in str(error)
    assert str(error).endswith(f"[{rule}]")
    if instruction is not None:
        assert str(error).startswith(f"%{instruction} ")
    return error


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_verifies(name: str) -> None:
    text, _, _ = load_corpus_case(name)
    verify(parse_module(text))


def test_valid_builder_module_verifies() -> None:
    b = ComputationBuilder("main")
    x = b.parameter(0, F32_4)
    y = b.add(Op.NEGATE, [x])
    b.add(Op.ADD, [x, y])
    verify(make_module("m", b.build()))


# --- structure ----------------------------------------------------------------------------


def test_entry_must_be_in_module() -> None:
    p = _param(0, F32)
    entry = Computation("main", (p,), p)
    q = _param(0, F32, "q")
    other = Computation("other", (q,), q)
    _expect(Module("m", (other,), entry), "entry-in-module", None, "entry computation")


def test_duplicate_instruction_name() -> None:
    p = _param(0, F32)
    n1 = _inst("n", Op.NEGATE, (p,), F32)
    n2 = _inst("n", Op.ABS, (n1,), F32)
    _expect(_module(p, n1, n2), "unique-names", "n", "name also used in %main")


def test_duplicate_name_across_computations() -> None:
    inner = _reducer("r", [F32, F32])
    p = _param(0, F32, name="r_sum")  # same name as the reducer's root
    _expect(_module(p, extra=(inner,)), "unique-names", "r_sum", "name also used in %r")


def test_duplicate_computation_name() -> None:
    x = _param(0, F32, "x")
    a = Computation("c", (x,), x)
    y = _param(0, F32, "y")
    b = Computation("c", (y,), y)
    _expect(Module("m", (a, b), b), "unique-names", None, "duplicate computation name")


def test_root_must_be_in_computation() -> None:
    p = _param(0, F32)
    stray = _inst("stray", Op.NEGATE, (p,), F32)
    entry = Computation("main", (p,), stray)
    _expect(Module("m", (entry,), entry), "root-in-computation", "stray", "root is not")


def test_operand_defined_after_use() -> None:
    p = _param(0, F32)
    later = _inst("later", Op.NEGATE, (p,), F32)
    user = _inst("user", Op.ABS, (later,), F32)
    _expect(_module(p, user, later), "defined-before-use", "user",
            "operand %later is not defined before its use")


def test_operand_from_another_computation() -> None:
    inner = _reducer("r", [F32, F32])
    foreign = inner.root
    user = _inst("user", Op.NEGATE, (foreign,), F32)
    _expect(_module(user, extra=(inner,)), "defined-before-use", "user", "%r_sum")


def test_cycle_is_a_use_before_definition() -> None:
    p = _param(0, F32)
    a = _inst("a", Op.NEGATE, (p,), F32)
    object.__setattr__(a, "operands", (a,))  # frozen data: only a hand-made cycle is possible
    _expect(_module(p, a), "defined-before-use", "a", "operand %a")


def test_callee_not_in_module() -> None:
    inner = _reducer("outside", [F32, F32])
    p = _param(0, F32)
    q = _param(1, F32)
    c = _inst("c", Op.CALL, (p, q), F32, calls=(inner,))
    _expect(_module(p, q, c), "callee-in-module", "c", "calls %outside, which is not in")


def test_parameter_numbers_must_be_dense() -> None:
    p0 = _param(0, F32)
    p2 = _param(2, F32)
    add = _inst("s", Op.ADD, (p0, p2), F32)
    error = _expect(_module(p0, p2, add), "parameter-numbers", None, "are not 0..1")
    assert error.computation == "main"


def test_parameter_number_must_be_an_int() -> None:
    bad = Instruction("p", Op.PARAMETER, (), F32, MappingProxyType({"parameter_number": "0"}))
    entry = Computation("main", (bad,), bad, parameters=(bad,))
    _expect(Module("m", (entry,), entry), "attribute-schema", "p", "parameter_number >= 0")


def test_recursion_between_computations() -> None:
    a_param = _param(0, F32, "a_p")
    a_call = _inst("a_call", Op.CALL, (a_param,), F32)
    comp_a = Computation("a", (a_param, a_call), a_call)
    b_param = _param(0, F32, "b_p")
    b_call = _inst("b_call", Op.CALL, (b_param,), F32, calls=(comp_a,))
    comp_b = Computation("b", (b_param, b_call), b_call)
    object.__setattr__(a_call, "calls", (comp_b,))
    p = _param(0, F32)
    c = _inst("c", Op.CALL, (p,), F32, calls=(comp_a,))
    entry = Computation("main", (p, c), c)
    _expect(Module("m", (comp_a, comp_b, entry), entry), "no-recursion", None,
            "recursively")


# --- instructions -------------------------------------------------------------------------


def test_operand_count() -> None:
    p = _param(0, F32)
    n = _inst("n", Op.NEGATE, (p, p), F32)
    _expect(_module(p, n), "operand-count", "n", "negate takes 1 operand(s), has 2")


def test_variadic_minimum_operand_count() -> None:
    c = _inst("c", Op.CONCATENATE, (), F32_4, {"dimensions": (0,)})
    _expect(_module(c), "operand-count", "c", "takes at least 1 operand(s), has 0")


def test_missing_attribute() -> None:
    p = _param(0, F32_4)
    r = _inst("r", Op.REVERSE, (p,), F32_4)
    _expect(_module(p, r), "attribute-schema", "r", "missing attribute dimensions=")


def test_attribute_of_wrong_type() -> None:
    p = _param(0, F32_4)
    r = _inst("r", Op.REVERSE, (p,), F32_4, {"dimensions": [0]})  # a list, not a tuple
    _expect(_module(p, r), "attribute-schema", "r", "bad value [0] for dimensions=")


def test_enum_attribute_outside_its_choices() -> None:
    p = _param(0, F32)
    c = _inst("c", Op.COMPARE, (p, p), PRED, {"direction": "SIDEWAYS"})
    _expect(_module(p, c), "attribute-schema", "c", "bad value 'SIDEWAYS' for direction=")


def test_bool_is_not_an_int_attribute() -> None:
    t = _param(0, Shape.tuple_of([F32]))
    g = _inst("g", Op.GET_TUPLE_ELEMENT, (t,), F32, {"index": True})
    _expect(_module(t, g), "attribute-schema", "g", "bad value True for index=")


def test_unknown_attribute() -> None:
    p = _param(0, F32)
    n = _inst("n", Op.NEGATE, (p,), F32, {"dimensions": (0,)})
    _expect(_module(p, n), "attribute-schema", "n", "negate has no attribute dimensions=")


def test_wrong_number_of_called_computations() -> None:
    p = _param(0, F32)
    c = _inst("c", Op.CALL, (p,), F32)
    _expect(_module(p, c), "called-computations", "c", "needs 1 called computation(s), has 0")


def test_shape_mismatch_with_operands() -> None:
    p = _param(0, F32_4)
    n = _inst("n", Op.NEGATE, (p,), Shape.array(DType.F32, (5,)))
    _expect(_module(p, n), "shape-inference", "n",
            "shape is f32[5] but negate of these operands gives f32[4]")


def test_element_type_mismatch() -> None:
    p = _param(0, F32)
    q = _param(1, S32)
    a = _inst("a", Op.ADD, (p, q), F32)
    _expect(_module(p, q, a), "shape-inference", "a", "got f32[] and s32[]")


def test_constant_literal_type_mismatch() -> None:
    c = _inst("c", Op.CONSTANT, (), F32, {"literal": np.array(1, np.int32)})
    _expect(_module(c), "shape-inference", "c", "literal has element type int32, declared f32")


def test_slice_out_of_bounds() -> None:
    p = _param(0, F32_4)
    s = _inst("s", Op.SLICE, (p,), Shape.array(DType.F32, (2,)),
              {"slice": (SliceDim(3, 5),)})
    _expect(_module(p, s), "shape-inference", "s", "out of bounds for dimension 0 of size 4")


def test_reduce_with_wrong_reducer_signature() -> None:
    b = ComputationBuilder("r")
    b.add(Op.NEGATE, [b.parameter(0, F32, name="r_a"), b.parameter(1, S32, name="r_b")][:1])
    reducer = b.build()
    p = _param(0, F32_4)
    z = _inst("z", Op.CONSTANT, (), F32, {"literal": np.array(0, np.float32)})
    red = _inst("red", Op.REDUCE, (p, z), F32, {"dimensions": (0,)}, (reducer,))
    _expect(_module(p, z, red, extra=(reducer,)), "shape-inference", "red",
            "reducer %r must take 2 scalars (f32[], f32[]), takes (f32[], s32[])")


def test_while_body_mismatch() -> None:
    names = NameUniquer()
    cond_b = ComputationBuilder("cond", names)
    a = cond_b.parameter(0, S32, name="ca")
    cond_b.add(Op.COMPARE, [a, a], attrs={"direction": "LT"})
    cond = cond_b.build()
    body_b = ComputationBuilder("body", names)
    body_b.add(Op.CONVERT, [body_b.parameter(0, S32, name="ba")], shape=F32)
    body = body_b.build()
    p = _param(0, S32)
    w = _inst("w", Op.WHILE, (p,), S32, calls=(cond, body))
    _expect(_module(p, w, extra=(cond, body)), "shape-inference", "w",
            "while body %body must map s32[] to itself")


def test_conditional_branch_signature() -> None:
    names = NameUniquer()
    branches = []
    for i, shape in enumerate([F32, S32]):
        bb = ComputationBuilder(f"branch{i}", names)
        bb.add(Op.CONVERT, [bb.parameter(0, shape, name=f"b{i}")], shape=F32)
        branches.append(bb.build())
    i = _param(0, S32)
    x = _param(1, F32)
    c = _inst("c", Op.CONDITIONAL, (i, x, x), F32, calls=tuple(branches))
    _expect(_module(i, x, c, extra=tuple(branches)), "shape-inference", "c",
            "conditional branch %branch1 must take f32[]")


def test_compare_type_must_fit_operands() -> None:
    p = _param(0, Shape.scalar(DType.U32))
    c = _inst("c", Op.COMPARE, (p, p), PRED, {"direction": "LT", "type": "SIGNED"})
    _expect(_module(p, c), "shape-inference", "c", "type=SIGNED does not fit u32 operands")


def test_buffer_cap() -> None:
    p = _param(0, Shape.array(DType.F32, (1024,)))
    n = _inst("n", Op.NEGATE, (p,), p.shape)
    verify(_module(p, n))  # 4 KiB is far below the 4 GiB default
    _expect(_module(p, n), "buffer-size", "p0",
            "buffer of 4096 bytes is above the cap of 4000", max_buffer_bytes=4000)


@pytest.mark.parametrize("mutate", [
    lambda p: _inst("x", Op.BROADCAST, (p,), Shape.array(DType.S32, (3, 4)),
                    {"dimensions": (1,)}),
    lambda p: _inst("x", Op.TRANSPOSE, (p,), F32_4, {"dimensions": (1,)}),
    lambda p: _inst("x", Op.IOTA, (), Shape.array(DType.PRED, (4,)), {"iota_dimension": 0}),
    lambda p: _inst("x", Op.SELECT, (p, p, p), F32_4),
    lambda p: _inst("x", Op.SUBTRACT, (_param(1, PRED, "b"), _param(2, PRED, "c")), PRED),
], ids=["broadcast-type", "transpose-perm", "iota-pred", "select-pred", "subtract-pred"])
def test_shape_rules_from_the_op_table(mutate: Callable[[Instruction], Instruction]) -> None:
    p = _param(0, F32_4)
    bad = mutate(p)
    params = [p] + [o for o in bad.operands if o.op is Op.PARAMETER and o is not p]
    _expect(_module(*params, bad), "shape-inference", "x", "")


def test_error_names_instruction_and_computation() -> None:
    p = _param(0, F32)
    n = _inst("n", Op.NEGATE, (p, p), F32)
    with pytest.raises(HloVerifyError) as info:
        verify(_module(p, n))
    assert info.value.computation == "main"
    assert str(info.value) == "%n in %main: negate takes 1 operand(s), has 2 [operand-count]"
