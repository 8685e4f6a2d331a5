"""XLA's GPU performance model (`gpu_performance_model.cc`, `gpu_performance_model_base.cc`)
over a named device description: the time of one kernel launch, as `xla-gpu`'s priority
fusion asks for it.

What a kernel does is the CPU model's `KernelProfile` (`cost_model.py`: elements read of each
operand with XLA's operand utilisation, shared reads at one index counted once, operations,
bytes written, the size of its loop); here it is priced the way XLA prices it on a GPU:

- launch: XLA's `kKernelLaunchOverhead`, 1 us per kernel; free instructions cost nothing;
- launch dimensions: one thread per element of the largest output, 128 threads per block
  (`EstimateFusionLaunchDimensions`' estimate), except for a kernel whose hero is a tiled
  reduction, which launches what the reduction emitter launches (`reduction_launch`), and
  for one whose outputs are dynamic-update-slices, taken to be in place, which launches over
  the update (`kernel_dynamic_update_slice`);
- compute (`ComputeTime`, `CalculateEffectiveFlopsPerNs`): flops over
  `min(blocks, cores) * min(threads per block, FPUs per core) * 2 * clock`; the flops are
  XLA's cost-analysis figures (`GpuHloCostAnalysis`: an element-wise op costs its per-op
  profile per element, `flops_per_element` below). A fusion's flops weight each fused
  instruction by its utilisation (`FusionCalculateUtilizations`, with
  `count_multiple_input_accesses` on, as the GPU compiler runs priority fusion: a broadcast
  uses each operand element once per output element it feeds, so a one-element key chain
  broadcast into several places is counted once per element per place), and a producer fused
  into a consumer costs its flops times the consumer's utilisation of it plus the consumer's
  (`EstimateRunTimeForFusion`), `xla_flops` and `xla_utilisation` below;
- memory (`ReadTimeWithDRAMHeuristic`, `WriteTime`): each operand's first read of each byte
  at DRAM bandwidth, re-reads at DRAM bandwidth times 2.5 when the operand fits in L2 and
  times 8 more when it fits in the L1 of all cores (`kL2CacheSpeedup`, `kL1CacheSpeedup`,
  2 KiB per core); both limited by the blocks in flight (`AdjustBandwidth`: one 32-byte
  transaction per clock per block), reads assumed coalesced; writes at DRAM bandwidth; the
  base of a dynamic-update-slice that is an output is not read (it aliases the output:
  `HandleDynamicUpdateSlice`, `FusionProcessOutputBytesAccessed`);
- `exec = compute + memory - 0.95 * min(compute, memory)` (`CombineComputeAndMemoryAccessTime`);
- in XLA's arithmetic: each time an `absl::Duration` (whole quarter nanoseconds, rounded where
  XLA converts), single precision where XLA computes in `float`, whole flops, bytes and flops
  per nanosecond; a concatenate costs `HandleConcatenate`'s flops; a fused kernel shares only
  the producer's operands, each read at its first operand slot (`GetSharedOperandBytesAccessed`).

The priority of a producer is then XLA's `EstimateRunTimesForPriorityFusion`, computed by the
priority-fusion queue with these times.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from hlofuse.fusion.beyond_xla.cost_model import (
    DEFAULT_CONSTANTS,
    CostModel,
    KernelProfile,
    KernelTime,
    MachineConstants,
    read_factor,
)
from hlofuse.fusion.graphs.graph import Node
from hlofuse.fusion.legality.properties import (
    WARP_SIZE,
    is_elementwise_op,
)
from hlofuse.fusion.xla_gpu.devices import GpuDevice
from hlofuse.fusion.xla_gpu.launch_dimensions import THREADS_PER_BLOCK, kernel_launch
from hlofuse.ir.attrs import Window
from hlofuse.ir.dtypes import DType
from hlofuse.ir.ops import Op

KERNEL_LAUNCH_OVERHEAD = 1e-6  # s, kKernelLaunchOverhead
TICKS_PER_SECOND = 4_000_000_000  # absl::Duration counts quarter nanoseconds
LAUNCH_TICKS = 4000  # kKernelLaunchOverhead as a Duration


_SINGLE = struct.Struct("<f")


def _f32(value: float) -> float:
    """`value` rounded to single precision: XLA's performance model computes in `float`. A
    sum, product or quotient of two such values computed in double and rounded again is the
    single-precision one (53 >= 2 * 24 + 2 bits: the double rounding is innocuous), so each
    single-precision operation below is `_f32` of the double one."""
    try:
        rounded: float = _SINGLE.unpack(_SINGLE.pack(value))[0]
    except OverflowError:  # beyond the largest float: infinite, as in single precision
        return math.copysign(math.inf, value)
    return rounded


def duration_ticks(seconds: float) -> int:
    """`absl::Seconds(seconds)` in quarter nanoseconds: rounded to the nearest, halves away
    from zero (absl's ScaleDouble rounds with std::round)."""
    ticks = seconds * TICKS_PER_SECOND
    return int(math.floor(ticks + 0.5)) if ticks >= 0 else -int(math.floor(-ticks + 0.5))


def scale_duration(ticks: int, factor: float) -> int:
    """`absl::Duration * double` (absl's ScaleDouble): whole seconds and ticks are scaled
    apart, the ticks' product is divided by the ticks per second, its fraction multiplied
    back and rounded half away from zero. The round trip through seconds can land half a
    tick below the exact product: 130 ticks * 0.95 gives 123, not 124."""
    hi, lo = divmod(ticks, TICKS_PER_SECOND)
    hi_frac, hi_int = math.modf(hi * factor)
    lo_frac, lo_int = math.modf(lo * factor / TICKS_PER_SECOND + hi_frac)
    scaled = lo_frac * TICKS_PER_SECOND
    lo_ticks = int(math.floor(scaled + 0.5)) if scaled >= 0 else -int(math.floor(-scaled + 0.5))
    return (int(hi_int) + int(lo_int)) * TICKS_PER_SECOND + lo_ticks


L2_CACHE_SPEEDUP = 2.5  # kL2CacheSpeedup
L1_CACHE_SPEEDUP = 8.0  # kL1CacheSpeedup
L1_CACHE_SIZE_PER_SM = 2 * 1024  # bytes, kL1CacheSizePerSM
MEMORY_COMPUTE_PARALLELISM = 0.95  # kMemoryComputeParallelism
TRANSACTION_BYTES = 32  # per clock per block, AdjustBandwidth
# Flops per element of an element-wise op (GpuHloCostAnalysis with XLA's measured op profiles,
# `hlo_op_profiles_data.h`, sm_90: clock cycles per element); ops not in the table cost XLA's
# default, 3. Data movement (broadcast, slice, concatenate, ...) costs nothing.
DEFAULT_FLOPS_PER_ELEMENT = 3.0
_F32 = {Op.ADD: 7, Op.SUBTRACT: 7, Op.MULTIPLY: 3, Op.DIVIDE: 19, Op.ATAN2: 431, Op.CBRT: 178,
        Op.COSINE: 978, Op.EXPONENTIAL: 79, Op.EXPONENTIAL_MINUS_ONE: 190, Op.LOG: 166,
        Op.LOG_PLUS_ONE: 229, Op.RSQRT: 75, Op.SINE: 958, Op.SQRT: 75, Op.TANH: 467,
        Op.POWER: 510}
_F16 = {Op.ADD: 7, Op.SUBTRACT: 7, Op.MULTIPLY: 7, Op.DIVIDE: 43, Op.ATAN2: 451, Op.CBRT: 201,
        Op.COSINE: 997, Op.EXPONENTIAL: 102, Op.EXPONENTIAL_MINUS_ONE: 217, Op.LOG: 182,
        Op.LOG_PLUS_ONE: 245, Op.RSQRT: 95, Op.SINE: 993, Op.SQRT: 95, Op.TANH: 502,
        Op.POWER: 526}
_F64 = {Op.ADD: 15, Op.SUBTRACT: 15, Op.MULTIPLY: 15, Op.DIVIDE: 526, Op.ATAN2: 930,
        Op.CBRT: 586, Op.COSINE: 558, Op.EXPONENTIAL: 376, Op.EXPONENTIAL_MINUS_ONE: 712,
        Op.LOG: 815, Op.LOG_PLUS_ONE: 1259, Op.RSQRT: 277, Op.SINE: 554, Op.SQRT: 332,
        Op.TANH: 431, Op.POWER: 2205}
_INT32 = {Op.DIVIDE: 297, Op.MULTIPLY: 3, Op.POWER: 71}
_UINT32 = {Op.DIVIDE: 122, Op.MULTIPLY: 3, Op.POWER: 71}
_INT64 = {Op.DIVIDE: 685, Op.MULTIPLY: 11, Op.POWER: 253}
_PROFILES: dict[DType, dict[Op, int]] = {
    DType.F32: _F32, DType.F16: _F16, DType.BF16: _F16, DType.F64: _F64, DType.S32: _INT32,
    DType.U32: _UINT32, DType.S64: _INT64, DType.U64: _INT64,
}


def flops_per_element(node: Node, constants: MachineConstants | None = None) -> float:
    """XLA's GPU cost-analysis flops for one element of `node`'s result."""
    op = node.op
    if op in (Op.REDUCE, Op.REDUCE_WINDOW):
        reducer = sum(flops_per_element(n) for n in node.calls[0].nodes
                      if n.op is not Op.PARAMETER and is_elementwise_op(n))
        return read_factor(node, 0) * reducer
    if op is Op.DOT:
        return 2.0 * read_factor(node, 0)
    if op is Op.CONCATENATE:
        return concatenate_flops_per_element(node)
    if not is_elementwise_op(node) or op is Op.COPY:
        return 0.0
    dtype = node.shape.leaves()[0].dtype if node.shape.is_tuple else node.dtype
    return float(_PROFILES.get(dtype, {}).get(op, DEFAULT_FLOPS_PER_ELEMENT))


# GpuHloCostAnalysis::HandleConcatenate: a compare and a branch per element; when the
# concatenated dimension is not the major one and the first operand's extent along it is not a
# multiple of 32, warps cross operand boundaries and XLA prices the concatenate at 400 flops
# per element (tuned so that a concatenate is not fused into a compute-heavy consumer).
CONCATENATE_FLOPS = 6
DIVERGENT_CONCATENATE_FLOPS = 400


def concatenate_flops_per_element(node: Node) -> float:
    """XLA's flops per element of a concatenate (HandleConcatenate)."""
    (dimension,) = node.ints("dimensions")
    extent = node.operands[0].shape.dims[dimension]
    if dimension > 0 and extent % WARP_SIZE:
        return float(DIVERGENT_CONCATENATE_FLOPS)
    return float(CONCATENATE_FLOPS)


@dataclass(frozen=True, slots=True)
class GpuKernelProfile(KernelProfile):
    """A profile with the launch dimensions of a reduction kernel's emitter."""

    launch_dims: tuple[int, int] | None = None
    # Elements read of each kernel operand as XLA's cost analysis counts them (repeated reads
    # of a broadcast operand included); None: the profile's own reads.
    xla_reads: tuple[tuple[Node, float], ...] | None = None


def _elements(node: Node) -> int:
    shape = node.shape
    if not shape.is_tuple:  # most nodes: asked for millions of times by priority fusion
        return math.prod(shape.dims) if shape.is_array else 0
    return sum(leaf.num_elements for leaf in shape.leaves() if leaf.is_array)


def reduce_window_count(node: Node) -> int:
    """How often `HloCostAnalysis::HandleReduceWindow` applies the reducer: window elements
    less one per output element, or, for a scan (one windowed dimension, padded on both
    sides by one less than the output is long there, the window twice that plus one), the
    output's other elements plus the scan's length less one."""
    window = node.attrs["window"]
    assert isinstance(window, Window)
    count = math.prod(window.size)
    out_shape = node.shape.leaves()[0]
    out = out_shape.num_elements
    windowed = [d for d, size in enumerate(window.size) if size != 1]
    padded = [d for d in range(window.rank) if window.pad_low[d] or window.pad_high[d]]
    if len(windowed) == 1 and len(padded) == 1 and not node.shape.is_tuple:
        d = windowed[0]
        low, high = window.pad_low[d], window.pad_high[d]
        if low and high and low == high and window.size[d] == 2 * low + 1 \
                and low == out_shape.dims[d] - 1:
            length = out_shape.dims[d]
            return out // length + (length - 1)
    return (count - 1) * out


def instruction_flops(node: Node) -> float:
    """`_instruction_flops`, kept with the node: what it reads (the node's op, attributes,
    shape, called computation and its operands' shapes) stays as long as the node does."""
    found = node.memo.get("xla_flops")
    if found is None:
        found = node.memo["xla_flops"] = ((), _instruction_flops(node))
    return found[1]  # type: ignore[return-value]


def _instruction_flops(node: Node) -> float:
    """XLA's cost-analysis flops of one unfused instruction (all its elements); a reduce
    applies its reducer once per input element beyond the first of each output
    (`HloCostAnalysis::HandleReduce`), a reduce-window as often as `reduce_window_count`
    says."""
    if node.op in (Op.REDUCE, Op.REDUCE_WINDOW):
        reducer = sum(flops_per_element(n) for n in node.calls[0].nodes
                      if n.op is not Op.PARAMETER and is_elementwise_op(n))
        if node.op is Op.REDUCE_WINDOW:
            return float(reduce_window_count(node)) * reducer
        out = node.shape.leaves()[0].num_elements
        return float(node.operands[0].shape.num_elements - out) * reducer
    return flops_per_element(node) * _elements(node)


def operand_utilisation(node: Node, index: int) -> float:
    """The share of operand `index`'s elements one run of `node` reads, counting repeated
    reads (HloCostAnalysis' handlers with `count_multiple_input_accesses`): a slice or
    dynamic slice reads its window, a dynamic-update-slice what it keeps of its base, a
    broadcast each element once per copy, a reduce-window each element once per window
    holding it, a reduce its initial values once per result element (the GPU's
    HandleReduce); every other operand is read once."""
    op = node.op
    operand = node.operands[index]
    out, into = _elements(node), max(1, _elements(operand))
    if index == 0 and op in (Op.SLICE, Op.DYNAMIC_SLICE, Op.GATHER, Op.BROADCAST):
        return out / into
    if index == 0 and op is Op.DYNAMIC_UPDATE_SLICE:
        return (out - _elements(node.operands[1])) / max(1, out)
    if index == 0 and op is Op.REDUCE_WINDOW:
        window = math.prod(node.attrs["window"].size)  # type: ignore[attr-defined]
        return out * window / into
    if op is Op.REDUCE and index >= len(node.operands) // 2:
        # GpuHloCostAnalysis::HandleReduce: an initial value is read once per element of the
        # (first) result, its utilisation that element count.
        return float(node.shape.leaves()[0].num_elements)
    return 1.0


@dataclass(frozen=True, slots=True)
class XlaUtilisation:
    """What GpuHloCostAnalysis::FusionCalculateUtilizations records for a fusion: its flops,
    each fused parameter's utilisation (by parameter number) and element-wise use roots, and
    each root's utilisation."""

    flops: float
    parameters: dict[int, float]
    parameter_roots: dict[int, frozenset[Node]]
    root_use: dict[Node, float]
    root: Node

    def common(self, a: int, b: int) -> float:
        """CommonElementwiseUtilization of parameters `a` and `b` (`b` < 0: the root)."""
        roots_b = self.parameter_roots.get(b, frozenset()) if b >= 0 else frozenset({self.root})
        return sum(self.root_use.get(r, 0.0)
                   for r in self.parameter_roots.get(a, frozenset()) & roots_b)


def xla_utilisation(fusion: Node) -> XlaUtilisation:
    """GpuHloCostAnalysis::FusionCalculateUtilizations over `fusion`'s fused computation. Users
    come before operands; an element-wise instruction passes on the roots it serves, any
    other makes its operand a root used as often as it reads it (rounded up to whole
    elements), and an instruction's utilisation is the sum over the roots it serves."""
    key = (fusion.fused.version,)
    cached = fusion.memo.get("xla_utilisation")
    if cached is not None and cached[0] == key and isinstance(cached[1], XlaUtilisation):
        return cached[1]
    root = fusion.fused_root
    root_use: dict[Node, float] = {root: 1.0}
    use_roots: dict[Node, set[Node]] = {root: {root}}
    # HloCostAnalysis::FusionProcessOutputBytesAccessed, which runs first, sets the operand
    # utilisation of the base of a dynamic-update-slice that is an output (the root or an
    # operand of a tuple root) to zero: the output is updated in place.
    outputs = root.operands if root.op is Op.TUPLE else [root]
    in_place = {o for o in outputs if o.op is Op.DYNAMIC_UPDATE_SLICE}
    flops = 0.0
    parameters: dict[int, float] = {}
    parameter_roots: dict[int, frozenset[Node]] = {}
    for inst in reversed(fusion.fused.post_order()):
        use = sum(root_use.get(r, 0.0) for r in use_roots.get(inst, ()))
        if inst.op is Op.PARAMETER:
            parameters[inst.parameter_number] = use
            parameter_roots[inst.parameter_number] = frozenset(use_roots.get(inst, ()))
            continue
        flops += use * instruction_flops(inst)
        passes_roots = is_elementwise_op(inst) or inst.op in (Op.TUPLE, Op.GET_TUPLE_ELEMENT)
        for index, operand in enumerate(inst.operands):
            roots = use_roots.setdefault(operand, set())
            if passes_roots:
                roots |= use_roots.get(inst, set())
                continue
            roots.add(operand)
            elements = _elements(operand)
            utilisation = 0.0 if index == 0 and inst in in_place else \
                operand_utilisation(inst, index)
            share = use * utilisation
            share = math.ceil(share * elements) / elements if elements else 0.0
            root_use[operand] = root_use.get(operand, 0.0) + share
    result = XlaUtilisation(flops, parameters, parameter_roots, root_use, root)
    fusion.memo["xla_utilisation"] = (key, result)
    return result


def xla_flops(node: Node) -> float:
    """XLA's cost-analysis flops of `node`'s kernel."""
    return xla_utilisation(node).flops if node.is_fusion else instruction_flops(node)


def operand_reads(node: Node, operand: Node) -> float:
    """Elements of `operand` `node`'s kernel reads, repeated reads counted (the cost
    analysis' operand bytes accessed, in elements: FusionParameterReadBytes), as XLA asks for
    them (GetOperandBytesAccessed): at the first operand slot that holds `operand`
    (`operand_index`), none if `node` does not use it."""
    if operand not in node.operands:
        return 0.0
    index = node.operands.index(operand)
    if node.is_fusion:
        use = xla_utilisation(node).parameters.get(index, 0.0)
    elif node.op is Op.DYNAMIC_UPDATE_SLICE and index == 0:
        # HloCostAnalysis::HandleDynamicUpdateSlice: the base aliases the output, so none of
        # its bytes are accessed (its utilisation stays what the window leaves of it).
        use = 0.0
    else:
        use = operand_utilisation(node, index)
    return use * _elements(operand)


def _reads_of(user: Node, index: int) -> float:
    """The utilisation of `user`'s operand slot `index` (cost analysis'
    operand_utilization)."""
    if user.is_fusion:
        return xla_utilisation(user).parameters.get(index, 0.0)
    return operand_utilisation(user, index)


def _producer_slots(consumer: Node, producer: Node) -> list[int]:
    """The operand slots of `consumer` XLA reads `producer` through: every get-tuple-element
    of a multi-output producer, else the first slot that holds it (`operand_index`)."""
    if producer.is_multi_output_fusion:
        return [i for i, o in enumerate(consumer.operands)
                if o.op is Op.GET_TUPLE_ELEMENT and o.operands[0] is producer]
    return [consumer.operands.index(producer)] if producer in consumer.operands else []


def consumer_utilisation(consumer: Node, producer: Node) -> float:
    """How much of `producer`'s result `consumer` reads, summed over every operand slot that
    holds it or one of its tuple elements (CombinedGpuPerformanceModel::
    EstimateRunTimeForFusionUncached's `utilization_by_this_consumer`, which scales the
    producer's flops)."""
    return sum(_reads_of(consumer, i) for i, o in enumerate(consumer.operands)
               if o is producer or (o.op is Op.GET_TUPLE_ELEMENT and o.operands[0] is producer))


def _read_share(consumer: Node, producer: Node) -> float:
    """GetOperandUtilization, which scales the producer's reads in
    GetSharedOperandBytesAccessed: summed over the get-tuple-elements of a multi-output
    producer, else at its first operand slot."""
    return sum(_reads_of(consumer, i) for i in _producer_slots(consumer, producer))


def _common_utilisation(producer: Node, operand: Node, consumer: Node) -> float:
    """GetCommonUtilization: the share of `operand` the producer and the consumer read at the
    same elements (element-wise from the producer's root), read once when fused. Only an
    operand of the producer is shared, each side at its first slot holding it."""
    if operand not in producer.operands or operand not in consumer.operands:
        return 0.0
    if producer.is_fusion:
        if xla_utilisation(producer).common(producer.operands.index(operand), -1) != 1.0:
            return 0.0
    elif not is_elementwise_op(producer):
        return 0.0
    if consumer.is_fusion:
        use = xla_utilisation(consumer)
        common = consumer.operands.index(operand)
        return sum(use.common(common, p) for p in _producer_slots(consumer, producer))
    return 1.0 if is_elementwise_op(consumer) else 0.0


def fused_operand_reads(producer: Node, consumer: Node) -> dict[Node, float]:
    """Elements of each operand the fused kernel reads (GetSharedOperandBytesAccessed, over
    the fused kernel's distinct operands): the producer's reads as often as the consumer
    reads the producer, plus the consumer's own, less what both read at the same
    elements."""
    share = _read_share(consumer, producer)
    reads: dict[Node, float] = {}
    operands = dict.fromkeys(producer.operands)
    operands.update(dict.fromkeys(o for o in consumer.operands if o is not producer))
    for operand in operands:
        reads[operand] = (operand_reads(producer, operand) * share
                          + operand_reads(consumer, operand)
                          - _elements(operand) * _common_utilisation(producer, operand, consumer))
    return reads


@functools.lru_cache(maxsize=65536)
def _read_ticks(net: int, total: int, dram: float, rest_bandwidth: float) -> int:
    """ReadTimeWithDRAMHeuristic's time: `net` bytes at DRAM bandwidth, the rest of `total`
    at `rest_bandwidth` (the same few operand sizes come back at every price)."""
    return (duration_ticks(_f32(_f32(net) / dram))
            + duration_ticks(_f32(_f32(total - net) / rest_bandwidth)))


class GpuCostModel(CostModel):
    """`CostModel`'s profiles priced on a GPU with XLA's flops; `time` includes the launch
    overhead."""

    def __init__(self, device: GpuDevice) -> None:
        super().__init__(dataclasses.replace(DEFAULT_CONSTANTS, source="xla-gpu"))
        self.op_cost = flops_per_element
        self.device = device

    def _with_flops(self, profile: KernelProfile, flops: float,
                    launch: tuple[int, int] | None,
                    reads: Iterable[tuple[Node, float]]) -> KernelProfile:
        if profile.is_free:
            return profile
        fields = {f.name: getattr(profile, f.name) for f in dataclasses.fields(KernelProfile)}
        fields["operations"] = flops
        xla_reads = tuple(reads)
        return GpuKernelProfile(**fields, launch_dims=launch, xla_reads=xla_reads)

    @staticmethod
    def _reads(node: Node) -> list[tuple[Node, float]]:
        """EstimateRunTimeForInstruction reads each operand slot, a repeated operand at its
        first slot's figure each time."""
        return [(o, operand_reads(node, o)) for o in node.operands]

    def _new_profile(self, node: Node) -> KernelProfile:
        profile = super()._new_profile(node)
        return self._with_flops(profile, xla_flops(node),
                                kernel_launch(node, None, self.device.core_count),
                                self._reads(node))

    def _new_fused_profile(self, producer: Node, consumer: Node) -> KernelProfile:
        profile = super()._new_fused_profile(producer, consumer)
        # int64 producer and consumer flops, the utilisation a float (EstimateRunTimeForFusion)
        flops = _f32(_f32(_f32(int(xla_flops(producer)))
                          * _f32(consumer_utilisation(consumer, producer)))
                     + _f32(int(xla_flops(consumer))))
        return self._with_flops(profile, flops,
                                kernel_launch(consumer, producer, self.device.core_count),
                                fused_operand_reads(producer, consumer).items())

    def remember(self, node: Node, profile: KernelProfile) -> None:
        """The grown fusion's flops are its own cost analysis' (XLA revisits it)."""
        super().remember(node, self._with_flops(profile, xla_flops(node),
                                                kernel_launch(node, None, self.device.core_count),
                                                self._reads(node)))

    def launch(self, profile: KernelProfile) -> tuple[int, int]:
        """(blocks, threads per block) of the kernel."""
        if isinstance(profile, GpuKernelProfile) and profile.launch_dims is not None:
            return profile.launch_dims
        threads = max(1, profile.loop_elements)
        per_block = min(THREADS_PER_BLOCK, threads)
        return math.ceil(threads / per_block), per_block

    def _bandwidth(self, bandwidth: float, blocks: int) -> float:
        """AdjustBandwidth, in XLA's single precision."""
        per_block = _f32(_f32(_f32(self.device.clock_rate_ghz) * _f32(1e9))
                         * _f32(TRANSACTION_BYTES))
        return min(_f32(bandwidth), _f32(_f32(blocks) * per_block))

    def price(self, profile: KernelProfile) -> KernelTime:
        """XLA's estimate in its own arithmetic: every time an `absl::Duration` (whole
        quarter nanoseconds, `duration_ticks`) made where XLA makes one (the compute time,
        each operand's two reads, the write, the overlap), flops and bytes whole numbers,
        flops per nanosecond a whole number (`CalculateEffectiveFlopsPerNs` returns an
        int64)."""
        if profile.is_free:
            return KernelTime(0.0, 0.0, 0.0, 0.0, False)
        device = self.device
        blocks, per_block = self.launch(profile)
        fpus = min(blocks, device.core_count) * min(per_block, device.fpus_per_core)
        flops_per_ns = int(device.clock_rate_ghz * 2 * fpus)
        # absl::Nanoseconds(float) is that many times one nanosecond (4 ticks).
        compute = scale_duration(4, _f32(_f32(int(profile.operations)) / _f32(flops_per_ns)))
        dram = self._bandwidth(device.memory_bandwidth, blocks)
        # Re-reads' bandwidth by where the operand fits: L1, L2 or neither.
        dram_rest = _f32(device.memory_bandwidth)
        l2_rest = _f32(dram_rest * _f32(L2_CACHE_SPEEDUP))
        rest_bandwidths = (self._bandwidth(_f32(l2_rest * _f32(L1_CACHE_SPEEDUP)), blocks),
                           self._bandwidth(l2_rest, blocks),
                           self._bandwidth(dram_rest, blocks))
        l1_size = L1_CACHE_SIZE_PER_SM * device.core_count
        memory = 0
        reads = (profile.xla_reads if isinstance(profile, GpuKernelProfile)
                 and profile.xla_reads is not None else tuple(profile.reads().items()))
        for node, count in reads:
            size, item = self._size(node)
            total = int(count * item)
            net = min(int(size), total)
            fits = 0 if net < l1_size else 1
            rest_bandwidth = rest_bandwidths[fits if net < device.l2_cache_size else 2]
            memory += _read_ticks(net, total, dram, rest_bandwidth)
        memory += duration_ticks(_f32(_f32(int(profile.bytes_written))
                                      / _f32(device.memory_bandwidth)))
        exec_ticks = (compute + memory
                      - scale_duration(min(compute, memory), MEMORY_COMPUTE_PARALLELISM))
        return KernelTime((LAUNCH_TICKS + exec_ticks) / TICKS_PER_SECOND,
                          KERNEL_LAUNCH_OVERHEAD, compute / TICKS_PER_SECOND,
                          memory / TICKS_PER_SECOND, blocks > 1)
