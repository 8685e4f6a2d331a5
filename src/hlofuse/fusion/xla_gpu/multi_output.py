"""Multi-output fusion as XLA's GPU compiler runs it today (`multi_output_fusion.cc`), for
`xla-gpu`: the walk and the fusing of `multi_output.py` (XLA's 2022 pass), with today's rules.

Siblings (`CanFuseSiblings`, `LegalToFuse`): an operand of one element is not worth sharing
(`IsProfitableOperand`); the two must not depend on each other; their loops must run over
compatible shapes (equal, or bitcasts of each other: today's rule); a column reduction is not
paired with a plain element-wise root (they read the shared operand in different orders); two
slices of a shared operand of 1 KiB or more that do not overlap are not paired; a fusion whose
root updates a buffer in place is not paired; and the pair fits the kernel budget. Unlike
2022, kernels of different kinds (a loop and a reduction) may be paired.

Producer and consumer (`ProducerCandidateIsFusible`): a producer with several users may join
one consumer as an extra output when the producer is not a multi-output fusion, updates no
buffer in place, is loop-fusible and does not transpose memory; the consumer can be a fusion
output; the shapes are compatible; no cycle; the budget and the emitted size allow it; and
the GPU model (`performance_model.py`) does not estimate the fused kernel slower than the two
(`EstimateRunTimesForMultiOutputFusion`: the producer's output is still written).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from hlofuse.fusion.graphs.graph import Graph, Node
from hlofuse.fusion.graphs.module_graph import ModuleGraph
from hlofuse.fusion.legality.properties import (
    current_xla_rules,
    equal_ignoring_element_type,
    in_place_operands,
    is_contiguous_reduction,
    is_effective_scalar,
    is_fusible_as_multi_output_root,
    is_loop_fusible,
    is_physically_transposing,
    loop_shape,
    real_hero,
    reduction_dimensions,
)
from hlofuse.fusion.legality.rules import barrier, fits_in_budget, refuse
from hlofuse.fusion.xla2022.multi_output import _MultiOutputFuser, is_sibling_candidate
from hlofuse.fusion.xla_gpu.devices import DEFAULT_DEVICE, device
from hlofuse.fusion.xla_gpu.launch_dimensions import fusion_roots, hero_reduction
from hlofuse.fusion.xla_gpu.performance_model import GpuCostModel
from hlofuse.fusion.xla_gpu.priority import merged_not_too_large
from hlofuse.ir.hlo import Module
from hlofuse.ir.ops import FusionKind, Op
from hlofuse.ir.shapes import Shape, default_layout
from hlofuse.passes.decision_log import FusionDecision, Recorder

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

PASS_NAME = "gpu-multi-output-fusion"
SMALL_SHARED_OPERAND_BYTES = 1024  # ParameterSlicesAreNonOverlapping's threshold
_US = 1e6


def _physical_dims(shape: Shape) -> tuple[int, ...]:
    """The dimensions larger than 1, major to minor in memory."""
    layout = shape.layout if shape.layout is not None else default_layout(shape.rank)
    return tuple(shape.dims[d] for d in reversed(layout) if shape.dims[d] != 1)


def _row_major_apart_from_ones(shape: Shape) -> bool:
    layout = shape.layout if shape.layout is not None else default_layout(shape.rank)
    big = [d for d in reversed(layout) if shape.dims[d] != 1]
    return big == sorted(big)


def is_reshape_or_transpose_bitcast(a: Shape, b: Shape) -> bool:
    """ShapeUtil::IsReshapeOrTransposeBitcast, element types ignored: the same elements in
    the same memory order, read as a reshape (both row-major apart from dimensions of size 1)
    or as a transpose (the same dimensions larger than 1, in the same memory order)."""
    if a.num_elements != b.num_elements:
        return False
    if _physical_dims(a) == _physical_dims(b):
        return True
    return _row_major_apart_from_ones(a) and _row_major_apart_from_ones(b)


def gpu_real_hero(node: Node) -> Node:
    """GetRealHeroForMultiOutputFusion today: the first output whose hero
    (FindNonTrivialHero, through element-wise ops and bitcasts) is a tiled reduction gives
    that reduction (`sqrt(reduce(x))` counts as a reduction over x's shape), else the root or
    the first output. (Tiled transposes, which XLA also picks, are not modelled.)"""
    if node.is_fusion:
        for output in fusion_roots(node):
            hero = hero_reduction(output, node, None)
            if hero is not None:
                return hero
    return real_hero(node)


def _reductions_compatible(a: Node, b: Node) -> bool:
    """AreReductionsMultiOutputFusionCompatible: the same reduction kind and contiguous
    components (GetReductionKindAndContiguousComponents), element types aside."""
    return (reduction_dimensions(a.operands[0].shape, a.ints("dimensions"))
            == reduction_dimensions(b.operands[0].shape, b.ints("dimensions")))


def gpu_shapes_compatible(a: Node, b: Node) -> bool:
    """ShapesCompatibleForMultiOutputFusion today: two reduction heroes must be compatible
    (FusionHeroesAreCompatible); then the heroes' loop shapes (a reduction's input, else the
    output) are equal, element types ignored, or, when neither is a tuple, bitcasts of each
    other ("trivially reshapable")."""
    hero_a, hero_b = gpu_real_hero(a), gpu_real_hero(b)
    if (is_contiguous_reduction(hero_a) and is_contiguous_reduction(hero_b)
            and not _reductions_compatible(hero_b, hero_a)):
        return False
    first, second = loop_shape(hero_a), loop_shape(hero_b)
    if equal_ignoring_element_type(first, second):
        return True
    return (first.is_array and second.is_array
            and is_reshape_or_transpose_bitcast(first, second))


def _is_column_reduction_hero(node: Node) -> bool:
    hero = gpu_real_hero(node)
    if not is_contiguous_reduction(hero):
        return False
    return not reduction_dimensions(hero.operands[0].shape,
                                    hero.ints("dimensions")).is_row_reduction


def _is_plain_root(node: Node) -> bool:
    hero = gpu_real_hero(node)
    return not is_contiguous_reduction(hero) and hero.op is not Op.TRANSPOSE


def _unique_slice(parent: Node, user: Node) -> Node | None:
    """FindUniqueSlice: the one slice through which `user` reads `parent`, if any."""
    if user.op is Op.SLICE:
        return user
    if not user.is_fusion:
        return None
    found = None
    for index, operand in enumerate(user.operands):
        if operand is not parent:
            continue
        if found is not None:
            return None
        param = user.fused.params[index]
        if len(param.users) != 1:
            return None
        found = _unique_slice(param, next(iter(param.users)))
        if found is None:
            return None
    return found


def slices_overlap(a: Node, b: Node, parent: Node) -> bool:
    """ParameterSlicesAreNonOverlapping, inverted: false only for two disjoint slices of a
    shared operand of at least 1 KiB."""
    if parent.shape.is_tuple or parent.shape.byte_size < SMALL_SHARED_OPERAND_BYTES:
        return True
    first, second = _unique_slice(parent, a), _unique_slice(parent, b)
    if first is None or second is None:
        return True
    for x, y in zip(first.attrs["slice"], second.attrs["slice"]):  # type: ignore[call-overload]
        if not (x.start < y.limit and y.start < x.limit):
            return False
    return True


class _GpuMultiOutputFuser(_MultiOutputFuser):
    def __init__(self, graph: Graph, recorder: Recorder, model: GpuCostModel) -> None:
        super().__init__(graph, recorder, relax_concatenate=True)
        self.model = model

    def fuse_siblings(self, parent: Node) -> bool:
        if is_effective_scalar(parent.shape):
            return False  # IsProfitableOperand: one element shared saves nothing
        if parent.is_fusion and parent.kind == FusionKind.CUSTOM:
            # DoMultiOutputFusion skips a custom fusion (a Triton GEMM) as a parent: the
            # kernels reading its output are not paired for sharing it.
            return False
        return super().fuse_siblings(parent)

    def sibling_decision(self, parent: Node, a: Node, b: Node) -> FusionDecision:
        names = f"siblings %{a.name} and %{b.name} (both read %{parent.name})"
        if not is_sibling_candidate(b):
            return FusionDecision.no("not-multi-output-root",
                                     f"cannot fuse {names}: %{b.name} cannot be a fusion output")
        if self.reachability.is_connected(a, b):
            return FusionDecision.no("siblings-connected", f"cannot fuse {names}: one depends "
                                     "on the other")
        if not gpu_shapes_compatible(a, b):
            return FusionDecision.no("incompatible-shapes", f"cannot fuse {names}: their loops "
                                     "run over different shapes")
        if ((_is_column_reduction_hero(a) and _is_plain_root(b))
                or (_is_column_reduction_hero(b) and _is_plain_root(a))):
            return FusionDecision.no("column-reduction-sibling", f"cannot fuse {names}: a "
                                     "column reduction and an element-wise root read the "
                                     "shared operand in different orders")
        if not slices_overlap(a, b, parent):
            return FusionDecision.no("slices-disjoint", f"cannot fuse {names}: they read "
                                     "disjoint slices of it")
        for node in (a, b):
            if node.is_fusion and node.fused_root.op is Op.DYNAMIC_UPDATE_SLICE:
                return FusionDecision.no("dynamic-update-slice-sibling", f"cannot fuse {names}: "
                                         f"%{node.name} updates a buffer in place")
        return fits_in_budget(a, b)

    def consumer_decision(self, producer: Node, consumer: Node) -> FusionDecision:
        def no(rule: str, reason: str) -> FusionDecision:
            return refuse(rule, producer, consumer, reason + " (as an extra output)")

        if producer.is_multi_output_fusion:
            return no("multi-output-producer", "the producer is already a multi-output fusion")
        if in_place_operands(producer):
            return no("in-place-conflict", "the producer updates a buffer in place")
        if not is_loop_fusible(producer):
            rule, reason = barrier(producer)
            return no(rule, reason)
        if is_physically_transposing(producer):
            return no("transposing-producer", "the producer transposes memory")
        if not is_fusible_as_multi_output_root(consumer):
            rule, reason = barrier(consumer)
            return no(rule if rule != "not-loop-fusible" else "not-multi-output-root", reason)
        if not gpu_shapes_compatible(consumer, producer):
            return no("incompatible-shapes", "their loops run over different shapes")
        cycle = self.cycle_refusal(producer, consumer)
        if cycle is not None:
            return cycle
        decision = fits_in_budget(producer, consumer)
        if not decision:
            return decision
        decision = merged_not_too_large(producer, consumer)
        if not decision:
            return decision
        unfused = self.model.time(producer) + self.model.time(consumer)
        written = self.model.profile(producer).bytes_written
        fused = (self.model.fused_time(producer, consumer)
                 + written / self.model.device.memory_bandwidth)
        figures = {"unfused_us": round(unfused * _US, 6), "fused_us": round(fused * _US, 6)}
        if fused > unfused:
            return refuse("cost-model-loss", producer, consumer, "the GPU model estimates the "
                          f"multi-output kernel slower ({fused * _US:.3g} us instead of "
                          f"{unfused * _US:.3g} us)", **figures)
        return FusionDecision.yes()


@dataclass(frozen=True, slots=True)
class GpuMultiOutputFusion:
    """Sibling and producer-consumer multi-output fusion with XLA's current GPU rules."""

    name: ClassVar[str] = PASS_NAME
    device: str = DEFAULT_DEVICE

    def __post_init__(self) -> None:
        device(self.device)

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        with ModuleGraph.from_module(module) as graphs, current_xla_rules():
            recorder = Recorder(log, self.name)
            model = GpuCostModel(device(self.device))
            changed = False
            for graph in graphs.fusible_graphs():
                changed |= _GpuMultiOutputFuser(graph, recorder, model).run()
            return (graphs.to_module(), True) if changed else (module, False)
