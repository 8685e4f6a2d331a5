"""The module's C source: header, kernels, their exported entries and the driver.

The driver is one C function that runs the thunk tree: kernels in schedule order, copies,
while loops and conditionals, so an execution is one call from Python and launching a kernel
costs a C function call (as XLA's CPU backend once ran its thunks). Identical kernels (the same
body, e.g. from a computation called twice) share one function.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hlofuse.codegen import mathlib, templates
from hlofuse.codegen.c_emitter import EmittedKernel, sanitize
from hlofuse.codegen.language import CLanguage
from hlofuse.ir.dtypes import DType
from hlofuse.runtime.buffers import Assignment
from hlofuse.runtime.program import (
    Buffer, BufferKind, ConditionalThunk, CopyThunk, KernelThunk, Program, Thunk, WhileThunk)

PART_SIZE = 100  # thunks per driver function
_DOT_TAGS = ("f32", "f64", "u8", "u16", "u32", "u64", "pred")
LIBRARY_DECLARATIONS = "\n".join(
    [f"void hlofuse_rt_dot_{tag}(const void *, const void *, void *, int64_t, int64_t, "
     "int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);"
     for tag in _DOT_TAGS]
    + ["void hlofuse_rt_threefry2x32(const void *, const void *, const void *, const void *, "
       "void *, void *, int64_t);"])


@dataclass(frozen=True)
class KernelFunction:
    """A C function shared by the kernel thunks whose kernels are identical."""

    name: str
    parameter_types: tuple[str, ...]
    comment: str


@dataclass(frozen=True)
class ModuleSource:
    text: str
    functions: tuple[KernelFunction, ...]
    function_of: Mapping[int, KernelFunction]  # id(kernel thunk) -> its function


def cast_type(parameter_type: str, lang: CLanguage) -> str:
    return parameter_type.replace(lang.restrict, "").rstrip()


def module_source(program: Program, emitted: Mapping[int, EmittedKernel],
                  assignment: Assignment, constant_offsets: list[int], lang: CLanguage,
                  what: str) -> ModuleSource:
    functions: dict[str, KernelFunction] = {}
    definitions: list[str] = []
    function_of: dict[int, KernelFunction] = {}
    for thunk in program.kernel_thunks():
        kernel = emitted[id(thunk)]
        key = kernel.definition.split("\n", 2)[2]
        function = functions.get(key)
        if function is None:
            function = KernelFunction(f"k{len(functions)}", kernel.parameter_types,
                                      kernel.comment)
            functions[key] = function
            definitions.append(kernel.definition.replace("$name", function.name))
        function_of[id(thunk)] = function
    exports = [_exported(f, lang) for f in functions.values()]
    driver = _Driver(assignment, constant_offsets, function_of, lang)
    body = driver.thunks(program.thunks, 1)
    text = (templates.HEADER.substitute(what=what, library_declarations=LIBRARY_DECLARATIONS,
                                        math_library=mathlib.header_text())
            + "".join(definitions) + "".join(exports) + templates.DRIVER_SUPPORT
            + "".join(templates.DRIVER_PART_PROTOTYPE.substitute(name=f"hlofuse_part{k}")
                      for k in range(len(driver.parts)))
            + "".join(driver.parts)
            + templates.DRIVER.substitute(export=lang.export_qualifier, body=body))
    return ModuleSource(text, tuple(functions.values()), function_of)


def _exported(function: KernelFunction, lang: CLanguage) -> str:
    arguments = ", ".join(f"({cast_type(t, lang)})args[{k}]"
                          for k, t in enumerate(function.parameter_types))
    return templates.EXPORTED_KERNEL.substitute(export=lang.export_qualifier,
                                                name=function.name, arguments=arguments)


class _Driver:
    def __init__(self, assignment: Assignment, constant_offsets: list[int],
                 function_of: Mapping[int, KernelFunction], lang: CLanguage) -> None:
        self.assignment = assignment
        self.constant_offsets = constant_offsets
        self.function_of = function_of
        self.lang = lang
        self.parts: list[str] = []

    def pointer(self, buffer: Buffer) -> str:
        storage = self.assignment.of(buffer)
        if storage.kind is BufferKind.TEMPORARY:
            return f"(arena + {storage.offset})"
        if storage.kind is BufferKind.PARAMETER:
            return f"((char *)params[{storage.offset}])"
        if storage.kind is BufferKind.OUTPUT:
            return f"((char *)outs[{storage.offset}])"
        return f"(consts + {self.constant_offsets[storage.offset]})"

    def thunks(self, thunks: list[Thunk], depth: int) -> str:
        if len(thunks) <= PART_SIZE:
            return "".join(self.thunk(t, depth) for t in thunks)
        calls = []
        for start in range(0, len(thunks), PART_SIZE):
            name = f"hlofuse_part{len(self.parts)}"
            self.parts.append("")  # reserve the name: a loop inside may add parts of its own
            body = "".join(self.thunk(t, 1) for t in thunks[start:start + PART_SIZE])
            self.parts[int(name[len("hlofuse_part"):])] = templates.DRIVER_PART.substitute(
                name=name, body=body)
            calls.append(f"{'  ' * depth}{name}(params, outs, arena, consts, prof);\n")
        return "".join(calls)

    def thunk(self, thunk: Thunk, depth: int) -> str:
        pad = "  " * depth
        if isinstance(thunk, KernelThunk):
            function = self.function_of[id(thunk)]
            buffers = [*thunk.inputs, *thunk.outputs]
            arguments = ", ".join(f"({cast_type(t, self.lang)}){self.pointer(b)}"
                                  for t, b in zip(function.parameter_types, buffers))
            return (f"{pad}HLOFUSE_TIMED({thunk.profile_id}, {function.name}({arguments}));"
                    f"  /* {_comment_name(thunk)} */\n")
        if isinstance(thunk, CopyThunk):
            if id(thunk) in self.assignment.elided or thunk.source.nbytes == 0:
                return ""
            return (f"{pad}HLOFUSE_TIMED({thunk.profile_id}, memcpy({self.pointer(thunk.target)}, "
                    f"{self.pointer(thunk.source)}, {thunk.source.nbytes}));\n")
        if isinstance(thunk, WhileThunk):
            predicate = f"*(const uint8_t *){self.pointer(thunk.predicate)}"
            return (f"{pad}for (;;) {{\n" + self.thunks(thunk.condition, depth + 1)
                    + f"{pad}  if (!{predicate}) break;\n"
                    + self.thunks(thunk.body, depth + 1) + f"{pad}}}\n")
        return self.conditional(thunk, depth)

    def conditional(self, thunk: ConditionalThunk, depth: int) -> str:
        pad = "  " * depth
        selector = self.pointer(thunk.selector)
        if thunk.selector.dtype is DType.PRED:
            return (f"{pad}if (*(const uint8_t *){selector}) {{\n"
                    + self.thunks(thunk.branches[0], depth + 1) + f"{pad}}} else {{\n"
                    + self.thunks(thunk.branches[1], depth + 1) + f"{pad}}}\n")
        out = [f"{pad}switch (*(const int32_t *){selector}) {{\n"]
        last = len(thunk.branches) - 1
        for k, branch in enumerate(thunk.branches):
            label = "default" if k == last else f"case {k}"
            out.append(f"{pad}  {label}: {{\n" + self.thunks(branch, depth + 2)
                       + f"{pad}  }} break;\n")
        out.append(f"{pad}}}\n")
        return "".join(out)


def _comment_name(thunk: KernelThunk) -> str:
    return sanitize(thunk.spec.label)
