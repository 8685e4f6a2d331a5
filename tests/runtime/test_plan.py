"""Saved plans: what a cached executable runs and profiles with, without its module."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse.ir.parser import parse_module
from hlofuse.runtime import plan as executable_module
from hlofuse.runtime.plan import ExecutablePlan, PlanError
from hlofuse.targets.c import compile_cpu
from hlofuse.targets.c import generate_c as generate
from hlofuse.targets.c.saved import load_plan, save_plan
from hlofuse.targets.native.executable import SharedObjectExecutable as Executable
from hlofuse.toolchain import Cache

LOOP = """HloModule plan_loop
cond {
  cond.s = (s32[], f32[8]{0}, f32[3]{0}) parameter(0)
  cond.i = s32[] get-tuple-element(cond.s), index=0
  cond.n = s32[] constant(4)
  ROOT cond.lt = pred[] compare(cond.i, cond.n), direction=LT
}
body {
  body.s = (s32[], f32[8]{0}, f32[3]{0}) parameter(0)
  body.i = s32[] get-tuple-element(body.s), index=0
  body.x = f32[8]{0} get-tuple-element(body.s), index=1
  body.c = f32[3]{0} get-tuple-element(body.s), index=2
  body.one = s32[] constant(1)
  body.j = s32[] add(body.i, body.one)
  body.y = f32[8]{0} multiply(body.x, body.x)
  body.k = f32[3]{0} constant({1.5, -2, 0.25})
  body.d = f32[3]{0} add(body.c, body.k)
  ROOT body.t = (s32[], f32[8]{0}, f32[3]{0}) tuple(body.j, body.y, body.d)
}
ENTRY main {
  x = f32[8]{0} parameter(0)
  c = f32[3]{0} parameter(1)
  zero = s32[] constant(0)
  t = (s32[], f32[8]{0}, f32[3]{0}) tuple(zero, x, c)
  w = (s32[], f32[8]{0}, f32[3]{0}) while(t), condition=cond, body=body
  r = f32[8]{0} get-tuple-element(w), index=1
  d = f32[3]{0} get-tuple-element(w), index=2
  inner = (f32[3]{0}, s32[]) tuple(d, zero)
  ROOT out = (f32[8]{0}, (f32[3]{0}, s32[])) tuple(r, inner)
}
"""


def inputs() -> list[np.ndarray]:
    return [np.linspace(-1, 1, 8, dtype=np.float32), np.arange(3, dtype=np.float32)]


@pytest.fixture()
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HLOFUSE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_plan_reads_back_as_it_was_written() -> None:
    plan = executable_module.plan_of(generate(parse_module(LOOP)), "some-key")
    again = ExecutablePlan.from_bytes(plan.to_bytes())
    assert again.name == plan.name == "plan_loop"
    assert [(b.dtype, b.dims) for b in again.parameters] == [(b.dtype, b.dims)
                                                             for b in plan.parameters]
    assert [(b.dtype, b.dims, b.number) for b in again.outputs] == [
        (b.dtype, b.dims, b.number) for b in plan.outputs]
    assert again.arena_bytes == plan.arena_bytes and again.object_key == "some-key"
    assert again.profile_rows == plan.profile_rows and again.kernels == plan.kernels
    np.testing.assert_array_equal(again.constants, plan.constants)
    assert again.constants.ctypes.data % 64 == 0
    # The result's structure names the same outputs.
    assert isinstance(again.result, tuple) and again.result[0] is again.outputs[0]
    assert plan.constants.nbytes > 0  # the loop's constant array is in the pool


@pytest.mark.parametrize("damage", [
    lambda data: data[:20],
    lambda data: data.replace(b'"format": 1', b'"format": 99'),
    lambda data: data.replace(b'"arena_bytes": ', b'"arena_bytes": -'),
    lambda data: data[:-1],  # the constant pool is one byte short
    lambda data: b"not json\n" + data,
])
def test_a_malformed_plan_is_refused(damage) -> None:  # type: ignore[no-untyped-def]
    data = executable_module.plan_of(generate(parse_module(LOOP))).to_bytes()
    with pytest.raises(PlanError):
        ExecutablePlan.from_bytes(damage(data))


@pytest.mark.needs_cc
def test_a_loaded_plan_runs_and_profiles_without_generating_code(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = parse_module(LOOP)
    compiled = compile_cpu(module)
    expected = compiled(*inputs())
    save_plan("pkey", compiled, {"answer": 42})
    generated_again: list[int] = []

    def regenerate():  # type: ignore[no-untyped-def]
        generated_again.append(1)
        return generate(module)

    loaded = load_plan("pkey", regenerate)
    assert isinstance(loaded, Executable) and loaded.cache_hit
    assert loaded.plan.facts == {"answer": 42}
    got = loaded(*inputs())
    np.testing.assert_array_equal(got[0], expected[0])  # type: ignore[index]
    np.testing.assert_array_equal(got[1][0], expected[1][0])  # type: ignore[index]
    assert got[1][1] == expected[1][1]  # type: ignore[index]
    profile = loaded.profile(*inputs())
    fresh = compiled.profile(*inputs())
    assert [(r.name, r.kind, r.function, r.calls, r.bytes_read, r.bytes_written)
            for r in profile.rows] == [(r.name, r.kind, r.function, r.calls, r.bytes_read,
                                        r.bytes_written) for r in fresh.rows]
    assert loaded.kernels == compiled.kernels
    assert generated_again == []
    # What the plan does not keep is generated again, once, and checked against the library.
    assert loaded.source() == compiled.source()
    thunked = loaded.run_thunks(*inputs())
    np.testing.assert_array_equal(thunked[0], expected[0])  # type: ignore[index]
    assert generated_again == [1]


@pytest.mark.needs_cc
def test_a_plan_whose_code_changed_refuses_to_run_thunks(cache_dir: Path) -> None:
    compiled = compile_cpu(parse_module(LOOP))
    save_plan("pkey", compiled, {})
    other = parse_module(LOOP.replace("multiply(body.x, body.x)", "add(body.x, body.x)"))
    loaded = load_plan("pkey", lambda: generate(other))
    assert loaded is not None
    with pytest.raises(RuntimeError, match="differs from the cached library"):
        loaded.source()


@pytest.mark.needs_cc
def test_missing_or_damaged_entries_are_misses(cache_dir: Path) -> None:
    module = parse_module(LOOP)
    assert load_plan("nothing-here", lambda: generate(module)) is None
    compiled = compile_cpu(module)
    save_plan("pkey", compiled, {})
    cache = Cache.open()
    path = cache.root / "pkey.plan"
    path.write_bytes(path.read_bytes().replace(b"plan_loop", b"plan_lOOp"))
    assert load_plan("pkey", lambda: generate(module)) is None
    assert not path.exists()  # the damaged record is removed, to be written again
    save_plan("pkey", compiled, {})
    cache.object_path(compiled.plan.object_key).unlink()
    assert load_plan("pkey", lambda: generate(module)) is None
