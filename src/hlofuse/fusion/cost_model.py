"""The cost model of a kernel on this CPU (C + OpenMP), as priority fusion asks for it.

It restates XLA's GPU performance model (`gpu_performance_model.cc`) for hlofuse's target:

- A kernel's *profile*: how often each instruction is evaluated, hence how many elements it
  reads of each operand (XLA's operand utilisation: an operand of a broadcast is read once
  per output element, a reduce reads in/out elements per output, an element read at the same
  index by several element-wise users is read once, a loop-invariant scalar once per call),
  its arithmetic in cheap-operation units (a transcendental costs `transcendental_ops`, a
  division `divide_ops`, 8-byte types twice the lanes), the bytes it writes and the size of
  its parallel loop (over the outputs, as the C emitter splits it).
- Its *time*: `overhead + compute + memory - overlap * min(compute, memory)`, where the
  overhead is a C call, plus an OpenMP fork/join when the loop is long enough to be parallel
  (the C emitter's threshold), compute divides the operations by the per-thread rate times the
  threads used, and memory charges each operand's first read of every element at DRAM
  bandwidth (cache bandwidth when the operand fits in the last-level cache), re-reads at cache
  bandwidth, and the writes likewise. Free instructions (parameters, constants, tuples,
  bitcasts, row-major reshapes: `kernels.is_free`) launch nothing and cost nothing.
- The priority of a producer (XLA's `EstimateRunTimesForPriorityFusion`): the time of the
  producer and its consumers as they are, minus the time of the consumers with the producer
  fused into each of them (duplicated when there are several).

The constants come from `calibration` (a short measured probe, cached) or are passed in;
`DEFAULT_CONSTANTS` were measured on the reference machine (2-core AMD EPYC, AVX-512).
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hlofuse.fusion.graph import Graph, Node
from hlofuse.fusion.kernels import is_free, list_kernels
from hlofuse.fusion.module_graph import ModuleGraph
from hlofuse.fusion.properties import fusion_outputs, is_elementwise_op
from hlofuse.ir.hlo import Module
from hlofuse.ir.ops import Op, OpKind
from hlofuse.ir.shapes import Shape


@dataclass(frozen=True, slots=True)
class MachineConstants:
    """What the model knows about the machine (seconds, bytes, operations)."""

    threads: int  # OpenMP threads a parallel kernel uses
    call_overhead: float  # s: calling one kernel (C call, loop set-up)
    parallel_overhead: float  # s: an OpenMP fork/join on top of the call
    op_rate: float  # cheap float operations per second on one thread (vectorised)
    transcendental_ops: float  # exp, log, sin, ... in cheap operations (per element)
    divide_ops: float  # divide, sqrt, remainder in cheap operations
    memory_bandwidth: float  # B/s streaming from DRAM, one thread
    parallel_memory_bandwidth: float  # B/s streaming from DRAM, all threads
    cache_bandwidth: float  # B/s per thread, data in cache
    cache_bytes: int  # last-level cache: smaller operands are read at cache bandwidth
    parallel_min_elements: int = 16384  # the C emitter's threshold for an OpenMP loop
    loop_iteration_overhead: float = 2e-8  # s per while iteration in the driver
    memory_compute_overlap: float = 0.95  # XLA's priority-fusion value
    source: str = "default"  # "default", "measured" or "injected"


# Measured by the probe on the reference machine when it was quiet (parallel overhead: the
# median of several quiet runs), rounded.
DEFAULT_CONSTANTS = MachineConstants(
    threads=2, call_overhead=2e-9, parallel_overhead=1.5e-6, op_rate=9e10,
    transcendental_ops=280.0, divide_ops=9.4, memory_bandwidth=7.5e9,
    parallel_memory_bandwidth=9.5e9, cache_bandwidth=1.1e11, cache_bytes=32 << 20)

# Cost in cheap operations of ops whose C spelling is a libm call or a divider instruction.
# (The op table's `expensive` flag is XLA's recompute rule, not a cost: sine is not on it.)
TRANSCENDENTAL_OPS = frozenset({
    Op.ATAN2, Op.CBRT, Op.COSINE, Op.ERF, Op.EXPONENTIAL, Op.EXPONENTIAL_MINUS_ONE, Op.LOG,
    Op.LOG_PLUS_ONE, Op.LOGISTIC, Op.SINE, Op.TAN, Op.TANH,
})
DIVISION_OPS = frozenset({Op.DIVIDE, Op.REMAINDER, Op.SQRT, Op.RSQRT})
# Data movement: index arithmetic only, folded into the loads.
_MOVEMENT = frozenset({Op.BITCAST, Op.BROADCAST, Op.RESHAPE, Op.TRANSPOSE, Op.SLICE,
                       Op.REVERSE, Op.COPY, Op.PARAMETER, Op.CONSTANT, Op.TUPLE,
                       Op.GET_TUPLE_ELEMENT})
# Per output element of a library call: Threefry is 20 rounds of a few integer operations.
LIBRARY_OPS_PER_ELEMENT = 100.0


@functools.cache
def _elements(shape: Shape) -> int:
    return sum(leaf.num_elements for leaf in shape.leaves() if leaf.is_array)


@functools.cache
def _bytes(shape: Shape) -> int:
    return sum(leaf.byte_size for leaf in shape.leaves() if leaf.is_array)


@functools.cache
def _shape_lanes(shape: Shape) -> float:
    widest = max((leaf.dtype.itemsize for leaf in shape.leaves() if leaf.is_array), default=4)
    return max(1.0, widest / 4)


def _lane_factor(node: Node) -> float:
    """8-byte types fill half the vector lanes."""
    return _shape_lanes(node.shape)


def reducer_ops(computation: Graph, constants: MachineConstants) -> float:
    """Cheap operations of one application of a reducer (at least one)."""
    return max(1.0, sum(_op_cost_per_element(n, constants) for n in computation.nodes))


def _op_cost_per_element(node: Node, constants: MachineConstants) -> float:
    op = node.op
    if op in _MOVEMENT:
        return 0.0
    if op in TRANSCENDENTAL_OPS:
        return constants.transcendental_ops
    if op is Op.POWER:
        return 2 * constants.transcendental_ops
    if op in DIVISION_OPS:
        return constants.divide_ops
    return 1.0


def operation_count(node: Node, constants: MachineConstants) -> float:
    """Cheap operations to compute one element of `node`'s result."""
    op = node.op
    if op in (Op.REDUCE, Op.REDUCE_WINDOW):
        reads = read_factor(node, 0)
        return reads * reducer_ops(node.calls[0], constants) * _lane_factor(node)
    if op is Op.DOT:
        return 2 * read_factor(node, 0) * _lane_factor(node)
    if op.definition.kind is OpKind.OPAQUE:
        return LIBRARY_OPS_PER_ELEMENT
    return _op_cost_per_element(node, constants) * _lane_factor(node)


