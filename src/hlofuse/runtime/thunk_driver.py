"""The driver: the thunk tree as one function of codegen IR, shared by the source targets.

Kernels run in schedule order, copies between buffers, while loops and conditionals as loops
and branches of the driver itself, so an execution is one call from Python. A while loop whose
trip count is known (XLA's `known_trip_count` backend_config) is a counted loop that never
runs its condition. Long runs of thunks go into parts of their own (compilers slow down badly
on huge functions). A target changes how a kernel is called, how bytes are copied and how a
flag is read back (`ThunkDriver`'s three hooks); the walk is the same for all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from hlofuse.codegen import cir
from hlofuse.codegen.cir import Expr, Stmt
from hlofuse.codegen.kernel_spec import sanitize
from hlofuse.codegen.language import Language
from hlofuse.ir.dtypes import DType
from hlofuse.runtime.buffers import Assignment
from hlofuse.runtime.lowering import KernelFunction
from hlofuse.runtime.program import (
    Buffer,
    BufferKind,
    ConditionalThunk,
    CopyThunk,
    KernelThunk,
    Thunk,
    WhileThunk,
)

PART_SIZE = 100  # thunks per driver function
_BYTES = cir.Pointer(cir.Special.BYTE)
DRIVER_ARGUMENTS = tuple(cir.Var(n) for n in ("params", "outs", "arena", "consts", "prof"))


def driver_parameters() -> list[cir.Parameter]:
    """The driver's (and each part's) parameters: the caller's arrays, the arena, the
    constant pool and the profile record (null when not profiling)."""
    arrays = cir.Pointer(cir.Pointer(cir.Special.VOID, fixed=True))
    role = cir.Role.DRIVER
    return [cir.Parameter(arrays, "params", role), cir.Parameter(arrays, "outs", role),
            cir.Parameter(cir.Pointer(cir.Special.BYTE), "arena", role),
            cir.Parameter(cir.Pointer(cir.Special.BYTE, const=True), "consts", role),
            cir.Parameter(cir.Pointer(cir.Special.PROFILE), "prof", role)]


def cast_type(parameter_type: cir.Type) -> cir.Type:
    """A kernel parameter's type without its restrict qualifier, for a cast."""
    if isinstance(parameter_type, cir.Pointer):
        return dataclasses.replace(parameter_type, restrict=False)
    return parameter_type


class ThunkDriver:
    """Builds the driver's statements for a thunk tree; `parts` collects the functions that
    long runs of thunks were moved into."""

    def __init__(self, assignment: Assignment, constant_offsets: list[int],
                 function_of: Mapping[int, KernelFunction], lang: Language) -> None:
        self.assignment = assignment
        self.constant_offsets = constant_offsets
        self.function_of = function_of
        self.lang = lang
        self.parts: list[cir.Function] = []
        self.loops = 0

    # --- the target's hooks ---------------------------------------------------------------

    def kernel_call(self, thunk: KernelThunk, function: KernelFunction,
                    arguments: tuple[Expr, ...]) -> Expr:
        """The call that runs one kernel on its buffers' pointers."""
        return cir.Call(function.name, arguments)

    def copy(self, target: Expr, source: Expr, size: int) -> Expr:
        return cir.call("memcpy", target, source, cir.Int(size))

    def read_scalar(self, pointer: Expr, dtype: DType) -> Expr:
        """The value of a pred or s32 scalar buffer (a loop's predicate, a branch index)."""
        return cir.Load(cir.Cast(cir.Pointer(dtype, const=True), pointer), (cir.Int(0),))

    # --- the walk ---------------------------------------------------------------------------

    def pointer(self, buffer: Buffer) -> Expr:
        storage = self.assignment.of(buffer)
        if storage.kind is BufferKind.TEMPORARY:
            return cir.Binary("+", cir.Var("arena"), cir.Int(storage.offset))
        if storage.kind is BufferKind.PARAMETER:
            return cir.Cast(_BYTES, cir.load("params", cir.Int(storage.offset)))
        if storage.kind is BufferKind.OUTPUT:
            return cir.Cast(_BYTES, cir.load("outs", cir.Int(storage.offset)))
        return cir.Binary("+", cir.Var("consts"),
                          cir.Int(self.constant_offsets[storage.offset]))

    def thunks(self, thunks: list[Thunk]) -> list[Stmt]:
        if len(thunks) <= PART_SIZE:
            return [s for t in thunks for s in self.thunk(t)]
        calls: list[Stmt] = []
        for start in range(0, len(thunks), PART_SIZE):
            k = len(self.parts)
            name = f"hlofuse_part{k}"
            # Reserve the slot: a loop inside may add parts of its own.
            self.parts.append(cir.Function(name, [], []))
            body = [s for t in thunks[start:start + PART_SIZE] for s in self.thunk(t)]
            self.parts[k] = cir.Function(name, driver_parameters(), body, cir.Linkage.PART,
                                         cir.Tuning.SMALL)
            calls.append(cir.ExprStmt(cir.Call(name, DRIVER_ARGUMENTS)))
        return calls

    def timed(self, profile_id: int, call: Expr) -> Stmt:
        return cir.ExprStmt(cir.call("HLOFUSE_TIMED", cir.Int(profile_id), call))

    def thunk(self, thunk: Thunk) -> list[Stmt]:
        if isinstance(thunk, KernelThunk):
            function = self.function_of[id(thunk)]
            buffers = [*thunk.inputs, *thunk.outputs]
            arguments = tuple(cir.Cast(cast_type(t), self.pointer(b))
                              for t, b in zip(function.parameter_types, buffers))
            return [cir.Comment(sanitize(thunk.spec.label)),
                    self.timed(thunk.profile_id, self.kernel_call(thunk, function, arguments))]
        if isinstance(thunk, CopyThunk):
            if id(thunk) in self.assignment.elided or thunk.source.nbytes == 0:
                return []
            copy = self.copy(self.pointer(thunk.target), self.pointer(thunk.source),
                             thunk.source.nbytes)
            return [self.timed(thunk.profile_id, copy)]
        if isinstance(thunk, WhileThunk):
            return [self.while_loop(thunk)]
        return [self.conditional(thunk)]

    def while_loop(self, thunk: WhileThunk) -> Stmt:
        comment = cir.Comment(f"while {sanitize(thunk.label)}")
        if thunk.trip_count is not None:
            # A counted loop: the condition computation is never run.
            var = f"trip{self.loops}"
            self.loops += 1
            return cir.For(var, cir.Int(0), cir.Int(thunk.trip_count),
                           [comment, *self.thunks(thunk.body)])
        predicate = self.read_scalar(self.pointer(thunk.predicate), DType.PRED)
        stop = cir.If(cir.Unary("!", predicate), [cir.Break()])
        return cir.While(cir.Int(1), [comment, *self.thunks(thunk.condition), stop,
                                      *self.thunks(thunk.body)])

    def conditional(self, thunk: ConditionalThunk) -> Stmt:
        selector = self.pointer(thunk.selector)
        if thunk.selector.dtype is DType.PRED:
            flag = self.read_scalar(selector, DType.PRED)
            return cir.If(flag, self.thunks(thunk.branches[0]), self.thunks(thunk.branches[1]))
        branch = self.read_scalar(selector, DType.S32)
        return cir.Switch(branch, [self.thunks(b) for b in thunk.branches])
