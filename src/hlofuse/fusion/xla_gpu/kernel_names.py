"""XLA's names for the kernels of a fused module: what `explain` and `compare-xla` show for
`xla-gpu`, so that its kernels read as XLA's optimised HLO and thunk sequence name them.

* `RenameFusions` (`xla/service/gpu/transforms/rename_fusions.cc`, `RenameFusion`,
  `MakeFusionHeroNames`) names every fusion but custom ones `<kind>_<heroes>_fusion`: the kind
  without its `k`, lower case (`loop`, `input`, `output`), then the opcodes of the heroes of the
  fusion's roots, sorted, unique, joined by `_`, with `-` written `_`
  (`loop_add_fusion`, `input_reduce_fusion`, `loop_compare_convert_multiply_fusion`).
* A root's hero (`FindNonTrivialHero`, `xla/service/gpu/ir_emission_utils.cc`) is the root
  itself, unless a concatenate or a reduction feeds it through trivial ops (bitcasts, and
  element-wise ops with one operand that is not a scalar), or a concatenate feeds it through
  element-wise ops of any arity and is the only one there (XLA's second, wider search).
  Transpose heroes need XLA's layouts (the tiled transpose emitter's check), which hlofuse's
  row-major kernels do not carry: a transpose root is named by its own opcode.
* The kind is XLA's (`PriorityFusion::ChooseKind`, derived from the emitter): a fusion the
  concatenate or the reduction emitter runs is an input fusion (`input_concatenate_fusion`,
  `input_add_clamp_reduce_fusion`), which hlofuse may keep as a loop fusion (a multi-output
  fusion with a reduction among its roots; the kind does not steer xla-gpu's decisions).
* `FusionWrapper` (`xla/service/gpu/transforms/fusion_wrapper.cc`) wraps every instruction left
  unfused that needs a kernel into a fusion named `wrapped_<opcode>` (`wrapped_slice`).
* Copies stay copies (device-to-device copies, not kernels of their own code), and custom
  fusions (Triton GEMMs) keep the name GemmFusion gave them.

Names are made unique module-wide as XLA's `SetAndUniquifyInstrName` does: the first keeps the
bare name, later ones get `.1`, `.2`, ... in the order of computations callees first and of
instructions within each.
"""

from __future__ import annotations

import re

from hlofuse.analysis.call_graph import callee_order
from hlofuse.fusion.kernels import is_free
from hlofuse.fusion.legality.properties import (
    current_xla_rules,
    is_effective_scalar,
    reduces_contiguous_dimensions,
)
from hlofuse.fusion.xla_gpu.launch_dimensions import MAX_CONCATENATE_EMITTER_OPERANDS
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import FusionKind, Op, OpKind

_KIND_PREFIX: dict[str, str] = {FusionKind.LOOP: "loop", FusionKind.INPUT: "input",
                                 FusionKind.OUTPUT: "output"}
_SUFFIX = re.compile(r"\.\d+$")


def _intermediate(inst: Instruction) -> Instruction | None:
    """The operand a trivial op passes on (`FindNonTrivialHero`'s walk: bitcasts, reshapes,
    copies, unary element-wise ops, and others with one operand that is not a scalar)."""
    if inst.op in (Op.BITCAST, Op.RESHAPE, Op.COPY):
        return inst.operands[0]
    if inst.op.definition.kind is OpKind.ELEMENTWISE:
        if len(inst.operands) == 1:
            return inst.operands[0]
        wide = [o for o in inst.operands if not is_effective_scalar(o.shape)]
        if len(wide) == 1:
            return wide[0]
    return None