def read_factor(user: Node, index: int) -> float:
    """Elements of operand `index` that computing one element of `user` reads (XLA's
    operand utilisation divided out per output element)."""
    op = user.op
    operand = user.operands[index]
    out = max(1, _elements(user.shape))
    if op is Op.REDUCE:
        half = len(user.operands) // 2
        if index >= half:
            return 1.0  # the initial value
        return _elements(operand.shape) / max(1, _elements(user.shape.leaves()[0]))
    if op is Op.REDUCE_WINDOW:
        window = user.attrs["window"]
        return float(math.prod(window.size)) if index == 0 else 1.0  # type: ignore[attr-defined]
    if op is Op.CONCATENATE:
        return _elements(operand.shape) / out
    if op is Op.PAD:
        return _elements(operand.shape) / out if index == 0 else 1.0
    if op is Op.DYNAMIC_UPDATE_SLICE:
        return _elements(operand.shape) / out if index == 1 else 1.0
    if op is Op.DOT:
        contracting = user.ints("lhs_contracting_dims") if index == 0 else \
            user.ints("rhs_contracting_dims")
        return float(math.prod(operand.shape.dims[d] for d in contracting))
    if op.definition.kind is OpKind.OPAQUE:
        return _elements(operand.shape) / out
    return 1.0


