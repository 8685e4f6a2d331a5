"""THE op table: every HLO opcode hlofuse knows, defined once, read by every layer."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hlofuse.ir import elementwise_ref as ref
from hlofuse.ir import shape_inference as si


class OpKind(enum.Enum):
    """Fusibility class of an opcode."""

    __hash__ = object.__hash__  # identity, in C: see Op

    ELEMENTWISE = "elementwise"  # out[i] = f(a[i], b[i], ...)
    INJECTIVE = "injective"  # moves or duplicates elements: broadcast, slice, transpose, ...
    REDUCTION = "reduction"  # reduce, reduce-window
    LEAF = "leaf"  # parameter, constant, iota
    TUPLE = "tuple"  # tuple, get-tuple-element
    OPAQUE = "opaque"  # dot, custom-call, rng-bit-generator: library calls
    CONTROL = "control"  # while, conditional, call, fusion: call other computations


class AttrType(enum.Enum):
    INT = "int"  # index=0
    INTS = "ints"  # dimensions={1,0}
    STRING = "string"  # custom_call_target="foo"
    ENUM = "enum"  # direction=LT, kind=kLoop
    BOOL = "bool"  # custom_call_has_side_effect=true
    SLICE = "slice"  # slice={[0:2], [1:3:2]}
    PADDING = "padding"  # padding=0_1x2_3_1
    WINDOW = "window"  # window={size=2x2 stride=2x2}


@dataclass(frozen=True, slots=True)
class AttrSpec:
    type: AttrType
    required: bool = True
    choices: tuple[str, ...] = ()  # for ENUM


InferFn = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class OpDef:
    """Everything hlofuse knows about one opcode."""

    name: str  # XLA's opcode spelling
    kind: OpKind
    arity: int | None  # None: variadic
    infer: InferFn
    attrs: Mapping[str, AttrSpec] = field(default_factory=dict)
    # Attribute names that name called computations, in `Instruction.calls` order. A name ending
    # in "*" is a list: branch_computations={a, b}.
    call_attrs: tuple[str, ...] = ()
    expensive: bool = False  # XLA's generic InstructionFusion::IsExpensive
    numpy: Callable[..., Any] | None = None  # reference for elementwise rows
    c: str | None = None  # C expression template over operand expressions {0}, {1}, ...
    min_arity: int = 0  # for variadic ops
    has_side_effect: bool = False
    result_dtype_declared: bool = False  # convert and friends take their type from the text


class Op(enum.Enum):
    # Members are singletons compared by identity: hash them so too, in C (Enum's __hash__
    # hashes the name in Python, and ops are dict and set keys on every hot path).
    __hash__ = object.__hash__

    ABS = "abs"
    ADD = "add"
    AFTER_ALL = "after-all"
    AND = "and"
    ATAN2 = "atan2"
    BITCAST = "bitcast"
    BITCAST_CONVERT = "bitcast-convert"
    BROADCAST = "broadcast"
    CALL = "call"
    CBRT = "cbrt"
    CEIL = "ceil"
    CLAMP = "clamp"
    CLZ = "count-leading-zeros"
    COMPARE = "compare"
    CONCATENATE = "concatenate"
    CONDITIONAL = "conditional"
    CONSTANT = "constant"
    CONVERT = "convert"
    COPY = "copy"
    COSINE = "cosine"
    CUSTOM_CALL = "custom-call"
    DIVIDE = "divide"
    DOT = "dot"
    DYNAMIC_SLICE = "dynamic-slice"
    DYNAMIC_UPDATE_SLICE = "dynamic-update-slice"
    ERF = "erf"
    EXPONENTIAL = "exponential"
    EXPONENTIAL_MINUS_ONE = "exponential-minus-one"
    FLOOR = "floor"
    FUSION = "fusion"
    GET_TUPLE_ELEMENT = "get-tuple-element"
    IOTA = "iota"
    IS_FINITE = "is-finite"
    LOG = "log"
    LOG_PLUS_ONE = "log-plus-one"
    LOGISTIC = "logistic"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    MULTIPLY = "multiply"
    NEGATE = "negate"
    NOT = "not"
    OPT_BARRIER = "opt-barrier"
    OR = "or"
    PAD = "pad"
    PARAMETER = "parameter"
    POPCNT = "popcnt"
    POWER = "power"
    REDUCE = "reduce"
    REDUCE_WINDOW = "reduce-window"
    REMAINDER = "remainder"
    RESHAPE = "reshape"
    REVERSE = "reverse"
    RNG_BIT_GENERATOR = "rng-bit-generator"
    ROUND_NEAREST_AFZ = "round-nearest-afz"
    ROUND_NEAREST_EVEN = "round-nearest-even"
    RSQRT = "rsqrt"
    SELECT = "select"
    SHIFT_LEFT = "shift-left"
    SHIFT_RIGHT_ARITHMETIC = "shift-right-arithmetic"
    SHIFT_RIGHT_LOGICAL = "shift-right-logical"
    SIGN = "sign"
    SINE = "sine"
    SLICE = "slice"
    SQRT = "sqrt"
    SUBTRACT = "subtract"
    TAN = "tan"
    TANH = "tanh"
    TRANSPOSE = "transpose"
    TUPLE = "tuple"
    WHILE = "while"
    XOR = "xor"

    @property
    def text(self) -> str:
        return self._value_  # not `.value`: Enum's descriptor costs more, on a very hot path

    @property
    def definition(self) -> OpDef:
        return OP_TABLE[self]


E = OpKind.ELEMENTWISE
_INTS = AttrSpec(AttrType.INTS)
_OPTIONAL_INTS = AttrSpec(AttrType.INTS, required=False)
_FUSION_KINDS = ("kLoop", "kInput", "kOutput", "kCustom")
_RNG_ALGORITHMS = ("rng_default", "rng_three_fry", "rng_philox")


def _unary(name: str, infer: InferFn, numpy: Callable[..., Any], c: str | None,
           expensive: bool = False) -> OpDef:
    return OpDef(name, E, 1, infer, expensive=expensive, numpy=numpy, c=c)


def _binary(name: str, infer: InferFn, numpy: Callable[..., Any], c: str | None,
            expensive: bool = False) -> OpDef:
    return OpDef(name, E, 2, infer, expensive=expensive, numpy=numpy, c=c)


OP_TABLE: dict[Op, OpDef] = {
    Op.ABS: _unary("abs", si.elementwise_numeric, ref.abs_, None),
    Op.ADD: _binary("add", si.elementwise, ref.add, "({0} + {1})"),
    Op.AFTER_ALL: OpDef("after-all", OpKind.LEAF, None, si.after_all),
    Op.AND: _binary("and", si.elementwise_int_or_pred, ref.and_, "({0} & {1})"),
    Op.ATAN2: _binary("atan2", si.elementwise_float, ref.atan2, None, expensive=True),
    Op.BITCAST: OpDef("bitcast", OpKind.INJECTIVE, 1, si.reshape),
    Op.BITCAST_CONVERT: OpDef("bitcast-convert", E, 1, si.bitcast_convert,
                              numpy=ref.bitcast_convert, result_dtype_declared=True),
    Op.BROADCAST: OpDef("broadcast", OpKind.INJECTIVE, 1, si.broadcast,
                        attrs={"dimensions": _INTS}),
    Op.CALL: OpDef("call", OpKind.CONTROL, None, si.call, call_attrs=("to_apply",)),
    Op.CBRT: _unary("cbrt", si.elementwise_float, ref.cbrt, None, expensive=True),
    Op.CEIL: _unary("ceil", si.elementwise_float, ref.ceil, None),
    Op.CLAMP: OpDef("clamp", E, 3, si.clamp, numpy=ref.clamp),
    Op.CLZ: _unary("count-leading-zeros", si.elementwise_int, ref.count_leading_zeros, None),
    Op.COMPARE: OpDef("compare", E, 2, si.compare, numpy=ref.compare, attrs={
        "direction": AttrSpec(AttrType.ENUM, choices=si.COMPARE_DIRECTIONS),
        "type": AttrSpec(AttrType.ENUM, required=False, choices=si.COMPARE_TYPES),
    }),
    Op.CONCATENATE: OpDef("concatenate", OpKind.INJECTIVE, None, si.concatenate, min_arity=1,
                          attrs={"dimensions": _INTS}),
    Op.CONDITIONAL: OpDef("conditional", OpKind.CONTROL, None, si.conditional, min_arity=2,
                          call_attrs=("branch_computations*",)),
    Op.CONSTANT: OpDef("constant", OpKind.LEAF, 0, si.constant),
    Op.CONVERT: OpDef("convert", E, 1, si.convert, numpy=ref.convert,
                      result_dtype_declared=True),
    Op.COPY: OpDef("copy", OpKind.INJECTIVE, 1, si.copy),
    # XLA's IsExpensive: cosine, sine and tan are cheap for real element types.
    Op.COSINE: _unary("cosine", si.elementwise_float, ref.cosine, "cos({0})"),
    Op.CUSTOM_CALL: OpDef("custom-call", OpKind.OPAQUE, None, si.declared_array, attrs={
        "custom_call_target": AttrSpec(AttrType.STRING),
        "custom_call_has_side_effect": AttrSpec(AttrType.BOOL, required=False),
    }, expensive=True),
    Op.DIVIDE: _binary("divide", si.elementwise_numeric, ref.divide, None, expensive=True),
    Op.DOT: OpDef("dot", OpKind.OPAQUE, 2, si.dot, expensive=True, attrs={  # in XLA's print order
        "lhs_batch_dims": _OPTIONAL_INTS,
        "lhs_contracting_dims": _OPTIONAL_INTS,
        "rhs_batch_dims": _OPTIONAL_INTS,
        "rhs_contracting_dims": _OPTIONAL_INTS,
    }),
    Op.DYNAMIC_SLICE: OpDef("dynamic-slice", OpKind.INJECTIVE, None, si.dynamic_slice,
                            min_arity=1, attrs={"dynamic_slice_sizes": _INTS}),
    Op.DYNAMIC_UPDATE_SLICE: OpDef("dynamic-update-slice", OpKind.INJECTIVE, None,
                                   si.dynamic_update_slice, min_arity=2),
    Op.ERF: _unary("erf", si.elementwise_float, ref.erf, None, expensive=True),
    Op.EXPONENTIAL: _unary("exponential", si.elementwise_float, ref.exponential, "exp({0})",
                           expensive=True),
    Op.EXPONENTIAL_MINUS_ONE: _unary("exponential-minus-one", si.elementwise_float,
                                     ref.exponential_minus_one, "expm1({0})", expensive=True),
    Op.FLOOR: _unary("floor", si.elementwise_float, ref.floor, "floor({0})"),
    Op.FUSION: OpDef("fusion", OpKind.CONTROL, None, si.call, call_attrs=("calls",), attrs={
        "kind": AttrSpec(AttrType.ENUM, choices=_FUSION_KINDS),
    }),
    Op.GET_TUPLE_ELEMENT: OpDef("get-tuple-element", OpKind.TUPLE, 1, si.get_tuple_element,
                                attrs={"index": AttrSpec(AttrType.INT)}),
    Op.IOTA: OpDef("iota", OpKind.LEAF, 0, si.iota,
                   attrs={"iota_dimension": AttrSpec(AttrType.INT)}),
    Op.IS_FINITE: _unary("is-finite", si.is_finite, ref.is_finite, None),
    Op.LOG: _unary("log", si.elementwise_float, ref.log, "log({0})", expensive=True),
    Op.LOG_PLUS_ONE: _unary("log-plus-one", si.elementwise_float, ref.log_plus_one,
                            "log1p({0})", expensive=True),
    Op.LOGISTIC: _unary("logistic", si.elementwise_float, ref.logistic, None, expensive=True),
    Op.MAXIMUM: _binary("maximum", si.elementwise, ref.maximum, None),
    Op.MINIMUM: _binary("minimum", si.elementwise, ref.minimum, None),
    Op.MULTIPLY: _binary("multiply", si.elementwise, ref.multiply, "({0} * {1})"),
    Op.NEGATE: _unary("negate", si.elementwise_numeric, ref.negate, "(-{0})"),
    Op.NOT: _unary("not", si.elementwise_int_or_pred, ref.not_, None),
    Op.OPT_BARRIER: OpDef("opt-barrier", OpKind.TUPLE, 1, si.opt_barrier),
    Op.OR: _binary("or", si.elementwise_int_or_pred, ref.or_, "({0} | {1})"),
    Op.PAD: OpDef("pad", OpKind.INJECTIVE, 2, si.pad,
                  attrs={"padding": AttrSpec(AttrType.PADDING)}),
    Op.PARAMETER: OpDef("parameter", OpKind.LEAF, 0, si.declared_array),
    Op.POPCNT: _unary("popcnt", si.elementwise_int, ref.popcnt, None),
    Op.POWER: _binary("power", si.elementwise_numeric, ref.power, None, expensive=True),
    Op.REDUCE: OpDef("reduce", OpKind.REDUCTION, None, si.reduce, min_arity=2,
                     attrs={"dimensions": _INTS}, call_attrs=("to_apply",)),
    Op.REDUCE_WINDOW: OpDef("reduce-window", OpKind.REDUCTION, None, si.reduce_window,
                            min_arity=2, attrs={"window": AttrSpec(AttrType.WINDOW)},
                            call_attrs=("to_apply",)),
    Op.REMAINDER: _binary("remainder", si.elementwise_numeric, ref.remainder, None,
                          expensive=True),
    Op.RESHAPE: OpDef("reshape", OpKind.INJECTIVE, 1, si.reshape),
    Op.REVERSE: OpDef("reverse", OpKind.INJECTIVE, 1, si.reverse, attrs={"dimensions": _INTS}),
    Op.RNG_BIT_GENERATOR: OpDef("rng-bit-generator", OpKind.OPAQUE, 1, si.rng_bit_generator,
                                attrs={"algorithm": AttrSpec(AttrType.ENUM, required=False,
                                                             choices=_RNG_ALGORITHMS)},
                                expensive=True),
    Op.ROUND_NEAREST_AFZ: _unary("round-nearest-afz", si.elementwise_float,
                                 ref.round_nearest_afz, None),
    Op.ROUND_NEAREST_EVEN: _unary("round-nearest-even", si.elementwise_float,
                                  ref.round_nearest_even, None),
    Op.RSQRT: _unary("rsqrt", si.elementwise_float, ref.rsqrt, None, expensive=True),
    Op.SELECT: OpDef("select", E, 3, si.select, numpy=ref.select, c="({0} ? {1} : {2})"),
    Op.SHIFT_LEFT: _binary("shift-left", si.elementwise_int, ref.shift_left, None),
    Op.SHIFT_RIGHT_ARITHMETIC: _binary("shift-right-arithmetic", si.elementwise_int,
                                       ref.shift_right_arithmetic, None),
    Op.SHIFT_RIGHT_LOGICAL: _binary("shift-right-logical", si.elementwise_int,
                                    ref.shift_right_logical, None),
    Op.SIGN: _unary("sign", si.elementwise_numeric, ref.sign, None),
    Op.SINE: _unary("sine", si.elementwise_float, ref.sine, "sin({0})"),
    Op.SLICE: OpDef("slice", OpKind.INJECTIVE, 1, si.slice_,
                    attrs={"slice": AttrSpec(AttrType.SLICE)}),
    Op.SQRT: _unary("sqrt", si.elementwise_float, ref.sqrt, "sqrt({0})", expensive=True),
    # XLA's shape inference refuses pred for subtract (but not for add/multiply/max/min).
    Op.SUBTRACT: _binary("subtract", si.elementwise_numeric, ref.subtract, "({0} - {1})"),
    Op.TAN: _unary("tan", si.elementwise_float, ref.tan, "tan({0})"),
    Op.TANH: _unary("tanh", si.elementwise_float, ref.tanh, "tanh({0})", expensive=True),
    Op.TRANSPOSE: OpDef("transpose", OpKind.INJECTIVE, 1, si.transpose,
                        attrs={"dimensions": _INTS}),
    Op.TUPLE: OpDef("tuple", OpKind.TUPLE, None, si.tuple_),
    Op.WHILE: OpDef("while", OpKind.CONTROL, 1, si.while_, call_attrs=("condition", "body")),
    Op.XOR: _binary("xor", si.elementwise_int_or_pred, ref.xor, "({0} ^ {1})"),
}

OP_BY_NAME: dict[str, Op] = {op.value: op for op in Op}

# Ops whose result shape must be written in the text because the operands don't determine it.
DECLARED_SHAPE_OPS = frozenset({Op.PARAMETER, Op.CONSTANT, Op.IOTA, Op.BROADCAST, Op.RESHAPE,
                                Op.BITCAST, Op.CUSTOM_CALL, Op.RNG_BIT_GENERATOR, Op.CONVERT,
                                Op.BITCAST_CONVERT, Op.DOT})

ELEMENTWISE_OPS = frozenset(op for op, d in OP_TABLE.items() if d.kind is OpKind.ELEMENTWISE)


def op_from_text(text: str) -> Op | None:
    return OP_BY_NAME.get(text)
