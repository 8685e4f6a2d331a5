"""The C + OpenMP language: type spellings, literals, and the printer of the codegen IR (cir.py).

Emitters build `cir` nodes typed by hlofuse dtypes and ask a `Language` (codegen/language.py)
only for decisions and names (register types, math functions); this table spells every type
and prints every expression, statement, loop header and pragma, so the CUDA language can
replace fields and printing rules without touching an emitter.

Values live in "register" form while a kernel computes: f16 and bf16 are held as `float`
(already rounded to their precision), pred as a 0/1 `uint8_t`. Memory holds the "storage"
form: f16 and bf16 as their 16 bits.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

import numpy as np

from hlofuse.codegen import cir
from hlofuse.codegen.cir import Expr
from hlofuse.codegen.cir_walks import calls_to, longest_straight_run, repeats_a_selected_literal
from hlofuse.codegen.language import literal, literal_float
from hlofuse.ir.dtypes import DType

# The spelling of every type of the kernel IR; an element type as it lies in memory.
_TYPE_NAMES: Mapping[cir.Type, str] = MappingProxyType({
    cir.Special.VOID: "void",
    cir.Special.BYTE: "char",
    cir.Special.INT: "int",
    cir.Special.PROFILE: "hlofuse_profile",
    DType.PRED: "uint8_t",
    DType.S8: "int8_t",
    DType.S16: "int16_t",
    DType.S32: "int32_t",
    DType.S64: "int64_t",
    DType.U8: "uint8_t",
    DType.U16: "uint16_t",
    DType.U32: "uint32_t",
    DType.U64: "uint64_t",
    DType.F16: "uint16_t",
    DType.BF16: "uint16_t",
    DType.F32: "float",
    DType.F64: "double",
})

_DOT_ROUTINES = MappingProxyType({
    DType.F32: "hlofuse_rt_dot_f32", DType.F64: "hlofuse_rt_dot_f64",
    DType.S8: "hlofuse_rt_dot_u8", DType.U8: "hlofuse_rt_dot_u8",
    DType.S16: "hlofuse_rt_dot_u16", DType.U16: "hlofuse_rt_dot_u16",
    DType.S32: "hlofuse_rt_dot_u32", DType.U32: "hlofuse_rt_dot_u32",
    DType.S64: "hlofuse_rt_dot_u64", DType.U64: "hlofuse_rt_dot_u64",
    DType.PRED: "hlofuse_rt_dot_pred",
})

# f32 spelling, f64 spelling. f16 and bf16 compute with the f32 function and round.
_FLOAT_MATH = MappingProxyType({
    "exp": ("expf", "exp"), "expm1": ("expm1f", "expm1"), "log": ("logf", "log"),
    "log1p": ("log1pf", "log1p"), "sin": ("sinf", "sin"), "cos": ("cosf", "cos"),
    "tan": ("tanf", "tan"), "tanh": ("tanhf", "tanh"), "sqrt": ("sqrtf", "sqrt"),
    "cbrt": ("cbrtf", "cbrt"), "floor": ("floorf", "floor"), "ceil": ("ceilf", "ceil"),
    "round": ("roundf", "round"), "rint": ("rintf", "rint"), "fabs": ("fabsf", "fabs"),
    "fmod": ("fmodf", "fmod"), "pow": ("powf", "pow"), "atan2": ("atan2f", "atan2"),
    "isfinite": ("isfinite", "isfinite"), "erf": ("erff", "erf"), "fma": ("fmaf", "fma"),
})

# Statements one call of a math header function stands for where gcc's scheduling time is
# weighed (an inlined logarithm or sine is 20 to 40 operations).
INLINED_MATH_STATEMENTS = 24


@functools.cache
def _inlined_math() -> frozenset[str]:
    from hlofuse.codegen import mathlib

    return frozenset(f.c_name for f in mathlib.FUNCTIONS)


# Bit counts of an unsigned 32- or 64-bit integer: gcc's and clang's builtins (nvcc's too).
_BIT_FUNCTIONS = MappingProxyType({
    ("popcount", 32): "__builtin_popcount", ("popcount", 64): "__builtin_popcountll",
    ("clz", 32): "__builtin_clz", ("clz", 64): "__builtin_clzll",
})


def _hardware_flushed_math() -> frozenset[tuple[str, DType]]:
    from hlofuse.codegen.mathlib import flushed_by_hardware

    return flushed_by_hardware()


def _vectorisable_math() -> Mapping[tuple[str, DType], str]:
    """The math library's functions that kernels should call instead of libm's."""
    from hlofuse.codegen.mathlib import FUNCTIONS

    return MappingProxyType({(f.name, f.dtype): f.c_name for f in FUNCTIONS if f.recommended})


# gcc's options for a whole-loop kernel (see CLanguage.whole_loop_options).
_WHOLE_LOOP_OPTIONS = ("no-thread-jumps", "no-tree-pre", "no-tree-sink", "ira-region=one",
                       "ira-algorithm=priority", "no-jump-tables", "no-bit-tests", "no-gcse",
                       "no-code-hoisting", "no-gcse-after-reload")


def _optimize_attribute(*options: str) -> str:
    return "__attribute__((optimize(" + ", ".join(f'"{o}"' for o in options) + ")))"


@dataclass(frozen=True)
class CLanguage:
    """C11 with OpenMP, as compiled by gcc or clang."""

    name: str = "C"
    # The runtime library's dot routine per compute type (integers share one per width).
    dot_routines: Mapping[DType, str] = field(default_factory=lambda: _DOT_ROUTINES)
    has_linalg_library: bool = True  # hlofuse_linalg.c

    type_names: Mapping[cir.Type, str] = field(default_factory=lambda: _TYPE_NAMES)
    float_math: Mapping[str, tuple[str, str]] = field(default_factory=lambda: _FLOAT_MATH)
    bit_functions: Mapping[tuple[str, int], str] = field(default_factory=lambda: _BIT_FUNCTIONS)
    # Branch-free functions of codegen/mathlib (within ~0.5 ulp for f32) that vectorise, where
    # libm's are calls that keep a loop scalar; keyed by (name, f32 or f64).
    vector_math: Mapping[tuple[str, DType], str] = field(default_factory=_vectorisable_math)
    # Of those, the ones that need no flush of their argument and result where the kernel runs
    # with the CPU's DAZ and FTZ bits set (HLOFUSE_HARDWARE_FLUSH in the header: x86, Arm):
    # the flush's masks cost a fifth of a tanh.
    hardware_flushed_math: frozenset[tuple[str, DType]] = field(
        default_factory=_hardware_flushed_math)
    index_type: cir.Type = cir.INDEX
    restrict: str = "restrict"
    block_shared: str = ""  # C has no memory shared by a block of threads
    # What the header's helper functions add to `static inline` (none: host code only).
    helper_qualifier: str = ""
    kernel_qualifier: str = "static __attribute__((noinline))"
    # A function a kernel or the driver calls (a parallel part, a slice of the driver).
    part_qualifier: str = "static __attribute__((noinline))"
    # Small kernels gain nothing from -O3 vectorisation but cost most of the compile time.
    small_kernel_attribute: str = '__attribute__((optimize("O1")))'
    # A kernel of little work in all that runs once a run (codegen/whole_loop_work.py): gcc's
    # -Og keeps the optimisations that cost little to run; JAX's Threefry loops drawing an
    # MLP's initial weights compiled in 1.4 s instead of 2.6-3.0 s at -O1.
    run_once_attribute: str = '__attribute__((optimize("Og")))'
    export_qualifier: str = "__attribute__((visibility(\"default\")))"
    parallel_region: str = "#pragma omp parallel"
    parallel_for: str = "#pragma omp for schedule(static)"
    parallel_for_collapse: str = "#pragma omp for schedule(static) collapse({n})"
    simd_reduction: str = "#pragma omp simd reduction({op}:{var})"
    simd: str = "#pragma omp simd"
    unroll: str = "#pragma GCC unroll {n}"
    indent: str = "  "
    # gcc's jump threading duplicates the branches of several selects on one predicate until
    # if-conversion gives up and a simd loop stays scalar; every kernel with vector loops
    # turns it off, and with it partial redundancy elimination and code sinking, which move
    # a select's operand (a square root, a math function's result) into a branch that
    # if-conversion cannot undo (JAX's erf_inv in a Gaussian sample kept a loop scalar).
    no_jump_threading: str = ('__attribute__((optimize("no-thread-jumps", "no-tree-pre", '
                              '"no-tree-sink")))')
    # A whole-loop kernel's lane loop is one long simd body: gcc's partial redundancy
    # elimination (a comparison of a clamped value) and code sinking (a select's operand
    # moved into a branch) turn selects into branches that if-conversion cannot undo, and
    # the lanes run one at a time. Register allocation takes most of such a function's
    # compile time; one allocation region with the priority colouring cuts it by 20-35 %
    # with the same speed (measured on the particles, rigid-body and acrobot rollouts).
    # gcc's if-to-switch pass turns a chain of selects on one value's equality with
    # literals (a per-lane value read at a computed position) into a switch, which
    # if-conversion refuses whole; it runs only where jump tables or bit tests may be used.
    # Reassociation makes the tests of such a chain whose arms repeat a value (a table of
    # moves, mostly zeros) one bit test, a 64-bit mask shifted by the 32-bit position, which
    # has no vector form on AVX2: the lane loop ran scalar (a third of a GRU policy's
    # kernel: 466 -> 307 ms a rollout without the pass). It is turned off only in kernels
    # with such a chain (`repeats_a_selected_literal`): elsewhere its integer rewrites are
    # worth 1-2 % (pendulum_mlp's generator rounds).
    # Global CSE and code hoisting take a fifth of the compile time of such a function and
    # change nothing measurable in its speed (the nine rollouts of tests/data/rollouts).
    # Lane code holds predicates in 32 bits (codegen/whole_loop_lanes.py), so a lane loop
    # vectorises at one vector per operation; 64-byte vectors where the CPU has them
    # (HLOFUSE_WIDE_VECTORS, from the header) then give it twice the lanes per instruction.
    whole_loop_options: tuple[str, ...] = _WHOLE_LOOP_OPTIONS
    whole_loop_suffix: str = " HLOFUSE_WIDE_VECTORS"
    # gcc schedules instructions before register allocation only where asked on x86. A lane
    # loop's step is written draw by draw and function by function (each tanh of a layer, each
    # round of a counter-based generator), and the processor's out-of-order window of about
    # two hundred instructions does not reach from one division or square root to the next
    # independent one; scheduling that weighs register pressure interleaves them. Measured
    # (one thread, N = 4,096, T = 200, CPU time): 17 of 19 rollouts 5-30 % faster, one equal,
    # one (grid_forage) 7 % slower. Its time grows with the square of a straight-line
    # block's length (0.6 s at 1,700 statements, 5 s at 5,800, with register allocation's
    # time doubled), so a whole-loop kernel with a longer block is compiled without it.
    # A call of the math header's functions is inlined, tens of operations (counted as
    # INLINED_MATH_STATEMENTS): a lane loop of 2,900 statements and 64 such calls, once a
    # floor there let it vectorise, took gcc 45 s to schedule (9 s in all without).
    scheduling_options: tuple[str, ...] = ("schedule-insns", "sched-pressure")
    scheduled_block_limit: int = 3000
    # For a whole-loop kernel whose lane code reads a small table repeating a value (above).
    repeated_literal_options: tuple[str, ...] = ("no-tree-reassoc",)
    ftz_begin: str = "HLOFUSE_FTZ_BEGIN"
    ftz_end: str = "HLOFUSE_FTZ_END"

    # --- types ------------------------------------------------------------------------

    def type_name(self, t: cir.Type) -> str:
        """`t` spelled: an element type as it lies in memory (f16 and bf16 as their bits),
        a pointer with its qualifiers (`const float *restrict `: a declaration strips the
        trailing space)."""
        if type(t) is cir.Pointer:
            text = f"{'const ' if t.const else ''}{self.type_name(t.element)} *"
            if t.restrict:
                text += f"{self.restrict} "
            return text + "const" if t.fixed else text
        try:
            return self.type_names[t]
        except KeyError:
            what = t.text if isinstance(t, DType) else str(t)
            raise ValueError(f"no {self.name} type for element type {what}") from None

    def register_type(self, dtype: DType) -> DType:
        if dtype in (DType.F16, DType.BF16):
            return DType.F32
        self.type_name(dtype)  # one the language has
        return dtype

    def wrap_type(self, dtype: DType) -> DType:
        """Where integer + - * wrap without undefined behaviour (no promotion to int)."""
        return DType.U64 if dtype.bits == 64 else DType.U32

    def pointer(self, dtype: DType, const: bool, restrict: bool = True) -> cir.Pointer:
        self.type_name(dtype)  # one the language has
        return cir.Pointer(dtype, const, restrict)

    def type_tag(self, dtype: DType) -> str:
        """Suffix of the per-type helper functions in the header (hlofuse_div_s32, ...)."""
        return dtype.text

    # --- values (as cir nodes) ---------------------------------------------------------------

    def load(self, dtype: DType, pointer: Expr, index: Expr) -> Expr:
        element = cir.Load(pointer, (index,))
        if dtype is DType.F16:
            return cir.call("hlofuse_f16_to_f32", element)
        if dtype is DType.BF16:
            return cir.call("hlofuse_bf16_to_f32", element)
        return element

    def to_storage(self, dtype: DType, value: Expr) -> Expr:
        if dtype is DType.F16:
            return cir.call("hlofuse_f32_to_f16", value)
        if dtype is DType.BF16:
            return cir.call("hlofuse_f32_to_bf16", value)
        return value

    def round_to(self, dtype: DType, expr: Expr) -> Expr:
        """A freshly computed float value rounded to `dtype`'s precision (register form)."""
        if dtype is DType.F16:
            return cir.call("hlofuse_round_f16", expr)
        if dtype is DType.BF16:
            return cir.call("hlofuse_round_bf16", expr)
        return expr

    def from_double(self, dtype: DType, expr: Expr) -> Expr:
        """A double rounded once to `dtype` (register form), as the reference rounds the
        transcendental functions it evaluates in f64 (bf16 goes through f32 there)."""
        if dtype is DType.F16:
            return cir.call("hlofuse_f16_to_f32", cir.call("hlofuse_f64_to_f16", expr))
        if dtype is DType.BF16:
            return cir.call("hlofuse_round_bf16", cir.Cast(DType.F32, expr))
        if dtype is DType.F32:
            return cir.call("hlofuse_daz_f", cir.Cast(DType.F32, expr))
        return expr

    def math(self, name: str, dtype: DType) -> str:
        width = DType.F64 if dtype is DType.F64 else DType.F32
        vectorised = self.vector_math.get((name, width))
        if vectorised is not None:
            return vectorised
        f32_name, f64_name = self.float_math[name]
        return f64_name if dtype is DType.F64 else f32_name

    def bit_function(self, name: str, dtype: DType) -> str:
        return self.bit_functions[name, dtype.bits]

    def has_math(self, name: str, dtype: DType) -> bool:
        """Whether `math(name)` exists as a function (logistic has no libm spelling)."""
        width = DType.F64 if dtype is DType.F64 else DType.F32
        return (name, width) in self.vector_math or name in self.float_math

    def call_math(self, name: str, dtype: DType, *arguments: Expr) -> Expr:
        """A libm call with denormal inputs and results flushed (f32/f64; the reference
        models XLA's DAZ/FTZ, which libm's integer bit tricks would otherwise escape)."""
        if dtype not in (DType.F32, DType.F64):
            return cir.Call(self.math(name, dtype), arguments)
        flush = "hlofuse_daz_d" if dtype is DType.F64 else "hlofuse_daz_f"
        if (name, dtype) in self.hardware_flushed_math:
            flush = "hlofuse_daz_unless_hardware_f"
        inner = tuple(cir.call(flush, a) for a in arguments)
        return cir.call(flush, cir.Call(self.math(name, dtype), inner))

    def literal(self, dtype: DType, value: object) -> cir.Const:
        """An exact literal of `dtype` in register form (floats kept as f64 bits)."""
        return literal(dtype, value)

    # --- literals (text) ----------------------------------------------------------------

    def const_text(self, const: cir.Const) -> str:
        dtype = const.dtype
        if dtype is DType.PRED:
            return "1" if const.value else "0"
        if dtype.is_integer:
            return self.int_literal(dtype, int(const.value))
        return self.float_literal(dtype, literal_float(const))

    def int_literal(self, dtype: DType, number: int) -> str:
        ctype = self.type_name(dtype)
        if dtype.is_unsigned_int:
            return f"(({ctype}){number}ULL)"
        if number == -(1 << 63):
            return "INT64_MIN"
        return f"(({ctype}){number}LL)"

    def float_literal(self, dtype: DType, value: float) -> str:
        as_float = float(np.asarray(value, dtype=np.float64))
        if dtype is DType.F64:
            bits = int(np.asarray(as_float, np.float64).view(np.uint64))
            if not math.isfinite(as_float):
                return f"hlofuse_f64_from_bits({bits}ULL)"
            return as_float.hex()
        bits = int(np.asarray(as_float, np.float64).astype(np.float32).view(np.uint32))
        if not math.isfinite(as_float):
            return f"hlofuse_f32_from_bits({bits}u)"
        return as_float.hex() + "f"

    def index_literal(self, number: int) -> str:
        return f"{number}" if -(1 << 31) < number < (1 << 31) else f"{number}LL"

    # --- printing expressions -----------------------------------------------------------

    def expr(self, e: Expr) -> str:
        """`e` as an operand: parenthesised unless it is one name, literal or call."""
        if type(e) is cir.Var:
            return e.name
        if type(e) is cir.Affine:
            text = self._affine(e)
            return text if len(e.terms) + (e.const != 0) <= 1 and not text.startswith("-") \
                else f"({text})"
        return self.top(e)

    def top(self, e: Expr) -> str:
        """`e` where nothing binds tighter around it (an initialiser, an index, an argument)."""
        # The node classes have no subclasses: the commonest are told by their exact type
        # first (printing is a sixth of code generation), the rest as before.
        if type(e) is cir.Var:
            return e.name
        if type(e) is cir.Cast:
            return f"(({self.type_name(e.to)}){self.expr(e.operand)})"
        if type(e) is cir.Binary:
            return f"({self.expr(e.left)} {e.op} {self.expr(e.right)})"
        if isinstance(e, cir.Var):
            return e.name
        if isinstance(e, cir.Int):
            return self.index_literal(e.value)
        if isinstance(e, cir.Const):
            return self.const_text(e)
        if isinstance(e, cir.TypeName):
            return self.type_name(e.of)
        if isinstance(e, cir.Unary):
            return f"({e.op}{self.expr(e.operand)})"
        if isinstance(e, cir.Binary):
            return f"({self.expr(e.left)} {e.op} {self.expr(e.right)})"
        if isinstance(e, cir.Cast):
            return f"(({self.type_name(e.to)}){self.expr(e.operand)})"
        if isinstance(e, cir.Call):
            return f"{e.function}({', '.join(self.top(a) for a in e.arguments)})"
        if isinstance(e, cir.Select):
            return (f"({self.expr(e.condition)} ? {self.expr(e.on_true)} : "
                    f"{self.expr(e.on_false)})")
        if isinstance(e, cir.Load):
            return self.expr(e.array) + "".join(f"[{self.top(i)}]" for i in e.indices)
        if isinstance(e, cir.Affine):
            return self._affine(e)
        raise TypeError(f"no spelling for {e!r}")

    def _affine(self, form: cir.Affine) -> str:
        """Atoms in the form's order, the constant last (the canonical spelling)."""
        parts: list[str] = []
        for atom, coefficient in form.terms:
            magnitude = abs(coefficient)
            name = self.expr(atom)
            term = name if magnitude == 1 else f"{name} * {self.index_literal(magnitude)}"
            if not parts:
                parts.append(term if coefficient > 0 else f"-{term}")
            else:
                parts.append(f"{'+' if coefficient > 0 else '-'} {term}")
        if not parts:
            return self.index_literal(form.const)
        if form.const:
            sign = "+" if form.const > 0 else "-"
            parts.append(f"{sign} {self.index_literal(abs(form.const))}")
        return " ".join(parts)

    # --- printing statements ------------------------------------------------------------

    def loop_pragmas(self, how: cir.Loop) -> list[str]:
        out = []
        if how.parallel:
            out.append(self.parallel_for if how.collapse == 1
                       else self.parallel_for_collapse.format(n=how.collapse))
        if how.reduction is not None:
            op, var = how.reduction
            out.append(self.simd_reduction.format(op=op, var=var))
        elif how.simd:
            out.append(self.simd)
        if how.unroll is not None:
            out.append(self.unroll.format(n=how.unroll))
        return out

    def declaration(self, t: cir.Type, name: str) -> str:
        spelled = self.type_name(t).rstrip()
        return f"{spelled}{name}" if spelled.endswith("*") else f"{spelled} {name}"

    def statements(self, stmts: list[cir.Stmt], depth: int) -> list[str]:
        lines: list[str] = []
        for s in stmts:
            self._statement(s, depth, lines)
        return lines

    def _statement(self, s: cir.Stmt, depth: int, out: list[str]) -> None:
        pad = self.indent * depth
        if isinstance(s, cir.Declare):
            text = ("const " if s.const else "") + self.declaration(s.type, s.name)
            if s.block_shared:
                if not self.block_shared:
                    raise TypeError(f"{self.name} has no memory shared by a block: {s.name}")
                text = self.block_shared + text
            if s.dims:
                text += "".join(f"[{self.top(d) if isinstance(d, Expr) else d}]" for d in s.dims)
            if s.zeroed:
                text += " = {0}"
            elif s.init is not None:
                text += f" = {self.top(s.init)}"
            out.append(f"{pad}{text};")
        elif isinstance(s, cir.Assign | cir.ExprStmt | cir.Break | cir.Return):
            out.append(pad + self._simple(s))
        elif isinstance(s, cir.Allocate):
            self._statement(self.allocation(s), depth, out)
        elif isinstance(s, cir.Release):
            out.append(f"{pad}free({s.name});")
        elif isinstance(s, cir.AfterAll):
            # OpenMP's threads have joined at the end of every parallel region.
            out.extend(self.statements(s.body, depth))
        elif isinstance(s, cir.Comment):
            out.append(f"{pad}/* {s.text} */")
        elif isinstance(s, cir.Block):
            self._braced(pad + "{", s.body, depth, out)
        elif isinstance(s, cir.For):
            out.extend(pad + p for p in self.loop_pragmas(s.how))
            self._braced(pad + self.for_header(s) + " {", s.body, depth, out)
        elif isinstance(s, cir.While):
            self._braced(f"{pad}while ({self.top(s.condition)}) {{", s.body, depth, out)
        elif isinstance(s, cir.If):
            self._if(s, depth, out)
        elif isinstance(s, cir.Switch):
            self._switch(s, depth, out)
        elif isinstance(s, cir.ParallelRegion):
            clause = "" if s.condition is None else f" if ({self.top(s.condition)})"
            out.append(pad + self.parallel_region + clause)
            out.append(pad + "{")
            out.append(pad + self.indent + self.ftz_begin)
            out.extend(self.statements(s.body, depth + 1))
            out.append(pad + self.indent + self.ftz_end)
            out.append(pad + "}")
        else:
            raise TypeError(f"no spelling for {s!r}")

    def allocation(self, s: cir.Allocate) -> cir.Declare:
        """A scratch array from the heap (`free`d by its `Release`)."""
        size = cir.Binary("*", cir.Int(s.count), cir.call("sizeof", cir.TypeName(s.element)))
        return cir.Declare(cir.Pointer(s.element, restrict=s.restrict), s.name,
                           cir.Cast(cir.Pointer(s.element), cir.call("malloc", size)))

    def _simple(self, s: cir.Stmt) -> str:
        if isinstance(s, cir.Assign):
            return f"{self.top(s.target)} {s.op} {self.top(s.value)};"
        if isinstance(s, cir.ExprStmt):
            return f"{self.top(s.expr)};"
        if isinstance(s, cir.Break):
            return "break;"
        assert isinstance(s, cir.Return)
        return "return;" if s.value is None else f"return {self.top(s.value)};"

    def for_header(self, s: cir.For) -> str:
        hi = "" if s.hi is None else f"{s.var} < {self.top(s.hi)}"
        step = f"++{s.var}" if s.step == 1 else f"{s.var} += {s.step}"
        return f"for ({self.type_name(s.type)} {s.var} = {self.top(s.lo)}; {hi}; {step})"

    def _braced(self, opening: str, body: list[cir.Stmt], depth: int, out: list[str]) -> None:
        out.append(opening)
        out.extend(self.statements(body, depth + 1))
        out.append(self.indent * depth + "}")

    def _if(self, s: cir.If, depth: int, out: list[str]) -> None:
        pad = self.indent * depth
        condition = f"if ({self.top(s.condition)})"
        one = s.then[0] if len(s.then) == 1 else None
        if s.otherwise is None and isinstance(one, cir.Assign | cir.ExprStmt | cir.Break):
            out.append(f"{pad}{condition} {self._simple(one)}")
            return
        self._braced(f"{pad}{condition} {{", s.then, depth, out)
        if s.otherwise is not None:
            out[-1] += " else {"
            out.extend(self.statements(s.otherwise, depth + 1))
            out.append(pad + "}")

    def _switch(self, s: cir.Switch, depth: int, out: list[str]) -> None:
        pad = self.indent * depth
        out.append(f"{pad}switch ({self.top(s.selector)}) {{")
        last = len(s.cases) - 1
        for k, case in enumerate(s.cases):
            label = "default" if k == last else f"case {k}"
            out.append(f"{pad}{self.indent}{label}: {{")
            out.extend(self.statements(case, depth + 2))
            out.append(f"{pad}{self.indent}}} break;")
        out.append(pad + "}")

    def qualifier(self, f: cir.Function) -> str:
        """The qualifiers and attributes a function is defined with."""
        base = {cir.Linkage.KERNEL: self.kernel_qualifier, cir.Linkage.PART: self.part_qualifier,
                cir.Linkage.ENTRY: self.export_qualifier, cir.Linkage.HOST: "static"}[f.linkage]
        if f.tuning is None:
            return base
        if f.tuning is cir.Tuning.WHOLE_LOOP:
            return f"{base} {self._whole_loop_attribute(f.body)}"
        attribute = {cir.Tuning.SMALL: self.small_kernel_attribute,
                     cir.Tuning.RUN_ONCE: self.run_once_attribute,
                     cir.Tuning.VECTOR_LOOPS: self.no_jump_threading}[f.tuning]
        return f"{base} {attribute}"

    def _whole_loop_attribute(self, body: list[cir.Stmt]) -> str:
        """The options of a whole-loop kernel: scheduled unless a straight-line block is too
        long, without reassociation where a select chain repeats a literal."""
        if not self.whole_loop_options:
            return ""
        options = self.whole_loop_options
        inlined = _inlined_math()
        if longest_straight_run(body, lambda stmt: 1 + INLINED_MATH_STATEMENTS * calls_to(
                stmt, inlined)) <= self.scheduled_block_limit:
            options += self.scheduling_options
        if repeats_a_selected_literal(body):
            options += self.repeated_literal_options
        return _optimize_attribute(*options) + self.whole_loop_suffix

    def function(self, f: cir.Function) -> str:
        """A whole function definition (its comment first, when it has one)."""
        parameters = ", ".join(self.declaration(p.type, p.name) for p in f.parameters)
        lines = [] if f.comment is None else [f"/* {f.comment} */"]
        qualifier = self.qualifier(f)
        qualifier = f"{qualifier} " if qualifier else ""
        returns = self.type_name(f.returns)
        lines.append(f"{qualifier}{returns} {f.name}({parameters or 'void'}) {{")
        lines.extend(self.statements(f.body, 1))
        lines.append("}")
        return "\n".join(lines) + "\n"


    def lane_language(self) -> CLanguage:
        return _WidePredicates(**{f.name: getattr(self, f.name) for f in fields(self)})


@dataclass(frozen=True)
class _WidePredicates(CLanguage):
    """C whose predicates are 0/1 in an `int32_t` while a kernel computes; memory keeps
    them in one byte. With byte-wide predicates beside floats, gcc took 32 lanes per
    iteration of a lane loop, four 32-byte vectors per float operation, and two to three
    times the compile time on the larger rollouts."""

    def register_type(self, dtype: DType) -> DType:
        if dtype is DType.PRED:
            return DType.S32
        return super().register_type(dtype)

    def lane_language(self) -> CLanguage:
        return self


C = CLanguage()
