"""rng-expansion: the opaque Threefry custom call rewritten into element-wise integer HLO.

`custom-call(k0, k1, x0, x1), custom_call_target="hlofuse_threefry2x32"` (four u32 arrays of
one shape; result the tuple (y0, y1), see reference/rnglib.py) is replaced by the 20 rounds of
Threefry-2x32 in plain HLO: the third key word k0 ^ k1 ^ 0x1BD11BDA, then five blocks of four
add / rotate (shift-left, shift-right-logical, or) / xor rounds, each block followed by the key
injection with the block number, as jax.random computes it. The instructions come from
`rnglib.threefry2x32_ops`, the sequence the front end traces for `impl="fused"`, so the bits are
those of the library call, and the call's users read a tuple (y0, y1) whose get-tuple-elements
`simplify` forwards. Every instruction is element-wise, so the random numbers fuse with their
users instead of being a kernel of their own and a fusion barrier.

Refused, and logged: custom calls to any other target (`unknown-custom-call-target`: hlofuse
knows no integer form of an unknown library), and a Threefry call whose operands or result do
not have the library's signature, or that is marked side-effecting (`threefry-signature`).

Mirrors XLA's RngBitGeneratorExpander / RngExpander, which rewrite `rng` into ThreeFry or
Philox integer arithmetic that is inlined and fused like any element-wise code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from hlofuse.ir.dtypes import DType
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op
from hlofuse.ir.shapes import Shape
from hlofuse.passes.dce import has_side_effect
from hlofuse.passes.decision_log import RewriteLog
from hlofuse.passes.rewrite import RewriteBuilder, rewrite_matching
from hlofuse.reference.rnglib import PARITY, THREEFRY_TARGET, threefry2x32_ops

if TYPE_CHECKING:
    from hlofuse.passes.decision_log import DecisionSink


def signature_problem(inst: Instruction) -> str | None:
    """Why a hlofuse_threefry2x32 call cannot be expanded, or None."""
    if len(inst.operands) != 4:
        return f"takes 4 operands (k0, k1, x0, x1), not {len(inst.operands)}"
    shapes = [o.shape for o in inst.operands]
    if any(s.dtype is not DType.U32 for s in shapes):
        return "operands must be u32 arrays, got " + ", ".join(s.text(False) for s in shapes)
    if len({s.dims for s in shapes}) != 1:
        return "operands must have one shape, got " + ", ".join(s.text(False) for s in shapes)
    words = shapes[0].dims
    result = inst.shape
    if (not result.is_tuple or len(result.elements) != 2
            or any(e.dtype is not DType.U32 or e.dims != words for e in result.elements)):
        return (f"must return (u32{list(words)}, u32{list(words)}), returns "
                f"{result.text(False)}")
    if has_side_effect(inst):
        return "is marked side-effecting, so it cannot be recomputed as plain arithmetic"
    return None


def expand_threefry(inst: Instruction, operands: tuple[Instruction, ...],
                    builder: RewriteBuilder) -> Instruction:
    """The tuple (y0, y1) of Threefry-2x32 built from element-wise ops (names are new)."""
    k0, k1, x0, x1 = operands
    dims = x0.shape.dims
    words: dict[int, Instruction] = {}

    def word(value: int) -> Instruction:  # one broadcast constant per value, as the front end
        if value not in words:
            scalar = builder.constant(value, DType.U32)
            words[value] = scalar if not dims else builder.add(
                Op.BROADCAST, [scalar], attrs={"dimensions": ()},
                shape=Shape.array(DType.U32, dims))
        return words[value]

    def binary(op: Op, a: Instruction, b: Instruction) -> Instruction:
        return builder.add(op, [a, b])

    with builder.metadata_of(inst):
        k2 = binary(Op.XOR, binary(Op.XOR, k0, k1), word(PARITY))
        y0, y1 = threefry2x32_ops(binary, word, (k0, k1, k2), x0, x1)
        return builder.add(Op.TUPLE, [y0, y1])


@dataclass(frozen=True, slots=True)
class RngExpansion:
    """Rewrites hlofuse_threefry2x32 custom calls into element-wise integer HLO."""

    name: ClassVar[str] = "rng-expansion"

    def run(self, module: Module, log: DecisionSink | None = None) -> tuple[Module, bool]:
        records = RewriteLog(log, self.name)

        def expand(inst: Instruction, operands: tuple[Instruction, ...],
                   builder: RewriteBuilder) -> Instruction | None:
            target = inst.attrs.get("custom_call_target")
            if target != THREEFRY_TARGET:
                records.refused(builder.name, inst, "unknown-custom-call-target",
                                f"cannot expand %{inst.name}: custom-call target {target!r} "
                                "has no known integer form", target=str(target))
                return None
            problem = signature_problem(inst)
            if problem is not None:
                records.refused(builder.name, inst, "threefry-signature",
                                f"cannot expand %{inst.name}: {THREEFRY_TARGET} {problem}")
                return None
            start = len(builder.instructions)
            expanded = expand_threefry(inst, operands, builder)
            count = len(builder.instructions) - start
            records.rewrote(builder.name, inst, "threefry-expanded",
                            f"expanded %{inst.name} ({THREEFRY_TARGET} of "
                            f"{inst.operands[2].shape.text(False)}) into {count} "
                            "element-wise instructions", instructions=count)
            return expanded

        return rewrite_matching(module, lambda inst: inst.op is Op.CUSTOM_CALL, expand)
