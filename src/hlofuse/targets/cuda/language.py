"""The CUDA target: the C language table with CUDA's qualifiers, grids instead of OpenMP.

Emitters are unchanged; this table prints the same codegen IR as CUDA C++. A kernel
function becomes a `__device__` function called by a `__global__` entry (written by
targets/cuda/driver.py); the functions it calls (parallel parts, the header's helpers)
are `__host__ __device__`. OpenMP's work sharing maps onto the grid: `HLOFUSE_THREAD` is
the global thread index and `HLOFUSE_THREADS` the grid's size, so the parallel part a
kernel calls with a thread's share of its outermost loop (`start + count * t / nt`) runs
one element (or one lane block) per thread when the grid has `count` threads, and a loop
marked `parallel` becomes a grid-stride loop.

A kernel is launched over a grid only when that is correct without a grid-wide barrier:
its body is declarations of values (no memory of its own, no stores) and parallel regions
(or one library call). A whole-loop kernel gets a grid of its own kind (`_whole_loop_grid`),
and reduction kernels are written for warps and blocks by targets/cuda/reductions.py, which
declares their grid through `grid_function`. Every other kernel (a sequence of loops,
temporaries, the reductions that module leaves) is launched on one thread, where the same
code runs in order: correct, slow, and named as such by `launch_threads` returning 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hlofuse.codegen import cir
from hlofuse.targets.c.language import CLanguage

# The names of the constants a kernel's text declares: how many threads its grid has, and
# how many of them make a block.
THREADS_SUFFIX = "_threads"
BLOCK_SUFFIX = "_block"
DEFAULT_BLOCK = 256
_FUNCTION_START = re.compile(r"^static (inline )?", re.MULTILINE)


@dataclass(frozen=True)
class CudaLanguage(CLanguage):
    """CUDA C++ as compiled by nvcc (or by a C++ compiler against cuda_emulation.h)."""

    name: str = "CUDA"
    has_linalg_library: bool = False  # hlofuse_cuda_rt.cuh has no linear-algebra routines

    restrict: str = "__restrict__"
    kernel_qualifier: str = "static __device__"
    part_qualifier: str = "static __device__"
    small_kernel_attribute: str = ""
    export_qualifier: str = 'extern "C" __attribute__((visibility("default")))'
    parallel_region: str = ""
    parallel_for: str = ""
    parallel_for_collapse: str = ""
    simd_reduction: str = ""
    simd: str = ""
    unroll: str = "#pragma unroll {n}"
    no_jump_threading: str = ""
    whole_loop_attribute: str = ""

    def lane_language(self) -> CudaLanguage:
        return self  # one lane per thread: nothing to vectorise

    def loop_pragmas(self, how: cir.Loop) -> list[str]:
        return [] if how.unroll is None else [self.unroll.format(n=how.unroll)]

    def for_header(self, s: cir.For) -> str:
        if not s.how.parallel:
            return super().for_header(s)
        # A grid-stride loop: thread t takes lo + t, lo + t + T, ... (T threads in the grid).
        hi = "" if s.hi is None else f"{s.var} < {self.top(s.hi)}"
        return (f"for ({s.ctype} {s.var} = {self.top(s.lo)} + HLOFUSE_THREAD; {hi}; "
                f"{s.var} += HLOFUSE_THREADS * {s.step})")

    def _statement(self, s: cir.Stmt, depth: int, out: list[str]) -> None:
        if isinstance(s, cir.ParallelRegion):
            # Every thread of the grid runs the region; its condition (worth a thread team
            # on a CPU) does not apply to a grid already launched.
            self._braced(self.indent * depth + "{", s.body, depth, out)
            return
        super()._statement(s, depth, out)

    def function(self, f: cir.Function) -> str:
        if f.name != "$name":  # a kernel (its name given later), not a part
            return super().function(f)
        whole_loop = _whole_loop_grid(f)
        if whole_loop is not None:
            globals_text, body, threads = whole_loop
            f = cir.Function(f.name, f.parameters, body, f.qualifier, f.comment, f.returns)
            return globals_text + self.grid_function(f, threads, DEFAULT_BLOCK)
        return self.grid_function(f, launch_threads(f.body), DEFAULT_BLOCK)

    def grid_function(self, f: cir.Function, threads: int, block: int) -> str:
        """A kernel with the grid it is launched over: `threads` in all, at most `block` to
        a block (kernels that exchange values through a block or warp rely on its size)."""
        return (f"static const int64_t {f.name}{THREADS_SUFFIX} = {threads};\n"
                f"static const int {f.name}{BLOCK_SUFFIX} = {block};\n"
                + super().function(f))


def launch_threads(body: list[cir.Stmt]) -> int:
    """The grid size of a kernel with this body: the largest share count of its one parallel
    region, or 1 (one thread runs everything in order) when a grid would not be correct."""
    regions = [s for s in body if isinstance(s, cir.ParallelRegion)]
    calls = [s for s in body if _library_span(s)]
    # Parallel regions of one kernel write different outputs from its inputs (horizontal and
    # multi-output fusions): each thread runs its share of each, no barrier between. A library
    # call's result may be read by a later loop, so it shares the grid with nothing.
    if not (regions and not calls) and not (len(calls) == 1 and not regions):
        return 1
    for s in body:
        if isinstance(s, cir.ParallelRegion) or s in calls:
            continue
        if isinstance(s, cir.Declare) and not s.dims and s.init is not None \
                and not allocates(s.init):
            continue
        if isinstance(s, cir.ExprStmt) and isinstance(s.expr, cir.Cast) \
                and s.expr.ctype == "void":
            continue
        return 1
    if calls:
        return _library_span(calls[0])
    return max((n for region in regions for n in _shares(region)), default=1)


def _library_span(s: cir.Stmt) -> int:
    """The elements (Threefry) or rows (dot) a library call shares among the grid's threads,
    0 for any other statement (hlofuse_cuda_rt.cuh's routines are grid-stride loops)."""
    if not isinstance(s, cir.ExprStmt) or not isinstance(s.expr, cir.Call):
        return 0
    call = s.expr
    arguments = call.arguments
    if call.function == "hlofuse_rt_threefry2x32" and isinstance(arguments[-1], cir.Int):
        return max(arguments[-1].value, 1)
    if call.function.startswith("hlofuse_rt_dot_") and all(
            isinstance(a, cir.Int) for a in arguments[3:5]):
        batch, m = arguments[3], arguments[4]
        assert isinstance(batch, cir.Int) and isinstance(m, cir.Int)
        return max(batch.value * m.value, 1)
    return 0


def _whole_loop_grid(f: cir.Function) -> tuple[str, list[cir.Stmt], int] | None:
    """A whole-loop kernel (codegen/whole_loop.py) made a grid: every thread runs the uniform
    steps itself (they are the same in every thread) and the blocks of lanes it owns in the
    grid-stride loop; the blocks' partial results live in device globals, each initialised by
    its block's owner; the last thread to finish (a ticket taken after a fence) combines them
    and writes the loop's uniform results, after every thread has read its inputs."""
    body = f.body
    chunk = [k for k, s in enumerate(body)
             if isinstance(s, cir.For) and s.var == "chunk" and s.hi is None]
    if len(chunk) != 1:
        return None
    end = chunk[0]
    globals_lines: list[str] = []
    parts: dict[str, str] = {}
    out: list[cir.Stmt] = []
    for s in body[:end]:
        if isinstance(s, cir.Declare) and s.name.startswith("part") and s.init is not None \
                and allocates(s.init):
            count = _allocation_count(s.init)
            if count is None:
                return None
            store = f"{f.name}_{s.name}_store"
            element = s.ctype.replace("*", "").strip()
            globals_lines.append(f"static __device__ {element} {store}[{count}];")
            parts[s.name] = store
            out.append(cir.Declare(s.ctype, s.name, cir.Var(store)))
        elif isinstance(s, cir.For) and _writes_only(s, set(parts)):
            # Each block's owner initialises its partial result.
            out.append(cir.For(s.var, s.lo, s.hi, s.body, cir.Loop(parallel=True), s.ctype,
                               s.step))
        elif isinstance(s, cir.Assign) and _stores_into(s, set(parts)):
            # An unrolled initialisation: block i belongs to thread i % threads.
            assert isinstance(s.target, cir.Load)
            owner = cir.Binary("==", cir.Binary("%", s.target.indices[0],
                                                cir.Var("HLOFUSE_THREADS")),
                               cir.Var("HLOFUSE_THREAD"))
            out.append(cir.If(owner, [s]))
        else:
            out.append(s)
    out.append(body[end])
    done = f"{f.name}_done"
    globals_lines.append(f"static __device__ unsigned long long {done};")
    tail = [s for s in body[end + 1:]
            if not (isinstance(s, cir.ExprStmt) and isinstance(s.expr, cir.Call)
                    and s.expr.function == "free")]
    out.append(cir.If(cir.call("hlofuse_last_thread", cir.Unary("&", cir.Var(done))), tail))
    threads = max((n for s in body for n in _shares(cir.ParallelRegion([s]))), default=1)
    return "\n".join(globals_lines) + "\n", out, threads


def _allocation_count(e: cir.Expr) -> int | None:
    """`n` of `(T *)malloc(n * sizeof(T))`."""
    if isinstance(e, cir.Cast):
        e = e.operand
    if isinstance(e, cir.Call) and e.function == "malloc" and len(e.arguments) == 1:
        size = e.arguments[0]
        if isinstance(size, cir.Binary) and size.op == "*" and isinstance(size.left, cir.Int):
            return size.left.value
    return None


def _writes_only(loop: cir.For, arrays: set[str]) -> bool:
    """A loop whose body only stores into `arrays` (a partial result's initialisation)."""
    return bool(loop.body) and all(_stores_into(s, arrays) for s in loop.body)


def _stores_into(s: cir.Stmt, arrays: set[str]) -> bool:
    return (isinstance(s, cir.Assign) and isinstance(s.target, cir.Load)
            and isinstance(s.target.array, cir.Var) and s.target.array.name in arrays
            and len(s.target.indices) == 1)


def allocates(e: cir.Expr) -> bool:
    """Whether `e` calls malloc or calloc (memory of a kernel's own)."""
    if isinstance(e, cir.Call) and e.function in ("malloc", "calloc"):
        return True
    return any(allocates(c) for c in _children(e))


def _children(e: cir.Expr) -> list[cir.Expr]:
    if isinstance(e, cir.Unary | cir.Cast):
        return [e.operand]
    if isinstance(e, cir.Binary):
        return [e.left, e.right]
    if isinstance(e, cir.Call):
        return list(e.arguments)
    if isinstance(e, cir.Select):
        return [e.condition, e.on_true, e.on_false]
    if isinstance(e, cir.Load):
        return [e.array, *e.indices]
    if isinstance(e, cir.Affine):
        return [a for a, _ in e.terms]
    return []


def _shares(region: cir.ParallelRegion) -> list[int]:
    """Iteration counts shared among threads: `count * t` in a share, a parallel loop's span."""
    counts: list[int] = []
    for s in (x for top in region.body for x in cir.statements(top)):
        if isinstance(s, cir.For) and s.how.parallel:
            if isinstance(s.lo, cir.Int) and isinstance(s.hi, cir.Int):
                counts.append(max(s.hi.value - s.lo.value, 1))
            else:
                counts.append(1 << 20)  # unknown span: a grid the size of a large array
        for e in cir.expressions(s):
            counts.extend(_share_counts(e))
    return counts


def _share_counts(e: cir.Expr) -> list[int]:
    out = []
    if isinstance(e, cir.Binary) and e.op == "*" and isinstance(e.left, cir.Int) \
            and _mentions(e.right, "hlofuse_t"):
        out.append(e.left.value)
    for c in _children(e):
        out.extend(_share_counts(c))
    return out


def _mentions(e: cir.Expr, name: str) -> bool:
    if isinstance(e, cir.Var):
        return e.name == name
    return any(_mentions(c, name) for c in _children(e))


def device_header(text: str) -> str:
    """The C header's helper functions made callable from device code as well."""
    text = _FUNCTION_START.sub(lambda m: m.group(0) + "__host__ __device__ ", text)
    return text.replace("#define HLOFUSE_MATH_FN static inline",
                        "#define HLOFUSE_MATH_FN static inline __host__ __device__")


CUDA = CudaLanguage()
