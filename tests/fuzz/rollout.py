"""Rollout-shaped fuzz programs (`python -m tests.fuzz --mode rollout`): the programs RL code
runs, as tests/data/rollouts/programs.py writes them, with random parts.

A program is one time loop (`scan`, or `fori_loop` writing its logs into buffers) over a state
of N lanes (N from 1 to a few hundred, odd sizes among them) and uniform values (a step counter,
the PRNG key, a decaying rate). Each step draws random numbers (`jax.random`, for the whole
batch and from per-lane keys), runs code written for one lane under `jax.vmap` (random
operations of the ordinary generator, a small MLP over the lane's observation with weights
shared by the lanes, carried unchanged or closed over, nested loops, an episode counter and an
auto-reset to fresh random values), and logs sums, maxima, minima and counts across the lanes,
stacked over the steps. The nested loops inside the lane code have a constant trip count (small
or up to 200), a trip count computed from the step counter (the same for every lane), one
computed from the lane's own values (bounded), or none at all (a loop that halves a lane value
until it is zero): whole-loop fusion must run each as one kernel or refuse it by a named rule,
never give a wrong answer or hang. Some programs feed a maximum across the lanes back into the
state (a cross-lane dependence that whole-loop fusion must refuse).

Soundness of the comparison: a float that went through an approximation (a transcendental
function, a dot, a sum) differs from XLA's by a few ulp, and a loop that feeds such a value back
through an expanding map amplifies the difference without bound. So a carried float is either
exact (every value that reaches it is computed by operations IEEE defines to the bit: any
program of them, chaotic or not, matches bit for bit) or damped: its update is
`clamp(decay * x + dt * f, -bound, bound)` with `decay + dt * |f'|` below one, where `f` is built
from functions with bounded slope (sin, tanh, clamp, an MLP of small weights). Approximated
values also reach the per-step logs and the outputs freely.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tests.fuzz.program import (
    Block,
    Env,
    Generator,
    Program,
    Step,
    Value,
    is_float,
    np_dtype,
    random_array,
)

LANE_COUNTS = (1, 2, 3, 7, 16, 33, 64, 100, 127, 200, 257, 300)
# Filler inside lane code: the ordinary generator's families without its control flow (the
# nested loops here are made on purpose) and with fewer shape changes. Not clamp: its bounds
# may be per-lane values where its operand is uniform, which JAX's batching of clamp refuses
# (inside a loop body, where vmap batches the traced body, not the Python that wrote it).
LANE_FAMILY_WEIGHTS = {
    "unary": 6, "binary": 10, "compare": 3, "select": 3, "convert": 3,
    "bitcast": 1, "is_finite": 1, "broadcast": 1, "reshape": 1, "slice": 1, "concatenate": 1,
    "constant": 2, "dynamic_slice": 1, "dynamic_update_slice": 1, "reduce": 2, "dot": 1,
    "random": 1, "indexing": 1, "cond": 1,
}
LANE_FAMILIES = tuple(f for f, w in LANE_FAMILY_WEIGHTS.items() for _ in range(w))
LANE_FAMILIES_NO_CONTROL = tuple(f for f in LANE_FAMILIES if f != "cond")
LANE_DTYPE_WEIGHTS = {"float32": 6, "int32": 4, "uint32": 2, "bool": 2, "float64": 1,
                      "int8": 1, "uint8": 1}
# Iterations of the nested loops (their largest trip counts) over all the steps of a program at
# most: the reference interpreter runs every iteration, for every lane.
MAX_ITERATIONS = 2400
BOUND = 4.0  # a damped value stays within [-BOUND, BOUND]


@dataclass
class Slot:
    """One element of the lane state: its per-lane type (with the flags it has as a carry)
    and how it evolves: "counter" (the episode's step), "damped" (an approximated float
    under a contracting update), "exact", or "key" (a PRNG key per lane)."""

    value: Value
    role: str
    reset: bool = False  # drawn fresh when the lane's episode ends


@dataclass
class Lane:
    """Where the lane code's inputs are in its environment, and the current value of each
    slot (replaced as loops and updates compute new ones)."""

    current: list[int]
    noise: int
    fresh: dict[int, int]
    limit: int
    weights: list[int]
    actions: int
    budget: int  # nested-loop iterations left for this step


class RolloutGenerator(Generator):
    """Rollout-shaped programs: `program()` is deterministic in the seed."""

    def __init__(self, seed: int, check: Callable[[Step, Sequence[Value]], bool] | None = None
                 ) -> None:
        super().__init__(seed, max_steps=6, check=check)

    # -- what the ordinary generator draws, for lane code --
    def dtype(self) -> str:
        names = list(LANE_DTYPE_WEIGHTS)
        w = np.array([LANE_DTYPE_WEIGHTS[n] for n in names], float)
        return str(names[int(self.rng.choice(len(names), p=w / w.sum()))])

    def shape(self) -> tuple[int, ...]:
        return tuple(self.choice(((), (), (2,), (3,))))

    def families(self, depth: int) -> tuple[str, ...]:
        return LANE_FAMILIES if depth < 2 else LANE_FAMILIES_NO_CONTROL

    # -- emitting directed steps --
    @staticmethod
    def emit(env: Env, steps: list[Step], step: Step) -> int:
        steps.append(step)
        index = env.add(step.out)
        for extra in step.extra_outs:
            env.add(extra)
        return index

    def const(self, env: Env, steps: list[Step], value: Any, dtype: str,
              shape: tuple[int, ...] = ()) -> int:
        array = np.full(shape, value, dtype=np.dtype(dtype))
        return self.emit(env, steps, Step("constant", [], {"value": array}, Value(dtype, shape)))

    def unary(self, env: Env, steps: list[Step], op: str, i: int, inexact: bool) -> int:
        v = env.values[i]
        return self.emit(env, steps, Step(op, [i], {}, dataclasses.replace(
            v, inexact=v.inexact or inexact, nan_bits=False)))

    def binary(self, env: Env, steps: list[Step], op: str, i: int, j: int) -> int:
        a, b = env.values[i], env.values[j]
        shape = a.shape if a.shape != () else b.shape
        return self.emit(env, steps, Step(op, [i, j], {}, Value(
            a.dtype, shape, a.inexact or b.inexact, False)))

    def clamp(self, env: Env, steps: list[Step], i: int, bound: float) -> int:
        v = env.values[i]
        lo = self.const(env, steps, -bound, v.dtype)
        hi = self.const(env, steps, bound, v.dtype)
        return self.emit(env, steps, Step("clamp", [lo, i, hi], {}, dataclasses.replace(
            v, nan_bits=False)))

    # -- the program --
    def program(self) -> Program:
        n = int(self.choice(LANE_COUNTS))
        length = int(self.rng.integers(2, 13))
        inputs: list[Value] = []
        data: list[np.ndarray] = []

        def add_input(value: Value, array: np.ndarray) -> int:
            inputs.append(value)
            data.append(array)
            return len(inputs) - 1

        max_steps = int(self.rng.integers(3, 40))
        slots = [Slot(Value("int32", ()), "counter")]
        for _ in range(int(self.rng.integers(1, 3))):
            damped = self.chance(0.6)
            slots.append(Slot(Value("float32", self.choice(((), (), (2,), (3,))), damped,
                                    False), "damped" if damped else "exact", self.chance(0.6)))
        for _ in range(int(self.rng.integers(0, 3))):
            slots.append(Slot(Value(self.dtype(), self.shape(), False, False), "exact"))
        if self.chance(0.3):
            slots.append(Slot(Value("uint32", (2,)), "key"))
        lane_in = [self._initial_lane_state(slot, n, max_steps, add_input) for slot in slots]
        key = add_input(Value("uint32", (2,)), self._key_data())
        count = add_input(Value("int32", ()), np.zeros((), np.int32))
        uniform = [key, count]
        rate = None
        if self.chance(0.5):
            rate = add_input(Value("float32", ()),
                             np.asarray(self.rng.uniform(0.1, 1.0), np.float32))
            uniform.append(rate)
        floats = [k for k, s in enumerate(slots) if s.role in ("damped", "exact")
                  and s.value.dtype == "float32"]
        feedback_from = None
        if floats and self.chance(0.15):
            feedback_from = int(self.choice(floats))
            uniform.append(add_input(Value("float32", (), slots[feedback_from].value.inexact,
                                           False), np.zeros((), np.float32)))
        weights, actions = self._weights(slots, add_input)
        carried = bool(weights) and self.chance(0.5)
        carry_in = [*lane_in, *uniform, *(weights if carried else [])]
        carry = [dataclasses.replace(s.value, shape=(n, *s.value.shape)) for s in slots]
        carry += [inputs[i] for i in carry_in[len(slots):]]
        body, logs = self._body(slots, carry, n, max_steps, length, feedback_from,
                                rate is not None, carried, weights,
                                [inputs[i] for i in weights], actions)
        kind = "scan" if self.chance(0.7) else "fori"
        stacked = [dataclasses.replace(v, shape=(length, *v.shape)) for v in logs]
        loop = Step("time_loop", carry_in, {"kind": kind, "length": length}, carry[0], [body],
                    [*carry[1:], *stacked])
        first = len(inputs)
        n_lane = len(slots)
        outputs = [first + k for k in range(n_lane + 2)]  # lane state, key, step count
        outputs += [first + len(carry) + k for k in range(len(logs))]
        return Program(inputs, data, [loop], outputs)

    def _key_data(self) -> np.ndarray:
        return self.rng.integers(0, 2**32, 2, dtype=np.uint64).astype(np.uint32)

    def _initial_lane_state(self, slot: Slot, n: int, max_steps: int,
                            add_input: Callable[[Value, np.ndarray], int]) -> int:
        shape = (n, *slot.value.shape)
        value = Value(slot.value.dtype, shape)
        if slot.role == "counter":
            array = self.rng.integers(0, max_steps, shape).astype(np.int32)
        elif slot.role == "damped":
            array = self.rng.uniform(-1.0, 1.0, shape).astype(np.float32)
        elif slot.role == "key":
            array = self.rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
        else:  # exact: the ordinary generator's values, edge cases included
            array = random_array(self.rng, value)
        return add_input(value, np.asarray(array, np_dtype(value.dtype)))

    def _weights(self, slots: list[Slot], add_input: Callable[[Value, np.ndarray], int]
                 ) -> tuple[list[int], int]:
        """An MLP's layers (weight, bias; shared by the lanes), or none; and the actions."""
        actions = int(self.choice((1, 2, 3)))
        if not self.chance(0.6):
            return [], actions
        features = 1 + sum(int(np.prod(s.value.shape, dtype=np.int64)) for s in slots
                           if s.value.dtype == "float32" and s.role in ("damped", "exact"))
        sizes = [features, *[int(self.choice((4, 8, 16, 32, 64)))
                             for _ in range(int(self.rng.integers(1, 3)))], actions]
        out = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
            w = self.rng.uniform(-1.0, 1.0, (fan_in, fan_out)) * 0.5 / np.sqrt(fan_in)
            b = self.rng.uniform(-0.1, 0.1, fan_out)
            out.append(add_input(Value("float32", (fan_in, fan_out)), w.astype(np.float32)))
            out.append(add_input(Value("float32", (fan_out,)), b.astype(np.float32)))
        return out, actions

    # -- one step of the time loop --
    def _body(self, slots: list[Slot], carry: list[Value], n: int, max_steps: int,
              length: int, feedback_from: int | None, has_rate: bool, carried: bool,
              weights: list[int], weight_values: list[Value], actions: int
              ) -> tuple[Block, list[Value]]:
        n_lane = len(slots)
        captures = [] if carried else list(weights)
        env = Env([*carry, Value("int32", ())])
        t_index = len(carry)
        if not carried:
            env.values.extend(weight_values)
        steps: list[Step] = []
        key, count = n_lane, n_lane + 1
        position = n_lane + 2
        rate = feedback = None
        if has_rate:
            rate, position = position, position + 1
        if feedback_from is not None:
            feedback, position = position, position + 1
        weight_at = (list(range(position, position + len(weights))) if carried
                     else list(range(t_index + 1, t_index + 1 + len(captures))))

        def fold(data: int) -> int:
            return self.emit(env, steps, Step("random", [key], {
                "kind": "fold_in", "shape": (2,), "dtype": "uint32", "data": data},
                Value("uint32", (2,))))

        next_key = self.emit(env, steps, Step("random", [key], {
            "kind": "split", "shape": (2,), "dtype": "uint32"}, Value("uint32", (2,))))
        noise = self.emit(env, steps, Step("random", [fold(1)], {
            "kind": "normal", "shape": (n, actions), "dtype": "float32"},
            Value("float32", (n, actions), True, False)))
        fresh = {}
        for k, slot in enumerate(slots):
            if slot.reset:
                fresh[k] = self.emit(env, steps, Step("random", [fold(2 + k)], {
                    "kind": "uniform", "shape": (n, *slot.value.shape), "dtype": "float32"},
                    Value("float32", (n, *slot.value.shape))))
        lane_keys = None
        if self.chance(0.3):
            lane_keys = self.emit(env, steps, Step("random", [fold(99)], {
                "kind": "split_many", "count": n, "shape": (n, 2), "dtype": "uint32"},
                Value("uint32", (n, 2))))
        # A trip count the same for every lane, from the step counter.
        modulus = self.const(env, steps, int(self.rng.integers(2, 9)), "int32")
        base = self.const(env, steps, int(self.rng.integers(0, 4)), "int32")
        limit = self.binary(env, steps, "add", self.binary(env, steps, "rem", count, modulus),
                            base)
        per_lane = [*range(n_lane), noise, *fresh.values(),
                    *([lane_keys] if lane_keys is not None else [])]
        uniform_args = [limit, t_index, *([rate] if rate is not None else []),
                        *([feedback] if feedback is not None else [])]
        args = per_lane + uniform_args
        ins = [dataclasses.replace(env.values[i], shape=env.values[i].shape[1:])
               for i in per_lane] + [env.values[i] for i in uniform_args]
        lane = Lane(current=list(range(n_lane)), noise=n_lane,
                    fresh={k: n_lane + 1 + j for j, k in enumerate(fresh)},
                    limit=len(per_lane), weights=list(range(len(ins), len(ins) + len(weights))),
                    actions=actions,
                    budget=MAX_ITERATIONS // length)
        block, lane_outs = self._lane_code(slots, ins, [env.values[i] for i in weight_at],
                                           weight_at, lane, max_steps)
        outs = [dataclasses.replace(v, shape=(n, *v.shape)) for v in lane_outs]
        # A slot's new value carries the slot's flags (its outputs are never less exact).
        outs[:n_lane] = carry[:n_lane]
        mapped = self.emit(env, steps, Step("lane_map", args, {
            "in_axes": [0] * len(per_lane) + [None] * len(uniform_args)}, outs[0], [block],
            outs[1:]))
        new_lane = list(range(mapped, mapped + n_lane))
        reward, done = mapped + n_lane, mapped + n_lane + 1
        logs = self._logs(env, steps, slots, new_lane, reward, done, n)
        new_count = self.binary(env, steps, "add", count, self.const(env, steps, 1, "int32"))
        new_uniform = [next_key, new_count]
        if rate is not None:
            new_uniform.append(self.binary(env, steps, "mul", rate,
                                           self.const(env, steps, 0.99, "float32")))
        if feedback_from is not None:
            source = new_lane[feedback_from]
            axes = tuple(range(len(env.values[source].shape)))
            new_uniform.append(self.emit(env, steps, Step("reduce", [source], {
                "kind": "max", "axes": axes}, Value("float32", (), env.values[source].inexact,
                                                    False))))
        outputs = [*new_lane, *new_uniform, *(weight_at if carried else []), *logs]
        return Block(len(carry) + 1, captures, steps, outputs), [env.values[i] for i in logs]

    def _logs(self, env: Env, steps: list[Step], slots: list[Slot], new_lane: list[int],
              reward: int, done: int, n: int) -> list[int]:
        """Per-step values across the lanes: the summed reward, the finished episodes, and
        some of: the mean reward, a slot's maximum or minimum, the reward of every lane."""
        total = self.emit(env, steps, Step("reduce", [reward], {"kind": "sum", "axes": (0,)},
                                           Value("float32", (), True, False)))
        finished = self.emit(env, steps, Step("convert", [done], {"dtype": "int32"},
                                              Value("int32", (n,))))
        logs = [total, self.emit(env, steps, Step("reduce", [finished], {
            "kind": "sum", "axes": (0,)}, Value("int32", ())))]
        if self.chance(0.4):
            logs.append(self.binary(env, steps, "div", total,
                                    self.const(env, steps, float(n), "float32")))
        for k, slot in enumerate(slots):
            v = env.values[new_lane[k]]
            if slot.role in ("damped", "exact") and v.dtype != "bool" and self.chance(0.4):
                kind = self.choice(("max", "min"))
                logs.append(self.emit(env, steps, Step("reduce", [new_lane[k]], {
                    "kind": kind, "axes": (0,)}, Value(v.dtype, v.shape[1:], v.inexact,
                                                       False))))
        if self.chance(0.3):
            logs.append(reward)
        return logs

    # -- the code of one lane --
    def _lane_code(self, slots: list[Slot], ins: list[Value], weight_values: list[Value],
                   captures: list[int], lane: Lane, max_steps: int
                   ) -> tuple[Block, list[Value]]:
        env = Env([*ins, *weight_values])
        steps: list[Step] = []
        action = self._policy(env, steps, slots, lane)
        self._filler(env, steps, int(self.rng.integers(2, 7)), depth=1)
        for _ in range(int(self.rng.choice(3, p=[0.15, 0.5, 0.35]))):
            self._nested_loop(env, steps, slots, lane, action)
            self._filler(env, steps, int(self.rng.integers(0, 3)), depth=1)
        new = []
        for k, slot in enumerate(slots):
            new.append(self._updated(env, steps, slot, lane.current[k], action,
                                     looped=lane.current[k] != k))
        step_done = self.binary(env, steps, "add", new[0], self.const(env, steps, 1, "int32"))
        done = self.emit(env, steps, Step("compare", [step_done, self.const(
            env, steps, max_steps, "int32")], {"direction": "ge", "total": False},
            Value("bool", ())))
        flag = self._exact_of(env, "bool", (), after=len(ins))
        if flag is not None and self.chance(0.5):
            done = self.binary(env, steps, "or", done, flag)
        reward = self._reward(env, steps, slots, new)
        new[0] = self.emit(env, steps, Step("select", [done, self.const(env, steps, 0, "int32"),
                                                        step_done], {}, Value("int32", ())))
        for k, slot in enumerate(slots):
            if slot.reset:
                fresh = lane.fresh[k]
                scaled = self.binary(env, steps, "sub", self.binary(
                    env, steps, "mul", fresh, self.const(env, steps, 2.0, "float32")),
                    self.const(env, steps, 1.0, "float32"))
                v = env.values[new[k]]
                new[k] = self.emit(env, steps, Step("select", [done, scaled, new[k]], {},
                                                    dataclasses.replace(v, nan_bits=False)))
        outputs = [*new, reward, done]
        return Block(len(ins), captures, steps, outputs), [env.values[i] for i in outputs]

    def _filler(self, env: Env, steps: list[Step], count: int, depth: int) -> None:
        """Steps of the ordinary generator over what the lane code has computed so far."""
        for step in self.steps(env, count, depth):
            steps.append(step)

    def _features(self, env: Env, steps: list[Step], slots: list[Slot], lane: Lane
                  ) -> list[int]:
        """The lane's observation as vectors of bounded slope in the state: sin, cos, tanh
        or a clamp of each float slot, and the episode step scaled."""
        parts = []
        for k, slot in enumerate(slots):
            if slot.value.dtype != "float32" or slot.role not in ("damped", "exact"):
                continue
            x = lane.current[k]
            op = self.choice(("sin", "cos", "tanh", "clamp"))
            f = self.clamp(env, steps, x, 2.0) if op == "clamp" else self.unary(
                env, steps, op, x, True)
            size = int(np.prod(slot.value.shape, dtype=np.int64))
            parts.append(self._reshaped(env, steps, f, (size,)))
        step = self.emit(env, steps, Step("convert", [lane.current[0]], {"dtype": "float32"},
                                          Value("float32", ())))
        scaled = self.binary(env, steps, "mul", step, self.const(env, steps, 0.01, "float32"))
        parts.append(self._reshaped(env, steps, scaled, (1,)))
        return parts

    def _reshaped(self, env: Env, steps: list[Step], i: int, shape: tuple[int, ...]) -> int:
        v = env.values[i]
        if v.shape == shape:
            return i
        return self.emit(env, steps, Step("reshape", [i], {"shape": shape},
                                          dataclasses.replace(v, shape=shape)))

    def _policy(self, env: Env, steps: list[Step], slots: list[Slot], lane: Lane) -> int:
        """The lane's action: an MLP of its observation (or tanh of the observation's sum)
        plus Gaussian noise, clipped to [-1, 1]."""
        parts = self._features(env, steps, slots, lane)
        obs = parts[0] if len(parts) == 1 else self.emit(env, steps, Step(
            "concatenate", parts, {"axis": 0}, Value(
                "float32", (sum(env.values[p].shape[0] for p in parts),),
                any(env.values[p].inexact for p in parts), False)))
        if lane.weights:
            h = obs
            layers = list(zip(lane.weights[::2], lane.weights[1::2], strict=True))
            for k, (w, b) in enumerate(layers):
                out = env.values[w].shape[1]
                h = self.emit(env, steps, Step("dot", [h, w], {},
                                               Value("float32", (out,), True, False)))
                h = self.binary(env, steps, "add", h, b)
                if k < len(layers) - 1:
                    h = (self.unary(env, steps, "tanh", h, True) if self.chance(0.5) else
                         self.binary(env, steps, "max", h,
                                     self.const(env, steps, 0.0, "float32", (out,))))
            mean = h
        else:
            total = self.emit(env, steps, Step("reduce", [obs], {"kind": "sum", "axes": (0,)},
                                               Value("float32", (), True, False)))
            mean = self.emit(env, steps, Step("broadcast", [self.unary(
                env, steps, "tanh", total, True)], {"shape": (lane.actions,), "dims": ()},
                Value("float32", (lane.actions,), True, False)))
        spread = self.binary(env, steps, "mul", lane.noise,
                             self.const(env, steps, float(self.rng.uniform(0.1, 0.5)),
                                        "float32"))
        return self.clamp(env, steps, self.binary(env, steps, "add", mean, spread), 1.0)

    def _force(self, env: Env, steps: list[Step], x: int, action: int) -> int:
        """tanh(x) * c + one of the actions, broadcast to x's shape: slope at most |c| < 1."""
        v = env.values[x]
        actions = env.values[action].shape[0]
        j = int(self.rng.integers(0, actions))
        picked = self.emit(env, steps, Step("slice", [action], {
            "starts": (j,), "limits": (j + 1,), "strides": (1,)},
            dataclasses.replace(env.values[action], shape=(1,))))
        scalar = self._reshaped(env, steps, picked, ())
        if v.shape != ():
            scalar = self.emit(env, steps, Step("broadcast", [scalar], {
                "shape": v.shape, "dims": ()}, dataclasses.replace(env.values[scalar],
                                                                   shape=v.shape)))
        slope = self.binary(env, steps, "mul", self.unary(env, steps, "tanh", x, True),
                            self.const(env, steps, float(self.rng.uniform(-1, 1)), "float32"))
        return self.binary(env, steps, "add", slope, scalar)

    def _damped(self, env: Env, steps: list[Step], x: int, action: int) -> int:
        """clamp(decay * x + dt * force, -BOUND, BOUND): a contraction in x."""
        decay = self.const(env, steps, float(self.rng.uniform(0.5, 0.9)), "float32")
        dt = self.const(env, steps, float(self.rng.uniform(0.01, 0.08)), "float32")
        force = self._force(env, steps, x, action)
        moved = self.binary(env, steps, "add", self.binary(env, steps, "mul", x, decay),
                            self.binary(env, steps, "mul", force, dt))
        return self.clamp(env, steps, moved, BOUND)

    def _exact_of(self, env: Env, dtype: str, shape: tuple[int, ...], after: int
                  ) -> int | None:
        """A value computed exactly (at `after` or later) of this type, recent ones more
        often; None if there is none."""
        found = [i for i in range(after, len(env.values))
                 if env.values[i].dtype == dtype and env.values[i].shape == shape
                 and not env.values[i].inexact]
        return int(self.choice(found[-4:])) if found else None

    def _updated(self, env: Env, steps: list[Step], slot: Slot, x: int, action: int,
                 looped: bool) -> int:
        """The slot's value after this step (before the auto-reset); `looped`: `x` is a nested
        loop's result, which the new value then depends on (else JAX drops the loop as dead
        code, as it did for half of them before)."""
        v = slot.value
        if slot.role == "counter":
            return x
        if slot.role == "damped":
            return self._damped(env, steps, x, action)
        if slot.role == "key":
            return self.emit(env, steps, Step("random", [x], {
                "kind": "split", "shape": (2,), "dtype": "uint32"}, Value("uint32", (2,))))
        chosen = self._exact_of(env, v.dtype, v.shape, after=x + 1)
        if looped:
            if chosen is None:
                return x
            return self.binary(env, steps, "xor" if v.dtype == "bool" else "add", chosen, x)
        if chosen is not None and self.chance(0.8):
            return chosen
        if v.dtype == "bool":
            return self.binary(env, steps, "xor", x, self.const(env, steps, True, "bool"))
        return self.binary(env, steps, "add", x, self.const(env, steps, 1, v.dtype))

    def _reward(self, env: Env, steps: list[Step], slots: list[Slot], new: list[int]) -> int:
        floats = [new[k] for k, s in enumerate(slots) if s.value.dtype == "float32"
                  and s.role in ("damped", "exact")]
        scalars = [i for i in range(len(env.values)) if env.values[i].dtype == "float32"
                   and env.values[i].shape == ()]
        if scalars and (not floats or self.chance(0.3)):
            return int(self.choice(scalars[-4:]))
        x = int(self.choice(floats))
        square = self.binary(env, steps, "mul", x, x)
        v = env.values[square]
        if v.shape != ():
            square = self.emit(env, steps, Step("reduce", [square], {
                "kind": "sum", "axes": tuple(range(len(v.shape)))},
                Value("float32", (), True, False)))
        return self.unary(env, steps, "neg", square, False)

    # -- nested loops in lane code --
    def _nested_loop(self, env: Env, steps: list[Step], slots: list[Slot], lane: Lane,
                     action: int) -> None:
        kinds = ["fori_small", "fori_large", "while_uniform", "while_lane", "halving"]
        kind = str(self.choice(kinds))
        trips = {"fori_small": int(self.rng.integers(3, 9)),
                 "fori_large": int(self.rng.integers(20, 201)),
                 "while_uniform": int(self.rng.integers(2, 40)),
                 "while_lane": int(self.rng.integers(2, 30)), "halving": 32}[kind]
        if trips > lane.budget:
            return
        lane.budget -= trips
        # The carry: one or two slots (damped ones updated by contraction), maybe one more
        # exact value of the lane code.
        candidates = [k for k, s in enumerate(slots) if s.role in ("damped", "exact")]
        chosen = sorted({int(self.choice(candidates)) for _ in range(2)}) if candidates else []
        carry = [lane.current[k] for k in chosen]
        extra = [i for i in range(len(env.values)) if not env.values[i].inexact
                 and env.values[i].dtype in ("int32", "uint32", "float32")
                 and env.values[i].size <= 4 and i not in carry]
        if extra and (not carry or self.chance(0.5)):
            carry.append(int(self.choice(extra[-6:])))
        if not carry:
            return
        values = [env.values[i] for i in carry]
        counter: list[Value] = []
        head: list[int] = []
        if kind.startswith("fori"):
            counter = [Value("int32", ())]
        elif kind == "halving":
            # A lane value mixed into 32 bits: its bit length is the trip count.
            as_u32 = self.emit(env, steps, Step("convert", [lane.current[0]], {
                "dtype": "uint32"}, Value("uint32", ())))
            head = [self.binary(env, steps, "mul", as_u32, self.const(
                env, steps, int(self.rng.integers(1, 2**32)), "uint32"))]
        block = self._loop_body([*[env.values[i] for i in head], *values, *counter], len(head),
                                len(values), env, action)
        if kind.startswith("fori"):
            step = Step("fori", carry, {"trips": trips}, values[0], [block], values[1:])
        elif kind == "halving":
            step = Step("halving_while", [*head, *carry], {}, values[0], [block], values[1:])
        else:
            limit = lane.limit if kind == "while_uniform" else lane.current[0]
            step = Step("while", [*carry, limit], {"max_trips": trips}, values[0], [block],
                        values[1:])
        first = self.emit(env, steps, step)
        for position, i in enumerate(carry):
            if i in lane.current:
                lane.current[lane.current.index(i)] = first + position

    def _loop_body(self, ins: list[Value], n_head: int, n_carry: int, outer: Env,
                   action: int) -> Block:
        """A nested loop's body over (head, carry, counter): the ordinary generator's steps,
        each float carry that is approximated updated by contraction, the others by exact
        values only, so that its carry flags hold."""
        captures = sorted({action, *[j for j in (self.pick(outer) for _ in range(2))
                                     if j is not None]})
        env = Env([*ins, *[outer.values[c] for c in captures]])
        steps: list[Step] = []
        local_action = len(ins) + captures.index(action)
        self._filler(env, steps, int(self.rng.integers(1, 5)), depth=2)
        outputs = []
        for k in range(n_head, n_head + n_carry):
            v = ins[k]
            if v.inexact and is_float(v.dtype):
                outputs.append(self._damped(env, steps, k, local_action))
                continue
            chosen = self._exact_of(env, v.dtype, v.shape, after=len(ins))
            outputs.append(chosen if chosen is not None and self.chance(0.8) else k)
        if outputs == list(range(n_head, n_head + n_carry)):
            # A loop that changes nothing is dead code to JAX: the first carry moves.
            k, v = n_head, ins[n_head]
            outputs[0] = self.binary(env, steps, "xor" if v.dtype == "bool" else "add", k,
                                     self.const(env, steps, 1, v.dtype))
        return Block(len(ins), captures, steps, outputs)
