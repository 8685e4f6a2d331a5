"""XLA's kernels next to `xla-gpu`'s for one program: counts per loop iteration and outside
loops, the grouping of the program's instructions into kernels, and the first difference.

Both sides start from the same module (the one XLA started from). XLA keeps instruction names
through fusion, adding suffixes: priority fusion appends `.0` and every clone counts up
(`add.3` -> `add.3.0`, `add.3.5`), clones inside multi-output fusions get `.clone`, and
constants are renamed `constant_4` for `constant.4`. A kernel's members are the names of the
program's instructions it computes, found by taking suffixes off until a name of the input
is reached; instructions XLA or hlofuse created (no such name) are not members, and neither
are parameters, constants, tuples, get-tuple-elements, bitcasts and reshapes, which no
kernel owns.

Counting follows the oracle note: every launch in the entry computation, in called
computations, and per iteration in while bodies, and in conditions only of loops without a
known trip count (a counted loop never evaluates its condition; nested loops per their own
iteration). The copies copy insertion adds (copies with no input instruction behind them:
XLA's, and xla-gpu's from `xla_gpu/copy_insertion.py`) are kernels like the others (XLA
launches each as a device-to-device copy); in the grouping they count as one "(copy)" group per
copy and loop. Same count: equal counts outside loops and per iteration of every loop. Same
grouping: the same multiset of (loop, members) over all kernels.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass, field

from hlofuse.fusion.kernels import list_kernels
from hlofuse.fusion.strategies import FusionResult, run_strategy
from hlofuse.fusion.xla_gpu.kernel_names import same_name, xla_kernel_names
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import computation_text, instruction_text

_SUFFIX = re.compile(r"(?:\.clone(?:\.\d+)?|[._]\d+|\.clone)$")
# Instructions no kernel owns: moved, named or duplicated freely by both compilers.
# The group of a copy that copy insertion added (no HLO name has parentheses).
COPY_GROUP = frozenset({"(copy)"})
_NOT_MEMBERS = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast",
                          "reshape"})


def input_name(name: str, known: frozenset[str] | set[str]) -> str | None:
    """The input instruction `name` descends from, if any (suffixes taken off one by one)."""
    current = name
    for _ in range(32):
        if current in known:
            return current
        dotted = current.replace("_", ".")
        if dotted != current and dotted in known:
            return dotted
        stripped = _SUFFIX.sub("", current)
        if stripped == current or not stripped:
            return None
        current = stripped
    return None


class Namer:
    """Finds the input instruction behind a name of either compiler's output: by its name
    with suffixes taken off, else (instructions a call inliner cloned under a new name) by its
    opcode, shape and metadata (op name and stack frame), when exactly one input instruction
    has them."""

    def __init__(self, module: Module) -> None:
        self.known = frozenset(i.name for c in module.computations for i in c.instructions)
        self.places = {i.name: _place(i) for c in module.computations for i in c.instructions
                       if _has_op_name(i)}
        by_signature: dict[tuple[object, ...], list[str]] = {}
        for computation in module.computations:
            for inst in computation.instructions:
                by_signature.setdefault(_signature(inst), []).append(inst.name)
        self.unique = {key: names[0] for key, names in by_signature.items() if len(names) == 1}
        # While loops XLA rebuilds (the loop simplifier drops unused state) get new names and
        # shapes; their op name and stack frame stay.
        whiles: dict[tuple[object, ...], list[str]] = {}
        for computation in module.computations:
            for inst in computation.instructions:
                if inst.op.text == "while":
                    whiles.setdefault(_place(inst), []).append(inst.name)
        self.whiles = {key: names[0] for key, names in whiles.items() if len(names) == 1}
        self.while_names = frozenset(n for names in whiles.values() for n in names)

    def resolve_loop(self, inst: Instruction) -> str:
        """The input's while loop behind a while loop of either output."""
        found = input_name(inst.name, self.known)
        if found in self.while_names:
            return found
        return self.whiles.get(_place(inst), inst.name)

    def resolve(self, inst: Instruction) -> str | None:
        found = input_name(inst.name, self.known)
        if found is not None and self._same_origin(inst, found):
            return found
        return self.unique.get(_signature(inst))

    def _same_origin(self, inst: Instruction, found: str) -> bool:
        """Whether `inst` may descend from the input's `found`: both compilers keep an
        instruction's metadata when they clone or fuse it, but a pass's new instruction takes
        a free name of the module, which may be an input instruction's name with a suffix
        (XLA's name uniquer takes the smallest free suffix, hlofuse's the next one: the
        reshape mover's new `mul.1` in XLA is `mul.55` in xla-gpu). A name whose op name and
        stack frame differ from the input instruction's is such a new instruction."""
        place = self.places.get(found)
        return place is None or not _has_op_name(inst) or _place(inst) == place

    def resolve_by_signature(self, inst: Instruction) -> str | None:
        """Only by opcode, shape and metadata: how an instruction XLA renamed is found."""
        metadata = inst.metadata
        if metadata is None or metadata.get("op_name") is None:
            return None
        return self.unique.get(_signature(inst))


