"""Rollouts written the way other JAX RL libraries write them, for the XLA GPU oracle corpus
(`generate.py` compiles them; tests only read the stored output).

* `env_class_rollout`: an environment class with `reset` and `step` methods over one
  environment, `step` resetting a finished episode with `jax.lax.cond` (gymnax's auto-reset),
  batched by `jax.vmap` and stepped in `lax.scan` (CartPole dynamics, from the public
  description of the classic-control task).
* `vmap_params_rollout`: a step function taking an environment-parameters pytree
  (a NamedTuple) and a policy's parameters (a linear layer, argmax action), `jax.vmap` over
  the state with the parameters broadcast (`in_axes=None`), as PureJaxRL-style training loops
  do (Pendulum-like dynamics with a discrete torque).
* `minatar_rollout`: a MinAtar-style grid game (a falling-objects catcher on a 10x10 int8
  board per environment): the board is rebuilt from positions every step with scatters into
  int8 planes, rewards counted over the board.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

N_ENVS, STEPS = 64, 40
f32 = np.float32


class CartPoleEnv:
    """One environment: `reset(key) -> state`, `step(key, state, action) -> (state, reward,
    done)`, auto-reset inside `step` by `lax.cond`."""

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02

    def reset(self, key: jax.Array) -> jax.Array:
        return jax.random.uniform(key, (4,), minval=-0.05, maxval=0.05)

    def step_env(self, state: jax.Array, action: jax.Array) -> jax.Array:
        x, x_dot, theta, theta_dot = state[0], state[1], state[2], state[3]
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        force = jnp.where(action == 1, self.force_mag, -self.force_mag)
        c, s = jnp.cos(theta), jnp.sin(theta)
        temp = (force + polemass_length * theta_dot ** 2 * s) / total_mass
        thetaacc = (self.gravity * s - c * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * c ** 2 / total_mass))
        xacc = temp - polemass_length * thetaacc * c / total_mass
        return jnp.stack([x + self.tau * x_dot, x_dot + self.tau * xacc,
                          theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc])

    def step(self, key: jax.Array, state: jax.Array, action: jax.Array
             ) -> tuple[jax.Array, jax.Array, jax.Array]:
        new = self.step_env(state, action)
        done = (jnp.abs(new[0]) > 2.4) | (jnp.abs(new[2]) > 12 * 2 * np.pi / 360)
        new = lax.cond(done, lambda: self.reset(key), lambda: new)
        return new, jnp.where(done, 0.0, 1.0), done


def env_class_rollout():
    env = CartPoleEnv()

    def f(seed):
        key = jax.random.PRNGKey(seed)
        keys = jax.random.split(key, N_ENVS)
        state = jax.vmap(env.reset)(keys)

        def body(carry, t):
            state, total = carry
            k_step, k_act = jax.random.split(jax.random.fold_in(key, t))
            actions = jax.random.randint(k_act, (N_ENVS,), 0, 2)
            state, reward, done = jax.vmap(env.step)(jax.random.split(k_step, N_ENVS),
                                                     state, actions)
            return (state, total + reward), done.sum()

        (state, total), dones = lax.scan(body, (state, jnp.zeros(N_ENVS)), jnp.arange(STEPS))
        return state, total, dones

    return f, [np.array(3, np.int32)]


class EnvParams(NamedTuple):
    max_speed: float = 8.0
    max_torque: float = 2.0
    dt: float = 0.05
    g: float = 10.0


class PolicyParams(NamedTuple):
    w: jax.Array
    b: jax.Array


def pendulum_step(params: EnvParams, policy: PolicyParams, state: jax.Array
                  ) -> tuple[jax.Array, jax.Array]:
    theta, omega = state[0], state[1]
    obs = jnp.stack([jnp.cos(theta), jnp.sin(theta), omega])
    action = jnp.argmax(obs @ policy.w + policy.b)
    torque = (action.astype(jnp.float32) - 1.0) * params.max_torque
    cost = theta ** 2 + 0.1 * omega ** 2 + 0.001 * torque ** 2
    omega = omega + (3 * params.g / 2 * jnp.sin(theta) + 3.0 * torque) * params.dt
    omega = jnp.clip(omega, -params.max_speed, params.max_speed)
    return jnp.stack([theta + omega * params.dt, omega]), -cost


def vmap_params_rollout():
    def f(state0, w, b):
        params, policy = EnvParams(), PolicyParams(w, b)
        step = jax.vmap(pendulum_step, in_axes=(None, None, 0))

        def body(state, _):
            state, reward = step(params, policy, state)
            return state, reward.mean()

        return lax.scan(body, state0, None, length=STEPS)

    rng = np.random.default_rng(17)
    return f, [rng.uniform(-1, 1, (N_ENVS, 2)).astype(f32),
               rng.normal(size=(3, 3)).astype(f32), np.zeros(3, f32)]


GRID = 10


def minatar_rollout():
    """Catch falling objects: an int8 board per environment with a paddle row and one
    object; the board is rebuilt from positions with scatters each step."""

    def board(paddle, obj_x, obj_y):
        planes = jnp.zeros((2, GRID, GRID), jnp.int8)
        planes = planes.at[0, GRID - 1, paddle].set(1)
        return planes.at[1, obj_y, obj_x].set(1)

    def f(seed):
        key = jax.random.PRNGKey(seed)
        paddle = jnp.full((N_ENVS,), GRID // 2, jnp.int32)
        obj_x = jax.random.randint(key, (N_ENVS,), 0, GRID)
        obj_y = jnp.zeros((N_ENVS,), jnp.int32)

        def body(carry, t):
            paddle, obj_x, obj_y, score = carry
            k_act, k_new = jax.random.split(jax.random.fold_in(key, t))
            move = jax.random.randint(k_act, (N_ENVS,), -1, 2)
            paddle = jnp.clip(paddle + move, 0, GRID - 1)
            obj_y = obj_y + 1
            landed = obj_y == GRID - 1
            caught = landed & (obj_x == paddle)
            obj_x = jnp.where(landed, jax.random.randint(k_new, (N_ENVS,), 0, GRID), obj_x)
            obj_y = jnp.where(landed, 0, obj_y)
            boards = jax.vmap(board)(paddle, obj_x, obj_y)
            filled = boards.astype(jnp.int32).sum(axis=(1, 2, 3))
            score = score + caught.astype(jnp.int32) - (landed & ~caught).astype(jnp.int32)
            return (paddle, obj_x, obj_y, score), filled.sum()

        (paddle, obj_x, obj_y, score), filled = lax.scan(
            body, (paddle, obj_x, obj_y, jnp.zeros(N_ENVS, jnp.int32)), jnp.arange(STEPS))
        return score, filled

    return f, [np.array(5, np.int32)]


STYLES = {"env_class_rollout": env_class_rollout, "vmap_params_rollout": vmap_params_rollout,
          "minatar_rollout": minatar_rollout}
