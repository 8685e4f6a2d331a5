"""own-row-gather: a gather whose start index along one operand dimension is the position
along a dimension of its indices becomes a batched gather pairing the two dimensions.

`x[jnp.arange(n), a]` (a lane's own row of a per-lane table: the taken action's
log-probability, `q[arange(n), s]`) lowers to a gather whose index vector is the
concatenation of an iota over the lanes and `a`. Each lane then reads only its own row, but
only the iota's values say so; whole-loop fusion reads an instruction's pairing of lanes from
its batching dimensions (what `jax.vmap` of `x[a]` lowers to), so it refused such a loop as
reading other lanes' values. Rewritten, the iota component leaves the index vector and the
operand dimension becomes an operand batching dimension paired with the indices' dimension
the iota ran along. The result is the same element for element: XLA clamps a start index into
[0, dim - 1], which an iota over a dimension of the same size already lies in.

The position is recognised through broadcasts, reshapes that only add or drop unit
dimensions, integer converts to a type that holds every position (an iota past its own type's
range wraps, so it is not one), copies, and the select JAX wraps negative indices with
(`select(i < 0, i + n, i)`, never taken for an iota). Only a component held by a piece of its
own in a concatenation along the index vector dimension is taken out, and only while another
component remains (a gather with no index components left cannot be written with an implicit
index vector).

XLA's GPU pipeline goes the other way (BatchedGatherScatterNormalizer turns batching
dimensions into iota components, `fusion/xla_gpu/gather_scatter.py`), so this runs only with
whole-loop fusion (`+whole_loop`, `max`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.passes.decision_log import DecisionSink, RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching
from hlofuse.passes.simplify import scalar_constant


def position_dim(value: Instruction) -> int | None:
    """The dimension d with value[i] == i[d] at every index i, or None when not shown."""
    if not value.dtype.is_integer:
        return None
    op = value.op
    if op is Op.IOTA:
        dim = value.attrs["iota_dimension"]
        # An iota past its type's range wraps: its values are no longer the positions.
        return dim if isinstance(dim, int) and _holds(value, dim) else None
    if op is Op.COPY:
        return position_dim(value.operands[0])
    if op is Op.CONVERT:
        inner = position_dim(value.operands[0])
        return inner if inner is not None and _holds(value, inner) else None
    if op is Op.BROADCAST:
        inner = position_dim(value.operands[0])
        return None if inner is None else value.ints("dimensions")[inner]
    if op is Op.RESHAPE:
        return _reshaped_dim(value)
    if op is Op.SELECT:
        predicate, _, kept = value.operands
        inner = position_dim(kept)
        return inner if inner is not None and _tests_negative(predicate, kept) else None
    return None


def _holds(value: Instruction, dim: int) -> bool:
    """Whether `value`'s integer type holds every position along `dim`."""
    dtype: DType = value.dtype
    largest = value.shape.dims[dim] - 1
    return largest < 1 << (dtype.bits - 1 if dtype.is_signed_int else dtype.bits)


def _reshaped_dim(value: Instruction) -> int | None:
    source = value.operands[0]
    inner = position_dim(source)
    if inner is None or source.shape.dims[inner] == 1:
        return None
    before = [d for d, n in enumerate(source.shape.dims) if n != 1]
    after = [d for d, n in enumerate(value.shape.dims) if n != 1]
    if [source.shape.dims[d] for d in before] != [value.shape.dims[d] for d in after]:
        return None
    return after[before.index(inner)]


def _tests_negative(predicate: Instruction, x: Instruction) -> bool:
    """`predicate` is x < 0 (x compared with a zero constant, scalar or broadcast)."""
    if predicate.op is not Op.COMPARE or predicate.attrs.get("direction") != "LT":
        return False
    lhs, rhs = predicate.operands
    zero = scalar_constant(rhs)
    return lhs is x and zero is not None and int(zero) == 0


def own_row_gather(inst: Instruction, operands: tuple[Instruction, ...],
                   builder: RewriteBuilder) -> tuple[Instruction, str] | None:
    """The batched form of gather `inst` (over its rewritten `operands`) and what moved, or
    None when no index component is a position."""
    operand, indices = operands
    ivd = inst.attrs["index_vector_dim"]
    if not isinstance(ivd, int) or ivd >= indices.shape.rank or indices.op is not Op.CONCATENATE \
            or indices.ints("dimensions") != (ivd,):
        return None
    index_map = list(inst.ints("start_index_map"))
    collapsed = list(inst.ints("collapsed_slice_dims"))
    sizes = inst.ints("slice_sizes")
    operand_batching = list(inst.ints("operand_batching_dims"))
    indices_batching = list(inst.ints("start_indices_batching_dims"))
    pieces = list(indices.operands)
    if len(pieces) == 1:
        return None
    start = 0
    for k, piece in enumerate(pieces):
        width = piece.shape.dims[ivd]
        if width != 1:
            start += width
            continue
        d = index_map[start]
        j = position_dim(piece)
        if (j is None or j == ivd or j in indices_batching or d not in collapsed
                or sizes[d] != 1 or indices.shape.dims[j] != operand.shape.dims[d]):
            start += width
            continue
        rest = pieces[:k] + pieces[k + 1:]
        new_indices = rest[0] if len(rest) == 1 else builder.add(
            Op.CONCATENATE, rest, attrs={"dimensions": (ivd,)})
        pairs = sorted([*zip(operand_batching, indices_batching), (d, j)])
        attrs = dict(inst.attrs)
        attrs["start_index_map"] = tuple(index_map[:start] + index_map[start + 1:])
        attrs["collapsed_slice_dims"] = tuple(c for c in collapsed if c != d)
        attrs["operand_batching_dims"] = tuple(p[0] for p in pairs)
        attrs["start_indices_batching_dims"] = tuple(p[1] for p in pairs)
        # Sorted with the position leading says nothing of the order of what is left.
        attrs.pop("indices_are_sorted", None)
        with builder.metadata_of(inst):
            batched = builder.add(Op.GATHER, [operand, new_indices], attrs=attrs,
                                  shape=inst.shape, extra=inst.extra)
        return batched, (f"operand dimension {d} is read at the position along indices "
                         f"dimension {j} (%{piece.name})")
    return None


@dataclass(frozen=True, slots=True)
class OwnRowGather:
    """Rewrites gathers indexed by a position into batched gathers (module docstring)."""

    name: ClassVar[str] = "own-row-gather"

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def rewrite(inst: Instruction, operands: tuple[Instruction, ...],
                    builder: RewriteBuilder) -> Instruction | None:
            found = own_row_gather(inst, operands, builder)
            if found is None:
                return None
            batched, how = found
            records.rewrote(builder.name, inst, "position-index-batched",
                            f"%{inst.name} is a batched gather: {how}")
            return batched

        return rewrite_matching(module, lambda inst: inst.op is Op.GATHER, rewrite)
