"""What the fuzzer records of each compile besides its answer: the seconds it took (a program
compiled past COMPILE_BUDGET_S is reported, and one that never finishes is a hang of its
worker), and under `max` whether the program's time loop became one kernel or which rule of
whole-loop fusion refused it.

Compile time is counted in CPU seconds, the compiling process's and the C compiler's (a child
it waits for): a loaded machine (fuzzing beside other work, tests on every core) stretches wall
time, not the work. It bounds from above the wall time of the compile on an idle machine (where
a module's two translation units compile at once, both count in full)."""

from __future__ import annotations

import resource
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# Seconds a cold compile (passes, code generation, C compiler) under a budgeted strategy may
# take (issue 32: `max`, at most 10 s for every program); the others' times are only recorded.
COMPILE_BUDGET_S = 10.0
BUDGETED = ("max",)
ONE_KERNEL = "one kernel"


def cpu_seconds() -> float:
    """CPU time of this process and of the children it has waited for (the C compiler)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def prepare_machine(strategy: str) -> None:
    """What a first compile does once per machine, not per program, done before timing one:
    the runtime library, and the cost model's measured constants when `strategy` uses them."""
    from hlofuse.compile_cache import strategy_constants
    from hlofuse.targets.c import CompileOptions, runtime_library

    runtime_library(CompileOptions().flags)
    strategy_constants(strategy)


def time_loop_verdict(compiled: Any) -> str:
    """Whole-loop fusion's decision on the loops of the entry computation (a rollout's time
    loop): ONE_KERNEL, the refusal rules, or "no loop"."""
    from hlofuse.passes.decision_log import Verdict

    entry = compiled.module.entry.name
    verdicts = {ONE_KERNEL if r.verdict == Verdict.FUSE else r.rule
                for r in compiled.fusion.decisions
                if r.pass_name == "whole-loop-fusion" and r.computation == entry}
    return ", ".join(sorted(verdicts)) or "no loop"


@dataclass
class CompileTally:
    """Compile seconds per target, compiles over the budget, and the time-loop verdicts."""

    seconds: dict[str, list[float]] = field(default_factory=dict)
    over_budget: list[dict[str, Any]] = field(default_factory=list)
    time_loop: Counter[str] = field(default_factory=Counter)
    last_verdict: str = ""  # of the last program

    def record(self, seed: int, target: str, facts: dict[str, Any]) -> str | None:
        """Adds one compile's facts; a line to report when it went over the budget."""
        if "time_loop" in facts:
            self.time_loop[facts["time_loop"]] += 1
            self.last_verdict = facts["time_loop"]
        seconds = facts.get("compile_s")
        if seconds is None or facts.get("cache_hit"):
            return None
        self.seconds.setdefault(target, []).append(seconds)
        if seconds <= COMPILE_BUDGET_S or target not in BUDGETED:
            return None
        self.over_budget.append({"seed": seed, "target": target, "seconds": round(seconds, 1)})
        return (f"seed {seed}: {target} compiled in {seconds:.1f} s, over the "
                f"{COMPILE_BUDGET_S:.0f} s budget")

    def summary(self) -> str:
        rows = [f"cold compile (s): {t} median {statistics.median(s):.1f}, max {max(s):.1f}"
                for t, s in self.seconds.items() if s]
        rows += [f"over the {COMPILE_BUDGET_S:.0f} s budget ({', '.join(BUDGETED)}): "
                 f"{len(self.over_budget)}"]
        if self.time_loop:
            rows.append("time loop under max: " + ", ".join(
                f"{verdict} {count}" for verdict, count in self.time_loop.most_common()))
        return "\n".join(rows)

    def to_json(self) -> dict[str, Any]:
        return {"compile_seconds": {t: {"median": round(statistics.median(s), 2),
                                        "max": round(max(s), 2), "n": len(s)}
                                    for t, s in self.seconds.items() if s},
                "compile_budget_s": COMPILE_BUDGET_S, "over_budget": self.over_budget,
                "time_loop_under_max": dict(self.time_loop)}
