"""Whole-loop kernels compiled to C return what the reference interpreter returns: bit for bit,
except float accumulators (reassociated sums, compared within float tolerance)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from hlofuse.codegen import whole_loop as emitter
from hlofuse.envs import cartpole
from hlofuse.fusion.beyond_xla.whole_loop import WholeLoopFusion
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.attrs import SliceDim
from hlofuse.ir.builder import ComputationBuilder, NameUniquer
from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Computation, Instruction, Module, make_module
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.ir.shapes import Shape
from hlofuse.passes.manager import Pipeline
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.targets.c import compile_cpu, generate_c

from tests.analysis.test_parallel_loop import loop_text
from tests.codegen.test_ops import assert_same
from tests.conftest import CORPUS_DIR, assert_matches, load_corpus_case
from tests.hlo_programs import RandomProgram, programs

pytestmark = pytest.mark.needs_cc

REWRITES = "none+rng_expansion+concat_forwarding+scalarize_state"


def whole_loop(module: Module, **knobs: int) -> Module:
    fused, changed = Pipeline([WholeLoopFusion(**knobs)]).run(module)
    assert changed, "whole-loop fusion did not fire"
    return fused


def kernel_kinds(module: Module) -> list[str]:
    return [str(k.kind) for k in compile_cpu(module).kernels]


def assert_compiled_matches(module: Module, inputs: list[np.ndarray], reference: Module | None =
                            None, float_accumulators: bool = True) -> list[np.ndarray]:
    """The compiled module's outputs against the interpreter's on `reference` (default: the
    module itself): integers exact; floats within 1e-5 (float sums are reassociated, and the
    math library is within an ulp of NumPy), or exact with `float_accumulators=False`."""
    executable = compile_cpu(module)
    assert "kCustom" in [k.kind for k in executable.kernels]
    actual = flatten_value(executable(*inputs))
    expected = flatten_value(evaluate(reference or module, inputs))
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        a = np.asarray(a)
        assert a.dtype == e.dtype and a.shape == e.shape, f"out{k}"
        if e.dtype.kind == "f" and float_accumulators:
            np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=1e-5,
                                       atol=1e-6, equal_nan=True, err_msg=f"out{k}")
        else:
            np.testing.assert_array_equal(a, e, err_msg=f"out{k}")
    return actual


# --- CartPole -----------------------------------------------------------------------------


@pytest.mark.parametrize("variant,n_envs,n_steps", [
    ("baseline", 37, 13),  # 37 = 4 blocks of 8 and 5 tail lanes
    ("deterministic", 37, 40),
    ("rng=fused,state=split", 1, 9),
    ("baseline", 2, 7),  # the u32[2] key looks per-environment
    ("unroll=2", 13, 8),  # two steps per iteration: accumulated through a chain
    ("state=split,deterministic", 64, 25),
])
def test_cartpole_variants_match_the_interpreter(variant: str, n_envs: int, n_steps: int) -> None:
    spec = cartpole.parse_variant(variant)
    module = cartpole.trace(spec, n_envs, n_steps)
    fused = run_strategy(module, REWRITES + "+whole_loop", debug=False).module
    aux = np.asarray(cartpole._rollout_input(spec, n_envs, 0, None))
    states, finished, returns = assert_compiled_matches(fused, [aux], module)
    # The return sum is a sum of episode lengths: whole numbers, exact in float32 here.
    assert float(returns) == float(flatten_value(evaluate(module, [aux]))[2])
    if not spec.deterministic and n_steps > 10:
        assert int(finished) > 0  # episodes ended and were reset, so resets were exercised


def test_packed_state_without_scalarisation() -> None:
    spec = cartpole.PRESETS["baseline"]
    module = cartpole.trace(spec, 13, 11)
    fused = run_strategy(module, "none+rng_expansion+whole_loop", debug=False).module
    aux = np.asarray(cartpole._rollout_input(spec, 13, 0, None))
    assert_compiled_matches(fused, [aux], module)


def test_max_strategy_on_the_baseline_program() -> None:
    spec = cartpole.PRESETS["baseline"]
    module = cartpole.trace(spec, 21, 12)
    result = run_strategy(module, "max+default_costs", debug=False)
    assert kernel_kinds(result.module).count("kCustom") == 1
    aux = np.asarray(cartpole._rollout_input(spec, 21, 0, None))
    assert_compiled_matches(result.module, [aux], module)


def test_rollout_agrees_with_the_numpy_dynamics() -> None:
    """The deterministic rollout through jit(backend="cpu") under `max`."""
    init = cartpole.initial_states(19, 3)
    spec = cartpole.PRESETS["deterministic"]
    compiled = cartpole.rollout(spec, 19, 30, init=init, strategy="max+default_costs",
                                backend="cpu")
    reference = cartpole.rollout(spec, 19, 30, init=init, strategy="none")
    np.testing.assert_array_equal(compiled.states, reference.states)
    assert (compiled.finished, compiled.return_sum) == (reference.finished, reference.return_sum)


# --- hand-written loops ---------------------------------------------------------------------


def run_text(text: str, inputs: list[np.ndarray], **knobs: int) -> list[np.ndarray]:
    module = parse_module(text)
    return assert_compiled_matches(whole_loop(module, **knobs), inputs, module)


STRUCTURAL = loop_text("""
  x = f32[13,4]{1,0} get-tuple-element(p), index=1
  tab = f32[20]{0} get-tuple-element(p), index=2
  mx = f32[] get-tuple-element(p), index=3
  r = f32[13,4]{1,0} reverse(x), dimensions={1}
  head = f32[13,1]{1,0} slice(r), slice={[0:13], [0:1]}
  tail = f32[13,3]{1,0} slice(r), slice={[0:13], [1:4]}
  rot = f32[13,4]{1,0} concatenate(tail, head), dimensions={1}
  zero = f32[] constant(0)
  rows = f32[13]{0} reduce(rot, zero), dimensions={1}, to_apply=add_f32
  bc = f32[4,13]{1,0} broadcast(rows), dimensions={1}
  tb = f32[13,4]{1,0} transpose(bc), dimensions={1,0}
  quarter = f32[] constant(0.25)
  quarters = f32[13,4]{1,0} broadcast(quarter), dimensions={}
  mean = f32[13,4]{1,0} multiply(tb, quarters)
  twenty = s32[] constant(20)
  at = s32[] remainder(i, twenty)
  picked = f32[1]{0} dynamic-slice(tab, at), dynamic_slice_sizes={1}
  pick = f32[] reshape(picked)
  picks = f32[13,4]{1,0} broadcast(pick), dimensions={}
  env = f32[13,4]{1,0} iota(), iota_dimension=0
  col = f32[13,4]{1,0} iota(), iota_dimension=1
  shifted = f32[13,4]{1,0} add(env, col)
  mixed = f32[13,4]{1,0} add(mean, picks)
  y0 = f32[13,4]{1,0} add(mixed, shifted)
  y = f32[13,4]{1,0} sine(y0)
  padded = f32[13,6]{1,0} pad(y, zero), padding=0_0x1_1
  inner = f32[13,4]{1,0} slice(padded), slice={[0:13], [1:5]}
  one_f = f32[] constant(1)
  ones = f32[20]{0} broadcast(one_f), dimensions={}
  tab1 = f32[20]{0} add(tab, ones)
  low = f32[] constant(-inf)
  largest = f32[] reduce(inner, low), dimensions={0,1}, to_apply=max_f32
  mx1 = f32[] maximum(mx, largest)
  ROOT t = (s32[], f32[13,4]{1,0}, f32[20]{0}, f32[]) tuple(next, inner, tab1, mx1)""",
                       "(s32[], f32[13,4]{1,0}, f32[20]{0}, f32[])", extra="""
