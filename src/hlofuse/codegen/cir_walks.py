"""Walks over statement trees of the C-like IR (codegen/cir.py): the statements and
expressions a statement holds, the names they assign or use, and the length of their
straight-line runs."""

from __future__ import annotations

from collections.abc import Iterator

from hlofuse.codegen.cir import (
    AfterAll,
    Allocate,
    Assign,
    Block,
    Break,
    Comment,
    Declare,
    Expr,
    ExprStmt,
    For,
    If,
    ParallelRegion,
    Release,
    Return,
    Stmt,
    Switch,
    Var,
    While,
    names_read,
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


def longest_straight_run(body: list[Stmt]) -> int:
    """The most statements one after another without a loop, branch or block between them,
    in `body` or any statement list nested in it."""
    longest = run = 0
    for stmt in body:
        if isinstance(stmt, Comment):
            continue
        nested = nested_lists(stmt)  # a compound statement holds at least one list
        if not nested:
            run += 1
            longest = max(longest, run)
            continue
        run = 0
        for inner in nested:
            longest = max(longest, longest_straight_run(inner))
    return longest


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
