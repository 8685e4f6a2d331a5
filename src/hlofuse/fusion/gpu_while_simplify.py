"""The loop simplification `xla-gpu` runs before fusion, as XLA's GPU pipeline does: XLA's
WhileLoopSimplifier (`passes/while_loop_simplifier.py`) with the arithmetic identities of its
AlgebraicSimplifier (`passes/arithmetic_identities.py`) and its HloConstantFolding
(`passes/constant_folding.py`), in a fixed point with `simplify`, CSE and DCE (the strategy
adds those), as gpu_compiler.cc's simplification pipeline runs them."""

from __future__ import annotations

from hlofuse.passes.arithmetic_identities import ArithmeticIdentities
from hlofuse.passes.constant_folding import ConstantFolding
from hlofuse.passes.manager import Pass
from hlofuse.passes.while_loop_simplifier import WhileLoopSimplifier

GPU_LOOP_SIMPLIFICATION: tuple[Pass, ...] = (WhileLoopSimplifier(), ArithmeticIdentities(),
                                             ConstantFolding())
# For `hlofuse opt -p` and the rule catalogue's pass list.
GPU_LOOP_PASSES: tuple[type[Pass], ...] = (WhileLoopSimplifier, ArithmeticIdentities,
                                           ConstantFolding)
