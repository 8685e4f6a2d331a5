"""Loop-invariant code motion over the codegen IR: the const locals of a loop's body that do
not change from one iteration to the next move in front of the loop.

A whole-loop kernel computes a large per-lane element in a loop over the element's
positions, and the elemental emitter writes each position's value from scratch: the values
every position shares (a lane's random key, its agent's position) would be recomputed at each
one. gcc hoists such values out of plain loops, but not reliably out of the branches the
emitter writes (a concatenate's pieces) or through the simd loop around them, so the emitter
moves them itself.

A local moves when its initialiser reads no variable the loop changes or declares without
moving, and no memory the loop writes. Out of a branch inside the loop it moves only when
running it unconditionally is harmless: it then reads memory only from `speculable` arrays
(read-only tables indexed in bounds whatever the branch decides) and divides only by
non-zero literals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from hlofuse.codegen import cir, cir_walks
from hlofuse.codegen.cir import Stmt


def hoist_invariants(loop: cir.For, speculable: Callable[[str], bool]) -> list[cir.Declare]:
    """Remove the invariant const locals from `loop`'s body and return them, in order, for
    the caller to place in front of the loop."""
    written = _written_arrays(loop)
    variant: set[str] = {loop.var}
    for stmt in cir_walks.statements(loop):
        variant.update(cir_walks.assigned_names(stmt))
    hoisted: list[cir.Declare] = []

    def movable(expr: cir.Expr, branch: bool) -> bool:
        for e in cir.walk(expr):
            if isinstance(e, cir.Var) and e.name in variant:
                return False
            if isinstance(e, cir.Load):
                array = e.array.name if isinstance(e.array, cir.Var) else None
                if array is None or array in written or (branch and not speculable(array)):
                    return False
            if branch and isinstance(e, cir.Binary) and e.op in ("/", "%") and \
                    cir.int_value(e.right) in (None, 0):
                return False
        return True

    def visit(stmts: list[Stmt], branch: bool) -> list[Stmt]:
        kept: list[Stmt] = []
        for stmt in stmts:
            if isinstance(stmt, cir.Declare):
                if stmt.const and stmt.init is not None and not stmt.dims and \
                        movable(stmt.init, branch):
                    hoisted.append(stmt)
                    continue
                variant.add(stmt.name)
            elif isinstance(stmt, cir.If):
                stmt.then = visit(stmt.then, True)
                if stmt.otherwise is not None:
                    stmt.otherwise = visit(stmt.otherwise, True)
            else:
                # Nested loops and blocks keep what they declare.
                for inner in cir_walks.statements(stmt):
                    if isinstance(inner, cir.Declare):
                        variant.add(inner.name)
                    elif isinstance(inner, cir.For):
                        variant.add(inner.var)
            kept.append(stmt)
        return kept

    loop.body = visit(loop.body, False)
    return hoisted


LoadCheck = Callable[[cir.Load, Mapping[str, cir.Expr]], bool]


def is_speculable(stmts: list[Stmt], load_ok: LoadCheck) -> bool:
    """Whether running `stmts` where they were not asked for is harmless: const locals only,
    reading memory only through loads `load_ok` accepts (given the locals `stmts` define), no
    `%` by a variable. (A `/` by a variable is a float division, which does not trap with
    exceptions masked: integers divide through hlofuse_div_*, defined for zero.)"""
    defined: dict[str, cir.Expr] = {}
    for stmt in stmts:
        if not isinstance(stmt, cir.Declare) or not stmt.const or stmt.init is None or \
                stmt.dims:
            return False
        for e in cir.walk(stmt.init):
            if isinstance(e, cir.Load) and not load_ok(e, defined):
                return False
            if isinstance(e, cir.Binary) and e.op == "%" and cir.int_value(e.right) in (None, 0):
                return False
        defined[stmt.name] = stmt.init
    return True


def index_range(expr: cir.Expr, defined: Mapping[str, cir.Expr]) -> tuple[int, int] | None:
    """Bounds [lo, hi] of an index expression built from literals, the emitter's clamps
    `x < 0 ? 0 : (x > hi ? hi : x)`, sums and products by literals; None when unknown."""
    if isinstance(expr, cir.Var) and expr.name in defined:
        return index_range(defined[expr.name], defined)
    if isinstance(expr, cir.Cast):
        return index_range(expr.operand, defined)
    value = cir.int_value(expr)
    if value is not None:
        return value, value
    if isinstance(expr, cir.Select) and cir.int_value(expr.on_true) == 0 and \
            isinstance(expr.condition, cir.Binary) and expr.condition.op == "<" and \
            cir.int_value(expr.condition.right) == 0:
        inner = expr.on_false
        if isinstance(inner, cir.Select) and isinstance(inner.condition, cir.Binary) and \
                inner.condition.op == ">":
            hi = cir.int_value(inner.on_true)
            if hi is not None and hi >= 0 and cir.int_value(inner.condition.right) == hi:
                return 0, hi
        return None
    if isinstance(expr, cir.Binary) and expr.op in ("+", "*"):
        left, right = index_range(expr.left, defined), index_range(expr.right, defined)
        if left is None or right is None:
            return None
        if expr.op == "+":
            return left[0] + right[0], left[1] + right[1]
        products = [a * b for a in left for b in right]
        return min(products), max(products)
    return None


def _written_arrays(loop: cir.For) -> set[str]:
    out: set[str] = set()
    for stmt in cir_walks.statements(loop):
        if isinstance(stmt, cir.Assign) and isinstance(stmt.target, cir.Load) and \
                isinstance(stmt.target.array, cir.Var):
            out.add(stmt.target.array.name)
        elif isinstance(stmt, cir.Declare) and stmt.dims:
            out.add(stmt.name)  # a local array, filled by the loop
    return out
