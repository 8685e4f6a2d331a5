"""`hlofuse.from_jax`: JAX functions lowered by JAX, compiled and run by hlofuse, equal JAX."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import hlofuse
from hlofuse.jax_bridge import JaxNotInstalledError

from tests.conftest import assert_matches

jax = pytest.importorskip("jax")
jnp = jax.numpy

GENERATE = Path(__file__).parents[1] / "data" / "jax" / "generate.py"


def _corpus_functions() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_jax_corpus_generate", GENERATE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CORPUS = _corpus_functions()
PROGRAMS = {name: (fn, args) for name, fn, args, _ in CORPUS.PROGRAMS}


def _leaves(tree: Any) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


@pytest.mark.needs_cc
@pytest.mark.thorough
@pytest.mark.parametrize("strategy", ["xla", "none"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_corpus_function_through_from_jax_equals_jax(name: str, strategy: str) -> None:
    assert not jax.config.jax_enable_x64  # the corpus is lowered with x64 off
    fn, args = PROGRAMS[name]
    want = _leaves(jax.jit(fn)(*args))
    got = hlofuse.from_jax(fn, strategy=strategy, backend="cpu")(*args)
    assert_matches(_leaves(got), want, f"{name} under {strategy}")


def _model(params: dict[str, Any], x: Any, *, scale: float) -> Any:
    h = jnp.tanh(x @ params["w"] + params["b"])
    return {"out": h * scale, "stats": (jnp.mean(h), jnp.max(h, axis=0))}


def _params() -> tuple[dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((3, 4)).astype(np.float32),
              "b": rng.standard_normal(4).astype(np.float32)}
    return params, rng.standard_normal((5, 3)).astype(np.float32)


@pytest.mark.needs_cc
def test_pytrees_static_arguments_and_signatures() -> None:
    params, x = _params()
    f = hlofuse.from_jax(_model, static_argnames="scale")
    got = f(params, x, scale=2.0)
    want = jax.jit(_model, static_argnames="scale")(params, x, scale=2.0)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    assert all(isinstance(leaf, np.ndarray) for leaf in jax.tree_util.tree_leaves(got))
    assert_matches(_leaves(got), _leaves(want), "model")
    # Same signature: no new lowering; a new static value or shape: a new one.
    f(params, x + 1, scale=2.0)
    assert f.cache_size == 1
    got3 = f(params, x, scale=3.0)
    np.testing.assert_allclose(got3["out"], got["out"] * 1.5, rtol=1e-6)
    f(params, x[:2], scale=2.0)
    assert f.cache_size == 3


@pytest.mark.needs_cc
def test_static_argnums_and_python_scalars() -> None:
    def power_sum(x: Any, n: int, offset: Any) -> Any:
        return jnp.sum(x**n) + offset

    f = hlofuse.from_jax(power_sum, static_argnums=1)
    x = np.array([1.0, 2.0, 3.0], np.float32)
    assert float(f(x, 2, 0.5)) == pytest.approx(14.5)
    assert float(f(x, 3, 1)) == pytest.approx(37.0)
    assert f.cache_size == 2  # one per static value (the float and int scalars are weak)


@pytest.mark.needs_cc
def test_jax_arrays_in_give_jax_arrays_out() -> None:
    f = hlofuse.from_jax(lambda a, b: (a * b, a - b))
    a, b = jnp.arange(4.0), jnp.ones(4)
    out = f(a, b)
    assert all(isinstance(o, jax.Array) for o in out)
    np.testing.assert_array_equal(np.asarray(out[0]), np.arange(4.0, dtype=np.float32))
    numpy_out = f(np.arange(4, dtype=np.float32), np.ones(4, np.float32))
    assert all(type(o) is np.ndarray for o in numpy_out)


@pytest.mark.needs_cc
def test_float64_inputs_follow_jax_with_x64_off() -> None:
    f = hlofuse.from_jax(lambda x: x * 3)
    x = np.linspace(0, 1, 7)  # float64: JAX lowers a float32 parameter with x64 off
    got = f(x)
    want = np.asarray(jax.jit(lambda x: x * 3)(x))
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got, want)


@pytest.mark.needs_cc
def test_explain_fused_hlo_profile_and_source_lines() -> None:
    def f(x: Any) -> Any:
        return jnp.exp(x) * 2.0 + jnp.sin(x)

    x = np.linspace(-1, 1, 64, dtype=np.float32)
    g = hlofuse.from_jax(f)
    report = g.explain(x, as_dict=True)
    assert isinstance(report, dict)
    assert report["kernel_count"] == 1
    # JAX's debug-info tables give each instruction the user's line.
    assert any("test_from_jax.py" in line for line in report["kernels"][0]["source_lines"])
    assert "fusion" in g.fused_hlo(x)
    profile = g.profile(x)
    assert sum(row.calls for row in profile.rows) >= 1
    assert "jit_f" in g.lower(x).as_text()


def test_interpreter_backend_runs_without_a_compiler() -> None:
    fn, args = PROGRAMS["broadcasting"]
    got = hlofuse.from_jax(fn, backend="interpreter")(*args)
    assert_matches(_leaves(got), _leaves(jax.jit(fn)(*args)), "broadcasting (interpreter)")


def test_non_array_argument_is_named() -> None:
    f = hlofuse.from_jax(lambda x, name: x)
    with pytest.raises(TypeError, match="leaf 1 is a str"):
        f(np.ones(2, np.float32), "hello")


def test_missing_jax_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jax", None)
    f = hlofuse.from_jax(lambda x: x)
    with pytest.raises(JaxNotInstalledError, match=r"hlofuse\[jax\]"):
        f(np.ones(2, np.float32))


@pytest.mark.needs_cc
def test_the_example_runs_and_checks_itself(capsys: pytest.CaptureFixture[str]) -> None:
    # examples/from_jax_layer.py is what `make wheel-check` runs from the installed wheel.
    path = Path(__file__).parents[2] / "examples" / "from_jax_layer.py"
    spec = importlib.util.spec_from_file_location("_from_jax_layer_example", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main()
    assert "kernel(s) and matches NumPy" in capsys.readouterr().out
