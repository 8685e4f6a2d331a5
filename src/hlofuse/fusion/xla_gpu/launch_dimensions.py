"""The launch dimensions XLA's GPU emitters choose, as its performance model reads them
(`gpu_performance_model_base.cc`'s `EstimateFusionLaunchDimensions`, the reduction and
concatenate emitters): which instruction is a kernel's hero (`FindNonTrivialHero`), whether a
kernel is a tiled reduction, an in-place dynamic-update-slice or a concatenate the concatenate
emitter takes, and the blocks and threads each launches. performance_model.py prices
kernels with them."""

from __future__ import annotations

import math

from hlofuse.fusion.graphs.graph import Node
from hlofuse.fusion.kernels import is_free
from hlofuse.fusion.legality.properties import (
    WARP_SIZE,
    is_contiguous_reduction,
    is_effective_scalar,
    is_elementwise_op,
    per_fusion_sum,
    reduction_dimensions,
)
from hlofuse.fusion.xla_gpu.devices import DEFAULT_DEVICE, device
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape

THREADS_PER_BLOCK = 128  # EstimateFusionLaunchDimensions' fallback estimate

# The row-reduction emitter (MlirRowReductionFusion): threads per block along the row at most
# (MinThreadsXRowReduction, with a current ptxas), elements of a row one thread reduces
# (the minor reduced tile), rows of the major reduced dimension one thread takes
# (BatchedReductionRaceFreeBound) and the threads per block it aims for when rows are short.
MIN_THREADS_X_ROW_REDUCTION = 1024
ROW_TILE_X = 16
RACE_FREE_BOUND = 8
THREADS_PER_BLOCK_TARGET = 256
# The cores of the default device, for callers that name none.
DEFAULT_CORE_COUNT = device(DEFAULT_DEVICE).core_count
# Ops a kernel walks through to find its hero (FindNonTrivialHero): they keep the index space.
_INTERMEDIATE = frozenset({Op.BITCAST, Op.RESHAPE, Op.COPY})


def fusion_roots(node: Node) -> list[Node]:
    """The outputs of `node`'s kernel (inside the fusion for a fusion)."""
    if not node.is_fusion:
        return [node]
    root = node.fused_root
    return list(root.operands) if root.op is Op.TUPLE else [root]


def hero_reduction(start: Node, outer: Node | None, producer: Node | None) -> Node | None:
    """The tiled reduction that is the hero of an output (FindNonTrivialHero), if any: the
    walk from the output through element-wise ops with one non-scalar operand and through
    bitcasts, into the producer where the output reads it (`outer` is the fusion `start`
    lives in, if any)."""
    node: Node | None = start
    seen = 0
    inside = True  # `node` is in the kernel
    while node is not None and seen < 10000:
        seen += 1
        if node.op is Op.PARAMETER and outer is not None and node.parent is outer.fused:
            node = outer.operands[node.parameter_number]
            outer = None
            inside = False
            continue
        if producer is not None and node is producer:
            if producer.is_fusion:
                return next((h for o in fusion_roots(producer)
                             if (h := hero_reduction(o, producer, None)) is not None), None)
            node, producer = producer, None
            inside = True
            continue
        if not inside:
            return None
        if node.op is Op.REDUCE:
            return node if is_contiguous_reduction(node) else None
        if node.op in _INTERMEDIATE or is_elementwise_op(node):
            # An op of one operand is XLA's IsIntermediate whatever its shape (the negation
            # of a sum to a scalar keeps the sum its hero).
            wide = list(node.operands) if len(node.operands) == 1 else \
                [o for o in node.operands if not is_effective_scalar(o.shape)]
            if len(wide) != 1:
                return None
            node = wide[0]
            inside = outer is not None
            continue
        return None
    return None


def kernel_reduction(consumer: Node, producer: Node | None = None) -> Node | None:
    """The hero reduction of `consumer`'s kernel (with `producer` fused into it)."""
    outer = consumer if consumer.is_fusion else None
    for output in fusion_roots(consumer):
        hero = hero_reduction(output, outer, producer)
        if hero is not None:
            return hero
    return None


