"""The expression and statement IR of generated code: what emitters build, a language prints.

Emitters never write target text. They build these frozen nodes; each target's language
table (`targets/c/language.py`, `targets/cuda/language.py`) spells them. Nodes compare and
hash by structure, so value numbering keys on them directly (hash-consing) and nothing printed
is ever read back.

Types are target-neutral (`Type`, cir_types.py): an element type is an hlofuse `DType` (the
value as held: a language says which dtype holds f16 while a kernel computes), a `Pointer` to
one, or one of the few `Special` types a kernel needs beside them. Structure a target needs to
run a kernel in parallel is explicit in the nodes, set by the emitters: how many independent
iterations a parallel region shares (`ParallelRegion.extent`) and a library call splits
(`ExprStmt.extent`), which arrays are a kernel's scratch memory (`Allocate`), what runs once
after every thread is done (`AfterAll`), each kernel argument's role (`Parameter.role`) and
lane dimension, and which local arrays loads may read speculatively (`Declare.speculable`).

Index arithmetic has a canonical form of its own, `Affine` (const + sum of coefficient *
atom), so one element position has one spelling: `i0 + 32768 - 32768` is `i0`, and a
concatenate's piece read back at its offset is the position it started from. Division and
remainder follow C (truncation toward zero); a quotient that does not simplify is an atom.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from hlofuse.codegen.cir_types import INDEX as INDEX
from hlofuse.codegen.cir_types import Linkage as Linkage
from hlofuse.codegen.cir_types import Pointer as Pointer
from hlofuse.codegen.cir_types import Role as Role
from hlofuse.codegen.cir_types import Special as Special
from hlofuse.codegen.cir_types import Tuning as Tuning
from hlofuse.codegen.cir_types import Type as Type
from hlofuse.ir.dtypes import DType

# --- expressions --------------------------------------------------------------------------


class Expr:
    """An expression node (a frozen dataclass below)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Var(Expr):
    """A variable, parameter or macro-defined name of generated code."""

    name: str


@dataclass(frozen=True, slots=True)
class Int(Expr):
    """An index literal (int64 arithmetic), spelled with LL beyond the int range."""

    value: int


@dataclass(frozen=True, slots=True)
class Const(Expr):
    """A typed literal in register form: an integer, pred (0/1) or float element value."""

    dtype: DType
    value: int | float


@dataclass(frozen=True, slots=True)
class TypeName(Expr):
    """A type used as an operand (sizeof)."""

    of: Type


@dataclass(frozen=True, slots=True)
class Unary(Expr):
    op: str  # "-", "!", "~"
    operand: Expr


@dataclass(frozen=True, slots=True)
class Binary(Expr):
    op: str  # + - * / % << >> & | ^ == != < <= > >= && ||
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    to: Type
    operand: Expr


@dataclass(frozen=True, slots=True)
class Call(Expr):
    function: str
    arguments: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Select(Expr):
    condition: Expr
    on_true: Expr
    on_false: Expr


@dataclass(frozen=True, slots=True)
class Load(Expr):
    """`array[i][j]...`: an element of memory; never value-numbered (a store may intervene)."""

    array: Expr
    indices: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Affine(Expr):
    """const + sum(coefficient * atom), terms sorted: the canonical form of an index."""

    const: int
    terms: tuple[tuple[Expr, int], ...] = ()

    @property
    def is_constant(self) -> bool:
        return not self.terms


def call(function: str, *arguments: Expr) -> Call:
    return Call(function, arguments)


def load(array: Expr | str, *indices: Expr) -> Load:
    return Load(Var(array) if isinstance(array, str) else array, indices)


def is_simple(expr: Expr) -> bool:
    """A name or literal: cheap to repeat, needs no local of its own."""
    kind = type(expr)  # the node classes have no subclasses
    if kind is Unary:
        return expr.op == "-" and isinstance(expr.operand, Int | Const)  # type: ignore[attr-defined]
    return kind is Var or kind is Int or kind is Const


