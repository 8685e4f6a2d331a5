"""Element values of a fused computation through index maps, as XLA's elemental emitter does.

`ElementalEmitter.value(instruction, index)` returns a C expression (usually a local's name)
for one element of `instruction`'s result, emitting the statements it needs. Operands are
reached through the op's index map (broadcast drops dimensions, transpose permutes them,
slice offsets them, ...), so no intermediate array is ever stored. Values are cached per
(instruction, index) inside the current scope, so a sub-expression used twice is computed once;
a scope ends with its block (a branch of pad or concatenate, a reduction loop) so a value never
leaks out of the branch that computed it. Rank-0 values of the fused computation do not depend
on the output position and are hoisted to the kernel's prologue (XLA's loop-invariant motion).

Locals are also numbered by value: a local whose expression (the same text over the same
constant locals) was computed before in a scope still open is reused. Fusion passes that
duplicate a producer into several consumers and then merge those consumers leave clones of one
computation inside one fused computation (CartPole's Threefry hash, once per consumer); the
clones then cost nothing. Loads and expressions over variables that are assigned again
(accumulators, loop state) are never reused.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Union

import numpy as np

from hlofuse.codegen.elementwise import ELEMENTWISE, convert_expression
from hlofuse.codegen.index_expr import Affine, NotAffine, canonical
from hlofuse.codegen.language import CLanguage
from hlofuse.ir.attrs import PaddingDim, SliceDim, Window
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op, OpKind

Value = Union[str, tuple["Value", ...]]
Binding = Union[Callable[["Index"], Value], tuple["Binding", ...]]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# `name = ...;`, `name += ...;`, `++name;`, `name--;`: a statement that assigns a variable
# after its declaration.
_ASSIGNMENT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:[-+*/%|&^]?=(?!=)|\+\+|--)"
                         r"|^\s*(?:\+\+|--)([A-Za-z_][A-Za-z0-9_]*)")
_SIMPLE = re.compile(r"^-?[A-Za-z_][A-Za-z0-9_]*$"  # an identifier
                     r"|^-?[0-9][0-9A-Za-z.+x]*$"  # a number
                     r"|^\(\([a-z0-9_]+\)-?[0-9]+U?LL\)$")  # a typed integer literal


# Reductions over at most this many elements, and small dimensions of loop nests (c_emitter),
# are written out with literal indices.
UNROLL_ELEMENTS = 16


class UnsupportedInstruction(ValueError):
    """The code generator has no emission for this instruction; the message names it."""


class NeedsLoopNest(Exception):
    """A flat loop cannot supply per-dimension indices; the group must be emitted as a nest."""

    def __init__(self, group: int) -> None:
        super().__init__(group)
        self.group = group


@dataclass(frozen=True)
class Index:
    """One element position: the row-major linear index, per-dimension indices, or both."""

    dims: tuple[int, ...]
    linear: str | None = None
    multi: tuple[str, ...] | None = None
    # Set inside a flat loop: per-dimension indices would cost a division per element.
    flat_group: int | None = None

    @property
    def key(self) -> tuple[str, ...]:
        """One key per element position, however the index is spelled: a value reached both
        through the linear index and through per-dimension indices is computed once."""
        if self.multi is not None:
            return ("M", *("0" if d == 1 else m for m, d in zip(self.multi, self.dims)))
        assert self.linear is not None
        wide = [k for k, d in enumerate(self.dims) if d != 1]
        if len(wide) <= 1:  # the linear index is the one wide dimension's index
            return ("M", *(self.linear if k in wide else "0" for k in range(len(self.dims))))
        return ("L", self.linear)


SCALAR = Index((), "0", ())


def is_simple(expr: str) -> bool:
    """An identifier or literal: cheap to repeat, needs no local of its own."""
    return bool(_SIMPLE.match(expr))


def is_scalar_valued(inst: Instruction) -> bool:
    """Rank-0 results (or tuples of them): the same value at every output position."""
    leaves = inst.shape.leaves()
    return bool(leaves) and all(leaf.is_array and not leaf.dims for leaf in leaves)


def strides_of(dims: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    stride = 1
    for d in reversed(dims):
        out.append(stride)
        stride *= d
    return tuple(reversed(out))


@dataclass
class Scope:
    lines: list[str]
    indent: int
    cache: dict[tuple[object, ...], Value] = field(default_factory=dict)


class FunctionBody:
    """Statements of one C function: a prologue plus sections, with nested caching scopes."""

    def __init__(self, indent: int = 1) -> None:
        self.prologue = Scope([], indent)
        self.scopes: list[Scope] = [self.prologue]
        self._names = itertools.count()
        self.hoisting = 0  # > 0 while emitting loop-invariant code into the prologue
        # Locals declared at the top of the prologue, with their C types: a loop moved into
        # a function of its own (a parallel part) receives the ones it reads.
        self.prologue_names: dict[str, str] = {}
        # Value numbering (see the module docstring): the identifiers each numbered local's
        # expression reads, and the variables assigned after their declaration.
        self._reads: dict[str, frozenset[str]] = {}
        self.mutable: set[str] = set()
        self.assigned_once: set[str] = set()  # declared, then assigned once on each path
        self.index_forms: dict[str, Affine] = {}  # index locals and their affine forms

    def fresh(self, prefix: str = "v") -> str:
        return f"{prefix}{next(self._names)}"

    @property
    def scope(self) -> Scope:
        return self.scopes[-1]

    @property
    def in_prologue(self) -> bool:
        return self.scopes[-1] is self.prologue

    def emit(self, line: str) -> None:
        assigned = _ASSIGNMENT.match(line)
        if assigned is not None:
            name = assigned.group(1) or assigned.group(2)
            if name not in self.assigned_once:
                self.mutable.add(name)
        self.scope.lines.append("  " * self.scope.indent + line)

    def let(self, ctype: str, expr: str, prefix: str = "v") -> str:
        if is_simple(expr):
            return expr
        numbered = "[" not in expr  # a load may see a store in between
        key = ("let", ctype, expr)
        if numbered:
            found = self.lookup(key)
            if isinstance(found, str) and not self._reads[found] & self.mutable:
                return found
        name = self.fresh(prefix)
        self.declare(f"const {ctype}", name, expr)
        if numbered:
            self._reads[name] = frozenset(_IDENTIFIER.findall(expr))
            self.remember(key, name)
        return name

    def declare(self, ctype: str, name: str, init: str | None = None) -> None:
        """`ctype name = init;` (a variable when ctype is not const)."""
        if not ctype.startswith("const ") and name not in self.assigned_once:
            self.mutable.add(name)
        if self.scope is self.prologue:
            self.prologue_names[name] = ctype
        self.emit(f"{ctype} {name};" if init is None else f"{ctype} {name} = {init};")

    def lookup(self, key: tuple[object, ...]) -> Value | None:
        for scope in reversed(self.scopes):
            found = scope.cache.get(key)
            if found is not None:
                return found
        return None

    def remember(self, key: tuple[object, ...], value: Value) -> None:
        self.scope.cache[key] = value

    @contextlib.contextmanager
    def block(self, header: str | None, pragma: str | None = None) -> Iterator[None]:
        """`header {` ... `}` with its own cache; header None opens a cache-only scope.

        A block opened at the top of the prologue collects its lines apart and joins the
        prologue when it closes, so values hoisted while it is open land before it.
        """
        parent = self.scope
        if header is None:
            self.scopes.append(Scope(parent.lines, parent.indent))
        elif parent is self.prologue:
            self.scopes.append(Scope([], parent.indent + 1))
        else:
            if pragma is not None:
                self.emit(pragma)
            self.emit(header + " {")
            self.scopes.append(Scope(parent.lines, parent.indent + 1))
        try:
            yield
        finally:
            inner = self.scopes.pop()
            if header is not None and parent is self.prologue:
                pad = "  " * parent.indent
                opening = ([pad + pragma] if pragma is not None else []) + [pad + header + " {"]
                parent.lines.extend([*opening, *inner.lines, pad + "}"])
            elif header is not None:
                self.emit("}")

    @contextlib.contextmanager
    def section(self, lines: list[str], indent: int) -> Iterator[None]:
        """Emit into `lines` (a loop section after the prologue), still seeing the prologue."""
        saved = self.scopes
        self.scopes = [self.prologue, Scope(lines, indent)]
        try:
            yield
        finally:
            self.scopes = saved

    @contextlib.contextmanager
    def hoisted(self) -> Iterator[None]:
        saved = self.scopes
        self.scopes = [self.prologue]
        self.hoisting += 1
        try:
            yield
        finally:
            self.scopes = saved
            self.hoisting -= 1

    @contextlib.contextmanager
    def captured(self) -> Iterator[list[str]]:
        """A cache scope whose statements go to a separate list (to decide if-else vs ?:)."""
        lines: list[str] = []
        self.scopes.append(Scope(lines, self.scope.indent + 1))
        try:
            yield lines
        finally:
            self.scopes.pop()


Materializer = Callable[[Instruction], tuple[str, ...]]


class ElementalEmitter:
    """Emits element values of instructions; `bindings` give arguments' elements."""

    def __init__(self, lang: CLanguage, body: FunctionBody, bindings: dict[int, Binding],
                 materialize: Materializer | None = None) -> None:
        self.lang = lang
        self.body = body
        self.bindings = bindings
        self.materialize = materialize
        self._no_hoist = 0
        # Loop variables with a known range [lo, hi): a concatenate read where the range lies
        # inside one operand picks that operand without a branch.
        self.ranges: dict[str, tuple[int, int]] = {}

    # --- index arithmetic -----------------------------------------------------------------

    def known_range(self, component: str) -> tuple[int, int] | None:
        """[lo, hi) of an index component that is a literal, a loop variable, or an affine
        form of loop variables (`i0 + 64`)."""
        if component.lstrip("-").isdigit():
            return int(component), int(component) + 1
        found = self.ranges.get(component)
        form = self.body.index_forms.get(component)
        if found is not None or form is None:
            return found
        lo = hi = form.const
        for atom, coefficient in form.terms.items():
            span = self.ranges.get(atom)
            if span is None:
                return None
            ends = (coefficient * span[0], coefficient * (span[1] - 1))
            lo, hi = lo + min(ends), hi + max(ends)
        return lo, hi + 1

    def index_let(self, expr: str) -> str:
        """A local (or literal, or name) for an index expression, in canonical form so that
        one position has one spelling (see index_expr.py)."""
        try:
            form: Affine | None = canonical(expr, self.body.index_forms)
        except NotAffine:
            form = None
        if form is not None:
            expr = form.text()
        if is_simple(expr):
            return expr
        key = ("index", expr)
        found = self.body.lookup(key)
        if isinstance(found, str):
            return found
        name = self.body.let(self.lang.index_type, expr, "j")
        if form is not None and (form.const or len(form.terms) > 1):
            self.body.index_forms[name] = form  # an atom (i / 4) stays a name of its own
        self.body.remember(key, name)
        return name

    def linear_of(self, index: Index) -> str:
        if index.linear is not None:
            return index.linear
        assert index.multi is not None
        terms = []
        for component, stride, size in zip(index.multi, strides_of(index.dims), index.dims):
            if size == 1 or component == "0":
                continue
            terms.append(component if stride == 1 else f"{component} * {stride}")
        return self.index_let(" + ".join(terms) if terms else "0")

    def multi_of(self, index: Index) -> tuple[str, ...]:
        if index.multi is not None:
            return index.multi
        if index.flat_group is not None:
            raise NeedsLoopNest(index.flat_group)
        assert index.linear is not None
        linear = index.linear
        leading = next((k for k, d in enumerate(index.dims) if d != 1), None)
        out = []
        for k, (stride, size) in enumerate(zip(strides_of(index.dims), index.dims)):
            if size == 1:
                out.append("0")
            elif k == leading:
                out.append(self.index_let(linear if stride == 1 else f"{linear} / {stride}"))
            elif stride == 1:
                out.append(self.index_let(f"{linear} % {size}"))
            else:
                out.append(self.index_let(f"({linear} / {stride}) % {size}"))
        return tuple(out)

    # --- values ---------------------------------------------------------------------------

    def value(self, inst: Instruction, index: Index) -> Value:
        if is_scalar_valued(inst):
            if self._no_hoist == 0 and not self.body.in_prologue:
                with self.body.hoisted():
                    return self.value(inst, SCALAR)
            index = SCALAR
        key = (id(inst), *index.key)
        found = self.body.lookup(key)
        if found is not None:
            return found
        binding = self.bindings.get(id(inst))
        if binding is not None:
            result = self._apply_binding(binding, index)
        else:
            result = self._compute(inst, index)
        self.body.remember(key, result)
        return result

    def _apply_binding(self, binding: Binding, index: Index) -> Value:
        if isinstance(binding, tuple):
            return tuple(self._apply_binding(b, index) for b in binding)
        return binding(index)

    def scalar(self, inst: Instruction) -> str:
        result = self.value(inst, SCALAR)
        assert isinstance(result, str)
        return result

    def array_value(self, inst: Instruction, index: Index) -> str:
        result = self.value(inst, index)
        if not isinstance(result, str):
            raise UnsupportedInstruction(f"%{inst.name}: expected an array value")
        return result

    def _compute(self, inst: Instruction, index: Index) -> Value:
        if inst.definition.kind is OpKind.ELEMENTWISE:
            return self._elementwise(inst, index)
        handler = STRUCTURAL.get(inst.op)
        if handler is None:
            raise UnsupportedInstruction(
                f"%{inst.name}: {inst.op.text} cannot be computed element by element")
        return handler(self, inst, index)

    def _elementwise(self, inst: Instruction, index: Index) -> str:
        handler = ELEMENTWISE.get(inst.op)
        if handler is None:
            raise UnsupportedInstruction(f"%{inst.name}: no C code for {inst.op.text}")
        operands = []
        for operand in inst.operands:
            operand_index = index if operand.shape.dims == inst.shape.dims else SCALAR
            operands.append(self.array_value(operand, operand_index))
        expr = handler(self.lang, inst, operands)
        return self.body.let(self.lang.register_type(inst.dtype), expr)

    def load(self, dtype: DType, pointer: str, index: Index) -> str:
        return self.body.let(self.lang.register_type(dtype),
                             self.lang.load(dtype, pointer, self.linear_of(index)))

    # --- branches ---------------------------------------------------------------------------

    def branch(self, dtype: DType, condition: str, then: Callable[[], str],
               otherwise: Callable[[], str]) -> str:
        """A value chosen by `condition`; each side is computed only where it is selected."""
        with self.body.captured() as then_lines:
            then_value = then()
        with self.body.captured() as else_lines:
            else_value = otherwise()
        ctype = self.lang.register_type(dtype)
        if not then_lines and not else_lines:
            return self.body.let(ctype, f"({condition} ? {then_value} : {else_value})")
        name = self.body.fresh("v")
        self.body.assigned_once.add(name)
        self.body.declare(ctype, name)
        self.body.emit(f"if ({condition}) {{")
        self.body.scope.lines.extend(then_lines)
        self.body.emit(f"  {name} = {then_value};")
        self.body.emit("} else {")
        self.body.scope.lines.extend(else_lines)
        self.body.emit(f"  {name} = {else_value};")
        self.body.emit("}")
        return name

    # --- called computations ----------------------------------------------------------------

    def apply(self, computation: Computation, arguments: list[Binding]) -> Value:
        """The root of `computation` with its parameters bound, evaluated at the scalar index
        (reducers) or through the bindings' index maps (calls)."""
        params = computation.parameters
        for param, argument in zip(params, arguments):
            self.bindings[id(param)] = argument
        self._no_hoist += 1
        try:
            with self.body.block(None):
                root = computation.root
                index = SCALAR if not root.shape.is_array or not root.shape.dims else None
                if index is None:
                    raise UnsupportedInstruction(f"%{computation.name}: expected scalars")
                return self.value(root, index)
        finally:
            self._no_hoist -= 1
            for param in params:
                del self.bindings[id(param)]

    def apply_reducer(self, reducer: Computation, accumulators: list[str],
                      values: list[str]) -> list[str]:
        def constant(expr: str) -> Binding:
            return lambda index: expr

        result = self.apply(reducer, [constant(e) for e in [*accumulators, *values]])
        flat = list(result) if isinstance(result, tuple) else [result]
        return [r for r in flat if isinstance(r, str)]

    def clamped_starts(self, inst: Instruction, starts: tuple[Instruction, ...],
                       operand_dims: tuple[int, ...], sizes: tuple[int, ...]) -> list[str]:
        """XLA clamps dynamic start indices so the window stays inside the operand."""
        key = ("starts", id(inst))
        found = self.body.lookup(key)
        if isinstance(found, tuple):
            return [str(s) for s in found]
        out = []
        # With hoisting off (values that change per loop step) the starts stay where they are.
        hoist = self.body.hoisted() if self._no_hoist == 0 else contextlib.nullcontext()
        with hoist:
            for start, dim, size in zip(starts, operand_dims, sizes):
                high = dim - size
                value = self.scalar(start)
                if high == 0:
                    out.append("0")
                    continue
                if start.dtype.is_unsigned_int:
                    expr = f"((uint64_t){value} > {high}ULL ? {high} : (int64_t){value})"
                else:
                    wide = f"(int64_t){value}"
                    expr = f"({wide} < 0 ? 0 : {wide} > {high} ? {high} : {wide})"
                out.append(self.body.let(self.lang.index_type, expr, "s"))
            self.body.remember(key, tuple(out))
        return out