def _is_aligned_read(user: Node, index: int, operand: Node) -> bool:
    """An element-wise user reads its operand at its own index."""
    return is_elementwise_op(user) and operand.shape.dims == user.shape.dims


@dataclass(frozen=True, slots=True)
class KernelProfile:
    """What one kernel does, before it is priced.

    Reads of each input (a kernel operand) are split: `aligned` reads happen at the index of
    the output element being computed (through element-wise ops only), so several of them
    are one read (the emitter computes a value once per index); `other` reads (through a
    broadcast, a reduce, a slice, ...) add up."""

    aligned: Mapping[Node, float]  # elements read at the output's own index
    other: Mapping[Node, float]  # elements read elsewhere
    operations: float  # cheap operations
    bytes_written: float
    loop_elements: int  # the parallel loop's trip count (the largest output)
    is_free: bool = False

    def reads(self) -> dict[Node, float]:
        """Elements read of each input."""
        total = dict(self.aligned)
        for node, count in self.other.items():
            total[node] = total.get(node, 0.0) + count
        return total

    def bytes_read(self) -> float:
        """Bytes moved from the inputs, each element counted once per read."""
        return sum(count * _item_bytes(node) for node, count in self.reads().items())


FREE_PROFILE = KernelProfile({}, {}, 0.0, 0.0, 0, True)


def _item_bytes(node: Node) -> float:
    return _bytes(node.shape) / max(1, _elements(node.shape))


def _scalar_once(aligned: float, other: float) -> tuple[float, float]:
    """A one-element value is loop invariant: computed (or loaded) once per call."""
    if aligned > 0:
        return min(aligned, 1.0), 0.0
    return 0.0, min(other, 1.0)


def profile_kernel(node: Node, constants: MachineConstants) -> KernelProfile:
    """The profile of `node`'s kernel: a fusion's fused computation, or the instruction."""
    if not node.is_fusion and is_free(node):
        return FREE_PROFILE
    fusion = node if node.is_fusion else None

    def operands(inst: Node) -> list[Node]:
        if fusion is None:
            return list(inst.operands)
        return [fusion.operands[o.parameter_number] if o.op is Op.PARAMETER else o
                for o in inst.operands]

    outputs = ([fusion.operands[o.parameter_number] if o.op is Op.PARAMETER else o
                for o in fusion_outputs(fusion)] if fusion is not None else [node])
    inside = (lambda n: n.parent is fusion.fused) if fusion is not None else \
        (lambda n: n is node)
    order = ([n for n in fusion.fused.post_order() if n.op is not Op.PARAMETER]
             if fusion is not None else [node])
    aligned: dict[Node, float] = defaultdict(float)
    other: dict[Node, float] = defaultdict(float)
    for output in outputs:
        aligned[output] = max(aligned[output], float(_elements(output.shape)))
    operations = 0.0
    # Users before operands: each element a user computes reads `read_factor` elements of
    # each operand.
    for inst in reversed(order):
        a, o = aligned.get(inst, 0.0), other.get(inst, 0.0)
        if _elements(inst.shape) <= 1:
            a, o = _scalar_once(a, o)
        count = a + o
        operations += count * operation_count(inst, constants)
        for i, operand in enumerate(operands(inst)):
            if _is_aligned_read(inst, i, operand):
                # Read at the user's own indices: users of one shape share their evaluations
                # (a value is computed once per index), so fan-out does not multiply them.
                aligned[operand] = max(aligned[operand], a)
                other[operand] = max(other[operand], o)
            else:
                other[operand] += count * _read_factor_in(inst, i, outputs, inside)
    reads_aligned: dict[Node, float] = {}
    reads_other: dict[Node, float] = {}
    for source in set(aligned) | set(other):
        if inside(source):
            continue
        a, o = aligned.get(source, 0.0), other.get(source, 0.0)
        if _elements(source.shape) <= 1:
            a, o = _scalar_once(a, o)
        if a > 0:
            reads_aligned[source] = a
        if o > 0:
            reads_other[source] = o
    written = sum(_written_bytes(o, inside) for o in outputs)
    loop = max((_elements(o.shape) for o in outputs), default=0)
    return KernelProfile(reads_aligned, reads_other, operations, float(written), loop)


