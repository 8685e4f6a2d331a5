"""The kernel IR is target-neutral: types are hlofuse dtypes, and what a target needs to run a
kernel in parallel (extents, scratch arrays, what runs after all threads, argument roles and
lane dimensions) is stated by the emitters, on real kernels."""

from __future__ import annotations

from hlofuse.analysis.whole_loop_config import read_whole_loop_config
from hlofuse.codegen import cir, cir_walks
from hlofuse.codegen.kernel import DEFAULT_OPTIONS, KernelEmitter, emit_kernel
from hlofuse.codegen.whole_loop import WholeLoopEmitter
from hlofuse.envs import cartpole
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.dtypes import DType
from hlofuse.ir.parser import parse_module
from hlofuse.runtime.program import build_program
from hlofuse.targets.c.language import C

N_ENVS, STEPS = 300, 5


def _types(function: cir.Function) -> list[object]:
    """Every type the function's IR names."""
    out: list[object] = [p.type for p in function.parameters]
    for top in function.body:
        for s in cir_walks.statements(top):
            if isinstance(s, cir.Declare):
                out.append(s.type)
            elif isinstance(s, cir.Allocate):
                out.append(s.element)
            elif isinstance(s, cir.For):
                out.append(s.type)
            for expr in cir_walks.expressions(s):
                out += [e.to for e in cir.walk(expr) if isinstance(e, cir.Cast)]
                out += [e.of for e in cir.walk(expr) if isinstance(e, cir.TypeName)]
    return out


def _is_type(t: object) -> bool:
    if isinstance(t, cir.Pointer):
        return _is_type(t.element)
    return isinstance(t, DType | cir.Special)


def _whole_loop() -> WholeLoopEmitter:
    module = cartpole.trace(cartpole.PRESETS["baseline"], N_ENVS, STEPS)
    fused = run_strategy(module, "max", debug=False).module
    (spec,) = [t.spec for t in build_program(fused).kernel_thunks() if t.spec.own_emitter]
    lanes = read_whole_loop_config(spec.backend_config)
    assert lanes is not None
    emitter = WholeLoopEmitter(spec, C, lanes)
    emitter.emit()
    return emitter


def test_a_whole_loop_states_its_grid_scratch_combination_roles_and_lanes() -> None:
    emitter = _whole_loop()
    function = emitter.function
    assert function is not None and function.kernel
    assert all(_is_type(t) for t in _types(function))
    statements = [s for top in function.body for s in cir_walks.statements(top)]
    regions = [s for s in statements if isinstance(s, cir.ParallelRegion)]
    assert emitter.blocks > 1
    assert [r.extent for r in regions] == [emitter.blocks]  # the blocks of lanes
    # The blocks' partial sums (episode count, return sum) are scratch arrays combined once,
    # after every block is done, and released there.
    scratch = [s for s in function.body if isinstance(s, cir.Allocate)]
    assert len(scratch) == len(emitter.plan.accumulators) >= 1
    assert all(s.count == emitter.blocks for s in scratch)
    (after,) = [s for s in function.body if isinstance(s, cir.AfterAll)]
    released = {s.name for s in cir_walks.statements(after) if isinstance(s, cir.Release)}
    assert released == {s.name for s in scratch}
    # Inputs are read, each output may overwrite the initial value it replaces; the state's
    # arrays say which dimension holds the lanes (CartPole's f32[4, N] state: dimension 1).
    roles = [p.role for p in function.parameters]
    assert roles.count(cir.Role.INPUT) == len(emitter.inputs)
    assert roles.count(cir.Role.IN_PLACE) == len(emitter.in_place) >= 1
    laned = [p for p in function.parameters if p.lane_dimension is not None]
    assert laned
    for p in laned:
        pointer = p.type
        assert isinstance(pointer, cir.Pointer)
    state = [p.lane_dimension for p in function.parameters
             if p.role is not cir.Role.INPUT and p.lane_dimension is not None]
    assert state and all(d in (0, 1) for d in state)