def _has_op_name(inst: Instruction) -> bool:
    return inst.metadata is not None and inst.metadata.get("op_name") is not None


def _place(inst: Instruction) -> tuple[object, ...]:
    metadata = inst.metadata
    if metadata is None:
        return (inst.name,)
    return (metadata.get("op_name"), metadata.get("stack_frame_id"))


def _signature(inst: Instruction) -> tuple[object, ...]:
    metadata = inst.metadata
    if metadata is None or metadata.get("op_name") is None:
        return (inst.name,)  # no metadata: only the name can match
    return (inst.op.text, str(inst.shape), metadata.get("op_name"),
            metadata.get("stack_frame_id"))


def _is_gemm_fusion(inst: Instruction) -> bool:
    return inst.op.text == "fusion" and any(
        key == "backend_config" and "__triton_gemm" in raw.text for key, raw in inst.extra)


@dataclass(frozen=True, slots=True)
class KernelView:
    """One launch as the comparison sees it."""

    name: str
    kind: str
    computation: str
    loop: str | None  # the innermost loop, named by the input's while instruction
    members: frozenset[str]  # input instructions it computes
    ops: tuple[str, ...]
    copy_insertion: bool = False  # a copy with no input instruction behind it
    xla_name: str = ""  # the name XLA gives (has given) this kernel (RenameFusions)
    body: str = field(default="", compare=False)  # the kernel's HLO: fused computation or op

    def key(self) -> tuple[str | None, frozenset[str]]:
        return (self.loop, COPY_GROUP if self.copy_insertion else self.members)

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "xla_name": self.xla_name or self.name, "kind": self.kind,
                "computation": self.computation,
                "loop": self.loop, "members": sorted(self.members), "ops": list(self.ops),
                "copy_insertion": self.copy_insertion}


@dataclass
class Side:
    """The kernels of one compiler."""

    kernels: list[KernelView]
    loops: list[str]  # input names of the while loops, walk order

    def compared(self) -> list[KernelView]:
        return list(self.kernels)

    def copies(self) -> int:
        return sum(k.copy_insertion for k in self.kernels)

    def outside_loops(self) -> int:
        return sum(1 for k in self.compared() if k.loop is None)

    def per_iteration(self) -> dict[str, int]:
        counts = {loop: 0 for loop in self.loops}
        for kernel in self.compared():
            if kernel.loop is not None:
                counts[kernel.loop] = counts.get(kernel.loop, 0) + 1
        return counts

    def groups(self) -> Counter[tuple[str | None, frozenset[str]]]:
        return Counter(k.key() for k in self.compared())

    def universe(self) -> set[str]:
        return {m for k in self.kernels for m in k.members}

    def restricted(self, universe: set[str]) -> Side:
        """The same kernels with members outside `universe` dropped."""
        return Side([dataclasses.replace(k, members=k.members & universe)
                     for k in self.kernels], self.loops)


def side_of(module: Module, namer: Namer, xla: bool) -> Side:
    """The kernels of a compiled (fused) module, named after the input's instructions."""
    kernels, loops = list_kernels(module)
    names = {} if xla else xla_kernel_names(module)
    instructions = {(c.name, i.name): i for c in module.computations for i in c.instructions}
    by_name = {i.name: i for c in module.computations for i in c.instructions}
    loop_names: dict[str, str] = {}
    for while_loop in loops:
        loop_names[while_loop.name] = namer.resolve_loop(
            instructions[(while_loop.computation, while_loop.name)])
    views = []
    for kernel in kernels:
        members = set()
        top = instructions.get((kernel.computation, kernel.name))
        # XLA's GemmFusion names every instruction it clones afresh
        # (AddComputationAndUnifyNamesAndIds): inside its GEMM fusions only the signature
        # finds the input instruction, so xla-gpu's are read the same way.
        resolve = namer.resolve
        if not xla and top is not None and _is_gemm_fusion(top):
            resolve = namer.resolve_by_signature
        for name, op in zip(kernel.instructions, kernel.ops):
            fused = by_name.get(name)
            if op in _NOT_MEMBERS or fused is None:
                continue
            found = resolve(fused)
            if found is not None:
                members.add(found)
        scope = loop_names.get(kernel.loop) if kernel.loop is not None else None
        copy_insertion = top is not None and top.op.text == "copy" and not members
        body = ""
        if top is not None:
            body = (computation_text(top.calls[0]) if top.op.text == "fusion"
                    else instruction_text(top))
        views.append(KernelView(kernel.name, kernel.kind, kernel.computation, scope,
                                frozenset(members), kernel.ops, copy_insertion,
                                names.get((kernel.computation, kernel.name), kernel.name),
                                body))
    return Side(views, [loop_names[while_loop.name] for while_loop in loops])