def hero(root: Instruction) -> Instruction:
    """The instruction a fusion root is named after: a concatenate or reduction behind
    trivial ops, else the root itself (see the module doc)."""
    current: Instruction | None = root
    while current is not None:
        if current.op in (Op.CONCATENATE, Op.REDUCE):
            return current
        if current.op is Op.PARAMETER:
            break
        current = _intermediate(current)
    # XLA tries harder for a concatenate: through element-wise ops of any arity; it must be
    # the only one found.
    stack, seen, found = [root], {root}, []
    while stack:
        inst = stack.pop(0)
        if inst.op is Op.CONCATENATE:
            found.append(inst)
        elif inst.op in (Op.BITCAST, Op.RESHAPE, Op.COPY) \
                or inst.op.definition.kind is OpKind.ELEMENTWISE:
            for operand in inst.operands:
                if operand not in seen:
                    seen.add(operand)
                    stack.append(operand)
    return found[0] if len(found) == 1 else root


def roots_of(fused: Computation) -> list[Instruction]:
    return list(fused.root.operands) if fused.root.op is Op.TUPLE else [fused.root]


def emitter_kind(inst: Instruction) -> str:
    """The fusion kind XLA's priority fusion gives a fusion (`PriorityFusion::ChooseKind`, from
    `HloFusionAnalysis::GetEmitterFusionKind`): the reduction emitter's fusions (a root whose
    hero is a tiled reduction, a multi-output fusion's too) and the concatenate emitter's (one
    root whose hero is a concatenate of at most four operands) are input fusions, like
    scatters; hlofuse's own kind otherwise."""
    kind = str(inst.attrs.get("kind", ""))
    roots = roots_of(inst.calls[0])
    if kind != FusionKind.LOOP:
        return kind
    heroes = [hero(r) for r in roots]
    if any(h.op is Op.REDUCE and reduces_contiguous_dimensions(h.operands[0].shape,
                                                               h.ints("dimensions"))
           for h in heroes):
        return FusionKind.INPUT  # the reduction emitter (a multi-output fusion's reduce)
    if (len(roots) == 1 and heroes[0].op is Op.CONCATENATE
            and len(heroes[0].operands) <= MAX_CONCATENATE_EMITTER_OPERANDS):
        return FusionKind.INPUT
    return kind


def fusion_name(inst: Instruction) -> str | None:
    """XLA's bare name for a fusion instruction (None for a custom fusion)."""
    prefix = _KIND_PREFIX.get(emitter_kind(inst))
    if prefix is None:
        return None
    # Copies among the roots came after renaming (CopyFusion's extra outputs).
    roots = [r for r in roots_of(inst.calls[0]) if r.op is not Op.COPY] or roots_of(inst.calls[0])
    heroes = sorted({hero(r).op.text.replace("-", "_") for r in roots})
    return f"{prefix}_{'_'.join(heroes)}_fusion"


def bare_name(inst: Instruction) -> str | None:
    """XLA's name for a launching instruction before it is made unique, or None where XLA
    keeps the instruction's own name (copies, custom fusions, free instructions)."""
    if inst.op is Op.FUSION:
        return fusion_name(inst)
    if inst.op is Op.COPY or is_free(inst):
        return None
    return "wrapped_" + inst.op.text.replace("-", "_")


def xla_kernel_names(module: Module) -> dict[tuple[str, str], str]:
    """(computation, instruction) -> XLA's name, for every instruction that launches."""
    used: dict[str, int] = {}
    names: dict[tuple[str, str], str] = {}
    fused = {c for comp in module.computations for i in comp.instructions
             if i.op is Op.FUSION for c in i.calls}
    # The emitter kinds are today's (a small row reduction is the reduction emitter's), as
    # xla-gpu's priority fusion chose them.
    with current_xla_rules():
        for comp in callee_order(module):
            if comp in fused:
                continue
            for inst in comp.instructions:
                base = bare_name(inst)
                if base is None:
                    continue
                count = used.get(base, 0)
                used[base] = count + 1
                names[(comp.name, inst.name)] = base if count == 0 else f"{base}.{count}"
    return names


def same_name(ours: str, xla: str) -> bool:
    """Whether two kernel names are the same but for the uniquifying suffix (`.1`)."""
    return _SUFFIX.sub("", ours) == _SUFFIX.sub("", xla)