max_f32 {
  ma = f32[] parameter(0)
  mb = f32[] parameter(1)
  ROOT mm = f32[] maximum(ma, mb)
}
""")


def structural_inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [np.asarray(0, np.int32), rng.standard_normal((13, 4)).astype(np.float32),
            rng.standard_normal(20).astype(np.float32), np.asarray(-np.inf, np.float32)]


@pytest.mark.parametrize("lanes", [1, 3, 8, 16])
def test_structural_ops_inside_an_environment(lanes: int) -> None:
    run_text(STRUCTURAL, structural_inputs(), lanes=lanes)


def test_many_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """More steps than a chunk holds: the state goes to the outputs and comes back."""
    monkeypatch.setattr(emitter, "MAX_CHUNK", 4)
    monkeypatch.setattr(emitter, "MIN_CHUNK", 4)
    text = STRUCTURAL.replace("n = s32[] constant(5)", "n = s32[] constant(11)")
    run_text(text, structural_inputs())


def test_loop_that_never_runs_returns_its_initial_state() -> None:
    text = STRUCTURAL.replace("direction=LT", "direction=GT")
    inputs = structural_inputs()
    out = run_text(text, inputs)
    for a, b in zip(out, inputs):
        np.testing.assert_array_equal(a, b)


INTEGER_STATE = "(s32[], u32[13,3]{1,0}, f16[13]{0}, u32[2]{0}, u32[], s32[], pred[])"
INTEGER_ACCUMULATORS = loop_text("""
  x = u32[13,3]{1,0} get-tuple-element(p), index=1
  h = f16[13]{0} get-tuple-element(p), index=2
  key = u32[2]{0} get-tuple-element(p), index=3
  k0s = u32[1]{0} slice(key), slice={[0:1]}
  k0 = u32[] reshape(k0s)
  ui = u32[] convert(i)
  word = u32[] xor(k0, ui)
  words = u32[13,3]{1,0} broadcast(word), dimensions={}
  env = u32[13,3]{1,0} iota(), iota_dimension=0
  mul = u32[] constant(2654435761)
  muls = u32[13,3]{1,0} broadcast(mul), dimensions={}
  y0 = u32[13,3]{1,0} multiply(x, muls)
  y1 = u32[13,3]{1,0} xor(y0, words)
  y = u32[13,3]{1,0} add(y1, env)
  five = u32[] constant(5)
  fives = u32[13,3]{1,0} broadcast(five), dimensions={}
  yr = u32[13,3]{1,0} shift-right-logical(y, fives)
  zero_u = u32[] constant(0)
  xsum = u32[] reduce(yr, zero_u), dimensions={0,1}, to_apply=xor_u32
  xa = u32[] get-tuple-element(p), index=4
  xa1 = u32[] xor(xa, xsum)
  big = s32[13,3]{1,0} convert(yr)
  top = s32[] constant(2147483647)
  low = s32[] reduce(big, top), dimensions={0,1}, to_apply=min_s32
  mn = s32[] get-tuple-element(p), index=5
  mn1 = s32[] minimum(low, mn)
  bit = u32[] constant(1)
  bits = u32[13,3]{1,0} broadcast(bit), dimensions={}
  odd0 = u32[13,3]{1,0} and(yr, bits)
  odd = pred[13,3]{1,0} compare(odd0, bits), direction=EQ
  no = pred[] constant(false)
  anyodd = pred[] reduce(odd, no), dimensions={0,1}, to_apply=or_pred
  seen = pred[] get-tuple-element(p), index=6
  seen1 = pred[] or(seen, anyodd)
  yf = f32[13,3]{1,0} convert(yr)
  zero_f = f32[] constant(0)
  rows = f32[13]{0} reduce(yf, zero_f), dimensions={1}, to_apply=add_f32
  hh = f16[13]{0} convert(rows)
  half = f16[] constant(0.5)
  halves = f16[13]{0} broadcast(half), dimensions={}
  hm = f16[13]{0} multiply(h, halves)
  scale = f16[] constant(0.0001)
  scales = f16[13]{0} broadcast(scale), dimensions={}
  hs = f16[13]{0} multiply(hh, scales)
  h1 = f16[13]{0} add(hm, hs)
  ROOT t = STATE tuple(next, yr, h1, key, xa1, mn1, seen1)""".replace("STATE", INTEGER_STATE),
                                 INTEGER_STATE, extra="""
