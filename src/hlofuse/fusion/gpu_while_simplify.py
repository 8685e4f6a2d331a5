"""The loop simplification `xla-gpu` runs before fusion, as XLA's GPU pipeline does: XLA's
WhileLoopSimplifier (`passes/while_loop_simplifier.py`) with the arithmetic identities of its
AlgebraicSimplifier (`passes/arithmetic_identities.py`), in a fixed point with `simplify`, CSE
and DCE (the strategy adds those)."""

from __future__ import annotations

from hlofuse.passes.arithmetic_identities import ArithmeticIdentities
from hlofuse.passes.manager import Pass
from hlofuse.passes.while_loop_simplifier import WhileLoopSimplifier

GPU_LOOP_SIMPLIFICATION: tuple[Pass, ...] = (WhileLoopSimplifier(), ArithmeticIdentities())
# For `hlofuse opt -p` and the rule catalogue's pass list.
GPU_LOOP_PASSES: tuple[type[Pass], ...] = (WhileLoopSimplifier, ArithmeticIdentities)
