"""Structured control flow (`hlofuse.lax`): while_loop, fori_loop, scan, cond, switch, select.

Bodies and branches are traced as drafts (staging.py) and become computations called by one
`while` or `conditional` instruction. Values they close over are captured: they join the loop
state (passed through unchanged) or the branch operand tuple, as in JAX's lowering. `scan`
lowers to a `while` whose state is (step, carry..., stacked outputs..., xs..., captures...);
with `unroll=k` the body holds k copies of the step, and the remaining length % k steps follow
the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hlofuse.frontend import primitives as prim
from hlofuse.frontend import pytree
from hlofuse.frontend.dtype_rules import AbstractValue, promote
from hlofuse.frontend.eager import eager
from hlofuse.frontend.shape_ops import shape_text
from hlofuse.frontend.staging import (
    Draft,
    aval_shape,
    clone_into,
    new_builder,
    trace_draft,
    tuple_parameter,
)
from hlofuse.frontend.tracer import Tracer, constant, to_tracer, value_type
from hlofuse.frontend.tracing import current_trace, located
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation
from hlofuse.ir.ops import Op

# A weakly typed carry whose body makes it strong (or wider) is retraced with the wider type,
# as JAX does; the type can only rise a few steps in the lattice.
_MAX_RETRACES = 4


def _flatten(tree: Any, what: str) -> tuple[list[Tracer], pytree.TreeDef]:
    leaves, treedef = pytree.flatten_with_paths(tree)
    return [to_tracer(leaf, f"{what}{path}") for path, leaf in leaves], treedef


def _scope(suffix: str) -> str:
    return f"{current_trace().scope}/{suffix}"


def _types_text(avals: Sequence[AbstractValue]) -> str:
    return "(" + ", ".join(a.text() for a in avals) + ")"


def _join_carry(carry: list[AbstractValue], out: Sequence[AbstractValue],
                what: str) -> list[AbstractValue]:
    """The carry types that make `out` fit; weak carries may widen, nothing else may change."""
    joined = []
    for i, (a, b) in enumerate(zip(carry, out)):
        if a.shape != b.shape:
            raise TypeError(located(f"{what} output {i} has shape {shape_text(b.shape)} but the "
                                    f"carry has shape {shape_text(a.shape)}; a loop carry must "
                                    "keep its shape"))
        if a.dtype is b.dtype:
            joined.append(AbstractValue(a.shape, a.dtype, a.weak and b.weak))
            continue
        if not a.weak:
            raise TypeError(located(f"{what} output {i} has type {b.text()} but the carry has "
                                    f"type {a.text()}; convert it with .astype"))
        dtype, weak = promote((a.dtype, a.weak), (b.dtype, b.weak))
        joined.append(AbstractValue(a.shape, dtype, weak))
    return joined


def _check_tree(got: pytree.TreeDef, expected: pytree.TreeDef, what: str) -> None:
    if got != expected:
        raise TypeError(located(f"{what} must return the structure {expected}, got {got}"))


def _coerce(values: Sequence[Tracer], avals: Sequence[AbstractValue]) -> list[Tracer]:
    return [prim.convert(v, a.dtype, a.weak) for v, a in zip(values, avals)]


def _emit_while(init: Sequence[Tracer], avals: Sequence[AbstractValue], cond: Draft,
                body: Draft) -> list[Tracer]:
    """One while instruction running `body` while `cond` holds; returns the final carry."""
    n = len(avals)
    captured = body.captured + cond.captured
    shapes = [aval_shape(a) for a in avals] + [c.shape for c in captured]

    b = new_builder("while_body")
    state = tuple_parameter(b, shapes)
    outs = clone_into(b, body, state[:n] + state[n:n + len(body.captured)])
    body_comp = b.build(b.add(Op.TUPLE, outs + state[n:]))

    c = new_builder("while_cond")
    state = tuple_parameter(c, shapes)
    (pred,) = clone_into(c, cond, state[:n] + state[n + len(body.captured):])
    cond_comp = c.build(pred)

    trace = current_trace()
    operands = [trace.lift(t.instruction, t.trace) for t in _coerce(init, avals)] + captured
    loop = trace.emit(Op.WHILE, [trace.emit(Op.TUPLE, operands)], calls=[cond_comp, body_comp])
    return [Tracer(trace, trace.emit(Op.GET_TUPLE_ELEMENT, [loop], attrs={"index": i}), a.weak)
            for i, a in enumerate(avals)]


def _trace_cond(cond_fun: Callable[[Any], Any], tree: pytree.TreeDef,
                avals: Sequence[AbstractValue], what: str) -> Draft:
    draft = trace_draft(lambda ps: cond_fun(tree.unflatten(ps)), avals, _scope("while/cond"),
                        what)
    out = draft.out_avals
    if len(out) != 1 or out[0].shape != () or out[0].dtype is not DType.PRED:
        raise TypeError(located(f"{what} must return a boolean scalar, got "
                                f"{_types_text(out)}"))
    return draft


@eager
def while_loop(cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any],
               init_val: Any) -> Any:
    """Repeat `val = body_fun(val)` while `cond_fun(val)`; `val` is a pytree of arrays."""
    init, tree = _flatten(init_val, "while_loop init_val")
    avals = [t.aval for t in init]
    for _ in range(_MAX_RETRACES):
        body = trace_draft(lambda ps: body_fun(tree.unflatten(ps)), avals,
                           _scope("while/body"), "while_loop body_fun")
        _check_tree(body.out_tree, tree, "while_loop body_fun")
        joined = _join_carry(avals, body.out_avals, "while_loop body_fun")
        stable = [a.dtype for a in joined] == [a.dtype for a in avals]
        avals = joined
        if stable:
            break
    else:
        raise TypeError(located("while_loop: the carry types did not settle"))
    cond = _trace_cond(cond_fun, tree, avals, "while_loop cond_fun")
    return tree.unflatten(_emit_while(init, avals, cond, body))


def _static_int(x: Any) -> int | None:
    if isinstance(x, int | np.integer) and not isinstance(x, bool):
        return int(x)
    return None


@eager
def fori_loop(lower: Any, upper: Any, body_fun: Callable[[Any, Any], Any], init_val: Any,
              *, unroll: int | bool | None = None) -> Any:
    """`for i in range(lower, upper): val = body_fun(i, val)`. With static bounds it is a scan
    (so `unroll` applies), otherwise a while loop."""
    low, high = _static_int(lower), _static_int(upper)
    if low is not None and high is not None:
        def step(carry: Any, _: Any) -> Any:
            i, val = carry
            return (i + 1, body_fun(i, val)), None

        start = constant(low, DType.S32)
        (_, out), _ = scan(step, (start, init_val), None, length=max(high - low, 0),
                           unroll=unroll or 1)
        return out
    if unroll not in (None, 1, False):
        raise ValueError(located("fori_loop: unroll needs static (Python int) bounds"))
    (_, i_type, _), (_, j_type, _) = value_type(lower, "lower"), value_type(upper, "upper")
    dtype, _ = promote((i_type, True), (j_type, True))
    if not dtype.is_integer:
        raise TypeError(located(f"fori_loop bounds must be integers, got {dtype.numpy}"))
    bounds = (prim.convert(to_tracer(lower), dtype), prim.convert(to_tracer(upper), dtype))
    _, _, out = while_loop(lambda c: c[0] < c[1], lambda c: (c[0] + 1, c[1], body_fun(c[0], c[2])),
                           (*bounds, init_val))
    return out


def _scan_length(xs: list[Tracer], length: int | None) -> int:
    lengths = {x.shape[0] for x in xs if x.shape}
    if any(not x.shape for x in xs):
        raise ValueError(located("scan: every leaf of xs needs a leading axis to scan over"))
    if length is not None:
        lengths.add(int(length))
    if not lengths:
        raise ValueError(located("scan: give xs or length"))
    if len(lengths) > 1:
        raise ValueError(located(f"scan: xs leading axes and length disagree: "
                                 f"{sorted(lengths)}"))
    return lengths.pop()


def _slice_step(x: Tracer, t: Tracer | int) -> Tracer:
    window = prim.dynamic_slice(x, [t] + [0] * (x.ndim - 1), (1, *x.shape[1:]))
    return prim.reshape(window, x.shape[1:])


def _store_step(buffer: Tracer, y: Tracer, t: Tracer | int) -> Tracer:
    update = prim.reshape(y, (1, *y.shape))
    return prim.dynamic_update_slice(buffer, update, [t] + [0] * y.ndim)


class _Step:
    """One scan step: f applied to the carry and the xs at step t, storing y into ys."""

    def __init__(self, f: Callable[[Any, Any], Any], carry_tree: pytree.TreeDef,
                 xs_tree: pytree.TreeDef, carry_avals: list[AbstractValue],
                 y_tree: pytree.TreeDef, length: int, reverse: bool) -> None:
        self.f, self.carry_tree, self.xs_tree = f, carry_tree, xs_tree
        self.carry_avals, self.y_tree = carry_avals, y_tree
        self.length, self.reverse = length, reverse

    def __call__(self, carry: list[Tracer], ys: list[Tracer], xs: list[Tracer],
                 i: Tracer | int) -> tuple[list[Tracer], list[Tracer]]:
        t: Tracer | int = (self.length - 1 - i) if self.reverse else i
        x_t = [_slice_step(x, t) for x in xs]
        out = self.f(self.carry_tree.unflatten(carry), self.xs_tree.unflatten(x_t))
        (new_carry, carry_tree), (y, y_tree) = _split_output(out)
        _check_tree(carry_tree, self.carry_tree, "scan f's carry output")
        _check_tree(y_tree, self.y_tree, "scan f's y output")
        new_carry = _coerce(new_carry, self.carry_avals)
        return new_carry, [_store_step(buf, v, t) for buf, v in zip(ys, y)]


def _split_output(out: Any) -> tuple[tuple[list[Tracer], pytree.TreeDef],
                                     tuple[list[Tracer], pytree.TreeDef]]:
    if not isinstance(out, tuple) or len(out) != 2:
        raise TypeError(located("scan f must return a pair (carry, y)"))
    return _flatten(out[0], "scan f carry"), _flatten(out[1], "scan f y")


@eager
def scan(f: Callable[[Any, Any], Any], init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False, unroll: int | bool = 1) -> tuple[Any, Any]:
    """`carry, y = f(carry, x)` over the leading axis of `xs`; returns (carry, stacked ys)."""
    carry, carry_tree = _flatten(init, "scan init")
    xs_flat, xs_tree = _flatten(xs, "scan xs")
    n_steps = _scan_length(xs_flat, length)
    k = n_steps if unroll is True else 1 if unroll is False else int(unroll)
    if k < 1:
        raise ValueError(located(f"scan: unroll must be at least 1, got {unroll}"))
    k = min(k, max(n_steps, 1))

    x_avals = [AbstractValue(x.shape[1:], x.hlo_dtype, x.weak) for x in xs_flat]
    carry_avals = [t.aval for t in carry]
    n = len(carry)
    for _ in range(_MAX_RETRACES):
        probe = trace_draft(
            lambda ps: f(carry_tree.unflatten(ps[:n]), xs_tree.unflatten(ps[n:])),
            carry_avals + x_avals, _scope("scan/body"), "scan f")
        if probe.out_tree.kind != pytree.TUPLE or len(probe.out_tree.children) != 2:
            raise TypeError(located("scan f must return a pair (carry, y)"))
        carry_out_tree, y_tree = probe.out_tree.children
        _check_tree(carry_out_tree, carry_tree, "scan f's carry output")
        joined = _join_carry(carry_avals, probe.out_avals[:n], "scan f carry")
        stable = [a.dtype for a in joined] == [a.dtype for a in carry_avals]
        carry_avals = joined
        if stable:
            break
    else:
        raise TypeError(located("scan: the carry types did not settle"))
    y_avals = probe.out_avals[n:]
    carry = _coerce(carry, carry_avals)
    ys = [prim.full((n_steps, *a.shape), 0, a.dtype) for a in y_avals]
    step = _Step(f, carry_tree, xs_tree, carry_avals, y_tree, n_steps, reverse)

    trips, rest = divmod(n_steps, k)
    if trips:
        carry, ys = _scan_loop(step, carry, ys, xs_flat, k, trips * k)
    for i in range(trips * k, n_steps):
        carry, ys = step(carry, ys, xs_flat, i)
    ys = [Tracer(y.trace, y.instruction, a.weak) for y, a in zip(ys, y_avals)]
    return carry_tree.unflatten(carry), y_tree.unflatten(ys)


def _scan_loop(step: _Step, carry: list[Tracer], ys: list[Tracer], xs: list[Tracer], k: int,
               stop: int) -> tuple[list[Tracer], list[Tracer]]:
    """A while loop over steps 0..stop-1, k steps per iteration."""
    counter = constant(0, DType.S32)
    state = [counter, *carry, *ys, *xs]
    avals = [t.aval for t in state]
    n_carry, n_ys = len(carry), len(ys)

    def body(ps: list[Tracer]) -> list[Tracer]:
        i, c = ps[0], ps[1:1 + n_carry]
        y, x = ps[1 + n_carry:1 + n_carry + n_ys], ps[1 + n_carry + n_ys:]
        for j in range(k):
            index = i if j == 0 else prim.binary(Op.ADD, i, constant(j, DType.S32))
            c, y = step(c, y, x, index)
        return [prim.binary(Op.ADD, i, constant(k, DType.S32)), *c, *y, *x]

    body_draft = trace_draft(body, avals, _scope("scan/body"), "scan f")
    cond_draft = trace_draft(lambda ps: prim.compare(ps[0], constant(stop, DType.S32), "LT"),
                             avals, _scope("scan/cond"), "scan")
    out = _emit_while(state, avals, cond_draft, body_draft)
    return out[1:1 + n_carry], out[1 + n_carry:1 + n_carry + n_ys]


# --- conditionals ---------------------------------------------------------------------------


def _branch_computations(drafts: Sequence[Draft], op_avals: Sequence[AbstractValue],
                         out_avals: Sequence[AbstractValue]) -> tuple[list[Computation],
                                                                      list[Any]]:
    """One computation per branch, each taking the tuple (operands..., every capture...)."""
    captured = [c for d in drafts for c in d.captured]
    shapes = [aval_shape(a) for a in op_avals] + [c.shape for c in captured]
    n = len(op_avals)
    computations = []
    offset = n
    for index, draft in enumerate(drafts):
        b = new_builder(f"branch_{index}")
        state = tuple_parameter(b, shapes)
        mine = state[offset:offset + len(draft.captured)]
        offset += len(draft.captured)
        outs = clone_into(b, draft, state[:n] + mine)
        outs = [o if o.dtype is a.dtype else b.add(Op.CONVERT, [o], shape=aval_shape(a))
                for o, a in zip(outs, out_avals)]
        computations.append(b.build(b.add(Op.TUPLE, outs)))
    return computations, captured


def _join_branches(drafts: Sequence[Draft], what: str) -> list[AbstractValue]:
    first = drafts[0]
    joined = list(first.out_avals)
    for d in drafts[1:]:
        _check_tree(d.out_tree, first.out_tree, f"{what} branches")
        for i, (a, b) in enumerate(zip(joined, d.out_avals)):
            if a.shape != b.shape:
                raise TypeError(located(f"{what}: branch outputs {i} differ in shape: "
                                        f"{a.text()} and {b.text()}"))
            if a.dtype is not b.dtype and not (a.weak or b.weak):
                raise TypeError(located(f"{what}: branch outputs {i} differ in type: "
                                        f"{a.text()} and {b.text()}"))
            dtype, weak = promote((a.dtype, a.weak), (b.dtype, b.weak))
            joined[i] = AbstractValue(a.shape, dtype, weak)
    return joined


def _on_leaves(fn: Callable[..., Any], tree: pytree.TreeDef) -> Callable[[list[Tracer]], Any]:
    """`fn` taking the flattened leaves of its operands `tree` (one closure per branch)."""
    return lambda leaves: fn(*tree.unflatten(leaves))


def _conditional(selector: Tracer, branches: Sequence[Callable[..., Any]],
                 operands: tuple[Any, ...], what: str) -> Any:
    ops, ops_tree = _flatten(operands, f"{what} operand")
    avals = [t.aval for t in ops]
    drafts = [trace_draft(_on_leaves(fn, ops_tree), avals, _scope(f"{what}/branch_{i}"),
                          f"{what} branch {i}")
              for i, fn in enumerate(branches)]
    out_avals = _join_branches(drafts, what)
    computations, captured = _branch_computations(drafts, avals, out_avals)
    trace = current_trace()
    operands_tuple = trace.emit(
        Op.TUPLE, [trace.lift(t.instruction, t.trace) for t in ops] + captured)
    selector_inst = trace.lift(selector.instruction, selector.trace)
    result = trace.emit(Op.CONDITIONAL, [selector_inst] + [operands_tuple] * len(computations),
                        calls=computations)
    outs = [Tracer(trace, trace.emit(Op.GET_TUPLE_ELEMENT, [result], attrs={"index": i}), a.weak)
            for i, a in enumerate(out_avals)]
    return drafts[0].out_tree.unflatten(outs)


@eager
def cond(pred: Any, true_fun: Callable[..., Any], false_fun: Callable[..., Any],
         *operands: Any) -> Any:
    """`true_fun(*operands)` if `pred` else `false_fun(*operands)`; both are traced."""
    p = to_tracer(pred, "cond pred")
    if p.shape:
        raise TypeError(located(f"cond pred must be a scalar, got {p.aval.text()}"))
    if not p.hlo_dtype.is_pred:
        p = prim.compare(p, constant(0, p.hlo_dtype), "NE")
    return _conditional(p, [true_fun, false_fun], operands, "cond")


@eager
def switch(index: Any, branches: Sequence[Callable[..., Any]], *operands: Any) -> Any:
    """`branches[index](*operands)`, with `index` clamped into range as in JAX."""
    if not branches:
        raise ValueError(located("switch needs at least one branch"))
    i = to_tracer(index, "switch index")
    if i.shape or not i.hlo_dtype.is_integer:
        raise TypeError(located(f"switch index must be an integer scalar, got {i.aval.text()}"))
    i = prim.convert(i, DType.S32)
    low, high = constant(0, DType.S32), constant(len(branches) - 1, DType.S32)
    i = prim.bind_clamp(low, i, high)
    return _conditional(i, list(branches), operands, "switch")


@eager
def select(pred: Any, on_true: Any, on_false: Any) -> Tracer:
    """lax.select: `pred` is boolean with the operands' shape (or a scalar); no broadcasting."""
    p = to_tracer(pred, "select pred")
    a, b = to_tracer(on_true, "select on_true"), to_tracer(on_false, "select on_false")
    if a.weak and not b.weak:
        a = prim.convert(a, b.hlo_dtype)
    elif b.weak and not a.weak:
        b = prim.convert(b, a.hlo_dtype)
    if not p.hlo_dtype.is_pred:
        raise TypeError(located(f"select pred must be boolean, got {p.aval.text()}"))
    if a.shape != b.shape or a.hlo_dtype is not b.hlo_dtype:
        raise TypeError(located(f"select operands must have the same shape and type, got "
                                f"{a.aval.text()} and {b.aval.text()}"))
    if p.shape and p.shape != a.shape:
        raise TypeError(located(f"select pred shape {shape_text(p.shape)} does not match the "
                                f"operands' {shape_text(a.shape)}"))
    if not a.shape and b.shape:
        raise TypeError(located("select operands must have the same shape"))
    return prim.select(p, a, b)
