"""Module -> HLO text, in the format XLA prints (as jax's `as_text(dialect="hlo")` emits it)."""

from __future__ import annotations

import numpy as np

from hlofuse.ir.attrs import ConvDimLabels, PaddingDim, SliceDim, Window, quote
from hlofuse.ir.hlo import Computation, Instruction, Module
from hlofuse.ir.ops import AttrType, Op
from hlofuse.ir.shapes import Shape


def shape_text(shape: Shape) -> str:
    """Like Shape.text, but with XLA's `/*index=N*/` markers in long tuples."""
    if not shape.is_tuple:
        return shape.text()
    parts = []
    for i, element in enumerate(shape.elements):
        marker = f"/*index={i}*/" if i and i % 5 == 0 else ""
        parts.append(marker + shape_text(element))
    return "(" + ", ".join(parts) + ")"


def format_scalar(value: object, dtype: np.dtype) -> str:
    if dtype == np.bool_:
        return "true" if bool(value) else "false"
    if dtype.kind in "iu":
        return str(int(value))  # type: ignore[call-overload]
    number = float(value)  # type: ignore[arg-type]
    if np.isnan(number):
        return "-nan" if np.signbit(number) else "nan"  # XLA keeps the sign of a NaN
    if np.isinf(number):
        return "inf" if number > 0 else "-inf"
    if number == int(number) and abs(number) < 1e16:
        return ("-" if np.signbit(number) else "") + str(abs(int(number)))
    if dtype.name == "bfloat16":
        return repr(number)  # exact in double; parsing rounds back to the same bf16
    return str(dtype.type(value))  # NumPy prints the shortest text that reads back exactly


def literal_text(literal: np.ndarray) -> str:
    if literal.ndim == 0:
        return format_scalar(literal[()], literal.dtype)
    if literal.ndim == 1:
        return "{" + ", ".join(format_scalar(v, literal.dtype) for v in literal) + "}"
    return "{ " + ", ".join(literal_text(sub) for sub in literal) + " }"


def attr_value_text(kind: AttrType, value: object) -> str:
    if kind is AttrType.INTS:
        assert isinstance(value, tuple)
        return "{" + ",".join(str(v) for v in value) + "}"
    if kind is AttrType.SLICE:
        assert isinstance(value, tuple)
        return "{" + ", ".join(s.text() for s in value if isinstance(s, SliceDim)) + "}"
    if kind is AttrType.PADDING:
        assert isinstance(value, tuple)
        return "x".join(p.text() for p in value if isinstance(p, PaddingDim))
    if kind is AttrType.WINDOW:
        assert isinstance(value, Window)
        return value.text()
    if kind is AttrType.DIM_LABELS:
        assert isinstance(value, ConvDimLabels)
        return value.text()
    if kind is AttrType.STRING:
        assert isinstance(value, str)
        return quote(value)
    if kind is AttrType.BOOL:
        return "true" if value else "false"
    return str(value)


def _call_attrs_text(instruction: Instruction) -> list[str]:
    names = instruction.definition.call_attrs
    if not names:
        return []
    if names == ("branch_computations*",):
        calls = instruction.calls
        if instruction.operands[0].shape.dtype.is_pred and len(calls) == 2:
            return [f"true_computation={calls[0].name}", f"false_computation={calls[1].name}"]
        return ["branch_computations={" + ", ".join(c.name for c in calls) + "}"]
    return [f"{key}={comp.name}" for key, comp in zip(names, instruction.calls)]


def instruction_text(instruction: Instruction, is_root: bool = False) -> str:
    op = instruction.op
    if op is Op.PARAMETER:
        inside = str(instruction.parameter_number)
    elif op is Op.CONSTANT:
        literal = instruction.attrs["literal"]
        assert isinstance(literal, np.ndarray)
        inside = literal_text(literal)
    else:
        inside = ", ".join(o.name for o in instruction.operands)
    parts = [f"{op.text}({inside})"]
    for key, spec in instruction.definition.attrs.items():
        if key in instruction.attrs:
            parts.append(f"{key}={attr_value_text(spec.type, instruction.attrs[key])}")
    parts += _call_attrs_text(instruction)
    if instruction.metadata is not None and instruction.metadata.fields:
        parts.append(f"metadata={instruction.metadata.text()}")
    parts += [f"{key}={raw.text}" for key, raw in instruction.extra]
    prefix = "ROOT " if is_root else ""
    return f"{prefix}{instruction.name} = {shape_text(instruction.shape)} " + ", ".join(parts)


def computation_text(computation: Computation, is_entry: bool = False) -> str:
    header = ("ENTRY " if is_entry else "") + computation.name + " {"
    lines = [header]
    for instruction in computation.instructions:
        lines.append("  " + instruction_text(instruction, instruction is computation.root))
    lines.append("}")
    return "\n".join(lines)


def entry_layout_text(module: Module) -> str:
    # The parameter list carries `/*index=N*/` markers like a tuple shape, as XLA prints it.
    params = shape_text(Shape.tuple_of(module.parameter_shapes))
    return "{" + params + "->" + shape_text(module.result_shape) + "}"


def module_text(module: Module) -> str:
    """The whole module as HLO text, callees before callers, ENTRY last."""
    header = f"HloModule {module.name}, entry_computation_layout={entry_layout_text(module)}"
    blocks = [header]
    for table, entries in module.debug_tables:
        blocks.append("\n".join([table] + [f"{i} {text}" for i, text in entries]))
    for comp in module.computations:
        blocks.append(computation_text(comp, comp is module.entry))
    return "\n\n".join(blocks) + "\n"
