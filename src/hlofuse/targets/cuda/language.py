"""The CUDA target: the C language table with CUDA's qualifiers, grids instead of OpenMP.

Emitters are unchanged; this table prints the same codegen IR as CUDA C++. A kernel
function becomes a `__device__` function called by a `__global__` entry (written by
targets/cuda/driver.py); the functions it calls (parallel parts, the header's helpers)
are `__host__ __device__`. OpenMP's work sharing maps onto the grid: `HLOFUSE_THREAD` is
the global thread index and `HLOFUSE_THREADS` the grid's size, so the parallel part a
kernel calls with a thread's share of its outermost loop runs one element (or one lane
block) per thread when the grid has as many threads as the loop has iterations, and a loop
marked `parallel` becomes a grid-stride loop.

The grid comes from what the emitters state in the kernel IR, never from the code's shape or
names: a parallel region's extent (the iterations its threads share), a library call's extent,
scratch arrays (`Allocate`) and a combination after all threads (`AfterAll`). A kernel is
launched over a grid only when that is correct without a grid-wide barrier: its body is
declarations of values (no memory of its own, no stores) and parallel regions (or one library
call). A kernel ending in an `AfterAll` (a whole loop) gets a grid of its own kind
(`_after_all_grid`), and reduction kernels are written for warps and blocks by
targets/cuda/reductions.py, which declares their grid through `grid_function`. Every other
kernel (a sequence of loops, temporaries, the reductions that module leaves) is launched on
one thread, where the same code runs in order: correct, slow, and named as such by
`launch_threads` returning 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlofuse.codegen import cir, cir_walks
from hlofuse.ir.dtypes import DType
from hlofuse.targets.c.language import CLanguage

# The names of the constants a kernel's text declares: how many threads its grid has, and
# how many of them make a block.
THREADS_SUFFIX = "_threads"
BLOCK_SUFFIX = "_block"
DEFAULT_BLOCK = 256


@dataclass(frozen=True)
class CudaLanguage(CLanguage):
    """CUDA C++ as compiled by nvcc (or by a C++ compiler against cuda_emulation.h)."""

    name: str = "CUDA"
    has_linalg_library: bool = False  # hlofuse_cuda_rt.cuh has no linear-algebra routines

    restrict: str = "__restrict__"
    block_shared: str = "__shared__ "
    helper_qualifier: str = "__host__ __device__"  # the header's helpers run on both sides
    kernel_qualifier: str = "static __device__"
    part_qualifier: str = "static __device__"
    small_kernel_attribute: str = ""
    run_once_attribute: str = ""
    export_qualifier: str = 'extern "C" __attribute__((visibility("default")))'
    parallel_region: str = ""
    parallel_for: str = ""
    parallel_for_collapse: str = ""
    simd_reduction: str = ""
    simd: str = ""
    unroll: str = "#pragma unroll {n}"
    no_jump_threading: str = ""
    whole_loop_options: tuple[str, ...] = ()
    # A GPU thread has no DAZ bit to set: every math call keeps its flush.
    hardware_flushed_math: frozenset[tuple[str, DType]] = frozenset()

    def lane_language(self) -> CudaLanguage:
        return self  # one lane per thread: nothing to vectorise

    def loop_pragmas(self, how: cir.Loop) -> list[str]:
        return [] if how.unroll is None else [self.unroll.format(n=how.unroll)]

    def for_header(self, s: cir.For) -> str:
        if not s.how.parallel:
            return super().for_header(s)
        # A grid-stride loop: thread t takes lo + t, lo + t + T, ... (T threads in the grid).
        hi = "" if s.hi is None else f"{s.var} < {self.top(s.hi)}"
        return (f"for ({self.type_name(s.type)} {s.var} = {self.top(s.lo)} + HLOFUSE_THREAD; {hi}; "
                f"{s.var} += HLOFUSE_THREADS * {s.step})")

    def _statement(self, s: cir.Stmt, depth: int, out: list[str]) -> None:
        if isinstance(s, cir.ParallelRegion):
            # Every thread of the grid runs the region; its condition (worth a thread team
            # on a CPU) does not apply to a grid already launched.
            self._braced(self.indent * depth + "{", s.body, depth, out)
            return
        super()._statement(s, depth, out)

    def function(self, f: cir.Function) -> str:
        if not f.kernel:  # a part, the driver
            return super().function(f)
        combined = _after_all_grid(f, self)
        if combined is not None:
            globals_text, body, threads = combined
            f = cir.Function(f.name, f.parameters, body, f.linkage, f.tuning, f.comment,
                             f.returns)
            return globals_text + self.grid_function(f, threads, DEFAULT_BLOCK)
        return self.grid_function(f, launch_threads(f.body), DEFAULT_BLOCK)

    def grid_function(self, f: cir.Function, threads: int, block: int) -> str:
        """A kernel with the grid it is launched over: `threads` in all, at most `block` to
        a block (kernels that exchange values through a block or warp rely on its size)."""
        return (f"static const int64_t {f.name}{THREADS_SUFFIX} = {threads};\n"
                f"static const int {f.name}{BLOCK_SUFFIX} = {block};\n"
                + super().function(f))


def launch_threads(body: list[cir.Stmt]) -> int:
    """The grid size of a kernel with this body: the largest extent of its parallel regions,
    or of its one library call, or 1 (one thread runs everything in order) when a grid would
    not be correct."""
    regions = [s for s in body if isinstance(s, cir.ParallelRegion)]
    calls = [s for s in body if isinstance(s, cir.ExprStmt) and s.extent]
    # Parallel regions of one kernel write different outputs from its inputs (horizontal and
    # multi-output fusions): each thread runs its share of each, no barrier between. A library
    # call's result may be read by a later loop, so it shares the grid with nothing.
    if not (regions and not calls) and not (len(calls) == 1 and not regions):
        return 1
    for s in body:
        if isinstance(s, cir.ParallelRegion) or s in calls:
            continue
        if isinstance(s, cir.Declare) and not s.dims and s.init is not None:
            continue  # a value every thread computes (scratch memory is an Allocate)
        if isinstance(s, cir.ExprStmt) and isinstance(s.expr, cir.Cast) \
                and s.expr.to is cir.Special.VOID:
            continue
        return 1
    if calls:
        return calls[0].extent
    return max(region.extent for region in regions)


def _after_all_grid(f: cir.Function, lang: CudaLanguage
                    ) -> tuple[str, list[cir.Stmt], int] | None:
    """A kernel whose threads leave partial results for an `AfterAll` to combine (a whole
    loop, codegen/whole_loop.py) made a grid: every thread runs what comes before the
    combination itself (a whole loop's uniform steps are the same in every thread), and its
    share of the parallel regions; the scratch arrays of partial results live in device
    globals, each element initialised by the thread that owns it; the last thread to finish
    (a ticket taken after a fence) runs the `AfterAll`, after every thread has read its
    inputs."""
    body = f.body
    after = [k for k, s in enumerate(body) if isinstance(s, cir.AfterAll)]
    if len(after) != 1:
        return None
    end = after[0]
    globals_lines: list[str] = []
    scratch: set[str] = set()
    out: list[cir.Stmt] = []
    for s in body[:end]:
        if isinstance(s, cir.Allocate):
            store = f"{f.name}_{s.name}_store"
            globals_lines.append(
                f"static __device__ {lang.type_name(s.element)} {store}[{s.count}];")
            scratch.add(s.name)
            out.append(cir.Declare(cir.Pointer(s.element, restrict=s.restrict), s.name,
                                   cir.Var(store)))
        elif isinstance(s, cir.For) and _writes_only(s, scratch):
            # Each block's owner initialises its partial result.
            out.append(cir.For(s.var, s.lo, s.hi, s.body, cir.Loop(parallel=True), s.type,
                               s.step))
        elif isinstance(s, cir.Assign) and _stores_into(s, scratch):
            # An unrolled initialisation: block i belongs to thread i % threads.
            assert isinstance(s.target, cir.Load)
            owner = cir.Binary("==", cir.Binary("%", s.target.indices[0],
                                                cir.Var("HLOFUSE_THREADS")),
                               cir.Var("HLOFUSE_THREAD"))
            out.append(cir.If(owner, [s]))
        else:
            out.append(s)
    done = f"{f.name}_done"
    globals_lines.append(f"static __device__ unsigned long long {done};")
    combine = body[end]
    assert isinstance(combine, cir.AfterAll)
    tail = [s for s in combine.body if not isinstance(s, cir.Release)]  # statics stay
    out.append(cir.If(cir.call("hlofuse_last_thread", cir.Unary("&", cir.Var(done))), tail))
    out += body[end + 1:]
    threads = max((s.extent for top in body for s in cir_walks.statements(top)
                   if isinstance(s, cir.ParallelRegion)), default=1)
    return "\n".join(globals_lines) + "\n", out, threads


def _writes_only(loop: cir.For, arrays: set[str]) -> bool:
    """A loop whose body only stores into `arrays` (a partial result's initialisation)."""
    return bool(loop.body) and all(_stores_into(s, arrays) for s in loop.body)


def _stores_into(s: cir.Stmt, arrays: set[str]) -> bool:
    return (isinstance(s, cir.Assign) and isinstance(s.target, cir.Load)
            and isinstance(s.target.array, cir.Var) and s.target.array.name in arrays
            and len(s.target.indices) == 1)


CUDA = CudaLanguage()
