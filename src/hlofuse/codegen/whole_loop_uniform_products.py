"""Products the uniform steps of a whole-loop kernel compute, in loops.

Uniform code writes each small uniform element out position by position, and the elemental
emitter writes a product's sum out term by term: a policy layer of a program whose lanes hold
nothing (one environment, a loop over a few lanes whose state is all uniform) becomes
thousands of written-out multiply-adds a step, and the C compiler's time grows with them
(fuzz seed 1610: 600 terms, 13 s to compile). Such a product is computed once per step into a
local array, by a loop over its positions around a loop over its contracting positions, after
its computed operands are stored whole (so an operand's work, a hidden layer's tanh, is done
once per position, not once per position of the product). The sums keep their order (from
+0, ascending, one fused multiply-add a term, as `dot_elemental`), so results are those of the
written-out form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from hlofuse.analysis.lane_linalg import contraction_size
from hlofuse.analysis.parallel_loop import LoopPlan
from hlofuse.codegen import cir
from hlofuse.codegen.body import FunctionBody
from hlofuse.codegen.dot_elemental import operand_index
from hlofuse.codegen.elemental import ElementalEmitter
from hlofuse.codegen.emitter_types import UNROLL_ELEMENTS, Index, Value
from hlofuse.codegen.whole_loop_scratch_values import FREE_TO_READ
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op

Reader = Callable[[str, Instruction], Callable[[Index], Value]]


def looped_uniform_products(plan: LoopPlan, roots: Iterable[Instruction]) -> list[Instruction]:
    """The products uniform code computes for `roots`, in body order, whose written-out form
    would be over UNROLL_ELEMENTS multiply-adds: float, one contracting dimension, more than
    one position."""
    needed: set[int] = set()
    stack = list(roots)
    while stack:
        inst = stack.pop()
        if id(inst) not in needed and id(inst) in plan.uniform_code:
            needed.add(id(inst))
            stack.extend(inst.operands)
    return [inst for inst in plan.body.instructions
            if inst.op is Op.DOT and id(inst) in needed and inst.dtype.is_float
            and len(inst.ints("lhs_contracting_dims")) == 1 and inst.shape.num_elements > 1
            and inst.shape.num_elements * contraction_size(inst) > UNROLL_ELEMENTS
            and all(x.shape.num_elements <= LOCAL_ARRAY_ELEMENTS
                    for x in (inst, *inst.operands))]


# The local arrays are on the stack: products and operands larger than this keep the
# written-out form (uniform code that large is refused by the plan's size limits anyway).
LOCAL_ARRAY_ELEMENTS = 1 << 14


def _free_to_read(inst: Instruction) -> bool:
    """Read again at every position for nothing: a constant, a parameter, a broadcast of one
    or of a scalar (computed once, before the loops: `_scalars_first`)."""
    if inst.op is Op.BROADCAST:
        source = inst.operands[0]
        return source.shape.rank == 0 or source.op in FREE_TO_READ
    return inst.op in FREE_TO_READ


def _scalars_first(em: ElementalEmitter, plan: LoopPlan, value: Instruction) -> None:
    """The scalars uniform code computes `value` from, computed in the enclosing scope, where
    the loops' reads find them (not once per position: a layer scaled by its mean)."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        inst = stack.pop()
        if id(inst) in seen or id(inst) not in plan.uniform_code:
            continue
        seen.add(id(inst))
        if inst.shape.rank == 0 and inst.op is not Op.CONSTANT:
            em.scalar(inst)
        else:
            stack.extend(inst.operands)


@contextmanager
def uniform_products_in_loops(body: FunctionBody, em: ElementalEmitter, plan: LoopPlan,
                              roots: Iterable[Instruction],
                              register_type: Callable[[Instruction], cir.Type],
                              reader: Reader) -> Iterator[None]:
    """Within the block: `em` reads each looped uniform product `roots` need (and its
    computed operands) from a local array filled at the block's start; the bindings end with
    it (the arrays are the block's locals)."""
    products = looped_uniform_products(plan, roots)
    bound: list[int] = []
    for dot in products:
        for operand in dot.operands:
            _scalars_first(em, plan, operand)
            if _free_to_read(operand) or id(operand) in em.bindings or \
                    id(operand) not in plan.uniform_code:
                continue
            name = body.fresh("mo")
            body.declare(register_type(operand), name, dims=(operand.shape.num_elements,))
            q = body.fresh("q")
            with body.loop(q, 0, operand.shape.num_elements), body.cache_scope():
                body.assign(cir.load(name, cir.Var(q)), em.array_value(
                    operand, Index(operand.shape.dims, cir.Var(q), None, None)))
            em.bindings[id(operand)] = reader(name, operand)
            bound.append(id(operand))
        name = body.fresh("mp")
        body.declare(register_type(dot), name, dims=(dot.shape.num_elements,))
        _fill_product(body, em, dot, name, register_type(dot))
        em.bindings[id(dot)] = reader(name, dot)
        bound.append(id(dot))
    try:
        yield
    finally:
        for key in bound:
            del em.bindings[key]


def _fill_product(body: FunctionBody, em: ElementalEmitter, dot: Instruction, name: str,
                  register: cir.Type) -> None:
    lhs, rhs = dot.operands
    lhs_batch, rhs_batch = dot.ints("lhs_batch_dims"), dot.ints("rhs_batch_dims")
    lhs_contracting, rhs_contracting = dot.ints("lhs_contracting_dims"), \
        dot.ints("rhs_contracting_dims")
    n_batch = len(lhs_batch)
    n_lhs_free = lhs.shape.rank - n_batch - 1
    q = body.fresh("q")
    with body.loop(q, 0, dot.shape.num_elements), body.cache_scope():
        multi = em.multi_of(Index(dot.shape.dims, cir.Var(q), None, None))
        batch = tuple(multi[:n_batch])
        total = body.variable(register, "sum", em.lang.literal(dot.dtype, 0))
        c = body.fresh("c")
        with body.loop(c, 0, lhs.shape.dims[lhs_contracting[0]], counter=cir.Special.INT):
            a = em.array_value(lhs, operand_index(
                lhs.shape.dims, lhs_batch, lhs_contracting, batch,
                tuple(multi[n_batch:n_batch + n_lhs_free]), (cir.Var(c),)))
            b = em.array_value(rhs, operand_index(
                rhs.shape.dims, rhs_batch, rhs_contracting, batch,
                tuple(multi[n_batch + n_lhs_free:]), (cir.Var(c),)))
            body.assign(total, cir.call(em.lang.math("fma", dot.dtype), a, b, total))
        body.assign(cir.load(name, cir.Var(q)), total)