def reads(expr: Expr) -> tuple[frozenset[str], bool]:
    """The variables an expression reads, and whether it reads memory, in one walk."""
    names: set[str] = set()
    memory = False
    stack = [expr]
    while stack:
        e = stack.pop()
        kind = type(e)
        if kind is Var:
            names.add(e.name)  # type: ignore[attr-defined]
        elif kind is Int or kind is Const or kind is TypeName:
            continue
        elif kind is Load:
            memory = True
            stack += (e.array, *e.indices)  # type: ignore[attr-defined]
        else:
            stack += _children(e)
    return frozenset(names), memory


def _children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Unary | Cast):
        return (e.operand,)
    if isinstance(e, Binary):
        return (e.left, e.right)
    if isinstance(e, Call):
        return e.arguments
    if isinstance(e, Select):
        return (e.condition, e.on_true, e.on_false)
    if isinstance(e, Load):
        return (e.array, *e.indices)
    if isinstance(e, Affine):
        return tuple(atom for atom, _ in e.terms)
    return ()


def names_read(expr: Expr) -> frozenset[str]:
    """Every variable an expression reads."""
    return frozenset(v.name for v in walk(expr) if isinstance(v, Var))


def walk(expr: Expr) -> Iterator[Expr]:
    stack = [expr]
    while stack:
        e = stack.pop()
        yield e
        stack += _children(e)


# --- index arithmetic ----------------------------------------------------------------------


class NotAffine(ValueError):
    """The expression is not index arithmetic the canonical form covers (left as it is)."""


def _atom_key(atom: Expr) -> str:
    return repr(atom)


def affine(const: int, terms: Mapping[Expr, int]) -> Affine:
    kept = sorted(((a, c) for a, c in terms.items() if c), key=lambda t: _atom_key(t[0]))
    return Affine(const, tuple(kept))


def _plus(a: Affine, b: Affine, sign: int = 1) -> Affine:
    terms = dict(a.terms)
    for atom, c in b.terms:
        terms[atom] = terms.get(atom, 0) + sign * c
    return affine(a.const + sign * b.const, terms)


def _scaled(a: Affine, factor: int) -> Affine:
    return affine(a.const * factor, {atom: c * factor for atom, c in a.terms})


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def as_expr(form: Affine) -> Expr:
    """The plainest node for a form: a literal, a bare atom, or the form itself."""
    if not form.terms:
        return Int(form.const)
    if form.const == 0 and len(form.terms) == 1 and form.terms[0][1] == 1:
        return form.terms[0][0]
    return form


