"""passes/rewrite.py: the rebuilding every frozen-IR pass shares."""

from __future__ import annotations

import numpy as np

from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction
from hlofuse.ir.ops import Op
from hlofuse.ir.parser import parse_module
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching
from hlofuse.reference.interpreter import evaluate, flatten_value

TEXT = """
HloModule m

%helper (a: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  ROOT %e = f32[] exponential(%a)
}

ENTRY %main (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  %n = f32[] negate(%x), metadata={op_name="neg" source_file="a.py" source_line=7}
  %c = f32[] call(%y), to_apply=%helper
  ROOT %s = f32[] add(%n, %c)
}
"""


def test_only_matching_instructions_of_computations_holding_one_are_rewritten() -> None:
    module = parse_module(TEXT)
    seen: list[tuple[str, str]] = []

    def times_minus_one(inst: Instruction, operands: tuple[Instruction, ...],
                        builder: RewriteBuilder) -> Instruction:
        seen.append((builder.name, inst.name))
        with builder.metadata_of(inst):
            minus_one = builder.constant(-1.0, DType.F32)
            return builder.add(Op.MULTIPLY, [operands[0], minus_one])

    rewritten, changed = rewrite_matching(module, lambda inst: inst.op is Op.NEGATE,
                                          times_minus_one)
    assert changed and seen == [("main", "n")]
    helper = next(c for c in module.computations if c.name == "helper")
    assert helper in rewritten.computations  # not rebuilt: the same object
    entry = {i.op: i for i in rewritten.entry.instructions}
    assert Op.NEGATE not in entry
    negate = next(i for i in module.entry.instructions if i.op is Op.NEGATE)
    # The new instructions carry the source line of the instruction they replace.
    assert entry[Op.MULTIPLY].metadata == negate.metadata == entry[Op.CONSTANT].metadata
    arguments = [np.float32(2.0), np.float32(0.5)]
    assert flatten_value(evaluate(rewritten, arguments)) == flatten_value(
        evaluate(module, arguments))


def test_no_match_gives_the_module_back_unchanged() -> None:
    module = parse_module(TEXT)

    def never(inst: Instruction, operands: tuple[Instruction, ...],
              builder: RewriteBuilder) -> Instruction:
        raise AssertionError(f"%{inst.name} does not match")

    assert rewrite_matching(module, lambda inst: inst.op is Op.SINE, never) == (module, False)


def test_a_rewrite_returning_none_keeps_the_instruction() -> None:
    module = parse_module(TEXT)
    rewritten, changed = rewrite_matching(module, lambda inst: inst.op is Op.NEGATE,
                                          lambda inst, operands, builder: None)
    assert not changed and rewritten is module