def _read_factor_in(inst: Node, index: int, outputs: list[Node],
                    inside: Callable[[Node], bool]) -> float:
    """`read_factor`, except that a dynamic-update-slice at the root updates an input buffer in
    place: it neither reads nor writes what it keeps."""
    if inst.op is Op.DYNAMIC_UPDATE_SLICE and index == 0 and inst in outputs \
            and not inside(inst.operands[0]):
        return 0.0
    return read_factor(inst, index)


def _written_bytes(output: Node, inside: Callable[[Node], bool]) -> float:
    if output.op is Op.DYNAMIC_UPDATE_SLICE and inside(output) \
            and not inside(output.operands[0]):
        return float(_bytes(output.operands[1].shape))
    return float(_bytes(output.shape))


def compose(consumer: KernelProfile, producer: KernelProfile, node: Node) -> KernelProfile:
    """The profile of the consumer's kernel with the producer (`node`, one of its inputs)
    computed inside it instead of read: the producer is evaluated wherever the consumer read
    it, so its work and reads scale with those reads, and what both read at the output's
    index is read once. The consumer's outputs and loop stay."""
    elements = max(1, _elements(node.shape))
    a, o = consumer.aligned.get(node, 0.0), consumer.other.get(node, 0.0)
    if elements <= 1:
        a, o = _scalar_once(a, o)
    at_index, elsewhere = a / elements, o / elements
    aligned = {k: v for k, v in consumer.aligned.items() if k is not node}
    other = {k: v for k, v in consumer.other.items() if k is not node}
    for source, count in producer.aligned.items():
        aligned[source] = max(aligned.get(source, 0.0), count * at_index)
        if elsewhere:
            other[source] = other.get(source, 0.0) + count * elsewhere
    for source, count in producer.other.items():
        other[source] = other.get(source, 0.0) + count * (at_index + elsewhere)
    for reads in (aligned, other):
        for source in [k for k, v in reads.items() if v <= 0]:
            del reads[source]
    operations = consumer.operations + producer.operations * (at_index + elsewhere)
    return KernelProfile(aligned, other, operations, consumer.bytes_written,
                         consumer.loop_elements)


@dataclass(frozen=True, slots=True)
class KernelTime:
    """A priced profile (seconds)."""

    total: float
    overhead: float
    compute: float
    memory: float
    is_parallel: bool


def _node_key(node: Node) -> tuple[object, ...]:
    """Changes whenever what `node`'s kernel computes changes."""
    return (node.fused.version if node.is_fusion else -1, *node.operands)