def kernel_launch(consumer: Node, producer: Node | None = None,
                  core_count: int = DEFAULT_CORE_COUNT) -> tuple[int, int] | None:
    """(blocks, threads per block) of `consumer`'s kernel (with `producer` fused into it)
    when its emitter, not the loop emitter's estimate, decides them: a tiled reduction hero
    (`reduction_launch`, on a device of `core_count` cores), a concatenate hero
    (`concatenate_launch`), dynamic-update-slice outputs (`kernel_dynamic_update_slice`), or
    a first output of several arrays (a variadic reduce the loop emitter runs)."""
    reduction = kernel_reduction(consumer, producer)
    if reduction is not None:
        return reduction_launch(reduction, kernel_io_bits(consumer, producer), core_count)
    concatenate = kernel_concatenate(consumer, producer)
    if concatenate is not None:
        return concatenate_launch(concatenate)
    update = kernel_dynamic_update_slice(consumer)
    if update is not None:
        return loop_launch(update.operands[1].shape.num_elements)
    # The loop emitter launches over its first output's first array (LoopFusion's
    # launch_dimensions over GetIndexShape, emitters/loop.cc): a variadic reduce it runs (an
    # argmax over short rows) takes one thread per element of its first result.
    first = fusion_roots(consumer)[0]
    if first.shape.is_tuple:
        return loop_launch(first.shape.leaves()[0].num_elements)
    return None


def kernel_dynamic_update_slice(consumer: Node) -> Node | None:
    """The first dynamic-update-slice of `consumer`'s kernel when XLA's performance model
    launches it with the in-place emitter: every output is a dynamic-update-slice or a
    bitcast of one (IsDynamicUpdateSliceFusion in fusions.cc), which before buffer
    assignment is taken to be in place (PreBufferAssignmentFusionInfo::
    CanEmitDynamicUpdateSliceInPlace), and InPlaceDynamicUpdateSliceFusion launches over the
    first one's update. A producer fused into the consumer leaves its outputs as they are."""
    updates = []
    for root in fusion_roots(consumer):
        if root.op is not Op.DYNAMIC_UPDATE_SLICE and consumer.is_fusion and (
                root.op is Op.BITCAST or (root.op is Op.RESHAPE and is_free(root))):
            root = root.operands[0]
        if root.op is not Op.DYNAMIC_UPDATE_SLICE:
            return None
        updates.append(root)
    return updates[0] if updates else None


def loop_launch(elements: int) -> tuple[int, int]:
    """CalculateLaunchDimensions (launch_dimensions.cc) over `elements` elements, unrolled
    once: one thread per element, at most 128 per block (a warp times the scheduling
    granularity, 4)."""
    if elements <= 1:
        return 1, 1
    per_block = min(THREADS_PER_BLOCK, elements)
    return math.ceil(elements / per_block), per_block


# UseConcatenateFusion: more operands than this and the loop emitter is used.
MAX_CONCATENATE_EMITTER_OPERANDS = 4


def kernel_concatenate(consumer: Node, producer: Node | None = None) -> Node | None:
    """The concatenate hero of `consumer`'s kernel (with `producer` fused into it) when XLA
    emits the kernel with its concatenate emitter (HloFusionAnalysis::GetEmitterFusionKind,
    UseConcatenateFusion): one output, not a tuple, whose hero is a concatenate of at most
    four operands (and no input or output narrower than a byte, which hlofuse's element types
    never are). The hero is `FindNonTrivialHero`'s (`ir_emission_utils.cc`): from the output
    back through ops of one operand that keep the index space, then XLA's wider search for a
    concatenate (`FindHero`): breadth first through element-wise ops of at most three operands
    and bitcasts, the only concatenate found, from which no other op leads to the output
    (`select(p, concatenate(a, b), c)` runs the concatenate emitter)."""
    roots = fusion_roots(consumer)
    if len(roots) != 1 or not roots[0].shape.is_array:
        return None
    if not (_holds_concatenate(consumer) or (producer is not None
                                             and _holds_concatenate(producer))):
        return None  # the search below only visits these two: no candidate (and it is slow)
    kernel = _FusedKernel(consumer, producer)
    start = roots[0]
    while _intermediate(start, 1):
        operand = kernel.operand_in_kernel(start, 0)
        if operand is None:
            break
        start = operand
    found: Node | None = None
    queue, seen = [start], {start}
    while queue:
        node = queue.pop(0)
        if node.op is Op.CONCATENATE:
            if found is not None:
                return None  # several candidates: no hero
            found = node
            continue
        if not _intermediate(node, 3):
            continue
        for index in range(len(node.operands)):
            operand = kernel.operand_in_kernel(node, index)
            if operand is not None and operand not in seen:
                seen.add(operand)
                queue.append(operand)
    if found is None or len(found.operands) > MAX_CONCATENATE_EMITTER_OPERANDS:
        return None
    # Every path from the concatenate to the output runs through such ops.
    users, visited = kernel.users_in_kernel(found), set()
    while users:
        user = users.pop(0)
        if user in visited:
            continue
        visited.add(user)
        if user.op is not Op.TUPLE and not _intermediate(user, 3):
            return None
        users += kernel.users_in_kernel(user)
    return found


