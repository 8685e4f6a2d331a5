"""The rewrites before fusion (rng-expansion, concat-forwarding, scalarize-state, loop-unroll)
leave every module verifiable and computing the same values, bit for bit, as before: on the JAX
corpus, on random programs, and on random programs made for each pass (Threefry calls of any
shape, counted loops of every kind, packed loop state)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hlofuse.analysis.counted_loops import trip_count
from hlofuse.ir.attrs import SliceDim
from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction, Module, make_module
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.ir.shapes import Shape
from hlofuse.passes.call_inliner import CallInliner
from hlofuse.passes.concat_forwarding import ConcatForwarding
from hlofuse.passes.cse import CommonSubexpressionElimination
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.decision_log import DecisionLog
from hlofuse.passes.manager import Pass, Pipeline
from hlofuse.passes.rng_expansion import RngExpansion
from hlofuse.passes.scalarize_state import ScalarizeState
from hlofuse.passes.simplify import AlgebraicSimplifier
from hlofuse.passes.unroll import LoopUnroll
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.reference.rnglib import threefry2x32

from tests.conftest import CORPUS, load_corpus_case
from tests.hlo_programs import RandomProgram, programs

TIDY: tuple[Pass, ...] = (AlgebraicSimplifier(), CommonSubexpressionElimination(),
                          DeadCodeElimination())
# Each pass on its own, and each with the clean-up the strategies run after it.
PIPELINES: dict[str, Sequence[Pass]] = {
    "rng-expansion": [RngExpansion()],
    "concat-forwarding": [ConcatForwarding()],
    "scalarize-state": [ScalarizeState()],
    "forward+scalarize": [ConcatForwarding(), ScalarizeState(), *TIDY],
    "unroll-2": [LoopUnroll(factor=2)],
    "inline+unroll-3": [CallInliner(), LoopUnroll(factor=3), *TIDY],
    "unroll-auto": [CallInliner(), LoopUnroll()],
}


def _values(module: Module, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return flatten_value(evaluate(module, list(inputs)))


def _assert_identical(actual: list[np.ndarray], expected: list[np.ndarray], where: str) -> None:
    assert len(actual) == len(expected), where
    for i, (a, b) in enumerate(zip(actual, expected)):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where} out{i}"
        np.testing.assert_array_equal(a, b, err_msg=f"{where} out{i}")


def _check_all(module: Module, inputs: Sequence[np.ndarray], where: str,
               pipelines: dict[str, Sequence[Pass]] = PIPELINES) -> None:
    reference = _values(module, inputs)
    for name, steps in pipelines.items():
        rewritten, changed = Pipeline(list(steps), debug=True).run(module)  # verifies each pass
        if not changed:  # (evaluating the same objects again would prove nothing)
            assert rewritten is module, f"{where}: {name} rebuilt an unchanged module"
            continue
        _assert_identical(_values(rewritten, inputs), reference, f"{where} after {name}")


@pytest.mark.thorough
@pytest.mark.parametrize("name", CORPUS)
def test_corpus(name: str) -> None:
    text, inputs, _ = load_corpus_case(name)
    _check_all(parse_module(text, f"{name}.hlo"), inputs, name)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs(program: RandomProgram) -> None:
    _check_all(program.module, program.inputs, "random program")


# --- Threefry calls ------------------------------------------------------------------------


@st.composite
def threefry_programs(draw: Callable[..., object]) -> tuple[Module, list[np.ndarray]]:
    """A custom call on keys that are parameters or broadcast scalars, its bits used."""
    dims = tuple(draw(st.lists(st.integers(1, 4), max_size=3)))  # type: ignore[arg-type]
    words = Shape.array(DType.U32, dims)
    b = ComputationBuilder("main", NameUniquer())
    operands: list[Instruction] = []
    inputs: list[np.ndarray] = []
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))  # type: ignore[arg-type]
    for i in range(4):
        scalar = i < 2 and draw(st.booleans())
        shape = Shape.scalar(DType.U32) if scalar else words
        param = b.parameter(i, shape)
        inputs.append(rng.integers(0, 2**32, size=shape.dims, dtype=np.uint64)
                      .astype(np.uint32))
        if scalar and dims:
            param = b.add(Op.BROADCAST, [param], attrs={"dimensions": ()}, shape=words)
        operands.append(param)
    pair = b.add(Op.CUSTOM_CALL, operands, shape=Shape.tuple_of([words, words]),
                 attrs={"custom_call_target": "hlofuse_threefry2x32"})
    y0 = b.add(Op.GET_TUPLE_ELEMENT, [pair], attrs={"index": 0})
    y1 = b.add(Op.GET_TUPLE_ELEMENT, [pair], attrs={"index": 1})
    bits = b.add(Op.XOR, [y0, y1])
    b.add(Op.TUPLE, [y0, y1, bits])
    return make_module("threefry", b.build()), inputs


@settings(max_examples=25, deadline=None)
@given(threefry_programs())
def test_rng_expansion_is_bit_exact(case: tuple[Module, list[np.ndarray]]) -> None:
    module, inputs = case
    expanded, changed = Pipeline([RngExpansion(), *TIDY]).run(module)
    assert changed
    assert not any(i.op is Op.CUSTOM_CALL for i in expanded.all_instructions())
    y0, y1, bits = _values(expanded, inputs)
    want0, want1 = threefry2x32(*inputs)  # the library, keys broadcast like the call's
    np.testing.assert_array_equal(y0, want0)
    np.testing.assert_array_equal(y1, want1)
    np.testing.assert_array_equal(bits, want0 ^ want1)
    _assert_identical([y0, y1, bits], _values(module, inputs), "interpreter's custom call")


# --- counted loops -------------------------------------------------------------------------


@dataclass
class CountedCase:
    module: Module
    inputs: list[np.ndarray]
    trips: int


@st.composite
def counted_loops(draw: Callable[..., object]) -> CountedCase:
    """A loop whose counter starts, steps and stops in every way unrolling recognises; the body
    uses the counter's value, so running an iteration too many or too few shows."""
    start = draw(st.integers(-6, 6))
    step = draw(st.sampled_from([-3, -2, -1, 1, 2, 3]))
    bound = draw(st.integers(-13, 13))
    direction = draw(st.sampled_from(["LT", "LE", "GT", "GE", "NE"]))
    trips = trip_count(start, step, direction, bound)  # type: ignore[arg-type]
    assume(trips is not None and trips <= 12)
    assert isinstance(trips, int)
    constant_first = draw(st.booleans())
    use_subtract = draw(st.booleans())
    names = NameUniquer()
    state = Shape.tuple_of([Shape.scalar(DType.S32), Shape.array(DType.F32, (3,))])

    body = ComputationBuilder("body", names)
    p = body.parameter(0, state)
    i = body.add(Op.GET_TUPLE_ELEMENT, [p], attrs={"index": 0})
    x = body.add(Op.GET_TUPLE_ELEMENT, [p], attrs={"index": 1})
    fi = body.add(Op.BROADCAST, [body.add(Op.CONVERT, [i], shape=Shape.scalar(DType.F32))],
                  attrs={"dimensions": ()}, shape=x.shape)
    half = body.add(Op.BROADCAST, [body.constant(0.5, DType.F32)], attrs={"dimensions": ()},
                    shape=x.shape)
    nx = body.add(Op.ADD, [body.add(Op.MULTIPLY, [x, half]), fi])
    if use_subtract:
        ni = body.add(Op.SUBTRACT, [i, body.constant(-step, DType.S32)])
    else:
        ni = body.add(Op.ADD, [body.constant(step, DType.S32), i])
    body.add(Op.TUPLE, [ni, nx])

    cond = ComputationBuilder("cond", names)
    cp = cond.parameter(0, state)
    ci = cond.add(Op.GET_TUPLE_ELEMENT, [cp], attrs={"index": 0})
    n = cond.constant(bound, DType.S32)
    flipped = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "NE": "NE"}
    if constant_first:
        cond.add(Op.COMPARE, [n, ci], attrs={"direction": flipped[direction]})
    else:
        cond.add(Op.COMPARE, [ci, n], attrs={"direction": direction})

    main = ComputationBuilder("main", names)
    x0 = main.parameter(0, Shape.array(DType.F32, (3,)))
    init = main.add(Op.TUPLE, [main.constant(start, DType.S32), x0])
    main.add(Op.WHILE, [init], calls=[cond.build(), body.build()])
    inputs = [np.array([1.0, -2.0, 0.25], np.float32)]
    return CountedCase(make_module("counted", main.build()), inputs, trips)


