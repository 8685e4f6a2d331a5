"""Code generation stays linear in what it emits: every program of the corpora (tests/data/jax,
indexing, linalg, rollouts), fused under every strategy, has its C generated within the time
its fusion passes took plus CODEGEN_MARGIN_S, in at most LINES_PER_INSTRUCTION lines of C per
HLO instruction (plus FIXED_LINES for the header and driver).

The bounds are generous on purpose (a shared, loaded machine must not fail them), yet far
below what a quadratic gives: with the scanning name claim this replaced (each claim of a stem
tried `stem_1`, `stem_2`, ... from the start), the wide written-out step below takes minutes
to generate, and `test_the_budget_catches_the_scanning_name_claim` checks that the time
budget fails it (its code is also far over the lines budget: lane code still writes such a
product out position by position).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hlofuse.codegen.naming import Names
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.targets.c import generate_c

DATA = Path(__file__).parent.parent / "data"
PROGRAMS = sorted(p for folder in ("jax", "indexing", "linalg", "rollouts")
                  for p in (DATA / folder).glob("*.hlo") if ".tpu." not in p.name)
# The cost-model strategies with their default constants: no measurement of this machine.
STRATEGIES = ("none", "xla", "xla+relax_concatenate", "priority+default_costs",
              "max+default_costs", "xla-gpu")
# Seconds code generation may take beyond the fusion passes (it takes 0.1-3.5 s on the corpus,
# where the fusion passes take 0.1-13 s).
CODEGEN_MARGIN_S = 20.0
# C lines per HLO instruction of the unfused module (the corpus: at most about 17, under
# `none`, where every instruction is a kernel with its own function), and lines for the
# header, helpers and driver whatever the module's size.
LINES_PER_INSTRUCTION = 40
FIXED_LINES = 400


def over_budget(fusion_s: float, codegen_s: float, lines: int, instructions: int) -> str | None:
    """What a compile exceeded, or None."""
    if codegen_s > fusion_s + CODEGEN_MARGIN_S:
        return (f"code generation took {codegen_s:.1f} s, over the fusion passes' "
                f"{fusion_s:.1f} s + {CODEGEN_MARGIN_S:.0f} s")
    if lines > LINES_PER_INSTRUCTION * instructions + FIXED_LINES:
        return (f"{lines} lines of C for {instructions} HLO instructions, over "
                f"{LINES_PER_INSTRUCTION} a line + {FIXED_LINES}")
    return None


def measured(module: Module, strategy: str) -> str | None:
    """Fuse and generate `module` under `strategy`; what exceeded the budget, or None."""
    instructions = sum(1 for _ in module.all_instructions())
    start = time.perf_counter()
    fused = run_strategy(module, strategy, debug=False, log_decisions=False).module
    fused_at = time.perf_counter()
    generated = generate_c(fused)
    done = time.perf_counter()
    return over_budget(fused_at - start, done - fused_at, generated.source.text.count("\n"),
                       instructions)


@pytest.mark.thorough
@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_code_generation_is_within_budget_under_every_strategy(path: Path) -> None:
    module = parse_module(path.read_text(), str(path))
    failures = [f"{strategy}: {problem}" for strategy in STRATEGIES
                if (problem := measured(module, strategy)) is not None]
    assert not failures, f"{path.name}: " + "; ".join(failures)


def test_budget_bounds() -> None:
    assert over_budget(2.0, 2.0 + CODEGEN_MARGIN_S - 0.1, 100, 10) is None
    assert "code generation took" in str(over_budget(2.0, 2.0 + CODEGEN_MARGIN_S + 0.1, 100, 10))
    limit = LINES_PER_INSTRUCTION * 10 + FIXED_LINES
    assert over_budget(0.0, 0.0, limit, 10) is None
    assert "lines of C" in str(over_budget(0.0, 0.0, limit + 1, 10))


# A whole loop whose step multiplies each lane's 64 values by two 64 x 64 matrices written as
# element-wise products and sums (jnp.sum(w * x[:, None, :], axis=2)), the products named as
# a library names them, alike in their first 48 characters: lane code writes the 8,192
# products out, each a local named after its multiply, all claims of one stem. Measured on a
# loaded 2-core machine: 8.8 s to generate, 109 s with the scanning claim.
def _wide_step(matrices: int = 2) -> str:
    name = "product_of_the_weight_matrix_and_the_state_of_the_lane"
    lines = []
    total = "zero_sum"
    for k in range(matrices):
        lines += [
            f"  c{k} = f32[] constant({k + 1})",
            f"  cb{k} = f32[64,64] broadcast(c{k}), dimensions={{}}",
            f"  w{k} = f32[64,64] multiply(w, cb{k})",
            f"  wb{k} = f32[8,64,64] broadcast(w{k}), dimensions={{1,2}}",
            f"  {name}.{k} = f32[8,64,64] multiply(wb{k}, xb)",
            f"  summed{k} = f32[8,64] reduce({name}.{k}, zero), dimensions={{2}}, to_apply=add",
            f"  total{k} = f32[8,64] add({total}, summed{k})",
        ]
        total = f"total{k}"
    step = "\n".join(lines)
    return f"""
HloModule wide_step

cond {{
  cp = (s32[], f32[8,64]) parameter(0)
  ci = s32[] get-tuple-element(cp), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(ci, n), direction=LT
}}

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

body {{
  p = (s32[], f32[8,64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[8,64] get-tuple-element(p), index=1
  one = s32[] constant(1)
  next = s32[] add(i, one)
  w = f32[64,64] iota(), iota_dimension=1
  xb = f32[8,64,64] broadcast(x), dimensions={{0,2}}
  zero = f32[] constant(0)
  zero_sum = f32[8,64] broadcast(zero), dimensions={{}}
{step}
  scale = f32[] constant(0.001)
  scaled = f32[8,64] broadcast(scale), dimensions={{}}
  y = f32[8,64] multiply({total}, scaled)
  ROOT t = (s32[], f32[8,64]) tuple(next, y)
}}

ENTRY main {{
  x0 = f32[8,64] parameter(0)
  start = s32[] constant(0)
  init = (s32[], f32[8,64]) tuple(start, x0)
  loop = (s32[], f32[8,64]) while(init), condition=cond, body=body
  ROOT out = f32[8,64] get-tuple-element(loop), index=1
}}
"""


def _scanning_claim(self: Names, stem: str) -> str:
    """The claim before the per-stem counter: a scan from `stem_1` on every claim."""
    candidate, k = stem, 1
    while candidate in self.taken:
        candidate = f"{stem}_{k}"
        k += 1
    self.taken.add(candidate)
    return candidate


@pytest.mark.thorough
def test_the_budget_catches_the_scanning_name_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    module = parse_module(_wide_step())
    assert "code generation took" not in str(measured(module, "max+default_costs"))
    monkeypatch.setattr(Names, "_claim", _scanning_claim)
    assert "code generation took" in str(measured(module, "max+default_costs"))
