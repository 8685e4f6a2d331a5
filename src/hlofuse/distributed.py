"""Rollouts split across Ray actors: `rollout(build_or_compiled, n_envs, n_steps, workers=K)`.

The N environments are cut into shards along the batch dimension (`shards`, by default one per
worker; sizes differ by at most one). Each shard runs on a Ray actor that builds and compiles
its program itself, through hlofuse's compiled-program cache, so an actor that has seen the
program before (or shares the cache directory with one that has) loads it instead of compiling
it; only the small program description and the shard's input travel, and the outputs come back
through Ray's object store. Shards are handed to idle actors as they finish (a slow actor takes
fewer), and the results are gathered in shard order.

What runs on a shard:

- a builder `build(n_envs, n_steps) -> fn`, where `fn(x)` is a function `hlofuse.jit` can trace
  (e.g. `functools.partial(cartpole.scan_rollout, variant)`); `x` is the shard's key,
  `random.fold_in(random.key(seed), shard_index)`, or, when `inputs` is given, the shard's
  slice of `inputs` along axis 0 (per-environment initial states);
- or a `Compiled` program (from `compile_module`), whose batch is then the shard size: it is
  sent as HLO text and strategy and compiled (or loaded from the cache) on the actor.

Results depend only on the seed (or inputs), N, T and the shards, never on the number of
workers, their scheduling or failures: `rollout_local` runs the same shards in this process and
gives the same arrays bit for bit. With per-environment `inputs` and a program that treats
environments independently (the deterministic CartPole), the concatenated shards equal one
unsharded run.

Failure: when an actor dies (process killed, node lost), its shard is run again on another
actor (a new one is started when none is left), up to `max_retries` times per shard; after that
`rollout` raises `DistributedError` naming the shard. An error raised by the program itself is
not retried. No result is ever returned with a shard missing.

Ray is an optional extra (`pip install 'hlofuse[distributed]'`), imported on first use.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hlofuse import random
from hlofuse.api import DEFAULT_STRATEGY, Compiled, check_strategy, compile_module, jit
from hlofuse.frontend import pytree
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import module_text

RAY_EXTRA = "pip install 'hlofuse[distributed]'"
DEFAULT_MAX_RETRIES = 2


class DistributedError(RuntimeError):
    """A shard could not be run (its actor died too often, or the program failed)."""


class RayNotInstalledError(ImportError):
    """hlofuse.distributed was used where Ray cannot be imported."""


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise RayNotInstalledError(
            f"hlofuse.distributed needs Ray, which is not installed ({e}); install the "
            f"'distributed' extra: {RAY_EXTRA}") from None
    return ray


# --- what a shard runs ------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardTask:
    """Everything an actor needs to run one shard (picklable; no compiled code inside)."""

    index: int
    n_envs: int
    n_steps: int
    strategy: str
    argument: np.ndarray  # the shard's key, or its slice of the inputs
    build: Callable[[int, int], Callable[..., Any]] | None = None
    hlo: str | None = None  # a Compiled program's module, when no builder is given
    build_id: str | None = None  # the builder's pickled bytes, hashed: the same on every call
    crash: bool = False  # test hook: the actor's process exits instead of running


@dataclass(frozen=True)
class ShardResult:
    index: int
    outputs: Any  # the program's output pytree, NumPy arrays
    compile_s: float  # trace + compile, or load from the cache
    run_s: float
    cache_hit: bool  # the compiled program came from the on-disk cache
    worker_pid: int


class ShardWorker:
    """Runs shards; one per Ray actor (or in-process for `rollout_local`). Programs it compiled
    are kept, so the same shard size is compiled (or loaded) once per worker."""

    def __init__(self) -> None:
        self._programs: dict[Any, Compiled] = {}

    def _program(self, task: ShardTask) -> tuple[Compiled, bool]:
        if task.hlo is not None:
            key: Any = ("hlo", task.hlo, task.strategy)
        else:
            key = ("build", task.build_id or id(task.build), task.n_envs, task.n_steps,
                   task.strategy, task.argument.shape, task.argument.dtype.str)
        found = self._programs.get(key)
        if found is not None:
            return found, True
        if task.hlo is not None:
            compiled = compile_module(parse_module(task.hlo), task.strategy, "cpu")
        else:
            assert task.build is not None
            fn = task.build(task.n_envs, task.n_steps)
            compiled = jit(fn, strategy=task.strategy, backend="cpu").lower(
                task.argument).compile()
        self._programs[key] = compiled
        hit = compiled.executable is not None and compiled.executable.cache_hit
        return compiled, hit

    def run(self, task: ShardTask) -> ShardResult:
        if task.crash:
            os._exit(17)  # a dying process, as when a node is lost
        start = time.perf_counter()
        compiled, hit = self._program(task)
        compiled_at = time.perf_counter()
        if compiled.signature is not None:
            outputs = compiled(task.argument)
        else:
            outputs = compiled.run_flat([task.argument])
            outputs = tuple(outputs) if compiled.module.result_shape.is_tuple else outputs[0]
        done = time.perf_counter()
        return ShardResult(task.index, outputs, compiled_at - start, done - compiled_at, hit,
                           os.getpid())


# --- shards -----------------------------------------------------------------------------------


def shard_sizes(n_envs: int, shards: int) -> list[int]:
    """N cut into `shards` contiguous pieces whose sizes differ by at most one."""
    if not isinstance(n_envs, int) or n_envs < 1:
        raise ValueError(f"n_envs must be a positive integer, got {n_envs!r}")
    if not isinstance(shards, int) or not 1 <= shards <= n_envs:
        raise ValueError(f"shards must be an integer from 1 to n_envs ({n_envs}), got "
                         f"{shards!r}")
    base, extra = divmod(n_envs, shards)
    return [base + (1 if i < extra else 0) for i in range(shards)]


def shard_key(seed: int, index: int) -> np.ndarray:
    """The key of shard `index`: fold_in(key(seed), index), as jax.random computes it."""
    return np.asarray(random.fold_in(random.key(seed), index), np.uint32)


@dataclass
class ShardedRollout:
    """The shards' outputs in shard order, and how each ran."""

    shard_envs: list[int]
    shards: list[Any]
    results: list[ShardResult] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def n_envs(self) -> int:
        return sum(self.shard_envs)

    def concatenated(self) -> Any:
        """One output pytree: leaves whose first axis is the shard's environments are joined
        along it; every other leaf (a count, a sum) is stacked, one row per shard."""
        flat = [pytree.flatten(s) for s in self.shards]
        tree = flat[0][1]
        joined = []
        for position in range(tree.num_leaves):
            leaves = [np.asarray(f[0][position]) for f in flat]
            per_env = all(leaf.ndim >= 1 and leaf.shape[0] == n
                          for leaf, n in zip(leaves, self.shard_envs))
            joined.append(np.concatenate(leaves) if per_env else np.stack(leaves))
        return tree.unflatten(joined)


