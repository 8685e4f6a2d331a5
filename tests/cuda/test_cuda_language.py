"""The launch size a CUDA kernel declares, from what the kernel IR states: a grid only where no
grid-wide barrier is needed, as large as the parallel extents the emitters set.

How the CUDA source spells kernels, launch sizes, grid-stride loops and host-device helpers
is checked on generated modules by tests/filecheck/codegen-cuda/*.hlo."""

from __future__ import annotations

from hlofuse.codegen import cir
from hlofuse.ir.dtypes import DType
from hlofuse.targets.c import templates
from hlofuse.targets.c.language import C
from hlofuse.targets.cuda.language import CUDA, launch_threads

F32 = DType.F32


def _loop(name: str = "i", count: int = 1000) -> cir.For:
    store = cir.Assign(cir.load("out", cir.Var(name)), cir.Const(DType.S32, 1))
    return cir.For(name, cir.Int(0), cir.Int(count), [store])


def _region(extent: int, *body: cir.Stmt) -> cir.ParallelRegion:
    return cir.ParallelRegion(list(body) or [_loop()], extent=extent)


def test_one_region_of_declarations_gets_a_grid_of_its_extent() -> None:
    body: list[cir.Stmt] = [cir.Declare(F32, "v", cir.load("p", cir.Int(0)), const=True),
                            _region(1000)]
    assert launch_threads(body) == 1000


def test_the_grid_is_the_stated_extent_whatever_the_code_looks_like() -> None:
    # No thread-share arithmetic and no telling names: the extent alone sizes the grid.
    call = cir.ExprStmt(cir.call("work", cir.Var("HLOFUSE_THREAD")))
    assert launch_threads([_region(777, call)]) == 777
    assert launch_threads([_region(3, _loop("hlofuse_t", 5000))]) == 3


def test_a_temporary_or_a_second_loop_runs_on_one_thread() -> None:
    scratch = cir.Allocate(F32, "t", 4, restrict=True)
    assert launch_threads([scratch, _region(1000)]) == 1
    copy = cir.ExprStmt(cir.call("memcpy", cir.Var("out"), cir.Var("in"), cir.Int(4)))
    assert launch_threads([copy, _region(1000)]) == 1
    assert launch_threads([_loop()]) == 1  # not in a region: sequential


def test_independent_regions_share_one_grid() -> None:
    # A horizontal or multi-output fusion: loops writing different outputs, one launch.
    assert launch_threads([_region(1000), _region(400)]) == 1000


def test_a_lone_library_call_is_shared_among_the_grid() -> None:
    pointers = [cir.Var(n) for n in ("k0", "k1", "x0", "x1", "o0", "o1")]
    threefry = cir.ExprStmt(cir.Call("hlofuse_rt_threefry2x32", (*pointers, cir.Int(5000))),
                            extent=5000)
    assert launch_threads([threefry]) == 5000
    dot = cir.ExprStmt(cir.Call("hlofuse_rt_dot_f32", tuple(pointers[:3])), extent=600)
    assert launch_threads([dot]) == 600
    assert launch_threads([dot, threefry]) == 1  # two steps: one thread runs them in order
    # The same call without a stated extent is an ordinary statement.
    plain = cir.ExprStmt(cir.Call("hlofuse_rt_threefry2x32", (*pointers, cir.Int(5000))))
    assert launch_threads([plain]) == 1


