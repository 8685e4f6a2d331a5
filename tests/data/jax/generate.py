"""Regenerate the JAX-exported HLO corpus in this directory.

Run from the repository root:

    .venv/bin/python tests/data/jax/generate.py          # write <name>.hlo / <name>.npz
    .venv/bin/python tests/data/jax/generate.py --check  # re-run JAX, compare with stored files

For every program below this writes

* ``<name>.hlo``: ``jax.jit(f).lower(*args).as_text(dialect="hlo")`` -- the
  pre-optimisation HLO that JAX hands to XLA.  Programs marked ``debug=True``
  are printed with ``debug_info=True``, which adds ``metadata={op_name=...
  stack_frame_id=...}`` to instructions plus ``FileNames`` / ``FunctionNames``
  / ``FileLocations`` / ``StackFrames`` tables after the ``HloModule`` line.
* ``<name>.npz``: inputs ``arg0, arg1, ...`` (parameter order) and JAX's
  outputs ``out0, out1, ...`` (flattened outputs in order).

Tests only read the stored files; JAX is needed only to regenerate them.
Every function takes plain positional numpy arrays (explicit dtypes) and jax
x64 mode stays disabled.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# Keep file names in the debug-info tables relative to the repository root so
# regenerating from another checkout gives identical text.
jax.config.update("jax_hlo_source_file_canonicalization_regex", r"^.*/(?=tests/data/jax/)")
assert not jax.config.jax_enable_x64

HERE = os.path.dirname(os.path.abspath(__file__))
FORBIDDEN = ("gather(", "scatter(", "sort(", "custom-call(")

PROGRAMS: list[tuple[str, object, list[np.ndarray], bool]] = []


def program(name: str, debug: bool):
    """Register ``fn`` whose ``make_args(rng)`` supplies the inputs."""

    def deco(make):
        fn, args = make(np.random.default_rng(sum(map(ord, name))))
        for a in args:
            assert isinstance(a, np.ndarray), (name, type(a))
        PROGRAMS.append((name, fn, args, debug))
        return make

    return deco


f32, i32, u32 = np.float32, np.int32, np.uint32


def normal(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(f32)


# ---------------------------------------------------------------- elementwise


@program("elementwise_math", debug=True)
def _(rng):
    x = rng.uniform(0.1, 3.0, (4, 8)).astype(f32)
    y = normal(rng, (4, 8))

    def f(x, y):
        a = jnp.exp(y) + jnp.log(x) * jnp.sin(y) - jnp.cos(x)
        b = jnp.tanh(y) * jnp.sqrt(x) + lax.rsqrt(x)
        c = jnp.abs(y) ** 1.5 + jnp.power(x, y) - jax.nn.sigmoid(y)
        d = jnp.expm1(y * 0.1) + jnp.log1p(x) + jnp.floor(y * 3) + jnp.ceil(y * 3)
        e = jnp.round(y * 4) + jnp.sign(y) + jnp.arctan2(y, x) + y / x
        g = jnp.maximum(x, y) - jnp.minimum(x, y) + lax.erf(y) + jnp.tan(y * 0.5)
        h = -y * y + jnp.square(x) + jnp.reciprocal(x) + lax.cbrt(y)
        return a, b, c, d, e, g, h

    return f, [x, y]


@program("broadcasting", debug=False)
def _(rng):
    x = normal(rng, (3, 1, 5))
    y = normal(rng, (1, 4, 5))
    z = normal(rng, (5,))
    s = np.array(2.5, f32)

    def f(x, y, z, s):
        a = x + y * z
        b = jnp.broadcast_to(z, (2, 3, 5)) * s
        c = (x * s)[:, :, None, :] - y[:, :, :, None]  # (3,4,5,5)
        d = jnp.expand_dims(z, 0) + jnp.expand_dims(z, 1)
        return a, b, c, d + 1.0

    return f, [x, y, z, s]


@program("reductions", debug=True)
def _(rng):
    x = normal(rng, (6, 7))
    n = rng.integers(-50, 50, (6, 7)).astype(i32)
    m = rng.random((6, 7)) < 0.3

    def f(x, n, m):
        return (
            jnp.sum(x, axis=0),
            jnp.max(x, axis=1),
            jnp.min(x),
            jnp.prod(x * 0.5 + 1.0, axis=1),
            jnp.mean(x, axis=(0, 1)),
            jnp.sum(n, axis=1),
            jnp.max(n, axis=0),
            jnp.any(m, axis=1),
            jnp.all(m, axis=0),
            jnp.sum(m.astype(jnp.int32)),
        )

    return f, [x, n, m]


@program("argmax", debug=False)
def _(rng):
    x = normal(rng, (5, 9))
    x[1, 2] = x[1, 6] = 10.0  # ties: first index wins
    x[3, :] = 1.0  # all equal
    n = rng.integers(-3, 3, (5, 9)).astype(i32)

    def f(x, n):
        return (
            jnp.argmax(x, axis=1).astype(jnp.int32),
            jnp.argmin(x, axis=0).astype(jnp.int32),
            jnp.argmax(n, axis=0).astype(jnp.int32),
            jnp.argmax(x.reshape(-1)).astype(jnp.int32),
        )

    return f, [x, n]


# ---------------------------------------------------------------- linear algebra / nn


@program("matmul_bias_relu", debug=True)
def _(rng):
    x, w, b = normal(rng, (8, 16)), normal(rng, (16, 12), 0.3), normal(rng, (12,))

    def f(x, w, b):
        return jax.nn.relu(x @ w + b)

    return f, [x, w, b]


@program("softmax", debug=False)
def _(rng):
    x = normal(rng, (4, 10), 3.0)

    def f(x):
        return jax.nn.softmax(x, axis=-1), jax.nn.log_softmax(x, axis=0)

    return f, [x]


@program("layer_norm", debug=True)
def _(rng):
    x, g, b = normal(rng, (6, 16), 2.0), normal(rng, (16,)), normal(rng, (16,))

    def f(x, gamma, beta):
        mu = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
        return (x - mu) * lax.rsqrt(var + 1e-5) * gamma + beta

    return f, [x, g, b]


def _mlp(params, x):
    w1, b1, w2, b2, w3, b3 = params
    h = jnp.tanh(x @ w1 + b1)
    h = jax.nn.relu(h @ w2 + b2)
    return h @ w3 + b3


def _mlp_params(rng):
    return [normal(rng, (10, 32), 0.3), normal(rng, (32,), 0.1),
            normal(rng, (32, 16), 0.2), normal(rng, (16,), 0.1),
            normal(rng, (16, 4), 0.3), normal(rng, (4,), 0.1)]


@program("mlp", debug=False)
def _(rng):
    params = _mlp_params(rng)
    x = normal(rng, (8, 10))
    labels = rng.integers(0, 4, (8,)).astype(i32)

    def f(x, labels, w1, b1, w2, b2, w3, b3):
        logits = _mlp((w1, b1, w2, b2, w3, b3), x)
        onehot = jax.nn.one_hot(labels, 4, dtype=jnp.float32)
        loss = -jnp.mean(jnp.sum(onehot * jax.nn.log_softmax(logits), axis=-1))
        return logits, loss

    return f, [x, labels] + params


@program("mlp_grad", debug=True)
def _(rng):
    params = _mlp_params(rng)
    x, y = normal(rng, (8, 10)), normal(rng, (8, 4))

    def f(x, y, w1, b1, w2, b2, w3, b3):
        def loss(p):
            return jnp.mean(jnp.square(_mlp(p, x) - y))

        value, g = jax.value_and_grad(loss)((w1, b1, w2, b2, w3, b3))
        return (value,) + tuple(g)

    return f, [x, y] + params


@program("adam_update", debug=False)
def _(rng):
    shapes = [(4, 5), (5,), (3, 3)]
    ps = [normal(rng, s) for s in shapes]
    gs = [normal(rng, s) for s in shapes]
    ms = [normal(rng, s, 0.1) for s in shapes]
    vs = [np.abs(normal(rng, s, 0.01)) for s in shapes]
    t = np.array(7, i32)

    def f(p0, p1, p2, g0, g1, g2, m0, m1, m2, v0, v1, v2, t):
        lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
        t1 = (t + 1).astype(jnp.float32)
        out_p, out_m, out_v = [], [], []
        for p, g, m, v in zip((p0, p1, p2), (g0, g1, g2), (m0, m1, m2), (v0, v1, v2)):
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            mhat = m / (1 - b1 ** t1)
            vhat = v / (1 - b2 ** t1)
            out_p.append(p - lr * mhat / (jnp.sqrt(vhat) + eps))
            out_m.append(m)
            out_v.append(v)
        return tuple(out_p + out_m + out_v) + (t + 1,)

    return f, ps + gs + ms + vs + [t]


@program("batched_matmul", debug=True)
def _(rng):
    a, b = normal(rng, (4, 3, 5)), normal(rng, (4, 5, 2))
    q, k = normal(rng, (2, 3, 4, 8)), normal(rng, (2, 3, 6, 8))
    m = normal(rng, (5, 7))

    def f(a, b, q, k, m):
        ab = jnp.einsum("bij,bjk->bik", a, b)
        qk = jnp.einsum("bhqd,bhkd->bhqk", q, k)
        am = jnp.einsum("bji,jk->bik", a.transpose(0, 2, 1), m)  # contracting non-last dim
        vec = jnp.einsum("bij,j->bi", a, m[:, 0])
        return ab, qk, am, vec

    return f, [a, b, q, k, m]


# ---------------------------------------------------------------- control flow


@program("scan_cumsum", debug=False)
def _(rng):
    x = normal(rng, (10, 4))
    c0 = normal(rng, (4,))

    def f(x, c0):
        def body(c, xi):
            c = c + xi
            return c, c * 2.0

        return lax.scan(body, c0, x)

    return f, [x, c0]


@program("fori_loop", debug=True)
def _(rng):
    a = rng.uniform(0.5, 20.0, (12,)).astype(f32)

    def f(a):
        # 8 Newton iterations for sqrt(a), plus an integer counter carried along.
        def body(i, c):
            y, acc = c
            return 0.5 * (y + a / y), acc + i

        return lax.fori_loop(0, 8, body, (a, jnp.int32(0)))

    return f, [a]


@program("while_loop", debug=False)
def _(rng):
    n = rng.integers(1, 40, (10,)).astype(i32)

    def f(n):
        # Collatz: number of steps until every element reaches 1.
        def cond(c):
            x, _, _ = c
            return jnp.any(x != 1)

        def body(c):
            x, steps, it = c
            nx = jnp.where(x % 2 == 0, x // 2, 3 * x + 1)
            nx = jnp.where(x == 1, 1, nx)
            return nx, steps + (x != 1).astype(jnp.int32), it + 1

        return lax.while_loop(cond, body, (n, jnp.zeros_like(n), jnp.int32(0)))

    return f, [n]


@program("cond", debug=True)
def _(rng):
    x = normal(rng, (6,))
    pred = np.array(True)
    idx = np.array(2, i32)
    idx_oob = np.array(7, i32)  # lax.switch clamps the index

    def f(x, pred, idx, idx_oob):
        a = lax.cond(pred, lambda v: jnp.sin(v) * 2.0, lambda v: v - 1.0, x)
        b = lax.cond(jnp.logical_not(pred), lambda v: jnp.sin(v) * 2.0, lambda v: v - 1.0, x)
        branches = [lambda v: v + 1.0, lambda v: v * v, lambda v: jnp.exp(v)]
        c = lax.switch(idx, branches, x)
        d = lax.switch(idx_oob, branches, x)
        e = lax.cond(jnp.sum(x) > 0, lambda: jnp.int32(1), lambda: jnp.int32(-1))
        return a, b, c, d, e

    return f, [x, pred, idx, idx_oob]


# ---------------------------------------------------------------- random


@program("random_uniform", debug=False)
def _(rng):
    seed = np.array(42, i32)

    def f(seed):
        key = jax.random.PRNGKey(seed)
        k1, k2 = jax.random.split(key)
        u = jax.random.uniform(k1, (4, 8))
        r = jax.random.uniform(jax.random.fold_in(k2, 3), (5,), minval=-2.0, maxval=3.0)
        z = jax.random.normal(k2, (6,))
        bits = jax.random.bits(key, (4,), dtype=jnp.uint32)
        return u, r, z, bits

    return f, [seed]


@program("random_bernoulli", debug=True)
def _(rng):
    seed = np.array(7, i32)
    p = rng.uniform(0, 1, (16,)).astype(f32)

    def f(seed, p):
        key = jax.random.PRNGKey(seed)
        ka, kb, kc = jax.random.split(key, 3)
        a = jax.random.bernoulli(ka, 0.5, (16,))
        b = jax.random.bernoulli(kb, p)
        c = jax.random.randint(kc, (8,), 0, 10, dtype=jnp.int32)
        return a, b, c

    return f, [seed, p]


# ---------------------------------------------------------------- data movement


@program("concat_stack_slice", debug=False)
def _(rng):
    a, b, c = normal(rng, (3, 4)), normal(rng, (2, 4)), normal(rng, (3, 4))

    def f(a, b, c):
        cat0 = jnp.concatenate([a, b, c], axis=0)  # (8,4)
        cat1 = jnp.concatenate([a, c], axis=1)  # (3,8)
        st = jnp.stack([a, c], axis=1)  # (3,2,4)
        sl = cat0[1:7:2, ::3]
        rs = cat0.reshape(2, 16)[:, 4:12].reshape(4, 2, 2)
        col = a[:, 2]
        return cat0, cat1, st, sl, rs, col

    return f, [a, b, c]


@program("dynamic_slice_update", debug=True)
def _(rng):
    x = normal(rng, (8, 6))
    upd = normal(rng, (2, 3))
    i, j = np.array(3, i32), np.array(1, i32)
    k = np.array(7, i32)  # out of bounds: start index gets clamped
    neg = np.array(-2, i32)  # jax wraps negative indices

    def f(x, upd, i, j, k, neg):
        a = lax.dynamic_slice(x, (i, j), (3, 2))
        b = lax.dynamic_update_slice(x, upd, (i, j))
        c = lax.dynamic_slice(x, (k, k), (3, 2))
        d = lax.dynamic_update_slice(x, upd, (k, neg))
        e = lax.dynamic_index_in_dim(x, i, axis=0, keepdims=False)
        g = lax.dynamic_update_slice(x, jnp.zeros((1, 6), x.dtype), (j, jnp.int32(0)))
        return a, b, c, d, e, g

    return f, [x, upd, i, j, k, neg]


@program("iota_transpose", debug=False)
def _(rng):
    x = normal(rng, (2, 3, 4))

    def f(x):
        r = jnp.arange(6, dtype=jnp.int32)
        io = lax.broadcasted_iota(jnp.float32, (3, 4), 1)
        t = jnp.transpose(x, (2, 0, 1))
        t2 = x.reshape(6, 4).T
        eye = jnp.eye(4, dtype=jnp.float32)
        return r * 3, io + x[0], t, t2, eye, jnp.arange(0.5, 3.0, 0.5, dtype=jnp.float32)

    return f, [x]


@program("pad_reverse", debug=True)
def _(rng):
    x = normal(rng, (3, 4))
    v = np.arange(6, dtype=i32)

    def f(x, v):
        a = jnp.pad(x, ((1, 2), (0, 3)), constant_values=-1.0)
        b = lax.pad(x, jnp.float32(0.5), [(1, -1, 1), (-1, 2, 2)])  # interior + negative
        c = jnp.flip(x, axis=1)
        d = lax.rev(x, (0, 1))
        e = jnp.roll(v, 2)
        g = jnp.pad(v, (2, 1), mode="edge")
        return a, b, c, d, e, g

    return f, [x, v]


@program("reduce_window", debug=False)
def _(rng):
    x = normal(rng, (6, 8))
    v = rng.uniform(0.5, 1.5, (10,)).astype(f32)

    def f(x, v):
        mp = lax.reduce_window(x, -jnp.inf, lax.max, (2, 2), (2, 2), "VALID")
        sp = lax.reduce_window(x, 0.0, lax.add, (3, 3), (1, 1), "SAME") / 9.0
        return mp, sp, jnp.cumsum(v), jnp.cumprod(v), lax.cummax(x, axis=1)

    return f, [x, v]


# ---------------------------------------------------------------- integers, types, special values


@program("integer_bits", debug=True)
def _(rng):
    a = rng.integers(-1000, 1000, (12,)).astype(i32)
    a[0], a[1] = 2**31 - 1, -(2**31)
    b = rng.integers(1, 50, (12,)).astype(i32) * rng.choice([-1, 1], 12).astype(i32)
    sh = rng.integers(0, 32, (12,)).astype(i32)
    u = rng.integers(0, 2**32, (12,), dtype=np.uint64).astype(u32)

    def f(a, b, sh, u):
        sl = lax.shift_left(a, sh)
        sra = lax.shift_right_arithmetic(a, sh)
        srl = lax.shift_right_logical(a, sh)
        bits = (a & b) ^ (a | 0x0F0F) ^ ~b
        pc = lax.population_count(a) + lax.population_count(u).astype(jnp.int32)
        tdiv, trem = lax.div(a, b), lax.rem(a, b)  # truncating (C semantics)
        fdiv, fmod = a // b, a % b  # floor (Python semantics)
        wrap = a * 65537 + jnp.int32(2**31 - 1)  # wraps around
        umix = (u * u32(2654435761)) ^ (u >> u32(7)) + (u << u32(3))
        udiv = u // u32(7), u % u32(1000)
        clz = lax.clz(a)
        return sl, sra, srl, bits, pc, tdiv, trem, fdiv, fmod, wrap, umix, udiv[0], udiv[1], clz

    return f, [a, b, sh, u]


@program("compare_select_clamp", debug=False)
def _(rng):
    x = normal(rng, (10,))
    y = normal(rng, (10,))
    x[2] = x[7] = np.nan
    y[5] = y[7] = np.nan
    y[3] = x[3]
    m = rng.random(10) < 0.5

    def f(x, y, m):
        cmps = (x == y, x != y, x < y, x <= y, x > y, x >= y)
        sel = jnp.where(m, x, y)
        sel2 = jnp.where(x > 0, x, -y)
        cl = jnp.clip(x, -0.5, 0.5)
        clx = lax.clamp(jnp.float32(-0.25), y, jnp.float32(0.25))
        mx, mn = jnp.maximum(x, y), jnp.minimum(x, y)
        flags = jnp.isnan(x) | jnp.isinf(y) | (m & jnp.isfinite(x))
        n2n = jnp.nan_to_num(x, nan=-9.0)
        return cmps + (sel, sel2, cl, clx, mx, mn, flags, n2n, jnp.logical_xor(m, x > y))

    return f, [x, y, m]


@program("convert_types", debug=True)
def _(rng):
    x = (normal(rng, (12,)) * 100.0).astype(f32)
    x[:4] = [2.5, -2.5, 0.49999997, -7.99]
    n = rng.integers(-(2**24) - 10, 2**24 + 10, (12,)).astype(i32)
    n[:3] = [2**31 - 1, -(2**31), 16777217]
    hp = np.array([1.0, 1.0009765625, 1.00048828125, 1.000732421875, 65504.0, 7e-6, 3.14159265,
                   -0.1], f32)
    u = rng.integers(0, 2**32, (6,), dtype=np.uint64).astype(u32)

    def f(x, n, hp, u):
        return (
            x.astype(jnp.int32),  # truncation toward zero
            n.astype(jnp.float32),  # rounding for |n| > 2**24
            x != 0,
            (x > 0).astype(jnp.float32),
            (n > 0).astype(jnp.int32),
            hp.astype(jnp.float16).astype(jnp.float32),
            hp.astype(jnp.bfloat16).astype(jnp.float32),
            hp.astype(jnp.float16),
            # npz has no bfloat16
            lax.bitcast_convert_type((hp * 3.0).astype(jnp.bfloat16), jnp.uint16),
            u.astype(jnp.int32),
            u.astype(jnp.float32),
            n.astype(jnp.uint32),
            lax.bitcast_convert_type(x, jnp.uint32),
            lax.bitcast_convert_type(u, jnp.float32),
            jnp.int32(3) * x.astype(jnp.int8).astype(jnp.int32),
        )

    return f, [x, n, hp, u]


@program("special_floats", debug=False)
def _(rng):
    x = np.array([0.0, -0.0, 1.0, -1.0, 3.4028235e38, 1e-45, np.inf, -np.inf, np.nan], f32)

    def f(x):
        consts = jnp.array([jnp.inf, -jnp.inf, jnp.nan, 0.0, -0.0, 3.4028235e38, 1.17549435e-38],
                           jnp.float32)
        return (
            consts,
            x[:7] * consts,
            x + jnp.float32(np.nan),
            x * jnp.float32(-0.0),
            jnp.minimum(x, jnp.float32(-np.inf)),
            jnp.log(x),
            jnp.sqrt(x),
            1.0 / x,
            x / x,
            x - x,
            jnp.exp(x * 1000.0),
            x * 2.0,
            jnp.log(jnp.float32(0.0)) + x[2],
            jnp.sqrt(jnp.float32(-1.0)) * x[2],
            jnp.where(jnp.isnan(x), jnp.inf, x),
        )

    return f, [x]


# ---------------------------------------------------------------- captured constant

_CAPTURED = (np.linspace(-2.0, 2.0, 50) ** 3).astype(f32)
_CAPTURED_INT = np.arange(50, dtype=i32) * 37 % 11


@program("captured_constant", debug=True)
def _(rng):
    x = normal(rng, (50,))

    def f(x):
        return x * _CAPTURED + 1.0, jnp.sum(jnp.where(_CAPTURED_INT > 5, x, 0.0)), _CAPTURED_INT + 1

    return f, [x]


# ------------------------------------------------------------ CartPole (see docs/cartpole.md)

GRAVITY, MASSCART, MASSPOLE = 9.8, 1.0, 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG, TAU = 10.0, 0.02
THETA_THRESHOLD = 12 * 2 * np.pi / 360
X_THRESHOLD = 2.4


def cartpole_dynamics(state, action):
    """state (N,4) float32, action (N,) int -> (new_state (N,4), done (N,) bool)."""
    x, x_dot, theta, theta_dot = state[:, 0], state[:, 1], state[:, 2], state[:, 3]
    force = jnp.where(action == 1, FORCE_MAG, -FORCE_MAG).astype(jnp.float32)
    c, s = jnp.cos(theta), jnp.sin(theta)
    temp = (force + POLEMASS_LENGTH * theta_dot**2 * s) / TOTAL_MASS
    thetaacc = (GRAVITY * s - c * temp) / (LENGTH * (4.0 / 3.0 - MASSPOLE * c**2 / TOTAL_MASS))
    xacc = temp - POLEMASS_LENGTH * thetaacc * c / TOTAL_MASS
    x = x + TAU * x_dot
    x_dot = x_dot + TAU * xacc
    theta = theta + TAU * theta_dot
    theta_dot = theta_dot + TAU * thetaacc
    done = (jnp.abs(x) > X_THRESHOLD) | (jnp.abs(theta) > THETA_THRESHOLD)
    return jnp.stack([x, x_dot, theta, theta_dot], axis=1), done


@program("cartpole_step", debug=False)
def _(rng):
    state = rng.uniform(-0.05, 0.05, (16, 4)).astype(f32)
    # some finish
    state[:3] = [[2.39, 1.0, 0.0, 0.0], [0.0, 0.0, 0.2, 1.0], [-2.3, -5.0, -0.1, -2.0]]
    action = rng.integers(0, 2, (16,)).astype(i32)

    def f(state, action):
        return cartpole_dynamics(state, action)

    return f, [state, action]


@program("cartpole_rollout", debug=True)
def _(rng):
    seed = np.array(1234, i32)
    state0 = rng.uniform(-0.05, 0.05, (8, 4)).astype(f32)
    T = 20

    def f(seed, state0):
        key = jax.random.PRNGKey(seed)
        n = state0.shape[0]

        def body(carry, t):
            state, episodes, reward_sum = carry
            k_act, k_reset = jax.random.split(jax.random.fold_in(key, t))
            action = jax.random.bernoulli(k_act, 0.5, (n,)).astype(jnp.int32)
            new_state, done = cartpole_dynamics(state, action)
            reward = jnp.ones((n,), jnp.float32)
            fresh = jax.random.uniform(k_reset, (n, 4), minval=-0.05, maxval=0.05)
            # repack the state by concatenation, as in the reference workload
            cols = [jnp.where(done, fresh[:, i], new_state[:, i])[:, None] for i in range(4)]
            state = jnp.concatenate(cols, axis=1)
            totals = (episodes + jnp.sum(done.astype(jnp.int32)), reward_sum + jnp.sum(reward))
            return (state, *totals), None

        init = (state0, jnp.int32(0), jnp.float32(0.0))
        (state, episodes, reward_sum), _ = lax.scan(body, init, jnp.arange(T, dtype=jnp.int32))
        return state, episodes, reward_sum

    return f, [seed, state0]


@program("cartpole_rollout_deterministic", debug=False)
def _(rng):
    state0 = rng.uniform(-0.2, 0.2, (8, 4)).astype(f32)
    # these finish
    state0[:3] = [[2.3, 1.0, 0.0, 0.0], [-2.2, -1.5, 0.05, 0.0], [0.0, 0.0, 0.19, 0.5]]
    T = 20

    def f(state0):
        # Deterministic variant of the spec: fixed policy, reset to own initial state.
        def body(carry, _):
            state, episodes = carry
            action = (state[:, 3] + 0.5 * state[:, 2] > 0).astype(jnp.int32)
            new_state, done = cartpole_dynamics(state, action)
            state = jnp.where(done[:, None], state0, new_state)
            return (state, episodes + done.astype(jnp.int32)), None

        (state, episodes), _ = lax.scan(body, (state0, jnp.zeros((8,), jnp.int32)), None, length=T)
        return state, episodes

    return f, [state0]


# ---------------------------------------------------------------- driver


def build(name, fn, args, debug):
    """Lower and run one program.  Both modes go through this one call site so
    that the stack frames recorded in debug-info tables are identical."""
    fn.__name__ = name  # module is called jit_<name>
    text = jax.jit(fn).lower(*args).as_text(dialect="hlo", debug_info=debug)
    outs = [np.asarray(o) for o in jax.tree_util.tree_leaves(jax.jit(fn)(*args))]
    return text, outs


def load(name):
    with np.load(os.path.join(HERE, name + ".npz")) as z:
        stored = dict(z)
    nargs = sum(k.startswith("arg") for k in stored)
    nouts = sum(k.startswith("out") for k in stored)
    return [stored[f"arg{i}"] for i in range(nargs)], [stored[f"out{i}"] for i in range(nouts)]


def main(check: bool) -> bool:
    ok = True
    for name, fn, args, debug in PROGRAMS:
        if check:
            args, stored_outs = load(name)
        text, outs = build(name, fn, args, debug)
        bad = [op for op in FORBIDDEN if op in text]
        if bad:
            print(f"{name}: HLO contains forbidden ops {bad}")
            ok = False
        if check:
            same = len(outs) == len(stored_outs) and all(
                o.dtype == s.dtype and o.shape == s.shape
                and np.array_equal(o, s, equal_nan=o.dtype.kind in "fc")
                for o, s in zip(outs, stored_outs)
            )
            with open(os.path.join(HERE, name + ".hlo")) as fh:
                same_text = fh.read() == text
            outputs, hlo = ("ok" if same else "DIFFER"), ("ok" if same_text else "DIFFER")
            print(f"{name:32s} outputs {outputs}  hlo {hlo}")
            ok &= same and same_text
        else:
            with open(os.path.join(HERE, name + ".hlo"), "w") as fh:
                fh.write(text)
            arrays = {f"arg{i}": a for i, a in enumerate(args)}
            arrays.update({f"out{i}": o for i, o in enumerate(outs)})
            np.savez(os.path.join(HERE, name + ".npz"), **arrays)
            print(f"{name:32s} args={len(args):2d} outs={len(outs):2d} debug={debug}")
    return ok


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true",
                    help="re-run JAX and compare with the stored files")
    sys.exit(0 if main(ap.parse_args().check) else 1)