def _builder_id(build: Callable[..., Any]) -> str | None:
    """A digest of the pickled builder: a worker receives a new copy of it with every rollout
    and recognises the program it already compiled by this."""
    try:
        data = pickle.dumps(build)
    except Exception:  # noqa: BLE001 - lambdas and closures: Ray's cloudpickle sends them
        try:
            from ray import cloudpickle
        except ImportError:
            return None
        dumps: Callable[[Any], bytes] = cloudpickle.dumps
        try:
            data = dumps(build)
        except Exception:  # noqa: BLE001
            return None
    return hashlib.sha256(data).hexdigest()


def _tasks(program: Any, n_envs: int, n_steps: int, shards: int, seed: int,
           inputs: np.ndarray | None, strategy: str) -> tuple[list[int], list[ShardTask]]:
    sizes = shard_sizes(n_envs, shards)
    if not isinstance(n_steps, int) or n_steps < 0:
        raise ValueError(f"n_steps must be a non-negative integer, got {n_steps!r}")
    build: Callable[[int, int], Callable[..., Any]] | None = None
    hlo: str | None = None
    build_id: str | None = None
    if isinstance(program, Compiled):
        if len(set(sizes)) != 1:
            raise ValueError(f"a compiled program has one batch size: n_envs ({n_envs}) must "
                             f"be a multiple of shards ({shards})")
        hlo, strategy = module_text(program.module), program.strategy
    elif callable(program):
        build = program
        build_id = _builder_id(program)
    else:
        raise TypeError("rollout needs a builder build(n_envs, n_steps) -> function, or a "
                        f"Compiled program; got {type(program).__name__}")
    if inputs is not None:
        inputs = np.asarray(inputs)
        if inputs.ndim < 1 or inputs.shape[0] != n_envs:
            raise ValueError(f"inputs must have n_envs ({n_envs}) rows along axis 0, got shape "
                             f"{inputs.shape}")
    tasks = []
    start = 0
    for index, size in enumerate(sizes):
        argument = (shard_key(seed, index) if inputs is None
                    else np.ascontiguousarray(inputs[start:start + size]))
        tasks.append(ShardTask(index, size, n_steps, strategy, argument, build, hlo, build_id))
        start += size
    return sizes, tasks


