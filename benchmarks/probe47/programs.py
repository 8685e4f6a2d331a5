"""Probe 47: five more rollouts written as other people write them, kept as a corpus for
`hlofuse bench rollouts --corpus benchmarks/probe47` (each a function of a PRNG key, as in
tests/data/rollouts/programs.py). Not tuned to hlofuse."""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

# 1. An actor-critic data collector, PPO style: a shared relu torso with policy and value
#    heads, `jax.random.categorical`, the log-probability of the taken action, and a
#    trajectory buffer of observations, actions, log-probabilities, values and rewards stacked
#    by `lax.scan`; the environment a 1-d corridor whose episodes end at either wall, reset
#    by `jax.tree_util.tree_map` over a state dataclass-like NamedTuple.

class CorridorState(NamedTuple):
    pos: jax.Array
    vel: jax.Array
    t: jax.Array


def _init_mlp(key: jax.Array, sizes: tuple[int, ...]) -> list[tuple[jax.Array, jax.Array]]:
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        w = jax.random.normal(sub, (fan_in, fan_out)) * jnp.sqrt(2.0 / fan_in)
        params.append((w, jnp.zeros((fan_out,))))
    return params


def make_actor_critic(n: int, t: int, hidden: int = 32):
    def corridor_reset(key: jax.Array, shape: tuple[int, ...]) -> CorridorState:
        pos = jax.random.uniform(key, shape, minval=-0.5, maxval=0.5)
        return CorridorState(pos, jnp.zeros(shape), jnp.zeros(shape, jnp.int32))

    def corridor_step(s: CorridorState, action: jax.Array):
        force = (action.astype(jnp.float32) - 1.0) * 0.1
        vel = 0.95 * s.vel + force
        pos = s.pos + 0.1 * vel
        done = (jnp.abs(pos) > 1.0) | (s.t >= 49)
        reward = jnp.where(jnp.abs(pos) > 1.0, -1.0, 0.01 - 0.01 * pos**2)
        return CorridorState(pos, vel, s.t + 1), reward, done

    def rollout(key: jax.Array):
        pkey, ekey, key = jax.random.split(key, 3)
        torso = _init_mlp(pkey, (2, hidden, hidden))
        wp, bp = _init_mlp(jax.random.fold_in(pkey, 1), (hidden, 3))[0]
        wv, bv = _init_mlp(jax.random.fold_in(pkey, 2), (hidden, 1))[0]
        state = corridor_reset(ekey, (n,))

        def policy(obs: jax.Array):
            h = obs
            for w, b in torso:
                h = jax.nn.relu(h @ w + b)
            return h @ wp + bp, (h @ wv + bv)[..., 0]

        def body(carry, _):
            s, k = carry
            k, ka, kr = jax.random.split(k, 3)
            obs = jnp.stack([s.pos, s.vel], axis=-1)
            logits, value = policy(obs)
            action = jax.random.categorical(ka, logits)
            logp = jax.nn.log_softmax(logits)[jnp.arange(n), action]
            s2, reward, done = corridor_step(s, action)
            fresh = corridor_reset(kr, (n,))
            s2 = jax.tree_util.tree_map(lambda a, b: jnp.where(done, a, b), fresh, s2)
            return (s2, k), (obs, action, logp, value, reward, done)

        (state, _), traj = lax.scan(body, (state, key), None, length=t)
        return state.pos, traj

    return rollout


# 2. An agent-based SIR epidemic: each lane a village of 16 agents, infections drawn with
#    `jax.random.bernoulli` from the infected count, recovery with a fixed chance, and a
#    per-village lockdown switched on while more than a quarter are infected (a `jnp.where`
#    on a boolean carried state); the mean infected fraction across villages is logged.

