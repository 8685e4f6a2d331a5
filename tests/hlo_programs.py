"""Random HLO programs for property tests (hypothesis), shared by the pass and codegen tests.

`programs()` draws a `RandomProgram`: a verified module plus inputs for it. Programs mix
element-wise ops over several element types with broadcasts, reshapes, transposes, slices,
concatenations (some used several times), converts, compare/select, reductions (row and
column, some large enough for XLA's tiled emitter), iota, small constants, and small while
loops whose bodies do element-wise work; the root is a tuple of several values, so programs
have several outputs and multi-user instructions.

Values are kept small (at most 4 dimensions of up to 6 elements, or one long row for tiled
reductions) so the interpreter stays fast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from hlofuse.ir.attrs import SliceDim
from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction, Module, make_module
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape

DTYPES = (DType.F32, DType.F16, DType.S32, DType.U32, DType.S8, DType.PRED)

UNARY_FLOAT = (Op.NEGATE, Op.ABS, Op.EXPONENTIAL, Op.LOG, Op.SINE, Op.COSINE, Op.TANH, Op.SQRT,
               Op.FLOOR, Op.CEIL, Op.RSQRT, Op.LOGISTIC, Op.SIGN)
UNARY_INT = (Op.NEGATE, Op.ABS, Op.NOT, Op.POPCNT, Op.SIGN)
UNARY_PRED = (Op.NOT,)
BINARY_NUMERIC = (Op.ADD, Op.SUBTRACT, Op.MULTIPLY, Op.MAXIMUM, Op.MINIMUM)
BINARY_FLOAT = BINARY_NUMERIC + (Op.DIVIDE, Op.POWER, Op.ATAN2)
BINARY_INT = BINARY_NUMERIC + (Op.AND, Op.OR, Op.XOR, Op.SHIFT_LEFT, Op.SHIFT_RIGHT_LOGICAL,
                               Op.DIVIDE, Op.REMAINDER)
BINARY_PRED = (Op.AND, Op.OR, Op.XOR)


@dataclass
class RandomProgram:
    module: Module
    inputs: list[np.ndarray]

    def __repr__(self) -> str:  # hypothesis prints failing examples
        from hlofuse.ir.printer import module_text

        return "RandomProgram:\n" + module_text(self.module)


def unary_ops(dtype: DType) -> tuple[Op, ...]:
    if dtype.is_pred:
        return UNARY_PRED
    return UNARY_FLOAT if dtype.is_float else UNARY_INT


def binary_ops(dtype: DType) -> tuple[Op, ...]:
    if dtype.is_pred:
        return BINARY_PRED
    return BINARY_FLOAT if dtype.is_float else BINARY_INT


def random_input(shape: Shape, rng: np.random.Generator) -> np.ndarray:
    dtype = shape.dtype
    if dtype.is_pred:
        return rng.random(shape.dims) < 0.5
    if dtype.is_float:
        return rng.uniform(-3, 3, size=shape.dims).astype(dtype.numpy)
    low = 0 if dtype.is_unsigned_int else -20
    return rng.integers(low, 21, size=shape.dims).astype(dtype.numpy)


class _ProgramBuilder:
    """Draws one program instruction by instruction."""

    def __init__(self, draw: Callable[..., object]) -> None:
        self.draw = draw
        self.names = NameUniquer()
        self.b = ComputationBuilder("main", self.names)
        self.values: list[Instruction] = []
        self.reducers: dict[tuple[DType, Op], Computation] = {}
        self.loop_count = 0

    def pick(self, accept: Callable[[Instruction], bool] = lambda v: True) -> Instruction | None:
        choices = [v for v in self.values if v.shape.is_array and accept(v)]
        if not choices:
            return None
        return choices[self.draw(st.integers(0, len(choices) - 1))]  # type: ignore[index]

    def integers(self, lo: int, hi: int) -> int:
        value = self.draw(st.integers(lo, hi))
        assert isinstance(value, int)
        return value

    def choose(self, options: tuple[object, ...] | list[object]) -> object:
        return options[self.integers(0, len(options) - 1)]

    def add(self, inst: Instruction) -> None:
        self.values.append(inst)

    # --- operations -------------------------------------------------------------------

    def unary(self) -> None:
        x = self.pick()
        assert x is not None
        op = self.choose(unary_ops(x.dtype))
        assert isinstance(op, Op)
        self.add(self.b.add(op, [x]))

    def binary(self) -> None:
        x = self.pick()
        assert x is not None
        y = self.pick(lambda v: v.shape == x.shape) or x
        op = self.choose(binary_ops(x.dtype))
        assert isinstance(op, Op)
        self.add(self.b.add(op, [x, y]))

    def constant_binary(self) -> None:
        x = self.pick(lambda v: not v.dtype.is_pred)
        if x is None:
            return
        value = self.integers(1, 3)
        c = self.b.constant(value, x.dtype)
        scalar = self.b.add(Op.BROADCAST, [c], attrs={"dimensions": ()}, shape=x.shape)
        op = self.choose((Op.ADD, Op.MULTIPLY, Op.MAXIMUM))
        assert isinstance(op, Op)
        self.add(self.b.add(op, [x, scalar]))

    def broadcast(self) -> None:
        x = self.pick(lambda v: v.shape.rank < 3)
        if x is None:
            return
        extra = self.integers(1, 4)
        position = self.integers(0, x.shape.rank)
        dims = list(x.shape.dims)
        dims.insert(position, extra)
        mapping = tuple(d if d < position else d + 1 for d in range(x.shape.rank))
        self.add(self.b.add(Op.BROADCAST, [x], attrs={"dimensions": mapping},
                            shape=Shape.array(x.dtype, dims)))

    def reshape(self) -> None:
        x = self.pick(lambda v: v.shape.rank >= 1)
        if x is None:
            return
        n = x.shape.num_elements
        options = [(n,)] + [(a, n // a) for a in range(2, n) if n % a == 0]
        dims = self.choose(options)
        assert isinstance(dims, tuple)
        self.add(self.b.add(Op.RESHAPE, [x], shape=Shape.array(x.dtype, dims)))

    def transpose(self) -> None:
        x = self.pick(lambda v: v.shape.rank >= 2)
        if x is None:
            return
        perm = tuple(self.draw(st.permutations(range(x.shape.rank))))  # type: ignore[call-overload]
        self.add(self.b.add(Op.TRANSPOSE, [x], attrs={"dimensions": perm}))

    def slice(self) -> None:
        x = self.pick(lambda v: v.shape.rank >= 1)
        if x is None:
            return
        spec = []
        for d in x.shape.dims:
            start = self.integers(0, d - 1)
            limit = self.integers(start + 1, d)
            stride = self.integers(1, 2)
            spec.append(SliceDim(start, limit, stride))
        self.add(self.b.add(Op.SLICE, [x], attrs={"slice": tuple(spec)}))

    def concatenate(self) -> None:
        x = self.pick(lambda v: v.shape.rank >= 1)
        if x is None:
            return
        dim = self.integers(0, x.shape.rank - 1)

        def fits(v: Instruction) -> bool:
            return (v.dtype is x.dtype and v.shape.rank == x.shape.rank
                    and all(a == b for i, (a, b) in enumerate(zip(v.shape.dims, x.shape.dims))
                            if i != dim))

        y = self.pick(fits) or x
        self.add(self.b.add(Op.CONCATENATE, [x, y, x], attrs={"dimensions": (dim,)}))

    def convert(self) -> None:
        x = self.pick()
        assert x is not None
        target = self.choose(DTYPES)
        assert isinstance(target, DType)
        self.add(self.b.add(Op.CONVERT, [x], shape=x.shape.with_dtype(target)))

    def select(self) -> None:
        x = self.pick(lambda v: not v.dtype.is_pred)
        if x is None:
            return
        y = self.pick(lambda v: v.shape == x.shape) or x
        direction = self.choose(("LT", "GT", "EQ", "NE", "GE"))
        condition = self.b.add(Op.COMPARE, [x, y], attrs={"direction": direction})
        self.add(condition)
        self.add(self.b.add(Op.SELECT, [condition, y, x]))

    def reducer(self, dtype: DType, op: Op) -> Computation:
        key = (dtype, op)
        if key not in self.reducers:
            r = ComputationBuilder(f"reducer_{op.text}_{dtype.text}", self.names)
            a = r.parameter(0, Shape.scalar(dtype))
            b = r.parameter(1, Shape.scalar(dtype))
            r.add(op, [a, b])
            self.reducers[key] = r.build()
        return self.reducers[key]

    def reduce(self) -> None:
        x = self.pick(lambda v: v.shape.rank >= 1)
        if x is None:
            return
        drawn = self.draw(st.sets(st.integers(0, x.shape.rank - 1), min_size=1))
        assert isinstance(drawn, set)
        dims = tuple(sorted(drawn))
        op = Op.OR if x.dtype.is_pred else self.choose((Op.ADD, Op.MAXIMUM))
        assert isinstance(op, Op)
        init_value = 0 if op in (Op.ADD, Op.OR) else -100
        if x.dtype.is_unsigned_int and init_value < 0:
            init_value = 0
        init = self.b.constant(init_value, x.dtype)
        out = tuple(d for i, d in enumerate(x.shape.dims) if i not in dims)
        self.add(self.b.add(Op.REDUCE, [x, init], attrs={"dimensions": dims},
                            calls=[self.reducer(x.dtype, op)], shape=Shape.array(x.dtype, out)))

    def long_row_reduce(self) -> None:
        """A reduction long enough (>= 32 elements) for XLA's tiled (kInput) emitter."""
        x = self.pick(lambda v: v.dtype in (DType.F32, DType.S32) and v.shape.rank >= 1)
        if x is None:
            return
        width = 32 + self.integers(0, 8)
        wide = self.b.add(Op.BROADCAST, [x], attrs={"dimensions": tuple(range(x.shape.rank))},
                          shape=Shape.array(x.dtype, x.shape.dims + (width,)))
        scaled = self.b.add(Op.MULTIPLY, [wide, wide])
        init = self.b.constant(0, x.dtype)
        self.add(self.b.add(Op.REDUCE, [scaled, init], attrs={"dimensions": (x.shape.rank,)},
                            calls=[self.reducer(x.dtype, Op.ADD)], shape=x.shape))

    def iota(self) -> None:
        dims = (self.integers(1, 5), self.integers(1, 4))
        dtype = self.choose((DType.S32, DType.F32))
        assert isinstance(dtype, DType)
        self.add(self.b.add(Op.IOTA, attrs={"iota_dimension": self.integers(0, 1)},
                            shape=Shape.array(dtype, dims)))

    def while_loop(self) -> None:
        x = self.pick(lambda v: not v.dtype.is_pred)
        if x is None:
            return
        self.loop_count += 1
        n = self.loop_count
        counter_shape = Shape.scalar(DType.S32)
        state = Shape.tuple_of([counter_shape, x.shape])
        body = ComputationBuilder(f"loop_body.{n}", self.names)
        p = body.parameter(0, state)
        i = body.add(Op.GET_TUPLE_ELEMENT, [p], attrs={"index": 0})
        v = body.add(Op.GET_TUPLE_ELEMENT, [p], attrs={"index": 1})
        one = body.constant(1, DType.S32)
        i2 = body.add(Op.ADD, [i, one])
        op = self.choose(binary_ops(x.dtype)[:3])  # add, subtract, multiply: stay bounded
        assert isinstance(op, Op)
        v2 = body.add(op, [v, v])
        v3 = body.add(Op.MAXIMUM, [v2, v]) if not x.dtype.is_pred else v2
        body.add(Op.TUPLE, [i2, v3])
        cond = ComputationBuilder(f"loop_cond.{n}", self.names)
        cp = cond.parameter(0, state)
        ci = cond.add(Op.GET_TUPLE_ELEMENT, [cp], attrs={"index": 0})
        trips = cond.constant(self.integers(1, 3), DType.S32)
        cond.add(Op.COMPARE, [ci, trips], attrs={"direction": "LT"})
        zero = self.b.constant(0, DType.S32)
        init = self.b.add(Op.TUPLE, [zero, x])
        loop = self.b.add(Op.WHILE, [init], calls=[cond.build(), body.build()])
        self.add(self.b.add(Op.GET_TUPLE_ELEMENT, [loop], attrs={"index": 1}))

    OPERATIONS = ("unary", "binary", "binary", "constant_binary", "broadcast", "reshape",
                  "transpose", "slice", "concatenate", "convert", "select", "reduce",
                  "long_row_reduce", "iota", "while_loop")


