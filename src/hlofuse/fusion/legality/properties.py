"""What XLA's GPU fusion code asks of an instruction: fusible? elementwise? expensive? a
reduction its tiled emitter handles? how much shared memory? (2022 `gpu_fusible.cc`,
`ir_emission_utils.cc`, `instruction_fusion.cc`, `hlo_instruction.cc`, restated.)

Every predicate takes a `Node` of the mutable fusion graph and reads the op table; constants
are the 2022 GPU values the study's pipeline used.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from hlofuse.fusion.graphs.graph import Node
from hlofuse.ir.dtypes import DType
from hlofuse.ir.ops import Fusibility, FusionKind, Op, OpKind, SideEffect
from hlofuse.ir.ops import has_side_effect as op_has_side_effect
from hlofuse.ir.shapes import Shape, default_layout

WARP_SIZE = 32
MAX_OPERANDS_AND_OUTPUTS_PER_FUSION = 64  # 2022 (96 in 2024)
SHARED_MEMORY_BUDGET_BYTES = 40000  # 2022 fixed budget (48 KiB per block in 2024)
MAX_UNNESTED_REDUCTIONS_PER_FUSION = 8
ALLOWED_CODE_DUPLICATION = 15

# The GPU backend lowers these to single hardware instructions for f32/f16 (2022 list).
_GPU_CHEAP_F32_F16 = frozenset({Op.DIVIDE, Op.RSQRT, Op.EXPONENTIAL})


def has_side_effect(node: Node) -> bool:
    return op_has_side_effect(node.op, node.attrs)


# What `is_fusible` reads of the op table, by op (it is asked several times per candidate
# edge).
_NEVER_FUSIBLE = frozenset(op for op in Op if op.definition.fusion_class is Fusibility.NEVER
                           or op.definition.side_effect is SideEffect.ALWAYS)
_DECLARES_SIDE_EFFECT = frozenset(op for op in Op
                                  if op.definition.side_effect is SideEffect.DECLARED)


def is_fusible(node: Node) -> bool:
    """HloInstruction::IsFusible (no op the table marks fusible has a side effect except a
    custom call that declares one)."""
    op = node.op
    if op in _NEVER_FUSIBLE:
        return False
    if node.is_fusion and node.kind == FusionKind.CUSTOM:
        return False  # a custom fusion (a whole loop) has an emitter of its own
    return op not in _DECLARES_SIDE_EFFECT or not has_side_effect(node)


def per_fusion_sum(name: str, node: Node, compute: Callable[[Node], int],
                only_special: bool = False) -> int:
    """A sum over a fusion's instructions, cached until its body changes; with
    `only_special`, over those of `graph.SPECIAL_OPS` (`compute` is 0 for the others): a
    fusion grows one instruction at a time, and is summed again each time."""
    key = (node.fused.version,)
    cached = node.memo.get(name)
    if cached is not None and cached[0] == key:
        return cached[1]  # type: ignore[return-value]
    if only_special:
        value = sum(compute(n) for n in node.fused.special_nodes)
    else:
        value = sum(compute(n) for n in node.fused.nodes)
    node.memo[name] = (key, value)
    return value



# Asked of every fused instruction each time a cost model walks a fusion: a set, not the table.
_ELEMENTWISE_OPS = frozenset(op for op in Op if op.definition.kind is OpKind.ELEMENTWISE
                             and op is not Op.BITCAST_CONVERT) | {Op.COPY}


def is_elementwise_op(node: Node) -> bool:
    """XLA's IsOpElementwise (copy included; bitcast-convert only between equal widths)."""
    op = node.op
    if op is Op.BITCAST_CONVERT:
        return node.operands[0].dtype.bits == node.dtype.bits
    return op in _ELEMENTWISE_OPS


def is_elementwise(node: Node) -> bool:
    """HloInstruction::IsElementwise (a fusion is if every fused instruction is)."""
    if node.is_fusion:
        return per_fusion_sum("non_elementwise", node, _not_elementwise) == 0
    return is_elementwise_op(node)


def _not_elementwise(node: Node) -> int:
    return 0 if node.op is Op.PARAMETER or is_elementwise(node) else 1


def is_effective_scalar(shape: Shape) -> bool:
    return shape.is_array and shape.num_elements == 1


def true_rank(shape: Shape) -> int:
    return sum(1 for d in shape.dims if d != 1)


