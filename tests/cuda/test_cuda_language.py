"""The CUDA language table: grid-stride loops, no OpenMP, and the launch size a kernel's text
declares (a grid only where no grid-wide barrier is needed)."""

from __future__ import annotations

from hlofuse.codegen import cir
from hlofuse.ir.dtypes import DType
from hlofuse.targets.c.language import C
from hlofuse.targets.cuda.language import CUDA, device_header, launch_threads


def _parallel_loop() -> cir.For:
    store = cir.Assign(cir.load("out", cir.Var("i")), cir.Const(DType.S32, 1))
    return cir.For("i", cir.Int(0), cir.Int(1000), [store], cir.Loop(parallel=True))


def test_parallel_loop_is_grid_stride() -> None:
    text = "\n".join(CUDA.statements([cir.ParallelRegion([_parallel_loop()])], 0))
    assert "i = 0 + HLOFUSE_THREAD; i < 1000; i += HLOFUSE_THREADS * 1" in text
    assert "omp" not in text
    assert "#pragma omp for" in "\n".join(C.statements([cir.ParallelRegion([_parallel_loop()])],
                                                      0))


def test_one_region_of_declarations_gets_a_grid() -> None:
    body: list[cir.Stmt] = [cir.Declare("const float", "v", cir.load("p", cir.Int(0))),
                            cir.ParallelRegion([_parallel_loop()])]
    assert launch_threads(body) == 1000


def test_a_temporary_or_a_second_loop_runs_on_one_thread() -> None:
    malloc = cir.Declare("float *", "t", cir.Cast("float *", cir.call("malloc", cir.Int(4))))
    assert launch_threads([malloc, cir.ParallelRegion([_parallel_loop()])]) == 1
    copy = cir.ExprStmt(cir.call("memcpy", cir.Var("out"), cir.Var("in"), cir.Int(4)))
    assert launch_threads([copy, cir.ParallelRegion([_parallel_loop()])]) == 1
    assert launch_threads([_parallel_loop()]) == 1  # not in a region: sequential


def test_independent_regions_share_one_grid() -> None:
    # A horizontal or multi-output fusion: loops writing different outputs, one launch.
    assert launch_threads([cir.ParallelRegion([_parallel_loop()]),
                           cir.ParallelRegion([_parallel_loop()])]) == 1000


def test_kernel_declares_its_launch_size() -> None:
    function = cir.Function("$name", [cir.Parameter("int32_t *", "out")],
                            [cir.ParallelRegion([_parallel_loop()])], CUDA.kernel_qualifier)
    text = CUDA.function(function)
    assert text.startswith("static const int64_t $name_threads = 1000;")
    assert "static __device__ void $name(int32_t *out)" in text


def test_header_functions_become_host_device() -> None:
    text = device_header("static inline float f(float x) { return x; }\n"
                         "#define HLOFUSE_MATH_FN static inline __attribute__((unused))\n")
    assert "static inline __host__ __device__ float f" in text
    assert "HLOFUSE_MATH_FN static inline __host__ __device__" in text


def test_a_lone_library_call_is_shared_among_the_grid() -> None:
    pointers = [cir.Var(n) for n in ("k0", "k1", "x0", "x1", "o0", "o1")]
    threefry = cir.ExprStmt(cir.Call("hlofuse_rt_threefry2x32", (*pointers, cir.Int(5000))))
    assert launch_threads([threefry]) == 5000
    sizes = [cir.Int(v) for v in (2, 300, 7, 5, 0, 0, 0, 0, 0, 0)]
    dot = cir.ExprStmt(cir.Call("hlofuse_rt_dot_f32", (*pointers[:3], *sizes)))
    assert launch_threads([dot]) == 600  # batch * m rows
    assert launch_threads([dot, threefry]) == 1  # two steps: one thread runs them in order
