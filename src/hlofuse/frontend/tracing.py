"""The tracing stack: traces under construction, instruction emission, source locations.

A `Trace` collects the instructions of one computation being traced (a jitted function, a loop
body, a branch). Traces nest: while a loop body is traced, its trace sits on top of the stack
above the trace of the function that contains the loop. A traced value of an enclosing trace
used inside a nested one is *captured*: the nested trace gets a parameter for it, and the
control-flow construct passes the value in (see staging.py). The stack is the only global
state of the front end.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from hlofuse.ir.attrs import Metadata
from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.hlo import Computation, Instruction
from hlofuse.ir.ops import Op
from hlofuse.ir.shape_inference.checks import ShapeError
from hlofuse.ir.shapes import Shape

# --- errors ---------------------------------------------------------------------------------


class TracerBoolConversionError(TypeError):
    """Python control flow (`if x > 0:`, `bool(x)`) on a traced value."""


class TracerIntegerConversionError(TypeError):
    """`int(x)`, `float(x)` or use as a Python index of a traced value."""


class TracerArrayConversionError(TypeError):
    """A traced value handed to NumPy (`np.sin(x)`, `np.asarray(x)`)."""


class UnexpectedTracerError(RuntimeError):
    """A traced value used after the trace that made it has finished."""


# --- source locations -----------------------------------------------------------------------

_FRONTEND_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_PACKAGE_DIR = os.path.dirname(_FRONTEND_DIR.rstrip(os.sep)) + os.sep
# hlofuse's own frames are skipped when looking for the user's line. envs/ is user code of
# hlofuse's own (CartPole), so its lines are the ones to report.
_INTERNAL_PREFIXES = (_FRONTEND_DIR, os.path.join(_PACKAGE_DIR, "ir") + os.sep,
                      os.path.join(_PACKAGE_DIR, "reference") + os.sep)
_INTERNAL_FILES = frozenset(os.path.join(_PACKAGE_DIR, f)
                            for f in ("api.py", "numpy.py", "lax.py", "random.py"))


def _is_internal(filename: str) -> bool:
    return filename.startswith(_INTERNAL_PREFIXES) or filename in _INTERNAL_FILES


def user_frame() -> tuple[str, int]:
    """(file, line) of the innermost frame outside hlofuse's front end."""
    frame = sys._getframe(1)
    last = frame
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_internal(filename):
            return filename, frame.f_lineno
        last = frame
        frame = frame.f_back  # type: ignore[assignment]
    return last.f_code.co_filename, last.f_lineno


def user_location() -> str:
    filename, line = user_frame()
    return f"{filename}:{line}"


def located(message: str) -> str:
    """`message` followed by the user's source line."""
    return f"{message} (at {user_location()})"


# --- traces ---------------------------------------------------------------------------------


class ModuleContext:
    """State shared by every trace of one module: names and reusable reducers."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.names = NameUniquer()  # instruction names, unique in the module
        self.computation_names = NameUniquer()
        self.reducers: dict[tuple[str, ...], Computation] = {}

    def computation_name(self, base: str) -> str:
        return self.computation_names.unique(base)


class Trace:
    """One computation being traced, as a draft: explicit parameters first, then captures.

    The draft's instructions are later cloned into their final computation (with the
    parameter convention the construct needs, e.g. one tuple parameter for a while body), so
    the draft uses private names.
    """

    def __init__(self, context: ModuleContext, parent: Trace | None, scope: str) -> None:
        self.context = context
        self.parent = parent
        self.scope = scope
        self.builder = ComputationBuilder("draft", NameUniquer())
        self.params: list[Instruction] = []
        self.captured: list[Instruction] = []  # instructions of the parent trace
        self.capture_params: list[Instruction] = []
        self._capture_index: dict[int, int] = {}
        self.name_scopes: list[str] = []
        self.is_open = False

    def new_parameter(self, shape: Shape) -> Instruction:
        if self.capture_params:
            raise RuntimeError("explicit parameters must be created before any capture")
        param = self.builder.parameter(len(self.params), shape)
        self.params.append(param)
        return param

    def has_ancestor(self, other: Trace) -> bool:
        trace: Trace | None = self.parent
        while trace is not None:
            if trace is other:
                return True
            trace = trace.parent
        return False

    def lift(self, instruction: Instruction, owner: Trace) -> Instruction:
        """`instruction` (made by trace `owner`) as an instruction of this trace."""
        if owner is self:
            return instruction
        if not owner.is_open or not self.has_ancestor(owner):
            raise UnexpectedTracerError(located(
                f"a traced value ({instruction.shape.text(False)}) from a trace that has "
                "finished was used: values computed inside a jitted function, loop body or "
                "branch exist only there; return them as outputs instead of storing them"))
        assert self.parent is not None
        outer = self.parent.lift(instruction, owner)
        index = self._capture_index.get(id(outer))
        if index is not None:
            return self.capture_params[index]
        number = len(self.params) + len(self.capture_params)
        param = self.builder.parameter(number, outer.shape)
        self._capture_index[id(outer)] = len(self.captured)
        self.captured.append(outer)
        self.capture_params.append(param)
        return param

    @property
    def all_params(self) -> list[Instruction]:
        return self.params + self.capture_params

    def metadata(self, op: Op) -> Metadata:
        filename, line = user_frame()
        op_name = "/".join([self.scope, *self.name_scopes, op.text])
        return Metadata.at(filename, line, op_name)

    def emit(self, op: Op, operands: Sequence[Instruction] = (), *,
             attrs: Mapping[str, object] | None = None, calls: Sequence[Computation] = (),
             shape: Shape | None = None) -> Instruction:
        try:
            return self.builder.add(op, operands, attrs=attrs, calls=calls, shape=shape,
                                    metadata=self.metadata(op))
        except ShapeError as e:
            raise ValueError(located(f"{op.text}: {e}")) from None


class _Traces(threading.local):
    """The stack of open traces, one per thread: `jit` may trace in several threads at once."""

    def __init__(self) -> None:
        self.stack: list[Trace] = []


_TRACES = _Traces()


@contextmanager
def active(trace: Trace) -> Iterator[Trace]:
    """Make `trace` the innermost trace while the block runs."""
    _TRACES.stack.append(trace)
    trace.is_open = True
    try:
        yield trace
    finally:
        trace.is_open = False
        popped = _TRACES.stack.pop()
        assert popped is trace


def current_trace() -> Trace:
    if not _TRACES.stack:
        raise RuntimeError("no trace is active")
    return _TRACES.stack[-1]


def is_tracing() -> bool:
    return bool(_TRACES.stack)


@contextmanager
def name_scope(name: str) -> Iterator[None]:
    """Prefix the op_name metadata of instructions emitted in the block (`jit(f)/uniform/...`)."""
    if not _TRACES.stack:
        yield
        return
    trace = _TRACES.stack[-1]
    trace.name_scopes.append(name)
    try:
        yield
    finally:
        trace.name_scopes.pop()