def _holds_concatenate(node: Node) -> bool:
    """Whether `node` is a concatenate, or a fusion with one among its fused instructions."""
    if not node.is_fusion:
        return node.op is Op.CONCATENATE
    # Asked at every price of the fusion's kernel: counted once per change of its body.
    return per_fusion_sum("concatenates", node, lambda n: int(n.op is Op.CONCATENATE)) > 0


def _intermediate(node: Node, allowed_operands: int) -> bool:
    """XLA's IsIntermediate: an element-wise op (a copy only if it keeps the layout) or a
    bitcast (a reshape or transpose that is one) with one to `allowed_operands` operands."""
    if not 1 <= len(node.operands) <= allowed_operands:
        return False
    if node.op is Op.COPY:
        return node.shape == node.operands[0].shape
    if is_elementwise_op(node) or node.op is Op.BITCAST:
        return True
    if node.op is Op.RESHAPE:
        return is_free(node)
    if node.op is Op.TRANSPOSE:
        source = node.operands[0].shape
        moved = [d for d in node.ints("dimensions") if source.dims[d] != 1]
        return moved == sorted(moved)
    return False


class _FusedKernel:
    """The instructions of `consumer`'s kernel with `producer` fused into it, as XLA's
    HloFusionAdaptor presents them: operands and users inside the kernel only (a fusion's
    parameters lead out of it, or into the producer's output where it reads the producer)."""

    def __init__(self, consumer: Node, producer: Node | None) -> None:
        self.consumer = consumer
        self.producer = producer if producer is not None and len(
            fusion_roots(producer)) == 1 else None

    def operand_in_kernel(self, node: Node, index: int) -> Node | None:
        operand = node.operands[index]
        if operand.op is Op.PARAMETER:
            outer = self._fusion_of(operand)
            if outer is None:
                return None
            operand = outer.operands[operand.parameter_number]
            if outer is not self.consumer or operand is not self.producer:
                return None
            return fusion_roots(operand)[0]
        if operand is self.producer:
            return fusion_roots(operand)[0]
        return operand if self._inside(operand) else None

    def users_in_kernel(self, node: Node) -> list[Node]:
        if self.producer is not None and node is fusion_roots(self.producer)[0]:
            return self._uses_of_producer()
        return [u for u in node.users if self._inside(u)]

    def _uses_of_producer(self) -> list[Node]:
        assert self.producer is not None
        if not self.consumer.is_fusion:
            return [self.consumer]
        uses: list[Node] = []
        for number, operand in enumerate(self.consumer.operands):
            if operand is self.producer:
                uses += list(self.consumer.fused.params[number].users)
        return uses

    def _fusion_of(self, node: Node) -> Node | None:
        for fusion in (self.consumer, self.producer):
            if fusion is not None and fusion.is_fusion and node.parent is fusion.fused:
                return fusion
        return None

    def _inside(self, node: Node) -> bool:
        if node.op is Op.PARAMETER:
            return False
        if node is self.consumer and not self.consumer.is_fusion:
            return True
        if self.producer is not None and node is self.producer and not node.is_fusion:
            return True
        return self._fusion_of(node) is not None


def concatenate_launch(hero: Node) -> tuple[int, int]:
    """(blocks, threads per block) of the concatenate emitter (ConcatenateFusion::
    launch_dimensions): the loop emitter's launch (CalculateLaunchDimensions) over the
    operand that is largest along the concatenated dimension (the first of equals)."""
    (dimension,) = hero.ints("dimensions")
    largest = max(hero.operands, key=lambda o: o.shape.dims[dimension])
    return loop_launch(largest.shape.num_elements)


# HloFusionAnalysis's SmallestBitWidth of no arrays (std::numeric_limits<int>::max()).
NO_ARRAY_BITS = 2**31 - 1


def _smallest_bits(shapes: list[Shape]) -> int:
    """SmallestBitWidth (hlo_fusion_analysis.cc): the narrowest element type of the array
    shapes (a pred counts 8 bits; tuple shapes are skipped)."""
    return min((shape.dtype.bits for shape in shapes if shape.is_array), default=NO_ARRAY_BITS)


def kernel_io_bits(consumer: Node, producer: Node | None = None) -> tuple[int, int]:
    """HloFusionAnalysis's InputOutputInfo of `consumer`'s kernel (with `producer` fused into
    it): the smallest element width of its parameters (the operands from outside the kernel)
    and of its outputs."""
    inputs = list(producer.operands) if producer is not None else []
    inputs += [o for o in consumer.operands if o is not producer and not (
        producer is not None and o.op is Op.GET_TUPLE_ELEMENT and o.operands[0] is producer)]
    return (_smallest_bits([o.shape for o in dict.fromkeys(inputs)]),
            _smallest_bits([root.shape for root in fusion_roots(consumer)]))


