"""How many times the elemental emitter would emit each fused instruction (XLA's
FusionNodeIndexingEvaluation), and the code-duplication rule built on it.

The emitter generates code for an instruction once per distinct index it is evaluated at. An
operand reached through a shape-preserving user (or a transpose, whose index is a permutation)
shares that user's indices; through any other shape-changing user it gets new ones. XLA
refuses a fusion when the producer would be emitted more than 15 times, or when the producer
is an op that starts a new basic block (concatenate, pad, reduce, ...) and would be emitted
more than once or has more than one user. The last clause is the 2022 rule that keeps a
bare concatenate with several users out of a fusion it is offered to; `relax_concatenate`
lifts it for concatenates only (the study's third variant).

Users are counted as XLA's `UserCount` does: a fusion user counts the users of the matching
parameter. A concatenate at the root of a fusion has no users inside it, so merging that
fusion into several users (the fusion merger, multi-output fusion) passes the check as long
as each user emits it once.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from hlofuse.fusion.graphs.graph import Node
from hlofuse.fusion.legality.properties import (
    ALLOWED_CODE_DUPLICATION,
    equal_ignoring_element_type,
)
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape


def real_user_count(node: Node) -> int:
    """Users of `node`, where a fusion counts as the users of the matching parameter."""
    count = 0
    for user in node.users:
        if user.is_fusion and node.parent is user.parent:
            count += len(user.fused_parameter(user.operand_index(node)).users)
        else:
            count += 1
    return count


def _indexed_alike(a: Shape, b: Shape) -> bool:
    """`equal_ignoring_element_type`, with the cases the evaluation meets most decided first:
    it compares an operand's shape with its user's for every fused instruction."""
    if a is b:
        return True
    if a.elements or b.elements:
        return equal_ignoring_element_type(a, b)
    if a.dims != b.dims:
        return False  # arrays (or empty tuples) of different dimensions
    return (a.layout == b.layout and a.is_tuple == b.is_tuple
            or equal_ignoring_element_type(a, b))


def invalidates_cache(node: Node, relax_concatenate: bool) -> bool:
    if relax_concatenate and node.op is Op.CONCATENATE:
        return False
    return node.op.definition.invalidates_cache


def too_high(node: Node, emitted: int, relax_concatenate: bool) -> bool:
    """Whether emitting `node` `emitted` times duplicates too much code."""
    return emitted > ALLOWED_CODE_DUPLICATION or (
        invalidates_cache(node, relax_concatenate)
        and (emitted > 1 or real_user_count(node) > 1))


class IndexingEvaluation:
    """Emission counts for the instructions of one fusion (and for its operands)."""

    def __init__(self, fusion: Node, relax_concatenate: bool = False) -> None:
        self.fusion = fusion
        self.relax_concatenate = relax_concatenate
        self.usage: dict[Node, int] = {fusion: 1}
        # Keys are fused instructions, or fusion operands standing for their parameters.
        self.indexing_users: dict[Node, set[Node]] = defaultdict(set)
        self.indexing_users[fusion.fused_root].add(fusion)
        usage = self.usage
        indexing_users = self.indexing_users
        fused = fusion.fused
        # A parameter's key is the fusion operand it stands for.
        keys: dict[Node, Node] = dict(zip(fused.params, fusion.operands, strict=True))
        parameter, transpose = Op.PARAMETER, Op.TRANSPOSE
        # `add_operand_users` inline: this loop runs for every instruction of every fusion
        # the merger and multi-output fusion are asked about.
        for inst in reversed(fused.post_order()):
            if inst.op is parameter:
                continue
            mine = indexing_users[inst]
            if len(mine) == 1:  # the common case, without a generator
                for user in mine:
                    usage[inst] = usage[user]
            else:
                usage[inst] = sum(usage[u] for u in mine)
            shape = inst.shape
            same_indexing = inst.op is transpose
            for operand in inst.operands:
                key = keys.get(operand, operand)
                operand_shape = operand.shape
                if same_indexing or operand_shape is shape or _indexed_alike(operand_shape,
                                                                             shape):
                    indexing_users[key] |= mine
                else:
                    indexing_users[key].add(inst)

    def add_operand_users(self, inst: Node) -> None:
        """Operands of `inst` are indexed by `inst`'s users (same shape) or by `inst`."""
        mine = self.indexing_users[inst]
        shape = inst.shape
        same_indexing = inst.op is Op.TRANSPOSE
        for operand in inst.operands:
            key = (self.fusion.operands[operand.parameter_number]
                   if operand.op is Op.PARAMETER else operand)
            if same_indexing or _indexed_alike(operand.shape, shape):
                self.indexing_users[key] |= mine
            else:
                self.indexing_users[key].add(inst)

    def emitted(self, producer: Node) -> int:
        """How often `producer` (an operand of the fusion) would be emitted once fused."""
        return sum(self.usage[u] for u in self.indexing_users.get(producer, ()))

    def invalidates_cache(self, node: Node) -> bool:
        return invalidates_cache(node, self.relax_concatenate)

    def too_high(self, node: Node, emitted: int) -> bool:
        return too_high(node, emitted, self.relax_concatenate)

    def worst(self, scale: int = 1) -> Culprit | None:
        """The first instruction that would be emitted too often, if any; with `scale`, as
        if the fusion's root were used `scale` times (every count is linear in that)."""
        for node, count in self.usage.items():
            if self.too_high(node, count * scale):
                return Culprit(node, count * scale, real_user_count(node))
        return None


