"""The types and roles of the kernel IR (`cir.py`): target-neutral, spelled by a language.

An element type is an hlofuse `DType` as it lies in memory (a language says which dtype holds
a value while a kernel computes, and how each type is spelled); a `Pointer` to one; or one of
the few `Special` types a kernel needs beside them. `Role`, `Linkage` and `Tuning` say what a
kernel's argument and a function are, so that no target reads them from names or text.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from hlofuse.ir.dtypes import DType


class Special(enum.Enum):
    """The types of generated code that are not element types."""

    VOID = "void"
    BYTE = "byte"  # raw memory: byte offsets into the arena and the caller's arrays
    INT = "int"  # the target's natural signed int: loop counters that vectorise best
    PROFILE = "profile"  # the runtime's profile record (per-kernel times)


@dataclass(frozen=True, slots=True)
class Pointer:
    """A pointer to `element`s: `const` elements are only read; `restrict`: no other pointer
    of the function reaches them; `fixed`: the pointer itself is never reassigned."""

    element: Type
    const: bool = False
    restrict: bool = False
    fixed: bool = False


Type = DType | Pointer | Special

INDEX = DType.S64  # the type of loop counters and element positions


class Role(enum.Enum):
    """What a kernel does with an array argument."""

    INPUT = "input"  # read only
    OUTPUT = "output"  # written, not read before
    IN_PLACE = "in-place"  # an output that may share its buffer with an input (read first)
    SCRATCH = "scratch"  # the kernel's own memory (an `Allocate`), passed to a part of it
    SCALAR = "scalar"  # not an array: a bound or value passed to a part
    DRIVER = "driver"  # the driver's own arguments (the caller's arrays, the arena)


class Linkage(enum.Enum):
    """What a function is to the module: a language gives each its qualifiers."""

    KERNEL = "kernel"  # the function a kernel thunk calls (device code on a GPU)
    PART = "part"  # a function a kernel or the driver calls
    ENTRY = "entry"  # the module's exported entry point
    HOST = "host"  # host code of a target whose kernels run on a device (its driver)


class Tuning(enum.Enum):
    """How a target's compiler should treat a function (a language spells it, or ignores it)."""

    SMALL = "small"  # little work: compile it quickly rather than well
    RUN_ONCE = "run-once"  # little work in all, run once a run: compile it as quickly as may be
    VECTOR_LOOPS = "vector-loops"  # loops that should vectorise
    WHOLE_LOOP = "whole-loop"  # a whole loop's long simd lane loops