# MultiRowReductionFusion: the threads per block it aims for; its vector loads are at most
# 64 bits of the narrowest type, 128 bits when some input or output is 32 bits or wider.
MULTI_ROW_VECTOR_BITS = 64
MULTI_ROW_WIDE_VECTOR_BITS = 128


def _multi_row_threads(kept: int, minor: int, vector: int) -> tuple[int, int]:
    """MultiRowReductionFusion::GetNumThreads: (rows, threads per row) of a block."""
    per_row = minor // vector
    rows = kept if kept * per_row <= THREADS_PER_BLOCK_TARGET \
        else THREADS_PER_BLOCK_TARGET // per_row
    return rows, per_row


def multi_row_launch(hero: Node, io_bits: tuple[int, int],
                     core_count: int) -> tuple[int, int] | None:
    """(blocks, threads per block) of MultiRowReductionFusion (`reduction.cc`,
    `MultiRowReductionFusion::TryCreate`), which XLA's `CreateReductionFusion` tries first
    for a row reduction: rows of a power-of-two length that a warp reduces with vector
    loads, several rows per block; the vector shrinks while there are fewer blocks than
    cores. None where it does not apply (the row emitter runs)."""
    dims = reduction_dimensions(hero.operands[0].shape, tuple(hero.ints("dimensions")))
    _, kept, minor = dims.dimensions
    if not dims.is_row_reduction or minor < 1 or minor & (minor - 1):
        return None
    smallest_input, smallest_output = io_bits
    smallest = min(smallest_input, smallest_output)
    largest = max(smallest_input, smallest_output)
    if largest == NO_ARRAY_BITS:
        largest = smallest_output
    vector = min(minor, MULTI_ROW_VECTOR_BITS // smallest)
    if largest >= 32:
        vector = min(MULTI_ROW_WIDE_VECTOR_BITS // largest, vector)
    if minor > WARP_SIZE * vector:
        return None
    while vector > 1 and math.ceil(
            kept / _multi_row_threads(kept, minor, vector)[0]) < core_count:
        vector //= 2
    if minor > WARP_SIZE * vector:
        return None
    rows, per_row = _multi_row_threads(kept, minor, vector)
    return math.ceil(kept / rows), rows * per_row


def reduction_launch(hero: Node, io_bits: tuple[int, int] = (32, 32),
                     core_count: int = DEFAULT_CORE_COUNT) -> tuple[int, int]:
    """(blocks, threads per block) the reduction emitter launches for `hero` in a kernel
    whose inputs and outputs are `io_bits` wide at the narrowest (`kernel_io_bits`), on a
    device of `core_count` cores: MultiRowReductionFusion where it applies
    (`multi_row_launch`), else the row or column reduction emitter (vectorised loads not
    modelled)."""
    multi_row = multi_row_launch(hero, io_bits, core_count)
    if multi_row is not None:
        return multi_row
    dims = reduction_dimensions(hero.operands[0].shape, tuple(hero.ints("dimensions")))
    if not dims.is_row_reduction:
        major_kept, _, minor_kept = dims.dimensions
        return major_kept * math.ceil(minor_kept / WARP_SIZE), WARP_SIZE * WARP_SIZE
    major, kept, minor = dims.dimensions
    rows_per_warp = 1 if minor >= WARP_SIZE or WARP_SIZE % minor else WARP_SIZE // minor
    if rows_per_warp > 1:
        threads_x = minor
    else:
        threads_x = min(MIN_THREADS_X_ROW_REDUCTION,
                        math.ceil(math.ceil(minor / ROW_TILE_X) / WARP_SIZE) * WARP_SIZE)
    threads_y = 1
    if threads_x * 2 <= THREADS_PER_BLOCK_TARGET:
        if kept * threads_x <= THREADS_PER_BLOCK_TARGET:
            threads_y = kept
            while (threads_x * threads_y) % WARP_SIZE:
                threads_y += 1
        else:
            threads_y = THREADS_PER_BLOCK_TARGET // threads_x
    tile_x = 1 if rows_per_warp > 1 else min(ROW_TILE_X, math.ceil(minor / threads_x))
    blocks = (math.ceil(major / min(major, RACE_FREE_BOUND)) * math.ceil(kept / threads_y)
              * math.ceil(minor / (tile_x * threads_x)))
    return blocks, threads_x * threads_y
