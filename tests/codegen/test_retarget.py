"""A kernel whose outputs got some inputs' buffers reads those inputs through the outputs'
pointers. `emit_aliased` prints that version from the first emission's statements (loads
retargeted) instead of emitting the kernel again; the text must be what emitting again gives."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hlofuse.codegen import cir
from hlofuse.codegen.kernel import emit_aliased, emit_kernel
from hlofuse.codegen.retargeting import LoadRetargeting
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.dtypes import DType
from hlofuse.ir.parser import parse_module
from hlofuse.targets.c import generate_c as generate
from hlofuse.targets.c.language import C

ROLLOUTS = Path(__file__).parents[1] / "data" / "rollouts"
CODEGEN_DATA = Path(__file__).parent / "data"


def test_loads_are_retargeted_and_nothing_else() -> None:
    i = cir.Var("i")
    body: list[cir.Stmt] = [
        cir.Declare(DType.F32, "v", cir.Binary("+", cir.load("in0", i), cir.load("in1", i)),
                    const=True),
        cir.Assign(cir.load("out0", i), cir.Var("v")),
    ]
    loop = [cir.For("i", cir.Int(0), cir.Int(8), body)]
    retargeted = LoadRetargeting({"in1": "out0"}).apply(loop)
    assert retargeted is not None
    (new_loop,) = retargeted
    assert isinstance(new_loop, cir.For)
    declare = new_loop.body[0]
    assert isinstance(declare, cir.Declare)
    assert declare.init == cir.Binary("+", cir.load("in0", i), cir.load("out0", i))
    assert new_loop.body[1] == body[1]
    assert body[0].init == cir.Binary("+", cir.load("in0", i), cir.load("in1", i))  # unchanged
    # A pointer passed whole (to memcpy, a library call) cannot be retargeted by loads alone.
    copy: list[cir.Stmt] = [cir.ExprStmt(cir.call("memcpy", cir.Var("out0"), cir.Var("in1"),
                                                  cir.Int(32)))]
    assert LoadRetargeting({"in1": "out0"}).apply(copy) is None


# Every rollout under both strategies is a sweep (thorough); one rollout per strategy is fast.
FAST_ROLLOUTS = {("catch", "xla"), ("pendulum", "none")}


def _programs() -> list[object]:
    return [pytest.param(str(p), "none", id=f"{p.stem}-none")
            for p in sorted(CODEGEN_DATA.glob("*.hlo"))] + [
        pytest.param(str(ROLLOUTS / f"{name}.cpu.hlo"), s, id=f"{name}.cpu-{s}",
                     marks=() if (name, s) in FAST_ROLLOUTS else pytest.mark.thorough)
        for name in ("catch", "bandit", "pendulum") for s in ("none", "xla")]


@pytest.mark.parametrize(("path", "strategy"), _programs())
def test_retargeted_kernels_are_what_emitting_again_gives(path: str, strategy: str) -> None:
    module = parse_module(Path(path).read_text())
    if strategy != "none" or "fusion" not in Path(path).read_text():
        module = run_strategy(module, strategy, debug=False).module
    generated = generate(module)
    aliased = [t for t in generated.program.kernel_thunks()
               if t.spec.aliased and not t.spec.own_emitter]
    retargeted: dict[str, bool] = {}
    for thunk in aliased:
        first = emit_kernel(dataclasses.replace(thunk.spec, aliased=()), C)
        again = emit_kernel(thunk.spec, C)
        fast = emit_aliased(first, thunk.spec, C)
        assert fast.code == again.code, thunk.spec.label
        assert fast.in_place == again.in_place
        retargeted[thunk.spec.kind] = first.retargetable is not None
    if "rollouts" in path:
        # Element-wise updates of the loop state are retargeted; an update or a scatter,
        # which copies its operand only into another buffer, is emitted again.
        assert retargeted.get("add") or retargeted.get("kLoop")
        for kind in ("dynamic-update-slice", "scatter"):
            assert not retargeted.get(kind, False)
        if strategy == "none" and "pendulum" not in path:
            assert retargeted["dynamic-update-slice"] is False
        if strategy == "none" and "catch" in path:
            assert retargeted["scatter"] is False
