"""Compiled C programs kept in the cache: an executable's plan saved, and loaded with its shared
object (see `runtime.plan.ExecutablePlan`), so that compiling a program the cache holds runs no
pass and generates no code."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping

from hlofuse.runtime.lowering import Generated
from hlofuse.runtime.plan import ExecutablePlan, PlanError
from hlofuse.targets.c.build import (
    CExecutable,
    CompileOptions,
    object_key,
    runtime_library,
)
from hlofuse.targets.native.executable import SharedObjectExecutable
from hlofuse.toolchain.cache import Cache
from hlofuse.toolchain.compiler import load_library


def save_plan(key: str, executable: SharedObjectExecutable, facts: Mapping[str, object]) -> None:
    """Keep `executable`'s plan (with `facts`) in the cache under `key`, for `load_plan`. Best
    effort: a plan that cannot be written costs a compile next time, not this one."""
    plan = dataclasses.replace(executable.plan, facts=dict(facts))
    try:
        Cache.open().write_record(key, plan.to_bytes())
    except OSError:
        pass


def load_plan(key: str, regenerate: Callable[[], Generated],
              options: CompileOptions = CompileOptions()) -> SharedObjectExecutable | None:
    """The executable saved under `key` with its shared object loaded, or None when the cache
    does not hold both intact: no pass and no code generation run. `regenerate` gives the
    module's generated code when something asks for what the plan does not keep."""
    start = time.perf_counter()
    cache = Cache.open()
    data = cache.read_record(key)
    if data is None:
        return None
    try:
        plan = ExecutablePlan.from_bytes(data)
    except PlanError:
        return None
    path = cache.lookup(plan.object_key) if plan.object_key else None
    if path is None:
        return None
    runtime_library(options.flags)
    library = load_library(path)

    def regenerate_with_key() -> tuple[Generated, str]:
        generated = regenerate()
        return generated, object_key(generated, options.flags)

    return CExecutable.from_plan(plan, library, True, time.perf_counter() - start,
                                 regenerate_with_key)
