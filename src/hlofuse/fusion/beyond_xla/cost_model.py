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

The constants are always passed in: the layer above fusion measures the machine
(`toolchain.calibration`, a short probe, cached), turns the figures into constants
(`constants_from_figures`) and hands them to the strategy (`run_strategy(..., constants=)`),
so fusion never runs a compiler itself. `DEFAULT_CONSTANTS` were measured on the reference
machine (2-core AMD EPYC, AVX-512); priority fusion uses them when it is given none.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from hlofuse.fusion.graphs.graph import Graph, Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph
from hlofuse.fusion.kernels import is_free, list_kernels
from hlofuse.fusion.legality.properties import fusion_outputs, is_elementwise_op
from hlofuse.ir.hlo import Module
from hlofuse.ir.ops import CostClass, Op, OpKind
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


# Measured by the probe on the reference machine when it was quiet, rounded; the fork/join
# (0.6 us quiet) rounded up, since it grows quickly when other processes want the cores.
DEFAULT_CONSTANTS = MachineConstants(
    threads=2, call_overhead=2e-9, parallel_overhead=1.5e-6, op_rate=9e10,
    transcendental_ops=280.0, divide_ops=9.4, memory_bandwidth=7.5e9,
    parallel_memory_bandwidth=9.5e9, cache_bandwidth=1.1e11, cache_bytes=32 << 20)


def constants_from_figures(figures: Mapping[str, float] | None) -> MachineConstants:
    """The constants for a machine's measured figures (the probe's names, `cache_bytes`
    optional); `DEFAULT_CONSTANTS` when there are none."""
    if figures is None:
        return DEFAULT_CONSTANTS
    return dataclasses.replace(
        DEFAULT_CONSTANTS, threads=int(figures["threads"]),
        call_overhead=figures["call_overhead"], parallel_overhead=figures["parallel_overhead"],
        op_rate=figures["op_rate"], transcendental_ops=figures["transcendental_ops"],
        divide_ops=figures["divide_ops"], cache_bandwidth=figures["cache_bandwidth"],
        memory_bandwidth=figures["memory_bandwidth"],
        parallel_memory_bandwidth=max(figures["parallel_memory_bandwidth"],
                                      figures["memory_bandwidth"]),
        cache_bytes=int(figures.get("cache_bytes", DEFAULT_CONSTANTS.cache_bytes)),
        source="measured")


# Per output element of a library call: Threefry is 20 rounds of a few integer operations.
LIBRARY_OPS_PER_ELEMENT = 100.0


@functools.lru_cache(maxsize=4096)
def _elements(shape: Shape) -> int:
    return sum(leaf.num_elements for leaf in shape.leaves() if leaf.is_array)


@functools.lru_cache(maxsize=4096)
def _bytes(shape: Shape) -> int:
    return sum(leaf.byte_size for leaf in shape.leaves() if leaf.is_array)


@functools.lru_cache(maxsize=4096)
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
    # The op table's cost class (not its `expensive` flag, XLA's recompute rule: sine is
    # not expensive there, but it is a libm call here).
    cost = node.op.definition.cost
    if cost is CostClass.FREE:
        return 0.0
    if cost is CostClass.TRANSCENDENTAL:
        return constants.transcendental_ops
    if cost is CostClass.TWO_TRANSCENDENTALS:
        return 2 * constants.transcendental_ops
    if cost is CostClass.DIVISION:
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


# Where in a kernel an element is read: () is the index of the output element being computed;
# a read through a broadcast, slice, transpose, reduce, ... starts a new context, named by the
# edges taken. Reads in one context are at the same indices, so a value read there by several
# element-wise users is computed once (the emitter caches a value per index); reads in
# different contexts add up. At most `MAX_CONTEXTS` are kept per value, the rest summed.
Context = tuple[object, ...]
Reads = Mapping[Context, float]
AT_OUTPUT: Context = ()
MAX_CONTEXTS = 8


