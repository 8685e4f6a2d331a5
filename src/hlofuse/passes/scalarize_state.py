"""scalarize-state: a packed array carried through a while loop becomes one loop-carried array
per packed piece.

A loop state element qualifies when the body produces it with a concatenate (of at most
`max_pieces` pieces) and the body and the condition only read it through slices that each lie
inside one piece. The loop is rebuilt with the element replaced, in place, by one element per
piece: the body's root tuple carries the concatenate's operands instead of the concatenate, each
slice reads its piece (or a slice of it), and the initial value is cut into pieces before the
loop (the cut sinks into a concatenate, broadcast, transpose or iota that built it). A piece
one slot wide in the packed dimension is carried without that dimension (CartPole's (N, 1)
columns as (N,) arrays), so it fuses with the other arrays of its shape. After the
loop the packed value is a concatenate of the pieces again; `simplify` forwards the slices that
read it and `dce` removes it where nothing else does. Nothing is packed and unpacked inside the
loop any more, so the concatenate with several users (the study's fusion barrier) is gone and
the pieces fuse like separately carried arrays.

Refused, and logged: an element that is read whole, or through a slice across pieces, or whose
tuple is used whole (`state-read-whole`); an element read only through slices but not produced
by a concatenate (`state-not-concatenated`: `concat-forwarding` usually makes it one); more
than `max_pieces` pieces (`too-many-pieces`); loops whose body or condition is shared with
another loop (`shared-loop-computation`).

XLA has no such pass: its AlgebraicSimplifier does not see a slice through the loop-carried
tuple (docs/xla-fusion.md section 16, item 4), and the study did this split by hand (its 3.41x
step).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from hlofuse.analysis.call_graph import call_counts
from hlofuse.analysis.counted_loops import element_reads, parameter_users
from hlofuse.analysis.graph import users
from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape
from hlofuse.passes.concat_forwarding import (
    DEFAULT_MAX_PIECES,
    Partition,
    piece_of_slice,
    reshape_to,
    slice_along,
    slice_in_piece,
)
from hlofuse.passes.decision_log import RewriteLog
from hlofuse.passes.loop_rebuild import tuple_elements, with_reachable_computations
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink


@dataclass(frozen=True, slots=True)
class ScalarizeState:
    """Splits packed loop state (built by a concatenate, read by slices) into its pieces."""

    name: ClassVar[str] = "scalarize-state"
    max_pieces: int = DEFAULT_MAX_PIECES

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)
        counts = call_counts(module)

        def split(inst: Instruction, operands: tuple[Instruction, ...],
                  builder: RewriteBuilder) -> Instruction | None:
            if any(counts[id(c)] > 1 for c in inst.calls):
                records.refused(builder.name, inst, "shared-loop-computation",
                                f"cannot split the state of %{inst.name}: its body or "
                                "condition is also used by another instruction")
                return None
            cond, body = (builder.callee(c) for c in inst.calls)
            plans = self.plan(inst, cond, body, records, builder.name)
            if not plans:
                return None
            return _split_loop(inst, operands[0], cond, body, plans, builder, records,
                               builder.name)

        module, changed = rewrite_matching(module, lambda inst: inst.op is Op.WHILE, split)
        if not changed:
            return module, False
        return with_reachable_computations(module), True

    def plan(self, loop: Instruction, cond: Computation, body: Computation,
             records: RewriteLog, where: str) -> dict[int, Partition]:
        """The state elements to split, and how; logs why others with slice reads are not."""
        root = body.root
        if root.op is not Op.TUPLE:
            return {}
        whole = [u for comp in (body, cond) for u in parameter_users(comp)
                 if u.op is not Op.GET_TUPLE_ELEMENT]
        body_users, cond_users = users(body), users(cond)
        plans: dict[int, Partition] = {}
        for index, produced in enumerate(root.operands):
            if produced.shape.rank == 0:
                continue
            readers = [u for read in element_reads(body, index) for u in body_users[read]]
            readers += [u for read in element_reads(cond, index) for u in cond_users[read]]
            if produced.op is not Op.CONCATENATE:
                if readers and all(u.op is Op.SLICE for u in readers):
                    records.refused(where, loop, "state-not-concatenated",
                                    f"cannot split element {index} of %{loop.name}: it is only "
                                    f"sliced, but the body produces it with "
                                    f"%{produced.name} ({produced.op.text}), not a concatenate",
                                    index=index)
                continue
            partition = Partition.of(produced)
            if len(partition.sizes) > self.max_pieces:
                records.refused(where, loop, "too-many-pieces",
                                f"not splitting element {index} of %{loop.name}: "
                                f"{len(partition.sizes)} pieces (at most {self.max_pieces})",
                                index=index)
                continue
            blocking = whole[0] if whole else next(
                (u for u in readers
                 if u.op is not Op.SLICE or piece_of_slice(u, partition) is None), None)
            if blocking is not None:
                records.refused(where, loop, "state-read-whole",
                                f"cannot split element {index} of %{loop.name}: %{blocking.name}"
                                f" ({blocking.op.text}) reads it whole or across pieces",
                                blocking, index=index)
                continue
            plans[index] = partition
        return plans


def _carried(piece: Shape, dim: int) -> Shape:
    """The shape the loop carries a packed piece in: without the packed dimension when the piece
    is one slot of it (CartPole's (N, 1) columns are carried as (N,)), so the pieces fuse with
    the other arrays of that shape; readers get a reshape back to the piece's shape."""
    if piece.dims[dim] != 1:
        return piece
    return Shape.array(piece.dtype, piece.dims[:dim] + piece.dims[dim + 1:])


def _split_loop(loop: Instruction, init: Instruction, cond: Computation, body: Computation,
                plans: dict[int, Partition], builder: RewriteBuilder, records: RewriteLog,
                where: str) -> Instruction:
    """The new loop, and a tuple of the old loop's shape (pieces concatenated) standing for it."""
    packed = {index: body.root.operands[index].operands for index in plans}
    indices: list[list[int]] = []
    shapes: list[Shape] = []
    for index, element_shape in enumerate(loop.shape.elements):
        carried = ([_carried(o.shape, plans[index].dim) for o in packed[index]]
                   if index in plans else [element_shape])
        indices.append(list(range(len(shapes), len(shapes) + len(carried))))
        shapes.extend(carried)
    state = Shape.tuple_of(shapes)

    flat: list[Instruction] = []
    for index, element in enumerate(tuple_elements(init, builder)):
        if index not in plans:
            flat.append(element)
            continue
        p = plans[index]
        flat += [reshape_to(slice_along(element, p.dim, offset, offset + size, builder),
                            _carried(piece.shape, p.dim).dims, builder)
                 for offset, size, piece in zip(p.offsets, p.sizes, packed[index])]
    new_init = builder.add(Op.TUPLE, flat, metadata=init.metadata)
    rebuilt = [_rebuild(c, state, indices, plans, packed, builder.names) for c in (cond, body)]
    new_loop = dataclasses.replace(loop, operands=(new_init,), calls=tuple(rebuilt), shape=state)
    builder.instructions.append(new_loop)

    outputs = []
    for index, element_shape in enumerate(loop.shape.elements):
        reads = [builder.add(Op.GET_TUPLE_ELEMENT, [new_loop], attrs={"index": i},
                             metadata=loop.metadata) for i in indices[index]]
        if index not in plans:
            outputs.append(reads[0])
            continue
        pieces = [reshape_to(r, piece.shape.dims, builder)
                  for r, piece in zip(reads, packed[index])]
        outputs.append(builder.add(Op.CONCATENATE, pieces,
                                   attrs={"dimensions": (plans[index].dim,)},
                                   metadata=body.root.operands[index].metadata))
        records.rewrote(where, loop, "state-split",
                        f"split element {index} ({element_shape.text(False)}) of %{loop.name} into "
                        f"{len(reads)} loop-carried arrays "
                        f"({', '.join(r.shape.text(False) for r in reads)})",
                        index=index, pieces=len(reads))
    return builder.add(Op.TUPLE, outputs)


def _rebuild(comp: Computation, state: Shape, indices: list[list[int]],
             plans: dict[int, Partition], packed: dict[int, tuple[Instruction, ...]],
             names: NameUniquer) -> Computation:
    """`comp` (a loop body or condition) over the split state. The old computation goes away,
    so instructions keep their names and unchanged ones are reused as they are."""
    param = comp.parameters[0]
    b = ComputationBuilder(comp.name, names)
    mapping: dict[Instruction, Instruction] = {}
    pieces: dict[int, list[Instruction]] = {}
    split_reads: dict[Instruction, int] = {}
    for inst in comp.instructions:
        if inst is param:
            new: Instruction = dataclasses.replace(param, shape=state)
        elif inst.op is Op.GET_TUPLE_ELEMENT and inst.operands[0] is param:
            index = inst.attrs["index"]
            assert isinstance(index, int)
            if index in plans:
                if index not in pieces:
                    reads = [b.add(Op.GET_TUPLE_ELEMENT, [mapping[param]], attrs={"index": i},
                                   metadata=inst.metadata) for i in indices[index]]
                    pieces[index] = [reshape_to(r, piece.shape.dims, b)
                                     for r, piece in zip(reads, packed[index])]
                split_reads[inst] = index
                continue
            new = dataclasses.replace(inst, operands=(mapping[param],),
                                      attrs={"index": indices[index][0]})
        elif inst.op is Op.SLICE and inst.operands[0] in split_reads:
            index = split_reads[inst.operands[0]]
            number = piece_of_slice(inst, plans[index])
            assert number is not None  # plan() checked every slice
            piece = pieces[index][number]
            spec = slice_in_piece(inst, plans[index], piece.shape.dims)
            if spec is None:
                mapping[inst] = piece
                continue
            new = dataclasses.replace(inst, operands=(piece,), attrs={"slice": spec})
        elif inst is comp.root and inst.op is Op.TUPLE:
            flat: list[Instruction] = []
            for index, element in enumerate(inst.operands):
                if index not in plans:
                    flat.append(mapping[element])
                    continue
                flat += [reshape_to(mapping[p], _carried(p.shape, plans[index].dim).dims, b)
                         for p in packed[index]]
            new = dataclasses.replace(inst, operands=tuple(flat), shape=state)
        else:
            operands = tuple(mapping[o] for o in inst.operands)
            same = all(x is y for x, y in zip(operands, inst.operands))
            new = inst if same else dataclasses.replace(inst, operands=operands)
        b.instructions.append(new)
        mapping[inst] = new
    return b.build(mapping[comp.root])
