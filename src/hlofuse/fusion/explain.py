"""The explain report: kernels, blocked edges grouped by rule, and hints (text and JSON).

A blocked edge is a producer -> consumer edge that still separates two kernels (or a kernel
and a tuple, loop or library call) in the fused module, with the record of the pass that
refused to fuse it. Records about instructions that were fused later, or renamed into a
fusion, no longer describe the module and are left out; among the live records of one edge
the last refusal of instruction fusion or the fusion merger wins (the decision that kept the
edge), except `producer-is-fusion`, which only defers to the merger. Hints name a barrier the
user can remove and how.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from hlofuse.fusion.beyond_xla.whole_loop import WholeLoopFusion
from hlofuse.fusion.xla2022.tree_reduction import TreeReductionRewriter
from hlofuse.ir.hlo import Module
from hlofuse.passes.decision_log import DecisionRecord
from hlofuse.passes.manager import PASSES

if TYPE_CHECKING:
    from hlofuse.fusion.strategies import FusionResult

_VERTICAL_PASSES = ("instruction-fusion", "fusion-merger", "priority-fusion")
_DEFERRALS = frozenset({"producer-is-fusion"})
_MAX_EDGES_SHOWN = 8
# Passes that rewrite the program before fusion (rng-expansion, loop-unroll, ...): their records
# are listed as rewrites, never as blocked edges.
_REWRITE_PASSES = frozenset(cls.name for cls in PASSES) | {TreeReductionRewriter.name}


def _edges(module: Module) -> set[tuple[str, str, str]]:
    """(computation, producer, consumer) of every edge between top-level instructions."""
    return {(comp.name, operand.name, inst.name) for comp in module.computations
            for inst in comp.instructions for operand in inst.operands}


def _top_level_names(module: Module) -> dict[str, set[str]]:
    return {comp.name: {i.name for i in comp.instructions} for comp in module.computations}


def _decisions(result: FusionResult) -> list[DecisionRecord]:
    if not result.logged:
        raise ValueError("this strategy result was computed without its decision log; run "
                         "run_strategy(..., log_decisions=True) to explain it")
    return result.decisions.unique()


def blocked_edges(result: FusionResult) -> list[DecisionRecord]:
    """The refusal that decided each edge (and sibling group) still present in the module."""
    edges = _edges(result.module)
    names = _top_level_names(result.module)
    per_edge: dict[tuple[object, ...], list[DecisionRecord]] = defaultdict(list)
    for record in _decisions(result):
        if not record.is_refusal or record.pass_name in _REWRITE_PASSES:
            continue
        if len(record.siblings) > 1:
            present = names.get(record.computation, set())
            if all(s in present for s in record.siblings):
                per_edge[("group", record.computation, record.siblings)].append(record)
            continue
        edge = (record.computation, record.producer, record.consumer or "")
        if edge in edges:
            per_edge[edge].append(record)
    return [_decisive(records) for records in per_edge.values()]


def _decisive(records: list[DecisionRecord]) -> DecisionRecord:
    preferences: tuple[Callable[[DecisionRecord], bool], ...] = (
        lambda r: r.pass_name in _VERTICAL_PASSES and r.rule not in _DEFERRALS,
        lambda r: r.rule not in _DEFERRALS)
    for accept in preferences:
        chosen = [r for r in records if accept(r)]
        if chosen:
            return chosen[-1]
    return records[-1]


# --- hints --------------------------------------------------------------------------------


def _where(name: str, lines: tuple[str, ...]) -> str:
    return f"%{name} at {lines[0]}" if lines else f"%{name}"


def _barrier_side(record: DecisionRecord, ops: tuple[str, ...]) -> str:
    """`%name at file:line` of the side of the edge that is the barrier."""
    if record.consumer_op in ops and record.producer_op not in ops:
        return _where(record.consumer or "", record.consumer_lines)
    return _where(record.producer, record.producer_lines)


def _some(places: list[str], limit: int = 3) -> str:
    unique = list(dict.fromkeys(places))
    more = f" and {len(unique) - limit} more" if len(unique) > limit else ""
    return ", ".join(unique[:limit]) + more


def _hint_code_duplication(records: list[DecisionRecord], strategy: str) -> list[str]:
    out = []
    base = strategy.split("+")[0].split("-no-")[0]
    for record in records:
        op = str(record.figures.get("op", record.producer_op))
        name = str(record.figures.get("instruction", record.producer))
        line = str(record.figures.get("source_line", ""))
        where = _where(name, (line,) if line else ())
        users = record.figures.get("users", 0)
        emitted = record.figures.get("emitted", 0)
        uses = (f"has {users} users" if isinstance(users, int) and users > 1
                else f"is read at {emitted} different indices (several slices of it)")
        if op == "concatenate":
            out.append(f"the concatenate {where} {uses}; keep the parts as separate arrays "
                       f"(strategy {base}+concat_forwarding+scalarize_state does it for loop "
                       f"state) or use strategy {base}+relax_concatenate")
        else:
            out.append(f"the {op} {where} {uses} but may only be emitted once per fusion; it "
                       "stays a kernel of its own")
    return out


def _hint_custom_call(records: list[DecisionRecord], strategy: str) -> list[str]:
    base = strategy.split("+")[0].split("-no-")[0]
    return [f"the custom call {_barrier_side(r, ('custom-call',))} is opaque to fusion and "
            "runs as its own kernel; computing it with ordinary ops (e.g. random numbers as "
            f"Threefry in plain HLO: strategy {base}+rng_expansion) lets it fuse with its "
            "users" for r in records]


def _hint_loop(records: list[DecisionRecord], strategy: str) -> list[str]:
    loops = [_barrier_side(r, ("while",)) for r in records
             if "while" in (r.producer_op, r.consumer_op)]
    if not loops:
        return []
    base = strategy.split("+")[0].split("-no-")[0]
    return [f"the while loop(s) {_some(loops)} launch their body's kernels on every iteration "
            "and nothing fuses across iterations; unrolling puts more work into each kernel "
            f"(strategy {base}+unroll=K)"]


def _hint_tuple(records: list[DecisionRecord], strategy: str) -> list[str]:
    places = [_barrier_side(r, ("tuple", "get-tuple-element")) for r in records]
    return [f"{len(records)} edges pass through tuples (loop state, multiple results), e.g. "
            f"{_some(places)}: those values are written to memory and read back; keeping "
            "loop state in fewer, whole arrays needs fewer kernels"]


def _hint_expensive(records: list[DecisionRecord], strategy: str) -> list[str]:
    return [f"the {r.producer_op} {_where(r.producer, r.producer_lines)} has "
            f"{r.figures.get('users', 'several')} users and is too expensive to recompute in "
            "each, so it is a kernel of its own" for r in records]


def _hint_library(records: list[DecisionRecord], strategy: str) -> list[str]:
    return [f"the library call {_barrier_side(r, ('dot', 'rng-bit-generator'))} reads and "
            "writes whole arrays; element-wise work around it cannot fuse into it"
            for r in records]


def _hint_cost_model(records: list[DecisionRecord], strategy: str) -> list[str]:
    def us(value: object) -> str:
        return f"{value:.3g} us" if isinstance(value, (int, float)) else "?"

    producers = {r.producer: r for r in records}
    return [f"the {r.producer_op} {_where(r.producer, r.producer_lines)} stays a kernel: fused "
            f"into its {r.figures.get('users', 'several')} user(s) it would take an estimated "
            f"{us(r.figures.get('fused_us'))} instead of {us(r.figures.get('unfused_us'))} "
            "(the cost model prices recomputing it wherever it is read)"
            for r in producers.values()]


_HINTS: dict[str, Callable[[list[DecisionRecord], str], list[str]]] = {
    "code-duplication-too-high": _hint_code_duplication,
    "custom-call": _hint_custom_call,
    "control-flow-boundary": _hint_loop,
    "tuple-boundary": _hint_tuple,
    "expensive-producer-duplicated": _hint_expensive,
    "library-call": _hint_library,
    "cost-model-loss": _hint_cost_model,
}


def hints(blocked: list[DecisionRecord], strategy: str) -> list[str]:
    """One line per barrier the user can remove (per instruction, or per kind of barrier)."""
    by_rule: dict[str, list[DecisionRecord]] = defaultdict(list)
    for record in blocked:
        by_rule[record.rule].append(record)
    out: dict[str, None] = {}
    for rule, make in _HINTS.items():
        if by_rule.get(rule):
            out.update(dict.fromkeys(make(by_rule[rule], strategy)))
    return list(out)


# --- the report ---------------------------------------------------------------------------


def explain_dict(result: FusionResult) -> dict[str, object]:
    """The JSON form (documented in the README)."""
    blocked = blocked_edges(result)
    per_rule = Counter(r.rule for r in blocked)
    return {
        "strategy": result.strategy.name,
        "kernel_count": len(result.kernels),
        "kernels_outside_loops": result.kernels_outside_loops(),
        "kernels_per_iteration": result.kernels_per_iteration(),
        "loops": [loop.as_dict() for loop in result.loops],
        "kernels": [k.as_dict() for k in result.kernels],
        "blocked": {rule: per_rule[rule] for rule in sorted(per_rule)},
        "blocked_edges": [r.as_dict() for r in blocked],
        "hints": hints(blocked, result.strategy.name),
        "rewrites": [r.as_dict() for r in rewrites(result)],
        "whole_loops": [r.as_dict() for r in whole_loops(result)],
        "decisions": [r.as_dict() for r in _decisions(result)],
    }


def explain_text(result: FusionResult, verbose: bool = False) -> str:
    lines = [f"strategy {result.strategy.name}: {len(result.kernels)} kernels, "
             f"{result.kernels_outside_loops()} outside loops"]
    per_iteration = result.kernels_per_iteration()
    for loop in result.loops:
        nested = f", inside {', '.join(loop.loops)}" if loop.loops else ""
        lines.append(f"  while %{loop.name} (body %{loop.body}, condition %{loop.condition}"
                     f"{nested}): {per_iteration[loop.name]} kernels per iteration")
    lines += ["", "kernels"]
    for kernel in result.kernels:
        where = f" [per iteration of %{kernel.loop}]" if kernel.loop else ""
        count = len(kernel.instructions)
        lines.append(f"  %{kernel.name}  {kernel.kind}  in %{kernel.computation}{where}: "
                     f"{count} instruction{'s' if count != 1 else ''}")
        shown = kernel.instructions if verbose or count <= 12 else kernel.instructions[:12]
        more = f" ... (+{count - len(shown)})" if len(shown) < count else ""
        lines.append("      " + ", ".join(shown) + more)
        if kernel.source_lines:
            lines.append("      source: " + ", ".join(kernel.source_lines[:6])
                         + (" ..." if len(kernel.source_lines) > 6 else ""))
    blocked = blocked_edges(result)
    by_rule: dict[str, list[DecisionRecord]] = defaultdict(list)
    for record in blocked:
        by_rule[record.rule].append(record)
    lines += ["", f"blocked edges: {len(blocked)}"]
    for rule, records in sorted(by_rule.items(), key=lambda item: (-len(item[1]), item[0])):
        lines.append(f"  {rule}: {len(records)}")
        edges = records if verbose else records[:_MAX_EDGES_SHOWN]
        for record in edges:
            lines.append(f"    [{record.pass_name}] {record.message}"
                         + (f"  ({', '.join(record.source_lines[:3])})"
                            if record.source_lines else ""))
        if len(edges) < len(records):
            lines.append(f"    ... and {len(records) - len(edges)} more")
    lines += _rewrite_lines(result, verbose)
    lines += _whole_loop_lines(result)
    found = hints(blocked, result.strategy.name)
    if found:
        lines += ["", "hints"] + [f"  - {h}" for h in found]
    return "\n".join(lines) + "\n"


def whole_loops(result: FusionResult) -> list[DecisionRecord]:
    """What whole-loop fusion decided about each loop: one kernel, or why not."""
    return [r for r in _decisions(result) if r.pass_name == WholeLoopFusion.name]


def _whole_loop_lines(result: FusionResult) -> list[str]:
    records = whole_loops(result)
    if not records:
        return []
    lines = ["", "whole-loop fusion"]
    for record in records:
        verdict = f"refused ({record.rule})" if record.is_refusal else "one kernel"
        where = f"  ({', '.join(record.source_lines[:3])})" if record.source_lines else ""
        lines.append(f"  %{record.producer}: {verdict}: {record.message}{where}")
    return lines


def rewrites(result: FusionResult) -> list[DecisionRecord]:
    """What the passes before fusion rewrote and refused, each once."""
    return [r for r in _decisions(result) if r.pass_name in _REWRITE_PASSES]


def _rewrite_lines(result: FusionResult, verbose: bool) -> list[str]:
    records = rewrites(result)
    if not records:
        return []
    done = sum(1 for r in records if not r.is_refusal)
    lines = ["", f"rewrites before fusion: {done} done, {len(records) - done} refused"]
    by_rule: dict[tuple[str, str], list[DecisionRecord]] = defaultdict(list)
    for record in records:
        by_rule[(record.pass_name, record.rule)].append(record)
    for (pass_name, rule), group in by_rule.items():
        verdict = "refused" if group[0].is_refusal else "done"
        lines.append(f"  {pass_name} {rule} ({verdict}): {len(group)}")
        shown = group if verbose else group[:_MAX_EDGES_SHOWN]
        lines += [f"    {r.message}" for r in shown]
        if len(shown) < len(group):
            lines.append(f"    ... and {len(group) - len(shown)} more")
    return lines
