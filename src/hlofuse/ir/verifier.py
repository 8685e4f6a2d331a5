"""Structural and type invariants of a module; a failure names the instruction and the rule."""

from __future__ import annotations

import dataclasses

from hlofuse.ir.attrs import ConvDimLabels, Window
from hlofuse.ir.builder import infer_shape
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.limits import Limits, ResourceLimitError, check_limits
from hlofuse.ir.linalg import check_call
from hlofuse.ir.ops import DECLARED_SHAPE_OPS, AttrType, Op
from hlofuse.ir.shape_inference.checks import ShapeError
from hlofuse.ir.shapes import Shape


class HloVerifyError(ValueError):
    """An invalid module; `instruction` and `rule` say where and why."""

    def __init__(self, message: str, instruction: str | None, rule: str,
                 computation: str | None = None) -> None:
        self.instruction = instruction
        self.rule = rule
        self.computation = computation
        where = f"%{instruction}" if instruction else f"computation %{computation}"
        if instruction and computation:
            where += f" in %{computation}"
        super().__init__(f"{where}: {message} [{rule}]")


_TYPE_CHECKS = {
    AttrType.INT: lambda v: isinstance(v, int) and not isinstance(v, bool),
    AttrType.INTS: lambda v: isinstance(v, tuple) and all(isinstance(x, int) for x in v),
    AttrType.STRING: lambda v: isinstance(v, str),
    AttrType.ENUM: lambda v: isinstance(v, str),
    AttrType.BOOL: lambda v: isinstance(v, bool),
    AttrType.SLICE: lambda v: isinstance(v, tuple),
    AttrType.PADDING: lambda v: isinstance(v, tuple),
    AttrType.WINDOW: lambda v: isinstance(v, Window),
    AttrType.DIM_LABELS: lambda v: isinstance(v, ConvDimLabels),
}


# Attributes the text writes inside the parentheses rather than as `key=value`.
_INTERNAL_ATTRS: dict[Op, set[str]] = {Op.CONSTANT: {"literal"}, Op.PARAMETER: {"parameter_number"}}


def verify(module: Module, max_buffer_bytes: int | None = None,
           limits: Limits | None = None) -> None:
    """Raise HloVerifyError on the first broken invariant; the resource limits (`limits`,
    default `Limits.from_env()`; `max_buffer_bytes` overrides its buffer cap) come first."""
    limits = limits if limits is not None else Limits.from_env()
    if max_buffer_bytes is not None:
        limits = dataclasses.replace(limits, max_buffer_bytes=max_buffer_bytes)
    try:
        # Buffers are checked per instruction below, with the verifier's own rule name.
        check_limits(module, limits, buffers=False)
    except ResourceLimitError as e:
        raise HloVerifyError(str(e), e.instruction, "resource-limit",
                             e.computation or module.entry.name) from None
    max_buffer_bytes = limits.max_buffer_bytes
    names: dict[str, str] = {}
    comp_names: set[str] = set()
    known = {id(c) for c in module.computations}
    inferred_before: dict[tuple[object, ...], Shape] = {}
    sizes_checked: set[tuple[object, ...]] = set()
    if id(module.entry) not in known:
        raise HloVerifyError("entry computation is not in the module", None, "entry-in-module",
                             module.entry.name)
    for comp in module.computations:
        if comp.name in comp_names:
            raise HloVerifyError("duplicate computation name", None, "unique-names", comp.name)
        comp_names.add(comp.name)
        _verify_computation(comp, names, known, max_buffer_bytes, inferred_before,
                            sizes_checked)
    _verify_no_recursion(module)


def _verify_computation(comp: Computation, names: dict[str, str], known: set[int],
                        max_buffer_bytes: int,
                        inferred_before: dict[tuple[object, ...], Shape],
                        sizes_checked: set[tuple[object, ...]]) -> None:
    defined: set[int] = set()
    numbers: list[int] = []
    instructions = comp.instructions
    root = comp.root
    # The root is usually the last instruction: the walk over all of them is the exception.
    if not (instructions and instructions[-1] is root) and \
            not any(i is root for i in instructions):
        raise HloVerifyError("root is not one of the computation's instructions", comp.root.name,
                             "root-in-computation", comp.name)
    for inst in instructions:
        if inst.name in names:
            raise HloVerifyError(f"name also used in %{names[inst.name]}", inst.name,
                                 "unique-names", comp.name)
        names[inst.name] = comp.name
        for operand in inst.operands:
            if id(operand) not in defined:
                raise HloVerifyError(f"operand %{operand.name} is not defined before its use "
                                     "(or is in another computation)", inst.name,
                                     "defined-before-use", comp.name)
        for callee in inst.calls:
            if id(callee) not in known:
                raise HloVerifyError(f"calls %{callee.name}, which is not in the module",
                                     inst.name, "callee-in-module", comp.name)
        _verify_instruction(inst, comp, max_buffer_bytes, inferred_before, sizes_checked)
        if inst.op is Op.PARAMETER:
            numbers.append(inst.parameter_number)
        defined.add(id(inst))
    if sorted(numbers) != list(range(len(numbers))):
        raise HloVerifyError(f"parameter numbers {sorted(numbers)} are not 0..{len(numbers) - 1}",
                             None, "parameter-numbers", comp.name)


