"""hlofuse.random against jax.random (bit for bit), and the two Threefry implementations."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax._src.random.threefry2x32 import threefry2x32_p

import hlofuse
from hlofuse import random
from hlofuse.ir.printer import module_text
from hlofuse.reference import rnglib

SEEDS = [0, 1, 42, 2**31 - 1, 123456789]
SHAPES = [(), (1,), (7,), (3, 5), (2, 3, 4)]
IMPLS = ["fused", "custom_call"]


def _bits(a: Any) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def assert_same_bits(got: Any, want: Any) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("seed", [0, 1, 42, -1, 2**32 + 5, 2**40 + 3])
def test_keys_match_jax(seed: int) -> None:
    assert_same_bits(random.key(seed), jax.random.key_data(jax.random.key(seed)))
    assert_same_bits(random.PRNGKey(seed), jax.random.PRNGKey(seed))


def test_traced_seed_gives_the_same_key() -> None:
    out = hlofuse.jit(random.key)(np.int32(-7))
    assert_same_bits(out, jax.random.key_data(jax.random.key(-7)))


def test_library_threefry_matches_jax() -> None:
    rng = np.random.default_rng(0)
    k0, k1 = rng.integers(0, 2**32, 2, dtype=np.uint64).astype(np.uint32)
    x0, x1 = rng.integers(0, 2**32, (2, 100), dtype=np.uint64).astype(np.uint32)
    want = threefry2x32_p.bind(k0, k1, x0, x1)
    got = rnglib.threefry2x32(k0, k1, x0, x1)
    for g, w in zip(got, want):
        assert_same_bits(g, w)


@functools.cache
def _jax_keys(seed: int) -> list[np.ndarray]:
    k = jax.random.key(seed)
    keys = (jax.random.split(k), jax.random.split(k, 5), jax.random.split(k, (2, 3)),
            jax.random.fold_in(k, 0), jax.random.fold_in(k, 2**32 - 1))
    return [np.asarray(jax.random.key_data(x)) for x in keys]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("seed", SEEDS)
def test_split_and_fold_in_match_jax(impl: str, seed: int) -> None:
    def f(key: Any) -> Any:
        return (random.split(key, impl=impl), random.split(key, 5, impl=impl),
                random.split(key, (2, 3), impl=impl), random.fold_in(key, 0, impl=impl),
                random.fold_in(key, 2**32 - 1, impl=impl))

    got = hlofuse.jit(f)(random.key(seed))
    for g, w in zip(got, _jax_keys(seed)):
        assert_same_bits(g, w)


@functools.cache
def _jax_samples(seed: int, shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    def samples(key: Any) -> Any:  # one jax.jit: one XLA compilation per shape, not seven
        k1, k2, k3 = jax.random.split(key, 3)
        return (jax.random.bits(k1, shape), jax.random.bits(k1, shape, jnp.uint8),
                jax.random.uniform(k2, shape),
                jax.random.uniform(k2, shape, minval=-3.0, maxval=0.5),
                jax.random.uniform(k2, shape, jnp.float16),
                jax.random.uniform(k2, shape, jnp.bfloat16), jax.random.bernoulli(k3, 0.3, shape))

    return tuple(np.asarray(x) for x in jax.jit(samples)(jax.random.key(seed)))


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("shape, seed", list(zip(SHAPES, SEEDS)))
def test_samplers_match_jax(impl: str, shape: tuple[int, ...], seed: int) -> None:
    def f(key: Any) -> Any:
        k1, k2, k3 = random.split(key, 3)
        return (random.bits(k1, shape, impl=impl), random.bits(k1, shape, np.uint8, impl=impl),
                random.uniform(k2, shape, impl=impl),
                random.uniform(k2, shape, minval=-3.0, maxval=0.5, impl=impl),
                random.uniform(k2, shape, np.float16, impl=impl),
                random.uniform(k2, shape, ml_dtypes.bfloat16, impl=impl),
                random.bernoulli(k3, 0.3, shape, impl=impl))

    got = list(hlofuse.jit(f)(random.key(seed)))
    want = list(_jax_samples(seed, shape))
    # u * (max - min) + min: XLA's CPU backend contracts this into a fused multiply-add, which
    # rounds once; HLO (and hlofuse) round twice: one rounding step (of the product, below
    # 3.5) apart.
    scaled, scaled_want = got.pop(3), np.asarray(want.pop(3))
    np.testing.assert_allclose(scaled, scaled_want, rtol=0, atol=np.spacing(np.float32(2)))
    for g, w in zip(got, want):
        assert_same_bits(g, w)


@pytest.mark.parametrize("impl", IMPLS)
def test_normal_matches_jax(impl: str) -> None:
    got = hlofuse.jit(lambda k: random.normal(k, (64, 16), impl=impl))(random.key(3))
    want = np.asarray(jax.random.normal(jax.random.key(3), (64, 16)))
    # The same polynomial on the same uniforms; log1p and sqrt may differ from XLA's by an ulp.
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    assert np.mean(got == want) > 0.9


def test_bernoulli_with_an_array_p() -> None:
    p = np.array([0.1, 0.5, 0.9], np.float32)
    got = hlofuse.jit(lambda k, p: random.bernoulli(k, p, (4, 3)))(random.key(5), p)
    assert_same_bits(got, jax.random.bernoulli(jax.random.key(5), p, (4, 3)))


def test_both_implementations_give_identical_bits() -> None:
    def f(key: Any, t: Any) -> Any:
        k = random.fold_in(key, t)
        a, b = random.split(k)
        return random.bits(a, (5, 7)), random.normal(b, (9,)), random.split(b, 4)

    key = random.key(2024)
    fused = hlofuse.jit(lambda k, t: f(k, t))
    with random.default_impl("custom_call"):
        opaque = hlofuse.jit(lambda k, t: f(k, t))(key, np.int32(11))
        text = hlofuse.jit(lambda k, t: f(k, t)).lower(key, np.int32(11)).as_text()
    for g, w in zip(fused(key, np.int32(11)), opaque):
        assert_same_bits(g, w)
    assert random.get_default_impl() == "fused"
    # fold_in, split, bits, normal's uniform and split(4): one custom call each
    assert text.count("custom-call(") == 5


def test_custom_call_instruction_follows_the_convention() -> None:
    module = hlofuse.jit(lambda k: random.bits(k, (2, 3), impl="custom_call")).lower(
        random.key(0)).module
    (call,) = [i for i in module.all_instructions() if i.op.text == "custom-call"]
    assert call.attrs["custom_call_target"] == "hlofuse_threefry2x32"
    assert [o.shape.text(False) for o in call.operands] == ["u32[2,3]"] * 4
    assert call.shape.text(False) == "(u32[2,3], u32[2,3])"
    assert "custom-call" in module_text(module)


def test_random_functions_run_eagerly() -> None:
    key = random.key(9)
    assert_same_bits(random.split(key), jax.random.key_data(jax.random.split(
        jax.random.key(9))))
    assert_same_bits(random.uniform(key, (3,)), jax.random.uniform(jax.random.key(9), (3,)))


def test_bad_random_arguments() -> None:
    with pytest.raises(TypeError, match="expects a key"):
        random.uniform(np.zeros(3, np.uint32), (2,))
    with pytest.raises(ValueError, match="unknown random implementation"):
        random.set_default_impl("philox")
    with pytest.raises(ValueError, match="dtype must be unsigned"):
        random.bits(random.key(0), (2,), np.int32)
    with pytest.raises(OverflowError):
        random.fold_in(random.key(0), -1)
