"""Differential fuzzing: random JAX programs, JAX's outputs as the oracle, hlofuse's
interpreter and every named strategy on the compiled backend compared with them.

Each program runs in a worker process (so a crash in generated code or a hang costs the
worker, not the run); a failing program is shrunk to a minimal reproducer and saved under
`tests/fuzz/corpus/` as HLO text, inputs and JAX's outputs.

Comparison rules (per output, from what the program's operations define):

- integers and pred: exact;
- floats produced only by operations IEEE defines to the bit (add, subtract, multiply,
  divide, remainder, sqrt, rounding, conversions, max/min, comparisons, every data
  movement; f16/bf16 arithmetic is computed in f32 and rounded, which is exact too): bit
  for bit, except that NaN equals NaN;
- floats that went through a transcendental function, a float sum/product reduction or a
  float dot ("inexact": XLA's approximations, XLA's summation order): |a - b| <= rtol * |b|
  + rtol * scale, rtol = 2e-5 (f32), 1e-9 (f64), 4e-3 (f16), 3e-2 (bf16), scale the largest
  finite magnitude in that output (cancellation after an approximate value), or both below
  the type's smallest normal in magnitude (f32, bf16, f64: XLA's approximations return a tiny
  argument unchanged, so sin, tanh, expm1 or atan2(y, 1) of a denormal is that denormal,
  where hlofuse computes them from the zero DAZ reads; seed 5928); NaN and infinity
  positions must agree;
- NaN sign and payload only where the operations define them (inputs, constants, moves,
  negate, abs, select, float-to-float convert): there the bits must agree.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import re
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from tests.fuzz.compile_facts import CompileTally, cpu_seconds, prepare_machine, time_loop_verdict
from tests.fuzz.program import (
    FLUSHED_TINY,
    Generator,
    Program,
    Step,
    Value,
    is_float,
    np_dtype,
)
from tests.fuzz.rollout import RolloutGenerator

# Program generators by mode: the ordinary one (any operation, every element type) and the
# rollout-shaped one (a time loop over lanes, nested loops, MLPs; tests/fuzz/rollout.py).
MODES: dict[str, Callable[[int, Callable[[Step, Sequence[Value]], bool]], Generator]] = {
    "ops": lambda seed, check: Generator(seed, check=check),
    "rollout": lambda seed, check: RolloutGenerator(seed, check=check),
}
# The targets of a rollout campaign: the reference interpreter and the named strategies
# `hlofuse bench rollouts` compares (C backend).
ROLLOUT_TARGETS = ("interpreter", "none", "xla", "priority", "max")

STRATEGIES = ("none", "xla", "priority", "max", "xla+relax_concatenate", "xla-gpu")
TARGETS = ("interpreter", *STRATEGIES)
CATEGORIES = ("equal", "wrong", "crash", "hang", "unsupported", "refused")
CORPUS_DIR = Path(__file__).parent / "corpus"
README = Path(__file__).parents[2] / "README.md"
UNSUPPORTED_MARKER = "<!-- unsupported-opcodes -->"
RTOL = {"float32": 2e-5, "float64": 1e-9, "float16": 4e-3, "bfloat16": 3e-2}
TARGET_TIMEOUT_S = 180.0


def unsupported_opcodes(readme: Path = README) -> frozenset[str]:
    """The opcodes the README lists as not supported: the line after its marker."""
    lines = readme.read_text().splitlines()
    for k, line in enumerate(lines):
        if UNSUPPORTED_MARKER in line and k + 1 < len(lines):
            return frozenset(re.findall(r"`([a-z][a-z0-9-]*)`", lines[k + 1]))
    return frozenset()


# --- comparison ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    dtype: str
    shape: tuple[int, ...]
    inexact: bool
    nan_bits: bool

    @staticmethod
    def of(v: Value) -> Rule:
        return Rule(v.dtype, v.shape, v.inexact, v.nan_bits)

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": list(self.shape), "inexact": self.inexact,
                "nan_bits": self.nan_bits}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Rule:
        return Rule(d["dtype"], tuple(d["shape"]), d["inexact"], d["nan_bits"])


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def compare_output(got: np.ndarray, want: np.ndarray, rule: Rule) -> str | None:
    """None when `got` matches `want` under `rule`, else what differs (first element)."""
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/type {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if got.size == 0:
        return None
    if not is_float(rule.dtype):
        bad = got != want
        return _first(bad, got, want) if bad.any() else None
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    gnan, wnan = np.isnan(g64), np.isnan(w64)
    if rule.inexact:
        with np.errstate(invalid="ignore", over="ignore"):
            finite = np.isfinite(w64)
            scale = float(np.max(np.abs(w64[finite]), initial=0.0))
            rtol = RTOL[rule.dtype]
            close = np.abs(g64 - w64) <= rtol * np.abs(w64) + rtol * scale
            if rule.dtype in FLUSHED_TINY:
                tiny = FLUSHED_TINY[rule.dtype]
                close |= (np.abs(g64) < tiny) & (np.abs(w64) < tiny)
        same_special = (gnan == wnan) & (np.isinf(g64) == np.isinf(w64))
        same_special &= ~np.isinf(w64) | (g64 == w64)
        bad = ~(same_special & (close | ~finite))
        return _first(bad, got, want) if bad.any() else None
    bad = (_bits(got) != _bits(want)) & ~(gnan & wnan)
    if rule.nan_bits:
        bad |= gnan & wnan & (_bits(got) != _bits(want))
    bad |= gnan != wnan
    return _first(bad, got, want) if bad.any() else None


def _first(bad: np.ndarray, got: np.ndarray, want: np.ndarray) -> str:
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    g, w = got[index], want[index]
    extra = ""
    if is_float(got.dtype.name):
        extra = f" (bits {int(_bits(np.asarray(g))):#x} vs {int(_bits(np.asarray(w))):#x})"
    return f"{int(bad.sum())} of {bad.size} differ; at {list(index)}: {g!r}, expected {w!r}{extra}"


def compare(outputs: Sequence[np.ndarray], expected: Sequence[np.ndarray],
            rules: Sequence[Rule]) -> str | None:
    if len(outputs) != len(expected):
        return f"{len(outputs)} outputs, expected {len(expected)}"
    for k, (g, w, r) in enumerate(zip(outputs, expected, rules, strict=True)):
        problem = compare_output(g, w, r)
        if problem is not None:
            return f"out{k} ({r.dtype}{list(r.shape)}): {problem}"
    return None


# --- running one target -------------------------------------------------------------------


def run_target(text: str, inputs: Sequence[np.ndarray], target: str,
               facts: dict[str, Any] | None = None) -> tuple[str, Any]:
    """("ok", outputs) | ("refused", message) | ("crash", message): hlofuse on one program.
    `facts`, when given, receives the compile's seconds and, under `max`, the time loop's
    verdict (compile_facts.py)."""
    from hlofuse.ir.parser import HloParseError, parse_module
    from hlofuse.ir.verifier import HloVerifyError, verify
    from hlofuse.reference.interpreter import InterpreterError, evaluate, flatten_value
    from hlofuse.runtime.target import CodegenError

    try:
        module = parse_module(text)
        verify(module)
        if target == "interpreter":
            outputs = flatten_value(evaluate(module, list(inputs)))
        else:
            from hlofuse.api import compile_module

            if facts is not None:
                prepare_machine(target)
            start, wall = cpu_seconds(), time.perf_counter()
            compiled = compile_module(module, target, "cpu")
            if facts is not None:
                facts["compile_s"] = cpu_seconds() - start
                facts["compile_wall_s"] = time.perf_counter() - wall
                facts["cache_hit"] = bool(getattr(compiled.executable, "cache_hit", False))
                if target == "max":
                    facts["time_loop"] = time_loop_verdict(compiled)
            outputs = compiled.run_flat(list(inputs))
        return "ok", [np.asarray(o) for o in outputs]
    except (HloParseError, HloVerifyError, CodegenError) as e:
        return "refused", f"{type(e).__name__}: {e}"
    except InterpreterError as e:
        if "cannot evaluate" in str(e):
            return "refused", f"{type(e).__name__}: {e}"
        return "crash", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
    except Exception as e:  # noqa: BLE001 - anything else is a crash of hlofuse
        return "crash", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"


def _handle(request: tuple[Any, ...]) -> tuple[Any, ...]:
    kind = request[0]
    if kind == "target":
        _, text, inputs, target = request
        facts: dict[str, Any] = {}
        return (*run_target(text, inputs, target, facts), facts)
    from tests.fuzz.jax_build import every_value, oracle

    try:
        return "ok", (oracle(request[1]) if kind == "oracle" else every_value(request[1]))
    except Exception as e:  # noqa: BLE001 - JAX refusing the program
        return "error", f"{type(e).__name__}: {e}"


def _worker_main(connection: Connection) -> None:
    while True:
        try:
            request = connection.recv()
        except EOFError:
            return
        if request is None:
            return
        connection.send(_handle(request))


class Worker:
    """A process running hlofuse on a program, or JAX (the oracle: XLA itself can crash, with
    SIGFPE, on some programs); replaced when it dies (a crash) or overruns (a hang)."""

    def __init__(self, timeout_s: float = TARGET_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self.context = multiprocessing.get_context("spawn")
        self.process: Any = None
        self.connection: Connection | None = None
        self.facts: dict[str, Any] = {}  # of the last target run

    def _start(self) -> None:
        parent, child = self.context.Pipe()
        self.process = self.context.Process(target=_worker_main, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.connection = parent

    def call(self, request: tuple[Any, ...]) -> tuple[str, Any]:
        if self.process is None or not self.process.is_alive():
            self._start()
        assert self.connection is not None
        try:
            self.connection.send(request)
            if not self.connection.poll(self.timeout_s):
                self.stop()
                return "hang", f"no answer within {self.timeout_s:.0f} s"
            return self.connection.recv()  # type: ignore[no-any-return]
        except (EOFError, BrokenPipeError, ConnectionResetError):
            code = None
            if self.process is not None:
                self.process.join(timeout=10)  # the exit code is known once it is reaped
                code = self.process.exitcode
            self.stop()
            return "crash", f"the worker process died (exit code {code})"

    def run(self, text: str, inputs: Sequence[np.ndarray], target: str) -> tuple[str, Any]:
        """The target's result; `facts` holds what was recorded of the compile."""
        result = self.call(("target", text, list(inputs), target))
        self.facts = result[2] if len(result) > 2 else {}
        return result[0], result[1]

    def stop(self) -> None:
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(timeout=10)
        self.process = None
        self.connection = None