def is_expensive_generic(node: Node) -> bool:
    """InstructionFusion::IsExpensive."""
    if node.op in (Op.DIVIDE, Op.REMAINDER):
        return not (node.dtype.is_integer and _is_constant_scalar_or_broadcast(node.operands[1]))
    return node.op.definition.expensive


def is_expensive(node: Node) -> bool:
    """GpuInstructionFusion::IsExpensive (2022): divide, rsqrt and exp are cheap in f32/f16."""
    if node.op in _GPU_CHEAP_F32_F16 and node.dtype in (DType.F32, DType.F16):
        return False
    return is_expensive_generic(node)


def expensive_instruction_count(fusion: Node) -> int:
    """How many of a fusion's instructions are expensive (cached until its body changes)."""
    return per_fusion_sum("expensive", fusion, _expensive_instruction)


def _expensive_instruction(node: Node) -> int:
    return 1 if node.op is not Op.PARAMETER and is_expensive(node) else 0


def _is_constant_scalar_or_broadcast(node: Node) -> bool:
    if node.op is Op.BROADCAST:
        node = node.operands[0]
    return node.op is Op.CONSTANT and is_effective_scalar(node.shape)


def is_always_duplicable(node: Node) -> bool:
    """A widening convert is always worth duplicating into its consumers (2022 rule)."""
    return node.op is Op.CONVERT and node.operands[0].shape.byte_size < node.shape.byte_size


def subshape_count(shape: Shape) -> int:
    """ShapeUtil::SubshapeCount: the shape itself and, for a tuple, every element."""
    return 1 + sum(subshape_count(e) for e in shape.elements) if shape.is_tuple else 1


# --- layouts and reductions ---------------------------------------------------------------


@functools.cache
def _default_layout(rank: int) -> tuple[int, ...]:
    return default_layout(rank)


def minor_to_major(shape: Shape) -> tuple[int, ...]:
    return shape.layout if shape.layout is not None else _default_layout(shape.rank)


def equal_ignoring_element_type(a: Shape, b: Shape) -> bool:
    """Same dims and layout (XLA's Shape::Equal().IgnoreElementType())."""
    if a.layout is None and b.layout is None and not a.elements and not b.elements:
        return a.dims == b.dims and a.is_tuple == b.is_tuple
    if a.is_tuple or b.is_tuple:
        return (a.is_tuple and b.is_tuple and len(a.elements) == len(b.elements)
                and all(equal_ignoring_element_type(x, y)
                        for x, y in zip(a.elements, b.elements)))
    return a.dims == b.dims and minor_to_major(a) == minor_to_major(b)


def are_dimensions_consecutive(shape: Shape, dims: tuple[int, ...]) -> bool:
    order = minor_to_major(shape)
    positions = sorted(order.index(d) for d in dims)
    return all(b - a == 1 for a, b in zip(positions, positions[1:]))


def partition_by_middle_dimensions(shape: Shape, middle: tuple[int, ...]
                                   ) -> tuple[int, int, int]:
    """(major, middle, minor) element counts, walking the physical order (minor first)."""
    values = [1, 1, 1]  # major, middle, minor
    segment = 2
    for dim in minor_to_major(shape):
        if segment != 0:
            in_middle = dim in middle
            if segment == 2 and in_middle:
                segment = 1
            elif segment == 1 and not in_middle:
                segment = 0
        values[segment] *= shape.dims[dim]
    return values[0], values[1], values[2]


@dataclass(frozen=True, slots=True)
class ReductionDimensions:
    is_row_reduction: bool
    dimensions: tuple[int, int, int]


def reduction_dimensions(shape: Shape, reduced: tuple[int, ...]) -> ReductionDimensions:
    """GetReductionKindAndContiguousComponents."""
    kept = tuple(d for d in range(shape.rank) if d not in reduced)
    if not kept:
        return ReductionDimensions(True, (1, 1, shape.num_elements))
    if are_dimensions_consecutive(shape, kept):
        major, middle, minor = partition_by_middle_dimensions(shape, kept)
        if middle == 1:
            return ReductionDimensions(True, (1, 1, major * minor))
        if minor == 1:
            return ReductionDimensions(False, (1, major, middle))
        return ReductionDimensions(True, (major, middle, minor))
    major, middle, minor = partition_by_middle_dimensions(shape, reduced)
    if minor == 1:
        return ReductionDimensions(True, (1, major, middle))
    return ReductionDimensions(False, (major, middle, minor))