def make_sir_villages(n: int, t: int, agents: int = 16):
    beta, gamma, lockdown_beta = 0.3, 0.1, 0.05

    def rollout(key: jax.Array):
        key, k0 = jax.random.split(key)
        status = jnp.where(jax.random.uniform(k0, (n, agents)) < 0.1, 1, 0)  # 0 S, 1 I, 2 R
        lockdown = jnp.zeros((n,), bool)

        def step(carry, _):
            status, lockdown, key = carry
            key, ki, kr = jax.random.split(key, 3)
            infected = jnp.sum(status == 1, axis=1)
            rate = jnp.where(lockdown, lockdown_beta, beta) * infected / agents
            p_inf = 1.0 - jnp.exp(-rate)[:, None]
            catch = jax.random.bernoulli(ki, jnp.broadcast_to(p_inf, status.shape))
            recover = jax.random.bernoulli(kr, gamma, status.shape)
            status = jnp.where((status == 0) & catch, 1,
                               jnp.where((status == 1) & recover, 2, status))
            frac = jnp.mean(status == 1, axis=1)
            lockdown = jnp.where(frac > 0.25, True, jnp.where(frac < 0.05, False, lockdown))
            return (status, lockdown, key), (jnp.mean(frac), jnp.sum(lockdown))

        (status, lockdown, _), logs = lax.scan(step, (status, lockdown, key), None, length=t)
        return status, lockdown, logs

    return rollout


# 3. A damped double pendulum integrated with RK4, written per environment and batched with
#    `jax.vmap`, parameters in a dict, 8 substeps a step in a `fori_loop`, random torques.

def _pendulum_derivs(params: dict, y: jax.Array, torque: jax.Array) -> jax.Array:
    th1, th2, w1, w2 = y[0], y[1], y[2], y[3]
    m1, m2, l1, l2, g = params["m1"], params["m2"], params["l1"], params["l2"], params["g"]
    d = th1 - th2
    den = 2 * m1 + m2 - m2 * jnp.cos(2 * d)
    a1 = (-g * (2 * m1 + m2) * jnp.sin(th1) - m2 * g * jnp.sin(th1 - 2 * th2)
          - 2 * jnp.sin(d) * m2 * (w2**2 * l2 + w1**2 * l1 * jnp.cos(d))) / (l1 * den)
    a2 = (2 * jnp.sin(d) * (w1**2 * l1 * (m1 + m2) + g * (m1 + m2) * jnp.cos(th1)
                            + w2**2 * l2 * m2 * jnp.cos(d))) / (l2 * den)
    return jnp.array([w1, w2, a1 + torque - params["damping"] * w1,
                      a2 - params["damping"] * w2])


def make_vmapped_rk4(n: int, t: int, substeps: int = 8):
    params = {"m1": 1.0, "m2": 0.8, "l1": 1.0, "l2": 0.7, "g": 9.81, "damping": 0.05}
    dt = 0.02 / substeps

    def env_step(y: jax.Array, torque: jax.Array) -> jax.Array:
        f = functools.partial(_pendulum_derivs, params)

        def substep(_, y):
            k1 = f(y, torque)
            k2 = f(y + 0.5 * dt * k1, torque)
            k3 = f(y + 0.5 * dt * k2, torque)
            k4 = f(y + dt * k3, torque)
            return y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)

        return lax.fori_loop(0, substeps, substep, y)

    def rollout(key: jax.Array):
        key, k0 = jax.random.split(key)
        y = jax.random.uniform(k0, (n, 4), minval=-0.3, maxval=0.3)

        def body(carry, _):
            y, key = carry
            key, kt = jax.random.split(key)
            torque = 0.5 * jax.random.normal(kt, (n,))
            y = jax.vmap(env_step)(y, torque)
            energy = jnp.sum(y[:, 2:] ** 2, axis=1)
            return (y, key), jnp.max(energy)

        (y, _), peak = lax.scan(body, (y, key), None, length=t)
        return y, peak

    return rollout


# 4. A constant-velocity Kalman filter per lane tracking a noisy 2-d target: 4 x 4
#    covariance, a 2 x 2 innovation covariance inverted with `jnp.linalg.inv`, matrices shared
#    across lanes and per-lane states batched with einsum; the log-likelihood accumulated.