# --- cases --------------------------------------------------------------------------------


@dataclass
class Case:
    seed: int
    program: Program | None
    text: str
    inputs: list[np.ndarray]
    expected: list[np.ndarray]
    rules: list[Rule]


class OracleFailure(RuntimeError):
    """JAX refused the program, or XLA crashed or hung compiling it."""


def run_oracle(program: Program, oracle_worker: Worker | None, kind: str = "oracle") -> Any:
    """JAX's (HLO text, outputs) of `program` ("values": every top-level value), in
    `oracle_worker`'s process when given."""
    if oracle_worker is None:
        status, payload = _handle((kind, program))
    else:
        status, payload = oracle_worker.call((kind, program))
    if status != "ok":
        raise OracleFailure(f"{status}: {str(payload)[:300]}")
    return payload


def make_case(seed: int, oracle_worker: Worker | None = None, mode: str = "ops") -> Case:
    """The program of `seed` in `mode` (MODES) with JAX's outputs."""
    from tests.fuzz.jax_build import check_step

    generator = MODES[mode](seed, check_step)
    program = generator.program()
    text, outputs = run_oracle(program, oracle_worker)
    values = program.values()
    rules = [Rule.of(values[i]) for i in program.outputs]
    return Case(seed, program, text, [np.asarray(x) for x in program.input_data], outputs,
                rules)


