"""THE op table: every HLO opcode hlofuse knows, defined once, read by every layer."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hlofuse.ir import elementwise_ref as ref
from hlofuse.ir import linalg
from hlofuse.ir.shape_inference import (
    control_flow,
    data_movement,
    elementwise,
    indexing,
    leaves,
    reductions,
    sorting,
    windows,
)
from hlofuse.ir.shapes import Shape


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


class CostClass(enum.Enum):
    """What one element of the op costs a CPU, as the cost model counts it."""

    FREE = "free"  # index arithmetic or buffer naming only, folded into the loads
    CHEAP = "cheap"  # about one vector instruction
    DIVISION = "division"  # a divider instruction: divide, remainder, sqrt, rsqrt
    TRANSCENDENTAL = "transcendental"  # a libm call: exp, log, sin, tanh, ...
    TWO_TRANSCENDENTALS = "two-transcendentals"  # power: exp(y * log(x))


class SideEffect(enum.Enum):
    """Whether an op has side effects (XLA's HasSideEffectNoRecurse): such an instruction is
    never removed as dead, merged with an equal one, or fused."""

    NONE = "none"
    ALWAYS = "always"  # rng, send/recv, infeed/outfeed in XLA: none of them in this table yet
    DECLARED = "declared"  # custom-call: when custom_call_has_side_effect=true says so


class Fusibility(enum.Enum):
    """How XLA's fusion classifies an op (HloInstruction::IsFusible, gpu_fusible.cc's
    IsLoopFusible); `fusion/legality/properties.py` adds what depends on the instruction."""

    NEVER = "never"  # IsFusible is false: parameter and the ops that call computations
    ELEMENTWISE = "elementwise"  # loop-fusible whenever IsElementwise holds
    LOOP = "loop"  # the data movement IsLoopFusible lists: the loop emitter indexes it
    REDUCTION = "reduction"  # reduce: loop-fusible, or the hero of an input fusion
    OPAQUE = "opaque"  # fusible to IsFusible, but no loop emitter takes it alone


class FusionKind(enum.StrEnum):
    """A fusion's `kind` attribute: how XLA's emitters treat the fused computation. The value
    is the spelling in HLO text; members compare and hash as that string, so attributes
    parsed from text and kinds set by the fusion passes are interchangeable."""

    LOOP = "kLoop"  # element-wise and data movement: one loop over the output elements
    INPUT = "kInput"  # a reduction (with what feeds it) at the root
    OUTPUT = "kOutput"  # XLA's library-call fusions (dot + bias); hlofuse parses it only
    CUSTOM = "kCustom"  # its own emitter: the whole-loop kernel


class AttrType(enum.Enum):
    INT = "int"  # index=0
    INTS = "ints"  # dimensions={1,0}
    STRING = "string"  # custom_call_target="foo"
    ENUM = "enum"  # direction=LT, kind=kLoop
    BOOL = "bool"  # custom_call_has_side_effect=true
    SLICE = "slice"  # slice={[0:2], [1:3:2]}
    PADDING = "padding"  # padding=0_1x2_3_1
    WINDOW = "window"  # window={size=2x2 stride=2x2}
    DIM_LABELS = "dim_labels"  # dim_labels=b01f_01io->b01f (convolution)


@dataclass(frozen=True, slots=True)
class AttrSpec:
    type: AttrType
    required: bool = True
    choices: tuple[str, ...] = ()  # for ENUM


InferFn = Callable[..., Shape]


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
    # XLA's generic InstructionFusion::IsExpensive (divide and remainder also depend on the
    # operands: fusion/legality/properties.py).
    expensive: bool = False
    numpy: Callable[..., Any] | None = None  # reference for elementwise rows
    min_arity: int = 0  # for variadic ops
    side_effect: SideEffect = SideEffect.NONE
    cost: CostClass = CostClass.CHEAP  # per element, for the CPU cost model
    # None: ELEMENTWISE for element-wise rows, OPAQUE for the others.
    fusibility: Fusibility | None = None
    # Names, moves or forwards buffers without computing anything: launches no kernel.
    buffer_only: bool = False
    # The elemental emitter starts a new basic block for it, so values computed before it
    # cannot be reused after (XLA's ElementalIrEmitter::OpInvalidatesCache).
    invalidates_cache: bool = False

    def __post_init__(self) -> None:
        if self.fusibility is None:
            derived = (Fusibility.ELEMENTWISE if self.kind is OpKind.ELEMENTWISE
                       else Fusibility.OPAQUE)
            object.__setattr__(self, "fusibility", derived)

    @property
    def fusion_class(self) -> Fusibility:
        assert self.fusibility is not None  # set by __post_init__
        return self.fusibility


# The custom-call target of hlofuse's opaque Threefry call, spelled once for the front end,
# the interpreter, rng-expansion, the analyses and code generation.
THREEFRY_TARGET = "hlofuse_threefry2x32"


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
    CHOLESKY = "cholesky"
    CLAMP = "clamp"
    CLZ = "count-leading-zeros"
    COMPARE = "compare"
    CONCATENATE = "concatenate"
    CONDITIONAL = "conditional"
    CONSTANT = "constant"
    CONVERT = "convert"
    CONVOLUTION = "convolution"
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
    GATHER = "gather"
    GET_TUPLE_ELEMENT = "get-tuple-element"
    IOTA = "iota"
    IS_FINITE = "is-finite"
    LOG = "log"
    LOG_PLUS_ONE = "log-plus-one"
    LOGISTIC = "logistic"
    MAP = "map"
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
    REDUCE_PRECISION = "reduce-precision"
    REDUCE_WINDOW = "reduce-window"
    REMAINDER = "remainder"
    RESHAPE = "reshape"
    REVERSE = "reverse"
    RNG_BIT_GENERATOR = "rng-bit-generator"
    ROUND_NEAREST_AFZ = "round-nearest-afz"
    ROUND_NEAREST_EVEN = "round-nearest-even"
    RSQRT = "rsqrt"
    SCATTER = "scatter"
    SELECT = "select"
    SELECT_AND_SCATTER = "select-and-scatter"
    SHIFT_LEFT = "shift-left"
    SHIFT_RIGHT_ARITHMETIC = "shift-right-arithmetic"
    SHIFT_RIGHT_LOGICAL = "shift-right-logical"
    SIGN = "sign"
    SINE = "sine"
    SLICE = "slice"
    SORT = "sort"
    SQRT = "sqrt"
    SUBTRACT = "subtract"
    TAN = "tan"
    TANH = "tanh"
    TOPK = "topk"
    TRANSPOSE = "transpose"
    TRIANGULAR_SOLVE = "triangular-solve"
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
_FUSION_KINDS = tuple(kind.value for kind in FusionKind)
_RNG_ALGORITHMS = ("rng_default", "rng_three_fry", "rng_philox")


def _unary(name: str, infer: InferFn, numpy: Callable[..., Any], expensive: bool = False,
           cost: CostClass = CostClass.CHEAP) -> OpDef:
    return OpDef(name, E, 1, infer, expensive=expensive, numpy=numpy, cost=cost)


def _binary(name: str, infer: InferFn, numpy: Callable[..., Any], expensive: bool = False,
            cost: CostClass = CostClass.CHEAP) -> OpDef:
    return OpDef(name, E, 2, infer, expensive=expensive, numpy=numpy, cost=cost)


_FREE = CostClass.FREE
_LOOP = Fusibility.LOOP
_NEVER = Fusibility.NEVER
_DIVISION = CostClass.DIVISION
_TRANSCENDENTAL = CostClass.TRANSCENDENTAL


OP_TABLE: dict[Op, OpDef] = {
    Op.ABS: _unary("abs", elementwise.elementwise_numeric, ref.abs_),
    Op.ADD: _binary("add", elementwise.elementwise, ref.add),
    Op.AFTER_ALL: OpDef("after-all", OpKind.LEAF, None, leaves.after_all, expensive=True,
                        buffer_only=True),
    Op.AND: _binary("and", elementwise.elementwise_int_or_pred, ref.and_),
    Op.ATAN2: _binary("atan2", elementwise.elementwise_float, ref.atan2, expensive=True,
                       cost=_TRANSCENDENTAL),
    Op.BITCAST: OpDef("bitcast", OpKind.INJECTIVE, 1, data_movement.reshape, fusibility=_LOOP,
                      cost=_FREE, buffer_only=True),
    Op.BITCAST_CONVERT: OpDef("bitcast-convert", E, 1, elementwise.bitcast_convert,
                              numpy=ref.bitcast_convert),
    Op.BROADCAST: OpDef("broadcast", OpKind.INJECTIVE, 1, data_movement.broadcast, fusibility=_LOOP,
                        cost=_FREE,
                        attrs={"dimensions": _INTS}),
    Op.CALL: OpDef("call", OpKind.CONTROL, None, control_flow.call, expensive=True,
                   fusibility=_NEVER, call_attrs=("to_apply",)),
    Op.CBRT: _unary("cbrt", elementwise.elementwise_float, ref.cbrt, cost=_TRANSCENDENTAL,
                    expensive=True),
    Op.CEIL: _unary("ceil", elementwise.elementwise_float, ref.ceil),
    # Library calls to XLA, like dot: expensive, never loop- or input-fusible (ir/linalg.py).
    Op.CHOLESKY: OpDef("cholesky", OpKind.OPAQUE, 1, linalg.cholesky, expensive=True,
                       attrs={"lower": AttrSpec(AttrType.BOOL, required=False)}),
    Op.CLAMP: OpDef("clamp", E, 3, elementwise.clamp, numpy=ref.clamp),
    Op.CLZ: _unary("count-leading-zeros", elementwise.elementwise_int, ref.count_leading_zeros),
    Op.COMPARE: OpDef("compare", E, 2, elementwise.compare, numpy=ref.compare, attrs={
        "direction": AttrSpec(AttrType.ENUM, choices=elementwise.COMPARE_DIRECTIONS),
        "type": AttrSpec(AttrType.ENUM, required=False, choices=elementwise.COMPARE_TYPES),
    }),
    Op.CONCATENATE: OpDef("concatenate", OpKind.INJECTIVE, None, data_movement.concatenate,
                          invalidates_cache=True, fusibility=_LOOP,
                          min_arity=1,
                          attrs={"dimensions": _INTS}),
    Op.CONDITIONAL: OpDef("conditional", OpKind.CONTROL, None, control_flow.conditional,
                          expensive=True, fusibility=_NEVER,
                          min_arity=2,
                          call_attrs=("branch_computations*",)),
    Op.CONSTANT: OpDef("constant", OpKind.LEAF, 0, leaves.constant, fusibility=_LOOP, cost=_FREE,
                       buffer_only=True),
    Op.CONVERT: OpDef("convert", E, 1, elementwise.convert, numpy=ref.convert),
    Op.COPY: OpDef("copy", OpKind.INJECTIVE, 1, data_movement.copy, cost=_FREE),
    # XLA's IsExpensive: cosine, sine and tan are cheap for real element types.
    Op.COSINE: _unary("cosine", elementwise.elementwise_float, ref.cosine, cost=_TRANSCENDENTAL),
    Op.CUSTOM_CALL: OpDef("custom-call", OpKind.OPAQUE, None, linalg.custom_call_shape,
                          side_effect=SideEffect.DECLARED, attrs={
        "custom_call_target": AttrSpec(AttrType.STRING),
        "custom_call_has_side_effect": AttrSpec(AttrType.BOOL, required=False),
    }, expensive=True),
    Op.DIVIDE: _binary("divide", elementwise.elementwise_numeric, ref.divide, cost=_DIVISION,
                       expensive=True),
    Op.DOT: OpDef("dot", OpKind.OPAQUE, 2, reductions.dot, expensive=True,
                  invalidates_cache=True, attrs={
        # in XLA's print order
        "lhs_batch_dims": _OPTIONAL_INTS,
        "lhs_contracting_dims": _OPTIONAL_INTS,
        "rhs_batch_dims": _OPTIONAL_INTS,
        "rhs_contracting_dims": _OPTIONAL_INTS,
    }),
    Op.DYNAMIC_SLICE: OpDef("dynamic-slice", OpKind.INJECTIVE, None, data_movement.dynamic_slice,
                            fusibility=_LOOP,
                            min_arity=1, attrs={"dynamic_slice_sizes": _INTS}),
    Op.DYNAMIC_UPDATE_SLICE: OpDef("dynamic-update-slice", OpKind.INJECTIVE, None,
                                   data_movement.dynamic_update_slice, invalidates_cache=True,
                                   fusibility=_LOOP, min_arity=2),
    Op.ERF: _unary("erf", elementwise.elementwise_float, ref.erf, cost=_TRANSCENDENTAL,
                   expensive=True),
    Op.EXPONENTIAL: _unary("exponential", elementwise.elementwise_float, ref.exponential,
                           cost=_TRANSCENDENTAL,
                           expensive=True),
    Op.EXPONENTIAL_MINUS_ONE: _unary("exponential-minus-one", elementwise.elementwise_float,
                                     ref.exponential_minus_one, cost=_TRANSCENDENTAL,
                                     expensive=True),
    Op.FLOOR: _unary("floor", elementwise.elementwise_float, ref.floor),
    Op.FUSION: OpDef("fusion", OpKind.CONTROL, None, control_flow.call, expensive=True,
                     call_attrs=("calls",), attrs={
        "kind": AttrSpec(AttrType.ENUM, choices=_FUSION_KINDS),
    }),
    Op.GET_TUPLE_ELEMENT: OpDef("get-tuple-element", OpKind.TUPLE, 1,
                                control_flow.get_tuple_element, cost=_FREE, buffer_only=True,
                                attrs={"index": AttrSpec(AttrType.INT)}),
    Op.IOTA: OpDef("iota", OpKind.LEAF, 0, leaves.iota, fusibility=_LOOP,
                   attrs={"iota_dimension": AttrSpec(AttrType.INT)}),
    Op.IS_FINITE: _unary("is-finite", elementwise.is_finite, ref.is_finite),
    Op.LOG: _unary("log", elementwise.elementwise_float, ref.log, cost=_TRANSCENDENTAL,
                   expensive=True),
    Op.LOG_PLUS_ONE: _unary("log-plus-one", elementwise.elementwise_float, ref.log_plus_one,
                            cost=_TRANSCENDENTAL, expensive=True),
    Op.LOGISTIC: _unary("logistic", elementwise.elementwise_float, ref.logistic,
                        cost=_TRANSCENDENTAL, expensive=True),
    Op.MAXIMUM: _binary("maximum", elementwise.elementwise, ref.maximum),
    Op.MINIMUM: _binary("minimum", elementwise.elementwise, ref.minimum),
    Op.MULTIPLY: _binary("multiply", elementwise.elementwise, ref.multiply),
    Op.NEGATE: _unary("negate", elementwise.elementwise_numeric, ref.negate),
    Op.NOT: _unary("not", elementwise.elementwise_int_or_pred, ref.not_),
    Op.OPT_BARRIER: OpDef("opt-barrier", OpKind.TUPLE, 1, control_flow.opt_barrier,
                          buffer_only=True),
    Op.OR: _binary("or", elementwise.elementwise_int_or_pred, ref.or_),
    Op.PAD: OpDef("pad", OpKind.INJECTIVE, 2, data_movement.pad, invalidates_cache=True,
                  fusibility=_LOOP, attrs={"padding": AttrSpec(AttrType.PADDING)}),
    Op.PARAMETER: OpDef("parameter", OpKind.LEAF, 0, leaves.declared_array, expensive=True,
                        fusibility=_NEVER, cost=_FREE, buffer_only=True),
    Op.POPCNT: _unary("popcnt", elementwise.elementwise_int, ref.popcnt),
    Op.POWER: _binary("power", elementwise.elementwise_numeric, ref.power,
                      cost=CostClass.TWO_TRANSCENDENTALS, expensive=True),
    Op.REDUCE: OpDef("reduce", OpKind.REDUCTION, None, reductions.reduce, invalidates_cache=True,
                     expensive=True, fusibility=Fusibility.REDUCTION, min_arity=2,
                     attrs={"dimensions": _INTS}, call_attrs=("to_apply",)),
    Op.REDUCE_WINDOW: OpDef("reduce-window", OpKind.REDUCTION, None, reductions.reduce_window,
                            invalidates_cache=True, expensive=True,
                            fusibility=_LOOP,
                            min_arity=2, attrs={"window": AttrSpec(AttrType.WINDOW)},
                            call_attrs=("to_apply",)),
    Op.REMAINDER: _binary("remainder", elementwise.elementwise_numeric, ref.remainder,
                          cost=_DIVISION, expensive=True),
    Op.RESHAPE: OpDef("reshape", OpKind.INJECTIVE, 1, data_movement.reshape, fusibility=_LOOP,
                      cost=_FREE),
    Op.REVERSE: OpDef("reverse", OpKind.INJECTIVE, 1, data_movement.reverse, fusibility=_LOOP,
                      cost=_FREE, attrs={"dimensions": _INTS}),
    Op.RNG_BIT_GENERATOR: OpDef("rng-bit-generator", OpKind.OPAQUE, 1,
                                control_flow.rng_bit_generator,
                                attrs={"algorithm": AttrSpec(AttrType.ENUM, required=False,
                                                             choices=_RNG_ALGORITHMS)},
                                expensive=True),
    Op.ROUND_NEAREST_AFZ: _unary("round-nearest-afz", elementwise.elementwise_float,
                                 ref.round_nearest_afz),
    Op.ROUND_NEAREST_EVEN: _unary("round-nearest-even", elementwise.elementwise_float,
                                  ref.round_nearest_even),
    Op.RSQRT: _unary("rsqrt", elementwise.elementwise_float, ref.rsqrt, cost=_DIVISION,
                     expensive=True),
    Op.SELECT: OpDef("select", E, 3, elementwise.select, numpy=ref.select),
    Op.SHIFT_LEFT: _binary("shift-left", elementwise.elementwise_int, ref.shift_left),
    Op.SHIFT_RIGHT_ARITHMETIC: _binary("shift-right-arithmetic", elementwise.elementwise_int,
                                       ref.shift_right_arithmetic),
    Op.SHIFT_RIGHT_LOGICAL: _binary("shift-right-logical", elementwise.elementwise_int,
                                    ref.shift_right_logical),
    Op.SIGN: _unary("sign", elementwise.elementwise_numeric, ref.sign),
    Op.SINE: _unary("sine", elementwise.elementwise_float, ref.sine, cost=_TRANSCENDENTAL),
    Op.SLICE: OpDef("slice", OpKind.INJECTIVE, 1, data_movement.slice_, fusibility=_LOOP,
                    cost=_FREE, attrs={"slice": AttrSpec(AttrType.SLICE)}),
    Op.SQRT: _unary("sqrt", elementwise.elementwise_float, ref.sqrt, cost=_DIVISION,
                    expensive=True),
    # XLA's shape inference refuses pred for subtract (but not for add/multiply/max/min).
    Op.SUBTRACT: _binary("subtract", elementwise.elementwise_numeric, ref.subtract),
    Op.TAN: _unary("tan", elementwise.elementwise_float, ref.tan, cost=_TRANSCENDENTAL),
    Op.TANH: _unary("tanh", elementwise.elementwise_float, ref.tanh, cost=_TRANSCENDENTAL,
                    expensive=True),
    Op.TRANSPOSE: OpDef("transpose", OpKind.INJECTIVE, 1, data_movement.transpose, fusibility=_LOOP,
                        cost=_FREE,
                        attrs={"dimensions": _INTS}),
    Op.TRIANGULAR_SOLVE: OpDef("triangular-solve", OpKind.OPAQUE, 2, linalg.triangular_solve,
                               expensive=True, attrs={  # in XLA's print order
        "left_side": AttrSpec(AttrType.BOOL, required=False),
        "lower": AttrSpec(AttrType.BOOL, required=False),
        "unit_diagonal": AttrSpec(AttrType.BOOL, required=False),
        "transpose_a": AttrSpec(AttrType.ENUM, required=False,
                                choices=linalg.TRANSPOSE_CHOICES),
    }),
    Op.TUPLE: OpDef("tuple", OpKind.TUPLE, None, control_flow.tuple_, cost=_FREE, buffer_only=True),
    Op.WHILE: OpDef("while", OpKind.CONTROL, 1, control_flow.while_, expensive=True,
                    fusibility=_NEVER, call_attrs=("condition", "body")),
    Op.XOR: _binary("xor", elementwise.elementwise_int_or_pred, ref.xor),
    # Indexing, sorting, windows (issue 12). Kinds and costs as XLA classifies them:
    # gather is loop-fusible, scatter input-fusible; the others are kernels of their own.
    Op.GATHER: OpDef("gather", OpKind.INJECTIVE, 2, indexing.gather, fusibility=_LOOP,
                     expensive=True, attrs={
        "offset_dims": _INTS,
        "collapsed_slice_dims": _INTS,
        "start_index_map": _INTS,
        "operand_batching_dims": _OPTIONAL_INTS,
        "start_indices_batching_dims": _OPTIONAL_INTS,
        "index_vector_dim": AttrSpec(AttrType.INT),
        "slice_sizes": _INTS,
        "indices_are_sorted": AttrSpec(AttrType.BOOL, required=False),
    }),
    Op.SCATTER: OpDef("scatter", OpKind.REDUCTION, None, indexing.scatter, min_arity=3,
                      expensive=True, call_attrs=("to_apply",), attrs={
                          "update_window_dims": _INTS,
                          "inserted_window_dims": _INTS,
                          "scatter_dims_to_operand_dims": _INTS,
                          "input_batching_dims": _OPTIONAL_INTS,
                          "scatter_indices_batching_dims": _OPTIONAL_INTS,
                          "index_vector_dim": AttrSpec(AttrType.INT),
                          "indices_are_sorted": AttrSpec(AttrType.BOOL, required=False),
                          "unique_indices": AttrSpec(AttrType.BOOL, required=False),
                      }),
    Op.SORT: OpDef("sort", OpKind.OPAQUE, None, sorting.sort, min_arity=1, expensive=True,
                   call_attrs=("to_apply",), attrs={
                       "dimensions": _INTS,
                       "is_stable": AttrSpec(AttrType.BOOL, required=False),
                   }),
    Op.TOPK: OpDef("topk", OpKind.OPAQUE, 1, sorting.topk, expensive=True, attrs={
        "k": AttrSpec(AttrType.INT),
        "largest": AttrSpec(AttrType.BOOL, required=False),
    }),
    # XLA counts map as element-wise (IsElementwise) and reduce-precision as a cheap one.
    Op.MAP: OpDef("map", E, None, elementwise.map_, min_arity=1, expensive=True,
                  call_attrs=("to_apply",), attrs={"dimensions": _OPTIONAL_INTS}),
    Op.REDUCE_PRECISION: OpDef("reduce-precision", E, 1, elementwise.reduce_precision, attrs={
        "exponent_bits": AttrSpec(AttrType.INT),
        "mantissa_bits": AttrSpec(AttrType.INT),
    }),
    Op.SELECT_AND_SCATTER: OpDef("select-and-scatter", OpKind.OPAQUE, 3, windows.select_and_scatter,
                                 expensive=True, call_attrs=("select", "scatter"),
                                 attrs={"window": AttrSpec(AttrType.WINDOW)}),
    Op.CONVOLUTION: OpDef("convolution", OpKind.OPAQUE, 2, windows.convolution, expensive=True,
                          attrs={  # in XLA's print order
                              "window": AttrSpec(AttrType.WINDOW, required=False),
                              "dim_labels": AttrSpec(AttrType.DIM_LABELS),
                              "feature_group_count": AttrSpec(AttrType.INT, required=False),
                              "batch_group_count": AttrSpec(AttrType.INT, required=False),
                          }),
}

OP_BY_NAME: dict[str, Op] = {op.value: op for op in Op}

# Ops whose result shape must be written in the text because the operands don't determine it.
DECLARED_SHAPE_OPS = frozenset({Op.PARAMETER, Op.CONSTANT, Op.IOTA, Op.BROADCAST, Op.RESHAPE,
                                Op.BITCAST, Op.CUSTOM_CALL, Op.RNG_BIT_GENERATOR, Op.CONVERT,
                                Op.BITCAST_CONVERT, Op.DOT, Op.CONVOLUTION})

ELEMENTWISE_OPS = frozenset(op for op, d in OP_TABLE.items() if d.kind is OpKind.ELEMENTWISE)
# The ops that have or may declare side effects (`has_side_effect` asks the others nothing).
SIDE_EFFECT_OPS = frozenset(op for op, d in OP_TABLE.items()
                            if d.side_effect is not SideEffect.NONE)


def has_side_effect(op: Op, attrs: Mapping[str, object]) -> bool:
    """XLA's HasSideEffectNoRecurse for an instruction of `op` with attributes `attrs`."""
    if op not in SIDE_EFFECT_OPS:
        return False
    effect = OP_TABLE[op].side_effect
    if effect is SideEffect.DECLARED:
        return bool(attrs.get("custom_call_has_side_effect"))
    return effect is SideEffect.ALWAYS


