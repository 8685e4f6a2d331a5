"""Fusion strategies as data, the pipeline each one runs, and `run_strategy`.

A strategy names which passes run and their knobs:

- `none`: the simplifications XLA runs before fusion and its trip-count annotation, then no
  fusion at all: one kernel per instruction (the study's "no fusion" baseline).
- `xla`: the 2022 GPU pipeline the study read, nothing added (docs/xla-2022-pipeline.md):
  logistic expansion; simplification; while-loop trip-count annotation (a counted loop runs
  no condition kernels); tree-reduction rewriting; then in a fixed point the variadic op
  splitter, instruction fusion (without, then with duplication), fusion merger, multi-output
  fusion, CSE and DCE; then in a fixed point horizontal loop fusion, horizontal input fusion,
  CSE, DCE.
- `priority`: our own CPU strategy, shaped like XLA's 2024 GPU pipeline (not XLA's):
  simplification; then in a fixed point priority fusion (cost model; `priority.py`), CSE,
  DCE, multi-output fusion, CSE, DCE; then horizontal fusion as in `xla`. No multi-user
  concatenate rule (`relax_concatenate` is on). Its cost model uses this machine's measured
  constants, which the caller passes (`run_strategy(..., constants=)`: fusion never
  measures; `api` and the command line run the calibration probe when
  `Strategy.measures_costs`); `+default_costs` uses the fixed documented ones instead
  (deterministic: tests use it), as does a run given no constants.

- `xla-gpu`: XLA's current GPU pipeline (gpu_compiler.cc, fusion_pipeline.cc): XLA's
  while-loop simplifier, arithmetic identities and conditional rewrites
  (`xla_gpu/while_simplify.py`), computation deduplication, variadic-op splitting, then once
  priority fusion with XLA's GPU rules and performance model (`xla_gpu/priority.py`,
  `xla_gpu/performance_model.py`) for the device `+device=a100|h100|h200` names (default
  h100), CSE, DCE,
  multi-output fusion with today's rules (`xla_gpu/multi_output.py`), CSE, DCE; no horizontal
  fusion (the XLA of jaxlib 0.10.2 has none; `+horizontal` adds `xla`'s); loops get XLA's
  trip-count annotation.

Modifiers, appended to the name: `-no-<pass>` leaves a pass out (`merger`, `multi-output`,
`horizontal`, `horizontal-loop`, `horizontal-input`, `duplication`, `instruction-fusion`,
`simplify`, `logistic-expander`, `trip-count`, `tree-reduction`, `variadic-op-splitter`),
`+<pass>` adds one to `none`, and `+relax_concatenate` lets a bare concatenate with several
users fuse into a fusion (the study's third variant: it lifts the concatenate clause of XLA's
code-duplication check). Examples: `xla+relax_concatenate`, `xla-no-merger`,
`xla-no-horizontal-no-multi-output`.

Rewrites before fusion, each off by default: `+rng_expansion` (the Threefry custom call as
element-wise HLO, before simplification), `+concat_forwarding` and `+scalarize_state` (packed
state split into its pieces, in a fixed point with simplify, CSE and DCE after
simplification), `+unroll=k` (loop-unroll by k after them; `+unroll` or `+unroll=auto` lets the
pass choose), `+if_conversion` (XLA's ConditionalSimplifier, whose select of two cheap
branches extends to a chain of selects over the branches of an s32 index, before the loop-state
rewrites). Example: `xla+rng_expansion+concat_forwarding+scalarize_state+unroll=10`.

`+whole_loop` runs whole-loop fusion after those rewrites and before the fusion passes: a loop
that is independent per environment becomes one kernel (`whole_loop.py`), the fusion passes
then work on what is left; with it, `own-row-gather` turns gathers indexed by a position
(`x[arange(n), a]`) into batched gathers first. `max` is everything: `priority` with
`+rng_expansion`, `+concat_forwarding`, `+scalarize_state`, `+if_conversion` and
`+whole_loop`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hlofuse.fusion.beyond_xla.cost_model import MachineConstants
from hlofuse.fusion.beyond_xla.priority import PriorityFusion
from hlofuse.fusion.beyond_xla.whole_loop import WholeLoopFusion
from hlofuse.fusion.explain import explain_dict, explain_text
from hlofuse.fusion.graphs.cleanup import (
    FusedComputationCse,
    GraphDce,
    GraphVariadicOpSplitter,
)
from hlofuse.fusion.kernels import (
    Kernel,
    Loop,
    count_kernels_per_iteration,
    kernels_per_iteration,
    list_kernels,
)
from hlofuse.fusion.xla2022.fusion_merger import FusionMerger
from hlofuse.fusion.xla2022.horizontal import HorizontalInputFusion, HorizontalLoopFusion
from hlofuse.fusion.xla2022.instruction_fusion import InstructionFusion
from hlofuse.fusion.xla2022.multi_output import MultiOutputFusion
from hlofuse.fusion.xla2022.tree_reduction import TreeReductionRewriter
from hlofuse.fusion.xla_gpu.copy_fusion import CopyFusion
from hlofuse.fusion.xla_gpu.copy_insertion import GpuCopyInsertion
from hlofuse.fusion.xla_gpu.devices import DEFAULT_DEVICE, device
from hlofuse.fusion.xla_gpu.dynamic_dimension_simplifier import DynamicDimensionSimplifier
from hlofuse.fusion.xla_gpu.fp_conversions import SimplifyFPConversions
from hlofuse.fusion.xla_gpu.gather_scatter import BatchedGatherScatterNormalizer
from hlofuse.fusion.xla_gpu.gather_scatter_simplifier import GatherSimplifier, ScatterSimplifier
from hlofuse.fusion.xla_gpu.gemm_fusion import GemmFusion
from hlofuse.fusion.xla_gpu.ids import (
    InstructionIds,
    NoteNamesBeforeLayout,
    NoteRecreatedBroadcasts,
    RecordInstructionIds,
)
from hlofuse.fusion.xla_gpu.layout import TransposeToBitcast
from hlofuse.fusion.xla_gpu.layout_normalization import GpuLayoutAssignment
from hlofuse.fusion.xla_gpu.multi_output import GpuMultiOutputFusion
from hlofuse.fusion.xla_gpu.priority import GpuPriorityFusion
from hlofuse.fusion.xla_gpu.reduce_merger import ReduceMerger
from hlofuse.fusion.xla_gpu.scatter_expander import ScatterExpander
from hlofuse.fusion.xla_gpu.softmax_rewriter import SoftmaxRewriterTriton
from hlofuse.fusion.xla_gpu.transpose_folding import TransposeFolding
from hlofuse.fusion.xla_gpu.while_simplify import GPU_LOOP_PASSES, GPU_LOOP_SIMPLIFICATION
from hlofuse.ir.hlo import Module
from hlofuse.passes.call_inliner import CallInliner
from hlofuse.passes.computation_deduplicator import ComputationDeduplicator
from hlofuse.passes.concat_forwarding import ConcatForwarding
from hlofuse.passes.conditional_simplifier import ConditionalPredIndex, ConditionalSimplifier
from hlofuse.passes.cse import CommonSubexpressionElimination
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.decision_log import DecisionLog
from hlofuse.passes.logistic_expander import LogisticExpander
from hlofuse.passes.manager import FIXED_POINT_LIMIT, PASSES, FixedPoint, Pass, Pipeline, Step
from hlofuse.passes.own_row_gather import OwnRowGather
from hlofuse.passes.rng_expansion import RngExpansion
from hlofuse.passes.scalarize_state import ScalarizeState
from hlofuse.passes.simplify import AlgebraicSimplifier
from hlofuse.passes.trip_count import WhileLoopTripCountAnnotator
from hlofuse.passes.unroll import LoopUnroll
from hlofuse.passes.variadic_op_splitter import VariadicOpSplitter

FUSION_PASSES: tuple[type[Pass], ...] = (InstructionFusion, FusionMerger, MultiOutputFusion,
                                         HorizontalLoopFusion, HorizontalInputFusion,
                                         PriorityFusion, WholeLoopFusion, TreeReductionRewriter,
                                         GpuPriorityFusion, GpuMultiOutputFusion,
                                         GpuLayoutAssignment, TransposeFolding,
                                         DynamicDimensionSimplifier,
                                         TransposeToBitcast,
                                         SoftmaxRewriterTriton, GemmFusion,
                                         RecordInstructionIds, NoteRecreatedBroadcasts,
                                         NoteNamesBeforeLayout,
                                         SimplifyFPConversions,
                                         GpuCopyInsertion, CopyFusion,
                                         BatchedGatherScatterNormalizer, GatherSimplifier,
                                         ScatterSimplifier, ScatterExpander, ReduceMerger,
                                         *GPU_LOOP_PASSES)
# Every pass `hlofuse opt -p` knows.
ALL_PASSES: tuple[type[Pass], ...] = PASSES + FUSION_PASSES

# Modifier words -> Strategy field; several words may name one field.
_SWITCHES = {
    "simplify": "simplify",
    "instruction-fusion": "instruction_fusion",
    "duplication": "duplication",
    "merger": "fusion_merger",
    "fusion-merger": "fusion_merger",
    "copy-insertion": "copy_insertion",
    "copies": "copy_insertion",
    "multi-output": "multi_output",
    "multi-output-fusion": "multi_output",
    "mof": "multi_output",
    "horizontal-loop": "horizontal_loop",
    "horizontal-loop-fusion": "horizontal_loop",
    "horizontal-input": "horizontal_input",
    "horizontal-input-fusion": "horizontal_input",
    "relax_concatenate": "relax_concatenate",
    "relax-concatenate": "relax_concatenate",
    "rng_expansion": "rng_expansion",
    "rng-expansion": "rng_expansion",
    "concat_forwarding": "concat_forwarding",
    "concat-forwarding": "concat_forwarding",
    "scalarize_state": "scalarize_state",
    "scalarize-state": "scalarize_state",
    "priority-fusion": "priority_fusion",
    "default_costs": "default_costs",
    "default-costs": "default_costs",
    "if_conversion": "if_conversion",
    "if-conversion": "if_conversion",
    "whole_loop": "whole_loop",
    "whole-loop": "whole_loop",
    "whole-loop-fusion": "whole_loop",
    "logistic_expansion": "logistic_expansion",
    "logistic-expander": "logistic_expansion",
    "trip_count": "trip_count",
    "trip-count": "trip_count",
    "while-loop-trip-count-annotator": "trip_count",
    "tree_reduction": "tree_reduction",
    "tree-reduction": "tree_reduction",
    "tree-reduction-rewriter": "tree_reduction",
    "variadic_split": "variadic_split",
    "variadic-op-splitter": "variadic_split",
}


@dataclass(frozen=True, slots=True)
class Strategy:
    """Which passes run, with which knobs."""

    name: str
    simplify: bool = True
    instruction_fusion: bool = False
    duplication: bool = True
    fusion_merger: bool = False
    multi_output: bool = False
    horizontal_loop: bool = False
    horizontal_input: bool = False
    relax_concatenate: bool = False
    rng_expansion: bool = False
    concat_forwarding: bool = False
    scalarize_state: bool = False
    unroll: int = 1  # loop-unroll factor; 1: off, 0: chosen by the pass
    priority_fusion: bool = False
    default_costs: bool = False  # priority fusion's fixed constants instead of measured ones
    whole_loop: bool = False  # loops independent per environment become one kernel each
    # Cheap conditionals become selects (passes/conditional_simplifier.py, with select chains
    # for s32 indices): a loop that holds one can then be one kernel.
    if_conversion: bool = False
    # xla-gpu: XLA's current GPU priority fusion for a named device (`xla_gpu/priority.py`); its
    # fusion pipeline runs once, not to a fixed point.
    gpu_priority_fusion: bool = False
    device: str = DEFAULT_DEVICE
    # XLA's 2022 GPU passes before and at the start of fusion (docs/xla-2022-pipeline.md).
    logistic_expansion: bool = False
    trip_count: bool = False  # while-loop trip-count annotation: no condition kernels
    tree_reduction: bool = False
    variadic_split: bool = False
    copy_insertion: bool = False  # XLA's copy insertion after fusion (xla_gpu/copy_insertion.py)

    @property
    def measures_costs(self) -> bool:
        """Whether priority fusion prices with this machine's measured constants."""
        return self.priority_fusion and not self.default_costs

    @property
    def fuses(self) -> bool:
        return any((self.instruction_fusion, self.fusion_merger, self.multi_output,
                    self.horizontal_loop, self.horizontal_input, self.priority_fusion,
                    self.whole_loop))

    def steps(self, constants: MachineConstants | None = None) -> list[Step]:
        """The pipeline this strategy runs; `constants` are the measured machine constants
        priority fusion prices with (unless `default_costs`)."""
        steps: list[Step] = []
        # XLA breaks priority ties by unique ids, the creation order of the module before
        # optimisation (xla_gpu/ids.py): recorded before any pass rewrites it.
        ids = InstructionIds()
        if self.gpu_priority_fusion:
            steps.append(RecordInstructionIds(ids))
            # XLA's first GPU pass (RunPreSPMDPartitionerPasses): batched gathers and
            # scatters get explicit iota index columns (xla_gpu/gather_scatter.py).
            steps.append(BatchedGatherScatterNormalizer(ids))
            # Its DynamicDimensionSimplifier right after: nested concatenates flattened.
            steps.append(DynamicDimensionSimplifier())
        # On the fusion passes' graphs, so a fusion fixed point never leaves them.
        # xla-gpu: today's HloCSE there too, identical iotas one operand (graphs/cleanup.py).
        cleanup = (FusedComputationCse(combine_iotas=self.gpu_priority_fusion), GraphDce())
        if self.rng_expansion:
            steps.append(RngExpansion())
        if self.logistic_expansion:
            steps.append(LogisticExpander())
        # Today's HloCSE also merges identical iotas (CombineConstants); XLA 2022's did not.
        cse = CommonSubexpressionElimination(combine_iotas=self.gpu_priority_fusion)
        # xla-gpu notes the broadcasts each simplification pass re-creates as XLA's
        # simplifier does: new ids to XLA (ids.py).
        noted = NoteRecreatedBroadcasts(ids)

        def noting(passes: tuple[Pass, ...]) -> tuple[Pass, ...]:
            if not self.gpu_priority_fusion:
                return passes
            return tuple(step for p in passes for step in (p, noted))

        if self.simplify:
            steps.append(FixedPoint(noting((CallInliner(), AlgebraicSimplifier(), cse,
                                            DeadCodeElimination())), label="simplification"))
        tidy = (AlgebraicSimplifier(), cse, DeadCodeElimination())
        if self.if_conversion:
            steps.append(FixedPoint((ConditionalPredIndex(),
                                     ConditionalSimplifier(select_chains=True)) + tidy,
                                    label="conditionals"))
        loop_state = [p for p, on in ((ConcatForwarding(), self.concat_forwarding),
                                      (ScalarizeState(), self.scalarize_state)) if on]
        if loop_state:
            steps.append(FixedPoint(tuple(loop_state) + tidy, label="loop state"))
        if self.whole_loop:  # a lane's own row read by position is a batched gather
            steps.append(FixedPoint((OwnRowGather(),) + tidy, label="own-row gathers"))
        if self.unroll != 1:
            steps.append(LoopUnroll(factor=self.unroll))
            steps.append(FixedPoint(tidy, label="after unrolling"))
        if self.gpu_priority_fusion:  # XLA's while-loop simplifier (xla_gpu/while_simplify.py)
            # GatherSimplifier and ScatterSimplifier open XLA's simplification pipeline, the
            # ScatterExpander of scatters of one index right after them; the simplifier's
            # merge of a reduce of a reduce (xla_gpu/reduce_merger.py) in the fixed point.
            canonical = (GatherSimplifier(ids), ScatterSimplifier(ids), ScatterExpander(ids),
                         ReduceMerger(ids))
            steps.append(FixedPoint(noting(canonical + GPU_LOOP_SIMPLIFICATION + tidy),
                                    label="while loops"))
            # XLA's TransposeFolding right after its simplification pipeline.
            steps.append(TransposeFolding())
            steps.append(DeadCodeElimination())
            # XLA's HloComputationDeduplicator, then FlattenCallGraph's copies per call site.
            steps.append(ComputationDeduplicator())
        # XLA annotates trip counts last among the loop rewrites (nothing may change a loop
        # afterwards) and splits large reductions after layout assignment, before fusion.
        if self.trip_count:
            steps.append(WhileLoopTripCountAnnotator())
        if self.tree_reduction:
            steps.append(FixedPoint((TreeReductionRewriter(),), label="tree reduction"))
        if self.gpu_priority_fusion:
            # XLA's layout assignment and normalisation (xla_gpu/layout_normalization.py),
            # then its CSE, and its simplifier after layout assignment.
            steps.append(NoteNamesBeforeLayout(ids))
            steps.append(GpuLayoutAssignment())
            steps.append(cse)
            steps.append(DeadCodeElimination())
            steps.append(TransposeToBitcast())
            # SimplifyFPConversions (excess precision allowed, XLA's default), then DCE.
            steps.append(SimplifyFPConversions())
            steps.append(DeadCodeElimination())
            # Normalisation diamonds, then dots, to Triton fusions (xla_gpu/softmax_rewriter.py,
            # xla_gpu/gemm_fusion.py), in gpu_compiler.cc's order.
            steps.append(SoftmaxRewriterTriton(self.device))
            steps.append(GemmFusion())
        if self.whole_loop:
            steps.append(WholeLoopFusion())
        vertical: list[Pass] = [GraphVariadicOpSplitter()] if self.variadic_split else []
        if self.gpu_priority_fusion:
            vertical += [GpuPriorityFusion(self.device, ids), *cleanup]
        if self.priority_fusion:
            if self.default_costs:
                vertical += [PriorityFusion(costs="default"), *cleanup]
            else:
                vertical += [PriorityFusion(costs="measured", constants=constants), *cleanup]
        if self.instruction_fusion:
            vertical.append(InstructionFusion(self.duplication, self.relax_concatenate))
        if self.fusion_merger:
            vertical.append(FusionMerger(self.relax_concatenate))
        if self.multi_output:
            vertical.append(GpuMultiOutputFusion(self.device) if self.gpu_priority_fusion
                            else MultiOutputFusion(self.relax_concatenate))
        if len(vertical) > self.variadic_split:
            steps.append(FixedPoint(tuple(vertical) + cleanup, label="fusion",
                                    max_iterations=1 if self.gpu_priority_fusion else
                                    FIXED_POINT_LIMIT))
        elif vertical:
            steps.append(VariadicOpSplitter())
        horizontal: list[Pass] = []
        if self.horizontal_loop:
            horizontal.append(HorizontalLoopFusion())
        if self.horizontal_input:
            horizontal.append(HorizontalInputFusion())
        if horizontal:
            steps.append(FixedPoint(tuple(horizontal) + cleanup, label="horizontal fusion"))
        if self.copy_insertion:  # after fusion, as XLA's GPU pipeline runs it
            steps.append(GpuCopyInsertion())
            steps.append(CopyFusion())
        return steps