@st.composite
def programs(draw: Callable[..., object], max_steps: int = 12,
             dtypes: tuple[DType, ...] = DTYPES) -> RandomProgram:
    """A random verified module and inputs for it."""
    p = _ProgramBuilder(draw)
    n_params = p.integers(1, 3)
    params = []
    for i in range(n_params):
        rank = p.integers(0, 3)
        dims = tuple(p.integers(1, 5) for _ in range(rank))
        dtype = draw(st.sampled_from(dtypes))
        assert isinstance(dtype, DType)
        params.append(p.b.parameter(i, Shape.array(dtype, dims)))
    p.values.extend(params)
    for _ in range(p.integers(2, max_steps)):
        name = draw(st.sampled_from(_ProgramBuilder.OPERATIONS))
        getattr(p, str(name))()
    arrays = [v for v in p.values if v.shape.is_array]
    count = p.integers(1, min(4, len(arrays)))
    outputs = arrays[-count:]
    root = p.b.add(Op.TUPLE, outputs) if count > 1 else outputs[0]
    module = make_module("random_program", p.b.build(root))
    seed = draw(st.integers(0, 2**31 - 1))
    assert isinstance(seed, int)
    rng = np.random.default_rng(seed)
    inputs = [random_input(param.shape, rng) for param in params]
    return RandomProgram(module, inputs)
