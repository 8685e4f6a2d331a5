"""Graph surgery that creates and grows fusion instructions, as XLA's HloFusionInstruction does.

- `create_fusion(consumer, kind)`: wrap an instruction into a one-instruction fusion.
- `fuse_instruction(fusion, producer)`: clone an operand into the fusion (the producer stays if
  it has other users: that is duplication).
- `fuse_into_multi_output(fusion, other)`: clone a producer or sibling (plain or a fusion) in
  as extra outputs; its other users read get-tuple-elements of the fusion instead.
- `merge_fusion(consumer, producer)`: inline a producer fusion's body into a consumer fusion.

Parameter order follows XLA: parameters of remaining operands keep their order, operands that
a fused instruction adds are appended in the order they are met, root first.
"""

from __future__ import annotations

from collections.abc import Collection

from hlofuse.fusion.graphs.graph import Node
from hlofuse.ir.ops import FusionKind, Op
from hlofuse.ir.shapes import Shape


class _Parameters:
    """The fused parameters of one fusion, bound to its operands: the operands indexed once
    (a large fusion has hundreds, and a merged body binds each of its own). Valid while
    nothing else changes the fusion's operands."""

    def __init__(self, fusion: Node) -> None:
        self.fusion = fusion
        self.index: dict[Node, int] = {}
        for i, operand in enumerate(fusion.operands):
            self.index.setdefault(operand, i)

    def parameter_for(self, operand: Node) -> Node:
        """The fused parameter bound to `operand`, adding operand and parameter if needed."""
        fusion = self.fusion
        i = self.index.get(operand)
        if i is not None:
            return fusion.fused.params[i]
        param = fusion.fused.add_parameter(operand.shape)
        fusion.parent.append_operand(fusion, operand)
        self.index[operand] = len(fusion.operands) - 1
        return param


def _unbind_operand(fusion: Node, operand: Node, replacement: Node) -> None:
    """Uses of `operand`'s parameter now use `replacement` (inside); the operand goes."""
    index = fusion.operand_index(operand)
    fused = fusion.fused
    param = fused.params[index]
    fused.replace_uses(param, replacement)
    if fused.root is param:
        fused.root = replacement
    fused.remove_parameter(index)
    fusion.parent.remove_operand_at(fusion, index)


def create_fusion(consumer: Node, kind: FusionKind) -> Node:
    """XLA's CreateFusion + ReplaceInstruction: `consumer` becomes a one-instruction fusion."""
    graph = consumer.parent
    module = graph.module
    fused = module.add_graph("fused_computation", is_fusion=True)
    fusion = graph.add(Op.FUSION, (), consumer.shape, attrs={"kind": kind}, calls=[fused],
                       metadata=consumer.metadata, name=module.names.unique("fusion"))
    clone = fused.clone_into(consumer, ())
    parameter_for = _Parameters(fusion).parameter_for
    for operand in consumer.operands:
        fused.append_operand(clone, parameter_for(operand))
    fused.root = clone
    graph.replace_instruction(consumer, fusion)
    return fusion


def fuse_instruction(fusion: Node, producer: Node) -> Node:
    """Clone `producer` (an operand of `fusion`) into it; returns the clone."""
    fused = fusion.fused
    clone = fused.clone_into(producer, ())
    _unbind_operand(fusion, producer, clone)
    parameter_for = _Parameters(fusion).parameter_for
    for operand in producer.operands:
        fused.append_operand(clone, parameter_for(operand))
    return clone


def _set_outputs(fusion: Node, outputs: list[Node]) -> None:
    fused = fusion.fused
    old_root = fused.root
    shape = Shape.tuple_of([o.shape for o in outputs])
    root = fused.add(Op.TUPLE, outputs, shape, name=fusion.parent.module.names.unique("tuple"))
    fused.root = root
    if old_root.op is Op.TUPLE and not old_root.users:
        fused.remove(old_root)
    fusion.shape = shape


def _add_outputs(fusion: Node, new_outputs: list[Node]) -> int:
    """Append outputs to the fusion's root tuple; returns the index of the first new one.

    A fusion that was not multi-output yet gets a root tuple, and its users a
    get-tuple-element(0) of it."""
    graph = fusion.parent
    root = fusion.fused_root
    was_tuple = root.op is Op.TUPLE
    outputs = list(root.operands) if was_tuple else [root]
    first = len(outputs)
    old_shape = fusion.shape
    _set_outputs(fusion, outputs + new_outputs)
    if not was_tuple:
        gte = graph.add(Op.GET_TUPLE_ELEMENT, [fusion], old_shape, attrs={"index": 0},
                        name=graph.module.names.unique("get-tuple-element"))
        graph.replace_uses(fusion, gte, exclude=gte)
        if graph.root is fusion:
            graph.root = gte
    return first