@dataclass
class Comparison:
    """XLA's kernels and xla-gpu's for one program and device."""

    device: str
    strategy: str
    xla: Side
    ours: Side
    result: FusionResult
    first_difference: dict[str, object] | None = field(default=None)

    @property
    def same_count(self) -> bool:
        return (self.xla.outside_loops() == self.ours.outside_loops()
                and self.xla.per_iteration() == self.ours.per_iteration())

    @property
    def same_grouping(self) -> bool:
        return self.xla.groups() == self.ours.groups()

    def as_dict(self) -> dict[str, object]:
        return {
            "device": self.device, "strategy": self.strategy,
            "same_count": self.same_count, "same_grouping": self.same_grouping,
            "xla": {"kernels_outside_loops": self.xla.outside_loops(),
                    "kernels_per_iteration": self.xla.per_iteration(),
                    "copy_insertion_copies": self.xla.copies(),
                    "kernels": [k.as_dict() for k in self.xla.kernels]},
            "xla_gpu": {"kernels_outside_loops": self.ours.outside_loops(),
                        "kernels_per_iteration": self.ours.per_iteration(),
                        "copy_insertion_copies": self.ours.copies(),
                        "kernels": [k.as_dict() for k in self.ours.kernels]},
            "first_difference": self.first_difference,
        }


def compare_texts(before: str, optimized: str, device: str = "h100",
                  strategy: str | None = None) -> Comparison:
    """Run `xla-gpu` (or `strategy`) on `before` and compare with XLA's `optimized` HLO.

    Members are compared over the instructions both sides still have: one that a compiler's
    simplifier rewrote away is not a fusion decision."""
    module = parse_module(before, filename="<XLA's input>")
    xla_module = parse_module(optimized, filename="<XLA's optimised HLO>")
    chosen = strategy or f"xla-gpu+device={device}"
    result = run_strategy(module, chosen, debug=False)
    namer = Namer(module)
    xla = side_of(xla_module, namer, xla=True)
    ours = side_of(result.module, namer, xla=False)
    common = xla.universe() & ours.universe()
    comparison = Comparison(device, chosen, xla.restricted(common), ours.restricted(common),
                            result)
    comparison.first_difference = first_difference(comparison)
    return comparison


def first_difference(comparison: Comparison) -> dict[str, object] | None:
    """The first XLA kernel (walk order) whose grouping xla-gpu does not reproduce, what
    xla-gpu made of its instructions, and the decisions hlofuse logged between them."""
    ours = comparison.ours.compared()
    ours_keys = Counter(k.key() for k in ours)
    for kernel in comparison.xla.compared():
        if ours_keys[kernel.key()] > 0:
            ours_keys[kernel.key()] -= 1
            continue
        if not kernel.members and not kernel.copy_insertion:
            continue
        overlapping = [k for k in ours if k.loop == kernel.loop and (
            k.members & kernel.members or (kernel.copy_insertion and k.copy_insertion))]
        names = {m for k in overlapping for m in k.members} | {k.name for k in overlapping}
        return {"xla_kernel": kernel.as_dict(),
                "xla_gpu_kernels": [k.as_dict() for k in overlapping],
                "xla_body": kernel.body, "xla_gpu_bodies": [k.body for k in overlapping],
                "decisions": _decisions_between(comparison.result, kernel.members, names)}
    extra = [k for k in ours if (k.members or k.copy_insertion)
             and comparison.xla.groups()[k.key()] == 0]
    if extra:
        kernel = extra[0]
        return {"xla_kernel": None, "xla_gpu_kernels": [kernel.as_dict()],
                "xla_body": "", "xla_gpu_bodies": [kernel.body],
                "decisions": _decisions_between(comparison.result, kernel.members,
                                                set(kernel.members) | {kernel.name})}
    return None


def _decisions_between(result: FusionResult, xla_members: frozenset[str],
                       our_members: set[str]) -> list[dict[str, object]]:
    """hlofuse's refusals of edges (or sibling pairs) among these instructions and kernels."""
    names = set(xla_members) | our_members
    found: list[dict[str, object]] = []
    for record in result.decisions:
        producer = record.producer
        consumer = record.consumer or ""
        involved = [producer, consumer, *record.siblings]
        if sum(1 for n in involved if n and (n in names or _base(n) in names)) >= 2 \
                and record.verdict == "no":
            found.append({"pass": record.pass_name, "producer": producer,
                          "consumer": consumer, "verdict": str(record.verdict),
                          "rule": record.rule, "message": record.message})
    return found[:8]