@dataclass(frozen=True, slots=True)
class KernelProfile:
    """What one kernel does, before it is priced: how many elements of each input (kernel
    operand) it reads, per context (see `Context`), its cheap operations, the bytes it writes,
    and the trip count of its parallel loop (the largest output)."""

    contexts: Mapping[Node, Reads]
    operations: float
    bytes_written: float
    loop_elements: int
    is_free: bool = False
    # The input a dynamic-update-slice at the root updates in place (only the window is
    # written), and the bytes that saves.
    in_place: Node | None = None
    in_place_saved_bytes: float = 0.0

    def reads(self) -> dict[Node, float]:
        """Elements read of each input."""
        return {node: sum(by_context.values()) for node, by_context in self.contexts.items()}

    def reads_at_output(self, node: Node) -> float:
        """Elements of `node` read at the index of the output element being computed."""
        return self.contexts.get(node, {}).get(AT_OUTPUT, 0.0)

    def bytes_read(self) -> float:
        """Bytes moved from the inputs, each element counted once per read."""
        return sum(count * _item_bytes(node) for node, count in self.reads().items())


FREE_PROFILE = KernelProfile({}, 0.0, 0.0, 0, True)


def _item_bytes(node: Node) -> float:
    return _bytes(node.shape) / max(1, _elements(node.shape))


def _loop_invariant(reads: dict[Context, float]) -> dict[Context, float]:
    """A one-element value is loop invariant: computed (or loaded) once per call, if at all."""
    if not any(count > 0 for count in reads.values()):
        return {}
    return {AT_OUTPUT if AT_OUTPUT in reads else next(iter(reads)): 1.0}


def _merge(target: dict[Context, float], context: Context, count: float,
           same_index: bool) -> None:
    """Add reads in `context`; reads at the same indices are one (max), others add up."""
    old = target.get(context)
    if old is None:
        target[context] = count
    else:
        target[context] = max(old, count) if same_index else old + count


def _bounded(reads: dict[Context, float]) -> dict[Context, float]:
    if len(reads) <= MAX_CONTEXTS:
        return reads
    ordered = sorted(reads.items(), key=lambda item: -item[1])
    kept = dict(ordered[:MAX_CONTEXTS - 1])
    kept[(object(),)] = sum(count for _, count in ordered[MAX_CONTEXTS - 1:])
    return kept


