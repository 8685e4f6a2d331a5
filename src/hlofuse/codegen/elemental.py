"""Element values of a fused computation through index maps, as XLA's elemental emitter does.

`ElementalEmitter.value(instruction, index)` returns an expression (usually a local) for one
element of `instruction`'s result, emitting the statements it needs into a `FunctionBody`.
Operands are reached through the op's index map (codegen/index_maps.py: broadcast drops
dimensions, transpose permutes them, slice offsets them, ...), so no intermediate array is
ever stored. Values are cached per (instruction, index) inside the current scope, so a
sub-expression used twice is computed once. Rank-0 values of the fused computation do not
depend on the output position and are hoisted to the kernel's prologue (XLA's loop-invariant
motion).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np

from hlofuse.codegen import cir
from hlofuse.codegen.body import FunctionBody, Key
from hlofuse.codegen.cir import Binary, Cast, Expr, Select
from hlofuse.codegen.emitter_types import (
    SCALAR,
    UNROLL_ELEMENTS,
    Binding,
    Index,
    NeedsLoopNest,
    UnsupportedInstruction,
    Value,
    expr_of,
    is_scalar_valued,
    selected,
    strides_of,
)
from hlofuse.codegen.index_maps import NOT_ELEMENTAL, STRUCTURAL
from hlofuse.codegen.language import Language
from hlofuse.codegen.licm import LoadCheck, is_speculable
from hlofuse.codegen.op_expressions import ELEMENTWISE, bitcast_joined, bitcast_piece
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op, OpKind

Materializer = Callable[[Instruction], tuple[Expr, ...]]

# The ops computed by `ElementalEmitter._elementwise` (map applies a computation instead).
_ELEMENTWISE_OPS = frozenset(op for op in Op
                             if op.definition.kind is OpKind.ELEMENTWISE and op is not Op.MAP)


class ElementalEmitter:
    """Emits element values of instructions; `bindings` give arguments' elements."""

    def __init__(self, lang: Language, body: FunctionBody, bindings: dict[int, Binding],
                 materialize: Materializer | None = None,
                 simd_reductions: bool = True, same_value: dict[int, int] | None = None) -> None:
        self.lang = lang
        self.body = body
        self.bindings = bindings
        # An instruction that computes the same value as an earlier one (analysis.same_values)
        # is looked up as that one: its operands are not visited again.
        self.same_value = same_value or {}
        self.materialize = materialize
        # The one value of each array constant whose elements are all equal (JAX's GPU
        # lowering spells a broadcast scalar as a full constant), None for the others.
        self._splats: dict[int, object | None] = {}
        # Inside a simd loop a reduction's own loop gets no simd pragma.
        self.simd_reductions = simd_reductions
        # Reductions over at most this many elements are written out (no loop).
        self.unrolled_reduction = UNROLL_ELEMENTS
        # Set where a branch costs more than computing both sides (vectorised lane code):
        # the loads both sides may run without their condition.
        self.speculable_load: LoadCheck | None = None
        self._no_hoist = 0
        self._scalar_valued: dict[int, bool] = {}
        # Loop variables with a known range [lo, hi): a concatenate read where the range lies
        # inside one operand picks that operand without a branch.
        self.ranges: dict[str, tuple[int, int]] = {}
        # Set in vectorised lane code: an array constant of at most this many elements read at
        # a computed position is a select over its literals (a gather, which gcc does not emit
        # for every CPU, would keep the lane loop scalar: a move table indexed by an action).
        self.selected_constant_reads = 0

    # --- index arithmetic -----------------------------------------------------------------

    def known_range(self, component: Expr) -> tuple[int, int] | None:
        """[lo, hi) of an index component that is a literal, a loop variable, or an affine
        form of loop variables (`i0 + 64`)."""
        if isinstance(component, cir.Int):
            return component.value, component.value + 1
        if not isinstance(component, cir.Var):
            return None
        found = self.ranges.get(component.name)
        form = self.body.index_forms.get(component.name)
        if found is not None or form is None:
            return found
        lo = hi = form.const
        for atom, coefficient in form.terms:
            span = self.ranges.get(atom.name) if isinstance(atom, cir.Var) else None
            if span is None:
                return None
            ends = (coefficient * span[0], coefficient * (span[1] - 1))
            lo, hi = lo + min(ends), hi + max(ends)
        return lo, hi + 1

    def index_let(self, expr: Expr) -> Expr:
        """A local (or literal, or name) for an index expression, in canonical form so that
        one position has one spelling (cir.canonical)."""
        try:
            form: cir.Affine | None = cir.canonical(expr, self.body.index_forms)
        except cir.NotAffine:
            form = None
        if form is not None:
            expr = cir.as_expr(form)
        if cir.is_simple(expr):
            return expr
        key = Key(("index", expr))
        found = self.body.lookup(key)
        if isinstance(found, Expr):
            return found
        name = self.body.let(self.lang.index_type, expr, "j")
        if form is not None and isinstance(name, cir.Var) and (form.const or len(form.terms) > 1):
            self.body.index_forms[name.name] = form  # an atom (i / 4) stays a name of its own
        self.body.remember(key, name)
        return name

    def linear_of(self, index: Index) -> Expr:
        if index.linear is not None:
            return index.linear
        assert index.multi is not None
        terms = [cir.mul(m, stride)
                 for m, stride, size in zip(index.multi, strides_of(index.dims), index.dims)
                 if size != 1 and not cir.is_zero(m)]
        return self.index_let(cir.add(*terms))

    def multi_of(self, index: Index) -> tuple[Expr, ...]:
        if index.multi is not None:
            return index.multi
        if index.flat_group is not None:
            raise NeedsLoopNest(index.flat_group)
        assert index.linear is not None
        linear = index.linear
        leading = next((k for k, d in enumerate(index.dims) if d != 1), None)
        out: list[Expr] = []
        for k, (stride, size) in enumerate(zip(strides_of(index.dims), index.dims)):
            if size == 1:
                out.append(cir.Int(0))
            elif k == leading:
                out.append(self.index_let(cir.div(linear, stride)))
            elif stride == 1:
                out.append(self.index_let(cir.mod(linear, size)))
            else:
                out.append(self.index_let(cir.mod(cir.div(linear, stride), size)))
        return tuple(out)

    # --- values ---------------------------------------------------------------------------

    def value(self, inst: Instruction, index: Index) -> Value:
        scalar = self._scalar_valued.get(id(inst))
        if scalar is None:
            scalar = self._scalar_valued[id(inst)] = is_scalar_valued(inst)
        if scalar:
            if self._no_hoist == 0 and not self.body.in_prologue:
                with self.body.hoisted():
                    return self.value(inst, SCALAR)
            index = SCALAR
        key = Key.of_element(self.same_value.get(id(inst), id(inst)), index.key, index.key_hash)
        found = self.body.lookup(key)
        if found is not None:
            return found  # type: ignore[return-value]
        binding = self.bindings.get(id(inst))
        known = self._constant_element(inst, index) if inst.op is Op.CONSTANT else None
        result: Value
        if known is not None:
            # An array constant read at a known position is its value (a scatter's constant
            # index, then, decides at code generation which elements it updates).
            result = self.lang.literal(inst.dtype, known)
        elif inst.op is Op.CONSTANT and \
                1 < inst.shape.num_elements <= self.selected_constant_reads:
            result = self._selected_constant(inst, index)
        elif binding is not None:
            result = self.apply_binding(binding, index)
        else:
            result = self._compute(inst, index)
        self.body.remember(key, result)
        return result

    def _constant_element(self, constant: Instruction, index: Index) -> object | None:
        """An array constant's element as a literal where it is known here: every element
        of a splat, the element at a literal index of any other."""
        if not constant.shape.dims:
            return None
        if id(constant) not in self._splats:
            self._splats[id(constant)] = splat_value(constant)
        splat = self._splats[id(constant)]
        return splat if splat is not None else literal_element(constant, index)

    def _selected_constant(self, constant: Instruction, index: Index) -> Value:
        """An array constant at a computed position, as a select over its elements."""
        literal = constant.attrs["literal"]
        assert isinstance(literal, np.ndarray)
        flat = literal.reshape(-1)
        position = self.index_let(self.linear_of(index))
        value = selected(position, [self.lang.literal(constant.dtype, x.item()) for x in flat])
        return self.body.let(self.lang.register_type(constant.dtype), value)

    def apply_binding(self, binding: Binding, index: Index) -> Value:
        if isinstance(binding, tuple):
            return tuple(self.apply_binding(b, index) for b in binding)
        return binding(index)

    def scalar(self, inst: Instruction) -> Expr:
        return expr_of(self.value(inst, SCALAR))

    def array_value(self, inst: Instruction, index: Index) -> Expr:
        result = self.value(inst, index)
        if not isinstance(result, Expr):
            raise UnsupportedInstruction(f"%{inst.name}: expected an array value")
        return result

    def _compute(self, inst: Instruction, index: Index) -> Value:
        if inst.op in _ELEMENTWISE_OPS:
            return self._elementwise(inst, index)
        handler = STRUCTURAL.get(inst.op)
        if handler is None:
            raise UnsupportedInstruction(
                f"%{inst.name}: {inst.op.text} cannot be computed element by element")
        return handler(self, inst, index)

    def _elementwise(self, inst: Instruction, index: Index) -> Expr:
        handler = ELEMENTWISE.get(inst.op)
        if handler is None:
            raise UnsupportedInstruction(f"%{inst.name}: no C code for {inst.op.text}")
        if inst.op is Op.BITCAST_CONVERT and inst.operands[0].dtype.bits != inst.dtype.bits:
            expr = self._bitcast_resized(inst, index)
            return self.body.let(self.lang.register_type(inst.dtype), expr, hlo_name=inst.name)
        operands = []
        for operand in inst.operands:
            operand_index = index if operand.shape.dims == inst.shape.dims else SCALAR
            operands.append(self.array_value(operand, operand_index))
        expr = handler(self.lang, inst, operands)
        return self.body.let(self.lang.register_type(inst.dtype), expr, hlo_name=inst.name)

    def _bitcast_resized(self, inst: Instruction, index: Index) -> Expr:
        """A bitcast-convert between widths (little-endian, as XLA's CPU backend): a narrower
        result's last index picks a piece of one operand element, a wider result joins the
        operand elements along the operand's last dimension."""
        operand = inst.operands[0]
        source, target, dims = operand.dtype, inst.dtype, operand.shape.dims
        if source.bits > target.bits:
            ratio = source.bits // target.bits
            if index.multi is not None:
                whole = Index(dims, None, index.multi[:-1], None)
                piece = index.multi[-1]
            else:
                linear = self.linear_of(index)
                whole = Index(dims, self.index_let(cir.div(linear, ratio)), None,
                              index.flat_group)
                piece = self.index_let(cir.mod(linear, ratio))
            value = self.array_value(operand, whole)
            return bitcast_piece(self.lang, source, target, value, piece)
        ratio = target.bits // source.bits
        pieces: list[Expr] = []
        for k in range(ratio):
            if index.multi is not None:
                part = Index(dims, None, (*index.multi, cir.Int(k)), None)
            else:
                at = self.index_let(cir.add(cir.mul(self.linear_of(index), ratio), k))
                part = Index(dims, at, None, index.flat_group)
            pieces.append(self.array_value(operand, part))
        return bitcast_joined(self.lang, source, target, pieces)

    def load(self, dtype: DType, pointer: Expr, index: Index) -> Expr:
        return self.body.let(self.lang.register_type(dtype),
                             self.lang.load(dtype, pointer, self.linear_of(index)))

    # --- branches ---------------------------------------------------------------------------

    def branch(self, dtype: DType, condition: Expr, then: Callable[[], Expr],
               otherwise: Callable[[], Expr]) -> Expr:
        """A value chosen by `condition`; each side is computed only where it is selected
        (or both, then selected, where `speculable_load` says that is harmless)."""
        with self.body.captured_scope() as then_scope:
            then_value = then()
        with self.body.captured_scope() as else_scope:
            else_value = otherwise()
        then_stmts, else_stmts = then_scope.stmts, else_scope.stmts
        register = self.lang.register_type(dtype)
        if not then_stmts and not else_stmts:
            return self.body.let(register, Select(condition, then_value, else_value))
        load_ok = self.speculable_load
        if load_ok is not None and is_speculable(then_stmts + else_stmts, load_ok):
            for stmt in then_stmts + else_stmts:
                self.body.emit(stmt)
            # what both sides computed now holds here too (the next branch reuses it)
            self.body.scope.cache.update(then_scope.cache)
            self.body.scope.cache.update(else_scope.cache)
            return self.body.let(register, Select(condition, then_value, else_value))
        name = self.body.fresh("v")
        self.body.assigned_once.add(name)
        var = self.body.declare(register, name)
        then_stmts.append(cir.Assign(var, then_value))
        else_stmts.append(cir.Assign(var, else_value))
        self.body.emit(cir.If(condition, then_stmts, else_stmts))
        return var

    # --- called computations ----------------------------------------------------------------

    def apply(self, computation: Computation, arguments: list[Binding]) -> Value:
        """The root of `computation` with its parameters bound, evaluated at the scalar index
        (reducers) or through the bindings' index maps (calls)."""
        params = computation.parameters
        for param, argument in zip(params, arguments):
            self.bindings[id(param)] = argument
        self._no_hoist += 1
        try:
            with self.body.cache_scope():
                root = computation.root
                if root.shape.is_array and root.shape.dims:
                    raise UnsupportedInstruction(f"%{computation.name}: expected scalars")
                return self.value(root, SCALAR)
        finally:
            self._no_hoist -= 1
            for param in params:
                del self.bindings[id(param)]

    def apply_reducer(self, reducer: Computation, accumulators: list[Expr],
                      values: list[Expr]) -> list[Expr]:
        def constant(expr: Expr) -> Binding:
            return lambda index: expr

        result = self.apply(reducer, [constant(e) for e in [*accumulators, *values]])
        flat = list(result) if isinstance(result, tuple) else [result]
        return [r for r in flat if isinstance(r, Expr)]

    def clamped_starts(self, inst: Instruction, starts: tuple[Instruction, ...],
                       operand_dims: tuple[int, ...], sizes: tuple[int, ...]) -> list[Expr]:
        """XLA clamps dynamic start indices so the window stays inside the operand."""
        key = Key(("starts", id(inst)))
        found = self.body.lookup(key)
        if isinstance(found, tuple):
            return list(found)
        out: list[Expr] = []
        # With hoisting off (values that change per loop step) the starts stay where they are.
        hoist = self.body.hoisted() if self._no_hoist == 0 else contextlib.nullcontext()
        with hoist:
            for start, dim, size in zip(starts, operand_dims, sizes):
                high = dim - size
                value = self.scalar(start)
                if high == 0:
                    out.append(cir.Int(0))
                    continue
                top = cir.Int(high)
                if start.dtype.is_unsigned_int:
                    expr: Expr = Select(Binary(">", Cast(DType.U64, value), Cast(DType.U64, top)),
                                        top, Cast(DType.S64, value))
                else:
                    wide = Cast(DType.S64, value)
                    expr = Select(Binary("<", wide, cir.Int(0)), cir.Int(0),
                                  Select(Binary(">", wide, top), top, wide))
                out.append(self.body.let(self.lang.index_type, expr, "s"))
            self.body.remember(key, tuple(out))
        return out


