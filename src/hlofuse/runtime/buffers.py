"""Buffer assignment: liveness over the thunk tree, sharing where it is safe, arena offsets.

Every thunk gets a position in program order (a loop body is laid out once). A buffer lives
from its first definition to its last use; one used inside a loop but defined before it lives
to the loop's end, since the next iteration reads it again. Buffers are then joined into
storage classes where one can stand for the other, which removes a copy or an allocation:

* in place: a dynamic-update-slice writes over its operand when the operand dies there;
* while state: the initial value's buffer becomes the state when it dies at the loop, and
  the body's result is written straight into the state when nothing reads the old state
  after the result is first defined (so `x = dus(x, ...)` or `i = i + 1` update in place);
* conditional results: each branch writes its result into the conditional's buffer;
* outputs: a buffer of the entry's result is the caller's output array itself.

Remaining temporaries are packed into one arena: greedy by size, each class at the lowest
offset that no class live at the same time occupies (a simple heap simulator, as XLA's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hlofuse.runtime.program import (
    Buffer,
    BufferKind,
    ConditionalThunk,
    CopyThunk,
    KernelThunk,
    Program,
    Thunk,
    WhileThunk,
)

ALIGNMENT = 64


@dataclass(frozen=True)
class Storage:
    """Where a buffer's bytes are: arena offset, parameter/output number, or pool offset."""

    kind: BufferKind
    offset: int = 0  # arena or constant-pool offset; parameter/output number otherwise


@dataclass
class _Positions:
    defs: dict[int, list[int]] = field(default_factory=dict)
    uses: dict[int, list[tuple[int, object]]] = field(default_factory=dict)
    loops: list[tuple[int, int, int, int]] = field(default_factory=list)  # start, body, end, id
    enclosing: dict[int, list[int]] = field(default_factory=dict)  # use position -> loops
    thunk_at: dict[int, Thunk] = field(default_factory=dict)
    position_of: dict[int, int] = field(default_factory=dict)  # id(thunk) -> position
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)  # id(branch list) -> span
    buffers: dict[int, Buffer] = field(default_factory=dict)
    counter: int = 0

    def next(self) -> int:
        self.counter += 1
        return self.counter

    def define(self, buffer: Buffer, position: int) -> None:
        self.buffers[buffer.id] = buffer
        self.defs.setdefault(buffer.id, []).append(position)

    def use(self, buffer: Buffer, position: int, thunk: object, loops: list[int]) -> None:
        self.buffers[buffer.id] = buffer
        self.uses.setdefault(buffer.id, []).append((position, thunk))
        self.enclosing[position] = list(loops)


def _number(thunks: list[Thunk], at: _Positions, loops: list[int]) -> None:
    for thunk in thunks:
        if isinstance(thunk, KernelThunk):
            p = at.next()
            at.thunk_at[p] = thunk
            at.position_of[id(thunk)] = p
            for b in thunk.inputs:
                at.use(b, p, thunk, loops)
            for b in thunk.outputs:
                at.define(b, p)
        elif isinstance(thunk, CopyThunk):
            p = at.next()
            at.thunk_at[p] = thunk
            at.position_of[id(thunk)] = p
            at.use(thunk.source, p, thunk, loops)
            at.define(thunk.target, p)
        elif isinstance(thunk, WhileThunk):
            start = at.next()
            loop_id = len(at.loops)
            at.loops.append((start, 0, 0, loop_id))
            inner = [*loops, loop_id]
            _number(thunk.condition, at, inner)
            at.use(thunk.predicate, at.next(), thunk, inner)
            body_start = at.counter + 1
            _number(thunk.body, at, inner)
            end = at.next()
            at.loops[loop_id] = (start, body_start, end, loop_id)
            at.spans[id(thunk.body)] = (body_start, end)
        else:
            p = at.next()
            at.use(thunk.selector, p, thunk, loops)
            for branch in thunk.branches:
                begin = at.counter + 1
                _number(branch, at, loops)
                at.spans[id(branch)] = (begin, at.counter)
            at.next()


