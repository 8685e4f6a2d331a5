"""Shared by the CUDA tests: nvcc's presence and the corpus/CartPole modules as fused."""

from __future__ import annotations

import shutil

import pytest

from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module

from tests.conftest import load_corpus_case

HAS_NVCC = shutil.which("nvcc") is not None or shutil.which("/usr/local/cuda/bin/nvcc") is not None
needs_nvcc = pytest.mark.skipif(not HAS_NVCC, reason="no nvcc on the PATH")


def fused_corpus(name: str, strategy: str = "xla") -> Module:
    from hlofuse.fusion.strategies import run_strategy

    module = parse_module(load_corpus_case(name)[0], f"{name}.hlo")
    return run_strategy(module, strategy, debug=False).module
