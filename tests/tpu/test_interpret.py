"""The TPU target's Pallas kernels run with `interpret=True` on the CPU (backend
`tpu-interpret`) equal the reference interpreter: every corpus program (JAX-exported,
indexing, linear algebra, rollouts) and every CartPole variant under every strategy. The
thorough tier sweeps them all; the unmarked tests are a fast representative subset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse import random
from hlofuse.api import compile_module
from hlofuse.envs import cartpole
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.studies.cartpole_study import SEQUENCE, is_available

from tests.conftest import CORPUS, load_corpus_case

DATA = Path(__file__).parent.parent / "data"
STRATEGIES = ("none", "xla", "priority", "max")
FAST_CORPUS = {"cartpole_step", "softmax", "while_loop", "cond", "argmax", "integer_bits"}


def load_npz_case(path: Path) -> tuple[Module, list[np.ndarray]]:
    """A stored program (tests/data/*/NAME[.FORM].hlo) and its inputs (arg0, arg1, ...)."""
    module = parse_module(path.read_text(), str(path))
    stem = path.name.split(".")[0]
    npz = path.parent / f"{stem}.npz"
    if not npz.exists():  # linalg: the npz is named by stem and precision
        npz = path.parent / (".".join(path.name.split(".")[:3]) + ".npz")
    data = np.load(npz)
    count = sum(k.startswith("arg") for k in data.files)
    return module, [data[f"arg{i}"] for i in range(count)]


def assert_equal_to_interpreter(module: Module, inputs: list[np.ndarray], strategy: str,
                                rtol: float = 1e-5) -> None:
    want = flatten_value(evaluate(module, inputs))
    compiled = compile_module(module, strategy, "tpu-interpret")
    assert_close(compiled.run_flat(inputs), want, rtol)


def assert_close(got: list[np.ndarray], want: list[np.ndarray], rtol: float) -> None:
    """Integers and booleans exactly; floats within `rtol` (NaNs equal)."""
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, f"out{i}: {g.dtype}{g.shape}"
        if w.dtype.kind == "f" or w.dtype.name == "bfloat16":
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                       atol=1e-5, equal_nan=True, err_msg=f"out{i}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"out{i}")


def _cases(names: list[str], fast: set[str], thorough: bool = False) -> list[object]:
    """Every program under every strategy: the `fast` ones under xla unmarked, the others
    under xla `thorough` (with `thorough`, else `slow`), other strategies `slow` (interpret
    mode compiles slowly: the whole sweep takes many minutes)."""
    def marks(name: str, strategy: str) -> list[pytest.MarkDecorator]:
        if strategy == "xla" and name in fast:
            return []
        return [pytest.mark.thorough] if strategy == "xla" and thorough else [pytest.mark.slow]

    return [pytest.param(name, strategy, id=f"{name}-{strategy}", marks=marks(name, strategy))
            for name in names for strategy in STRATEGIES]


@pytest.mark.parametrize(("name", "strategy"), _cases(CORPUS, FAST_CORPUS, thorough=True))
def test_jax_corpus(name: str, strategy: str) -> None:
    text, inputs, _ = load_corpus_case(name)
    assert_equal_to_interpreter(parse_module(text, name), inputs, strategy)


INDEXING = sorted(p.name for p in (DATA / "indexing").glob("*.hlo"))


@pytest.mark.parametrize(("name", "strategy"), _cases(INDEXING, {"gather_basic.hlo"}))
def test_indexing_corpus(name: str, strategy: str) -> None:
    assert_equal_to_interpreter(*load_npz_case(DATA / "indexing" / name), strategy)


LINALG = sorted(p.name for p in (DATA / "linalg").glob("*.f32.*.cpu.hlo"))


@pytest.mark.parametrize(("name", "strategy"), _cases(LINALG, {"solve.f32.one.cpu.hlo"}))
def test_linalg_corpus(name: str, strategy: str) -> None:
    # Linear algebra amplifies rounding by the condition number: the corpus tests' bound.
    assert_equal_to_interpreter(*load_npz_case(DATA / "linalg" / name), strategy, rtol=1e-3)


ROLLOUTS = sorted(p.name for p in (DATA / "rollouts").glob("*.cpu.hlo"))


@pytest.mark.parametrize(("name", "strategy"), _cases(ROLLOUTS, set()))
def test_rollout_corpus(name: str, strategy: str) -> None:
    assert_equal_to_interpreter(*load_npz_case(DATA / "rollouts" / name), strategy, rtol=1e-4)


def _cartpole_cases() -> list[object]:
    """Every default step of the study under its own strategy and every other (`slow`: the
    fast tier runs baseline and max in test_cartpole_over_several_blocks)."""
    return [pytest.param(step, strategy, id=f"{step.name}-{strategy}", marks=[pytest.mark.slow])
            for step in SEQUENCE if step.is_default
            for strategy in dict.fromkeys((step.strategy, *STRATEGIES))]


@pytest.mark.parametrize(("step", "strategy"), _cartpole_cases())
def test_cartpole_variant(step: object, strategy: str) -> None:
    from hlofuse.studies.cartpole_study import StudyStep

    assert isinstance(step, StudyStep)
    if not is_available(strategy):
        pytest.skip(f"strategy {strategy} not available")
    module = cartpole.trace(step.variant, 16, 12, 0)
    want = flatten_value(evaluate(module, [random.key(0)]))
    got = compile_module(module, strategy, "tpu-interpret").run_flat([random.key(0)])
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=0, atol=1e-5)
    assert int(got[1]) == int(want[1])  # episodes finished: exactly
    assert float(got[2]) == pytest.approx(float(want[2]), abs=1e-4)


# N = 4096 lanes in interpret mode (seconds each): thorough (make test), not make fast.
@pytest.mark.thorough
@pytest.mark.parametrize("name", ["baseline", "max"])
def test_cartpole_over_several_blocks(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Blocks of 8 rows: N = 4096 lanes are 32 rows, four blocks per tiled kernel (a 1-d iota
    then counts from the block's first flattened position)."""
    from hlofuse.studies.cartpole_study import known_steps
    from hlofuse.targets.tpu import blocks

    monkeypatch.setattr(blocks, "BLOCK_ROWS", 8)
    step = known_steps()[name]
    module = cartpole.trace(step.variant, 4096, 3, 0)
    want = flatten_value(evaluate(module, [random.key(0)]))
    compiled = compile_module(module, step.strategy, "tpu-interpret")
    assert compiled.executable is not None
    assert any(k.function == "pallas" for k in compiled.executable.kernels)
    plans = compiled.executable.kernel_plans  # type: ignore[attr-defined]
    assert any(k.layout == "tiled" and k.grid == 4 for k in plans)
    got = compiled.run_flat([random.key(0)])
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=0, atol=1e-5)
    assert int(got[1]) == int(want[1])


def test_profile_samples_a_few_trips_of_a_known_loop() -> None:
    """A profile steps a loop of known trip count only a few times and weights its calls: the
    calls and bytes per kernel are those of stepping every trip (fori_loop: 8 trips)."""
    module, inputs = load_npz_case(DATA / "jax" / "fori_loop.hlo")
    executable = compile_module(module, "xla", "tpu-interpret").executable
    assert executable is not None
    every = executable.profile(*inputs, trip_limit=0)
    sampled = executable.profile(*inputs, trip_limit=3)
    assert [(r.name, r.calls, r.bytes_read) for r in sampled.rows] == \
        [(r.name, r.calls, r.bytes_read) for r in every.rows]
    assert max(r.calls for r in every.rows) == 8


def test_a_profile_past_its_limit_stops_and_says_so() -> None:
    """A profile past `profile_limit_s` stops its walk and returns the calls timed so far,
    with a note naming the limit and how many kernels it reached; without a limit the same
    profile has no note and counts every call."""
    module, inputs = load_npz_case(DATA / "jax" / "fori_loop.hlo")
    executable = compile_module(module, "xla", "tpu-interpret").executable
    assert executable is not None
    whole = executable.profile(*inputs, trip_limit=0)
    assert whole.notes == ()
    executable.profile_limit_s = 1e-9  # type: ignore[attr-defined]
    cut = executable.profile(*inputs, trip_limit=0)
    assert len(cut.notes) == 1 and "limit of 1e-09 s in the warm-up" in cut.notes[0]
    assert sum(r.calls for r in cut.rows) < sum(r.calls for r in whole.rows)


def test_scatters_with_a_reducer_or_replace_are_lax_scatters() -> None:
    """A one-array scatter that adds, multiplies, takes the max or min, or replaces runs as
    `lax`'s scatter (an XLA operation) rather than the interpreter on the host, and equals
    the interpreter (out-of-bounds windows skipped as XLA skips them)."""
    module, inputs = load_npz_case(DATA / "indexing" / "scatter_ops.hlo")
    compiled = compile_module(module, "xla", "tpu-interpret")
    plans = compiled.executable.kernel_plans  # type: ignore[union-attr]
    scatters = [k for k in plans if any("scatter" in name for name in k.instructions)]
    on_host = [k.name for k in scatters if k.host_ops]
    assert len(scatters) - len(on_host) >= 3, [(k.name, k.reason) for k in scatters]
    want = flatten_value(evaluate(module, inputs))
    assert_close(compiled.run_flat(inputs), want, 1e-5)


def test_kernels_of_one_structure_share_a_key() -> None:
    """The unrolled CartPole step's ten copies of each kernel have one structure key (the
    profile and the chip check compile each structure once); kernels of different bodies or
    shapes do not share one."""
    from hlofuse.fusion.strategies import run_strategy
    from hlofuse.studies.cartpole_study import known_steps
    from hlofuse.targets.tpu.kernel_keys import kernel_key
    from hlofuse.targets.tpu.program import plan_kernels

    step = known_steps()["unroll10"]
    module = cartpole.trace(step.variant, 256, 20, 0)
    fused = run_strategy(module, step.strategy, debug=False)
    kernels = [k for k in plan_kernels(fused.module, True) if k.mode == "pallas"]
    keys = {kernel_key(k) for k in kernels}
    assert len(keys) * 4 <= len(kernels)
    by_key: dict[object, set[tuple[str, ...]]] = {}
    for k in kernels:
        shapes = tuple(s.text(False) for s in (*k.input_shapes, *k.output_shapes))
        by_key.setdefault(kernel_key(k), set()).add(shapes)
    assert all(len(shapes) == 1 for shapes in by_key.values())


def test_a_tiled_kernel_without_dividing_blocks_pads_to_whole_blocks() -> None:
    """4,099 rows of 128 (a prime) have no block of 2,048-4,096 rows that divides them: the
    tiled kernel pads its arrays to whole blocks and cuts its output back, equal to the
    interpreter, the iota's positions included."""
    n = 4099 * 128
    text = f"""HloModule padded
ENTRY main {{
  x = f32[{n}] parameter(0)
  y = f32[{n}] parameter(1)
  i = s32[{n}] iota(), iota_dimension=0
  f = f32[{n}] convert(i)
  a = f32[{n}] add(x, y)
  ROOT r = f32[{n}] multiply(a, f)
}}
"""
    module = parse_module(text, "padded.hlo")
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    compiled = compile_module(module, "xla", "tpu-interpret")
    [kernel] = compiled.executable.kernel_plans  # type: ignore[union-attr]
    assert kernel.layout == "tiled" and kernel.grid * kernel.block_rows > 4099
    import jax

    jaxpr = jax.make_jaxpr(lambda a, b: kernel(a, b))(*inputs)
    [call] = [e for e in jaxpr.eqns if e.primitive.name == "pallas_call"]
    assert call.outvars[0].aval.shape == (kernel.grid * kernel.block_rows, 128)
    assert_close(compiled.run_flat(inputs), flatten_value(evaluate(module, inputs)), 1e-6)