def classify(result: tuple[str, Any], case: Case, unsupported: frozenset[str]
             ) -> tuple[str, str]:
    status, payload = result
    if status == "ok":
        problem = compare(payload, case.expected, case.rules)
        return ("equal", "") if problem is None else ("wrong", problem)
    if status == "refused":
        named = [op for op in unsupported if re.search(rf"\b{re.escape(op)}\b", payload)]
        return ("unsupported", payload) if named else ("refused", payload)
    return status, payload


@dataclass
class Tally:
    programs: int = 0
    counts: dict[str, Counter[str]] = field(default_factory=lambda: {t: Counter()
                                                                     for t in TARGETS})
    unsupported_ops: Counter[str] = field(default_factory=Counter)
    failures: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0
    compiles: CompileTally = field(default_factory=CompileTally)

    def table(self) -> str:
        head = f"{'target':<24}" + "".join(f"{c:>12}" for c in CATEGORIES)
        rows = [head]
        for t in TARGETS:
            if sum(self.counts[t].values()):  # the targets this campaign ran
                rows.append(f"{t:<24}" + "".join(f"{self.counts[t][c]:>12}"
                                                 for c in CATEGORIES))
        return "\n".join(rows)

    def to_json(self) -> dict[str, Any]:
        return {"programs": self.programs, "skipped_by_jax": self.skipped,
                "per_target": {t: dict(self.counts[t]) for t in TARGETS},
                "unsupported_opcodes": dict(self.unsupported_ops),
                "failures": self.failures, **self.compiles.to_json()}


