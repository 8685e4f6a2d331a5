"""The loop simplification `xla-gpu` runs before fusion, as XLA's GPU pipeline does: XLA's
WhileLoopSimplifier (`passes/while_loop_simplifier.py`), its DotDecomposer and
DotStrengthReduction (`passes/dot_strength_reduction.py`), the arithmetic identities and the
pred conditional index of its AlgebraicSimplifier (`passes/arithmetic_identities.py`,
`passes/conditional_simplifier.py`), its ReshapeMover (`passes/reshape_mover.py`, after the
while-loop simplifier and before constant folding, as there), its HloConstantFolding
(`passes/constant_folding.py`) and its ConditionalSimplifier
(`passes/conditional_simplifier.py`), in a fixed point with `simplify`, CSE and DCE (the
strategy adds those), as gpu_compiler.cc's simplification pipeline runs them."""

from __future__ import annotations

from hlofuse.passes.arithmetic_identities import ArithmeticIdentities
from hlofuse.passes.computation_deduplicator import ComputationDeduplicator
from hlofuse.passes.conditional_simplifier import ConditionalPredIndex, ConditionalSimplifier
from hlofuse.passes.constant_folding import ConstantFolding
from hlofuse.passes.dot_strength_reduction import DotDecomposer, DotStrengthReduction
from hlofuse.passes.manager import Pass
from hlofuse.passes.reshape_mover import ReshapeMover
from hlofuse.passes.while_loop_simplifier import WhileLoopSimplifier

GPU_LOOP_SIMPLIFICATION: tuple[Pass, ...] = (WhileLoopSimplifier(), DotDecomposer(),
                                             DotStrengthReduction(),
                                             ArithmeticIdentities(),
                                             ConditionalPredIndex(), ReshapeMover(),
                                             ConstantFolding(),
                                             ConditionalSimplifier())
# For `hlofuse opt -p` and the rule catalogue's pass list.
GPU_LOOP_PASSES: tuple[type[Pass], ...] = (WhileLoopSimplifier, DotDecomposer,
                                           DotStrengthReduction,
                                           ArithmeticIdentities,
                                           ConditionalPredIndex, ReshapeMover,
                                           ConstantFolding,
                                           ConditionalSimplifier, ComputationDeduplicator)
