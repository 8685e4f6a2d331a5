"""Pass, Pipeline, FixedPoint, dumping after each pass, and the registry of simplification passes.

A pass is a frozen dataclass with a kebab-case `name` class attribute and its knobs as fields;
`run(module, log)` returns `(new_module, changed)`. Passes that make decisions worth explaining
(the fusion passes) append records to `log`; the others ignore it. `Pipeline(debug=True)` runs
the verifier after every pass, so a pass that breaks an invariant is named at once, and
`dump_dir` receives `NN-pass-name.hlo` after each pass, as XLA's `--xla_dump_hlo_pass_re` does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from hlofuse.ir.hlo import Module
from hlofuse.ir.printer import module_text
from hlofuse.ir.verifier import HloVerifyError, verify
from hlofuse.passes.call_inliner import CallInliner
from hlofuse.passes.concat_forwarding import ConcatForwarding
from hlofuse.passes.cse import CommonSubexpressionElimination
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.decision_log import DecisionSink
from hlofuse.passes.logistic_expander import LogisticExpander
from hlofuse.passes.own_row_gather import OwnRowGather
from hlofuse.passes.rng_expansion import RngExpansion
from hlofuse.passes.scalarize_state import ScalarizeState
from hlofuse.passes.simplify import AlgebraicSimplifier
from hlofuse.passes.trip_count import WhileLoopTripCountAnnotator
from hlofuse.passes.unroll import LoopUnroll
from hlofuse.passes.variadic_op_splitter import VariadicOpSplitter

# XLA's HloPassFix gives up after this many rounds (kIterationLimit); so do we, silently.
FIXED_POINT_LIMIT = 25


@runtime_checkable
class Pass(Protocol):
    """A module-to-module transformation; its fields are its knobs."""

    name: ClassVar[str]

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]: ...


class MutableModule(Protocol):
    """A module in a mutable form several passes work on in turn (`fusion.ModuleGraph`)."""

    def to_module(self) -> Module: ...

    def normalize(self) -> None: ...

    def release(self) -> None: ...


@runtime_checkable
class GraphPass(Pass, Protocol):
    """A pass that can also work on a mutable form of the module: consecutive graph passes
    share one copy instead of freezing the module and copying it again between them."""

    def run_on_graphs(self, graphs: Any, log: DecisionSink | None = None) -> bool: ...

    def graphs_of(self, module: Module) -> MutableModule: ...


class PassError(ValueError):
    """A pass produced an invalid module (debug pipelines verify after every pass)."""


@dataclass(frozen=True, slots=True)
class FixedPoint:
    """Runs its passes in order, again and again, until a whole round changes nothing."""

    passes: tuple[Pass, ...]
    label: str = "fixed-point"
    max_iterations: int = FIXED_POINT_LIMIT


Step = Pass | FixedPoint


@dataclass
class Pipeline:
    """Runs steps in order; `debug` verifies after each pass; `dump_dir` writes each result."""

    steps: Sequence[Step]
    debug: bool = True
    dump_dir: Path | str | None = None
    log: DecisionSink | None = None
    _count: int = dataclasses.field(default=0, init=False)
    # The module between passes: frozen (`_module`), or, while graph passes run one after
    # another, one mutable copy (`_graphs`), changed since it was made or not.
    _module: Module = dataclasses.field(init=False)
    _graphs: MutableModule | None = dataclasses.field(default=None, init=False)
    _graphs_changed: bool = dataclasses.field(default=False, init=False)
    _needs_normalizing: bool = dataclasses.field(default=False, init=False)

    def run(self, module: Module) -> tuple[Module, bool]:
        self._count = 0
        if self.dump_dir is not None:
            Path(self.dump_dir).mkdir(parents=True, exist_ok=True)
        self._module = module
        self._graphs = None
        changed = False
        with gc_paused():
            try:
                for step in self.steps:
                    changed |= self._run_step(step)
                return self._frozen(), changed
            finally:
                if self._graphs is not None:
                    self._graphs.release()
                    self._graphs = None

    def _frozen(self) -> Module:
        """The module as it stands, frozen (leaving the graph form, if it was in it)."""
        if self._graphs is not None:
            if self._graphs_changed:
                self._module = self._graphs.to_module()
            self._graphs.release()
            self._graphs = None
        return self._module

    def _run_step(self, step: Step) -> bool:
        if not isinstance(step, FixedPoint):
            return self._run_pass(step)
        changed = False
        for _ in range(step.max_iterations):
            round_changed = False
            for inner in step.passes:
                round_changed |= self._run_pass(inner)
            changed |= round_changed
            if not round_changed:
                break
        return changed

    def _run_pass(self, p: Pass) -> bool:
        if isinstance(p, GraphPass):
            if self._graphs is None:
                self._graphs = p.graphs_of(self._module)
                self._graphs_changed = self._needs_normalizing = False
            elif self._needs_normalizing:
                self._graphs.normalize()
                self._needs_normalizing = False
            changed = p.run_on_graphs(self._graphs, self.log)
            if changed:
                self._graphs_changed = self._needs_normalizing = True
        else:
            self._module, changed = p.run(self._frozen(), self.log)
        self._count += 1
        if not self.debug and self.dump_dir is None:
            return changed
        after = self._graphs.to_module() if self._graphs is not None else self._module
        if self.debug:
            try:
                verify(after)
            except HloVerifyError as e:
                raise PassError(f"pass {p.name} produced an invalid module: {e}") from e
        if self.dump_dir is not None:
            path = Path(self.dump_dir) / f"{self._count:02d}-{p.name}.hlo"
            path.write_text(f"// after pass {describe(p)} (changed: {_knob_text(changed)})\n"
                            + module_text(after))
        return changed


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cycle collection inside: passes allocate hundreds of thousands of short-lived IR
    objects, and the collections that triggers (each scanning every live object of the
    process) cost a fifth of a compile while finding no garbage (the fusion graphs break their
    own cycles: `ModuleGraph.release`)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def describe(p: Pass) -> str:
    """`name` or `name{knob=value,...}` for the knobs that differ from their defaults."""
    if not dataclasses.is_dataclass(p):
        return p.name
    changed = []
    for f in dataclasses.fields(p):
        value = getattr(p, f.name)
        if f.default is not dataclasses.MISSING and value != f.default:
            changed.append(f"{f.name}={_knob_text(value)}")
    return p.name + ("{" + ",".join(changed) + "}" if changed else "")


def _knob_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_SPEC = re.compile(r"\s*([a-z][a-z0-9-]*)\s*(?:\{([^{}]*)\})?\s*$")


def parse_pass_list(text: str, registry: Iterable[type[Pass]]) -> list[Pass]:
    """`a,b{knob=v,knob=v},c` -> pass objects; ValueError names an unknown pass or knob."""
    by_name = {cls.name: cls for cls in registry}
    passes: list[Pass] = []
    for spec in _split_specs(text):
        match = _SPEC.match(spec)
        if not match:
            raise ValueError(f"cannot read pass {spec.strip()!r} (expected name or "
                             "name{knob=value,...})")
        name, knobs = match.group(1), match.group(2)
        cls = by_name.get(name)
        if cls is None:
            raise ValueError(f"unknown pass {name!r}; known passes: "
                             + ", ".join(sorted(by_name)))
        passes.append(cls(**_parse_knobs(cls, knobs or "")))
    if not passes:
        raise ValueError("no passes named")
    return passes


def _split_specs(text: str) -> list[str]:
    specs, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            specs.append(text[start:i])
            start = i + 1
    specs.append(text[start:])
    return [s for s in specs if s.strip()]


def _parse_knobs(cls: type[Pass], text: str) -> dict[str, object]:
    fields: dict[str, dataclasses.Field[object]] = (
        {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {})
    out: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in fields:
            known = ", ".join(fields) or "none"
            raise ValueError(f"pass {cls.name} has no knob {key!r} (knobs: {known})")
        default = fields[key].default
        out[key] = _knob_value(cls.name, key, raw.strip(), default)
    return out


def _knob_value(pass_name: str, key: str, raw: str, default: object) -> object:
    if isinstance(default, bool):
        if raw.lower() in ("true", "1", "yes"):
            return True
        if raw.lower() in ("false", "0", "no"):
            return False
        raise ValueError(f"knob {key} of {pass_name} takes true or false, got {raw!r}")
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"knob {key} of {pass_name} takes an integer, got {raw!r}") from None
    return raw


# The registry of this layer's passes, in the order XLA runs them before fusion, then the
# rewrites hlofuse adds before fusion. The fusion layer adds its own
# (hlofuse.fusion.strategies.ALL_PASSES).
PASSES: tuple[type[Pass], ...] = (LogisticExpander, CallInliner, AlgebraicSimplifier,
                                  CommonSubexpressionElimination, DeadCodeElimination,
                                  WhileLoopTripCountAnnotator, VariadicOpSplitter,
                                  RngExpansion, ConcatForwarding, ScalarizeState, LoopUnroll,
                                  OwnRowGather)