def run_case(case: Case, worker: Worker, targets: Iterable[str],
             unsupported: frozenset[str], compiles: CompileTally | None = None,
             log: Callable[[str], None] = print) -> dict[str, tuple[str, str]]:
    """Each target's category and message; its compile facts go to `compiles`, and a
    compile over the budget is logged."""
    results = {}
    if compiles is not None:
        compiles.last_verdict = "not recorded"  # this program's, once max has compiled it
    for t in targets:
        results[t] = classify(worker.run(case.text, case.inputs, t), case, unsupported)
        if compiles is not None:
            line = compiles.record(case.seed, t, worker.facts)
            if line is not None:
                log(line)
    return results


# --- shrinking ----------------------------------------------------------------------------


def cut(program: Program, values: list[np.ndarray], at: set[int],
        outputs: list[int] | None = None) -> Program:
    """`program` with the values `at` made inputs (holding what JAX computed for them) and
    with everything the outputs no longer need removed."""
    outputs = list(program.outputs if outputs is None else outputs)
    all_values = program.values()
    producers: list[tuple[Step, int]] = []
    index = len(program.inputs)
    for step in program.steps:
        producers.append((step, index))
        index += 1 + len(step.extra_outs)
    by_value = {start + k: (s, start) for s, start in producers
                for k in range(1 + len(s.extra_outs))}
    # Liveness with the cut values as leaves.
    live: set[int] = set()
    stack = list(outputs)
    while stack:
        v = stack.pop()
        if v in live:
            continue
        live.add(v)
        if v in at or v not in by_value:
            continue
        s, start = by_value[v]
        stack.extend(s.args)
        stack.extend(c for b in s.blocks for c in b.captures)
        stack.extend(start + k for k in range(1 + len(s.extra_outs)))
    new_inputs: list[Value] = []
    new_data: list[np.ndarray] = []
    mapping: dict[int, int] = {}
    for i, value in enumerate(program.inputs):
        if i in live:
            mapping[i] = len(new_inputs)
            new_inputs.append(value)
            new_data.append(program.input_data[i])
    for v in sorted(at & live):
        if v >= len(program.inputs):
            mapping[v] = len(new_inputs)
            new_inputs.append(dataclasses.replace(all_values[v]))
            new_data.append(values[v])
    next_index = len(new_inputs)
    new_steps: list[Step] = []
    for s, start in producers:
        results = range(start, start + 1 + len(s.extra_outs))
        if not any(r in live and r not in at for r in results):
            continue
        new_step = Step(s.op, [mapping[a] for a in s.args], s.params, s.out,
                        [dataclasses.replace(b, captures=[mapping[c] for c in b.captures])
                         for b in s.blocks], s.extra_outs)
        new_steps.append(new_step)
        for r in results:
            if r not in at:
                mapping[r] = next_index
            next_index += 1
    return Program(new_inputs, new_data, new_steps, [mapping[o] for o in outputs])