def rollout_local(program: Any, n_envs: int, n_steps: int, *, shards: int = 1, seed: int = 0,
                  inputs: np.ndarray | None = None,
                  strategy: str = DEFAULT_STRATEGY) -> ShardedRollout:
    """The same shards as `rollout`, run one after another in this process (no Ray)."""
    sizes, tasks = _tasks(program, n_envs, n_steps, shards, seed, inputs,
                          check_strategy(strategy))
    worker = ShardWorker()
    start = time.perf_counter()
    results = [worker.run(task) for task in tasks]
    return ShardedRollout(sizes, [r.outputs for r in results], results,
                          time.perf_counter() - start)


# --- Ray --------------------------------------------------------------------------------------


def connect(address: str | None = None, num_cpus: int | None = None) -> None:
    """Join a Ray cluster: "local" or "local:K" starts one on this machine (K CPUs), anything
    else is a cluster address (e.g. "auto", or "ray://head:10001"); None keeps a connection
    already made, else starts a local one. Calling it again once connected does nothing."""
    ray = _ray()
    if ray.is_initialized():
        return
    if address is None or address == "local" or address.startswith("local:"):
        if address is not None and address != "local":
            num_cpus = workers_for(address)
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    else:
        ray.init(address=address, log_to_driver=False, configure_logging=False)


def workers_for(address: str) -> int:
    """The workers a study uses on `address`: K of "local:K", this machine's CPUs for "local",
    the cluster's CPUs for an address (connecting to it)."""
    if address.startswith("local:"):
        count = address.split(":", 1)[1]
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"local:K needs a positive number K, got {address!r}")
        return int(count)
    if address == "local":
        return os.cpu_count() or 1
    connect(address)
    return max(1, int(_ray().cluster_resources().get("CPU", 1)))


class _Pool:
    """Ray actors running ShardWorker, kept between rollouts (their compiled programs with them)
    and replaced when they die."""

    def __init__(self, ray: Any, threads: int | None) -> None:
        self.ray = ray
        self.threads = threads
        options: dict[str, Any] = {"num_cpus": 1, "max_restarts": 0, "max_task_retries": 0}
        if threads is not None:
            options["runtime_env"] = {"env_vars": {"OMP_NUM_THREADS": str(threads)}}
        self.actor_class = ray.remote(ShardWorker).options(**options)
        self.actors: list[Any] = []

    def grow(self, count: int) -> None:
        while len(self.actors) < count:
            self.actors.append(self.actor_class.remote())

    def remove(self, actor: Any) -> None:
        self.actors = [a for a in self.actors if a is not actor]
        self.ray.kill(actor, no_restart=True)

    def shutdown(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)
        self.actors = []