def canonical(expr: Expr, forms: Mapping[str, Affine]) -> Affine:
    """The affine form of an index expression, variables in `forms` replaced by their forms.

    Raises NotAffine for what is not + - * / % over integers and names."""
    if isinstance(expr, Int):
        return Affine(expr.value)
    if isinstance(expr, Affine):
        total = Affine(expr.const)
        for atom, c in expr.terms:
            total = _plus(total, _scaled(canonical(atom, forms), c))
        return total
    if isinstance(expr, Var):
        known = forms.get(expr.name)
        return known if known is not None else Affine(0, ((expr, 1),))
    if isinstance(expr, Unary) and expr.op == "-":
        return _scaled(canonical(expr.operand, forms), -1)
    if not isinstance(expr, Binary) or expr.op not in ("+", "-", "*", "/", "%"):
        raise NotAffine(repr(expr))
    left, right = canonical(expr.left, forms), canonical(expr.right, forms)
    if expr.op in ("+", "-"):
        return _plus(left, right, 1 if expr.op == "+" else -1)
    if expr.op == "*":
        if right.is_constant:
            return _scaled(left, right.const)
        if left.is_constant:
            return _scaled(right, left.const)
        return Affine(0, ((Binary("*", as_expr(left), as_expr(right)), 1),))
    if not right.is_constant or right.const == 0:
        raise NotAffine("division by a variable or by zero")
    divisor = right.const
    if left.is_constant:
        quotient = _c_div(left.const, divisor)
        return Affine(quotient if expr.op == "/" else left.const - quotient * divisor)
    exact = all(c % divisor == 0 for c in [left.const, *(c for _, c in left.terms)])
    if expr.op == "/":
        if exact:  # (d * a) / d == a whatever the signs
            return affine(left.const // divisor, {a: c // divisor for a, c in left.terms})
        return Affine(0, ((Binary("/", as_expr(left), Int(divisor)), 1),))
    if exact:
        return Affine(0)
    return Affine(0, ((Binary("%", as_expr(left), Int(divisor)), 1),))


def add(*parts: Expr | int) -> Expr:
    """An index sum (not yet canonical: `Body.index_let` makes it so)."""
    exprs = [Int(p) if isinstance(p, int) else p for p in parts]
    exprs = [e for e in exprs if not (isinstance(e, Int) and e.value == 0)]
    if not exprs:
        return Int(0)
    total = exprs[0]
    for e in exprs[1:]:
        total = Binary("+", total, e)
    return total


def sub(a: Expr, b: Expr | int) -> Expr:
    return Binary("-", a, Int(b) if isinstance(b, int) else b)


def mul(a: Expr, k: Expr | int) -> Expr:
    if isinstance(k, int) and k == 1:
        return a
    return Binary("*", a, Int(k) if isinstance(k, int) else k)


def div(a: Expr, k: int) -> Expr:
    return a if k == 1 else Binary("/", a, Int(k))


def mod(a: Expr, k: int) -> Expr:
    return Binary("%", a, Int(k))


def is_zero(expr: Expr) -> bool:
    return isinstance(expr, Int) and expr.value == 0


def int_value(expr: Expr) -> int | None:
    """The value of an index or integer literal, else None."""
    if isinstance(expr, Int):
        return expr.value
    if isinstance(expr, Const) and isinstance(expr.value, int):
        return expr.value
    return None


_FOLDED: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
    "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b),
    ">": lambda a, b: int(a > b), ">=": lambda a, b: int(a >= b),
    "&&": lambda a, b: int(bool(a) and bool(b)), "||": lambda a, b: int(bool(a) or bool(b)),
}


def folded_int(expr: Expr) -> int | None:
    """The value of an integer expression of literals (comparisons and && as 0 or 1), else
    None. A cast to an unsigned type wraps, as C converts; to a signed type it keeps a value
    the type holds (else None: C leaves it to the implementation)."""
    value = int_value(expr)
    if value is not None:
        return value
    if isinstance(expr, Cast) and isinstance(expr.to, DType) and expr.to.is_integer:
        inner = folded_int(expr.operand)
        if inner is None:
            return None
        if expr.to.is_unsigned_int:
            return inner % (1 << expr.to.bits)
        info = np.iinfo(expr.to.numpy)
        return inner if info.min <= inner <= info.max else None
    if isinstance(expr, Binary) and expr.op in _FOLDED:
        a, b = folded_int(expr.left), folded_int(expr.right)
        return None if a is None or b is None else _FOLDED[expr.op](a, b)
    return None


# --- statements -----------------------------------------------------------------------------


class Stmt:
    """A statement node."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Declare(Stmt):
    """`type name[dims] = init;` (`const` for values assigned once at declaration)."""

    type: Type
    name: str
    init: Expr | None = None
    const: bool = False
    dims: tuple[int | Expr, ...] = ()
    zeroed: bool = False  # an array initialised to zeros
    block_shared: bool = False  # one array for the threads of a block (CUDA's __shared__)
    # An array a load may read at any position within its bounds where the code did not ask
    # for it (a branch's side computed anyway, a value moved out of a branch): every element
    # such a load can reach holds a defined value whenever the code reads the array.
    speculable: bool = False


@dataclass(frozen=True, slots=True)
class Allocate(Stmt):
    """`name`: a scratch array of `count` `element`s, the kernel's own memory until a
    `Release`. A target with threads that outlive one call (a GPU grid) may give it a
    static home instead."""

    element: Type
    name: str
    count: int
    restrict: bool = False


@dataclass(frozen=True, slots=True)
class Release(Stmt):
    """The end of an `Allocate`d array's life."""

    name: str


