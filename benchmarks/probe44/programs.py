"""Probe 44: rollouts written as other people write them, kept as a corpus for
`hlofuse bench rollouts --corpus benchmarks/probe44` (each a function of a PRNG key, as in
tests/data/rollouts/programs.py). Not tuned to hlofuse: the defects they found are fixed in
the passes, for any program of their shape."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax


# 1. A stochastic predator-prey ensemble (Euler-Maruyama), params as a NamedTuple,
#    per-step means across the ensemble logged, `jax.random.normal` each step.
class LVParams(NamedTuple):
    alpha: float = 1.1
    beta: float = 0.4
    delta: float = 0.1
    gamma: float = 0.4
    sigma: float = 0.05
    dt: float = 0.01


def make_lotka_volterra(n: int, t: int):
    params = LVParams()

    def drift(p: LVParams, x):
        prey, pred = x[..., 0], x[..., 1]
        return jnp.stack([p.alpha * prey - p.beta * prey * pred,
                          p.delta * prey * pred - p.gamma * pred], axis=-1)

    def rollout(key):
        k0, key = jax.random.split(key)
        x = jax.random.uniform(k0, (n, 2), minval=5.0, maxval=15.0)

        def step(carry, _):
            x, key = carry
            key, sub = jax.random.split(key)
            dw = jax.random.normal(sub, x.shape) * jnp.sqrt(params.dt)
            x = x + drift(params, x) * params.dt + params.sigma * x * dw
            x = jnp.clip(x, 1e-3, 1e3)
            return (x, key), (x.mean(axis=0), jnp.max(x[:, 1]))

        (x, _), (means, peak) = lax.scan(step, (x, key), None, length=t)
        return x, means, peak

    return rollout


# 2. Thompson-sampling-free UCB bandit agents: per-lane counts and value estimates,
#    argmax over arms, `.at[a].add` in vmap, reward from a Bernoulli draw.
def make_ucb_bandit(n: int, t: int, arms: int = 6):
    def agent_step(state, key, step_no):
        counts, values, probs = state
        ucb = values + jnp.sqrt(2.0 * jnp.log(step_no + 1.0) / jnp.maximum(counts, 1e-6))
        ucb = jnp.where(counts == 0, jnp.inf, ucb)
        a = jnp.argmax(ucb)
        r = jax.random.bernoulli(key, probs[a]).astype(jnp.float32)
        counts = counts.at[a].add(1.0)
        values = values.at[a].add((r - values[a]) / counts[a])
        return (counts, values, probs), r, a

    def rollout(key):
        kp, key = jax.random.split(key)
        probs = jax.random.uniform(kp, (n, arms))
        state = (jnp.zeros((n, arms)), jnp.zeros((n, arms)), probs)

        def body(carry, step_no):
            state, key = carry
            key, sub = jax.random.split(key)
            keys = jax.random.split(sub, n)
            state, r, a = jax.vmap(agent_step, in_axes=(0, 0, None))(
                state, keys, step_no.astype(jnp.float32))
            regret = jnp.max(state[2], axis=-1) - r
            return (state, key), (r.sum(), regret.mean())

        (state, _), logs = lax.scan(body, (state, key), jnp.arange(t))
        return state[0], state[1], logs

    return rollout


# 3. CartPole written as an environment class with reset/step, `lax.cond`-free auto reset
#    through `jax.tree_util.tree_map`, a linear softmax policy and an info dict.
class CartPoleEnv:
    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    length = 0.5
    force_mag = 10.0
    tau = 0.02

    def reset(self, key):
        return {"obs": jax.random.uniform(key, (4,), minval=-0.05, maxval=0.05),
                "t": jnp.zeros((), jnp.int32)}

    def step(self, state, action):
        x, x_dot, theta, theta_dot = state["obs"]
        force = jnp.where(action == 1, self.force_mag, -self.force_mag)
        total = self.masscart + self.masspole
        pml = self.masspole * self.length
        cos, sin = jnp.cos(theta), jnp.sin(theta)
        temp = (force + pml * theta_dot ** 2 * sin) / total
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos ** 2 / total))
        x_acc = temp - pml * theta_acc * cos / total
        obs = jnp.array([x + self.tau * x_dot, x_dot + self.tau * x_acc,
                         theta + self.tau * theta_dot, theta_dot + self.tau * theta_acc])
        t = state["t"] + 1
        done = (jnp.abs(obs[0]) > 2.4) | (jnp.abs(obs[2]) > 0.2095) | (t >= 500)
        return {"obs": obs, "t": t}, jnp.float32(1.0), done, {"steps": t}


def make_cartpole_class(n: int, t: int):
    env = CartPoleEnv()
    w = jnp.array([[0.1, -0.1], [0.5, -0.5], [2.0, -2.0], [1.0, -1.0]], jnp.float32)

    def policy(obs, key):
        logits = obs @ w
        return jax.random.categorical(key, logits)

    def rollout(key):
        key, k0 = jax.random.split(key)
        state = jax.vmap(env.reset)(jax.random.split(k0, n))

        def body(carry, _):
            state, key, ret = carry
            key, ka, kr = jax.random.split(key, 3)
            actions = jax.vmap(policy)(state["obs"], jax.random.split(ka, n))
            nxt, rew, done, info = jax.vmap(env.step)(state, actions)
            fresh = jax.vmap(env.reset)(jax.random.split(kr, n))
            state = jax.tree_util.tree_map(
                lambda a, b: jnp.where(done.reshape((-1,) + (1,) * (a.ndim - 1)), a, b),
                fresh, nxt)
            ret = ret + rew
            finished = jnp.where(done, ret, 0.0)
            ret = jnp.where(done, 0.0, ret)
            return (state, key, ret), (finished.sum(), done.sum(), info["steps"].max())

        (state, _, ret), logs = lax.scan(body, (state, key, jnp.zeros(n)), None, length=t)
        return state["obs"], ret, logs

    return rollout


# 4. Heat rods relaxed each step by a fixed-tolerance Gauss-Seidel-like Jacobi sweep under
#    `fori_loop` (constant trip), then a data-dependent `while_loop` polish per lane.
def make_heat_rods(n: int, t: int, cells: int = 16):
    def relax(u, src):
        def sweep(_, v):
            left = jnp.concatenate([v[:1], v[:-1]])
            right = jnp.concatenate([v[1:], v[-1:]])
            return 0.5 * (left + right) + 0.1 * src
        return lax.fori_loop(0, 8, sweep, u)

    def polish(u, src):
        def cond(c):
            v, it, res = c
            return (res > 1e-3) & (it < 20)

        def body(c):
            v, it, _ = c
            left = jnp.concatenate([v[:1], v[:-1]])
            right = jnp.concatenate([v[1:], v[-1:]])
            nv = 0.5 * (left + right) + 0.1 * src
            return nv, it + 1, jnp.max(jnp.abs(nv - v))

        v, it, _ = lax.while_loop(cond, body, (u, 0, jnp.float32(1.0)))
        return v, it

    def rollout(key):
        k0, key = jax.random.split(key)
        u = jax.random.uniform(k0, (n, cells))

        def body(carry, _):
            u, key = carry
            key, sub = jax.random.split(key)
            src = jax.random.normal(sub, (n, cells)) * 0.1
            u = jax.vmap(relax)(u, src)
            u, iters = jax.vmap(polish)(u, src)
            return (u, key), (iters.mean(), u.mean())

        (u, _), logs = lax.scan(body, (u, key), None, length=t)
        return u, logs

    return rollout


ROLLOUTS = {
    "lotka_volterra": make_lotka_volterra,
    "ucb_bandit": make_ucb_bandit,
    "cartpole_class": make_cartpole_class,
    "heat_rods": make_heat_rods,
}


# 5. A rollout followed by GAE over the trajectory (reverse scan) and advantage
#    normalisation across the whole batch, as PPO implementations do after collection.
def make_rollout_gae(n: int, t: int, gamma: float = 0.99, lam: float = 0.95):
    def env_step(pos, vel, act):
        vel = 0.95 * vel + 0.1 * (act.astype(jnp.float32) - 1.0)
        pos = pos + vel
        rew = -jnp.abs(pos)
        done = jnp.abs(pos) > 3.0
        return jnp.where(done, 0.0, pos), jnp.where(done, 0.0, vel), rew, done

    def rollout(key):
        pos = jnp.zeros(n)
        vel = jnp.zeros(n)

        def body(carry, _):
            pos, vel, key = carry
            key, sub = jax.random.split(key)
            value = -0.5 * pos * pos
            act = jax.random.randint(sub, (n,), 0, 3)
            pos, vel, rew, done = env_step(pos, vel, act)
            return (pos, vel, key), (rew, done, value)

        (pos, vel, _), (rews, dones, values) = lax.scan(body, (pos, vel, key), None, length=t)
        last_value = -0.5 * pos * pos

        def gae_step(carry, xs):
            adv, next_value = carry
            rew, done, value = xs
            nonterminal = 1.0 - done.astype(jnp.float32)
            delta = rew + gamma * next_value * nonterminal - value
            adv = delta + gamma * lam * nonterminal * adv
            return (adv, value), adv

        _, advs = lax.scan(gae_step, (jnp.zeros(n), last_value), (rews, dones, values),
                           reverse=True)
        targets = advs + values
        advs = (advs - advs.mean()) / (advs.std() + 1e-8)
        return advs, targets

    return rollout


# 6. Boids: each lane a flock of 12 birds, pairwise distances, neighbours within a radius
#    averaged (masked means), speed clamped; written with broadcasting, no vmap.
def make_boids(n: int, t: int, birds: int = 12):
    def rollout(key):
        kp, kv = jax.random.split(key)
        pos = jax.random.uniform(kp, (n, birds, 2), minval=-1.0, maxval=1.0)
        vel = jax.random.normal(kv, (n, birds, 2)) * 0.1

        def step(carry, _):
            pos, vel = carry
            diff = pos[:, :, None, :] - pos[:, None, :, :]
            dist2 = jnp.sum(diff * diff, axis=-1)
            near = (dist2 < 0.25) & (dist2 > 0.0)
            w = near.astype(jnp.float32)
            count = jnp.maximum(w.sum(-1, keepdims=True), 1.0)
            align = jnp.einsum("nij,njd->nid", w, vel) / count
            cohere = jnp.einsum("nij,njd->nid", w, pos) / count - pos
            close = (dist2 < 0.01) & (dist2 > 0.0)
            separate = jnp.einsum("nij,nijd->nid", close.astype(jnp.float32), diff)
            vel = vel + 0.05 * (align - vel) + 0.01 * cohere + 0.1 * separate
            speed = jnp.linalg.norm(vel, axis=-1, keepdims=True)
            vel = vel * jnp.minimum(1.0, 0.2 / jnp.maximum(speed, 1e-6))
            pos = pos + 0.1 * vel
            pos = jnp.where(pos > 1.0, pos - 2.0, jnp.where(pos < -1.0, pos + 2.0, pos))
            return (pos, vel), jnp.mean(speed)

        (pos, vel), speeds = lax.scan(step, (pos, vel), None, length=t)
        return pos, speeds

    return rollout


# 7. An inventory with a per-lane `lax.cond` (reorder or not), a cumulative demand over a
#    small horizon (`jnp.cumsum`) and `jnp.searchsorted` to find the stock-out day.
def make_reorder_cond(n: int, t: int, horizon: int = 7):
    def lane_step(stock, key):
        demand = jax.random.poisson(key, 3.0, (horizon,)).astype(jnp.float32)
        cum = jnp.cumsum(demand)
        stockout_day = jnp.searchsorted(cum, stock)
        stock = lax.cond(stockout_day < 3,
                         lambda s: s + 20.0,
                         lambda s: s,
                         stock)
        sold = jnp.minimum(stock, demand[0])
        return stock - sold, sold, stockout_day

    def rollout(key):
        stock = jnp.full((n,), 10.0)

        def body(carry, _):
            stock, key = carry
            key, sub = jax.random.split(key)
            stock, sold, day = jax.vmap(lane_step)(stock, jax.random.split(sub, n))
            return (stock, key), (sold.sum(), day.min())

        (stock, _), logs = lax.scan(body, (stock, key), None, length=t)
        return stock, logs

    return rollout


# 8. A snake-like grid game: per-lane 8x8 board updated with .at[].set, food placed by a
#    categorical draw over free cells, `jnp.roll` for the tail, one-hot observations.
def make_grid_snake(n: int, t: int, size: int = 8):
    def reset(key):
        board = jnp.zeros((size, size), jnp.int32)
        head = jnp.array([size // 2, size // 2])
        food = jax.random.randint(key, (2,), 0, size)
        return board.at[head[0], head[1]].set(1), head, food, jnp.int32(0)

    def step(state, action, key):
        board, head, food, length = state
        moves = jnp.array([[-1, 0], [1, 0], [0, -1], [0, 1]])
        new_head = jnp.clip(head + moves[action], 0, size - 1)
        ate = jnp.all(new_head == food)
        board = jnp.maximum(board - 1, 0)
        board = board.at[new_head[0], new_head[1]].set(length + 2)
        free = (board == 0).reshape(-1)
        logits = jnp.where(free, 0.0, -jnp.inf)
        cell = jax.random.categorical(key, logits)
        food = jnp.where(ate, jnp.array([cell // size, cell % size]), food)
        length = length + ate.astype(jnp.int32)
        done = length >= 10
        return (board, new_head, food, length), ate.astype(jnp.float32), done

    def rollout(key):
        key, k0 = jax.random.split(key)
        state = jax.vmap(reset)(jax.random.split(k0, n))

        def body(carry, _):
            state, key = carry
            key, ka, kf, kr = jax.random.split(key, 4)
            actions = jax.random.randint(ka, (n,), 0, 4)
            nxt, rew, done = jax.vmap(step)(state, actions, jax.random.split(kf, n))
            fresh = jax.vmap(reset)(jax.random.split(kr, n))
            state = jax.tree_util.tree_map(
                lambda a, b: jnp.where(done.reshape((-1,) + (1,) * (a.ndim - 1)), a, b),
                fresh, nxt)
            obs = jax.nn.one_hot(state[0], 3).sum(axis=(1, 2))
            return (state, key), (rew.sum(), obs.mean(axis=0))

        (state, _), logs = lax.scan(body, (state, key), None, length=t)
        return state[0], state[3], logs

    return rollout


ROLLOUTS.update({
    "rollout_gae": make_rollout_gae,
    "boids": make_boids,
    "reorder_cond": make_reorder_cond,
    "grid_snake": make_grid_snake,
})
