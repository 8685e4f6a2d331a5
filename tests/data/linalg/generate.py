"""Regenerate the linear-algebra corpus in this directory.

Run from the repository root (needs JAX; tests only read the stored files):

    .venv/bin/python tests/data/linalg/generate.py           # rewrite every file
    .venv/bin/python tests/data/linalg/generate.py --check   # re-run JAX, compare
    .venv/bin/python tests/data/linalg/generate.py --only cholesky,svd

For every program `<name>` of `PROGRAMS`, element type `<t>` (f32 exported without x64, f64
with it) and batch form `<b>` (`one`: a single matrix, `batch`: 6 matrices):

* `<name>.<t>.<b>.cpu.hlo`: JAX's CPU lowering (LAPACK custom calls `lapack_?potrf_ffi`, ...);
* `<name>.<t>.<b>.gpu.hlo`: JAX's GPU lowering, `jax.jit(f).trace(*args).lower(
  lowering_platforms=("cuda",))` (cuSOLVER calls and `triangular-solve`; no GPU needed);
* `<name>.<t>.<b>.tpu.hlo`, for the programs of `OPCODE_ONLY`: JAX's TPU lowering (no TPU
  needed), whose Cholesky and triangular solves are the `cholesky` and `triangular-solve`
  opcodes (the GPU lowering calls cuSOLVER for Cholesky);
* `<name>.<t>.<b>.npz`: the inputs `arg0, arg1, ...`, JAX's CPU outputs `out0, out1, ...`,
  and `cond`, the largest 2-norm condition number of the input matrices (tests derive their
  tolerances from it).
"""

from __future__ import annotations

import argparse
import os
import sys
import zlib
from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 6

Maker = Callable[[np.random.Generator, tuple[int, ...], type], list[np.ndarray]]


def _general(rng: np.random.Generator, batch: tuple[int, ...], n: int,
             columns: int | None = None) -> np.ndarray:
    a = rng.standard_normal((*batch, n, columns or n))
    if columns is None:
        a += 2.0 * np.eye(n)  # keeps the condition numbers moderate
    return a


def _spd(rng: np.random.Generator, batch: tuple[int, ...], n: int) -> np.ndarray:
    x = rng.standard_normal((*batch, n, n))
    return x @ np.swapaxes(x, -1, -2) + n * np.eye(n)


def square(n: int) -> Maker:
    return lambda rng, batch, dt: [_general(rng, batch, n).astype(dt)]


def rectangular(m: int, n: int) -> Maker:
    return lambda rng, batch, dt: [_general(rng, batch, m, n).astype(dt)]


def spd(n: int) -> Maker:
    return lambda rng, batch, dt: [_spd(rng, batch, n).astype(dt)]


def spd_and_rhs(n: int, r: int) -> Maker:
    return lambda rng, batch, dt: [_spd(rng, batch, n).astype(dt),
                                   rng.standard_normal((*batch, n, r)).astype(dt)]


def system(n: int, r: int) -> Maker:
    return lambda rng, batch, dt: [_general(rng, batch, n).astype(dt),
                                   rng.standard_normal((*batch, n, r)).astype(dt)]


def indefinite(n: int) -> Maker:
    """SPD matrices except the first, whose last pivot is negative (JAX gives NaNs)."""
    def make(rng: np.random.Generator, batch: tuple[int, ...], dt: type) -> list[np.ndarray]:
        a = _spd(rng, batch, n)
        flat = a.reshape(-1, n, n)
        flat[0, -1, -1] = -1.0
        return [a.astype(dt)]
    return make