class _Classes:
    """Union-find over buffers with each class's live interval (hull of its members)."""

    def __init__(self, at: _Positions) -> None:
        self.at = at
        self.parent: dict[int, int] = {}
        self.interval: dict[int, tuple[int, int]] = {}
        self.members: dict[int, list[Buffer]] = {}
        for buffer_id, buffer in at.buffers.items():
            self.parent[buffer_id] = buffer_id
            self.members[buffer_id] = [buffer]
            self.interval[buffer_id] = self._live(buffer)

    def _live(self, buffer: Buffer) -> tuple[int, int]:
        defs = self.at.defs.get(buffer.id, [])
        uses = self.at.uses.get(buffer.id, [])
        positions = defs + [p for p, _ in uses]
        if not positions:
            return 0, 0
        first, last = min(positions), max(positions)
        defined = min(defs) if defs else 0
        for p, _ in uses:
            for loop_id in self.at.enclosing.get(p, []):
                start, _, end, _ = self.at.loops[loop_id]
                if defined < start:
                    last = max(last, end)
        return first, last

    def find(self, buffer: Buffer) -> int:
        root = buffer.id
        while self.parent[root] != root:
            root = self.parent[root]
        return root

    def same(self, a: Buffer, b: Buffer) -> bool:
        return self.find(a) == self.find(b)

    def kinds(self, buffer: Buffer) -> set[BufferKind]:
        return {m.kind for m in self.members[self.find(buffer)]}

    def is_temporary(self, buffer: Buffer) -> bool:
        return self.kinds(buffer) == {BufferKind.TEMPORARY}

    def first_def(self, buffer: Buffer) -> int:
        return min(p for m in self.members[self.find(buffer)] for p in self.at.defs.get(m.id, [0]))

    def class_uses(self, buffer: Buffer) -> list[tuple[int, object]]:
        return [u for m in self.members[self.find(buffer)] for u in self.at.uses.get(m.id, [])]

    def union(self, a: Buffer, b: Buffer) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        self.parent[rb] = ra
        self.members[ra] += self.members.pop(rb)
        (a0, a1), (b0, b1) = self.interval[ra], self.interval.pop(rb)
        self.interval[ra] = (min(a0, b0), max(a1, b1))


@dataclass
class Assignment:
    storage: Mapping[int, Storage]  # buffer id -> storage
    arena_bytes: int
    elided: frozenset[int]  # id() of copy thunks that became no-ops
    in_place: frozenset[int]  # id() of kernel thunks updating a buffer in place

    def of(self, buffer: Buffer) -> Storage:
        return self.storage[buffer.id]


def assign_buffers(program: Program, in_place: Mapping[int, tuple[tuple[int, int], ...]]
                   ) -> Assignment:
    """`in_place` maps id(kernel thunk) to its (output, input) pairs that may share."""
    at = _Positions()
    for b in [*program.parameters, *program.outputs]:
        at.buffers[b.id] = b
        at.defs.setdefault(b.id, [])
    _number(program.thunks, at, [])
    for b in program.outputs:
        at.defs[b.id] = at.defs[b.id] or [at.counter + 1]
    classes = _Classes(at)
    updated: set[int] = set()
    _join_in_place(program, at, classes, in_place, updated)
    _join_loop_state(program.thunks, at, classes, in_place, updated)
    _join_outputs(program, at, classes)
    elided = frozenset(id(t) for t in at.thunk_at.values()
                       if isinstance(t, CopyThunk) and classes.same(t.source, t.target))
    storage, arena = _place(at, classes)
    return Assignment(storage, arena, elided, frozenset(updated))


def _in_place_pair(thunk: KernelThunk, output: Buffer, pairs: tuple[tuple[int, int], ...]
                   ) -> Buffer | None:
    for out_k, in_k in pairs:
        if thunk.outputs[out_k] is output:
            source = thunk.inputs[in_k]
            if sum(1 for b in thunk.inputs if b is source) == 1:
                return source
    return None


def _join_in_place(program: Program, at: _Positions, classes: _Classes,
                   in_place: Mapping[int, tuple[tuple[int, int], ...]], updated: set[int]) -> None:
    for p, thunk in sorted(at.thunk_at.items()):
        if not isinstance(thunk, KernelThunk):
            continue
        for out_k, in_k in in_place.get(id(thunk), ()):
            source, target = thunk.inputs[in_k], thunk.outputs[out_k]
            if sum(1 for b in thunk.inputs if b is source) != 1:
                continue
            if not (classes.is_temporary(source) and classes.is_temporary(target)):
                continue
            if len(classes.members[classes.find(target)]) != 1:
                continue  # already sharing another operand's buffer
            if classes.interval[classes.find(source)][1] != p:
                continue  # the operand is still needed afterwards
            classes.union(source, target)
            updated.add(id(thunk))