def _combining_kernel() -> cir.Function:
    """A kernel whose threads leave per-item partial results in scratch arrays for one
    combination after all of them (a whole loop's shape), with names that say nothing."""
    blocks = 6
    body: list[cir.Stmt] = [
        cir.Allocate(F32, "acc_a", blocks),
        cir.For("q", cir.Int(0), cir.Int(blocks),
                [cir.Assign(cir.load("acc_a", cir.Var("q")), cir.Const(F32, 0))]),
        cir.Allocate(F32, "acc_b", 2),
        cir.Assign(cir.load("acc_b", cir.Int(0)), cir.Const(F32, 0)),
        cir.Assign(cir.load("acc_b", cir.Int(1)), cir.Const(F32, 0)),
        cir.For("step", cir.Int(0), cir.Int(10), [
            cir.ParallelRegion([cir.For("w", cir.Int(0), cir.Int(blocks), [
                cir.Assign(cir.load("acc_a", cir.Var("w")), cir.load("x", cir.Var("w")),
                           "+=")], cir.Loop(parallel=True))], extent=blocks)]),
        cir.AfterAll([
            cir.Assign(cir.load("y", cir.Int(0)), cir.load("acc_a", cir.Int(0))),
            cir.Release("acc_a"), cir.Release("acc_b")]),
    ]
    parameters = [cir.Parameter(C.pointer(F32, True), "x", cir.Role.INPUT),
                  cir.Parameter(C.pointer(F32, False), "y", cir.Role.OUTPUT)]
    return cir.Function("k", parameters, body, cir.Linkage.KERNEL)


def test_partial_results_in_scratch_arrays_become_a_grid_with_a_last_thread() -> None:
    text = CUDA.function(_combining_kernel())
    # The grid: one thread per item of the parallel region, stated by its extent.
    assert "static const int64_t k_threads = 6;" in text
    # Scratch arrays live in device globals, each element set by the thread that owns it.
    assert "static __device__ float k_acc_a_store[6];" in text
    assert "float *acc_a = k_acc_a_store;" in text
    assert "for (int64_t q = 0 + HLOFUSE_THREAD; q < 6; q += HLOFUSE_THREADS * 1)" in text
    assert "if (((0 % HLOFUSE_THREADS) == HLOFUSE_THREAD)) acc_b[0] = 0x0.0p+0f;" in text
    # The combination runs once, in the last thread; nothing is freed.
    assert "if (hlofuse_last_thread((&k_done))) y[0] = acc_a[0];" in text
    assert "free(" not in text and "malloc" not in text


def test_c_runs_the_combination_in_line_and_frees_its_scratch() -> None:
    text = C.function(_combining_kernel())
    assert "float *acc_a = ((float *)malloc((6 * sizeof(float))));" in text
    assert "  y[0] = acc_a[0];\n  free(acc_a);\n  free(acc_b);\n}" in text


def test_types_are_spelled_by_each_language() -> None:
    restricted = cir.Pointer(DType.F16, const=True, restrict=True)
    assert C.declaration(restricted, "a") == "const uint16_t *restrict a"
    assert CUDA.declaration(restricted, "a") == "const uint16_t *__restrict__ a"
    arrays = cir.Pointer(cir.Pointer(cir.Special.VOID, fixed=True))
    assert C.declaration(arrays, "params") == "void *const *params"
    assert C.type_name(cir.Special.INT) == "int"
    assert C.type_name(C.register_type(DType.BF16)) == "float"
    shared = cir.Declare(F32, "s", dims=(32,), block_shared=True)
    assert CUDA.statements([shared], 0) == ["__shared__ float s[32];"]
    try:
        C.statements([shared], 0)
    except TypeError as e:
        assert "no memory shared by a block" in str(e)
    else:
        raise AssertionError("C printed block-shared memory")


def test_the_device_header_is_the_c_header_with_device_qualifiers() -> None:
    host = templates.header("m", "", C.helper_qualifier)
    device = templates.header("m", "", CUDA.helper_qualifier)
    assert "$" not in host
    assert device.replace(" __host__ __device__", "") == host
    # Every helper the header and the math library define is callable from device code.
    helpers = [line for line in device.splitlines() if line.startswith("static ")]
    assert len(helpers) > 30
    assert all(line.startswith(("static inline __host__ __device__ ",
                                "static __host__ __device__ ")) for line in helpers)
    math_macros = [line for line in device.splitlines()
                   if line.startswith("#define HLOFUSE_MATH_FN")]
    assert math_macros and all("static inline __host__ __device__" in m for m in math_macros)
