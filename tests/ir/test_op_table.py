"""The op table's per-op columns that the passes and the cost model read (hlofuse.ir.ops)."""

from __future__ import annotations

import dataclasses

from hlofuse.ir.ops import (
    OP_TABLE,
    CostClass,
    Fusibility,
    Op,
    OpDef,
    OpKind,
    SideEffect,
    has_side_effect,
)


def _with(column: str, value: object) -> set[Op]:
    return {op for op, d in OP_TABLE.items() if getattr(d, column) == value}


def test_cost_classes() -> None:
    assert OP_TABLE[Op.EXPONENTIAL].cost is CostClass.TRANSCENDENTAL
    assert OP_TABLE[Op.SINE].cost is CostClass.TRANSCENDENTAL  # a libm call, though cheap to XLA
    assert not OP_TABLE[Op.SINE].expensive
    assert _with("cost", CostClass.DIVISION) == {Op.DIVIDE, Op.REMAINDER, Op.SQRT, Op.RSQRT}
    assert _with("cost", CostClass.TWO_TRANSCENDENTALS) == {Op.POWER}
    assert {Op.BROADCAST, Op.TRANSPOSE, Op.PARAMETER} <= _with("cost", CostClass.FREE)
    assert OP_TABLE[Op.ADD].cost is CostClass.CHEAP


def test_side_effects() -> None:
    assert _with("side_effect", SideEffect.DECLARED) == {Op.CUSTOM_CALL}
    assert has_side_effect(Op.CUSTOM_CALL, {"custom_call_has_side_effect": True})
    assert not has_side_effect(Op.CUSTOM_CALL, {"custom_call_target": "x"})
    assert not any(has_side_effect(op, {}) for op in OP_TABLE)


def test_fusibility_as_xla_classifies_it() -> None:
    assert _with("fusibility", Fusibility.NEVER) == {Op.PARAMETER, Op.WHILE, Op.CONDITIONAL,
                                                     Op.CALL}
    assert _with("fusibility", Fusibility.REDUCTION) == {Op.REDUCE}
    assert {Op.BROADCAST, Op.CONCATENATE, Op.REDUCE_WINDOW, Op.GATHER, Op.CONSTANT} <= _with(
        "fusibility", Fusibility.LOOP)
    elementwise = {op for op, d in OP_TABLE.items() if d.kind is OpKind.ELEMENTWISE}
    assert _with("fusibility", Fusibility.ELEMENTWISE) == elementwise
    assert OP_TABLE[Op.DOT].fusion_class is Fusibility.OPAQUE


def test_structural_columns() -> None:
    assert _with("buffer_only", True) == {Op.PARAMETER, Op.CONSTANT, Op.TUPLE,
                                          Op.GET_TUPLE_ELEMENT, Op.BITCAST, Op.AFTER_ALL,
                                          Op.OPT_BARRIER}
    assert _with("invalidates_cache", True) == {Op.CONCATENATE, Op.DOT, Op.DYNAMIC_UPDATE_SLICE,
                                                Op.PAD, Op.REDUCE, Op.REDUCE_WINDOW}
    assert {Op.WHILE, Op.FUSION, Op.REDUCE, Op.PARAMETER, Op.EXPONENTIAL} <= _with("expensive",
                                                                                   True)


def test_dead_columns_are_gone() -> None:
    names = {f.name for f in dataclasses.fields(OpDef)}
    assert "c" not in names and "result_dtype_declared" not in names
    assert {"cost", "side_effect", "fusibility", "buffer_only", "invalidates_cache"} <= names