def _join_loop_state(thunks: list[Thunk], at: _Positions, classes: _Classes,
                     in_place: Mapping[int, tuple[tuple[int, int], ...]],
                     updated: set[int]) -> None:
    for thunk in thunks:
        if isinstance(thunk, WhileThunk):
            _join_loop_state(thunk.condition, at, classes, in_place, updated)
            _join_loop_state(thunk.body, at, classes, in_place, updated)
            _join_results(thunk.body, at.spans[id(thunk.body)], at, classes, in_place, updated,
                          "while-back")
        elif isinstance(thunk, ConditionalThunk):
            for branch in thunk.branches:
                _join_loop_state(branch, at, classes, in_place, updated)
                _join_results(branch, at.spans[id(branch)], at, classes, in_place, updated,
                              "branch-result")
    for thunk in thunks:
        if isinstance(thunk, CopyThunk) and thunk.reason == "while-init":
            _join_init(thunk, at, classes)


def _join_init(copy: CopyThunk, at: _Positions, classes: _Classes) -> None:
    source, target = copy.source, copy.target
    if not (classes.is_temporary(source) and classes.is_temporary(target)):
        return
    if classes.same(source, target):
        return
    p = at.position_of[id(copy)]
    if classes.interval[classes.find(source)][1] != p:
        return  # the initial value is still read after the loop starts
    classes.union(source, target)


def _join_results(thunks: list[Thunk], span: tuple[int, int], at: _Positions,
                  classes: _Classes, in_place: Mapping[int, tuple[tuple[int, int], ...]],
                  updated: set[int], reason: str) -> None:
    begin, end = span
    for copy in thunks:
        if not isinstance(copy, CopyThunk) or copy.reason != reason:
            continue
        result, state = copy.source, copy.target
        if classes.same(result, state):
            continue
        if not (classes.is_temporary(result) and classes.is_temporary(state)):
            continue
        members = classes.members[classes.find(result)]
        if any(not at.defs.get(m.id) or min(at.defs[m.id]) < begin for m in members):
            continue  # computed outside this body or branch
        defined = classes.first_def(result)
        copy_at = at.position_of[id(copy)]
        if any(p > copy_at for p, _ in classes.class_uses(result)):
            continue
        if reason == "while-back" and not _old_state_dead(state, result, defined, span, at,
                                                          classes, in_place, updated):
            continue
        classes.union(state, result)


def _old_state_dead(state: Buffer, result: Buffer, defined: int, span: tuple[int, int],
                    at: _Positions, classes: _Classes,
                    in_place: Mapping[int, tuple[tuple[int, int], ...]], updated: set[int]) -> bool:
    """Nothing in the body reads the state's old value once the result starts being written,
    except an in-place update producing the result itself."""
    begin, end = span
    for p, reader in classes.class_uses(state):
        if p < begin or p < defined or p > end:
            continue
        if p == defined and isinstance(reader, KernelThunk):
            source = None
            for output in reader.outputs:
                if classes.same(output, result):
                    source = _in_place_pair(reader, output, in_place.get(id(reader), ()))
            if source is not None and classes.same(source, state):
                updated.add(id(reader))
                continue
        return False
    return True


def _join_outputs(program: Program, at: _Positions, classes: _Classes) -> None:
    claimed: set[int] = set()
    for thunk in at.thunk_at.values():
        if not isinstance(thunk, CopyThunk) or thunk.reason != "output":
            continue
        source = thunk.source
        if not classes.is_temporary(source) or classes.find(source) in claimed:
            continue
        claimed.add(classes.find(source))
        classes.union(thunk.target, source)


def _place(at: _Positions, classes: _Classes) -> tuple[dict[int, Storage], int]:
    storage: dict[int, Storage] = {}
    temporaries = []
    for root, members in classes.members.items():
        external = [m for m in members if m.kind is not BufferKind.TEMPORARY]
        if external:
            place = external[0]
            if len(external) > 1 or (place.kind is not BufferKind.OUTPUT and len(members) > 1):
                raise AssertionError(f"buffer {place} was joined with {members}")
            for m in members:
                storage[m.id] = Storage(place.kind, place.number)
            continue
        size = max(m.nbytes for m in members)
        temporaries.append((size, classes.interval[root], root, members))
    temporaries.sort(key=lambda t: (-t[0], t[1][0]))
    placed: list[tuple[int, int, int, int]] = []  # start, end, offset, size
    arena = 0
    for size, (start, end), _, members in temporaries:
        rounded = -(-size // ALIGNMENT) * ALIGNMENT
        busy = sorted((o, o + s) for s0, e0, o, s in placed if s0 <= end and start <= e0)
        offset = 0
        for low, high in busy:
            if offset + rounded <= low:
                break
            offset = max(offset, -(-high // ALIGNMENT) * ALIGNMENT)
        placed.append((start, end, offset, rounded))
        arena = max(arena, offset + rounded)
        for m in members:
            storage[m.id] = Storage(BufferKind.TEMPORARY, offset)
    return storage, arena