xor_u32 {
  xa_ = u32[] parameter(0)
  xb_ = u32[] parameter(1)
  ROOT xr_ = u32[] xor(xa_, xb_)
}

min_s32 {
  na = s32[] parameter(0)
  nb = s32[] parameter(1)
  ROOT nm = s32[] minimum(na, nb)
}

or_pred {
  oa = pred[] parameter(0)
  ob = pred[] parameter(1)
  ROOT oo = pred[] or(oa, ob)
}
""")


def test_integer_accumulators_and_half_precision_state_are_exact() -> None:
    rng = np.random.default_rng(1)
    inputs = [np.asarray(0, np.int32), rng.integers(0, 2**32, (13, 3), dtype=np.uint32),
              rng.standard_normal(13).astype(np.float16),
              np.asarray([7, 11], np.uint32), np.asarray(3, np.uint32),
              np.asarray(2**31 - 1, np.int32), np.asarray(False)]
    module = parse_module(INTEGER_ACCUMULATORS)
    fused = whole_loop(module)
    assert_compiled_matches(fused, inputs, module, float_accumulators=False)


def test_initial_values_used_after_the_loop_are_not_overwritten() -> None:
    text = loop_text("""
  x = f32[8]{0} get-tuple-element(p), index=1
  y = f32[8]{0} add(x, x)
  ROOT t = (s32[], f32[8]{0}) tuple(next, y)""").replace(
        "  ROOT loop = (s32[], f32[8]{0}) while(init), condition=cond, body=body",
        "  loop = (s32[], f32[8]{0}) while(init), condition=cond, body=body\n"
        "  after = f32[8]{0} get-tuple-element(loop), index=1\n"
        "  ROOT both = (f32[8]{0}, f32[8]{0}) tuple(after, x1)")
    x = np.arange(8, dtype=np.float32)
    out = run_text(text, [np.asarray(0, np.int32), x])
    np.testing.assert_array_equal(out[1], x)
    np.testing.assert_array_equal(out[0], x * 32)


# --- deferred selects and small-argument math ----------------------------------------------
# The modules are FileCheck files (tests/filecheck/codegen-c/), whose CHECK lines test the
# kernel's C: a costly select operand drawn apart for the lanes that pick it, and the
# small-argument forms of sin, cos and fmod with their fallbacks.

CODEGEN_C = Path(__file__).parents[1] / "filecheck" / "codegen-c"


def codegen_c_module(name: str) -> str:
    return (CODEGEN_C / name).read_text()


def _reset_inputs() -> list[np.ndarray]:
    x = np.random.default_rng(4).uniform(-1, 2, 37).astype(np.float32)
    return [np.asarray(0, np.int32), x]


@pytest.mark.parametrize("name", ["select-deferred-when-true.hlo",
                                  "select-deferred-when-false.hlo"])
@pytest.mark.parametrize("lanes", [1, 8, 16])
def test_costly_state_free_select_operand_is_deferred(lanes: int, name: str) -> None:
    """The hash is computed in a second lane loop, run only in a step where some lane of the
    block picks it, for the lanes that pick it (one lane: a branch around it)."""
    module = parse_module(codegen_c_module(name))
    fused = whole_loop(module, lanes=lanes)
    assert_compiled_matches(fused, _reset_inputs(), module, float_accumulators=False)


def test_cheap_select_operand_is_not_deferred() -> None:
    module = parse_module(codegen_c_module("select-cheap-not-deferred.hlo"))
    fused = whole_loop(module, lanes=16)
    assert_compiled_matches(fused, _reset_inputs(), module, float_accumulators=False)


@pytest.mark.parametrize("huge", [False, True], ids=["small", "huge"])
@pytest.mark.parametrize("lanes", [1, 16])
def test_small_argument_math_with_huge_arguments(lanes: int, huge: bool) -> None:
    """sin and cos of the state use the small forms; a step where some lane's argument is
    beyond their limit (or not finite) takes the full functions, still exact to the bound."""
    x = np.random.default_rng(6).uniform(-4, 4, 37).astype(np.float32)
    if huge:
        x[[0, 5, 17, 36]] = [1e30, -3e5, np.inf, np.nan]
    inputs = [np.asarray(0, np.int32), x, np.zeros(37, np.float32)]
    module = parse_module(codegen_c_module("whole-loop-small-trig.hlo"))
    fused = whole_loop(module, lanes=lanes)
    out = assert_compiled_matches(fused, inputs, module)
    assert np.isnan(out[2][[17, 36]]).all() == huge


@pytest.mark.parametrize("huge", [False, True], ids=["small", "huge"])
@pytest.mark.parametrize("lanes", [1, 16])
def test_fmod_takes_its_small_form_until_an_angle_grows_large(lanes: int, huge: bool) -> None:
    """An angle wrapped with `%` (pendulum's cost) runs fmod's last long-division step only;
    in a step where some lane's dividend reaches 2^28 divisors, or is not finite, the full
    function runs: bit for bit the reference's remainder either way."""
    x = np.random.default_rng(7).uniform(-9, 9, 37).astype(np.float32)
    if huge:
        x[[0, 5, 17, 36]] = [1e9, -3e12, np.inf, np.nan]
    inputs = [np.asarray(0, np.int32), x, np.zeros(37, np.float32)]
    module = parse_module(codegen_c_module("whole-loop-small-fmod.hlo"))
    fused = whole_loop(module, lanes=lanes)
    assert_compiled_matches(fused, inputs, module, float_accumulators=False)


@pytest.mark.parametrize("huge", [False, True], ids=["small", "huge"])
@pytest.mark.parametrize("lanes", [1, 16])
def test_speculative_small_argument_math(lanes: int, huge: bool) -> None:
    """sin and cos of arguments too costly to check before the step run in their small forms;
    a step where some lane's argument was beyond their limit runs again with the full
    functions from the state and sums it started with."""
    scale = 40.0 if huge else 1e-3  # x triples every step: huge arguments after a few steps
    x = np.random.default_rng(8).uniform(-scale, scale, 37).astype(np.float32)
    y = np.random.default_rng(9).uniform(-1, 1, 37).astype(np.float32)
    inputs = [np.asarray(0, np.int32), x, y, np.asarray(0.5, np.float32)]
    module = parse_module(codegen_c_module("whole-loop-speculative-trig.hlo"))
    fused = whole_loop(module, lanes=lanes)
    out = assert_compiled_matches(fused, inputs, module)
    if huge:
        assert np.abs(out[1]).max() > 2.0**11  # x * x: arguments beyond the forms' limit


# --- random loops ---------------------------------------------------------------------------


class LoopMaker:
    """Random parallel loops: per-environment f32 and u32 state of one or two values per
    environment, updated by element-wise ops, structural ops along the second dimension, the
    environment index and uniform values; a step counter, a uniform key, and accumulators."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.names = NameUniquer()
        self.n = int(self.rng.choice([1, 2, 5, 9, 24]))
        self.k = int(self.rng.choice([1, 3]))
        self.trips = int(self.rng.choice([0, 1, 3, 7]))

    def reducer(self, op: Op, dtype: DType) -> Computation:
        b = ComputationBuilder(self.names.unique(f"reduce_{op.text}"), self.names)
        a = b.parameter(0, Shape.scalar(dtype))
        c = b.parameter(1, Shape.scalar(dtype))
        b.add(op, [a, c])
        return b.build()

    def pick(self, options: list[str]) -> str:
        return str(self.rng.choice(options))

    def float_update(self, b: ComputationBuilder, x: Instruction, u: Instruction,
                     i: Instruction) -> Instruction:
        shape = x.shape
        lane_index = b.add(Op.IOTA, attrs={"iota_dimension": 0}, shape=shape)
        step = b.add(Op.CONVERT, [i], shape=Shape.scalar(DType.F32))
        steps = b.add(Op.BROADCAST, [step], attrs={"dimensions": ()}, shape=shape)
        us = b.add(Op.BROADCAST, [u], attrs={"dimensions": ()}, shape=shape)
        value = x
        for _ in range(int(self.rng.integers(2, 6))):
            kind = self.pick(["binary", "unary", "structural", "reduce", "select"])
            if kind == "binary":
                other = [lane_index, steps, us, value, x][int(self.rng.integers(0, 5))]
                op = [Op.ADD, Op.SUBTRACT, Op.MULTIPLY, Op.MAXIMUM, Op.MINIMUM][
                    int(self.rng.integers(0, 5))]
                value = b.add(op, [value, other])
            elif kind == "unary":
                op = [Op.SINE, Op.COSINE, Op.TANH, Op.NEGATE, Op.ABS][int(self.rng.integers(0, 5))]
                value = b.add(op, [value])
            elif kind == "structural" and self.k > 1:
                if self.rng.integers(0, 2):
                    value = b.add(Op.REVERSE, [value], attrs={"dimensions": (1,)})
                else:
                    head = b.add(Op.SLICE, [value], attrs={"slice": (
                        SliceDim(0, self.n), SliceDim(0, 1))})
                    tail = b.add(Op.SLICE, [value], attrs={"slice": (
                        SliceDim(0, self.n), SliceDim(1, self.k))})
                    value = b.add(Op.CONCATENATE, [tail, head], attrs={"dimensions": (1,)})
            elif kind == "reduce" and self.k > 1:
                zero = b.constant(0, DType.F32)
                rows = b.add(Op.REDUCE, [value, zero], attrs={"dimensions": (1,)},
                             calls=[self.reducer(Op.ADD, DType.F32)])
                value = b.add(Op.BROADCAST, [rows], attrs={"dimensions": (0,)}, shape=shape)
            elif kind == "select":
                pred = b.add(Op.COMPARE, [value, us], attrs={"direction": "GT"})
                value = b.add(Op.SELECT, [pred, value, lane_index])
        bound = b.add(Op.TANH, [value])  # keeps the values bounded
        return b.add(Op.ADD, [bound, x])

    def int_update(self, b: ComputationBuilder, y: Instruction, key: Instruction,
                   i: Instruction) -> Instruction:
        shape = y.shape
        lane_index = b.add(Op.IOTA, attrs={"iota_dimension": 0}, shape=shape)
        word = b.add(Op.RESHAPE, [b.add(Op.SLICE, [key], attrs={"slice": (SliceDim(1, 2),)})],
                     shape=Shape.scalar(DType.U32))
        step = b.add(Op.CONVERT, [i], shape=Shape.scalar(DType.U32))
        mixed = b.add(Op.XOR, [word, step])
        words = b.add(Op.BROADCAST, [mixed], attrs={"dimensions": ()}, shape=shape)
        value = b.add(Op.ADD, [y, lane_index])
        for _ in range(int(self.rng.integers(1, 4))):
            op = [Op.XOR, Op.MULTIPLY, Op.ADD, Op.SHIFT_RIGHT_LOGICAL][int(self.rng.integers(0, 4))]
            value = b.add(op, [value, words])
        return value

    def build(self) -> tuple[Module, list[np.ndarray]]:
        n, k = self.n, self.k
        f_shape = Shape.array(DType.F32, (n, k))
        u_shape = Shape.array(DType.U32, (n,))
        state = Shape.tuple_of([Shape.scalar(DType.S32), f_shape, u_shape,
                                Shape.array(DType.U32, (2,)), Shape.scalar(DType.F32),
                                Shape.scalar(DType.U32), Shape.scalar(DType.F32)])
        body = ComputationBuilder(self.names.unique("body"), self.names)
        p = body.parameter(0, state)
        i, x, y, key, u, acc_u, acc_f = (
            body.add(Op.GET_TUPLE_ELEMENT, [p], attrs={"index": j}) for j in range(7))
        x1 = self.float_update(body, x, u, i)
        y1 = self.int_update(body, y, key, i)
        one = body.constant(1, DType.S32)
        i1 = body.add(Op.ADD, [i, one])
        u1 = body.add(Op.MULTIPLY, [u, body.constant(0.5, DType.F32)])
        zero_u = body.constant(0, DType.U32)
        xs = body.add(Op.REDUCE, [y1, zero_u], attrs={"dimensions": (0,)},
                      calls=[self.reducer(Op.ADD, DType.U32)])
        acc_u1 = body.add(Op.ADD, [acc_u, xs])
        low = body.constant(-np.inf, DType.F32)
        mx = body.add(Op.REDUCE, [x1, low], attrs={"dimensions": (0, 1)},
                      calls=[self.reducer(Op.MAXIMUM, DType.F32)])
        acc_f1 = body.add(Op.MAXIMUM, [mx, acc_f])
        body.add(Op.TUPLE, [i1, x1, y1, key, u1, acc_u1, acc_f1])
        cond = ComputationBuilder(self.names.unique("cond"), self.names)
        cp = cond.parameter(0, state)
        ci = cond.add(Op.GET_TUPLE_ELEMENT, [cp], attrs={"index": 0})
        cond.add(Op.COMPARE, [ci, cond.constant(self.trips, DType.S32)],
                 attrs={"direction": "LT"})
        entry = ComputationBuilder(self.names.unique("main"), self.names)
        params = [entry.parameter(j, e) for j, e in enumerate(state.elements)]
        init = entry.add(Op.TUPLE, params)
        entry.add(Op.WHILE, [init], calls=[cond.build(), body.build()])
        module = make_module("random_loop", entry.build())
        inputs = [np.asarray(0, np.int32),
                  self.rng.standard_normal((n, k)).astype(np.float32),
                  self.rng.integers(0, 2**32, n, dtype=np.uint32),
                  self.rng.integers(0, 2**32, 2, dtype=np.uint32),
                  np.asarray(self.rng.standard_normal(), np.float32),
                  np.asarray(5, np.uint32), np.asarray(-np.inf, np.float32)]
        return module, inputs


@pytest.mark.parametrize("seed", range(6))
def test_random_loops(seed: int) -> None:
    module, inputs = LoopMaker(seed).build()
    lanes = [1, 4, 8, 16][seed % 4]
    assert_compiled_matches(whole_loop(module, lanes=lanes), inputs, module)


# Derandomised: f16 reductions still differ by a few ulp between the C code and the reference
# (the open f16 reduction-order cause of fuzz seeds 3133 and 4584), and a random draw of one
# must not decide whether CI passes.
@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(programs(max_steps=8))
def test_random_programs_with_loops(program: RandomProgram) -> None:
    fused = run_strategy(program.module, "xla+whole_loop", debug=False).module
    actual = flatten_value(compile_cpu(fused)(*program.inputs))
    expected = flatten_value(evaluate(program.module, program.inputs))
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        # The math library's functions are within an ulp of NumPy's, not equal to them.
        assert_same(np.asarray(a), e, f"output {k}")


# --- the corpus -----------------------------------------------------------------------------

LOOP_PROGRAMS = sorted(p.stem for p in CORPUS_DIR.glob("*.hlo") if "while(" in p.read_text())


@pytest.mark.parametrize("name", LOOP_PROGRAMS)
def test_corpus_loops_match_jax(name: str) -> None:
    text, inputs, expected = load_corpus_case(name)
    result = run_strategy(parse_module(text, f"{name}.hlo"), "max+default_costs", debug=False)
    assert [r for r in result.decisions.unique() if r.pass_name == "whole-loop-fusion"]
    assert_matches(flatten_value(compile_cpu(result.module)(*inputs)), expected, name)



def test_the_emitter_applies_the_plan_fusion_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole-loop fusion records its plan (size, per-environment elements) in the fusion's
    backend_config; the emitter applies it and never searches for a plan itself."""
    from hlofuse.analysis import parallel_loop as pl
    from hlofuse.analysis.whole_loop_config import read_recorded_plan

    module = parse_module(loop_text("""
  x = f32[8]{0} get-tuple-element(p), index=1
  two = f32[8]{0} constant({2, 2, 2, 2, 2, 2, 2, 2})
  doubled = f32[8]{0} multiply(x, two)
  ROOT t = (s32[], f32[8]{0}) tuple(next, doubled)"""))
    fused = whole_loop(module, lanes=4)
    fusion = next(i for i in fused.entry.instructions if i.op is Op.FUSION)
    config = next(raw.text for key, raw in fusion.extra if key == "backend_config")
    recorded = read_recorded_plan(config)
    assert recorded is not None
    loop = fusion.calls[0].root
    searched = pl.plan_parallel_loop(loop)
    assert isinstance(searched, pl.LoopPlan)
    assert recorded == (searched.size, {i: 0 for i in searched.per_lane})
    applied = pl.apply_recorded_plan(loop, *recorded)
    assert isinstance(applied, pl.LoopPlan)
    assert (applied.per_lane, applied.uniform, applied.lane_inputs) == \
        (searched.per_lane, searched.uniform, searched.lane_inputs)

    def no_search(*args: object, **kwargs: object) -> None:
        raise AssertionError("the emitter planned the loop again")

    monkeypatch.setattr(emitter, "plan_parallel_loop", no_search)
    inputs = [np.asarray(0, np.int32), np.linspace(-1, 1, 8, dtype=np.float32)]
    assert_compiled_matches(fused, inputs[:len(fused.entry.parameters)], module)


@pytest.mark.parametrize("lanes", [1, 16, 64])
def test_rare_select_runs_for_the_listed_lanes(lanes: int) -> None:
    """A reset drawn apart (a costly select operand independent of the state) for the lanes
    that pick it, listed per block: from none to more than one vector of a 64-lane block per
    step, a tail block of 36 lanes, the same values as the interpreter."""
    x0 = np.random.default_rng(3).uniform(0.0, 1.0, 100).astype(np.float32)
    module = parse_module(codegen_c_module("whole-loop-rare-select.hlo"))
    fused = whole_loop(module, lanes=lanes)
    assert_compiled_matches(fused, [np.asarray(0, np.int32), x0], module,
                            float_accumulators=False)


def _chain(tag: str, seed_op: str, n: int) -> tuple[str, str]:
    """A costly value independent of the state: a chain of sin and cos of the lane index."""
    lines = []
    prev = f"{tag}a1"
    lines.append(f"  {tag}a0 = f32[{n}]{{0}} add(lane, steps)")
    lines.append(f"  {tag}a1 = f32[{n}]{{0}} multiply({tag}a0, {seed_op})")
    for k in range(2, 12):
        op = "sine" if k % 2 else "cosine"
        lines.append(f"  {tag}b{k} = f32[{n}]{{0}} {op}({prev})")
        lines.append(f"  {tag}a{k} = f32[{n}]{{0}} multiply({tag}b{k}, {tag}b{k})")
        prev = f"{tag}a{k}"
    return "\n".join(lines), prev

def _several_rare_selects(n: int) -> str:
    """Three rare selects, one taking the fresh value where its predicate is false, one of a
    two-column element: the listed lanes' values blended into each element where picked."""
    cx, fx = _chain("x", "halves", n)
    cy, fy = _chain("y", "thirds", n)
    state = f"(s32[], f32[{n}]{{0}}, f32[{n}]{{0}}, f32[{n},2]{{1,0}})"
    return f"""
HloModule m
cond {{
  cp = {state} parameter(0)
  ci = s32[] get-tuple-element(cp), index=0
  n = s32[] constant(12)
  ROOT lt = pred[] compare(ci, n), direction=LT
}}
body {{
  p = {state} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  one = s32[] constant(1)
  next = s32[] add(i, one)
  x = f32[{n}]{{0}} get-tuple-element(p), index=1
  y = f32[{n}]{{0}} get-tuple-element(p), index=2
  z = f32[{n},2]{{1,0}} get-tuple-element(p), index=3
  half = f32[] constant(0.5)
  halves = f32[{n}]{{0}} broadcast(half), dimensions={{}}
  third = f32[] constant(0.33)
  thirds = f32[{n}]{{0}} broadcast(third), dimensions={{}}
  lane = f32[{n}]{{0}} iota(), iota_dimension=0
  step = f32[] convert(i)
  steps = f32[{n}]{{0}} broadcast(step), dimensions={{}}
{cx}
{cy}
  grow = f32[] constant(1.25)
  grows = f32[{n}]{{0}} broadcast(grow), dimensions={{}}
  bump = f32[] constant(0.05)
  bumps = f32[{n}]{{0}} broadcast(bump), dimensions={{}}
  gx = f32[{n}]{{0}} multiply(x, grows)
  sx = f32[{n}]{{0}} add(gx, bumps)
  gy = f32[{n}]{{0}} multiply(y, grows)
  sy = f32[{n}]{{0}} add(gy, bumps)
  dx = pred[{n}]{{0}} compare(x, halves), direction=GT
  dy = pred[{n}]{{0}} compare(y, thirds), direction=LT
  xn = f32[{n}]{{0}} select(dx, {fx}, sx)
  yn = f32[{n}]{{0}} select(dy, sy, {fy})
  zg = f32[{n},2]{{1,0}} multiply(z, z)
  zf2 = f32[{n},2]{{1,0}} broadcast({fx}), dimensions={{0}}
  zq = f32[] constant(0.7)
  zqs = f32[{n},2]{{1,0}} broadcast(zq), dimensions={{}}
  dz = pred[{n},2]{{1,0}} compare(z, zqs), direction=GT
  zn = f32[{n},2]{{1,0}} select(dz, zf2, zg)
  ROOT t = {state} tuple(next, xn, yn, zn)
}}
ENTRY main {{
  x0 = s32[] parameter(0)
  x1 = f32[{n}] parameter(1)
  x2 = f32[{n}] parameter(2)
  x3 = f32[{n},2] parameter(3)
  init = {state} tuple(x0, x1, x2, x3)
  ROOT loop = {state} while(init), condition=cond, body=body
}}
"""


@pytest.mark.needs_cc
@pytest.mark.parametrize("lanes", [16, 64])
def test_several_rare_selects_blend_the_listed_lanes_values(lanes: int) -> None:
    """100 lanes (a tail block of 36 with 64-lane blocks): the lanes that pick are listed, not
    a multiple of 16, and each element takes the listed values only where its predicate
    picks them."""
    module = parse_module(_several_rare_selects(100))
    fused = whole_loop(module, lanes=lanes)
    rng = np.random.default_rng(3)
    inputs = [np.asarray(0, np.int32), rng.uniform(0, 1, 100).astype(np.float32),
              rng.uniform(0, 1, 100).astype(np.float32),
              rng.uniform(0, 1, (100, 2)).astype(np.float32)]
    assert "pick[picked]" in generate_c(fused).source.text
    assert_compiled_matches(fused, inputs, module, float_accumulators=False)
