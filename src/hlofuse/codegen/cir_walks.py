"""Walks over statement trees of the C-like IR (codegen/cir.py): the statements and
expressions a statement holds, the names they assign or use, the length of their
straight-line runs, and whether a chain of selects on one position repeats a literal."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from hlofuse.codegen.cir import (
    AfterAll,
    Allocate,
    Assign,
    Binary,
    Block,
    Break,
    Call,
    Comment,
    Const,
    Declare,
    Expr,
    ExprStmt,
    For,
    If,
    ParallelRegion,
    Release,
    Return,
    Select,
    Stmt,
    Switch,
    Var,
    While,
    names_read,
    walk,
)


def assigned_names(stmt: Stmt) -> Iterator[str]:
    """Variables a statement (and what it holds) assigns after their declaration."""
    if isinstance(stmt, Declare | Allocate | Release | ExprStmt | Comment | Break | Return):
        return
    for s in statements(stmt):
        if isinstance(s, Assign) and isinstance(s.target, Var):
            yield s.target.name


def nested_lists(stmt: Stmt) -> list[list[Stmt]]:
    """The statement lists directly inside `stmt` (none for a simple statement)."""
    if isinstance(stmt, Block | For | While | ParallelRegion | AfterAll):
        return [stmt.body]
    if isinstance(stmt, If):
        return [stmt.then, stmt.otherwise or []]
    if isinstance(stmt, Switch):
        return list(stmt.cases)
    return []


def longest_straight_run(body: list[Stmt], weight: Callable[[Stmt], int] | None = None) -> int:
    """The most statements one after another without a loop, branch or block between them,
    in `body` or any statement list nested in it; with `weight`, each counted as it says."""
    longest = run = 0
    for stmt in body:
        if isinstance(stmt, Comment):
            continue
        nested = nested_lists(stmt)  # a compound statement holds at least one list
        if not nested:
            run += 1 if weight is None else weight(stmt)
            longest = max(longest, run)
            continue
        run = 0
        for inner in nested:
            longest = max(longest, longest_straight_run(inner, weight))
    return longest


def calls_to(stmt: Stmt, functions: frozenset[str]) -> int:
    """How many calls of the named functions the statement's own expressions make."""
    return sum(1 for expr in expressions(stmt) for e in walk(expr)
               if isinstance(e, Call) and e.function in functions)


def statements(stmt: Stmt) -> Iterator[Stmt]:
    """`stmt` and every statement nested in it."""
    stack = [stmt]
    while stack:
        s = stack.pop()
        yield s
        for inner in nested_lists(s):
            stack += inner


def expressions(stmt: Stmt) -> Iterator[Expr]:
    """The expressions directly held by one statement (not by nested statements)."""
    if isinstance(stmt, Declare):
        if stmt.init is not None:
            yield stmt.init
        yield from (d for d in stmt.dims if isinstance(d, Expr))
    elif isinstance(stmt, Assign):
        yield stmt.target
        yield stmt.value
    elif isinstance(stmt, ExprStmt):
        yield stmt.expr
    elif isinstance(stmt, Return) and stmt.value is not None:
        yield stmt.value
    elif isinstance(stmt, For):
        yield stmt.lo
        if stmt.hi is not None:
            yield stmt.hi
    elif isinstance(stmt, While | If):
        yield stmt.condition
    elif isinstance(stmt, Switch):
        yield stmt.selector
    elif isinstance(stmt, ParallelRegion) and stmt.condition is not None:
        yield stmt.condition


def names_used(stmts: list[Stmt]) -> set[str]:
    """Every name the statements read, write or declare (for a parallel part's parameters)."""
    out: set[str] = set()
    for top in stmts:
        for s in statements(top):
            for e in expressions(s):
                out |= names_read(e)
            if isinstance(s, Declare | Allocate):
                out.add(s.name)
            elif isinstance(s, For):
                out.add(s.var)
                if s.how.reduction is not None:
                    out.add(s.how.reduction[1])
    return out


def repeats_a_selected_literal(body: list[Stmt]) -> bool:
    """Whether a chain of selects on one value's equality with literals (a small constant
    read at a computed position, `emitter_types.selected`) picks one literal at two or more
    of its positions."""
    seen: set[int] = set()
    for top in body:
        for s in statements(top):
            for expr in expressions(s):
                for e in walk(expr):
                    if isinstance(e, Select) and id(e) not in seen and \
                            _chain_repeats(e, seen):
                        return True
    return False


def _chain_repeats(first: Select, seen: set[int]) -> bool:
    """Whether the chain of selects from `first` on `x == literal` for one x has a literal
    among its values twice; marks the chain's selects seen."""
    condition = first.condition
    if not (isinstance(condition, Binary) and condition.op == "=="):
        return False
    position = condition.left
    values: list[Const] = []
    e: Expr = first
    while isinstance(e, Select) and isinstance(e.condition, Binary) and \
            e.condition.op == "==" and e.condition.left == position:
        seen.add(id(e))
        if isinstance(e.on_true, Const):
            values.append(e.on_true)
        e = e.on_false
    if isinstance(e, Const):
        values.append(e)
    return len(values) > len(set(values))
