"""Staging traced Python functions out as computations and modules.

`trace_draft` runs a function on fresh parameters in a new trace nested in the current one and
records its outputs and the values it captured from enclosing traces. `clone_into` then copies
the instructions the outputs need (dead code is dropped) into the computation the construct
requires: the entry computation of a module, a while body with one tuple parameter, a branch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hlofuse.analysis.graph import post_order
from hlofuse.frontend import pytree
from hlofuse.frontend.dtype_rules import AbstractValue
from hlofuse.frontend.tracer import Tracer, is_array_like, to_tracer
from hlofuse.frontend.tracing import (
    ModuleContext,
    Trace,
    active,
    current_trace,
    located,
    user_frame,
)
from hlofuse.ir.attrs import Metadata
from hlofuse.ir.builder import ComputationBuilder
from hlofuse.ir.hlo import Instruction, Module, make_module
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape


@dataclass(frozen=True, slots=True)
class Draft:
    """A traced function before it becomes a computation."""

    trace: Trace
    outputs: tuple[Instruction, ...]
    out_avals: tuple[AbstractValue, ...]
    out_tree: pytree.TreeDef

    @property
    def captured(self) -> list[Instruction]:
        """Values of the enclosing trace the function uses, in capture-parameter order."""
        return self.trace.captured


def aval_shape(aval: AbstractValue) -> Shape:
    return Shape.array(aval.dtype, aval.shape)


def trace_draft(fn: Callable[[list[Tracer]], Any], in_avals: Sequence[AbstractValue],
                scope: str, what: str, context: ModuleContext | None = None) -> Draft:
    """Trace `fn(parameters)` in a new trace: nested in the current one, or, given a module
    context, the root trace of a new module. `what` names the function in errors."""
    parent: Trace | None = None
    if context is None:
        parent = current_trace()
        context = parent.context
    trace = Trace(context, parent, scope)
    with active(trace):
        params = [Tracer(trace, trace.new_parameter(aval_shape(a)), a.weak) for a in in_avals]
        out = fn(params)
        leaves, out_tree = pytree.flatten_with_paths(out)
        tracers = []
        for path, leaf in leaves:
            if not is_array_like(leaf):
                raise TypeError(located(f"{what} returned {type(leaf).__name__} at output"
                                        f"{path or ''}, which is not an array"))
            tracers.append(to_tracer(leaf, f"{what} output{path}"))
        outputs = tuple(trace.lift(t.instruction, t.trace) for t in tracers)
    avals = tuple(AbstractValue(o.shape.dims, o.dtype, t.weak) for o, t in zip(outputs, tracers))
    return Draft(trace, outputs, avals, out_tree)


def clone_into(builder: ComputationBuilder, draft: Draft,
               inputs: Sequence[Instruction]) -> list[Instruction]:
    """Copy what the draft's outputs need into `builder`; `inputs` replace its parameters
    (explicit ones, then captures). Returns the copied outputs."""
    params = draft.trace.all_params
    if len(inputs) != len(params):
        raise ValueError(f"draft takes {len(params)} inputs, got {len(inputs)}")
    mapping: dict[int, Instruction] = {id(p): x for p, x in zip(params, inputs)}
    live = {id(i) for i in post_order(draft.outputs)}
    for inst in draft.trace.builder.instructions:
        if inst.op is Op.PARAMETER or id(inst) not in live:
            continue
        mapping[id(inst)] = builder.add(
            inst.op, [mapping[id(o)] for o in inst.operands], attrs=inst.attrs,
            calls=inst.calls, shape=inst.shape, metadata=inst.metadata)
    return [mapping[id(o)] for o in draft.outputs]


def tuple_parameter(builder: ComputationBuilder,
                    shapes: Sequence[Shape]) -> list[Instruction]:
    """One tuple parameter and a get-tuple-element for each of its elements."""
    param = builder.parameter(0, Shape.tuple_of(list(shapes)))
    return [builder.add(Op.GET_TUPLE_ELEMENT, [param], attrs={"index": i})
            for i in range(len(shapes))]


def new_builder(base: str) -> ComputationBuilder:
    """A builder for a final computation of the module being traced."""
    context = current_trace().context
    builder = ComputationBuilder(context.computation_name(base), context.names)
    filename, line = user_frame()
    builder.metadata = Metadata.at(filename, line, f"{current_trace().scope}/{base}")
    return builder


@dataclass(frozen=True, slots=True)
class TracedModule:
    """A module traced from a Python function, with its calling convention."""

    module: Module
    in_tree: pytree.TreeDef
    in_avals: tuple[AbstractValue, ...]
    out_tree: pytree.TreeDef
    out_avals: tuple[AbstractValue, ...]


def trace_module(fn: Callable[..., Any], in_tree: pytree.TreeDef,
                 in_avals: Sequence[AbstractValue], name: str) -> TracedModule:
    """Trace `fn(*args, **kwargs)`, where `in_tree` unflattens to `(args, kwargs)`, on abstract
    arguments into a module with one parameter per array leaf."""
    context = ModuleContext(name)

    def call(params: list[Tracer]) -> Any:
        args, kwargs = in_tree.unflatten(params)
        return fn(*args, **kwargs)

    draft = trace_draft(call, in_avals, f"jit({name})", f"jit({name})", context)
    builder = ComputationBuilder(context.computation_name("main"), context.names)
    params = [builder.parameter(i, aval_shape(a)) for i, a in enumerate(in_avals)]
    outputs = clone_into(builder, draft, params)
    if len(outputs) == 1:
        root = outputs[0]
    else:
        root = builder.add(Op.TUPLE, outputs)
    entry = builder.build(root)
    module = make_module(f"jit_{_identifier(name)}", entry)
    return TracedModule(module, in_tree, tuple(in_avals), draft.out_tree, draft.out_avals)


def _identifier(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "fn"

