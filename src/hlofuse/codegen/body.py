"""The statements of one generated function while emitters build it: scopes and value numbering.

A function is a prologue (loop-invariant values, temporaries) plus sections (its loops).
Emitters open nested scopes (a loop, a branch, a called computation); each scope caches the
values computed in it, so a value never leaks out of the branch that computed it.

Locals are numbered by value (hash-consing on cir nodes): a local whose expression was
computed before in a scope still open is reused, unless it reads a variable assigned after its
declaration (accumulators, loop state) or memory (a store may intervene). Fusion passes that
duplicate a producer into several consumers and then merge those consumers leave clones of one
computation inside one fused computation (CartPole's Threefry hash, once per consumer); the
clones then cost nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from hlofuse.codegen import cir, cir_walks
from hlofuse.codegen.cir import Expr, Stmt
from hlofuse.codegen.naming import Names


class Key:
    """A cache key whose hash is computed once: keys hold expression trees, and a lookup
    probes every open scope."""

    __slots__ = ("value", "hash")

    def __init__(self, value: tuple[object, ...]) -> None:
        self.value = value
        self.hash = hash(value)

    @classmethod
    def of_element(cls, value: int, position: tuple[object, ...], position_hash: int) -> Key:
        """The key `(value, *position)` of an element value, hashed from `position`'s hash
        (which the index keeps): every key of this form is made here, so equal keys hash
        alike."""
        key = cls.__new__(cls)
        key.value = (value, *position)
        key.hash = hash((value, position_hash))
        return key

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and self.hash == other.hash and self.value == other.value


@dataclass
class Scope:
    stmts: list[Stmt]
    cache: dict[Key, object] = field(default_factory=dict)


class FunctionBody:
    """Statements of one function: a prologue plus sections, with nested caching scopes."""

    def __init__(self) -> None:
        self.prologue = Scope([])
        self.scopes: list[Scope] = [self.prologue]
        self.names = Names()
        self.hoisting = 0  # > 0 while emitting loop-invariant code into the prologue
        # Locals declared at the top of the prologue, with their types: a loop moved into
        # a function of its own (a parallel part) receives the ones it reads.
        self.prologue_names: dict[str, cir.Type] = {}
        self._reads: dict[str, frozenset[str]] = {}
        self.mutable: set[str] = set()
        self.assigned_once: set[str] = set()  # declared, then assigned once on each path
        self.index_forms: dict[str, cir.Affine] = {}  # index locals and their affine forms
        self.declared = 0  # locals declared so far (what a written-out dimension costs)
        # Arrays declared `speculable`: loads may read them where the code did not ask.
        self.speculable: set[str] = set()
        # Counters of loops that run one iteration at a time (no simd, no threads): within
        # an iteration such a counter is the same for every element a vector loop inside
        # handles.
        self.sequential_counters: set[str] = set()

    def fresh(self, prefix: str = "v") -> str:
        return self.names.fresh(prefix)

    @property
    def scope(self) -> Scope:
        return self.scopes[-1]

    @property
    def in_prologue(self) -> bool:
        return self.scopes[-1] is self.prologue

    def emit(self, stmt: Stmt) -> None:
        if type(stmt) is not cir.Declare:  # a declaration assigns nothing after itself
            for name in cir_walks.assigned_names(stmt):
                if name not in self.assigned_once:
                    self.mutable.add(name)
        self.scopes[-1].stmts.append(stmt)

    def assign(self, target: Expr | str, value: Expr, op: str = "=") -> None:
        self.emit(cir.Assign(cir.Var(target) if isinstance(target, str) else target, value, op))

    def call(self, function: str, *arguments: Expr, extent: int = 0) -> None:
        """A call statement; `extent`: the independent items a library routine splits among
        the threads that run it."""
        self.emit(cir.ExprStmt(cir.Call(function, arguments), extent))

    def let(self, vtype: cir.Type, expr: Expr, prefix: str = "v", hlo_name: str | None = None
            ) -> Expr:
        """A const local holding `expr` (or `expr` itself when it is a name or literal),
        named after the HLO instruction it computes when there is one."""
        if cir.is_simple(expr):
            return expr
        names, memory = cir.reads(expr)
        numbered = not memory  # a load may see a store in between
        if numbered:
            key = Key(("let", vtype, expr))
            found = self.lookup(key)
            if isinstance(found, cir.Var) and not self._reads[found.name] & self.mutable:
                return found
        name = self.fresh(prefix) if hlo_name is None else self.names.unique(hlo_name)
        self.declare(vtype, name, expr, const=True)
        if numbered:
            self._reads[name] = names
            self.remember(key, cir.Var(name))
        return cir.Var(name)

    def declare(self, vtype: cir.Type, name: str, init: Expr | None = None,
                const: bool = False, dims: tuple[int | Expr, ...] = (),
                zeroed: bool = False, block_shared: bool = False,
                speculable: bool = False) -> cir.Var:
        """`vtype name = init;` (a variable unless const)."""
        if not const and name not in self.assigned_once:
            self.mutable.add(name)
        if speculable:
            self.speculable.add(name)
        if self.scope is self.prologue:
            self.prologue_names[name] = vtype
        self.declared += 1
        self.emit(cir.Declare(vtype, name, init, const, dims, zeroed, block_shared, speculable))
        return cir.Var(name)

    def variable(self, vtype: cir.Type, prefix: str, init: Expr | None = None) -> cir.Var:
        return self.declare(vtype, self.fresh(prefix), init)

    def lookup(self, key: Key) -> object | None:
        for scope in reversed(self.scopes):
            found = scope.cache.get(key)
            if found is not None:
                return found
        return None

    def remember(self, key: Key, value: object) -> None:
        self.scopes[-1].cache[key] = value

    # --- nesting ------------------------------------------------------------------------

    @contextlib.contextmanager
    def nested(self, stmt: Stmt, inner: list[Stmt], emit: bool = True) -> Iterator[None]:
        """Statements go to `inner` (the body of `stmt`) inside; a new cache scope. `emit`
        False: `stmt` is emitted already (the else branch of an if).

        A statement opened at the top of the prologue joins it when it closes, so values
        hoisted while it is open land before it."""
        parent = self.scope
        if parent is not self.prologue and emit:
            self.emit(stmt)
        self.scopes.append(Scope(inner))
        try:
            yield
        finally:
            self.scopes.pop()
            if parent is self.prologue and emit:
                self.emit(stmt)

    def loop(self, var: str, lo: Expr | int, hi: Expr | int | None,
             how: cir.Loop = cir.SEQUENTIAL, counter: cir.Type = cir.INDEX,
             step: int = 1) -> contextlib.AbstractContextManager[None]:
        """`for` var (a `counter`) from lo while var < hi (forever when hi is None)."""
        stmt = cir.For(var, _index(lo), None if hi is None else _index(hi), [], how, counter,
                       step)
        if how == cir.SEQUENTIAL:
            self.sequential_counters.add(var)
        return self.nested(stmt, stmt.body)

    def of_sequential_counters(self, expr: Expr) -> bool:
        """Whether `expr` reads no memory and no variable but sequential loops' counters,
        directly or through the constant locals (`let`) it names: the same value for every
        element of a vector loop nested in those loops."""
        names, memory = cir.reads(expr)
        if memory:
            return False
        pending = list(names)
        seen: set[str] = set()
        while pending:
            name = pending.pop()
            if name in seen or name in self.sequential_counters:
                continue
            seen.add(name)
            defined = self._reads.get(name)
            if defined is None:
                return False
            pending += defined
        return True

    def if_(self, condition: Expr) -> contextlib.AbstractContextManager[None]:
        stmt = cir.If(condition)
        return self.nested(stmt, stmt.then)

    @contextlib.contextmanager
    def if_else(self, condition: Expr) -> Iterator[tuple[
            contextlib.AbstractContextManager[None], contextlib.AbstractContextManager[None]]]:
        """(then, otherwise) scopes of one `if`: enter each in turn."""
        stmt = cir.If(condition, [], [])
        assert stmt.otherwise is not None
        self.emit(stmt)
        yield (self.nested(stmt, stmt.then, emit=False),
               self.nested(stmt, stmt.otherwise, emit=False))

    def while_(self, condition: Expr) -> contextlib.AbstractContextManager[None]:
        stmt = cir.While(condition)
        return self.nested(stmt, stmt.body)

    def braces(self) -> contextlib.AbstractContextManager[None]:
        stmt = cir.Block()
        return self.nested(stmt, stmt.body)

    @contextlib.contextmanager
    def cache_scope(self) -> Iterator[None]:
        """A scope for cached values only: statements still go where they went."""
        self.scopes.append(Scope(self.scope.stmts))
        try:
            yield
        finally:
            self.scopes.pop()

    @contextlib.contextmanager
    def section(self, stmts: list[Stmt]) -> Iterator[None]:
        """Emit into `stmts` (a loop section after the prologue), still seeing the prologue."""
        saved = self.scopes
        self.scopes = [self.prologue, Scope(stmts)]
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
    def captured_scope(self) -> Iterator[Scope]:
        """As `captured`, yielding the scope: its statements and the values it cached."""
        scope = Scope([])
        self.scopes.append(scope)
        try:
            yield scope
        finally:
            self.scopes.pop()

    @contextlib.contextmanager
    def captured(self) -> Iterator[list[Stmt]]:
        """A cache scope whose statements go to a separate list (to decide if-else vs ?:)."""
        stmts: list[Stmt] = []
        self.scopes.append(Scope(stmts))
        try:
            yield stmts
        finally:
            self.scopes.pop()


def _index(value: Expr | int) -> Expr:
    return cir.Int(value) if isinstance(value, int) else value