@settings(max_examples=60, deadline=None)
@given(counted_loops(), st.integers(2, 5))
def test_unrolled_counted_loops_run_every_iteration(case: CountedCase, factor: int) -> None:
    reference = _values(case.module, case.inputs)
    unrolled, changed = Pipeline([LoopUnroll(factor=factor), *TIDY]).run(case.module)
    assert changed
    loops = [i for i in unrolled.all_instructions() if i.op is Op.WHILE]
    assert len(loops) == (1 if case.trips // factor >= 2 else 0)
    _assert_identical(_values(unrolled, case.inputs), reference, f"factor {factor}")


# --- packed loop state ---------------------------------------------------------------------


def _reducer(names: NameUniquer, op: Op, dtype: DType) -> Computation:
    b = ComputationBuilder(f"{op.text}_{dtype.text}", names)
    lhs = b.parameter(0, Shape.scalar(dtype))
    rhs = b.parameter(1, Shape.scalar(dtype))
    b.add(op, [lhs, rhs])
    return b.build()


def _or_reducer(names: NameUniquer) -> Computation:
    return _reducer(names, Op.OR, DType.PRED)


@st.composite
def packed_loops(draw: Callable[..., object]) -> tuple[Module, list[np.ndarray]]:
    """A loop carrying an (n, total) array packed from pieces along dimension 1 each step,
    read through slices inside the pieces (in the body, and maybe in the condition); optionally
    the step is a select over the packed value (as CartPole's reset), and the packed result is
    used whole or sliced."""
    n = draw(st.integers(1, 3))
    sizes = draw(st.lists(st.integers(1, 3), min_size=2, max_size=4))
    assert isinstance(sizes, list)
    total = sum(sizes)
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    use_select, slice_result = draw(st.booleans()), draw(st.booleans())
    any_test = draw(st.booleans())  # the reset decided by any(|packed| > bounds) per row
    names = NameUniquer()
    packed_shape = Shape.array(DType.F32, (n, total))
    state = Shape.tuple_of([Shape.scalar(DType.S32), packed_shape])

    body = ComputationBuilder("body", names)
    p = body.parameter(0, state)
    i = body.add(Op.GET_TUPLE_ELEMENT, [p], attrs={"index": 0})
    s = body.add(Op.GET_TUPLE_ELEMENT, [p], attrs={"index": 1})
    pieces = []
    for j, (offset, size) in enumerate(zip(offsets, sizes)):
        part = body.add(Op.SLICE, [s], attrs={"slice": (SliceDim(0, n),
                                                        SliceDim(offset, offset + size))})
        first = body.add(Op.SLICE, [s], attrs={"slice": (SliceDim(0, n),
                                                         SliceDim(offset, offset + 1))})
        widened = body.add(Op.BROADCAST, [body.add(Op.RESHAPE, [first],
                                                   shape=Shape.array(DType.F32, (n,)))],
                           attrs={"dimensions": (0,)}, shape=part.shape)
        scale = body.add(Op.BROADCAST, [body.constant(0.5 + j, DType.F32)],
                         attrs={"dimensions": ()}, shape=part.shape)
        pieces.append(body.add(Op.ADD, [body.add(Op.MULTIPLY, [part, scale]), widened]))
    packed = body.add(Op.CONCATENATE, pieces, attrs={"dimensions": (1,)})
    if use_select and any_test:
        bounds = draw(st.lists(st.sampled_from([0.5, 1.5, np.inf]), min_size=total,
                               max_size=total))
        row = body.add(Op.BROADCAST, [body.constant(bounds, DType.F32)],
                       attrs={"dimensions": (1,)}, shape=packed_shape)
        over = body.add(Op.COMPARE, [body.add(Op.ABS, [packed]), row],
                        attrs={"direction": "GT"})
        done = body.add(Op.REDUCE, [over, body.constant(False, DType.PRED)],
                        attrs={"dimensions": (1,)}, calls=[_or_reducer(names)])
        odd = body.add(Op.BROADCAST, [done], attrs={"dimensions": (0,)},
                       shape=Shape.array(DType.PRED, (n, total)))
    elif use_select:
        fi = body.add(Op.CONVERT, [i], shape=Shape.scalar(DType.F32))
        odd = body.add(Op.COMPARE, [body.add(Op.BROADCAST, [fi], attrs={"dimensions": ()},
                                             shape=packed_shape), packed],
                       attrs={"direction": "GT"})
    if use_select:
        reset = body.add(Op.BROADCAST, [body.constant(-1.0, DType.F32)],
                         attrs={"dimensions": ()}, shape=packed_shape)
        packed = body.add(Op.SELECT, [odd, reset, packed])
    ni = body.add(Op.ADD, [i, body.constant(1, DType.S32)])
    body.add(Op.TUPLE, [ni, packed])

    cond = ComputationBuilder("cond", names)
    cp = cond.parameter(0, state)
    ci = cond.add(Op.GET_TUPLE_ELEMENT, [cp], attrs={"index": 0})
    more = cond.add(Op.COMPARE, [ci, cond.constant(draw(st.integers(0, 4)), DType.S32)],
                    attrs={"direction": "LT"})
    if draw(st.booleans()):  # the condition also reads one element of the last piece
        cs = cond.add(Op.GET_TUPLE_ELEMENT, [cp], attrs={"index": 1})
        corner = cond.add(Op.SLICE, [cs], attrs={"slice": (SliceDim(0, 1),
                                                           SliceDim(total - 1, total))})
        value = cond.add(Op.RESHAPE, [corner], shape=Shape.scalar(DType.F32))
        small = cond.add(Op.COMPARE, [value, cond.constant(50.0, DType.F32)],
                         attrs={"direction": "LT"})
        cond.add(Op.AND, [more, small])

    main = ComputationBuilder("main", names)
    s0 = main.parameter(0, packed_shape)
    loop = main.add(Op.WHILE, [main.add(Op.TUPLE, [main.constant(0, DType.S32), s0])],
                    calls=[cond.build(), body.build()])
    result = main.add(Op.GET_TUPLE_ELEMENT, [loop], attrs={"index": 1})
    if slice_result:
        result = main.add(Op.SLICE, [result], attrs={"slice": (SliceDim(0, n),
                                                               SliceDim(1, total))})
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))  # type: ignore[arg-type]
    inputs = [rng.uniform(-2, 2, (n, total)).astype(np.float32)]
    return make_module("packed", main.build(result)), inputs


