"""Batched simulations written in plain JAX, the way their authors would write them.

Each environment is written from the public description of the task (dynamics, rewards,
termination), not from any library's code. A rollout is a function of one PRNG key
(``u32[2]``, as ``jax.random.PRNGKey(seed)`` gives): ``jax.vmap`` over N environments inside
``lax.scan`` over T steps, random actions from ``jax.random``, and auto-reset written as
``jnp.where(done, reset_state, next_state)`` where the reset draws fresh random numbers.

    from tests.data.rollouts import programs          # or load this file by path
    f = programs.ROLLOUTS["acrobot"](n=4096, t=200)   # a plain Python function of a key
    jax.jit(f)(jax.random.PRNGKey(0))

``generate.py`` exports every rollout at small N and T = 30. JAX is imported here, so
import this module only where JAX is installed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax

Rollout = Callable[[jax.Array], Any]
State = Any


def _batched_rollout(reset: Callable[[jax.Array], State],
                     step: Callable[[State, jax.Array], tuple[State, jax.Array, jax.Array]],
                     policy: Callable[[jax.Array, int], jax.Array], n: int, t: int) -> Rollout:
    """vmap(step) inside scan, with random actions and a random auto-reset per lane."""

    def rollout(key: jax.Array) -> Any:
        key, init_key = jax.random.split(key)
        state = jax.vmap(reset)(jax.random.split(init_key, n))

        def body(carry: tuple[State, jax.Array], _: None) -> tuple[Any, Any]:
            state, key = carry
            key, action_key, reset_key = jax.random.split(key, 3)
            actions = policy(action_key, n)
            next_state, reward, done = jax.vmap(step)(state, actions)
            fresh = jax.vmap(reset)(jax.random.split(reset_key, n))

            def pick(r: jax.Array, s: jax.Array) -> jax.Array:
                d = done.reshape(done.shape + (1,) * (s.ndim - 1))
                return jnp.where(d, r, s)

            state = jax.tree_util.tree_map(pick, fresh, next_state)
            return (state, key), (reward, done)

        (state, _), (rewards, dones) = lax.scan(body, (state, key), None, length=t)
        return state, rewards, dones

    return rollout


def _discrete(num_actions: int) -> Callable[[jax.Array, int], jax.Array]:
    def policy(key: jax.Array, n: int) -> jax.Array:
        return jax.random.randint(key, (n,), 0, num_actions)
    return policy


def _continuous(low: float, high: float) -> Callable[[jax.Array, int], jax.Array]:
    def policy(key: jax.Array, n: int) -> jax.Array:
        return jax.random.uniform(key, (n,), minval=low, maxval=high)
    return policy


# --- Acrobot (Sutton 1996; dynamics of Sutton & Barto's book), RK4 -------------------------

ACROBOT_DT = 0.2
ACROBOT_MAX_STEPS = 500


def _acrobot_derivatives(s: jax.Array, torque: jax.Array) -> jax.Array:
    m1 = m2 = 1.0
    l1 = 1.0
    lc1 = lc2 = 0.5
    i1 = i2 = 1.0
    g = 9.8
    theta1, theta2, dtheta1, dtheta2 = s[0], s[1], s[2], s[3]
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * jnp.cos(theta2)) + i1 + i2
    d2 = m2 * (lc2**2 + l1 * lc2 * jnp.cos(theta2)) + i2
    phi2 = m2 * lc2 * g * jnp.cos(theta1 + theta2 - jnp.pi / 2)
    phi1 = (-m2 * l1 * lc2 * dtheta2**2 * jnp.sin(theta2)
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * jnp.sin(theta2)
            + (m1 * lc1 + m2 * l1) * g * jnp.cos(theta1 - jnp.pi / 2) + phi2)
    ddtheta2 = ((torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * jnp.sin(theta2) - phi2)
                / (m2 * lc2**2 + i2 - d2**2 / d1))
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return jnp.stack([dtheta1, dtheta2, ddtheta1, ddtheta2])


def _rk4(f: Callable[[jax.Array, jax.Array], jax.Array], y: jax.Array, u: jax.Array,
         dt: float) -> jax.Array:
    k1 = f(y, u)
    k2 = f(y + dt / 2 * k1, u)
    k3 = f(y + dt / 2 * k2, u)
    k4 = f(y + dt * k3, u)
    return y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)


def _wrap(x: jax.Array, low: float, high: float) -> jax.Array:
    width = high - low
    return jnp.mod(x - low, width) + low


def make_acrobot(n: int, t: int, max_steps: int = ACROBOT_MAX_STEPS, build=None) -> Rollout:
    def reset(key: jax.Array) -> dict[str, jax.Array]:
        return {"s": jax.random.uniform(key, (4,), minval=-0.1, maxval=0.1),
                "t": jnp.zeros((), jnp.int32)}

    def step(state: dict[str, jax.Array], action: jax.Array) -> tuple[Any, Any, Any]:
        torque = action.astype(jnp.float32) - 1.0
        s = _rk4(_acrobot_derivatives, state["s"], torque, ACROBOT_DT)
        s = jnp.stack([
            _wrap(s[0], -math.pi, math.pi),
            _wrap(s[1], -math.pi, math.pi),
            jnp.clip(s[2], -4 * math.pi, 4 * math.pi),
            jnp.clip(s[3], -9 * math.pi, 9 * math.pi),
        ])
        height = -jnp.cos(s[0]) - jnp.cos(s[1] + s[0])
        terminal = height > 1.0
        steps = state["t"] + 1
        reward = jnp.where(terminal, 0.0, -1.0)
        done = terminal | (steps >= max_steps)
        return {"s": s, "t": steps}, reward, done

    return (build or _batched_rollout)(reset, step, _discrete(3), n, t)


# --- Pendulum (swing-up, continuous torque) ------------------------------------------------


def make_pendulum(n: int, t: int, max_steps: int = 200, build=None) -> Rollout:
    max_speed, max_torque, dt, g, m, length = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0

    def reset(key: jax.Array) -> dict[str, jax.Array]:
        k1, k2 = jax.random.split(key)
        return {"theta": jax.random.uniform(k1, minval=-jnp.pi, maxval=jnp.pi),
                "omega": jax.random.uniform(k2, minval=-1.0, maxval=1.0),
                "t": jnp.zeros((), jnp.int32)}

    def step(state: dict[str, jax.Array], u: jax.Array) -> tuple[Any, Any, Any]:
        th, thdot = state["theta"], state["omega"]
        u = jnp.clip(u, -max_torque, max_torque)
        normalized = ((th + jnp.pi) % (2 * jnp.pi)) - jnp.pi
        cost = normalized**2 + 0.1 * thdot**2 + 0.001 * u**2
        newthdot = thdot + (3 * g / (2 * length) * jnp.sin(th) + 3.0 / (m * length**2) * u) * dt
        newthdot = jnp.clip(newthdot, -max_speed, max_speed)
        newth = th + newthdot * dt
        steps = state["t"] + 1
        return {"theta": newth, "omega": newthdot, "t": steps}, -cost, steps >= max_steps

    return (build or _batched_rollout)(reset, step, _continuous(-2.0, 2.0), n, t)


# --- MountainCar (Moore 1990), discrete and continuous ------------------------------------


def make_mountain_car(n: int, t: int, max_steps: int = 200, build=None) -> Rollout:
    force, gravity = 0.001, 0.0025

    def reset(key: jax.Array) -> dict[str, jax.Array]:
        return {"pos": jax.random.uniform(key, minval=-0.6, maxval=-0.4),
                "vel": jnp.zeros(()), "t": jnp.zeros((), jnp.int32)}

    def step(state: dict[str, jax.Array], action: jax.Array) -> tuple[Any, Any, Any]:
        pos, vel = state["pos"], state["vel"]
        vel = vel + (action - 1).astype(jnp.float32) * force + jnp.cos(3 * pos) * (-gravity)
        vel = jnp.clip(vel, -0.07, 0.07)
        pos = jnp.clip(pos + vel, -1.2, 0.6)
        vel = jnp.where((pos == -1.2) & (vel < 0), 0.0, vel)
        steps = state["t"] + 1
        goal = (pos >= 0.5) & (vel >= 0.0)
        done = goal | (steps >= max_steps)
        return {"pos": pos, "vel": vel, "t": steps}, jnp.full((), -1.0), done

    return (build or _batched_rollout)(reset, step, _discrete(3), n, t)


def make_mountain_car_continuous(n: int, t: int, max_steps: int = 999, build=None) -> Rollout:
    power = 0.0015

    def reset(key: jax.Array) -> tuple[jax.Array, jax.Array]:
        # [position, velocity] packed in one vector, as many implementations keep it.
        return (jnp.stack([jax.random.uniform(key, minval=-0.6, maxval=-0.4), 0.0]),
                jnp.zeros((), jnp.int32))

    def step(state: tuple[jax.Array, jax.Array], action: jax.Array) -> tuple[Any, Any, Any]:
        (pos, vel), steps = state[0], state[1] + 1
        f = jnp.clip(action, -1.0, 1.0)
        vel = jnp.clip(vel + f * power - 0.0025 * jnp.cos(3 * pos), -0.07, 0.07)
        pos = jnp.clip(pos + vel, -1.2, 0.6)
        vel = jnp.where((pos == -1.2) & (vel < 0), 0.0, vel)
        goal = (pos >= 0.45) & (vel >= 0.0)
        reward = jnp.where(goal, 100.0, 0.0) - 0.1 * f**2
        return (jnp.stack([pos, vel]), steps), reward, goal | (steps >= max_steps)

    return (build or _batched_rollout)(reset, step, _continuous(-1.0, 1.0), n, t)


# --- A MinAtar-style grid game: 10x10 board, integer state, gather and scatter ------------

GRID = 10
MOVES = ((0, 0), (-1, 0), (1, 0), (0, -1), (0, 1))  # no-op, up, down, left, right


def make_grid_forage(n: int, t: int) -> Rollout:
    """The agent walks a 10x10 board of walls and food; eating food scores and respawns it
    elsewhere; stepping on a wall or running out of time ends the episode."""
    moves = jnp.array(MOVES, jnp.int32)

    def reset(key: jax.Array) -> dict[str, jax.Array]:
        k_wall, k_food, k_pos = jax.random.split(key, 3)
        walls = jax.random.bernoulli(k_wall, 0.1, (GRID, GRID)).astype(jnp.int8)
        food = jax.random.bernoulli(k_food, 0.15, (GRID, GRID)).astype(jnp.int8)
        pos = jax.random.randint(k_pos, (2,), 0, GRID)
        walls = walls.at[pos[0], pos[1]].set(0)
        board = jnp.stack([walls, food * (1 - walls)])  # channels: wall, food
        return {"board": board, "pos": pos, "score": jnp.zeros((), jnp.int32),
                "t": jnp.zeros((), jnp.int32), "key": jax.random.fold_in(key, 7)}

    def step(state: dict[str, jax.Array], action: jax.Array) -> tuple[Any, Any, Any]:
        board, key = state["board"], state["key"]
        key, spawn_key = jax.random.split(key)
        pos = jnp.clip(state["pos"] + moves[action], 0, GRID - 1)
        hit_wall = board[0, pos[0], pos[1]] == 1
        ate = board[1, pos[0], pos[1]] == 1
        board = board.at[1, pos[0], pos[1]].set(0)
        cell = jax.random.randint(spawn_key, (2,), 0, GRID)
        free = (board[0, cell[0], cell[1]] == 0) & ate
        board = board.at[1, cell[0], cell[1]].max(free.astype(jnp.int8))
        steps = state["t"] + 1
        reward = ate.astype(jnp.int32)
        done = hit_wall | (steps >= 100)
        new = {"board": board, "pos": pos, "score": state["score"] + reward, "t": steps,
               "key": key}
        return new, reward, done

    return _batched_rollout(reset, step, _discrete(len(MOVES)), n, t)


# --- Catch (a ball falls; the paddle on the bottom row must be under it) -------------------

CATCH_ROWS, CATCH_COLS = 10, 5


def make_catch(n: int, t: int) -> Rollout:
    def reset(key: jax.Array) -> jax.Array:
        ball_x = jax.random.randint(key, (), 0, CATCH_COLS)
        # [ball_row, ball_col, paddle_col]
        return jnp.stack([jnp.zeros((), jnp.int32), ball_x, jnp.array(CATCH_COLS // 2)])

    def observe(state: jax.Array) -> jax.Array:
        board = jnp.zeros((CATCH_ROWS, CATCH_COLS), jnp.float32)
        board = board.at[state[0], state[1]].set(1.0)
        return board.at[CATCH_ROWS - 1, state[2]].set(1.0)

    def step(state: jax.Array, action: jax.Array) -> tuple[Any, Any, Any]:
        paddle = jnp.clip(state[2] + action - 1, 0, CATCH_COLS - 1)
        ball_row = state[0] + 1
        done = ball_row == CATCH_ROWS - 1
        caught = state[1] == paddle
        reward = jnp.where(done, jnp.where(caught, 1.0, -1.0), 0.0)
        new = jnp.stack([ball_row, state[1], paddle])
        # An agent would read the rendered board; its checksum keeps the render alive.
        reward = reward + 0.0 * observe(new).sum()
        return new, reward, done

    rollout = _batched_rollout(reset, step, _discrete(3), n, t)

    def with_observation(key: jax.Array) -> Any:
        state, rewards, dones = rollout(key)
        return state, jax.vmap(observe)(state), rewards, dones

    return with_observation


# --- A Gaussian multi-armed bandit with an epsilon-greedy learner --------------------------

ARMS = 10


def make_bandit(n: int, t: int, max_steps: int = 100) -> Rollout:
    epsilon = 0.1

    def reset(key: jax.Array) -> dict[str, jax.Array]:
        return {"means": jax.random.normal(key, (ARMS,)), "q": jnp.zeros((ARMS,)),
                "count": jnp.zeros((ARMS,), jnp.int32), "t": jnp.zeros((), jnp.int32)}

    def step(state: dict[str, jax.Array], key: jax.Array) -> tuple[Any, Any, Any]:
        k_explore, k_arm, k_reward = jax.random.split(key, 3)
        greedy = jnp.argmax(state["q"])
        random_arm = jax.random.randint(k_arm, (), 0, ARMS)
        arm = jnp.where(jax.random.uniform(k_explore) < epsilon, random_arm, greedy)
        mean = jnp.take_along_axis(state["means"], arm[None], axis=0)[0]
        reward = mean + jax.random.normal(k_reward)
        count = state["count"].at[arm].add(1)
        q = state["q"].at[arm].add((reward - state["q"][arm]) / count[arm])
        steps = state["t"] + 1
        new = {"means": state["means"], "q": q, "count": count, "t": steps}
        return new, reward, steps >= max_steps

    def policy(key: jax.Array, n: int) -> jax.Array:
        return jax.random.split(key, n)  # the learner draws its own numbers

    return _batched_rollout(reset, step, policy, n, t)


# --- Particles: springs to an anchor, walls, gravity; fori_loop substeps, a small dot ------

PARTICLES = 8
SUBSTEPS = 4


def make_particles(n: int, t: int) -> Rollout:
    dt = 0.02
    stiffness, damping, gravity = 4.0, 0.05, -9.8

    def reset(key: jax.Array) -> dict[str, jax.Array]:
        k1, k2 = jax.random.split(key)
        return {"x": jax.random.uniform(k1, (PARTICLES, 2), minval=-1.0, maxval=1.0),
                "v": 0.1 * jax.random.normal(k2, (PARTICLES, 2)),
                "t": jnp.zeros((), jnp.int32)}

    def step(state: dict[str, jax.Array], push: jax.Array) -> tuple[Any, Any, Any]:
        # The anchor spins: each step rotates the particles' rest frame by the push angle.
        c, s = jnp.cos(push[0]), jnp.sin(push[0])
        rotation = jnp.array([[c, -s], [s, c]])

        def substep(_: int, xv: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            x, v = xv
            anchor = jnp.dot(x, rotation) * 0.5
            force = -stiffness * (x - anchor) - damping * v
            force = force + jnp.array([0.0, gravity]) + push[1:][None, :]
            v = v + dt * force
            x = x + dt * v
            bounce = jnp.abs(x) > 2.0
            v = jnp.where(bounce, -0.8 * v, v)
            x = jnp.clip(x, -2.0, 2.0)
            return x, v

        x, v = lax.fori_loop(0, SUBSTEPS, substep, (state["x"], state["v"]))
        energy = 0.5 * jnp.sum(v * v)
        steps = state["t"] + 1
        done = (energy > 50.0) | (steps >= 50)
        return {"x": x, "v": v, "t": steps}, -energy, done

    def policy(key: jax.Array, n: int) -> jax.Array:
        return jax.random.normal(key, (n, 3))

    return _batched_rollout(reset, step, policy, n, t)


# --- A chain of rigid links in generalised coordinates, a mass-matrix solve per step ----------

LINKS = 5


def make_rigid_body(n: int, t: int, max_steps: int = 200) -> Rollout:
    """A planar chain of LINKS links hanging from a pivot, in joint angles q. Each step builds
    the configuration-dependent mass matrix M(q) = diag(inertia) + J(q)^T J(q) (J: the tip's
    horizontal lever arms, cumulative sums of the links' cosines), factorises it and solves
    M a = torque - damping - gravity for the joint accelerations, then integrates by
    semi-implicit Euler. Random torques at every joint; an episode ends when a joint swings
    past 2.5 rad or after max_steps."""
    dt, damping, gravity = 0.02, 0.2, 3.0
    inertia = 1.0 + 0.25 * jnp.arange(LINKS, dtype=jnp.float32)
    prefix = jnp.tril(jnp.ones((LINKS, LINKS), jnp.float32))  # arm of link i: links <= i

    def reset(key: jax.Array) -> dict[str, jax.Array]:
        return {"q": jax.random.uniform(key, (LINKS,), minval=-0.3, maxval=0.3),
                "v": jnp.zeros((LINKS,), jnp.float32), "t": jnp.zeros((), jnp.int32)}

    def step(state: dict[str, jax.Array], torque: jax.Array) -> tuple[Any, Any, Any]:
        q, v = state["q"], state["v"]
        absolute = prefix @ q  # each link's angle from the vertical
        arms = prefix.T @ jnp.cos(absolute)  # d(tip x)/dq_j: the links from j to the tip
        mass = jnp.diag(inertia) + jnp.outer(arms, arms)
        bias = damping * v + gravity * (prefix.T @ jnp.sin(absolute))
        acc = jsl.cho_solve(jsl.cho_factor(mass, lower=True), torque - bias)
        v = v + dt * acc
        q = q + dt * v
        steps = state["t"] + 1
        done = jnp.any(jnp.abs(q) > 2.5) | (steps >= max_steps)
        reward = -jnp.sum(q * q) - 0.01 * jnp.sum(torque * torque)
        return {"q": q, "v": v, "t": steps}, reward, done

    def policy(key: jax.Array, n: int) -> jax.Array:
        return 2.0 * jax.random.normal(key, (n, LINKS))

    return _batched_rollout(reset, step, policy, n, t)


# --- Rollouts that log statistics across the lanes at every step --------------------------
# Written as an RL library would: an environment class with `reset`/`step` and a params
# pytree, vmapped over the lanes, and a scan whose per-step outputs are the lanes' mean
# reward, finished-episode count and extreme values (the [T] curves a training loop logs).


class Reacher:
    """A two-link planar arm whose joint torques are chosen at random, rewarded by minus the
    distance from its tip to a target drawn at reset; an episode ends at the target or after
    `max_steps` steps."""

    def __init__(self, max_steps: int = 50) -> None:
        self.params = {"link": jnp.array([0.6, 0.4], jnp.float32), "dt": jnp.float32(0.05),
                       "damping": jnp.float32(0.1), "reach": jnp.float32(0.05)}
        self.max_steps = max_steps

    def reset(self, key: jax.Array) -> dict[str, jax.Array]:
        k_angle, k_target = jax.random.split(key)
        radius_angle = jax.random.uniform(k_target, (2,), minval=jnp.array([0.2, -jnp.pi]),
                                          maxval=jnp.array([0.95, jnp.pi]))
        target = radius_angle[0] * jnp.array([jnp.cos(radius_angle[1]),
                                              jnp.sin(radius_angle[1])])
        return {"q": jax.random.uniform(k_angle, (2,), minval=-jnp.pi, maxval=jnp.pi),
                "qd": jnp.zeros((2,), jnp.float32), "target": target,
                "t": jnp.zeros((), jnp.int32)}

    def tip(self, q: jax.Array) -> jax.Array:
        link = self.params["link"]
        a = jnp.cumsum(q)
        return jnp.stack([jnp.sum(link * jnp.cos(a)), jnp.sum(link * jnp.sin(a))])

    def step(self, state: dict[str, jax.Array], torque: jax.Array
             ) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
        p = self.params
        qd = state["qd"] + p["dt"] * (torque - p["damping"] * state["qd"])
        q = state["q"] + p["dt"] * qd
        distance = jnp.linalg.norm(self.tip(q) - state["target"])
        t = state["t"] + 1
        done = (distance < p["reach"]) | (t >= self.max_steps)
        return {"q": q, "qd": qd, "target": state["target"], "t": t}, -distance, done


def make_reacher_logged(n: int, t: int, max_steps: int = 50) -> Rollout:
    env = Reacher(max_steps)

    def rollout(key: jax.Array) -> Any:
        key, init_key = jax.random.split(key)
        state = jax.vmap(env.reset)(jax.random.split(init_key, n))

        def body(carry: tuple[Any, jax.Array], _: None) -> tuple[Any, Any]:
            state, key = carry
            key, act_key, reset_key = jax.random.split(key, 3)
            torque = jax.random.normal(act_key, (n, 2))
            stepped, reward, done = jax.vmap(env.step)(state, torque)
            fresh = jax.vmap(env.reset)(jax.random.split(reset_key, n))
            state = jax.tree_util.tree_map(
                lambda f, s: jnp.where(done.reshape(done.shape + (1,) * (s.ndim - 1)), f, s),
                fresh, stepped)
            log = {"mean_reward": reward.mean(), "episodes": done.sum(),
                   "worst": reward.min(), "fastest": jnp.abs(stepped["qd"]).max()}
            return (state, key), log

        (state, _), log = lax.scan(body, (state, key), None, length=t)
        return state, log

    return rollout


def make_inventory_logged(n: int, t: int, horizon: int = 60) -> Rollout:
    """A shop restocks a random order each day and sells a random demand; unmet demand is
    lost. Logged per day across the shops: total profit, stock-outs, the smallest stock, and
    the mean profit of the shops that sold anything."""
    params = {"capacity": 40, "price": 3.0, "cost": 1.0, "holding": 0.05}

    def reset(key: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jax.random.randint(key, (), 5, 20), jnp.zeros((), jnp.int32)

    def day(state: tuple[jax.Array, jax.Array], order: jax.Array, demand: jax.Array
            ) -> tuple[tuple[jax.Array, jax.Array], jax.Array, jax.Array, jax.Array]:
        stock, age = state
        stock = jnp.minimum(stock + order, params["capacity"])
        sold = jnp.minimum(stock, demand)
        profit = (params["price"] * sold - params["cost"] * order
                  - params["holding"] * (stock - sold))
        return (stock - sold, age + 1), profit, demand > stock, sold

    def rollout(key: jax.Array) -> Any:
        key, init_key = jax.random.split(key)
        state = jax.vmap(reset)(jax.random.split(init_key, n))

        def body(carry: Any, _: None) -> tuple[Any, Any]:
            state, key = carry
            key, k_order, k_demand, k_reset = jax.random.split(key, 4)
            order = jax.random.randint(k_order, (n,), 0, 8)
            demand = jax.random.randint(k_demand, (n,), 0, 12)
            (stock, age), profit, out, sold = jax.vmap(day)(state, order, demand)
            done = age >= horizon
            fresh_stock, fresh_age = jax.vmap(reset)(jax.random.split(k_reset, n))
            state = (jnp.where(done, fresh_stock, stock), jnp.where(done, fresh_age, age))
            selling = sold > 0
            log = (profit.sum(), jnp.sum(out.astype(jnp.int32)), stock.min(),
                   jnp.sum(jnp.where(selling, profit, 0.0)) / jnp.maximum(selling.sum(), 1))
            return (state, key), log

        (state, _), log = lax.scan(body, (state, key), None, length=t)
        return state, log

    return rollout
# --- Policy networks: an MLP over each lane's observation ---------------------------------
#
# The rollouts that collect experience for training: the environments above, stepped by a
# policy network instead of random actions. The parameters are a pytree (a list of layers, each
# {"w", "b"}) initialised from the rollout's key and shared by every lane; the policy is
# written for one observation and `jax.vmap`ped over the lanes with a key per lane, as an
# actor in PPO or A2C code is. Two hidden layers of 64 (tanh or relu), then a categorical
# sample over logits (discrete actions) or a Gaussian with a learned log standard deviation,
# clipped to the action bounds (continuous). The `build` hook of each environment's maker
# replaces `_batched_rollout`; the environment's own random policy is unused.

HIDDEN = 64
Params = list[dict[str, jax.Array]]


def init_mlp(key: jax.Array, sizes: tuple[int, ...]) -> Params:
    """LeCun-normal weights and zero biases for the layers sizes[0] -> ... -> sizes[-1]."""
    keys = jax.random.split(key, len(sizes) - 1)
    return [{"w": jax.random.normal(k, (fan_in, fan_out)) / math.sqrt(fan_in),
             "b": jnp.zeros((fan_out,))}
            for k, fan_in, fan_out in zip(keys, sizes[:-1], sizes[1:])]


def mlp(params: Params, x: jax.Array, activation: Callable[[jax.Array], jax.Array]) -> jax.Array:
    for layer in params[:-1]:
        x = activation(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def _categorical_head(num_actions: int, activation: Callable[[jax.Array], jax.Array]) -> Any:
    def init(key: jax.Array, obs_size: int) -> Any:
        return {"net": init_mlp(key, (obs_size, HIDDEN, HIDDEN, num_actions))}

    def act(params: Any, obs: jax.Array, key: jax.Array) -> jax.Array:
        return jax.random.categorical(key, mlp(params["net"], obs, activation))

    return init, act


def _gaussian_head(low: float, high: float,
                   activation: Callable[[jax.Array], jax.Array]) -> Any:
    def init(key: jax.Array, obs_size: int) -> Any:
        return {"net": init_mlp(key, (obs_size, HIDDEN, HIDDEN, 1)),
                "log_std": jnp.full((1,), -0.5)}

    def act(params: Any, obs: jax.Array, key: jax.Array) -> jax.Array:
        mean = mlp(params["net"], obs, activation)
        sample = mean + jnp.exp(params["log_std"]) * jax.random.normal(key, mean.shape)
        return jnp.clip(sample[0], low, high)

    return init, act


def _mlp_rollout(observe: Callable[[State], jax.Array], obs_size: int, head: Any) -> Any:
    """A `build` for the environment makers: vmap(step) inside scan, actions from the policy
    network on each lane's observation, the same random auto-reset as `_batched_rollout`."""
    init, act = head

    def build(reset: Callable[[jax.Array], State], step: Any, _random_policy: Any, n: int,
              t: int) -> Rollout:
        def rollout(key: jax.Array) -> Any:
            key, params_key, init_key = jax.random.split(key, 3)
            params = init(params_key, obs_size)
            state = jax.vmap(reset)(jax.random.split(init_key, n))

            def body(carry: tuple[State, jax.Array], _: None) -> tuple[Any, Any]:
                state, key = carry
                key, action_key, reset_key = jax.random.split(key, 3)
                obs = jax.vmap(observe)(state)
                actions = jax.vmap(act, in_axes=(None, 0, 0))(
                    params, obs, jax.random.split(action_key, n))
                next_state, reward, done = jax.vmap(step)(state, actions)
                fresh = jax.vmap(reset)(jax.random.split(reset_key, n))

                def pick(r: jax.Array, s: jax.Array) -> jax.Array:
                    d = done.reshape(done.shape + (1,) * (s.ndim - 1))
                    return jnp.where(d, r, s)

                state = jax.tree_util.tree_map(pick, fresh, next_state)
                return (state, key), (reward, done)

            (state, _), (rewards, dones) = lax.scan(body, (state, key), None, length=t)
            return state, rewards, dones

        return rollout

    return build


def _acrobot_observation(state: dict[str, jax.Array]) -> jax.Array:
    s = state["s"]
    return jnp.stack([jnp.cos(s[0]), jnp.sin(s[0]), jnp.cos(s[1]), jnp.sin(s[1]), s[2], s[3]])


def _pendulum_observation(state: dict[str, jax.Array]) -> jax.Array:
    return jnp.stack([jnp.cos(state["theta"]), jnp.sin(state["theta"]), state["omega"]])


def _mountain_car_observation(state: dict[str, jax.Array]) -> jax.Array:
    return jnp.stack([state["pos"], state["vel"]])


def _mountain_car_continuous_observation(state: tuple[jax.Array, jax.Array]) -> jax.Array:
    return state[0]


def make_acrobot_mlp(n: int, t: int, max_steps: int = ACROBOT_MAX_STEPS) -> Rollout:
    build = _mlp_rollout(_acrobot_observation, 6, _categorical_head(3, jnp.tanh))
    return make_acrobot(n, t, max_steps, build=build)


def make_pendulum_mlp(n: int, t: int, max_steps: int = 200) -> Rollout:
    build = _mlp_rollout(_pendulum_observation, 3, _gaussian_head(-2.0, 2.0, jnp.tanh))
    return make_pendulum(n, t, max_steps, build=build)


def make_mountain_car_mlp(n: int, t: int, max_steps: int = 200) -> Rollout:
    build = _mlp_rollout(_mountain_car_observation, 2, _categorical_head(3, jax.nn.relu))
    return make_mountain_car(n, t, max_steps, build=build)


def make_mountain_car_continuous_mlp(n: int, t: int, max_steps: int = 999) -> Rollout:
    build = _mlp_rollout(_mountain_car_continuous_observation, 2,
                         _gaussian_head(-1.0, 1.0, jax.nn.relu))
    return make_mountain_car_continuous(n, t, max_steps, build=build)

# --- A spring chain stepped in substeps, as a physics engine steps its integrator -----------

CHAIN_MASSES = 8
CHAIN_SUBSTEPS = 16


def make_spring_chain(n: int, t: int, max_steps: int = 200) -> Rollout:
    """CHAIN_MASSES point masses in the plane, the first pinned to the origin by a spring and
    each joined to the next by a damped spring of rest length 0.5, under gravity; the policy
    pushes the last mass. Each environment step is CHAIN_SUBSTEPS semi-implicit Euler substeps
    in a `fori_loop` (the engine's fixed substep count). The reward is minus the chain's
    kinetic energy; an episode ends when some spring stretches past three times its rest
    length or after max_steps."""
    dt, stiffness, damping, rest, gravity = 0.01, 400.0, 2.0, 0.5, -9.8

    def spring_forces(x: jax.Array, v: jax.Array) -> jax.Array:
        anchored = jnp.concatenate([jnp.zeros((1, 2), x.dtype), x[:-1]])  # each mass's parent
        d = x - anchored
        length = jnp.sqrt(jnp.sum(d * d, axis=1, keepdims=True) + 1e-6)
        relative = v - jnp.concatenate([jnp.zeros((1, 2), v.dtype), v[:-1]])
        along = jnp.sum(relative * d, axis=1, keepdims=True) / length
        tension = stiffness * (length - rest) + damping * along
        pull = tension * d / length  # on the mass, towards its parent
        child_pull = jnp.concatenate([pull[1:], jnp.zeros((1, 2), x.dtype)])
        return -pull + child_pull

    def reset(key: jax.Array) -> dict[str, jax.Array]:
        k1, k2 = jax.random.split(key)
        hanging = jnp.stack([jnp.zeros(CHAIN_MASSES),
                             -rest * (1.0 + jnp.arange(CHAIN_MASSES, dtype=jnp.float32))],
                            axis=1)
        return {"x": hanging + 0.05 * jax.random.normal(k1, (CHAIN_MASSES, 2)),
                "v": 0.1 * jax.random.normal(k2, (CHAIN_MASSES, 2)),
                "t": jnp.zeros((), jnp.int32)}

    def step(state: dict[str, jax.Array], push: jax.Array) -> tuple[Any, Any, Any]:
        external = jnp.zeros((CHAIN_MASSES, 2)).at[-1].set(push)
        external = external + jnp.array([0.0, gravity])

        def substep(_: int, xv: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            x, v = xv
            v = v + dt * (spring_forces(x, v) + external)
            return x + dt * v, v

        x, v = lax.fori_loop(0, CHAIN_SUBSTEPS, substep, (state["x"], state["v"]))
        parents = jnp.concatenate([jnp.zeros((1, 2), x.dtype), x[:-1]])
        stretch = jnp.sqrt(jnp.sum((x - parents) ** 2, axis=1))
        steps = state["t"] + 1
        done = jnp.any(stretch > 3.0 * rest) | (steps >= max_steps)
        return {"x": x, "v": v, "t": steps}, -0.5 * jnp.sum(v * v), done

    def policy(key: jax.Array, n: int) -> jax.Array:
        return 3.0 * jax.random.normal(key, (n, 2))

    return _batched_rollout(reset, step, policy, n, t)


# --- Position-based dynamics: a rope's distance constraints solved by Jacobi iterations ------

ROPE_PARTICLES = 10
JACOBI_ITERATIONS = 12


def make_jacobi_rope(n: int, t: int, max_steps: int = 200) -> Rollout:
    """A rope of ROPE_PARTICLES particles, the first pinned, stepped the way position-based
    dynamics engines step: predict positions from velocities under gravity and the policy's
    push on the free end, then JACOBI_ITERATIONS Jacobi iterations over the distance
    constraints between neighbours (every constraint's correction computed from the same
    positions, each particle moved by the average of its corrections, the pinned one not
    at all), then velocities from the change of position. The reward is minus the free end's
    distance from a target; an episode ends when the free end leaves a box or after
    max_steps."""
    dt, rest, gravity = 0.03, 0.3, -9.8
    inverse_mass = jnp.ones(ROPE_PARTICLES).at[0].set(0.0)
    counts = jnp.full((ROPE_PARTICLES,), 2.0).at[0].set(1.0).at[-1].set(1.0)
    target = jnp.array([1.5, -1.5])

    def jacobi(_: int, p: jax.Array) -> jax.Array:
        d = p[1:] - p[:-1]
        length = jnp.sqrt(jnp.sum(d * d, axis=1, keepdims=True) + 1e-9)
        w1, w2 = inverse_mass[:-1, None], inverse_mass[1:, None]
        error = (length - rest) / length / jnp.maximum(w1 + w2, 1e-6)
        delta = jnp.zeros_like(p)
        delta = delta.at[:-1].add(w1 * error * d)
        delta = delta.at[1:].add(-w2 * error * d)
        return p + delta / counts[:, None]

    def reset(key: jax.Array) -> dict[str, jax.Array]:
        angle = jax.random.uniform(key, (), minval=-0.5, maxval=0.5)
        along = rest * jnp.arange(ROPE_PARTICLES, dtype=jnp.float32)
        x = jnp.stack([along * jnp.sin(angle), -along * jnp.cos(angle)], axis=1)
        return {"x": x, "v": jnp.zeros((ROPE_PARTICLES, 2)), "t": jnp.zeros((), jnp.int32)}

    def step(state: dict[str, jax.Array], push: jax.Array) -> tuple[Any, Any, Any]:
        x, v = state["x"], state["v"]
        force = jnp.zeros((ROPE_PARTICLES, 2)).at[-1].set(push) + jnp.array([0.0, gravity])
        v = v + dt * force * inverse_mass[:, None]
        predicted = lax.fori_loop(0, JACOBI_ITERATIONS, jacobi, x + dt * v)
        v = (predicted - x) / dt
        tip = predicted[-1]
        steps = state["t"] + 1
        done = jnp.any(jnp.abs(tip) > 4.0) | (steps >= max_steps)
        reward = -jnp.sqrt(jnp.sum((tip - target) ** 2))
        return {"x": predicted, "v": v, "t": steps}, reward, done

    def policy(key: jax.Array, n: int) -> jax.Array:
        return 4.0 * jax.random.normal(key, (n, 2))

    return _batched_rollout(reset, step, policy, n, t)


# --- A stiff pendulum stepped implicitly: Newton's method per lane until it converges -------


class ImplicitPendulum:
    """A damped pendulum on a stiff torsion spring, stepped by backward Euler: each step
    solves for the next angle with Newton's method, iterating until the lane's own update is
    below a tolerance (a `while_loop` in the per-lane step, so under `jax.vmap` the lanes
    take different numbers of iterations). The policy's torque is drawn at random; the
    reward is minus the energy; an episode ends after `max_steps` steps or when the
    pendulum spins past two turns."""

    def __init__(self, max_steps: int = 200) -> None:
        self.params = {"dt": jnp.float32(0.05), "stiffness": jnp.float32(60.0),
                       "gravity": jnp.float32(9.8), "damping": jnp.float32(0.4),
                       "tolerance": jnp.float32(1e-5), "max_newton": 25}
        self.max_steps = max_steps

    def reset(self, key: jax.Array) -> dict[str, jax.Array]:
        theta, omega = jax.random.uniform(key, (2,), minval=-1.0, maxval=1.0)
        return {"theta": theta, "omega": omega, "t": jnp.zeros((), jnp.int32)}

    def _acceleration(self, theta: jax.Array, omega: jax.Array, torque: jax.Array
                      ) -> jax.Array:
        p = self.params
        return (-p["stiffness"] * theta - p["gravity"] * jnp.sin(theta)
                - p["damping"] * omega + torque)

    def step(self, state: dict[str, jax.Array], torque: jax.Array
             ) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
        p, dt = self.params, self.params["dt"]
        theta0, omega0 = state["theta"], state["omega"]

        def residual(theta: jax.Array) -> jax.Array:
            omega = (theta - theta0) / dt
            return omega - omega0 - dt * self._acceleration(theta, omega, torque)

        def newton(carry: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[Any, Any, Any]:
            theta, _, k = carry
            slope = jax.grad(residual)(theta)
            delta = residual(theta) / slope
            return theta - delta, jnp.abs(delta), k + 1

        def unconverged(carry: tuple[jax.Array, jax.Array, jax.Array]) -> jax.Array:
            _, change, k = carry
            return (change > p["tolerance"]) & (k < p["max_newton"])

        guess = theta0 + dt * omega0
        theta, _, iterations = lax.while_loop(unconverged, newton,
                                              (guess, jnp.float32(jnp.inf), jnp.int32(0)))
        omega = (theta - theta0) / dt
        t = state["t"] + 1
        energy = 0.5 * omega ** 2 + 0.5 * p["stiffness"] * theta ** 2
        done = (t >= self.max_steps) | (jnp.abs(theta) > 4.0 * jnp.pi)
        return {"theta": theta, "omega": omega, "t": t}, -energy - 0.01 * iterations, done


def make_implicit_pendulum(n: int, t: int, max_steps: int = 200) -> Rollout:
    env = ImplicitPendulum(max_steps)

    def policy(key: jax.Array, n: int) -> jax.Array:
        return 20.0 * jax.random.normal(key, (n,))

    return _batched_rollout(env.reset, env.step, policy, n, t)


ROLLOUTS: dict[str, Callable[[int, int], Rollout]] = {
    "acrobot": make_acrobot,
    "pendulum": make_pendulum,
    "mountain_car": make_mountain_car,
    "mountain_car_continuous": make_mountain_car_continuous,
    "grid_forage": make_grid_forage,
    "catch": make_catch,
    "bandit": make_bandit,
    "particles": make_particles,
    "rigid_body": make_rigid_body,
    "reacher_logged": make_reacher_logged,
    "inventory_logged": make_inventory_logged,
    "acrobot_mlp": make_acrobot_mlp,
    "pendulum_mlp": make_pendulum_mlp,
    "mountain_car_mlp": make_mountain_car_mlp,
    "mountain_car_continuous_mlp": make_mountain_car_continuous_mlp,
    "spring_chain": make_spring_chain,
    "jacobi_rope": make_jacobi_rope,
    "implicit_pendulum": make_implicit_pendulum,
}