@dataclass(frozen=True, slots=True)
class Assign(Stmt):
    target: Expr  # a Var or a Load
    value: Expr
    op: str = "="  # or "|=", "+=", ...


@dataclass(frozen=True, slots=True)
class ExprStmt(Stmt):
    expr: Expr
    # A library routine's call that splits `extent` independent items among the threads
    # running it (0: an ordinary call).
    extent: int = 0


@dataclass(frozen=True, slots=True)
class Comment(Stmt):
    text: str  # sanitised by whoever builds it: [A-Za-z0-9_.,:() -] only


@dataclass(frozen=True, slots=True)
class Break(Stmt):
    pass


@dataclass(frozen=True, slots=True)
class Return(Stmt):
    value: Expr | None = None


@dataclass(frozen=True, slots=True)
class Loop:
    """How a loop runs: the language prints these as pragmas (or a CUDA grid, later)."""

    parallel: bool = False  # shared among the threads of the enclosing parallel region
    collapse: int = 1
    simd: bool = False
    reduction: tuple[str, str] | None = None  # (operator, variable) of a simd reduction
    unroll: int | None = None


SEQUENTIAL = Loop()


@dataclass(slots=True)
class Block(Stmt):
    """`{ ... }`; statements are appended while the emitter is inside it."""

    body: list[Stmt] = field(default_factory=list)


@dataclass(slots=True)
class For(Stmt):
    """`for (type var = lo; var < hi; var += step)`; hi None loops forever."""

    var: str
    lo: Expr
    hi: Expr | None
    body: list[Stmt] = field(default_factory=list)
    how: Loop = SEQUENTIAL
    type: Type = INDEX
    step: int = 1


@dataclass(slots=True)
class While(Stmt):
    condition: Expr
    body: list[Stmt] = field(default_factory=list)


@dataclass(slots=True)
class If(Stmt):
    condition: Expr
    then: list[Stmt] = field(default_factory=list)
    otherwise: list[Stmt] | None = None


@dataclass(slots=True)
class Switch(Stmt):
    selector: Expr
    cases: list[list[Stmt]] = field(default_factory=list)  # the last one is `default`


@dataclass(slots=True)
class ParallelRegion(Stmt):
    """A team of threads runs `body` (each with the denormal mode set), under `condition`,
    sharing `extent` independent iterations among them (each thread computes its share of the
    outermost loop from the thread index, or takes the iterations of a loop marked
    `parallel`)."""

    body: list[Stmt] = field(default_factory=list)
    condition: Expr | None = None
    extent: int = 1


@dataclass(slots=True)
class AfterAll(Stmt):
    """Statements that run once, after every thread of the kernel has done its share (a
    whole loop's partial results combined): in line where threads join before the kernel
    ends (OpenMP), by the last thread to finish where they do not (a GPU grid)."""

    body: list[Stmt] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Parameter:
    type: Type
    name: str
    role: Role = Role.SCALAR
    # The dimension of the array that runs over the lanes (a whole loop's independent
    # environments), None where the array is not laid out by lane.
    lane_dimension: int | None = None


@dataclass
class Function:
    """A function: `returns name(parameters) { body }`, after a leading comment."""

    name: str
    parameters: list[Parameter]
    body: list[Stmt]
    linkage: Linkage = Linkage.PART
    tuning: Tuning | None = None
    comment: str | None = None
    returns: Type = Special.VOID

    @property
    def kernel(self) -> bool:
        return self.linkage is Linkage.KERNEL