@dataclass(frozen=True, slots=True)
class Culprit:
    """An instruction the fused emitter would duplicate too much, with the figures."""

    node: Node
    emitted: int
    users: int

    def describe(self) -> str:
        what = f"{self.node.op.text} %{self.node.name}"
        if self.emitted > ALLOWED_CODE_DUPLICATION:
            return (f"{what} would be emitted {self.emitted} times, over the limit of "
                    f"{ALLOWED_CODE_DUPLICATION}")
        uses = (f"has {self.users} users" if self.users > 1
                else f"would be read at {self.emitted} different indices")
        return (f"{what} {uses}; it starts a new basic block, so the fused emitter may emit it "
                "only once")

    def figures(self) -> dict[str, int | str]:
        return {"op": self.node.op.text, "instruction": self.node.name,
                "source_line": self.node.source_location or "", "emitted": self.emitted,
                "users": self.users, "limit": ALLOWED_CODE_DUPLICATION}


def cached_evaluation(fusion: Node, relax_concatenate: bool) -> IndexingEvaluation | None:
    cached = fusion.memo.get("indexing")
    if cached is None or cached[0] != fusion.fusion_key() + (int(relax_concatenate),):
        return None
    return cached[1]  # type: ignore[return-value]


def _store(fusion: Node, evaluation: IndexingEvaluation) -> None:
    fusion.memo["indexing"] = (fusion.fusion_key() + (int(evaluation.relax_concatenate),),
                               evaluation)


def indexing_evaluation(fusion: Node, relax_concatenate: bool = False) -> IndexingEvaluation:
    """The evaluation of `fusion` as it is now (cached until its body or operands change)."""
    evaluation = cached_evaluation(fusion, relax_concatenate)
    if evaluation is None:
        evaluation = IndexingEvaluation(fusion, relax_concatenate=relax_concatenate)
        _store(fusion, evaluation)
    return evaluation


def update_after_fusing(evaluation: IndexingEvaluation, producer: Node, clone: Node) -> None:
    """XLA's RemoveFusionOperand + UpdateEvaluationCache: `producer` was just cloned into the
    evaluated fusion as `clone`; account for it without recomputing everything."""
    fusion = evaluation.fusion
    users = evaluation.indexing_users.pop(producer, set())
    evaluation.indexing_users[clone] = users
    evaluation.usage[clone] = sum(evaluation.usage[u] for u in users)
    evaluation.add_operand_users(clone)
    _store(fusion, evaluation)


def fused_emitter_inefficient(consumer: Node, producer: Node,
                              relax_concatenate: bool = False) -> Culprit | None:
    """FusedIrEmitter::IsFusedIrEmitterInefficient: would merging `producer` into the fusion
    `consumer` duplicate too much code? Returns the instruction that would be duplicated."""
    if not consumer.is_fusion:
        return None
    emitted = emitted_in(consumer, producer)
    if not producer.is_fusion:
        if too_high(producer, emitted, relax_concatenate):
            return Culprit(producer, emitted, real_user_count(producer))
        return None
    # The producer's own evaluation, its root used as often as the consumer would emit it.
    return indexing_evaluation(producer, relax_concatenate).worst(emitted)


def emitted_in(fusion: Node, producer: Node) -> int:
    """`indexing_evaluation(fusion).emitted(producer)`, from the fusion's whole evaluation if
    one is cached, else counting only the instructions above the producer's parameter: the
    fusion merger and multi-output fusion ask a large fusion about one operand after each time
    it grew, and the part of it that operand reaches is small."""
    for relax_concatenate in (False, True):  # the knob does not change the counts
        evaluation = cached_evaluation(fusion, relax_concatenate)
        if evaluation is not None:
            return evaluation.emitted(producer)
    key = fusion.fusion_key()
    cached = fusion.memo.get("indexing_above")
    if cached is not None and cached[0] == key:
        counts = cached[1]
        assert isinstance(counts, _CountsAbove)
    else:
        counts = _CountsAbove(fusion)
        fusion.memo["indexing_above"] = (key, counts)
    return counts.emitted(producer)


class _CountsAbove:
    """The numbers `IndexingEvaluation` computes, for the instructions that some asked-about
    parameter reaches only (each instruction's numbers depend on its users' alone), kept
    until the fusion changes. The same definitions: the root is indexed by the fusion (used
    once); an operand is indexed by its user's indexing users when the user is a transpose or
    keeps the operand's shape, else by the user itself; an instruction is emitted once per
    use of each of its indexing users."""

    def __init__(self, fusion: Node) -> None:
        self.fusion = fusion
        self.indexing_users: dict[Node, set[Node]] = {}
        self.usage: dict[Node, int] = {fusion: 1}

    def emitted(self, producer: Node) -> int:
        users: set[Node] = set()
        params = self.fusion.fused.params
        for i, operand in enumerate(self.fusion.operands):
            if operand is producer:
                users |= self._indexing_users_of(params[i])
        return sum(self.usage[u] for u in users)

    def _indexing_users_of(self, start: Node) -> set[Node]:
        known = self.indexing_users
        if start in known:
            return known[start]
        usage = self.usage
        root = self.fusion.fused_root
        # Depth first through users: a node is finished after all of its users.
        entered = {start}
        stack = [(start, iter(start.users))]
        while stack:
            node, users = stack[-1]
            for user in users:
                if user not in known and user not in entered:
                    entered.add(user)
                    stack.append((user, iter(user.users)))
                    break
            else:
                stack.pop()
                is_parameter = node.op is Op.PARAMETER
                mine: set[Node] = {self.fusion} if node is root and not is_parameter else set()
                shape = node.shape
                for user in node.users:
                    if user.op is Op.TRANSPOSE or _indexed_alike(shape, user.shape):
                        mine |= known[user]
                    else:
                        mine.add(user)
                known[node] = mine
                if not is_parameter:
                    usage[node] = sum(usage[u] for u in mine)
        return known[start]