def shrink(case: Case, target: str, category: str, worker: Worker,
           unsupported: frozenset[str], budget_s: float = 300.0,
           oracle_worker: Worker | None = None) -> Case:
    """A smaller case on which `target` still fails with `category` (greedy: keep one
    failing output, then cut the values it depends on, nearest first)."""
    assert case.program is not None
    start = time.time()

    def every_value(program: Program) -> list[np.ndarray]:
        values: list[np.ndarray] = run_oracle(program, oracle_worker, "values")
        return values

    def attempt(program: Program) -> Case | None:
        if time.time() - start > budget_s:
            return None
        try:
            text, outputs = run_oracle(program, oracle_worker)
        except OracleFailure:  # a cut JAX refuses is simply not taken
            return None
        values = program.values()
        candidate = Case(case.seed, program, text, [np.asarray(x) for x in
                                                    program.input_data], outputs,
                         [Rule.of(values[i]) for i in program.outputs])
        got = classify(worker.run(text, candidate.inputs, target), candidate, unsupported)
        return candidate if got[0] == category else None

    best = case
    program = case.program
    values = every_value(program)
    if len(program.outputs) > 1:
        for o in program.outputs:
            smaller = attempt(cut(program, values, set(), [o]))
            if smaller is not None:
                best, program = smaller, smaller.program  # type: ignore[assignment]
                break
    changed = True
    while changed and time.time() - start < budget_s:
        changed = False
        assert program is not None
        values = every_value(program)
        n_inputs = len(program.inputs)
        step_values = [v for v in range(n_inputs, len(program.values()))
                       if v not in program.outputs]
        for v in reversed(step_values):
            smaller = attempt(cut(program, values, {v}))
            if smaller is not None and len(smaller.program.steps) < len(program.steps):  # type: ignore[union-attr]
                best, program = smaller, smaller.program  # type: ignore[assignment]
                changed = True
                break
    return best