def make_kalman_tracker(n: int, t: int):
    dt = 0.1
    f_mat = jnp.array([[1, 0, dt, 0], [0, 1, 0, dt], [0, 0, 1, 0], [0, 0, 0, 1]], jnp.float32)
    h_mat = jnp.array([[1, 0, 0, 0], [0, 1, 0, 0]], jnp.float32)
    q_mat = 0.01 * jnp.eye(4)
    r_mat = 0.25 * jnp.eye(2)

    def rollout(key: jax.Array):
        key, k0 = jax.random.split(key)
        truth = jax.random.normal(k0, (n, 4))
        mean = jnp.zeros((n, 4))
        cov = jnp.broadcast_to(jnp.eye(4), (n, 4, 4))

        def step(carry, k):
            truth, mean, cov, loglik = carry
            kp, km = jax.random.split(k)
            truth = truth @ f_mat.T + 0.1 * jax.random.normal(kp, truth.shape)
            z = truth @ h_mat.T + 0.5 * jax.random.normal(km, (n, 2))
            mean = mean @ f_mat.T
            cov = jnp.einsum("ij,njk,lk->nil", f_mat, cov, f_mat) + q_mat
            innov = z - mean @ h_mat.T
            s = jnp.einsum("ij,njk,lk->nil", h_mat, cov, h_mat) + r_mat
            s_inv = jnp.linalg.inv(s)
            gain = jnp.einsum("nij,kj,nkl->nil", cov, h_mat, s_inv)
            mean = mean + jnp.einsum("nij,nj->ni", gain, innov)
            cov = cov - jnp.einsum("nij,jk,nkl->nil", gain, h_mat, cov)
            quad = jnp.einsum("ni,nij,nj->n", innov, s_inv, innov)
            logdet = jnp.log(jnp.linalg.det(s))
            loglik = loglik - 0.5 * (quad + logdet)
            return (truth, mean, cov, loglik), jnp.mean(jnp.sum((mean - truth) ** 2, axis=1))

        keys = jax.random.split(key, t)
        carry, err = lax.scan(step, (truth, mean, cov, jnp.zeros((n,))), keys)
        return carry[3], carry[1], err

    return rollout


# 5. Tabular Q-learning on a 6-state chain, one Q table per lane ([n, states, actions]),
#    epsilon-greedy with `jnp.argmax`, the table updated with `.at[...].add` through
#    `jax.vmap`, the per-step total reward logged.

def make_chain_q_learning(n: int, t: int, states: int = 6):
    alpha, gamma_q, eps = 0.1, 0.95, 0.1

    def update(q: jax.Array, s: jax.Array, a: jax.Array, target: jax.Array) -> jax.Array:
        return q.at[s, a].add(alpha * (target - q[s, a]))

    def rollout(key: jax.Array):
        q = jnp.zeros((n, states, 2))
        s = jnp.zeros((n,), jnp.int32)

        def step(carry, k):
            q, s = carry
            ke, ka = jax.random.split(k)
            greedy = jnp.argmax(q[jnp.arange(n), s], axis=-1)
            explore = jax.random.uniform(ke, (n,)) < eps
            a = jnp.where(explore, jax.random.randint(ka, (n,), 0, 2), greedy)
            s_next = jnp.clip(s + 2 * a - 1, 0, states - 1)
            reward = jnp.where(s_next == states - 1, 1.0, 0.0)
            done = s_next == states - 1
            target = reward + gamma_q * jnp.where(done, 0.0,
                                                  jnp.max(q[jnp.arange(n), s_next], axis=-1))
            q = jax.vmap(update)(q, s, a, target)
            s = jnp.where(done, 0, s_next)
            return (q, s), jnp.sum(reward)

        keys = jax.random.split(key, t)
        (q, s), rewards = lax.scan(step, (q, s), keys)
        return q, s, rewards

    return rollout


ROLLOUTS = {
    "actor_critic": make_actor_critic,
    "sir_villages": make_sir_villages,
    "vmapped_rk4": make_vmapped_rk4,
    "kalman_tracker": make_kalman_tracker,
    "chain_q_learning": make_chain_q_learning,
}
