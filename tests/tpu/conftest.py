"""Shared by the TPU target's tests: JAX's presence, the chip's, and fused modules.

Tests that need the chip are marked `tpu` and skipped where JAX finds no TPU device; every
other test here runs the same Pallas kernels with `interpret=True` (backend `tpu-interpret`)
or lowers them for the TPU without one, and is skipped only where JAX is not installed.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("jax.experimental.pallas", reason="JAX with Pallas is not installed")


@functools.cache
def has_tpu() -> bool:
    from hlofuse.targets.tpu import tpu_missing

    return tpu_missing() is None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="no TPU device here (the `tpu` tests run on the chip)")
    for item in items:
        if item.get_closest_marker("tpu") is not None and not has_tpu():
            item.add_marker(skip)