# XLA since 2024 also tiles a row reduction whose length divides the warp size (several rows
# per warp); `xla-gpu`'s passes run under `current_xla_rules()`, the 2022 pipeline without.
_CURRENT_XLA = contextvars.ContextVar("current_xla_rules", default=False)


@contextlib.contextmanager
def current_xla_rules() -> Iterator[None]:
    """Within this block the properties follow XLA's current GPU code instead of 2022's."""
    token = _CURRENT_XLA.set(True)
    try:
        yield
    finally:
        _CURRENT_XLA.reset(token)


def tiled_reduction_is_faster(dims: ReductionDimensions) -> bool:
    """IsUnnestedReductionFasterThanElemental (2022, or today's under `current_xla_rules`)."""
    if dims.is_row_reduction:
        if _CURRENT_XLA.get() and WARP_SIZE % max(1, dims.dimensions[2]) == 0:
            return True
        return dims.dimensions[2] >= WARP_SIZE
    major, minor = dims.dimensions[1], dims.dimensions[2]
    prefer_elemental = (major < WARP_SIZE or (major < 2 * WARP_SIZE and minor < WARP_SIZE)
                        or (major < 4 * WARP_SIZE and minor < 8)
                        or (major < 8 * WARP_SIZE and minor < 3))
    return not prefer_elemental


def is_contiguous_reduction(node: Node) -> bool:
    """IsReductionFromOrToContiguousDimensions: a reduce the tiled (kInput) emitter handles."""
    if node.op is not Op.REDUCE:
        return False
    shape = node.operands[0].shape
    # Asked several times per candidate edge; the answer depends only on the operand's shape
    # and the reduce's dimensions (fixed), so it is kept until that shape object changes.
    cached = node.memo.get("contiguous")
    if cached is not None and cached[0] is shape:
        return cached[1]  # type: ignore[return-value]
    result = _is_contiguous_reduction(shape, node.ints("dimensions"))
    node.memo["contiguous"] = (shape, result)
    return result


def reduces_contiguous_dimensions(shape: Shape, reduced: tuple[int, ...]) -> bool:
    """IsReductionFromOrToContiguousDimensions for a reduce of `shape` over `reduced`."""
    return _is_contiguous_reduction(shape, reduced)


def _is_contiguous_reduction(shape: Shape, reduced: tuple[int, ...]) -> bool:
    kept = tuple(d for d in range(shape.rank) if d not in reduced)
    consecutive = (are_dimensions_consecutive(shape, kept)
                   or are_dimensions_consecutive(shape, reduced))
    return consecutive and tiled_reduction_is_faster(reduction_dimensions(shape, reduced))


def fusion_outputs(node: Node) -> list[Node]:
    """The instructions whose values a fusion returns (GetOutputsOfFusible)."""
    if not node.is_fusion:
        return [node]
    root = node.fused_root
    return list(root.operands) if root.op is Op.TUPLE else [root]


def is_reduce_input_fusion(node: Node) -> bool:
    """A fusion with a tiled reduction among its outputs (asked several times per candidate
    edge: `fusion_outputs` without building its list)."""
    if not node.is_fusion:
        return False
    root = node.calls[0].root
    if root.op is Op.TUPLE:
        return any(is_contiguous_reduction(o) for o in root.operands)
    return is_contiguous_reduction(root)


def is_input_fusible_reduction(node: Node) -> bool:
    return is_reduce_input_fusion(node) or is_contiguous_reduction(node)


def is_input_fusible_scatter(node: Node) -> bool:
    """IsInputFusibleScatter: a scatter, or an input fusion whose root is one."""
    if node.op is Op.SCATTER:
        return True
    return (node.is_fusion and node.calls[0].root.op is Op.SCATTER
            and node.kind == FusionKind.INPUT)


def is_input_fusible(node: Node) -> bool:
    """IsInputFusible: tiled reductions and scatters."""
    return is_fusible(node) and (is_input_fusible_reduction(node)
                                 or is_input_fusible_scatter(node))


def scatter_fusion_refusal(producer: Node, consumer: Node) -> str | None:
    """CanEmitInputFusedScatter: why `producer` may not fuse into `consumer`, or None. Nothing
    fuses into a scatter's output, nor into (or reads) the operand it updates in place."""
    if is_input_fusible_scatter(producer):
        return "do not fuse into the output of a scatter"
    if not is_input_fusible_scatter(consumer):
        return None
    if consumer.is_fusion:
        updated = consumer.fused_root.operands[0]
        if updated.op is not Op.PARAMETER:
            return "the fused scatter does not update a parameter in place"
        in_place = consumer.operands[updated.parameter_number]
    else:
        in_place = consumer.operands[0]
    if in_place is producer:
        return "do not fuse into the operand a scatter updates in place"
    if in_place in producer.operands:
        return "the producer reads the operand a scatter updates in place"
    return None