def _redirect_to_outputs(fusion: Node, old: Node, first: int) -> None:
    """Users of `old` read outputs `first`, `first+1`, ... of `fusion` instead."""
    graph = fusion.parent
    names = graph.module.names
    if old.is_multi_output_fusion:
        for user in list(old.users):
            assert user.op is Op.GET_TUPLE_ELEMENT, f"%{user.name} reads a tuple directly"
            index = user.attrs["index"]
            assert isinstance(index, int)
            gte = graph.add(Op.GET_TUPLE_ELEMENT, [fusion], user.shape,
                            attrs={"index": first + index},
                            name=names.unique("get-tuple-element"))
            graph.replace_instruction(user, gte)
        return
    if not old.users and graph.root is not old:
        return
    gte = graph.add(Op.GET_TUPLE_ELEMENT, [fusion], old.shape, attrs={"index": first},
                    name=names.unique("get-tuple-element"))
    graph.replace_uses(old, gte)
    if graph.root is old:
        graph.root = gte


def _clone_body(fusion: Node, source: Node, take: bool = False) -> list[Node]:
    """Clone what `source` computes into `fusion`; returns the clones of its outputs.

    A plain instruction is one clone; a fusion contributes its whole fused body. Operands of
    `source` become (shared) parameters of `fusion`. With `take` (the caller removes the
    fusion `source` next, and nothing reads its body before), the body's instructions move
    into `fusion` instead of being copied: the same graph as the copies would make, without
    making them (merging a large fusion into its last user copied most of the passes'
    nodes)."""
    fused = fusion.fused
    parameter_for = _Parameters(fusion).parameter_for
    if not source.is_fusion:
        clone = fused.clone_into(source, ())
        for operand in source.operands:
            fused.append_operand(clone, parameter_for(operand))
        return [clone]
    body = source.fused
    order = body.post_order()
    for node in reversed(order):  # bind parameters root first, as XLA meets them
        for operand in node.operands:
            if operand.op is Op.PARAMETER:
                parameter_for(source.operands[operand.parameter_number])
    copies: dict[Node, Node] = {}
    if take:
        for node in order:
            if node.op is Op.PARAMETER:
                copies[node] = parameter_for(source.operands[node.parameter_number])
            else:
                copies[node] = fused.move_into(node, [copies[o] for o in node.operands])
        body.keep_parameters_only()
    else:
        for node in order:
            if node.op is Op.PARAMETER:
                copies[node] = parameter_for(source.operands[node.parameter_number])
            else:
                copies[node] = fused.clone_into(node, [copies[o] for o in node.operands])
    root = copies[body.root]
    if root.op is not Op.TUPLE:
        return [root]
    outputs = list(root.operands)
    if not root.users:
        fused.remove(root)
    return outputs


def fuse_into_multi_output(fusion: Node, producer: Node) -> None:
    """XLA's FuseInstructionIntoMultiOutput / MergeFusionInstructionIntoMultiOutput: `producer`
    (plain or a fusion) joins `fusion`, keeping its results available to its other users.
    The caller removes `producer`, which is left without users."""
    is_operand = producer in fusion.operands
    outputs = _clone_body(fusion, producer, take=True)
    if is_operand:
        assert len(outputs) == 1, "a multi-output producer cannot feed its consumer directly"
        _unbind_operand(fusion, producer, outputs[0])
    if not producer.users and producer.parent.root is not producer:
        return  # nobody else needs the producer's value: an ordinary fusion
    first = _add_outputs(fusion, outputs)
    _redirect_to_outputs(fusion, producer, first)


def merge_fusion(consumer: Node, producer: Node, last: bool = False) -> None:
    """XLA's MergeFusionInstruction: inline the fusion `producer` into the fusion `consumer`
    (which reads it); the producer stays for its other users. `last`: the caller removes the
    producer next (its body moves instead of being copied)."""
    outputs = _clone_body(consumer, producer, take=last)
    assert len(outputs) == 1, "merging a multi-output fusion"
    _unbind_operand(consumer, producer, outputs[0])


def absorb_operands(fusion: Node, members: Collection[Node]) -> None:
    """Fuse into `fusion` every operand in `members`, and then their operands in `members`,
    until none is left outside; an absorbed instruction left without users is removed."""
    graph = fusion.parent
    pending = True
    while pending:
        pending = False
        for operand in list(fusion.operands):
            if operand in members and operand.parent is graph:
                fuse_instruction(fusion, operand)
                if not operand.users and operand is not graph.root:
                    graph.remove(operand)
                pending = True
                break