def rigid_body_rollout(q: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A chain of bodies: each step factorises its configuration-dependent mass matrix
    M(q) = I + s s^T (s = sin q) and solves M a = f for the accelerations, 25 steps of
    semi-implicit Euler, as a physics engine's generalised-coordinates pipeline does."""
    n = q.shape[-1]

    def step(state: tuple[jax.Array, jax.Array], _: None) -> tuple[tuple[jax.Array, jax.Array],
                                                                    None]:
        q, v = state
        s = jnp.sin(q)
        mass = jnp.eye(n, dtype=q.dtype) + jnp.einsum("...i,...j->...ij", s, s)
        force = -q - 0.1 * v + 0.5 * jnp.cos(q)
        acc = jsl.cho_solve(jsl.cho_factor(mass, lower=True), force[..., None])[..., 0]
        v = v + 0.05 * acc
        return (q + 0.05 * v, v), None

    (q, v), _ = jax.lax.scan(step, (q, v), None, length=25)
    return q, v


def implicit_rollout(x: jax.Array) -> jax.Array:
    """Backward Euler on a nonlinear oscillator chain: each step linearises the dynamics at
    the state (a Jacobian that is not symmetric) and solves (I - h J) dx = h f(x) with
    `jnp.linalg.solve` (LU with partial pivoting), 25 steps, as a stiff integrator does."""
    n = x.shape[-1]
    eye = jnp.eye(n, dtype=x.dtype)
    shift = jnp.roll(eye, 1, axis=-1)  # couples each coordinate to the next
    h = 0.1

    def step(x: jax.Array, _: None) -> tuple[jax.Array, None]:
        f = -x + 0.8 * jnp.tanh(x) @ shift.T
        jac = -eye + 0.8 * (1.0 - jnp.tanh(x) ** 2)[..., None, :] * shift
        dx = jnp.linalg.solve(eye - h * jac, h * f[..., None])[..., 0]
        return x + dx, None

    x, _ = jax.lax.scan(step, x, None, length=25)
    return x


def states(n: int) -> Maker:
    return lambda rng, batch, dt: [rng.standard_normal((*batch, n)).astype(dt)]


def bodies(n: int) -> Maker:
    return lambda rng, batch, dt: [rng.standard_normal((*batch, n)).astype(dt),
                                   np.zeros((*batch, n), dt)]


PROGRAMS: dict[str, tuple[Callable[..., object], Maker]] = {
    "rollout_rigid_body": (rigid_body_rollout, bodies(5)),
    "rollout_implicit": (implicit_rollout, states(4)),
    "cholesky": (jnp.linalg.cholesky, spd(5)),
    "cholesky_indefinite": (jnp.linalg.cholesky, indefinite(4)),
    "solve": (jnp.linalg.solve, system(5, 3)),
    "inv": (jnp.linalg.inv, square(4)),
    "qr": (jnp.linalg.qr, square(4)),
    "qr_tall": (jnp.linalg.qr, rectangular(6, 3)),
    "eigh": (jnp.linalg.eigh, spd(5)),
    "svd": (jnp.linalg.svd, square(4)),
    "svd_tall": (jnp.linalg.svd, rectangular(5, 3)),
    "svd_qr": (lambda a: jax.lax.linalg.svd(a, full_matrices=False,
                                            algorithm=jax.lax.linalg.SvdAlgorithm.QR),
               rectangular(5, 4)),
    "svd_qr_wide": (lambda a: jax.lax.linalg.svd(a, full_matrices=True,
                                                 algorithm=jax.lax.linalg.SvdAlgorithm.QR),
                    rectangular(3, 5)),
    "svd_wide": (lambda a: jnp.linalg.svd(a, full_matrices=False), rectangular(3, 5)),
    "cho_solve": (lambda a, b: jsl.cho_solve(jsl.cho_factor(a, lower=True), b),
                  spd_and_rhs(5, 2)),
    "solve_triangular_lower": (lambda a, b: jsl.solve_triangular(a, b, lower=True),
                               system(4, 3)),
    "solve_triangular_upper_trans": (
        lambda a, b: jsl.solve_triangular(a, b, lower=False, trans=1, unit_diagonal=True),
        system(4, 2)),
}
# The matrix whose condition number bounds a program's error, when it is not the first input.
CONDITIONED: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "solve_triangular_lower": np.tril,
    "solve_triangular_upper_trans": lambda a: np.triu(a, 1) + np.eye(a.shape[-1]),
}
# Programs whose TPU lowering has no custom calls (the others call TPU libraries: Qr, Eigh,
# LuDecomposition, ...).
OPCODE_ONLY = frozenset({"rollout_rigid_body", "cholesky", "cholesky_indefinite", "cho_solve",
                         "solve_triangular_lower", "solve_triangular_upper_trans"})
DTYPES = {"f32": np.float32, "f64": np.float64}
BATCHES = {"one": (), "batch": (BATCH,)}


def cond(name: str, arrays: list[np.ndarray]) -> float:
    if name.startswith("rollout_"):
        return 1.0  # tests compare rollouts as the rollout corpus does (rtol 1e-4)
    a = CONDITIONED.get(name, lambda x: x)(arrays[0].astype(np.float64))
    s = np.linalg.svd(a.reshape(-1, *a.shape[-2:]), compute_uv=False)
    return float(np.max(s[:, 0] / np.maximum(s[:, -1], 1e-300)))


def export(name: str, dtype: str, batch: str) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    fn, make = PROGRAMS[name]
    jax.config.update("jax_enable_x64", dtype == "f64")
    rng = np.random.default_rng(zlib.crc32(f"{name}.{dtype}.{batch}".encode()))
    args = make(rng, BATCHES[batch], DTYPES[dtype])
    jitted = jax.jit(fn)
    cpu = jitted.lower(*args).as_text(dialect="hlo")
    texts = {"cpu": cpu}
    for form, platform in (("gpu", "cuda"), ("tpu", "tpu")):
        if form == "tpu" and name not in OPCODE_ONLY:
            continue
        lowered = jitted.trace(*args).lower(lowering_platforms=(platform,))
        texts[form] = lowered.as_text(dialect="hlo")
    outputs = jax.tree_util.tree_leaves(jitted(*args))
    arrays = {f"arg{i}": a for i, a in enumerate(args)}
    arrays.update({f"out{i}": np.asarray(o) for i, o in enumerate(outputs)})
    arrays["cond"] = np.asarray(cond(name, args))
    return texts, arrays


def main(check: bool, only: list[str] | None) -> bool:
    ok = True
    for name in PROGRAMS:
        if only and name not in only:
            continue
        for dtype in DTYPES:
            for batch in BATCHES:
                stem = os.path.join(HERE, f"{name}.{dtype}.{batch}")
                forms, arrays = export(name, dtype, batch)
                texts = {f"{stem}.{form}.hlo": text for form, text in forms.items()}
                if check:
                    stored = np.load(f"{stem}.npz")
                    same = set(stored.files) == set(arrays) and all(
                        np.array_equal(stored[k], v, equal_nan=True) for k, v in arrays.items())
                    for path, text in texts.items():
                        with open(path) as f:
                            same = same and f.read() == text
                    print(f"{stem}: {'same' if same else 'DIFFERENT'}")
                    ok = ok and same
                    continue
                for path, text in texts.items():
                    with open(path, "w") as f:
                        f.write(text)
                np.savez(f"{stem}.npz", **arrays)
                print(f"{os.path.basename(stem)}: cond {float(arrays['cond']):.1f}")
    return ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true",
                        help="re-run JAX and compare with the stored files")
    parser.add_argument("--only", default="", help="comma-separated program names")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or None
    sys.exit(0 if main(args.check, names) else 1)