def save_case(case: Case, target: str, category: str, message: str,
              directory: Path = CORPUS_DIR, name: str | None = None) -> Path:
    name = name or f"{category}-{re.sub(r'[^a-z0-9]+', '_', target)}-seed{case.seed}"
    path = directory / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "module.hlo").write_text(case.text)
    arrays: dict[str, np.ndarray] = {}
    for prefix, group in (("arg", case.inputs), ("out", case.expected)):
        for k, a in enumerate(group):
            a = np.asarray(a)
            arrays[f"{prefix}{k}"] = a.view(np.uint16) if a.dtype.name == "bfloat16" else a
    np.savez(path / "data.npz", **arrays)  # type: ignore[arg-type]
    meta = {
        "seed": case.seed, "target": target, "category": category, "message": message[:2000],
        "input_dtypes": [np.asarray(a).dtype.name for a in case.inputs],
        "rules": [r.to_json() for r in case.rules],
        "ops": case.program.ops() if case.program is not None else [],
    }
    (path / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return path


def load_case(path: Path) -> tuple[Case, dict[str, Any]]:
    meta = json.loads((path / "meta.json").read_text())
    data = np.load(path / "data.npz")
    n_in = sum(k.startswith("arg") for k in data.files)
    n_out = sum(k.startswith("out") for k in data.files)
    inputs = [data[f"arg{k}"].view(np_dtype(meta["input_dtypes"][k])) if
              meta["input_dtypes"][k] == "bfloat16" else data[f"arg{k}"] for k in range(n_in)]
    rules = [Rule.from_json(r) for r in meta["rules"]]
    expected = [data[f"out{k}"].view(np_dtype(rules[k].dtype)) if rules[k].dtype == "bfloat16"
                else data[f"out{k}"] for k in range(n_out)]
    case = Case(meta["seed"], None, (path / "module.hlo").read_text(), inputs, expected, rules)
    return case, meta


# --- the campaign -------------------------------------------------------------------------


def campaign(seeds: Iterable[int], targets: Sequence[str] = TARGETS, save: bool = True,
             shrink_budget_s: float = 300.0, log: Callable[[str], None] = print,
             corpus: Path = CORPUS_DIR, mode: str = "ops") -> Tally:
    unsupported = unsupported_opcodes()
    tally = Tally()
    worker = Worker()
    oracle_worker = Worker()
    # Rollout campaigns compile cold: the workers (spawned later) get an empty cache.
    saved_cache = os.environ.get("HLOFUSE_CACHE_DIR")
    scratch = tempfile.TemporaryDirectory(prefix="hlofuse-fuzz-cache-") if mode == "rollout" \
        else None
    if scratch is not None:
        os.environ["HLOFUSE_CACHE_DIR"] = scratch.name
    try:
        for seed in seeds:
            try:
                case = make_case(seed, oracle_worker, mode)
            except Exception as e:  # noqa: BLE001 - JAX refusing (or XLA crashing on) it
                tally.skipped += 1
                log(f"seed {seed}: no oracle ({type(e).__name__}: {e})"[:300])
                continue
            tally.programs += 1
            if tally.programs % 50 == 0:
                log(f"... {tally.programs} programs (seed {seed})")
            results = run_case(case, worker, targets, unsupported, tally.compiles, log)
            if mode == "rollout":  # a line per program: they take seconds each
                outcome = Counter(category for category, _ in results.values())
                log(f"seed {seed}: " + ", ".join(f"{c} {k}" for c, k in outcome.items()) +
                    (f"; time loop under max: {tally.compiles.last_verdict}"
                     if "max" in results else ""))
            named: set[str] = set()
            for target, (category, message) in results.items():
                tally.counts[target][category] += 1
                if category == "unsupported":
                    named |= {op for op in unsupported
                              if re.search(rf"\b{re.escape(op)}\b", message)}
            tally.unsupported_ops.update(named)  # programs refused for each opcode
            failing = {t: r for t, r in results.items() if r[0] not in ("equal", "unsupported")}
            if not failing:
                continue
            # One reproducer per program: the first failing target (they often share a cause).
            target, (category, message) = next(iter(failing.items()))
            entry = {"seed": seed, "results": {t: r[0] for t, r in results.items()},
                     "target": target, "category": category, "message": message[:500]}
            log(f"seed {seed}: {target} {category}: {message.splitlines()[0][:200]}")
            if save:
                try:
                    small = shrink(case, target, category, worker, unsupported,
                                   shrink_budget_s, oracle_worker)
                except OracleFailure:
                    small = case
                path = save_case(small, target, category, message, corpus)
                entry["saved"] = str(path)
                log(f"  shrunk to {len(small.program.steps) if small.program else '?'} steps: "
                    f"{path}")
            tally.failures.append(entry)
    finally:
        worker.stop()
        oracle_worker.stop()
        if scratch is not None:
            if saved_cache is None:
                del os.environ["HLOFUSE_CACHE_DIR"]
            else:
                os.environ["HLOFUSE_CACHE_DIR"] = saved_cache
            scratch.cleanup()
    return tally