# Every opcode of XLA's list (xla/hlo/ir/hlo_opcode.h). The parser refuses the ones hlofuse
# does not implement with "opcode 'X' is not supported by hlofuse", not "unknown opcode".
XLA_OPCODES = frozenset({
    "abs", "acos", "acosh", "add", "add-dependency", "after-all", "all-gather",
    "all-gather-done", "all-gather-start", "all-reduce", "all-reduce-done", "all-reduce-start",
    "all-to-all", "and", "asin", "asinh", "async-done", "async-start", "async-update", "atan",
    "atan2", "atanh", "batch-norm-grad", "batch-norm-inference", "batch-norm-training",
    "bitcast", "bitcast-convert", "broadcast", "call", "cbrt", "ceil", "cholesky", "clamp",
    "count-leading-zeros", "collective-broadcast", "collective-permute",
    "collective-permute-done", "collective-permute-start", "collective-reduce", "compare",
    "complex", "concatenate", "conditional", "constant", "convert", "convolution", "copy",
    "copy-done", "copy-start", "cosine", "cosh", "custom-call", "divide", "domain", "dot",
    "dynamic-reshape", "dynamic-slice", "dynamic-update-slice", "erf", "exponential",
    "exponential-minus-one", "fft", "floor", "fusion", "gather", "get-dimension-size",
    "get-tuple-element", "imag", "infeed", "iota", "is-finite", "log", "log-plus-one",
    "logistic", "map", "maximum", "minimum", "mulhi", "multiply", "negate", "not",
    "opt-barrier", "or", "outfeed", "pad", "parameter", "partition-id", "popcnt", "power",
    "ragged-all-to-all", "ragged-dot", "real", "recv", "recv-done", "reduce",
    "reduce-precision", "reduce-scatter", "reduce-window", "remainder", "replica-id",
    "reshape", "reverse", "rng", "rng-bit-generator", "rng-get-and-update-state",
    "round-nearest-afz", "round-nearest-even", "rsqrt", "scaled-dot", "scan", "scatter",
    "select", "select-and-scatter", "send", "send-done", "set-dimension-size", "shift-left",
    "shift-right-arithmetic", "shift-right-logical", "shuffle", "sign", "sine", "sinh", "slice",
    "sort", "sqrt", "stochastic-convert", "subtract", "tan", "tanh", "topk", "transpose",
    "triangular-solve", "tuple", "while", "xor",
})
UNSUPPORTED_XLA_OPCODES = XLA_OPCODES - set(OP_BY_NAME)
# Opcodes that only make sense on complex numbers, which hlofuse has no element type for.
COMPLEX_OPCODES = frozenset({"real", "imag", "complex"})