# --- structural handlers ---------------------------------------------------------------------

Structural = Callable[[ElementalEmitter, Instruction, Index], Value]


def _parameter(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    raise UnsupportedInstruction(f"%{inst.name}: parameter without an argument")


def _constant(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    literal = inst.attrs["literal"]
    if inst.shape.dims:
        raise UnsupportedInstruction(f"%{inst.name}: array constant without an argument")
    return em.lang.literal(inst.dtype, literal.reshape(()).item())  # type: ignore[union-attr]


def _same_index(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    return em.value(inst.operands[0], index)


def _reshape(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand = inst.operands[0]
    source, target = operand.shape.dims, inst.shape.dims
    if index.multi is not None and [d for d in source if d != 1] == [d for d in target if d != 1]:
        kept = iter(m for m, d in zip(index.multi, target) if d != 1)
        multi = tuple("0" if d == 1 else next(kept) for d in source)
        return em.value(operand, Index(source, None, multi, None))
    return em.value(operand, Index(source, em.linear_of(index), None, index.flat_group))


def _broadcast(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand = inst.operands[0]
    dims = inst.ints("dimensions")
    source, target = operand.shape.dims, inst.shape.dims
    if not source:
        return em.value(operand, SCALAR)
    if source == target and dims == tuple(range(len(target))):
        return em.value(operand, index)
    if index.multi is None and index.linear is not None:
        count = math.prod(source)
        rank = len(target)
        if dims == tuple(range(rank - len(source), rank)) and source == target[rank - len(dims):]:
            # A trailing block of dimensions: the operand repeats with period `count`.
            linear = em.index_let(f"{index.linear} % {count}")
            return em.value(operand, Index(source, linear, None, index.flat_group))
        if dims == tuple(range(len(source))) and source == target[:len(source)]:
            inner = math.prod(target[len(source):])
            linear = em.index_let(f"{index.linear} / {inner}")
            return em.value(operand, Index(source, linear, None, index.flat_group))
    multi = em.multi_of(index)
    operand_multi = tuple("0" if size == 1 else multi[d] for d, size in zip(dims, source))
    return em.value(operand, Index(source, None, operand_multi, None))


def _transpose(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand = inst.operands[0]
    perm = inst.ints("dimensions")
    if perm == tuple(range(len(perm))):
        return em.value(operand, index)
    multi = em.multi_of(index)
    operand_multi = ["0"] * len(perm)
    for i, p in enumerate(perm):
        operand_multi[p] = multi[i]
    return em.value(operand, Index(operand.shape.dims, None, tuple(operand_multi), None))


def _slice(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand = inst.operands[0]
    spec = inst.attrs["slice"]
    assert isinstance(spec, tuple)
    if all(isinstance(s, SliceDim) and s.start == 0 and s.stride == 1 for s in spec) and \
            inst.shape.dims == operand.shape.dims:
        return em.value(operand, index)
    multi = em.multi_of(index)
    out = []
    for m, s in zip(multi, spec):
        assert isinstance(s, SliceDim)
        term = m if s.stride == 1 else f"{m} * {s.stride}"
        out.append(em.index_let(f"{term} + {s.start}") if s.start else em.index_let(term))
    return em.value(operand, Index(operand.shape.dims, None, tuple(out), None))


def _reverse(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand = inst.operands[0]
    reversed_dims = set(inst.ints("dimensions"))
    if not any(operand.shape.dims[d] > 1 for d in reversed_dims):
        return em.value(operand, index)
    multi = em.multi_of(index)
    out = tuple(em.index_let(f"{size - 1} - {m}") if d in reversed_dims and size > 1 else m
                for d, (m, size) in enumerate(zip(multi, operand.shape.dims)))
    return em.value(operand, Index(operand.shape.dims, None, out, None))


def _iota(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    dim = inst.attrs["iota_dimension"]
    assert isinstance(dim, int)
    position = em.multi_of(index)[dim]
    expr = convert_expression(em.lang, DType.S64, inst.dtype, f"(int64_t){position}")
    return em.body.let(em.lang.register_type(inst.dtype), expr)


def _pad(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand, padding_value = inst.operands
    config = inst.attrs["padding"]
    assert isinstance(config, tuple)
    multi = em.multi_of(index)
    conditions: list[str] = []
    operand_multi: list[str] = []
    for m, p, size in zip(multi, config, operand.shape.dims):
        assert isinstance(p, PaddingDim)
        shifted = em.index_let(f"{m} - {p.low}" if p.low else m)
        if p.interior:
            step = p.interior + 1
            conditions += [f"{shifted} >= 0", f"{shifted} % {step} == 0",
                           f"{shifted} / {step} < {size}"]
            operand_multi.append(em.index_let(f"{shifted} / {step}"))
            continue
        if p.low > 0:
            conditions.append(f"{shifted} >= 0")
        if p.high > 0:
            conditions.append(f"{shifted} < {size}")
        operand_multi.append(shifted)
    operand_index = Index(operand.shape.dims, None, tuple(operand_multi), None)
    if not conditions:
        return em.value(operand, operand_index)
    return em.branch(inst.dtype, " && ".join(conditions),
                     lambda: em.array_value(operand, operand_index),
                     lambda: em.scalar(padding_value))


def _concatenate(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    axis = inst.ints("dimensions")[0]
    multi = em.multi_of(index)
    pieces: list[tuple[Instruction, int]] = []
    offset = 0
    for operand in inst.operands:
        if operand.shape.dims[axis]:
            pieces.append((operand, offset))
        offset += operand.shape.dims[axis]

    known = em.known_range(multi[axis])
    if known is not None:
        for operand, start in pieces:
            if start <= known[0] and known[1] <= start + operand.shape.dims[axis]:
                return _piece_value(em, inst, operand, start, multi, axis)

    def chain(k: int) -> str:
        operand, start = pieces[k]
        if k == len(pieces) - 1:
            return _piece_value(em, inst, operand, start, multi, axis)
        end = start + operand.shape.dims[axis]
        return em.branch(inst.dtype, f"{multi[axis]} < {end}",
                         lambda: _piece_value(em, inst, operand, start, multi, axis),
                         lambda: chain(k + 1))

    return chain(0)


def _piece_value(em: ElementalEmitter, inst: Instruction, operand: Instruction, start: int,
                 multi: tuple[str, ...], axis: int) -> str:
    position = em.index_let(f"{multi[axis]} - {start}" if start else multi[axis])
    operand_multi = tuple(position if d == axis else m for d, m in enumerate(multi))
    return em.array_value(operand, Index(operand.shape.dims, None, operand_multi, None))


def _dynamic_slice(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand = inst.operands[0]
    starts = em.clamped_starts(inst, inst.operands[1:], operand.shape.dims, inst.shape.dims)
    multi = em.multi_of(index) if inst.shape.dims else ()
    out = tuple(em.index_let(m if s == "0" else f"{m} + {s}") for m, s in zip(multi, starts))
    return em.value(operand, Index(operand.shape.dims, None, out, None))


def _dynamic_update_slice(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    operand, update = inst.operands[:2]
    starts = em.clamped_starts(inst, inst.operands[2:], operand.shape.dims, update.shape.dims)
    multi = em.multi_of(index)
    conditions = []
    update_multi = []
    for m, s, size, full in zip(multi, starts, update.shape.dims, operand.shape.dims):
        if size == full:
            update_multi.append(m)
            continue
        conditions.append(f"{m} >= {s} && {m} < {s} + {size}")
        update_multi.append(em.index_let(m if s == "0" else f"{m} - {s}"))
    update_index = Index(update.shape.dims, None, tuple(update_multi), None)
    if not conditions:
        return em.value(update, update_index)
    return em.branch(inst.dtype, " && ".join(conditions),
                     lambda: em.array_value(update, update_index),
                     lambda: em.array_value(operand, index))


def _get_tuple_element(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    source = inst.operands[0]
    position = inst.attrs["index"]
    assert isinstance(position, int)
    if source.op is Op.TUPLE:
        return em.value(source.operands[position], index)
    binding = em.bindings.get(id(source))
    if isinstance(binding, tuple):
        return em._apply_binding(binding[position], index)
    whole = em.value(source, index)
    assert isinstance(whole, tuple)
    return whole[position]


def _tuple(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    return tuple(em.value(o, index) for o in inst.operands)


def _call(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    callee = inst.calls[0]
    depth = em._no_hoist

    def outer(operand: Instruction) -> Binding:
        def evaluate(operand_index: Index) -> Value:
            saved = em._no_hoist
            em._no_hoist = depth
            try:
                return em.value(operand, operand_index)
            finally:
                em._no_hoist = saved
        return evaluate

    for param, operand in zip(callee.parameters, inst.operands):
        em.bindings[id(param)] = outer(operand)
    em._no_hoist += 1
    try:
        with em.body.block(None):
            return em.value(callee.root, index)
    finally:
        em._no_hoist -= 1
        for param in callee.parameters:
            del em.bindings[id(param)]


def simple_reducer(reducer: Computation) -> Op | None:
    """The op of a reducer that is one binary op of its two parameters, else None."""
    root = reducer.root
    params = reducer.parameters
    if len(params) != 2 or len(root.operands) != 2 or not root.shape.is_array:
        return None
    if {id(o) for o in root.operands} != {id(p) for p in params}:
        return None
    if root.operands[0] is root.operands[1]:
        return None
    if root.op in (Op.ADD, Op.MULTIPLY, Op.MAXIMUM, Op.MINIMUM, Op.AND, Op.OR, Op.XOR):
        return root.op
    return None


_SIMD_REDUCTIONS = {Op.ADD: "+", Op.MULTIPLY: "*", Op.AND: "&", Op.OR: "|", Op.XOR: "^"}
_IDENTITIES = {Op.ADD: 0.0, Op.MULTIPLY: 1.0, Op.MAXIMUM: -math.inf, Op.MINIMUM: math.inf}


@dataclass(frozen=True)
class Accumulation:
    """How a reduce accumulates, following the reference (NumPy) where order shows.

    Integer add/mul/and/or/xor are associative: the reduced loop may be vectorised (OpenMP
    simd reduction). Float sums and products reduce the values from the op's identity and
    combine the total with the initial value last, as the reference does (`ufunc.reduce`,
    then `ufunc(init, total)`): f32/f64/f16 sums in NumPy's pairwise order (`pairwise`, needs
    the values stored: see KernelEmitter), f16 sums and products in f32, rounded once. bf16
    and max/min reduce in order from the identity; every other reducer runs in order from the
    initial value. Without -ffast-math nothing is reassociated.
    """

    ctype: str
    simd_op: str | None = None
    identity: str | None = None  # start here and apply the initial value last
    unrounded: bool = False  # f16 sum or product: accumulate in f32, round once
    pairwise: bool = False  # a float sum: NumPy's pairwise order when rows are contiguous


def accumulation(em: ElementalEmitter, reducer: Computation, dtype: DType,
                 count: int) -> Accumulation:
    op = simple_reducer(reducer)
    ctype = em.lang.register_type(dtype)
    if count != 1 or op is None:
        return Accumulation(ctype)
    if op in _SIMD_REDUCTIONS and (dtype.is_integer or dtype.is_pred):
        return Accumulation(ctype, _SIMD_REDUCTIONS[op])
    if dtype.is_float and op in _IDENTITIES:
        identity = em.lang.literal(dtype, _IDENTITIES[op])
        unrounded = dtype is DType.F16 and op in (Op.ADD, Op.MULTIPLY)
        pairwise = op is Op.ADD and dtype in (DType.F16, DType.F32, DType.F64)
        return Accumulation(ctype, None, identity, unrounded, pairwise)
    return Accumulation(ctype)


def reduction_order(in_dims: tuple[int, ...], dimensions: tuple[int, ...]) -> str:
    """"pairwise" or "sequential": how the reference sums the rows of this reduce.

    The reference moves the reduced dimensions last (in `dimensions` order) and calls
    `np.add.reduce(..., axis=-1)`, which sums pairwise when the rows end up contiguous or at
    unit stride and one element after another otherwise. Only which dimensions exceed one
    matters, so a tiny array of the same pattern answers the question.
    """
    small = tuple(min(d, 2) for d in in_dims)
    x = np.empty(small, np.float32)
    kept = [d for d in range(len(in_dims)) if d not in dimensions]
    moved = np.transpose(x, kept + list(dimensions)).reshape(
        tuple(small[d] for d in kept) + (-1,))
    if moved.flags.c_contiguous or moved.strides[-1] == x.itemsize:
        return "pairwise"
    return "sequential"


def _reduce(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    count = len(inst.operands) // 2
    inputs, inits = inst.operands[:count], inst.operands[count:]
    reduced = inst.ints("dimensions")
    in_dims = inputs[0].shape.dims
    reducer = inst.calls[0]
    plan = accumulation(em, reducer, inputs[0].dtype, count)
    if plan.pairwise and em.materialize is not None and math.prod(
            in_dims[d] for d in reduced) >= 8:
        return _materialized(em, inst, index)  # the stored rows are summed pairwise
    if 0 < math.prod(in_dims[d] for d in reduced) <= UNROLL_ELEMENTS:
        return _reduce_written_out(em, inst, index, plan)
    out_multi = iter(em.multi_of(index) if inst.shape.leaves()[0].dims else ())
    accumulators = []
    for init in inits:
        name = em.body.fresh("acc")
        start = plan.identity if plan.identity is not None else em.scalar(init)
        ctype = "float" if plan.unrounded else em.lang.register_type(init.dtype)
        em.body.declare(ctype, name, start)
        accumulators.append(name)
    multi: list[str] = [""] * len(in_dims)
    for d in range(len(in_dims)):
        if d not in reduced:
            multi[d] = next(out_multi)
    loops: list[tuple[str, int]] = []
    for d in reduced:  # row-major in `dimensions` order, as the reference walks them
        if in_dims[d] == 1:
            multi[d] = "0"
            continue
        var = em.body.fresh("red")
        loops.append((var, in_dims[d]))
        multi[d] = var
    if not any(in_dims[d] == 0 for d in reduced):
        with contextlib.ExitStack() as stack:
            for k, (var, size) in enumerate(loops):
                pragma = None
                if k == len(loops) - 1 and plan.simd_op is not None:
                    pragma = em.lang.simd_reduction.format(op=plan.simd_op, var=accumulators[0])
                stack.enter_context(
                    em.body.block(f"for (int64_t {var} = 0; {var} < {size}; ++{var})", pragma))
            input_index = Index(in_dims, None, tuple(multi), None)
            values = [em.array_value(x, input_index) for x in inputs]
            if plan.unrounded:
                symbol = "+" if simple_reducer(reducer) is Op.ADD else "*"
                em.body.emit(f"{accumulators[0]} = {accumulators[0]} {symbol} {values[0]};")
            else:
                updated = em.apply_reducer(reducer, accumulators, values)
                for acc, new in zip(accumulators, updated):
                    em.body.emit(f"{acc} = {new};")
    return _reduced_value(em, reducer, inits, plan, accumulators)


def _reduced_value(em: ElementalEmitter, reducer: Computation, inits: tuple[Instruction, ...],
                   plan: Accumulation, accumulators: list[str]) -> Value:
    """The reduce's result from its accumulators: an accumulation started at the reducer's
    identity combines with the init at the end (rounded first when it ran unrounded)."""
    if plan.identity is not None:
        total = accumulators[0]
        if plan.unrounded:
            total = em.body.let("float", em.lang.round_to(DType.F16, total))
        return em.apply_reducer(reducer, [em.scalar(inits[0])], [total])[0]
    return accumulators[0] if len(accumulators) == 1 else tuple(accumulators)


def _reduce_written_out(em: ElementalEmitter, inst: Instruction, index: Index,
                        plan: Accumulation) -> Value:
    """A small reduce with a literal index per reduced element instead of a loop, in the
    loop's order: one output element's values then share their subexpressions (CartPole's
    any(|state| > limits) over a packed row of four), and an enclosing loop vectorises."""
    count = len(inst.operands) // 2
    inputs, inits = inst.operands[:count], inst.operands[count:]
    reduced = inst.ints("dimensions")
    in_dims = inputs[0].shape.dims
    reducer = inst.calls[0]
    out_multi = iter(em.multi_of(index) if inst.shape.leaves()[0].dims else ())
    base = ["" if d in reduced else next(out_multi) for d in range(len(in_dims))]
    if plan.identity is not None:
        accumulators = [plan.identity]
    else:
        accumulators = [em.scalar(init) for init in inits]
    symbol = "+" if simple_reducer(reducer) is Op.ADD else "*"
    # Row-major in `dimensions` order, as the reference walks them.
    for position in itertools.product(*(range(in_dims[d]) for d in reduced)):
        multi = list(base)
        for d, p in zip(reduced, position):
            multi[d] = str(p)
        input_index = Index(in_dims, None, tuple(multi), None)
        values = [em.array_value(x, input_index) for x in inputs]
        if plan.unrounded:
            accumulators = [em.body.let("float", f"({accumulators[0]} {symbol} {values[0]})")]
        else:
            accumulators = em.apply_reducer(reducer, accumulators, values)
    return _reduced_value(em, reducer, inits, plan, accumulators)


def _reduce_window(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    count = len(inst.operands) // 2
    inputs, inits = inst.operands[:count], inst.operands[count:]
    window = inst.attrs["window"]
    assert isinstance(window, Window)
    in_dims = inputs[0].shape.dims
    out_multi = em.multi_of(index)
    accumulators = []
    for init in inits:
        name = em.body.fresh("acc")
        em.body.declare(em.lang.register_type(init.dtype), name, em.scalar(init))
        accumulators.append(name)
    with contextlib.ExitStack() as stack:
        positions: list[str] = []
        conditions: list[str] = []
        for d, size in enumerate(in_dims):
            var = "0"
            if window.size[d] > 1:
                var = em.body.fresh("w")
                stack.enter_context(em.body.block(
                    f"for (int64_t {var} = 0; {var} < {window.size[d]}; ++{var})"))
            terms = [f"{out_multi[d]} * {window.stride[d]}" if window.stride[d] != 1
                     else out_multi[d]]
            if var != "0":
                dilation = window.rhs_dilate[d]
                terms.append(var if dilation == 1 else f"{var} * {dilation}")
            if window.pad_low[d]:
                terms.append(f"{-window.pad_low[d]}")
            position = em.index_let(" + ".join(terms))
            dilate = window.lhs_dilate[d]
            padded = window.pad_low[d] > 0 or window.pad_high[d] > 0 or dilate > 1
            if dilate > 1:
                conditions += [f"{position} >= 0", f"{position} % {dilate} == 0",
                               f"{position} / {dilate} < {size}"]
                position = em.index_let(f"{position} / {dilate}")
            elif padded:
                conditions += [f"{position} >= 0", f"{position} < {size}"]
            positions.append(position)
        input_index = Index(in_dims, None, tuple(positions), None)
        if conditions:
            condition = " && ".join(conditions)
            values = [em.branch(x.dtype, condition,
                                lambda x=x: em.array_value(x, input_index),  # type: ignore[misc]
                                lambda init=init: em.scalar(init))  # type: ignore[misc]
                      for x, init in zip(inputs, inits)]
        else:
            values = [em.array_value(x, input_index) for x in inputs]
        updated = em.apply_reducer(inst.calls[0], accumulators, values)
        for acc, new in zip(accumulators, updated):
            em.body.emit(f"{acc} = {new};")
    return accumulators[0] if count == 1 else tuple(accumulators)


def _materialized(em: ElementalEmitter, inst: Instruction, index: Index) -> Value:
    """Library results (dot, custom-call) are computed whole into temporaries, then read."""
    if em.materialize is None:
        raise UnsupportedInstruction(f"%{inst.name}: {inst.op.text} inside this kernel")
    pointers = em.materialize(inst)
    leaves = inst.shape.leaves()
    values = [em.load(leaf.dtype, pointer, Index(leaf.dims, em.linear_of(index), None,
                                                 index.flat_group))
              for leaf, pointer in zip(leaves, pointers)]
    return values[0] if not inst.shape.is_tuple else tuple(values)


STRUCTURAL: dict[Op, Structural] = {
    Op.BITCAST: _reshape,
    Op.BROADCAST: _broadcast,
    Op.CALL: _call,
    Op.CONCATENATE: _concatenate,
    Op.CONSTANT: _constant,
    Op.COPY: _same_index,
    Op.CUSTOM_CALL: _materialized,
    Op.DOT: _materialized,
    Op.DYNAMIC_SLICE: _dynamic_slice,
    Op.DYNAMIC_UPDATE_SLICE: _dynamic_update_slice,
    Op.GET_TUPLE_ELEMENT: _get_tuple_element,
    Op.IOTA: _iota,
    Op.OPT_BARRIER: _same_index,
    Op.PAD: _pad,
    Op.PARAMETER: _parameter,
    Op.REDUCE: _reduce,
    Op.REDUCE_WINDOW: _reduce_window,
    Op.RESHAPE: _reshape,
    Op.REVERSE: _reverse,
    Op.SLICE: _slice,
    Op.TRANSPOSE: _transpose,
    Op.TUPLE: _tuple,
}

# Ops a kernel never computes element by element, with the reason (the completeness test reads
# this): control flow runs in the driver, and these have no element-wise meaning.
NOT_ELEMENTAL: dict[Op, str] = {
    Op.AFTER_ALL: "a token, no data",
    Op.CONDITIONAL: "control flow: run by the driver, never fused",
    Op.FUSION: "a kernel of its own",
    Op.RNG_BIT_GENERATOR: "no reference semantics (the interpreter refuses it too)",
    Op.WHILE: "control flow: run by the driver, never fused",
}