@settings(max_examples=40, deadline=None)
@given(packed_loops())
def test_packed_loop_state_is_split_and_keeps_results(
        case: tuple[Module, list[np.ndarray]]) -> None:
    module, inputs = case
    reference = _values(module, inputs)
    split, _ = Pipeline([ConcatForwarding(), ScalarizeState(), *TIDY]).run(module)
    loop = next(i for i in split.all_instructions() if i.op is Op.WHILE)
    assert len(loop.shape.elements) > 2  # the packed element became one per piece
    body = loop.calls[1]
    assert not any(i.op is Op.CONCATENATE for i in body.instructions)
    _assert_identical(_values(split, inputs), reference, "split state")


# --- reductions of packed arrays -----------------------------------------------------------

# (reducer op, element type, whether partial results regroup exactly)
_REDUCERS = [(Op.OR, DType.PRED, True), (Op.AND, DType.PRED, True),
             (Op.MAXIMUM, DType.F32, True), (Op.MINIMUM, DType.F32, True),
             (Op.ADD, DType.S32, True), (Op.MULTIPLY, DType.S32, True),
             (Op.XOR, DType.S32, True), (Op.MAXIMUM, DType.S32, True),
             (Op.ADD, DType.F32, False), (Op.MULTIPLY, DType.F32, False)]
_SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 2.5, -2.5, 1e-30], np.float32)


@dataclass
class PackedReduction:
    module: Module
    inputs: list[np.ndarray]
    splits: bool  # whether concat-forwarding should do the reduce per piece


@st.composite
def packed_reductions(draw: Callable[..., object]) -> PackedReduction:
    """A reduce of an (n, total) concatenate of pieces (some of them reshaped (n,) columns),
    through element-wise work: |packed| compared with a row of bounds (inf among them) for
    the boolean reducers, a conversion to s32 for the integer ones. The reduce runs over the
    packed dimension (and maybe the other one), with the identity or another init value; the
    inputs hold NaN, the infinities and both zeros."""
    op, dtype, exact = draw(st.sampled_from(_REDUCERS))  # type: ignore[misc]
    n = draw(st.integers(1, 3))
    sizes = draw(st.lists(st.integers(1, 3), min_size=2, max_size=4))
    assert isinstance(sizes, list)
    if draw(st.booleans()):  # columns only, as CartPole's state: every piece read as it is
        sizes = [1] * len(sizes)
    total = sum(sizes)
    names = NameUniquer()
    b = ComputationBuilder("main", names)
    pieces, inputs = [], []
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))  # type: ignore[arg-type]
    for j, size in enumerate(sizes):
        column = size == 1 and draw(st.booleans())
        dims = (n,) if column else (n, size)
        piece = b.parameter(j, Shape.array(DType.F32, dims))
        if column:
            piece = b.add(Op.RESHAPE, [piece], shape=Shape.array(DType.F32, (n, 1)))
        pieces.append(piece)
        inputs.append(np.where(rng.random(dims) < 0.5, rng.choice(_SPECIALS, dims),
                               rng.uniform(-3, 3, dims)).astype(np.float32))
    packed = b.add(Op.CONCATENATE, pieces, attrs={"dimensions": (1,)})
    shape = Shape.array(DType.F32, (n, total))
    value = b.add(Op.ABS, [packed]) if draw(st.booleans()) else packed
    if dtype is DType.PRED:
        bounds = draw(st.lists(st.sampled_from([0.5, 2.0, np.inf, -np.inf]), min_size=total,
                               max_size=total))
        row = b.add(Op.BROADCAST, [b.constant(bounds, DType.F32)], attrs={"dimensions": (1,)},
                    shape=shape)
        value = b.add(Op.COMPARE, [value, row],
                      attrs={"direction": draw(st.sampled_from(["GT", "LT", "GE"]))})
    elif dtype is DType.S32:
        finite = b.add(Op.CLAMP, [b.constant(-1e6, DType.F32), value,
                                  b.constant(1e6, DType.F32)])
        value = b.add(Op.CONVERT, [finite], shape=Shape.array(DType.S32, (n, total)))
    identity = {Op.OR: False, Op.AND: True, Op.ADD: 0, Op.MULTIPLY: 1, Op.XOR: 0,
                Op.MAXIMUM: -np.inf if dtype is DType.F32 else np.iinfo(np.int32).min,
                Op.MINIMUM: np.inf}[op]
    init = identity if draw(st.booleans()) else draw(st.sampled_from([True, 3, 0.5]))
    dims = draw(st.sampled_from([(1,), (0, 1), (0,)]))
    out = tuple(d for i, d in enumerate((n, total)) if i not in dims)
    b.add(Op.REDUCE, [value, b.constant(init, dtype)], attrs={"dimensions": dims},
          calls=[_reducer(names, op, dtype)], shape=Shape.array(dtype, out))
    idempotent = op in (Op.OR, Op.AND, Op.MAXIMUM, Op.MINIMUM)
    same_init = bool(np.asarray(init, dtype.numpy) == np.asarray(identity, dtype.numpy))
    splits = exact and 1 in dims and (idempotent or same_init)
    return PackedReduction(make_module("packed_reduction", b.build()), inputs, splits)


@settings(max_examples=60, deadline=None)
@given(packed_reductions())
def test_reductions_of_packed_arrays_split_exactly(case: PackedReduction) -> None:
    """concat-forwarding splits exactly the reductions it may, bit for bit (NaN, infinities
    and signed zeros included), and logs a refusal for the others."""
    log = DecisionLog()
    reference = _values(case.module, case.inputs)
    rewritten, _ = Pipeline([ConcatForwarding(), *TIDY], debug=True, log=log).run(case.module)
    rules = {r.rule for r in log.records if r.pass_name == "concat-forwarding"}
    assert ("reduce-split" in rules) == case.splits, rules
    if not case.splits:
        assert rules & {"reducer-not-exact", "init-not-identity", "reduce-keeps-pieces"}
    _assert_identical(_values(rewritten, case.inputs), reference, "reduce per piece")