def _verify_instruction(inst: Instruction, comp: Computation, max_buffer_bytes: int,
                        inferred_before: dict[tuple[object, ...], Shape],
                        sizes_checked: set[tuple[object, ...]]) -> None:
    definition = inst.definition
    count = len(inst.operands)
    attrs = inst.attrs
    number = attrs.get("parameter_number")
    if inst.op is Op.PARAMETER and (not isinstance(number, int) or isinstance(number, bool)
                                    or number < 0):
        raise HloVerifyError(f"parameter needs a parameter_number >= 0, has {number!r}",
                             inst.name, "attribute-schema", comp.name)
    if definition.arity is not None and count != definition.arity:
        raise HloVerifyError(f"{inst.op.text} takes {definition.arity} operand(s), has {count}",
                             inst.name, "operand-count", comp.name)
    if definition.arity is None and count < definition.min_arity:
        raise HloVerifyError(f"{inst.op.text} takes at least {definition.min_arity} operand(s), "
                             f"has {count}", inst.name, "operand-count", comp.name)
    # Attributes outside the schema would silently vanish when the module is printed.
    unknown = (set(attrs) - set(definition.attrs) - _INTERNAL_ATTRS.get(inst.op, set())
               if attrs else ())
    if unknown:
        raise HloVerifyError(f"{inst.op.text} has no attribute {sorted(unknown)[0]}=", inst.name,
                             "attribute-schema", comp.name)
    for key, spec in definition.attrs.items():
        if key not in inst.attrs:
            if spec.required:
                raise HloVerifyError(f"missing attribute {key}=", inst.name, "attribute-schema",
                                     comp.name)
            continue
        value = inst.attrs[key]
        if not _TYPE_CHECKS[spec.type](value) or (spec.choices and value not in spec.choices):
            raise HloVerifyError(f"bad value {value!r} for {key}=", inst.name,
                                 "attribute-schema", comp.name)
    expected_calls = definition.call_attrs
    if expected_calls and expected_calls != ("branch_computations*",):
        if len(inst.calls) != len(expected_calls):
            raise HloVerifyError(f"needs {len(expected_calls)} called computation(s), has "
                                 f"{len(inst.calls)}", inst.name, "called-computations",
                                 comp.name)
    shape = inst.shape
    declared = shape if inst.op in DECLARED_SHAPE_OPS else None
    operand_shapes = [o.shape for o in inst.operands]
    # Most instructions of a large module are attribute-free element-wise ops on a few
    # shapes: their inferred shape is looked up (a failure is not, and raises below). The
    # key spells each operand shape by the fields Shape compares (tuples hash without a call
    # into Python).
    plain = declared is None and not attrs and not inst.calls
    inferred_key: tuple[object, ...] = (
        (inst.op, *[(s.dtype, s.dims, s.elements) for s in operand_shapes]) if plain else ())
    inferred = inferred_before.get(inferred_key) if plain else None
    if inferred is None:
        try:
            inferred = infer_shape(inst.op, operand_shapes, attrs, inst.calls, declared)
        except ShapeError as e:
            raise HloVerifyError(str(e), inst.name, "shape-inference", comp.name) from None
        if plain:
            inferred_before[inferred_key] = inferred
    if inferred is not shape and (inferred.dtype, inferred.dims, inferred.elements) != (
            shape.dtype, shape.dims, shape.elements):
        raise HloVerifyError(f"shape is {inst.shape.text(False)} but {inst.op.text} of these "
                             f"operands gives {inferred.text(False)}", inst.name, "shape-inference",
                             comp.name)
    if inst.op is Op.CUSTOM_CALL:
        try:
            check_call(inst)  # a library call's backend_config (ir/linalg.py)
        except ValueError as e:
            raise HloVerifyError(str(e), inst.name, "custom-call-config", comp.name) from None
    # Shapes repeat across a module: each is measured against the cap once.
    measured = (shape.dtype, shape.dims, shape.elements)
    if measured in sizes_checked:
        return
    for leaf in shape.leaves():
        if leaf.byte_size > max_buffer_bytes:
            raise HloVerifyError(f"buffer of {leaf.byte_size} bytes is above the cap of "
                                 f"{max_buffer_bytes} (max_buffer_bytes; to raise it set "
                                 "$HLOFUSE_MAX_BUFFER_BYTES or pass limits=Limits("
                                 "max_buffer_bytes=...))", inst.name, "buffer-size", comp.name)
    sizes_checked.add(measured)


def _verify_no_recursion(module: Module) -> None:
    state: dict[int, int] = {}

    def visit(comp: Computation) -> None:
        stack = [(comp, iter(list(comp.called_computations)))]
        state[id(comp)] = 1
        while stack:
            current, callees = stack[-1]
            callee = next(callees, None)
            if callee is None:
                state[id(current)] = 2
                stack.pop()
                continue
            mark = state.get(id(callee))
            if mark == 1:
                raise HloVerifyError(f"calls %{callee.name} recursively", None,
                                     "no-recursion", current.name)
            if mark is None:
                state[id(callee)] = 1
                stack.append((callee, iter(list(callee.called_computations))))

    for comp in module.computations:
        if id(comp) not in state:
            visit(comp)
