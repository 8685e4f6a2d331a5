"""An epsilon-greedy rollout written the way an RL person would: an environment class with
`reset` and `step`, a greedy policy, epsilon decayed every step and logged, a wind regime
drawn for the step with `lax.switch` over the regimes, and auto-reset.

It is written once against a NumPy-like module, a random module and a lax module: JAX's
(`jax.numpy`, `jax.random`, `jax.lax`), which `hlofuse bench rollouts --corpus
benchmarks/epsilon_greedy` exports as a corpus program (`ROLLOUTS`), or hlofuse's front end
(`hlofuse.numpy`, `hlofuse.random`, `hlofuse.lax`, traced by `hlofuse.jit`:
benchmarks/epsilon_greedy_bench.py). Both draw with Threefry from the same key, so they
compute the same numbers.

The per-step logs are what made such a rollout slow before (issue 32): epsilon and the
regime are values the lanes share, stacked over T by `scan` (step logs); the mean reward and
the count of finished episodes are reductions across the lanes (per-step reductions).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

EPSILON_DECAY = 0.98
EPSILON_MIN = 0.05
MAX_EPISODE_STEPS = 100
GOAL = 0.9


class Corridor:
    """A cart on a track from -2 to 2, pushed left, not at all or right (actions 0, 1, 2)
    and blown by the step's wind; an episode ends at the goal (reward 10) or after
    MAX_EPISODE_STEPS steps, each step costing the distance to the goal."""

    def __init__(self, np: ModuleType, random: ModuleType, n: int) -> None:
        self.np, self.random, self.n = np, random, n

    def reset(self, key: Any) -> tuple[Any, Any, Any]:
        np = self.np
        x = self.random.uniform(key, (self.n,), minval=-1.0, maxval=0.0)
        return x, np.zeros((self.n,), np.float32), np.zeros((self.n,), np.int32)

    def step(self, state: tuple[Any, Any, Any], action: Any, wind: Any
             ) -> tuple[tuple[Any, Any, Any], Any, Any]:
        np = self.np
        x, v, age = state
        force = (action.astype(np.float32) - 1.0) * 0.02 + wind
        v = np.clip(v * 0.95 + force, -0.1, 0.1)
        x = np.clip(x + v, -2.0, 2.0)
        age = age + 1
        reached = x >= GOAL
        done = reached | (age >= MAX_EPISODE_STEPS)
        reward = np.where(reached, 10.0, -0.1 * np.abs(GOAL - x))
        return (x, v, age), reward, done


def greedy(np: ModuleType, state: tuple[Any, Any, Any]) -> Any:
    """Push right until fast enough toward the goal, then coast; brake when overshooting."""
    x, v, _ = state
    return np.where(x > GOAL + 0.5, 0, np.where(v < 0.05, 2, 1)).astype(np.int32)


def make_epsilon_greedy(n: int, t: int, np: ModuleType | None = None,
                        random: ModuleType | None = None,
                        lax: ModuleType | None = None) -> Callable[[Any], Any]:
    """The rollout of N corridors for T steps, a function of a u32[2] key (JAX's modules
    unless others are given)."""
    if np is None or random is None or lax is None:
        import jax
        import jax.numpy as jnp

        np, random, lax = jnp, jax.random, jax.lax
    env = Corridor(np, random, n)
    winds = [lambda u: 0.0 * u,  # calm
             lambda u: 0.01 * (u - 0.5),  # gusts either way
             lambda u: -0.015 * u,  # headwind
             lambda u: 0.005 + 0.0 * u]  # a steady tailwind

    def rollout(key: Any) -> Any:
        keys = random.split(key)
        key, state = keys[0], env.reset(keys[1])

        def body(carry: Any, _: Any) -> Any:
            state, epsilon, key = carry
            keys = random.split(key, 6)
            key = keys[0]
            regime = (random.bits(keys[1]) >> 30).astype(np.int32)  # 0..3, the same for all
            wind = lax.switch(regime, winds, random.uniform(keys[2]))
            explore = random.uniform(keys[3], (n,)) < epsilon
            random_action = np.minimum(
                (random.uniform(keys[4], (n,)) * 3.0).astype(np.int32), 2)
            action = np.where(explore, random_action, greedy(np, state))
            stepped, reward, done = env.step(state, action, wind)
            fresh = env.reset(keys[5])
            state = tuple(np.where(done, f, s) for f, s in zip(fresh, stepped))
            epsilon = np.maximum(epsilon * EPSILON_DECAY, EPSILON_MIN)
            log = (epsilon, regime, np.mean(reward), np.sum(done.astype(np.int32)))
            return (state, epsilon, key), log

        epsilon0 = np.asarray(1.0, np.float32)
        (state, _, _), logs = lax.scan(body, (state, epsilon0, key), None, length=t)
        return state, logs

    return rollout


ROLLOUTS = {"epsilon_greedy": make_epsilon_greedy}