# Every strategy annotates proven trip counts (XLA's pipelines of 2022 and 2024 both do, at
# the end of simplification): the runtime then runs a counted loop, whatever the fusion.
NONE = Strategy("none", trip_count=True)
XLA = Strategy("xla", instruction_fusion=True, fusion_merger=True, multi_output=True,
               horizontal_loop=True, horizontal_input=True, logistic_expansion=True,
               trip_count=True, tree_reduction=True, variadic_split=True)
PRIORITY = Strategy("priority", priority_fusion=True, multi_output=True, horizontal_loop=True,
                    horizontal_input=True, relax_concatenate=True, trip_count=True)
MAX = dataclasses.replace(PRIORITY, name="max", rng_expansion=True, concat_forwarding=True,
                          scalarize_state=True, whole_loop=True, if_conversion=True)
# XLA's current GPU fusion pipeline (gpu_compiler.cc, fusion_pipeline.cc): variadic-op
# splitting, priority fusion priced by the GPU model of `device`, CSE, DCE, multi-output
# fusion, CSE, DCE, once. No horizontal fusion: the XLA jaxlib 0.10.2 is built from has no
# horizontal loop or input fusion pass (neither pass name is in its GPU plugin, its per-pass
# dump shows none, and none of the 42 programs' optimised HLO has a horizontal fusion).
XLA_GPU = Strategy("xla-gpu", gpu_priority_fusion=True, multi_output=True,
                   relax_concatenate=True, variadic_split=True, trip_count=True,
                   copy_insertion=True)
