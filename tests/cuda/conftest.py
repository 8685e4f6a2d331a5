"""Shared by the CUDA tests: nvcc's presence and the corpus/CartPole modules as fused."""

from __future__ import annotations

import pytest

from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module

from tests.conftest import load_corpus_case

# Skipped without nvcc, and under --no-cc (the fast tier runs no compiler): tests/conftest.py.
needs_nvcc = pytest.mark.needs_nvcc


def fused_corpus(name: str, strategy: str = "xla") -> Module:
    from hlofuse.fusion.strategies import run_strategy

    module = parse_module(load_corpus_case(name)[0], f"{name}.hlo")
    return run_strategy(module, strategy, debug=False).module
