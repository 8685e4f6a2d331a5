"""While loops written as counted loops, and the values a loop carries.

`counted_loop` recognises the pattern of `lax.scan`, `fori_loop` and the front end's scan: a
tuple element (the induction variable) whose initial value is an integer constant, that the
body advances by a constant (`add(i, c)`, `add(c, i)` or `subtract(i, c)` at the root tuple),
and that the condition compares with a constant (its root is `compare(i, n)` or
`compare(n, i)`, any direction); the trip count follows from those three numbers
(`trip_count`). When the pattern does not hold, `NotCounted` carries the decision log's rule id
and a message: `data-dependent-condition`, `no-induction-variable`, `unknown-trip-count`,
`counter-overflow` (XLA's ComputeWhileLoopTripCount, xla/service/while_loop_analysis.cc, also
simulates loops with other updates; this covers every loop the front end writes).

`parameter_users` and `element_reads` find how a loop body or condition reads the state it
carries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op

_FLIPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "EQ": "EQ", "NE": "NE"}


@dataclass(frozen=True, slots=True)
class CountedLoop:
    """A while loop's induction variable and trip count."""

    index: int  # tuple element of the counter
    start: int
    step: int
    trip_count: int
    body_instructions: int


class NotCounted(Exception):
    """Why a loop is not a counted loop: a rule id and a message."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message


def _constant_int(inst: Instruction) -> int | None:
    if inst.op is not Op.CONSTANT or not inst.shape.is_scalar or not inst.dtype.is_integer:
        return None
    literal = inst.attrs["literal"]
    assert isinstance(literal, np.ndarray)
    return int(literal)


def _counter_read(inst: Instruction, param: Instruction) -> int | None:
    """The tuple index `inst` reads from the parameter, if it is such a read."""
    if inst.op is not Op.GET_TUPLE_ELEMENT or inst.operands[0] is not param:
        return None
    index = inst.attrs["index"]
    assert isinstance(index, int)
    return index


def _condition(loop: Instruction, cond: Computation) -> tuple[int, str, int]:
    """(counter index, direction as `counter <dir> bound`, bound) of the condition."""
    root, param = cond.root, cond.parameters[0]
    if root.op is not Op.COMPARE:
        raise NotCounted("data-dependent-condition",
                         f"%{loop.name}: its condition ends in %{root.name} ({root.op.text}), "
                         "not in a comparison of a counter with a constant")
    lhs, rhs = root.operands
    direction = root.attrs["direction"]
    assert isinstance(direction, str)
    if _counter_read(lhs, param) is None:
        lhs, rhs, direction = rhs, lhs, _FLIPPED[direction]
    index = _counter_read(lhs, param)
    bound = _constant_int(rhs)
    if index is None or bound is None or not lhs.dtype.is_integer:
        raise NotCounted("data-dependent-condition",
                         f"%{loop.name}: its condition %{root.name} does not compare an integer "
                         "loop element with a constant")
    return index, direction, bound


def _step(loop: Instruction, body: Computation, index: int) -> int:
    root, param = body.root, body.parameters[0]
    update = root.operands[index] if root.op is Op.TUPLE else None
    if update is not None and update.op in (Op.ADD, Op.SUBTRACT):
        a, b = update.operands
        if _counter_read(a, param) == index and _constant_int(b) is not None:
            value = _constant_int(b)
            assert value is not None
            return value if update.op is Op.ADD else -value
        if update.op is Op.ADD and _counter_read(b, param) == index:
            value = _constant_int(a)
            if value is not None:
                return value
    what = f"%{update.name} ({update.op.text})" if update is not None else "a non-tuple root"
    raise NotCounted("no-induction-variable",
                     f"%{loop.name}: the body updates element {index} with {what}, not by "
                     "adding a constant to it")


def trip_count(start: int, step: int, direction: str, bound: int) -> int | None:
    """How often `counter <direction> bound` holds for counter = start, start + step, ...;
    None if it would hold forever (or never-ending for any other reason)."""
    if direction == "EQ":
        return 0 if start != bound else (1 if step else None)
    if direction == "NE":
        if start == bound:
            return 0
        if step == 0 or (bound - start) % step or (bound - start) // step < 0:
            return None
        return (bound - start) // step
    if direction in ("GT", "GE"):  # mirror: -counter < -bound
        start, step, bound = -start, -step, -bound
        direction = "LT" if direction == "GT" else "LE"
    if direction == "LE":
        bound += 1
    if start >= bound:
        return 0
    if step <= 0:
        return None
    return -(-(bound - start) // step)


def counted_loop(loop: Instruction, init: Instruction, cond: Computation,
                 body: Computation) -> CountedLoop:
    """The loop's induction variable and trip count; raises NotCounted saying why not."""
    index, direction, bound = _condition(loop, cond)
    step = _step(loop, body, index)
    first = init.operands[index] if init.op is Op.TUPLE else None
    start = _constant_int(first) if first is not None else None
    if start is None:
        source = f"%{first.name}" if first is not None else f"%{init.name}"
        raise NotCounted("unknown-trip-count",
                         f"%{loop.name}: its counter (element {index}) starts from {source}, "
                         "not from a constant")
    trips = trip_count(start, step, direction, bound)
    if trips is None:
        raise NotCounted("unknown-trip-count",
                         f"%{loop.name}: counter {start}, step {step}, condition "
                         f"{direction} {bound} never ends")
    dtype = init.operands[index].dtype.numpy
    info = np.iinfo(dtype)
    if not info.min <= start + trips * step <= info.max:
        raise NotCounted("counter-overflow",
                         f"%{loop.name}: its counter would pass the range of {dtype}")
    return CountedLoop(index, start, step, trips, len(body.instructions))


def parameter_users(comp: Computation) -> list[Instruction]:
    """The instructions that use the computation's (single) parameter."""
    param = comp.parameters[0]
    return [i for i in comp.instructions if any(o is param for o in i.operands)]


def element_reads(comp: Computation, index: int) -> list[Instruction]:
    """The get-tuple-elements of the parameter that read tuple element `index`."""
    return [i for i in parameter_users(comp)
            if i.op is Op.GET_TUPLE_ELEMENT and i.attrs["index"] == index]