def is_loop_fusion(node: Node) -> bool:
    return node.is_fusion and node.kind == FusionKind.LOOP


def is_loop_fusible(node: Node) -> bool:
    """IsLoopFusible (2022 gpu_fusible.cc)."""
    if not is_fusible(node):
        return False
    if not node.is_fusion and node.operands and is_elementwise_op(node):
        return True
    if node.op is Op.REDUCE:
        return not is_contiguous_reduction(node) and not node.shape.is_tuple
    return is_loop_fusion(node) or node.op.definition.fusion_class is Fusibility.LOOP


def reads_elements_multiple_times(node: Node) -> bool:
    """IfFusedReadsElementsMultipleTimes: a loop nested in the emitted code."""
    if node.op is Op.REDUCE:
        return not is_contiguous_reduction(node)
    if node.op is Op.REDUCE_WINDOW:
        window = node.attrs["window"]
        return any(s > t for s, t in zip(window.size, window.stride))  # type: ignore[attr-defined]
    if node.op is Op.GATHER:  # as a broadcast: more outputs than inputs re-read the operand
        return node.shape.num_elements > node.operands[0].shape.num_elements
    return False


def transpose_is_bitcast(node: Node) -> bool:
    source, result = node.operands[0].shape, node.shape
    dims = node.ints("dimensions")
    return tuple(dims[d] for d in minor_to_major(result)) == minor_to_major(source)


def is_physically_transposing(node: Node) -> bool:
    if node.op is Op.COPY:
        return True
    return node.op is Op.TRANSPOSE and not transpose_is_bitcast(node)


def shared_memory_usage(node: Node) -> int:
    """Bytes of shared memory the tiled reduction emitter needs (2022 estimates)."""
    if node.is_fusion:
        return per_fusion_sum("shared_memory", node, shared_memory_usage, True)  # reduces only
    if node.op is not Op.REDUCE or not is_contiguous_reduction(node):
        return 0
    item = node.operands[0].dtype.itemsize
    outputs = len(node.shape.elements) if node.shape.is_tuple else 1
    dims = reduction_dimensions(node.operands[0].shape, node.ints("dimensions"))
    if dims.is_row_reduction:
        return 32 * item * outputs
    return 2 * 32 * 33 * item * outputs


def unnested_reduction_count(node: Node) -> int:
    if node.is_fusion:
        return per_fusion_sum("unnested_reductions", node, unnested_reduction_count, True)
    return 1 if is_contiguous_reduction(node) else 0


# --- operand reuse (HloInstruction::ReusesOperandElements) ---------------------------------


class Use(enum.IntEnum):
    REUSE = 0
    USE = 1
    NO_USE = 2


_PLAIN_USE = frozenset({Op.BITCAST, Op.CONCATENATE, Op.RESHAPE, Op.REVERSE, Op.SLICE,
                        Op.TRANSPOSE})


def operand_element_use(node: Node, index: int) -> Use:
    op = node.op
    if op in _PLAIN_USE:
        return Use.USE
    if op is Op.PAD:
        return Use.REUSE if index > 0 else Use.USE
    if op is Op.REDUCE:
        return Use.REUSE if index >= len(node.operands) // 2 else Use.USE
    if op is Op.FUSION:
        return _fused_parameter_use(node, index)
    if op is Op.DOT:
        if node.shape.rank <= 1:
            other = node.operands[1 - index] if index in (0, 1) else None
            if other is not None and other.shape.rank <= 1:
                return Use.USE
        return Use.REUSE
    if op is Op.DYNAMIC_UPDATE_SLICE:
        return Use.USE if index in (0, 1) else Use.REUSE
    return Use.USE if is_elementwise(node) else Use.REUSE


def _fused_parameter_use(fusion: Node, index: int) -> Use:
    # A module-level helper, not a closure: a recursive closure is a reference cycle that
    # would keep its cache, and with it the fusion graph, alive until the cycle collector runs.
    return _parameter_use(fusion.fused_root, index, {})


