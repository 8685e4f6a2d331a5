"""The module's C source: header, kernels, their exported entries and the driver.

The driver is one C function that runs the thunk tree: kernels in schedule order, copies,
while loops and conditionals, so an execution is one call from Python and launching a kernel
costs a C function call (as XLA's CPU backend once ran its thunks). A while loop whose trip
count is known (XLA's `known_trip_count` backend_config) is a counted loop that never runs
its condition. Identical kernels (the same body, e.g. from a computation called twice) share
one function, named after the first kernel's HLO instruction. The driver is built as codegen
IR (codegen/cir.py) and printed by the language like the kernels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hlofuse.codegen import cir, mathlib, templates
from hlofuse.codegen.cir import Expr, Stmt
from hlofuse.codegen.kernel_spec import EmittedKernel, sanitize
from hlofuse.codegen.language import CLanguage
from hlofuse.codegen.linalg import LINALG_DECLARATIONS
from hlofuse.codegen.naming import Names
from hlofuse.ir.dtypes import DType
from hlofuse.runtime.buffers import Assignment
from hlofuse.runtime.program import (
    Buffer,
    BufferKind,
    ConditionalThunk,
    CopyThunk,
    KernelThunk,
    Program,
    Thunk,
    WhileThunk,
)

PART_SIZE = 100  # thunks per driver function
_DOT_TAGS = ("f32", "f64", "u8", "u16", "u32", "u64", "pred")
LIBRARY_DECLARATIONS = "\n".join(
    [f"void hlofuse_rt_dot_{tag}(const void *, const void *, void *, int64_t, int64_t, "
     "int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);"
     for tag in _DOT_TAGS]
    + ["void hlofuse_rt_threefry2x32(const void *, const void *, const void *, const void *, "
       "void *, void *, int64_t);", LINALG_DECLARATIONS])
MATH_HEADER = "hlofuse_math.h"
_DRIVER_ARGUMENTS = tuple(cir.Var(n) for n in ("params", "outs", "arena", "consts", "prof"))


@dataclass(frozen=True)
class KernelFunction:
    """A C function shared by the kernel thunks whose kernels are identical."""

    name: str
    parameter_types: tuple[str, ...]
    comment: str


@dataclass(frozen=True)
class ModuleSource:
    text: str  # what the compiler gets: the header and the math library included whole
    functions: tuple[KernelFunction, ...]
    function_of: Mapping[int, KernelFunction]  # id(kernel thunk) -> its function
    listing: str = ""  # for reading: the kernels first, the headers included by name
    # The same module as two translation units, where it has both small (-O1) kernels and
    # others: the others with the driver, then the small kernels, which the driver calls
    # through prototypes (runtime/executable.py compiles the small ones with other flags).
    split: tuple[str, str] | None = None
    small_code_bytes: int = 0  # how much of `text` the small kernels' code is


def cast_type(parameter_type: str, lang: CLanguage) -> str:
    return parameter_type.replace(lang.restrict, "").rstrip()


def module_source(program: Program, emitted: Mapping[int, EmittedKernel],
                  assignment: Assignment, constant_offsets: list[int], lang: CLanguage,
                  what: str) -> ModuleSource:
    functions: dict[str, KernelFunction] = {}
    definitions: list[str] = []
    small: list[bool] = []  # per function
    function_of: dict[int, KernelFunction] = {}
    names = Names()
    for thunk in program.kernel_thunks():
        kernel = emitted[id(thunk)]
        key = kernel.code
        function = functions.get(key)
        if function is None:
            name = names.unique(thunk.spec.label)
            names.reserve(*(f"{name}_part{k}" for k in range(kernel.part_count)))
            function = KernelFunction(name, kernel.parameter_types, kernel.comment)
            functions[key] = function
            definitions.append(kernel.definition.replace("$name", function.name))
            small.append(kernel.is_small)
        function_of[id(thunk)] = function
    exports = [_exported(f, lang) for f in functions.values()]
    driver = _Driver(assignment, constant_offsets, function_of, lang)
    body = driver.thunks(program.thunks)
    run = cir.Function(
        "hlofuse_run", _driver_parameters(), [
            cir.ExprStmt(cir.Var(lang.ftz_begin)), *body, cir.ExprStmt(cir.Var(lang.ftz_end)),
            cir.Return(cir.Int(0))],
        f"{lang.export_qualifier} {lang.small_kernel_attribute}",
        "Runs the whole module: kernels in schedule order, loops and conditionals in C. It "
        "only calls, so -O1 is as good as -O3 here and much quicker to compile.", "int")
    prototypes = "".join(templates.DRIVER_PART_PROTOTYPE.substitute(name=f"hlofuse_part{k}")
                         for k in range(len(driver.parts)))
    parts = "".join("\n" + lang.function(part) for part in driver.parts)
    driver_code = (templates.DRIVER_SUPPORT + prototypes + parts + "\n" + lang.function(run))
    code = "".join(definitions) + "".join(exports) + driver_code
    header = templates.HEADER.substitute(what=what, library_declarations=LIBRARY_DECLARATIONS,
                                         math_library=mathlib.header_text())
    listing = (f"/* Generated by hlofuse: {what}. The helpers (hlofuse compile --emit c-full "
               f"prints them) and the math library come first in the compiled file. */\n"
               f'#include "{MATH_HEADER}"\n' + code)
    split = None
    small_bytes = sum(len(d) for d, is_small in zip(definitions, small, strict=True) if is_small)
    if any(small) and not all(small):
        split = _split_units(header, list(functions.values()), definitions, exports, small,
                             driver_code, lang)
    return ModuleSource(header + code, tuple(functions.values()), function_of, listing, split,
                        small_bytes)


def _split_units(header: str, functions: list[KernelFunction], definitions: list[str],
                 exports: list[str], small: list[bool], driver_code: str,
                 lang: CLanguage) -> tuple[str, str]:
    """The module as two translation units: the other kernels and the driver, and the small
    kernels. A small kernel's functions (its parts too) lose `static`, so that the driver
    can call them from the first unit (still hidden: -fvisibility=hidden); every function
    name is unique in the module. The qualifier is our own text, nothing from the input."""
    external = lang.kernel_qualifier.removeprefix("static ")
    assert external != lang.kernel_qualifier and lang.part_qualifier == lang.kernel_qualifier
    main = [d for d, s in zip(definitions, small, strict=True) if not s]
    main += [e for e, s in zip(exports, small, strict=True) if not s]
    main += [_prototype(f) for f, s in zip(functions, small, strict=True) if s]
    rest = [d.replace(lang.kernel_qualifier, external)
            for d, s in zip(definitions, small, strict=True) if s]
    rest += [e for e, s in zip(exports, small, strict=True) if s]
    return header + "".join(main) + driver_code, header + "".join(rest)


def _prototype(function: KernelFunction) -> str:
    return f"void {function.name}({', '.join(function.parameter_types)});\n"


def _driver_parameters() -> list[cir.Parameter]:
    return [cir.Parameter("void *const *", "params"), cir.Parameter("void *const *", "outs"),
            cir.Parameter("char *", "arena"), cir.Parameter("const char *", "consts"),
            cir.Parameter("hlofuse_profile *", "prof")]


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
        self.parts: list[cir.Function] = []
        self.loops = 0

    def pointer(self, buffer: Buffer) -> Expr:
        storage = self.assignment.of(buffer)
        if storage.kind is BufferKind.TEMPORARY:
            return cir.Binary("+", cir.Var("arena"), cir.Int(storage.offset))
        if storage.kind is BufferKind.PARAMETER:
            return cir.Cast("char *", cir.load("params", cir.Int(storage.offset)))
        if storage.kind is BufferKind.OUTPUT:
            return cir.Cast("char *", cir.load("outs", cir.Int(storage.offset)))
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
            self.parts[k] = cir.Function(
                name, _driver_parameters(), body,
                f"{self.lang.part_qualifier} {self.lang.small_kernel_attribute}")
            calls.append(cir.ExprStmt(cir.Call(name, _DRIVER_ARGUMENTS)))
        return calls

    def timed(self, profile_id: int, call: Expr) -> Stmt:
        return cir.ExprStmt(cir.call("HLOFUSE_TIMED", cir.Int(profile_id), call))

    def thunk(self, thunk: Thunk) -> list[Stmt]:
        if isinstance(thunk, KernelThunk):
            function = self.function_of[id(thunk)]
            buffers = [*thunk.inputs, *thunk.outputs]
            arguments = tuple(cir.Cast(cast_type(t, self.lang), self.pointer(b))
                              for t, b in zip(function.parameter_types, buffers))
            return [cir.Comment(sanitize(thunk.spec.label)),
                    self.timed(thunk.profile_id, cir.Call(function.name, arguments))]
        if isinstance(thunk, CopyThunk):
            if id(thunk) in self.assignment.elided or thunk.source.nbytes == 0:
                return []
            copy = cir.call("memcpy", self.pointer(thunk.target), self.pointer(thunk.source),
                            cir.Int(thunk.source.nbytes))
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
        predicate = cir.Load(cir.Cast("const uint8_t *", self.pointer(thunk.predicate)),
                             (cir.Int(0),))
        stop = cir.If(cir.Unary("!", predicate), [cir.Break()])
        return cir.While(cir.Int(1), [comment, *self.thunks(thunk.condition), stop,
                                      *self.thunks(thunk.body)])

    def conditional(self, thunk: ConditionalThunk) -> Stmt:
        selector = self.pointer(thunk.selector)
        if thunk.selector.dtype is DType.PRED:
            flag = cir.Load(cir.Cast("const uint8_t *", selector), (cir.Int(0),))
            return cir.If(flag, self.thunks(thunk.branches[0]), self.thunks(thunk.branches[1]))
        branch = cir.Load(cir.Cast("const int32_t *", selector), (cir.Int(0),))
        return cir.Switch(branch, [self.thunks(b) for b in thunk.branches])