def profile_kernel(node: Node, constants: MachineConstants,
                   op_cost: Callable[[Node, MachineConstants], float] | None = None
                   ) -> KernelProfile:
    """The profile of `node`'s kernel: a fusion's fused computation, or the instruction."""
    if not node.is_fusion and is_free(node):
        return FREE_PROFILE
    fusion = node if node.is_fusion else None

    def outer(inst: Node) -> Node:
        return fusion.operands[inst.parameter_number] \
            if fusion is not None and inst.op is Op.PARAMETER else inst

    outputs = [outer(o) for o in fusion_outputs(fusion)] if fusion is not None else [node]
    inside: Callable[[Node], bool] = (
        (lambda n: n.parent is fusion.fused and n.op is not Op.PARAMETER) if fusion is not None
        else (lambda n: n is node))
    order = ([n for n in fusion.fused.post_order() if n.op is not Op.PARAMETER]
             if fusion is not None else [node])
    evaluations: dict[Node, dict[Context, float]] = defaultdict(dict)
    for output in outputs:
        _merge(evaluations[output], AT_OUTPUT, float(_elements(output.shape)), True)
    operations = 0.0
    # Users before operands: each element a user computes reads `read_factor` elements of
    # each operand, at its own index (element-wise) or in a new context.
    for inst in reversed(order):
        counts = evaluations.pop(inst, {})
        if _elements(inst.shape) <= 1:
            counts = _loop_invariant(counts)
        operations += sum(counts.values()) * (op_cost or operation_count)(inst, constants)
        for i, operand in enumerate(inst.operands):
            target = evaluations[outer(operand)]
            if _is_aligned_read(inst, i, operand):
                for context, count in counts.items():
                    _merge(target, context, count, True)
                continue
            factor = _read_factor_in(inst, i, outputs, inside)
            if factor <= 0:
                continue
            for context, count in counts.items():
                _merge(target, (inst, i, context), count * factor, False)
        for operand in inst.operands:
            key = outer(operand)
            evaluations[key] = _bounded(evaluations[key])
    contexts: dict[Node, Reads] = {}
    for source, counts in evaluations.items():
        if inside(source) or not counts:
            continue
        contexts[source] = _loop_invariant(counts) if _elements(source.shape) <= 1 else counts
    written = sum(_written_bytes(o, inside) for o in outputs)
    loop = max((_elements(o.shape) for o in outputs), default=0)
    updated = [o for o in outputs if _written_bytes(o, inside) < _bytes(o.shape)]
    if not updated:
        return KernelProfile(contexts, operations, float(written), loop)
    saved = float(_bytes(updated[0].shape)) - _written_bytes(updated[0], inside)
    return KernelProfile(contexts, operations, float(written), loop,
                         in_place=outer(updated[0].operands[0]), in_place_saved_bytes=saved)


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
    it, so its work and reads scale with those reads; what it reads at its own output index
    it reads in the context the consumer read it in, where the consumer's own reads of the
    same input at the same indices are the same reads. The consumer's outputs and loop stay."""
    elements = max(1, _elements(node.shape))
    how = dict(consumer.contexts.get(node, {}))
    written = consumer.bytes_written
    if consumer.in_place is node:
        # The buffer updated in place is computed now: every element is written, the ones
        # outside the window read from the producer at their own index.
        how[AT_OUTPUT] = max(how.get(AT_OUTPUT, 0.0), float(elements))
        written += consumer.in_place_saved_bytes
    if elements <= 1:
        how = _loop_invariant(how)
    # The consumer's own reads are shared, not copied: only the inputs the producer reads
    # get new mappings.
    contexts = dict(consumer.contexts)
    contexts.pop(node, None)
    for source, counts in producer.contexts.items():
        target = dict(contexts.get(source, {}))
        for outer_context, outer_count in how.items():
            scale = outer_count / elements
            for inner_context, count in counts.items():
                if inner_context == AT_OUTPUT:
                    _merge(target, outer_context, count * scale, True)
                else:
                    _merge(target, (outer_context, inner_context), count * scale, False)
        target = _loop_invariant(target) if _elements(source.shape) <= 1 else _bounded(target)
        if target:
            contexts[source] = target
    operations = consumer.operations + producer.operations * sum(how.values()) / elements
    in_place = consumer.in_place if consumer.in_place is not node else None
    return KernelProfile(contexts, operations, written, consumer.loop_elements, in_place=in_place,
                         in_place_saved_bytes=consumer.in_place_saved_bytes if in_place else 0.0)


@dataclass(frozen=True, slots=True)
class KernelTime:
    """A priced profile (seconds)."""

    total: float
    overhead: float
    compute: float
    memory: float
    is_parallel: bool


def node_key(node: Node) -> tuple[object, ...]:
    """Changes whenever what `node`'s kernel computes changes."""
    return (node.fused.version if node.is_fusion else -1, *node.operands)


