"""The launch size a CUDA kernel declares: a grid only where no grid-wide barrier is needed.

How the CUDA source spells kernels, launch sizes, grid-stride loops and host-device helpers
is checked on generated modules by tests/filecheck/codegen-cuda/*.hlo."""

from __future__ import annotations

from hlofuse.codegen import cir
from hlofuse.ir.dtypes import DType
from hlofuse.targets.cuda.language import launch_threads


def _parallel_loop() -> cir.For:
    store = cir.Assign(cir.load("out", cir.Var("i")), cir.Const(DType.S32, 1))
    return cir.For("i", cir.Int(0), cir.Int(1000), [store], cir.Loop(parallel=True))


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


def test_a_lone_library_call_is_shared_among_the_grid() -> None:
    pointers = [cir.Var(n) for n in ("k0", "k1", "x0", "x1", "o0", "o1")]
    threefry = cir.ExprStmt(cir.Call("hlofuse_rt_threefry2x32", (*pointers, cir.Int(5000))))
    assert launch_threads([threefry]) == 5000
    sizes = [cir.Int(v) for v in (2, 300, 7, 5, 0, 0, 0, 0, 0, 0)]
    dot = cir.ExprStmt(cir.Call("hlofuse_rt_dot_f32", (*pointers[:3], *sizes)))
    assert launch_threads([dot]) == 600  # batch * m rows
    assert launch_threads([dot, threefry]) == 1  # two steps: one thread runs them in order