class CostModel:
    """Prices kernels with one set of machine constants; profiles are cached per instruction
    until it changes (priority fusion asks for the same ones many times)."""

    def __init__(self, constants: MachineConstants = DEFAULT_CONSTANTS) -> None:
        self.constants = constants
        self._profiles: dict[Node, tuple[tuple[object, ...], KernelProfile]] = {}

    def profile(self, node: Node) -> KernelProfile:
        key = _node_key(node)
        cached = self._profiles.get(node)
        if cached is None or cached[0] != key:
            cached = (key, profile_kernel(node, self.constants))
            self._profiles[node] = cached
        return cached[1]

    def fused_profile(self, producer: Node, consumer: Node) -> KernelProfile:
        """`consumer`'s kernel with `producer` (one of its operands) fused into it."""
        inner = self.profile(producer)
        if inner.is_free:
            inner = profile_kernel_forced(producer, self.constants)
        outer = self.profile(consumer)
        if outer.is_free:
            outer = profile_kernel_forced(consumer, self.constants)
        return compose(outer, inner, producer)

    def price(self, profile: KernelProfile) -> KernelTime:
        c = self.constants
        if profile.is_free:
            return KernelTime(0.0, 0.0, 0.0, 0.0, False)
        is_parallel = c.threads > 1 and profile.loop_elements >= c.parallel_min_elements
        threads = c.threads if is_parallel else 1
        overhead = c.call_overhead + (c.parallel_overhead if is_parallel else 0.0)
        compute = profile.operations / (c.op_rate * threads)
        dram = c.parallel_memory_bandwidth if is_parallel else c.memory_bandwidth
        cache = c.cache_bandwidth * threads
        memory = 0.0
        for node, count in profile.reads().items():
            size = float(_bytes(node.shape))
            touched = count * _item_bytes(node)
            first = min(size, touched)
            memory += first / (cache if size <= c.cache_bytes else dram)
            memory += (touched - first) / cache
        memory += profile.bytes_written / (cache if profile.bytes_written <= c.cache_bytes
                                           else dram)
        total = overhead + compute + memory - c.memory_compute_overlap * min(compute, memory)
        return KernelTime(total, overhead, compute, memory, is_parallel)

    def time(self, node: Node) -> float:
        """Seconds one call of `node`'s kernel takes (0 for a free instruction)."""
        return self.price(self.profile(node)).total

    def fused_time(self, producer: Node, consumer: Node) -> float:
        """Seconds of `consumer`'s kernel with `producer` fused into it."""
        return self.price(self.fused_profile(producer, consumer)).total


def profile_kernel_forced(node: Node, constants: MachineConstants) -> KernelProfile:
    """The profile of a free instruction (a row-major reshape) as if it were computed: what it
    costs once it is part of a kernel."""
    a = float(_elements(node.shape))
    aligned: dict[Node, float] = {}
    other: dict[Node, float] = {}
    for i, operand in enumerate(node.operands):
        target = aligned if _is_aligned_read(node, i, operand) else other
        target[operand] = target.get(operand, 0.0) + a * read_factor(node, i)
    return KernelProfile(aligned, other, 0.0, float(_bytes(node.shape)), _elements(node.shape))


@dataclass(frozen=True, slots=True)
class KernelEstimate:
    """The model's view of one kernel of a module."""

    name: str
    computation: str
    time: KernelTime
    profile: KernelProfile


def estimate_module(module: Module, constants: MachineConstants = DEFAULT_CONSTANTS
                    ) -> tuple[list[KernelEstimate], dict[str, float]]:
    """Every kernel's estimate, and for each while loop the estimated seconds per iteration
    (its body's and condition's kernels, nested loops' iterations not included, plus
    `loop_iteration_overhead`)."""
    graphs = ModuleGraph.from_module(module)
    model = CostModel(constants)
    nodes = {(g.name, n.name): n for g in graphs.graphs for n in g.nodes}
    kernels, loops = list_kernels(module)
    estimates = []
    per_iteration = {loop.name: constants.loop_iteration_overhead for loop in loops}
    for kernel in kernels:
        profile = model.profile(nodes[(kernel.computation, kernel.name)])
        priced = model.price(profile)
        estimates.append(KernelEstimate(kernel.name, kernel.computation, priced, profile))
        if kernel.loop is not None:
            per_iteration[kernel.loop] += priced.total
    return estimates, per_iteration