STRATEGIES: dict[str, Strategy] = {s.name: s for s in (NONE, XLA, PRIORITY, MAX, XLA_GPU)}


class StrategyError(ValueError):
    """An unknown strategy name or modifier."""


def parse_strategy(text: str) -> Strategy:
    """`xla`, `none`, with `-no-<pass>` and `+<pass or knob>` modifiers."""
    spec = text.strip()
    if not spec:
        raise StrategyError("empty strategy name; known: " + ", ".join(STRATEGIES))
    parts = spec.split("+")
    base, *disabled = parts[0].split("-no-")
    strategy = STRATEGIES.get(base)
    if strategy is None:
        raise StrategyError(f"unknown strategy {base!r}; known: {', '.join(STRATEGIES)}")
    # Any: the fields differ in type; `_switch` pairs each field with a value of its type.
    changes: dict[str, Any] = {}
    for word in disabled:
        changes.update(_switch(word, False, spec))
    for part in parts[1:]:
        enabled, *more_disabled = part.split("-no-")
        changes.update(_switch(enabled, True, spec))
        for word in more_disabled:
            changes.update(_switch(word, False, spec))
    return dataclasses.replace(strategy, name=spec, **changes)


def _switch(word: str, value: bool, spec: str) -> dict[str, bool | int | str]:
    if word.split("=")[0] == "unroll":
        return {"unroll": _unroll_factor(word, value, spec)}
    if word.split("=")[0] == "device":
        return {"device": _device_name(word, value, spec)}
    if word == "horizontal":
        return {"horizontal_loop": value, "horizontal_input": value}
    field_name = _SWITCHES.get(word)
    if field_name is None:
        known = ", ".join(sorted(set(_SWITCHES) | {"horizontal", "unroll=k"}))
        raise StrategyError(f"strategy {spec!r}: unknown modifier {word!r}; known: {known}")
    if field_name == "relax_concatenate" and not value:
        raise StrategyError(f"strategy {spec!r}: relax_concatenate is a knob; write "
                            "+relax_concatenate to turn it on")
    return {field_name: value}