def test_a_loop_kernel_states_its_extent_and_an_in_place_update() -> None:
    module = parse_module("""
HloModule m
fused {
  p = f32[200,300] parameter(0)
  u = f32[1,300] parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  ROOT d = f32[200,300] dynamic-update-slice(p, u, i, z)
}
exp {
  a = f32[200,300] parameter(0)
  ROOT e = f32[200,300] exponential(a)
}
ENTRY main {
  x = f32[200,300] parameter(0)
  v = f32[1,300] parameter(1)
  j = s32[] parameter(2)
  f = f32[200,300] fusion(x, v, j), kind=kLoop, calls=fused
  ROOT g = f32[200,300] fusion(f), kind=kLoop, calls=exp
}
""")
    specs = {t.spec.label: t.spec for t in build_program(module).kernel_thunks()}
    emitter = KernelEmitter(specs["g"], C, DEFAULT_OPTIONS, set())
    emitter.emit()
    function = emitter.function
    assert function is not None and function.kernel
    assert all(_is_type(t) for t in _types(function))
    (region,) = [s for s in function.body if isinstance(s, cir.ParallelRegion)]
    assert region.extent == 200 * 300  # a flat loop's iterations shared among threads
    # An element-wise kernel may write over its input: its output is in place.
    assert [p.role for p in function.parameters] == [cir.Role.INPUT, cir.Role.IN_PLACE]
    # So may a dynamic-update-slice write over its operand.
    assert emit_kernel(specs["f"], C).in_place == ((0, 0),)


def test_library_calls_state_the_items_they_split() -> None:
    module = parse_module("""
HloModule m
ENTRY main {
  a = f32[3,40,16] parameter(0)
  b = f32[3,16,8] parameter(1)
  ROOT d = f32[3,40,8] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0},
      lhs_contracting_dims={2}, rhs_contracting_dims={1}
}
""")
    (thunk,) = build_program(module).kernel_thunks()
    kept = emit_kernel(thunk.spec, C).retargetable
    assert kept is not None
    calls = [s for s in kept.function.body if isinstance(s, cir.ExprStmt) and s.extent]
    assert [c.extent for c in calls] == [3 * 40]  # the rows of every batch


def test_speculable_loads_are_the_arrays_declared_so_not_names() -> None:
    emitter = _whole_loop()
    function = emitter.function
    assert function is not None
    declared = {s.name for top in function.body for s in cir_walks.statements(top)
                if isinstance(s, cir.Declare) and s.speculable}
    # The step's lane-input tables and the lanes' state, each declared speculable.
    assert set(emitter.tables) | set(emitter.state_arrays) <= declared
    assert emitter.tables and emitter.state_arrays
    assert declared == emitter.body.speculable
    state, element = next(iter(emitter.state_arrays.items()))
    assert element in emitter.plan.per_lane
    position = (cir.Int(0), cir.Var("l"))
    assert emitter.speculable_lane_load(cir.load(state, *position), {})
    # The same load from an array not declared speculable may not run unasked, whatever its
    # name looks like.
    emitter.body.speculable.discard(state)
    assert not emitter.speculable_lane_load(cir.load(state, *position), {})
    assert not emitter.speculable_lane_load(cir.load("s9", *position), {})


def _small_kernels(body: str, n: int) -> dict[str, bool]:
    module = parse_module(f"""
HloModule m
fused {{
  a = f32[{n}] parameter(0)
{body}
}}
ENTRY main {{
  x = f32[{n}] parameter(0)
  ROOT f = f32[{n}] fusion(x), kind=kLoop, calls=fused
}}
""")
    return {t.spec.label: emit_kernel(t.spec, C).is_small
            for t in build_program(module).kernel_thunks()}


def test_small_kernels_are_few_elements_of_little_work() -> None:
    """-O1 (a small kernel) where the elements are few and each costs little; vectorised at
    -O3 where each takes math functions: six of them an element over 1,024 elements."""
    cheap = "  b = f32[{n}] add(a, a)\n  ROOT c = f32[{n}] multiply(b, a)"
    trig = "\n".join(f"  s{k} = f32[{{n}}] {'sine' if k % 2 else 'cosine'}"
                     f"({'a' if k == 0 else f's{k - 1}'})" for k in range(5))
    trig += "\n  ROOT s5 = f32[{n}] sine(s4)"
    assert _small_kernels(cheap.format(n=1024), 1024) == {"f": True}
    assert _small_kernels(trig.format(n=1024), 1024) == {"f": False}
    assert _small_kernels(trig.format(n=64), 64) == {"f": True}
    assert _small_kernels(cheap.format(n=4096), 4096) == {"f": False}
