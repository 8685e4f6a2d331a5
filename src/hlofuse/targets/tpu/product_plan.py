"""Which lane-uniform products of a whole-loop kernel run on the TPU's MXU
(lane_products.py computes them): the choice, without JAX, for the kernel's layout and for
`hlofuse explain`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hlofuse.analysis.lane_classification import alias, element_read
from hlofuse.analysis.parallel_loop import LoopPlan, apply_recorded_plan
from hlofuse.analysis.whole_loop_config import read_recorded_plan, read_whole_loop_config
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op

# Multiply-adds of the written-out form one tile moved through the MXU form costs (fitted
# on the v5e over products of 16 x 16 to 128 x 128, 64 x 3 and 3 x 64: mxu_forms_light.json;
# the crossover fell between 16 x 16, faster written out, and 32 x 32, faster on the MXU).
MOVE_COST = 16


def on_the_mxu(k: int, m: int) -> bool:
    """Whether a product contracting K positions into M outputs per lane is cheaper on the
    MXU (K + M tiles moved) than written out (K x M multiply-adds per tile)."""
    return k * m >= MOVE_COST * (k + m)


@dataclass(frozen=True, eq=False)
class Product:
    """A lane-uniform dot: which operand is uniform (0 lhs, 1 rhs), what it is (a read of a
    fixed element, or a constant: weights a jitted function closed over), and the (M, K)
    arrangement of it the kernel takes in VMEM."""

    name: str
    side: int
    source: Instruction
    element: int | None  # the fixed element; None for a constant
    order: tuple[int, ...]  # the element's free dimensions, then its contracted ones
    k: int
    m: int
    mxu: bool

    @property
    def matrix_key(self) -> tuple[object, tuple[int, ...]]:
        source = self.element if self.element is not None else ("constant", id(self.source))
        return source, self.order


def plan_products(body: Computation, fixed: Sequence[int], per_lane: Mapping[int, int]
                  ) -> dict[int, Product]:
    """The step's dots with one operand the same for every lane and every step (read from a
    fixed element, or a constant) and the other per-lane (in `per_lane`, the plan's
    `value_lane_dims`), by id() of the dot; each says whether it runs on the MXU (f32, no
    batch dimensions, large enough)."""
    found: dict[int, Product] = {}
    for inst in body.instructions:
        if inst.op is not Op.DOT:
            continue
        for side in (1, 0):
            source = alias(inst.operands[side])
            element = element_read(source)
            if not _unchanging(source, fixed) or id(inst.operands[1 - side]) not in per_lane:
                continue
            product = _product(inst, side, source, element)
            if product is not None:
                found[id(inst)] = product
            break
    return found


def _unchanging(inst: Instruction, fixed: Sequence[int]) -> bool:
    return inst.op is Op.CONSTANT or element_read(inst) in fixed


def _product(inst: Instruction, side: int, source: Instruction, element: int | None
             ) -> Product | None:
    if inst.ints("lhs_batch_dims") or inst.ints("rhs_batch_dims"):
        return None
    uniform = inst.operands[side]
    contracted = inst.ints("rhs_contracting_dims" if side else "lhs_contracting_dims")
    free = tuple(d for d in range(uniform.shape.rank) if d not in contracted)
    dims = uniform.shape.dims
    k = int(np.prod([dims[d] for d in contracted]))
    m = int(np.prod([dims[d] for d in free]))
    exact = inst.dtype is DType.F32 and all(o.dtype is DType.F32 for o in inst.operands)
    return Product(inst.name, side, source, element, (*free, *contracted), k, m,
                   exact and on_the_mxu(k, m))


def describe(products: dict[int, Product]) -> str:
    """The products' forms, for the kernel's header and `hlofuse explain`."""
    if not products:
        return ""
    on = [p for p in products.values() if p.mxu]
    off = [p for p in products.values() if not p.mxu]
    parts = []
    if on:
        parts.append("on the MXU: " + ", ".join(f"%{p.name} ({p.k} -> {p.m})" for p in on))
    if off:
        parts.append("written out: " + ", ".join(
            f"%{p.name} ({p.k} -> {p.m}, "
            f"{'not f32' if on_the_mxu(p.k, p.m) else 'K x M < 16 (K + M)'})" for p in off))
    return "; lane-uniform products " + "; ".join(parts)


def mxu_matrices(products: Mapping[int, Product]) -> list[Product]:
    """One MXU product per weight matrix the kernel takes in VMEM (a fixed element or a
    constant in one (M, K) arrangement)."""
    found: dict[tuple[object, tuple[int, ...]], Product] = {}
    for p in products.values():
        if p.mxu:
            found.setdefault(p.matrix_key, p)
    return list(found.values())


def mxu_vmem(products: Mapping[int, Product]) -> tuple[int, int]:
    """What the MXU products add to a block's VMEM: tiles of a block (each product's stacked
    K inputs and M outputs) and words (the weight matrices, double-buffered)."""
    tiles = sum(p.k + p.m for p in products.values() if p.mxu)
    return tiles, 2 * sum(p.k * p.m for p in mxu_matrices(products))


def vmem_only(plan: LoopPlan, products: Mapping[int, Product]) -> frozenset[int]:
    """Fixed elements nothing but MXU products reads (as their weights, from VMEM): they
    need no SMEM input. Any other read (a written-out product, a bias, a nested loop's
    operand) keeps an element in SMEM."""
    readers: dict[int, list[tuple[Instruction, int]]] = {}
    for comp in (plan.body, plan.condition):
        for inst in comp.instructions:
            for k, operand in enumerate(inst.operands):
                element = element_read(operand)
                if element is not None:
                    readers.setdefault(element, []).append((inst, k))
    root = plan.body.root

    def by_mxu(inst: Instruction, k: int, element: int) -> bool:
        product = products.get(id(inst))
        return inst is root or (product is not None and product.mxu and product.side == k
                                and product.element == element)

    return frozenset(e for e in fixed_elements(plan)
                     if all(by_mxu(inst, k, e) for inst, k in readers.get(e, ())))


def fixed_elements(plan: LoopPlan) -> list[int]:
    """Elements the loop passes on unchanged and no lane holds: the read-only ones and the
    uniform ones the body returns as it got them (a policy's 64 biases)."""
    root = plan.body.root
    passed_on = [e for e in plan.uniform if element_read(root.operands[e]) == e]
    return [*plan.read_only, *passed_on]


def whole_loop_plan(fusion: Instruction) -> LoopPlan | None:
    """The plan a whole-loop fusion recorded, or None."""
    config = next((raw.text for key, raw in fusion.extra if key == "backend_config"), "")
    recorded = read_recorded_plan(config) if read_whole_loop_config(config) else None
    loop = fusion.calls[0].root if fusion.calls else None
    if recorded is None or loop is None or loop.op is not Op.WHILE:
        return None
    plan = apply_recorded_plan(loop, *recorded)
    return plan if isinstance(plan, LoopPlan) else None


def explain_lines(module: Module) -> list[str]:
    """A line per whole-loop fusion with lane-uniform products: each product's form."""
    lines = []
    for inst in module.all_instructions():
        if inst.op is not Op.FUSION:
            continue
        plan = whole_loop_plan(inst)
        if plan is None:
            continue
        products = plan_products(plan.body, fixed_elements(plan), plan.value_lane_dims)
        if products:
            lines.append(f"%{inst.name}: " + describe(products).removeprefix(
                "; lane-uniform products "))
    return lines