def _base(name: str) -> str:
    return _SUFFIX.sub("", name) if name else name


def _bodies(difference: dict[str, object], limit: int = 40) -> list[str]:
    """Both sides' HLO of the first difference, each cut to `limit` lines."""
    lines: list[str] = []
    texts = [("XLA", difference.get("xla_body"))]
    bodies = difference.get("xla_gpu_bodies")
    texts += [("xla-gpu", body) for body in (bodies if isinstance(bodies, list) else [])]
    for side, text in texts:
        if not isinstance(text, str) or not text:
            continue
        body = text.rstrip("\n").splitlines()
        lines.append(f"  {side}'s kernel:")
        lines += ["    " + line for line in body[:limit]]
        if len(body) > limit:
            lines.append(f"    ... ({len(body) - limit} more lines)")
    return lines


def _scopes(comparison: Comparison) -> list[str | None]:
    loops: list[str | None] = [None]
    for loop in comparison.xla.loops + comparison.ours.loops:
        if loop not in loops:
            loops.append(loop)
    return loops


def _members_text(kernel: KernelView, width: int) -> str:
    names = ", ".join(sorted(kernel.members)) or "(" + ", ".join(kernel.ops[:4]) + ")"
    text = f"{kernel.xla_name or kernel.name} {names}"
    return text if len(text) <= width else text[:width - 3] + "..."


def report_text(comparison: Comparison, width: int = 60) -> str:
    """XLA's kernels and xla-gpu's side by side, per loop, with the first difference."""
    xla, ours = comparison.xla, comparison.ours
    lines = [f"XLA (GPU compiler, {comparison.device}) vs {comparison.strategy}: "
             f"kernel count {'same' if comparison.same_count else 'DIFFERS'}, grouping "
             f"{'same' if comparison.same_grouping else 'DIFFERS'}"]
    lines.append(f"copies from copy insertion: XLA {xla.copies()}, xla-gpu {ours.copies()}")
    for scope in _scopes(comparison):
        left = [k for k in xla.compared() if k.loop == scope]
        right = [k for k in ours.compared() if k.loop == scope]
        where = "outside loops" if scope is None else f"per iteration of loop %{scope}"
        lines.append("")
        lines.append(f"{where}: XLA {len(left)} kernels, xla-gpu {len(right)} kernels")
        lines.append(f"  {'XLA':<{width}} | xla-gpu")
        unmatched = list(right)
        rows: list[tuple[str, KernelView | None, KernelView | None]] = []
        for kernel in left:
            twin = next((k for k in unmatched if k.key() == kernel.key()
                         and same_name(k.xla_name, kernel.name)), None)
            twin = twin or next((k for k in unmatched if k.key() == kernel.key()), None)
            if twin is not None:
                unmatched.remove(twin)
            mark = "x" if twin is None else "=" if same_name(twin.xla_name, kernel.name) else "~"
            rows.append((mark, kernel, twin))
        rows += [("x", None, k) for k in unmatched]
        for mark, a, b in rows:
            left_text = _members_text(a, width) if a else ""
            right_text = _members_text(b, width) if b else ""
            lines.append(f"{mark} {left_text:<{width}} | {right_text}")
    difference = comparison.first_difference
    lines.append("")
    if difference is None:
        lines.append("no difference: every XLA kernel has a twin in xla-gpu")
        return "\n".join(lines) + "\n"
    xla_kernel = difference["xla_kernel"]
    ours_kernels = difference["xla_gpu_kernels"]
    assert isinstance(ours_kernels, list)
    if isinstance(xla_kernel, dict):
        what = (f"computes {', '.join(xla_kernel['members'])}" if xla_kernel["members"]
                else "is a copy from copy insertion")
        lines.append(f"first difference: XLA kernel {xla_kernel['name']} {what}")
    else:
        lines.append(f"first difference: xla-gpu kernel {ours_kernels[0]['xla_name']} has no "
                     "twin in XLA")
    for kernel in ours_kernels:
        members = ", ".join(kernel["members"]) or "a copy"
        lines.append(f"  xla-gpu puts {members} in {kernel['xla_name']} (%{kernel['name']})")
    lines += _bodies(difference)
    decisions = difference["decisions"]
    assert isinstance(decisions, list)
    for decision in decisions:
        lines.append(f"  {decision['pass']}: {decision['verdict']} [{decision['rule']}] "
                     f"{decision['message']}")
    if not decisions:
        lines.append("  (xla-gpu refused no edge among them: the difference comes from an "
                     "earlier fusion choice, or from the passes before fusion)")
    return "\n".join(lines) + "\n"
