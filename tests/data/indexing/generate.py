"""Regenerate the indexing corpus: small JAX programs using gather, scatter, sort, top-k,
cumulative reductions, convolution, reduce-precision and select-and-scatter.

    .venv/bin/python tests/data/indexing/generate.py          # write <name>.hlo / <name>.npz
    .venv/bin/python tests/data/indexing/generate.py --check  # re-run JAX, compare

`<name>.hlo` is `jax.jit(f).lower(*args).as_text(dialect="hlo")` (CPU lowering);
`<name>.npz` holds the inputs `arg0, ...` and JAX's CPU outputs `out0, ...` (flattened).
Tests only read the stored files.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

HERE = os.path.dirname(os.path.abspath(__file__))
assert not jax.config.jax_enable_x64

f32, i32 = np.float32, np.int32
PROGRAMS: dict[str, tuple[Callable[..., object], list[np.ndarray]]] = {}


def program(name: str) -> Callable[[Callable[[np.random.Generator], tuple]], None]:
    def deco(make: Callable[[np.random.Generator], tuple]) -> None:
        fn, args = make(np.random.default_rng(sum(map(ord, name))))
        PROGRAMS[name] = (fn, [np.asarray(a) for a in args])
    return deco


@program("gather_basic")
def _(rng):
    x = rng.standard_normal((5, 7)).astype(f32)
    i = np.array([0, 4, 2, 2], i32)
    j = np.array([6, 0, 3, 1], i32)

    def f(x, i, j):
        return (x[i], x[:, j], x[i, j], jnp.take(x, j, axis=1), x[i[0]],
                jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1))
    return f, [x, i, j]


@program("gather_out_of_range")
def _(rng):
    x = rng.standard_normal((6, 4)).astype(f32)
    i = np.array([-3, 0, 5, 9, 100], i32)

    def f(x, i):
        # Clamped starts (lax.dynamic_slice-like gather) and JAX's default (fill) mode.
        clamped = lax.gather(x, i[:, None], lax.GatherDimensionNumbers(
            offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,)),
            slice_sizes=(1, 4), mode=lax.GatherScatterMode.CLIP)
        window = lax.gather(x, i[:, None], lax.GatherDimensionNumbers(
            offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(0,)),
            slice_sizes=(3, 2), mode=lax.GatherScatterMode.CLIP)
        return clamped, window, x.at[i].get(mode="fill", fill_value=-1.0)
    return f, [x, i]


@program("gather_batched")
def _(rng):
    board = rng.integers(0, 5, (4, 3, 6, 6)).astype(np.int8)
    pos = rng.integers(0, 6, (4, 2)).astype(i32)

    def f(board, pos):
        def one(b, p):
            return b[1, p[0], p[1]], b[:, p[0]], lax.dynamic_slice(b, (0, p[0], p[1]), (3, 2, 2))
        return jax.vmap(one)(board, pos)
    return f, [board, pos]


@program("scatter_ops")
def _(rng):
    x = rng.standard_normal((6, 5)).astype(f32)
    i = np.array([1, 3, 1, 7, -1], i32)  # repeated, out of range (dropped) and negative
    u = rng.standard_normal((5, 5)).astype(f32)
    n = rng.integers(-9, 9, (6,)).astype(i32)
    m = rng.random(6) < 0.5

    def f(x, i, u, n, m):
        return (x.at[i].set(u, mode="drop"), x.at[i].add(u, mode="drop"),
                x.at[i].multiply(u, mode="drop"), x.at[i].min(u, mode="drop"),
                x.at[i].max(u, mode="drop"), x.at[:, 2].set(0.0), x.at[2, 3].add(1.0),
                n.at[i % 6].add(3), n.at[i % 6].max(n[:5]), m.at[i % 6].set(True),
                x.at[i % 6].apply(lambda v: v * v + 1.0))
    return f, [x, i, u, n, m]


@program("scatter_batched")
def _(rng):
    board = rng.integers(0, 3, (4, 2, 5, 5)).astype(np.int8)
    pos = rng.integers(0, 5, (4, 2)).astype(i32)
    q = rng.standard_normal((4, 6)).astype(f32)
    arm = rng.integers(0, 6, (4,)).astype(i32)

    def f(board, pos, q, arm):
        def one(b, p, q, a):
            b = b.at[1, p[0], p[1]].set(0).at[0, p[1], p[0]].max(jnp.int8(2))
            return b, q.at[a].add(1.5), q[a], jnp.argmax(q), jnp.argmin(q)
        return jax.vmap(one)(board, pos, q, arm)
    return f, [board, pos, q, arm]


@program("sorting")
def _(rng):
    x = rng.integers(0, 4, (3, 8)).astype(f32)  # many ties
    x[0, 2] = np.nan
    x[1, 5] = -0.0
    y = rng.standard_normal((3, 8)).astype(f32)
    k = rng.integers(-5, 5, (10,)).astype(i32)

    def f(x, y, k):
        return (jnp.sort(x, axis=1), jnp.argsort(x, axis=1), jnp.sort(y, axis=0),
                lax.sort((x, y), dimension=1, num_keys=1), jnp.sort(k, stable=False),
                jnp.argsort(-k), lax.top_k(y, 3), lax.top_k(k, 4), lax.sort_key_val(k, -k))
    return f, [x, y, k]


@program("cumulative")
def _(rng):
    x = rng.standard_normal((4, 6)).astype(f32)
    n = rng.integers(-3, 4, (4, 6)).astype(i32)

    def f(x, n):
        return (jnp.cumsum(x, axis=1), jnp.cumsum(n, axis=0), jnp.cumprod(x * 0.5 + 1.0, axis=1),
                lax.cummax(x, axis=1), lax.cummin(n, axis=1), lax.cumsum(x, axis=1, reverse=True))
    return f, [x, n]


@program("convolution")
def _(rng):
    x = rng.standard_normal((2, 3, 9, 8)).astype(f32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(f32)
    wg = rng.standard_normal((6, 1, 3, 2)).astype(f32)
    x1 = rng.standard_normal((2, 5, 4)).astype(f32)  # NWC
    w1 = rng.standard_normal((3, 4, 6)).astype(f32)  # WIO

    def f(x, w, wg, x1, w1):
        same = lax.conv_general_dilated(x, w, (1, 1), "SAME")
        strided = lax.conv_general_dilated(x, w, (2, 3), ((1, 2), (0, 1)),
                                           rhs_dilation=(2, 1))
        dilated = lax.conv_general_dilated(x, w, (1, 1), ((0, 0), (-1, 1)), lhs_dilation=(2, 1))
        grouped = lax.conv_general_dilated(x, wg, (1, 1), ((1, 1), (0, 0)),
                                           feature_group_count=3)
        nwc = lax.conv_general_dilated(x1, w1, (1,), "SAME",
                                       dimension_numbers=("NWC", "WIO", "NWC"))
        batch_grouped = lax.conv_general_dilated(
            x, jnp.ones((4, 3, 2, 2), jnp.float32), (1, 1), "VALID", batch_group_count=2)
        weight_grad = jax.grad(lambda w: lax.conv_general_dilated(
            x, w, (1, 1), "VALID").sum())(w)
        return same, strided, dilated, grouped, nwc, batch_grouped, weight_grad
    return f, [x, w, wg, x1, w1]


@program("precision_and_pooling")
def _(rng):
    x = (rng.standard_normal((4, 6)) * 1e3).astype(f32)
    x[0, 0], x[0, 1], x[0, 2] = np.nan, np.inf, 1e-30
    x[1, 0] = 70000.0
    img = rng.standard_normal((6, 6)).astype(f32)

    def f(x, img):
        def pool(a):
            return lax.reduce_window(a, -jnp.inf, lax.max, (2, 2), (2, 2), "VALID").sum()

        def pool_overlap(a):
            return lax.reduce_window(a, -jnp.inf, lax.max, (3, 3), (2, 2), "SAME").sum()
        return (lax.reduce_precision(x, 5, 10), lax.reduce_precision(x, 8, 7),
                lax.reduce_precision(x, 4, 2), jax.grad(pool)(img), jax.grad(pool_overlap)(img))
    return f, [x, img]


def main(check: bool) -> bool:
    ok = True
    for name, (fn, args) in PROGRAMS.items():
        text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
        outputs = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
        arrays = {f"arg{i}": a for i, a in enumerate(args)}
        arrays.update({f"out{i}": np.asarray(o) for i, o in enumerate(outputs)})
        hlo, npz = os.path.join(HERE, f"{name}.hlo"), os.path.join(HERE, f"{name}.npz")
        if check:
            stored = np.load(npz)
            with open(hlo) as f:
                same = f.read() == text and all(
                    np.array_equal(stored[k], v, equal_nan=v.dtype.kind == "f")
                    for k, v in arrays.items())
            print(f"{name}: {'same' if same else 'DIFFERENT'}")
            ok = ok and same
            continue
        with open(hlo, "w") as f:
            f.write(text)
        np.savez(npz, **arrays)
        print(f"{name}: {len(text.splitlines())} lines, {len(outputs)} outputs")
    return ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    sys.exit(0 if main(parser.parse_args().check) else 1)