def _parameter_use(node: Node, index: int, cache: dict[Node, Use]) -> Use:
    if node.op is Op.PARAMETER and node.parameter_number == index:
        return Use.USE
    if node in cache:
        return cache[node]
    cache[node] = Use.NO_USE
    value = Use.NO_USE
    for i, operand in enumerate(node.operands):
        use = operand_element_use(node, i)
        if use is Use.NO_USE:
            continue
        inner = _parameter_use(operand, index, cache)
        if inner is Use.NO_USE:
            continue
        value = min(value, use, inner)
        if value is Use.REUSE:
            break
    cache[node] = value
    return value


def reuses_operand_elements(node: Node, index: int) -> bool:
    return operand_element_use(node, index) is Use.REUSE


# --- multi-output compatibility -----------------------------------------------------------


def real_hero(node: Node) -> Node:
    """GetRealHeroForMultiOutputFusion: the output that decides the emitter."""
    if not node.is_fusion:
        return node
    root = node.fused_root
    if root.op is not Op.TUPLE:
        return root
    return next((o for o in root.operands if is_contiguous_reduction(o)), root.operands[0])


def _reduction_outputs_consistent(inst: Node, first: Node) -> bool:
    if is_contiguous_reduction(inst):
        return (inst.shape == first.shape and equal_ignoring_element_type(inst.shape, first.shape)
                and inst.operands[0].shape == first.operands[0].shape
                and inst.operands[1].shape == first.operands[1].shape
                and inst.ints("dimensions") == first.ints("dimensions"))
    return equal_ignoring_element_type(first.operands[0].shape, inst.shape)


def loop_shape(node: Node) -> Shape:
    """The shape a fusion's parallel loop runs over: a reduction's input, else the output."""
    return node.operands[0].shape if is_contiguous_reduction(node) else node.shape


def shapes_compatible_for_multi_output(a: Node, b: Node) -> bool:
    hero_a, reduces_a, loop_a = _hero_facts(a)
    hero_b, reduces_b, loop_b = _hero_facts(b)
    if (reduces_a and reduces_b
            and not all(_reduction_outputs_consistent(h, hero_a) for h in (hero_a, hero_b))):
        return False
    return loop_a is loop_b or equal_ignoring_element_type(loop_a, loop_b)


def _hero_facts(node: Node) -> tuple[Node, bool, Shape]:
    """`real_hero(node)`, whether it is a tiled reduction, and its `loop_shape`: kept until
    the fusion's body changes (multi-output fusion compares every pair of siblings, and the
    synthetic 100,000-instruction module has 145,000 such pairs)."""
    key = node.fused.version if node.is_fusion else node.operands[0].shape if node.operands \
        else None
    cached = node.memo.get("hero")
    if cached is not None and cached[0] == key:
        return cached[1]  # type: ignore[return-value]
    hero = real_hero(node)
    reduces = is_contiguous_reduction(hero)
    facts = (hero, reduces, hero.operands[0].shape if reduces else hero.shape)
    node.memo["hero"] = (key, facts)
    return facts


def is_fusible_as_multi_output_root(node: Node) -> bool:
    return is_fusible(node) and (is_input_fusible_reduction(node) or is_loop_fusion(node)
                                 or is_elementwise(node))


def in_place_operands(node: Node) -> list[int]:
    """Operand numbers updated in place (HloDataflowAnalysis::GetInPlaceInputOutputPairs)."""
    if node.op is Op.DYNAMIC_UPDATE_SLICE:
        return [0]
    if node.op is Op.SCATTER:  # operand i becomes output i
        return list(range((len(node.operands) - 1) // 2))
    if not node.is_fusion:
        return []
    numbers = []
    for output in fusion_outputs(node):
        if output.op is Op.DYNAMIC_UPDATE_SLICE and output.operands[0].op is Op.PARAMETER:
            numbers.append(output.operands[0].parameter_number)
        if output.op is Op.SCATTER:
            count = (len(output.operands) - 1) // 2
            numbers += [o.parameter_number for o in output.operands[:count]
                        if o.op is Op.PARAMETER]
    return numbers


def extract_instruction(node: Node, accept: Callable[[Node], bool]) -> Node | None:
    """The one instruction (the node itself, or inside a fusion) that `accept` picks."""
    if accept(node):
        return node
    if not node.is_fusion:
        return None
    found = [n for n in node.fused.nodes if accept(n)]
    return found[0] if len(found) == 1 else None


def constant_int(node: Node) -> int | None:
    if node.op is not Op.CONSTANT:
        return None
    literal = node.attrs["literal"]
    assert isinstance(literal, np.ndarray)
    return int(literal.flat[0]) if literal.size else None
