"""How the CUDA target lays a reduction kernel out, as XLA's GetReductionKindAndContiguousComponents
classifies it (reductions.py's docstring gives the kinds): the kernel's reduce heroes, the
row, column or elemental layout after merging adjacent dimensions of one kind, whether the
tiled emitter beats the elemental one (XLA's IsUnnestedReductionFasterThanElemental), and
how an f16/bf16 reducer is computed."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from hlofuse.analysis.reducers import reducer_op
from hlofuse.codegen.kernel_spec import KernelSpec
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op, OpKind

WARP = 32
BLOCK = 256  # threads per block: 8 warps
WARPS_PER_BLOCK = BLOCK // WARP
# Rows at least this long get a block each; shorter ones a warp each.
BLOCK_PER_ROW_EXTENT = 2048
_TYPES = frozenset({DType.F16, DType.BF16, DType.F32, DType.F64, DType.PRED, DType.S8,
                    DType.S16, DType.S32, DType.S64, DType.U8, DType.U16, DType.U32, DType.U64})


@dataclass(frozen=True)
class ReductionLayout:
    """The reduces of a kernel as XLA's ReductionDimensions and the kind of kernel chosen.

    Row (and batched row): `[major, outer, extent]` with `inner` = 1, the reduced elements of
    a row `major` x `extent` (XLA's (R, K, R)); column: `[outer, extent, inner]`, `major` = 1.
    `elemental` (XLA's loop emitter for a reduction not from or to contiguous dimensions, or
    one too small for the tiled emitters): one thread per output element."""

    heroes: tuple[Instruction, ...]  # the reduces, each once
    # (output argument, a reduce or its epilogue, the leaf of a variadic reduce's result)
    outputs: tuple[tuple[int, Instruction, tuple[int, ...]], ...]
    in_dims: tuple[int, ...]
    outer: int
    extent: int
    inner: int
    major: int = 1
    elemental: bool = False
    reduced: tuple[int, ...] = ()  # the reduced dimensions (every kind)
    # (output argument, an instruction of the input's shape): XLA's side outputs of a
    # multi-output reduction fusion, written where the reduction reads the element
    side: tuple[tuple[int, Instruction], ...] = ()

    @property
    def kind(self) -> str:
        if self.elemental:
            return "elemental"
        if self.inner > 1:
            return "column"
        return "block-row" if self.major * self.extent >= BLOCK_PER_ROW_EXTENT else "warp-row"

    @property
    def threads(self) -> int:
        """The grid: a warp per row, a block per row, a block per tile of 32 columns, or a
        thread per output element."""
        if self.kind == "elemental":
            kept = math.prod(d for k, d in enumerate(self.in_dims) if k not in self.reduced)
            return max(kept, 1)
        if self.kind == "warp-row":
            return max(self.outer, 1) * WARP
        if self.kind == "block-row":
            return max(self.outer, 1) * BLOCK
        return self.outer * -(-self.inner // WARP) * BLOCK


def _heroes(inst: Instruction, dims: tuple[int, ...], bound: set[int],
            found: list[Instruction], seen: dict[int, bool], reach: dict[int, bool]) -> bool:
    """Adds the reduces `inst` is computed from through element-wise ops of shape `dims`
    (XLA's reduction epilogue) to `found`; False when a reduce is reached another way.
    `seen` and `reach` remember instructions already answered (a fused computation is a
    DAG: without them the walk is exponential in its depth)."""
    known = seen.get(id(inst))
    if known is not None:
        return known
    if id(inst) in bound:
        answer = True
    elif inst.op is Op.REDUCE:
        answer = not inst.shape.is_tuple and inst.shape.dims == dims
        if answer and all(h is not inst for h in found):
            found.append(inst)
    elif inst.definition.kind is OpKind.ELEMENTWISE and inst.op is not Op.MAP \
            and inst.shape.dims == dims:
        answer = all(_heroes(o, dims, bound, found, seen, reach) for o in inst.operands)
    else:
        answer = not reaches_reduce(inst, bound, reach)
    seen[id(inst)] = answer
    return answer


def reaches_reduce(inst: Instruction, bound: set[int], seen: dict[int, bool]) -> bool:
    known = seen.get(id(inst))
    if known is not None:
        return known
    answer = id(inst) not in bound and (
        inst.op is Op.REDUCE or any(reaches_reduce(o, bound, seen) for o in inst.operands))
    seen[id(inst)] = answer
    return answer


def reduction_layout(spec: KernelSpec) -> ReductionLayout | None:
    """How the kernel's reduces map onto a grid, or None when this emitter does not take it."""
    if not spec.outputs:
        return None
    bound = {id(inst) for inst, _ in spec.inputs}
    heroes: list[Instruction] = []
    outputs: list[tuple[int, Instruction, tuple[int, ...]]] = []
    side: list[tuple[int, Instruction]] = []
    reach: dict[int, bool] = {}
    for k, (inst, path) in enumerate(spec.outputs):
        if id(inst) in bound:
            return None
        if inst.op is Op.REDUCE and inst.shape.is_tuple and len(path) == 1:
            if all(h is not inst for h in heroes):
                heroes.append(inst)  # one result of a variadic reduce (argmax's value, index)
        elif not path and not inst.shape.is_tuple and not reaches_reduce(inst, bound, reach):
            side.append((k, inst))  # checked below: the reduction input's shape
            continue
        elif path or inst.shape.is_tuple \
                or not _heroes(inst, inst.shape.dims, bound, heroes, {}, reach):
            return None  # not computed from the reduces element by element
        outputs.append((k, inst, path))
    if not heroes:
        return None
    key = (heroes[0].operands[0].shape.dims, tuple(sorted(heroes[0].ints("dimensions"))))
    for hero in heroes:
        count = len(hero.operands) // 2
        if any(x.dtype not in _TYPES for x in hero.operands[:count]):
            return None
        if any(x.dtype in (DType.F16, DType.BF16) for x in hero.operands[:count]) \
                and low_precision_plan(hero) is None:
            return None
        if any(x.shape.dims != key[0] for x in hero.operands[:count]):
            return None
        if (hero.operands[0].shape.dims, tuple(sorted(hero.ints("dimensions")))) != key:
            return None
    in_dims, reduced = key
    if any(inst.shape.dims != in_dims for _, inst in side):
        return None  # an output of a third shape: XLA would not fuse it here either
    if math.prod(in_dims) == 0:
        return None
    # XLA's GetReductionKindAndContiguousComponents on the dimensions left after dropping
    # size-1 ones (adjacent dimensions of one kind merge, as its ReductionDimensionGrouper).
    groups: list[tuple[str, int]] = []
    for d, size in enumerate(in_dims):
        if size == 1:
            continue
        tag = "r" if d in reduced else "k"
        if groups and groups[-1][0] == tag:
            groups[-1] = (tag, groups[-1][1] * size)
        else:
            groups.append((tag, size))
    pattern = "".join(tag for tag, _ in groups)
    sizes = [size for _, size in groups]
    base = ReductionLayout(tuple(heroes), tuple(outputs), in_dims, 1, 1, 1,
                           reduced=reduced, side=tuple(side))
    if "r" not in pattern:
        return None  # nothing reduced: a copy, the loop emitter's
    if pattern in ("r", "kr"):
        layout = replace(base, outer=math.prod(sizes[:-1]), extent=sizes[-1])
    elif pattern in ("rk", "krk"):
        layout = replace(base, outer=math.prod(sizes[:-2]), extent=sizes[-2], inner=sizes[-1])
    elif pattern == "rkr":  # XLA's batched row reduction
        layout = replace(base, major=sizes[0], outer=sizes[1], extent=sizes[2])
    else:  # neither the kept nor the reduced dimensions contiguous
        layout = replace(base, elemental=True)
    if not layout.elemental and not _tiled_is_faster(layout):
        layout = replace(base, elemental=True)
    return layout


def _tiled_is_faster(layout: ReductionLayout) -> bool:
    """XLA's IsUnnestedReductionFasterThanElemental (2022, as the fusion passes ask it): a row
    shorter than a warp or a short, narrow column is reduced by one thread per output
    element. (Today's XLA also tiles rows whose length divides 32, packing several rows into
    a warp; ours packs none.)"""
    if layout.inner == 1:
        return layout.extent >= WARP
    rows, columns = layout.extent, layout.inner
    return not (rows < WARP or (rows < 2 * WARP and columns < WARP)
                or (rows < 4 * WARP and columns < 8) or (rows < 8 * WARP and columns < 3))


def low_precision_plan(r: Instruction) -> str | None:
    """How an f16/bf16 reduce accumulates on sm_80, our target, as XLA compiles it there.

    XLA's GpuFloatSupport keeps a reduce in its low-precision type only when every op of its
    reducer is supported in that type: f16 everywhere, bf16 max/min/compare/select from
    Ampere on but bf16 add/multiply/subtract only from Hopper. Otherwise FloatNormalization
    computes the reduce in f32 and converts the result once. "native": the reducer as
    written, rounded after every application; "f32": a one-op add or multiply reducer
    accumulated in f32 and rounded once; None: a bf16 reducer of several ops that would be
    normalised to f32 (not done here: the one-thread kernel)."""
    if all(x.dtype is not DType.BF16 for x in r.operands):
        return "native"
    arithmetic = {Op.ADD, Op.MULTIPLY, Op.SUBTRACT}
    if not any(i.op in arithmetic for i in r.calls[0].instructions):
        return "native"
    if len(r.operands) == 2 and reducer_op(r.calls[0]) in (Op.ADD, Op.MULTIPLY):
        return "f32"
    return None