__all__ = ["NOT_ELEMENTAL", "STRUCTURAL", "UNROLL_ELEMENTS", "ElementalEmitter",
           "FunctionBody", "Index", "NeedsLoopNest", "SCALAR", "UnsupportedInstruction"]


def literal_element(constant: Instruction, index: Index) -> object | None:
    """The element of an array constant at `index` when the index is literal, else None."""
    dims = constant.shape.dims
    if not dims:
        return None
    position: int | None = None
    if index.linear is not None:
        position = cir.int_value(index.linear)
    elif index.multi is not None:
        position = 0
        for m, stride in zip(index.multi, strides_of(dims)):
            component = cir.int_value(m)
            if component is None:
                return None
            position += component * stride
    literal = constant.attrs["literal"]
    assert isinstance(literal, np.ndarray)
    if position is None or not 0 <= position < literal.size:
        return None
    value: object = literal.reshape(-1)[position].item()
    return value


def splat_value(constant: Instruction) -> object | None:
    """The value of every element of an array constant whose elements are all the same bits,
    else None."""
    literal = constant.attrs["literal"]
    assert isinstance(literal, np.ndarray)
    flat = literal.reshape(-1)
    if flat.size == 0 or flat.dtype.kind not in "biuf":
        return None
    bits = flat.view(np.dtype(f"u{flat.dtype.itemsize}")) if flat.dtype.itemsize in (1, 2, 4, 8) \
        else None
    if bits is None or not bool(np.all(bits == bits[0])):
        return None
    value: object = flat[0].item()
    return value
