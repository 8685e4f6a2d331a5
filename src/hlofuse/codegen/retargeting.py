"""Statements reading some pointers through others: a kernel emitted once, printed again for
the buffers assignment shared."""

from __future__ import annotations

from collections.abc import Mapping

from hlofuse.codegen.cir import (
    Affine,
    AfterAll,
    Allocate,
    Assign,
    Binary,
    Block,
    Break,
    Call,
    Cast,
    Comment,
    Const,
    Declare,
    Expr,
    ExprStmt,
    For,
    If,
    Int,
    Load,
    ParallelRegion,
    Release,
    Return,
    Select,
    Stmt,
    Switch,
    TypeName,
    Unary,
    Var,
    While,
)


class _NotOnlyLoaded(Exception):
    """A renamed pointer is used other than as the array of a load."""


class LoadRetargeting:
    """Statements with loads from some pointers read through others instead (`{old: new}`),
    for a kernel whose output buffer turned out to be one of its inputs' (it then reads that
    input through the output's pointer). `apply` gives None when a renamed pointer is used
    any other way (passed to a call, compared): that kernel is emitted again instead."""

    def __init__(self, renamed: Mapping[str, str]) -> None:
        self.renamed = dict(renamed)
        self._done: dict[int, Expr] = {}

    def apply(self, stmts: list[Stmt]) -> list[Stmt] | None:
        try:
            return [self._stmt(s) for s in stmts]
        except _NotOnlyLoaded:
            return None

    def _exprs(self, exprs: tuple[Expr, ...]) -> tuple[Expr, ...]:
        out = tuple(self._expr(e) for e in exprs)
        return exprs if all(a is b for a, b in zip(out, exprs)) else out

    def _expr(self, e: Expr) -> Expr:
        done = self._done.get(id(e))
        if done is not None:
            return done
        out: Expr
        kind = type(e)
        if kind is Var:
            if e.name in self.renamed:  # type: ignore[attr-defined]
                raise _NotOnlyLoaded
            out = e
        elif kind is Int or kind is Const or kind is TypeName:
            out = e
        # A node whose parts come back unchanged is kept (most read no renamed pointer).
        elif type(e) is Load:
            array = e.array
            if isinstance(array, Var) and array.name in self.renamed:
                array = Var(self.renamed[array.name])
            else:
                array = self._expr(array)
            indices = self._exprs(e.indices)
            out = e if array is e.array and indices is e.indices else Load(array, indices)
        elif type(e) is Unary:
            operand = self._expr(e.operand)
            out = e if operand is e.operand else Unary(e.op, operand)
        elif type(e) is Cast:
            operand = self._expr(e.operand)
            out = e if operand is e.operand else Cast(e.to, operand)
        elif type(e) is Binary:
            left, right = self._expr(e.left), self._expr(e.right)
            out = e if left is e.left and right is e.right else Binary(e.op, left, right)
        elif type(e) is Call:
            arguments = self._exprs(e.arguments)
            out = e if arguments is e.arguments else Call(e.function, arguments)
        elif type(e) is Select:
            was = (e.condition, e.on_true, e.on_false)
            parts = tuple(self._expr(x) for x in was)
            out = e if all(a is b for a, b in zip(parts, was)) else Select(*parts)
        elif type(e) is Affine:
            atoms = [self._expr(atom) for atom, _ in e.terms]
            out = e if all(a is atom for a, (atom, _) in zip(atoms, e.terms)) else Affine(
                e.const, tuple((a, k) for a, (_, k) in zip(atoms, e.terms)))
        else:
            raise _NotOnlyLoaded  # an expression kind this does not know: emit again
        self._done[id(e)] = out
        return out

    def _body(self, stmts: list[Stmt]) -> list[Stmt]:
        return [self._stmt(s) for s in stmts]

    def _stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, Declare):
            if s.name in self.renamed:
                raise _NotOnlyLoaded
            init = None if s.init is None else self._expr(s.init)
            dims = tuple(self._expr(d) if isinstance(d, Expr) else d for d in s.dims)
            if init is s.init and all(a is b for a, b in zip(dims, s.dims)):
                return s
            return Declare(s.type, s.name, init, s.const, dims, s.zeroed, s.block_shared,
                           s.speculable)
        if isinstance(s, Assign):
            target, value = self._expr(s.target), self._expr(s.value)
            return s if target is s.target and value is s.value else Assign(target, value, s.op)
        if isinstance(s, ExprStmt):
            expr = self._expr(s.expr)
            return s if expr is s.expr else ExprStmt(expr, s.extent)
        if isinstance(s, Allocate | Release):
            if s.name in self.renamed:
                raise _NotOnlyLoaded
            return s
        if isinstance(s, Comment | Break):
            return s
        if isinstance(s, Return):
            return Return(None if s.value is None else self._expr(s.value))
        if isinstance(s, Block):
            return Block(self._body(s.body))
        if isinstance(s, For):
            if s.var in self.renamed:
                raise _NotOnlyLoaded
            return For(s.var, self._expr(s.lo), None if s.hi is None else self._expr(s.hi),
                       self._body(s.body), s.how, s.type, s.step)
        if isinstance(s, While):
            return While(self._expr(s.condition), self._body(s.body))
        if isinstance(s, If):
            return If(self._expr(s.condition), self._body(s.then),
                      None if s.otherwise is None else self._body(s.otherwise))
        if isinstance(s, Switch):
            return Switch(self._expr(s.selector), [self._body(case) for case in s.cases])
        if isinstance(s, ParallelRegion):
            return ParallelRegion(self._body(s.body),
                                  None if s.condition is None else self._expr(s.condition),
                                  s.extent)
        if isinstance(s, AfterAll):
            return AfterAll(self._body(s.body))
        raise _NotOnlyLoaded
