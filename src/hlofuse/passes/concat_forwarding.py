"""concat-forwarding: slices of a concatenate read the concatenated pieces directly, and
element-wise work over a concatenation is done per piece.

Two rules, applied operands-first in one walk of each computation:

- slice(concatenate(a, b, ...)) whose range lies inside one piece becomes that piece, or a
  slice of it (the algebraic simplifier's rule, here for strided slices too, and logged);
- an element-wise instruction with a concatenate operand of its own shape is split per piece:
  op(concatenate(a, b), y) -> concatenate(op(a, y[piece a]), op(b, y[piece b])), the other
  operands sliced to the piece (a slice of a broadcast, transpose, iota or concatenate is
  rewritten into the smaller instruction rather than added on top). A piece that is a reshape
  (a column (N,) made (N, 1)) is worked on in its operand's shape, then reshaped. It applies
  only when it gains something: every user of the concatenate consumes it piece by piece
  (element-wise users that split the same way, slices inside one piece), so the concatenate
  goes away, or a slice of the result lies inside one piece and will read that piece directly.
  The split result is again a concatenate, so chains of element-wise ops split top down;
- a reduce over the concatenated dimension is done per piece and the partial results are
  combined with the reducer's op: reduce(concatenate(a, b), or) -> or(reduce(a), reduce(b)),
  a piece that is one slot wide (a reshaped column) read as it is when the init value is the
  op's identity. Only reducers that regroup exactly qualify (`reducers.py`: and, or, max, min;
  integer add, multiply, xor with an identity init); the combine follows the pieces' order.

The second and third rules are what let `scalarize-state` see a packed loop state that the
program builds as `select(done, reset, concatenate(x, v, ...))` with
`done = any(|concatenate(x, v, ...)| > limits, axis=1)`. Refused, and logged: slices across
pieces (`slice-within-one-piece`), splits that gain nothing (`split-gains-nothing`),
concatenations of more than `max_pieces` pieces (`too-many-pieces`), reduces that keep the
concatenated dimension (`reduce-keeps-pieces`), and reducers that do not regroup exactly
(`reducer-not-associative`, `reducer-not-exact`, `init-not-identity`, `variadic-reduce`).

XLA's AlgebraicSimplifier has the first rule (HandleSlice on a concatenate) and no form of the
others: it never moves element-wise work or a reduction across a concatenate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from hlofuse.analysis.graph import users
from hlofuse.analysis.reducers import is_identity, reducer_op, regrouping_refusal
from hlofuse.ir.attrs import SliceDim
from hlofuse.ir.builder import ComputationBuilder
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import ELEMENTWISE_OPS, Op
from hlofuse.ir.shapes import Shape
from hlofuse.passes.decision_log import RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, Transform, rewrite_module

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink

DEFAULT_MAX_PIECES = 8


@dataclass(frozen=True, slots=True)
class Partition:
    """How a concatenate cuts dimension `dim`: piece i is [offsets[i], offsets[i] + sizes[i])."""

    dim: int
    sizes: tuple[int, ...]

    @staticmethod
    def of(concat: Instruction) -> Partition:
        dim = concat.ints("dimensions")[0]
        return Partition(dim, tuple(o.shape.dims[dim] for o in concat.operands))

    @property
    def offsets(self) -> tuple[int, ...]:
        out, total = [], 0
        for size in self.sizes:
            out.append(total)
            total += size
        return tuple(out)

    def piece_of(self, start: int, limit: int) -> int | None:
        """The piece that holds [start, limit) along `dim`, or None if none does."""
        for i, (offset, size) in enumerate(zip(self.offsets, self.sizes)):
            if size and offset <= start and limit <= offset + size:
                return i
        return None


def slice_ranges(inst: Instruction) -> tuple[SliceDim, ...]:
    spec = inst.attrs["slice"]
    assert isinstance(spec, tuple)
    return tuple(s for s in spec if isinstance(s, SliceDim))


def piece_of_slice(inst: Instruction, partition: Partition) -> int | None:
    """The piece a slice reads from, if it reads from one piece only."""
    s = slice_ranges(inst)[partition.dim]
    last = s.start + max(inst.shape.dims[partition.dim] - 1, 0) * s.stride
    return partition.piece_of(s.start, last + 1)


def slice_in_piece(inst: Instruction, partition: Partition,
                   piece_dims: tuple[int, ...]) -> tuple[SliceDim, ...] | None:
    """The ranges of slice `inst` relative to the piece it reads (whose dims are `piece_dims`),
    or None when the slice is that whole piece."""
    piece = piece_of_slice(inst, partition)
    assert piece is not None
    offset = partition.offsets[piece]
    spec = []
    for d, (r, size) in enumerate(zip(slice_ranges(inst), piece_dims)):
        start, limit = (r.start - offset, r.limit - offset) if d == partition.dim else (
            r.start, r.limit)
        # A strided slice may name a limit past the piece; the elements it reads are inside.
        spec.append(SliceDim(start, min(limit, size), r.stride))
    if inst.shape.dims == piece_dims and all(r.stride == 1 for r in spec):
        return None
    return tuple(spec)


def slice_along(value: Instruction, dim: int, start: int, limit: int,
                builder: ComputationBuilder) -> Instruction:
    """`value[..., start:limit, ...]` along `dim`, built from smaller instructions where the
    value is a concatenate, broadcast, transpose or iota (the slice sinks into them)."""
    dims = value.shape.dims
    if start == 0 and limit == dims[dim]:
        return value
    out_dims = dims[:dim] + (limit - start,) + dims[dim + 1:]
    meta = value.metadata
    if value.op is Op.CONCATENATE and value.ints("dimensions")[0] == dim:
        partition = Partition.of(value)
        piece = partition.piece_of(start, limit)
        if piece is not None:
            offset = partition.offsets[piece]
            return slice_along(value.operands[piece], dim, start - offset, limit - offset,
                               builder)
    if value.op is Op.BROADCAST:
        operand = value.operands[0]
        mapped = value.ints("dimensions")
        if dim in mapped and operand.shape.dims[mapped.index(dim)] != 1:
            operand = slice_along(operand, mapped.index(dim), start, limit, builder)
        return builder.add(Op.BROADCAST, [operand], attrs={"dimensions": mapped},
                           shape=Shape.array(value.dtype, out_dims), metadata=meta)
    if value.op is Op.TRANSPOSE:
        perm = value.ints("dimensions")
        inner = slice_along(value.operands[0], perm[dim], start, limit, builder)
        return builder.add(Op.TRANSPOSE, [inner], attrs={"dimensions": perm}, metadata=meta)
    if value.op is Op.IOTA and value.attrs["iota_dimension"] != dim:
        return builder.add(Op.IOTA, attrs=dict(value.attrs),
                           shape=Shape.array(value.dtype, out_dims), metadata=meta)
    spec = tuple(SliceDim(start, limit) if d == dim else SliceDim(0, size)
                 for d, size in enumerate(dims))
    return builder.add(Op.SLICE, [value], attrs={"slice": spec}, metadata=meta)


def _without_ones(dims: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in dims if d != 1)


def reshape_to(value: Instruction, dims: tuple[int, ...],
               builder: ComputationBuilder) -> Instruction:
    """`value` reshaped to `dims`, merged into the reshape, transpose or broadcast that made it
    when that is only a matter of size-1 dimensions."""
    if value.shape.dims == dims:
        return value
    if value.op is Op.RESHAPE:
        return reshape_to(value.operands[0], dims, builder)
    if value.op is Op.TRANSPOSE:
        moved = [p for p, d in zip(value.ints("dimensions"), value.shape.dims) if d != 1]
        if moved == sorted(moved):  # only size-1 dimensions move: the order of elements stays
            return reshape_to(value.operands[0], dims, builder)
    shape = Shape.array(value.dtype, dims)
    if value.op is Op.BROADCAST and _without_ones(value.shape.dims) == _without_ones(dims):
        # Every operand dimension of size > 1 maps to a result dimension of the same size, so
        # to one of the size > 1 dimensions both shapes share, in order.
        operand = value.operands[0]
        kept = [i for i, d in enumerate(value.shape.dims) if d != 1]
        targets = [i for i, d in enumerate(dims) if d != 1]
        mapped = value.ints("dimensions")
        new_mapping = tuple(targets[kept.index(m)] for m, d in zip(mapped, operand.shape.dims)
                            if d != 1)
        operand = reshape_to(operand, _without_ones(operand.shape.dims), builder)
        return builder.add(Op.BROADCAST, [operand], attrs={"dimensions": new_mapping},
                           shape=shape, metadata=value.metadata)
    return builder.add(Op.RESHAPE, [value], shape=shape, metadata=value.metadata)


@dataclass(frozen=True, slots=True)
class ConcatForwarding:
    """Forwards slices of concatenates and splits element-wise work per concatenated piece."""

    name: ClassVar[str] = "concat-forwarding"
    split_elementwise: bool = True
    max_pieces: int = DEFAULT_MAX_PIECES

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def transform_for(comp: Computation) -> Transform | None:
            if not any(i.op is Op.CONCATENATE for i in comp.instructions):
                return None
            return _Forwarder(self, comp, records).transform

        return rewrite_module(module, transform_for)


class _Forwarder:
    def __init__(self, config: ConcatForwarding, comp: Computation, records: RewriteLog) -> None:
        self.config = config
        self.comp = comp
        self.records = records
        self.users = users(comp)

    def transform(self, inst: Instruction, operands: tuple[Instruction, ...],
                  builder: RewriteBuilder) -> Instruction | None:
        if inst.op is Op.SLICE and operands[0].op is Op.CONCATENATE:
            return self.forward_slice(inst, operands, builder)
        if inst.op in ELEMENTWISE_OPS and self.config.split_elementwise:
            return self.split(inst, operands, builder)
        if inst.op is Op.REDUCE and operands[0].op is Op.CONCATENATE:
            return self.split_reduce(inst, operands, builder)
        return None

    def forward_slice(self, inst: Instruction, operands: tuple[Instruction, ...],
                      builder: RewriteBuilder) -> Instruction | None:
        concat = inst.operands[0]
        partition = Partition.of(operands[0])
        piece = piece_of_slice(inst, partition)
        if piece is None:
            self.records.refused(self.comp.name, concat, "slice-within-one-piece",
                                 f"cannot forward %{inst.name} to a piece of %{concat.name}: "
                                 "it reads from several pieces", inst)
            return None
        source = operands[0].operands[piece]
        spec = slice_in_piece(inst, partition, source.shape.dims)
        result = source
        if spec is not None:  # the same slice, of the piece: it keeps its name
            result = dataclasses.replace(inst, operands=(source,), attrs={"slice": spec})
            builder.instructions.append(result)
        self.records.rewrote(self.comp.name, concat, "slice-forwarded",
                             f"%{inst.name} reads %{source.name} instead of %{concat.name}",
                             inst)
        return result

    def split(self, inst: Instruction, operands: tuple[Instruction, ...],
              builder: RewriteBuilder) -> Instruction | None:
        index = next((i for i, o in enumerate(operands)
                      if o.op is Op.CONCATENATE and o.shape.dims == inst.shape.dims), None)
        if index is None:
            return None
        concat, original = operands[index], inst.operands[index]
        partition = Partition.of(concat)
        if len(partition.sizes) > self.config.max_pieces:
            self.records.refused(self.comp.name, original, "too-many-pieces",
                                 f"not splitting %{inst.name} over %{original.name}: "
                                 f"{len(partition.sizes)} pieces (at most "
                                 f"{self.config.max_pieces})", inst,
                                 pieces=len(partition.sizes))
            return None
        if not self.gains(inst, original, partition):
            self.records.refused(self.comp.name, original, "split-gains-nothing",
                                 f"not splitting %{inst.name} over the pieces of "
                                 f"%{original.name}: the concatenate stays and no slice of "
                                 "the result reads a single piece", inst)
            return None
        pieces = []
        for piece, offset, size in zip(concat.operands, partition.offsets, partition.sizes):
            if not size:
                continue
            # A piece that is a reshape (CartPole's (N,) columns made (N, 1)) is worked on in
            # its operand's shape and reshaped after: element-wise ops do not care, and the
            # work then fuses with the other arrays of that shape.
            natural = piece.operands[0] if piece.op is Op.RESHAPE else piece
            parts = []
            for o in operands:
                if o is concat:
                    parts.append(natural)
                elif o.shape.dims == inst.shape.dims:
                    part = slice_along(o, partition.dim, offset, offset + size, builder)
                    parts.append(reshape_to(part, natural.shape.dims, builder))
                else:  # a scalar (a select's predicate, a clamp's bound) applies to every piece
                    parts.append(o)
            work = builder.add(inst.op, parts, attrs=dict(inst.attrs),
                               shape=Shape.array(inst.dtype, natural.shape.dims),
                               metadata=inst.metadata)
            pieces.append(reshape_to(work, piece.shape.dims, builder))
        result = builder.add(Op.CONCATENATE, pieces, attrs={"dimensions": (partition.dim,)},
                             metadata=inst.metadata)
        self.records.rewrote(self.comp.name, original, "elementwise-split",
                             f"split %{inst.name} over the {len(pieces)} pieces of "
                             f"%{original.name}", inst, pieces=len(pieces))
        return result

    def split_reduce(self, inst: Instruction, operands: tuple[Instruction, ...],
                     builder: RewriteBuilder) -> Instruction | None:
        concat, original = operands[0], inst.operands[0]
        partition = Partition.of(concat)
        refusal = reduce_refusal(inst, builder.callee(inst.calls[0]), partition,
                                 self.config.max_pieces)
        if refusal is not None:
            rule, reason = refusal
            self.records.refused(self.comp.name, original, rule,
                                 f"not splitting %{inst.name} over the pieces of "
                                 f"%{original.name}: {reason}", inst)
            return None
        op = reducer_op(builder.callee(inst.calls[0]))
        assert op is not None  # reduce_refusal checked it
        dims, init = inst.ints("dimensions"), operands[1]
        out_dims = inst.shape.dims
        # Reducing a piece whose reduced dimensions are all 1 wide is op(identity, x) = x.
        reads_as_is = is_identity(init, op)
        partials = []
        for piece, size in zip(concat.operands, partition.sizes):
            if not size:
                continue
            if reads_as_is and all(piece.shape.dims[d] == 1 for d in dims):
                partials.append(reshape_to(piece, out_dims, builder))
                continue
            partials.append(builder.add(Op.REDUCE, [piece, init], attrs=dict(inst.attrs),
                                        calls=[builder.callee(c) for c in inst.calls],
                                        metadata=inst.metadata))
        result = partials[0]
        for partial in partials[1:]:
            result = builder.add(op, [result, partial], metadata=inst.metadata)
        self.records.rewrote(self.comp.name, original, "reduce-split",
                             f"split %{inst.name} over the {len(partials)} pieces of "
                             f"%{original.name}, combined with {op.text}", inst,
                             pieces=len(partials))
        return result

    def gains(self, inst: Instruction, concat: Instruction, partition: Partition) -> bool:
        """Whether the concatenate goes away, or a slice of `inst` will read one piece."""
        if len([s for s in partition.sizes if s]) < 2:
            return False
        if all(self.consumes_pieces(user, concat, partition) for user in self.users[concat]):
            return True
        return any(u.op is Op.SLICE and piece_of_slice(u, partition) is not None
                   for u in self.users[inst])

    def consumes_pieces(self, user: Instruction, concat: Instruction,
                        partition: Partition) -> bool:
        if user.op is Op.SLICE:
            return piece_of_slice(user, partition) is not None
        if user.op is Op.REDUCE:
            return user.operands[0] is concat and reduce_refusal(
                user, user.calls[0], partition, self.config.max_pieces) is None
        return user.op in ELEMENTWISE_OPS and user.shape.dims == concat.shape.dims


def reduce_refusal(reduce: Instruction, reducer: Computation, partition: Partition,
                   max_pieces: int) -> tuple[str, str] | None:
    """(rule id, reason) when `reduce` of an array cut as `partition` cannot be done per
    piece; None when it can."""
    if partition.dim not in reduce.ints("dimensions"):
        return ("reduce-keeps-pieces",
                f"it keeps the concatenated dimension {partition.dim}, so each result element "
                "still comes from one piece")
    if len(partition.sizes) > max_pieces:
        return "too-many-pieces", f"{len(partition.sizes)} pieces (at most {max_pieces})"
    if not any(partition.sizes):
        return "empty-concatenate", "every piece is empty"
    return regrouping_refusal(reduce, reducer)