def _device_name(word: str, value: bool, spec: str) -> str:
    """`device=h100`: the GPU description xla-gpu's model prices for (`xla_gpu/devices.py`)."""
    _, has_name, name = word.partition("=")
    if not value or not has_name:
        raise StrategyError(f"strategy {spec!r}: write +device=NAME (a100, h100 or h200)")
    try:
        return device(name).name
    except ValueError as exc:
        raise StrategyError(f"strategy {spec!r}: {exc}") from exc


def _unroll_factor(word: str, value: bool, spec: str) -> int:
    """`unroll` / `unroll=auto` -> 0 (the pass chooses), `unroll=k` -> k, `-no-unroll` -> 1."""
    _, has_factor, factor = word.partition("=")
    if not value:
        if has_factor:
            raise StrategyError(f"strategy {spec!r}: write -no-unroll without a factor")
        return 1
    if not has_factor or factor == "auto":
        return 0
    if not factor.isdigit() or int(factor) < 1:
        raise StrategyError(f"strategy {spec!r}: unroll takes a positive factor or auto, got "
                            f"{factor!r}")
    return int(factor)


@dataclass
class FusionResult:
    """A module after a strategy: the fused module, the decision log and the kernels."""

    strategy: Strategy
    module: Module
    decisions: DecisionLog
    # False where the strategy ran without a decision log (a compile: `jit` asks for the
    # decisions only when explaining, and recording them costs a tenth of the passes).
    logged: bool = True
    # Listed when first asked for: a compile does not need the list (code generation finds
    # the kernels itself), and on a large module listing them costs a twentieth of the passes.
    _listed: tuple[list[Kernel], list[Loop]] | None = field(default=None, repr=False,
                                                           compare=False)

    @property
    def kernels(self) -> list[Kernel]:
        return self._listing()[0]

    @property
    def loops(self) -> list[Loop]:
        return self._listing()[1]

    def _listing(self) -> tuple[list[Kernel], list[Loop]]:
        if self._listed is None:
            self._listed = list_kernels(self.module)
        return self._listed

    def kernels_per_iteration(self) -> dict[str, int]:
        """Kernels launched per iteration of each while loop (nested loops separately)."""
        if self._listed is None:
            return count_kernels_per_iteration(self.module)
        return kernels_per_iteration(self.kernels, self.loops)

    def kernels_outside_loops(self) -> int:
        return sum(1 for k in self.kernels if not k.loops)

    def explain(self, verbose: bool = False) -> str:
        """The explain report as text."""
        return explain_text(self, verbose)

    def explain_dict(self) -> dict[str, object]:
        """The explain report as a JSON-ready dict."""
        return explain_dict(self)


def run_strategy(module: Module, strategy: str | Strategy, *, debug: bool = True,
                 dump_dir: Path | str | None = None,
                 constants: MachineConstants | None = None,
                 log_decisions: bool = True) -> FusionResult:
    """Run a strategy's pipeline on `module` (verifying after every pass when `debug`);
    `constants`: this machine's measured constants, for a strategy that `measures_costs`.
    Without `log_decisions` the passes decide the same and record nothing (the result's
    `decisions` stay empty and `explain` refuses it)."""
    chosen = parse_strategy(strategy) if isinstance(strategy, str) else strategy
    log = DecisionLog()
    fused, _ = Pipeline(chosen.steps(constants), debug=debug, dump_dir=dump_dir,
                        log=log if log_decisions else None).run(module)
    return FusionResult(chosen, fused, log, logged=log_decisions)