# One pool at a time: each actor holds a CPU of the cluster, so a second pool could wait
# forever for CPUs the first one holds.
_POOL: list[_Pool] = []


def shutdown() -> None:
    """Stop the actors kept between rollouts (the Ray connection stays)."""
    for pool in _POOL:
        pool.shutdown()
    _POOL.clear()


def _pool(ray: Any, threads: int | None) -> _Pool:
    if _POOL and _POOL[0].threads != threads:
        shutdown()
    if not _POOL:
        _POOL.append(_Pool(ray, threads))
    return _POOL[0]


def rollout(program: Any, n_envs: int, n_steps: int, workers: int = 2, *,
            shards: int | None = None, seed: int = 0, inputs: np.ndarray | None = None,
            strategy: str = DEFAULT_STRATEGY, address: str | None = None,
            max_retries: int = DEFAULT_MAX_RETRIES, threads_per_worker: int | None = None,
            _crash_first_attempt: frozenset[int] = frozenset()) -> ShardedRollout:
    """Run N environments for T steps as `shards` shards (default: `workers`) on `workers`
    Ray actors; see the module's docstring. `threads_per_worker` sets OMP_NUM_THREADS in the
    actors (Ray's default for a 1-CPU actor is 1)."""
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    sizes, tasks = _tasks(program, n_envs, n_steps, shards if shards is not None else workers,
                          seed, inputs, check_strategy(strategy))
    ray = _ray()
    connect(address, num_cpus=workers)
    cpus = ray.cluster_resources().get("CPU", 0)
    if workers > cpus:
        # Each actor holds one CPU: more actors than CPUs would wait for ever.
        raise ValueError(f"{workers} workers need {workers} CPUs; the Ray cluster has {cpus:g}")
    pool = _pool(ray, threads_per_worker)
    pool.grow(min(workers, len(tasks)))
    idle = pool.actors[:min(workers, len(tasks))]
    attempts = [0] * len(tasks)
    results: dict[int, ShardResult] = {}
    queue = list(range(len(tasks)))
    running: dict[Any, tuple[int, Any]] = {}  # future -> (shard, actor)
    start = time.perf_counter()
    try:
        while queue or running:
            while queue and idle:
                index = queue.pop(0)
                actor = idle.pop(0)
                task = tasks[index]
                if index in _crash_first_attempt and attempts[index] == 0:
                    task = dataclasses.replace(task, crash=True)
                attempts[index] += 1
                running[actor.run.remote(task)] = (index, actor)
            ready, _ = ray.wait(list(running), num_returns=1)
            for future in ready:
                index, actor = running.pop(future)
                try:
                    results[index] = ray.get(future)
                except ray.exceptions.RayActorError as e:
                    pool.remove(actor)
                    if attempts[index] > max_retries:
                        raise DistributedError(
                            f"shard {index} ({sizes[index]} environments) failed: its actor "
                            f"died {attempts[index]} times (last: {type(e).__name__})") from e
                    queue.insert(0, index)  # again, on another actor
                    pool.grow(len(pool.actors) + 1)
                    idle.append(pool.actors[-1])
                    continue
                except ray.exceptions.RayTaskError as e:
                    raise DistributedError(f"shard {index} ({sizes[index]} environments) "
                                           f"failed: {e.cause!r}") from e
                idle.append(actor)
    except BaseException:
        # Shards still running belong to no result: their actors are not reused.
        for _, actor in running.values():
            pool.remove(actor)
        raise
    ordered = [results[i] for i in range(len(tasks))]
    assert [r.index for r in ordered] == list(range(len(tasks)))
    return ShardedRollout(sizes, [r.outputs for r in ordered], ordered,
                          time.perf_counter() - start)