class CostModel:
    """Prices kernels with one set of machine constants. Profiles and times are cached per
    instruction (and per producer-consumer pair) until either changes: priority fusion asks
    for the same ones many times."""

    def __init__(self, constants: MachineConstants = DEFAULT_CONSTANTS) -> None:
        self.constants = constants
        # Operations per element of an instruction (`xla-gpu` counts XLA's GPU flops).
        self.op_cost: Callable[[Node, MachineConstants], float] = operation_count
        self._profiles: dict[Node, tuple[tuple[object, ...], KernelProfile, float]] = {}
        self._fused: dict[tuple[Node, Node], tuple[tuple[object, ...], KernelProfile, float]] = {}
        self._sizes: dict[Node, tuple[float, float]] = {}

    def _entry(self, node: Node) -> tuple[tuple[object, ...], KernelProfile, float]:
        key = node_key(node)
        cached = self._profiles.get(node)
        if cached is None or cached[0] != key:
            profile = self._new_profile(node)
            cached = (key, profile, self.price(profile).total)
            self._profiles[node] = cached
        return cached

    def _fused_entry(self, producer: Node, consumer: Node
                     ) -> tuple[tuple[object, ...], KernelProfile, float]:
        key = (*node_key(producer), None, *node_key(consumer))
        cached = self._fused.get((producer, consumer))
        if cached is None or cached[0] != key:
            profile = self._new_fused_profile(producer, consumer)
            cached = (key, profile, self.price(profile).total)
            self._fused[(producer, consumer)] = cached
        return cached

    def _new_profile(self, node: Node) -> KernelProfile:
        """`node`'s kernel, profiled afresh (the caches above hold what this gives)."""
        return profile_kernel(node, self.constants, self.op_cost)

    def _new_fused_profile(self, producer: Node, consumer: Node) -> KernelProfile:
        inner = self.profile(producer)
        if inner.is_free:
            inner = profile_kernel_forced(producer, self.constants)
        outer = self.profile(consumer)
        if outer.is_free:
            outer = profile_kernel_forced(consumer, self.constants)
        return compose(outer, inner, producer)

    def profile(self, node: Node) -> KernelProfile:
        return self._entry(node)[1]

    def fused_profile(self, producer: Node, consumer: Node) -> KernelProfile:
        """`consumer`'s kernel with `producer` (one of its operands) fused into it."""
        return self._fused_entry(producer, consumer)[1]

    def remember(self, node: Node, profile: KernelProfile) -> None:
        """`node` (a fusion just grown) computes what `profile` describes: a fused profile
        stands for its kernel, so growing a fusion does not walk it again."""
        self._profiles[node] = (node_key(node), profile, self.price(profile).total)

    def _size(self, node: Node) -> tuple[float, float]:
        """(bytes, bytes per element) of `node`'s value."""
        found = self._sizes.get(node)
        if found is None:
            found = (float(_bytes(node.shape)), _item_bytes(node))
            self._sizes[node] = found
        return found

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
            size, item = self._size(node)
            touched = count * item
            first = min(size, touched)
            memory += first / (cache if size <= c.cache_bytes else dram)
            memory += (touched - first) / cache
        memory += profile.bytes_written / (cache if profile.bytes_written <= c.cache_bytes
                                           else dram)
        total = overhead + compute + memory - c.memory_compute_overlap * min(compute, memory)
        return KernelTime(total, overhead, compute, memory, is_parallel)

    def time(self, node: Node) -> float:
        """Seconds one call of `node`'s kernel takes (0 for a free instruction)."""
        return self._entry(node)[2]

    def fused_time(self, producer: Node, consumer: Node) -> float:
        """Seconds of `consumer`'s kernel with `producer` fused into it."""
        return self._fused_entry(producer, consumer)[2]


def profile_kernel_forced(node: Node, constants: MachineConstants) -> KernelProfile:
    """The profile of a free instruction (a row-major reshape) as if it were computed: what it
    costs once it is part of a kernel."""
    contexts: dict[Node, dict[Context, float]] = {}
    count = float(_elements(node.shape))
    for i, operand in enumerate(node.operands):
        context = AT_OUTPUT if _is_aligned_read(node, i, operand) else (node, i, AT_OUTPUT)
        _merge(contexts.setdefault(operand, {}), context, count * read_factor(node, i), False)
    return KernelProfile(contexts, 0.0, float(_bytes(node.shape)), _elements(node.shape))


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
