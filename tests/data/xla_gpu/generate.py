"""Regenerate the XLA GPU oracle corpus in this directory.

Needs the optional extra `xla-gpu` (run with its interpreter, e.g. /work/venv-xla/bin/python):

    JAX_PLATFORMS=cpu PYTHON tests/data/xla_gpu/generate.py            # every program, h100
    JAX_PLATFORMS=cpu PYTHON tests/data/xla_gpu/generate.py NAME ...   # some programs

For every program of the JAX corpus (`tests/data/jax/generate.py`) and the rollouts below it
writes, compiled by XLA for the GPU without one (deviceless, no XLA_FLAGS but the dump):

* `<name>.before.hlo`: the module XLA started from, as XLA printed it: lowered for CUDA, calls
  inlined by hlofuse (`oracle.prepare_for_xla`, so that XLA's names survive its pipeline);
  what `xla-gpu` is fed too;
* `<name>.<device>.hlo`: XLA's optimised HLO for that device;
* `<name>.<device>.thunks.txt`: XLA's thunk (launch) sequence.

It also compiles the rollouts written in other JAX libraries' styles (`styles.py`: an
environment class with `lax.cond` auto-reset, `jax.vmap` of a step with parameter pytrees, a
MinAtar-style int8 board), and the rollout corpus (`tests/data/rollouts/<env>.gpu.hlo`, JAX's
CUDA lowering of the batched environments, stored as `rollout_<env>.*`). The rollouts are
compiled for a100, h100 and h200; the other programs for h100. `MANIFEST` records the jax
version and the devices. Tests only read the stored files.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

from hlofuse.compare_xla import xla_child  # noqa: E402
from hlofuse.compare_xla.oracle import XLA_COMMIT, prepare_for_xla  # noqa: E402
from hlofuse.fusion.xla_gpu.devices import TARGET_CONFIGS  # noqa: E402

HERE = Path(__file__).resolve().parent
JAX_CORPUS = HERE.parent / "jax" / "generate.py"
ROLLOUT_CORPUS = HERE.parent / "rollouts"
ROLLOUT_DEVICES = ("a100", "h100", "h200")
f32 = np.float32


def _jax_corpus() -> list[tuple[str, object, list[np.ndarray]]]:
    spec = importlib.util.spec_from_file_location("jax_corpus_generate", JAX_CORPUS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [(name, fn, args) for name, fn, args, _ in module.PROGRAMS]


# ------------------------------------------------------------------ rollouts (loops)
# Batched environments stepped in a lax.scan, random actions from jax.random, written from the
# public descriptions of the classic-control environments (gymnasium's Pendulum-v1 and
# MountainCar-v0): state update, bounds, termination and reset.

N_ENVS, STEPS = 256, 50


def pendulum_rollout():
    g, m, length, dt, max_speed, max_torque = 10.0, 1.0, 1.0, 0.05, 8.0, 2.0

    def angle_normalize(x):
        return ((x + jnp.pi) % (2 * jnp.pi)) - jnp.pi

    def f(seed, theta0, omega0):
        key = jax.random.PRNGKey(seed)

        def body(carry, t):
            theta, omega, cost_sum = carry
            u = jax.random.uniform(jax.random.fold_in(key, t), theta.shape,
                                   minval=-max_torque, maxval=max_torque)
            cost = angle_normalize(theta) ** 2 + 0.1 * omega ** 2 + 0.001 * u ** 2
            accel = 3 * g / (2 * length) * jnp.sin(theta) + 3.0 / (m * length ** 2) * u
            omega = omega + accel * dt
            omega = jnp.clip(omega, -max_speed, max_speed)
            theta = theta + omega * dt
            return (theta, omega, cost_sum + jnp.sum(cost)), None

        init = (theta0, omega0, jnp.float32(0.0))
        (theta, omega, cost), _ = lax.scan(body, init, jnp.arange(STEPS, dtype=jnp.int32))
        return theta, omega, cost

    rng = np.random.default_rng(7)
    return f, [np.array(3, np.int32), rng.uniform(-np.pi, np.pi, N_ENVS).astype(f32),
               rng.uniform(-1, 1, N_ENVS).astype(f32)]


def mountain_car_rollout():
    min_pos, max_pos, max_speed, goal, force, gravity = -1.2, 0.6, 0.07, 0.5, 0.001, 0.0025

    def f(seed, position0, velocity0):
        key = jax.random.PRNGKey(seed)

        def body(carry, t):
            position, velocity, done_count = carry
            k_act, k_reset = jax.random.split(jax.random.fold_in(key, t))
            action = jax.random.randint(k_act, position.shape, 0, 3)
            velocity = velocity + (action - 1).astype(jnp.float32) * force \
                - jnp.cos(3 * position) * gravity
            velocity = jnp.clip(velocity, -max_speed, max_speed)
            position = jnp.clip(position + velocity, min_pos, max_pos)
            velocity = jnp.where((position == min_pos) & (velocity < 0), 0.0, velocity)
            done = position >= goal
            fresh = jax.random.uniform(k_reset, position.shape, minval=-0.6, maxval=-0.4)
            position = jnp.where(done, fresh, position)
            velocity = jnp.where(done, 0.0, velocity)
            return (position, velocity, done_count + jnp.sum(done.astype(jnp.int32))), None

        init = (position0, velocity0, jnp.int32(0))
        (position, velocity, count), _ = lax.scan(body, init, jnp.arange(STEPS, dtype=jnp.int32))
        return position, velocity, count

    rng = np.random.default_rng(11)
    return f, [np.array(5, np.int32), rng.uniform(-0.6, -0.4, N_ENVS).astype(f32),
               np.zeros(N_ENVS, f32)]


def cartpole_fori_rollout():
    """CartPole with the state as four arrays, stepped by fori_loop, resets from jax.random."""
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass, polemass_length = masspole + masscart, masspole * length
    theta_limit, x_limit = 12 * 2 * np.pi / 360, 2.4

    def f(seed, x, x_dot, theta, theta_dot):
        key = jax.random.PRNGKey(seed)

        def body(t, carry):
            x, x_dot, theta, theta_dot, episodes = carry
            k_act, k_reset = jax.random.split(jax.random.fold_in(key, t))
            action = jax.random.bernoulli(k_act, 0.5, x.shape)
            force = jnp.where(action, force_mag, -force_mag)
            c, s = jnp.cos(theta), jnp.sin(theta)
            temp = (force + polemass_length * theta_dot ** 2 * s) / total_mass
            thetaacc = (gravity * s - c * temp) / (
                length * (4.0 / 3.0 - masspole * c ** 2 / total_mass))
            xacc = temp - polemass_length * thetaacc * c / total_mass
            x, x_dot = x + tau * x_dot, x_dot + tau * xacc
            theta, theta_dot = theta + tau * theta_dot, theta_dot + tau * thetaacc
            done = (jnp.abs(x) > x_limit) | (jnp.abs(theta) > theta_limit)
            fresh = jax.random.uniform(k_reset, (4,) + x.shape, minval=-0.05, maxval=0.05)
            x, x_dot = jnp.where(done, fresh[0], x), jnp.where(done, fresh[1], x_dot)
            theta = jnp.where(done, fresh[2], theta)
            theta_dot = jnp.where(done, fresh[3], theta_dot)
            return x, x_dot, theta, theta_dot, episodes + jnp.sum(done.astype(jnp.int32))

        return lax.fori_loop(0, STEPS, body, (x, x_dot, theta, theta_dot, jnp.int32(0)))

    rng = np.random.default_rng(13)
    return f, [np.array(9, np.int32)] + [rng.uniform(-0.05, 0.05, N_ENVS).astype(f32)
                                        for _ in range(4)]


ROLLOUTS = {"pendulum_rollout": pendulum_rollout, "mountain_car_rollout": mountain_car_rollout,
            "cartpole_fori_rollout": cartpole_fori_rollout}
JAX_ROLLOUTS = ("cartpole_rollout", "cartpole_rollout_deterministic")


def _styles() -> dict[str, object]:
    """The rollouts in other libraries' styles (`styles.py` next to this file)."""
    spec = importlib.util.spec_from_file_location("xla_gpu_styles", HERE / "styles.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.STYLES)


def programs() -> list[tuple[str, object, list[np.ndarray], tuple[str, ...]]]:
    found = [(name, fn, args, ROLLOUT_DEVICES if name in JAX_ROLLOUTS else ("h100",))
             for name, fn, args in _jax_corpus()]
    for name, make in {**ROLLOUTS, **_styles()}.items():
        fn, args = make()
        found.append((name, fn, args, ROLLOUT_DEVICES))
    return found


def rollout_corpus() -> dict[str, str]:
    """The rollout corpus's CUDA lowerings, already HLO text: `rollout_<env>` -> text."""
    return {f"rollout_{path.name.removesuffix('.gpu.hlo')}": path.read_text()
            for path in sorted(ROLLOUT_CORPUS.glob("*.gpu.hlo"))}


def _store(name: str, lowered: str, devices: tuple[str, ...]) -> None:
    prepared = prepare_for_xla(lowered, f"{name} (lowered)")
    for device_name in devices:
        with tempfile.TemporaryDirectory() as work:
            before, optimized, thunks = xla_child.compile_hlo_here(
                prepared, TARGET_CONFIGS[device_name], Path(work))
        (HERE / f"{name}.before.hlo").write_text(before)
        (HERE / f"{name}.{device_name}.hlo").write_text(optimized)
        (HERE / f"{name}.{device_name}.thunks.txt").write_text(thunks)
        print(f"{name} {device_name}: {optimized.count(' fusion(')} fusions", flush=True)


def main(names: list[str]) -> None:
    jax.config.update("jax_hlo_source_file_canonicalization_regex", r"^.*/(?=tests/data/)")
    chosen = [p for p in programs() if not names or p[0] in names]
    manifest: dict[str, object] = {"jax": jax.__version__, "xla_commit": XLA_COMMIT,
                                   "programs": {}}
    manifest_path = HERE / "MANIFEST.json"
    if manifest_path.exists():
        manifest["programs"] = json.loads(manifest_path.read_text()).get("programs", {})
    for name, fn, args, devices in chosen:
        _store(name, xla_child.lower_function_here(fn, args, TARGET_CONFIGS["h100"]), devices)
        manifest["programs"][name] = list(devices)  # type: ignore[index]
    for name, lowered in rollout_corpus().items():
        if names and name not in names:
            continue
        _store(name, lowered, ROLLOUT_DEVICES)
        manifest["programs"][name] = list(ROLLOUT_DEVICES)  # type: ignore[index]
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
