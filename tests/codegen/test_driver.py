"""The driver: a while loop with a known trip count runs as a counted loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value
from hlofuse.runtime.program import WhileThunk
from hlofuse.targets.c import compile_cpu
from hlofuse.targets.c import generate_c as generate

from tests.codegen.test_ops import assert_same

COUNTED = Path(__file__).parents[1] / "filecheck" / "codegen-c" / "driver-counted-while.hlo"


def test_the_trip_count_reaches_the_while_thunk() -> None:
    generated = generate(parse_module(COUNTED.read_text()))
    loops = [t for t in generated.program.thunks if isinstance(t, WhileThunk)]
    assert [t.trip_count for t in loops] == [5, None]


@pytest.mark.needs_cc
def test_a_counted_loop_matches_the_interpreter() -> None:
    module = parse_module(COUNTED.read_text())
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    expected = flatten_value(evaluate(module, [x]))
    executable = compile_cpu(module)
    for run in (executable, executable.run_thunks):
        actual = flatten_value(run(x))
        for k, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"output {k}")
    stepped = x
    for _ in range(5 + 3):  # the counted loop, then the one its condition stops
        stepped = stepped + np.float32(0.5)
    np.testing.assert_array_equal(expected[1], stepped)


def test_a_stated_count_is_trusted_over_the_condition() -> None:
    # XLA trusts known_trip_count and so does the driver: a count that disagrees with the
    # condition runs that many times (this one says 2 where the condition says 5).
    text = COUNTED.read_text().replace('"n":"5"', '"n":"2"')
    module = parse_module(text)
    x = np.zeros(8, np.float32)
    counter, state = compile_cpu(module)(x)
    assert int(counter) == 3  # the second loop counts from 0 to 3 after the first's 2 steps
    np.testing.assert_array_equal(state, np.full(8, 0.5 * 5, np.float32))


def test_the_listing_is_the_full_sources_tail() -> None:
    """The listing's layout (kernels first, the math header by name) and the full file's
    (the header written out) are checked by listing-and-full-source.hlo; the listing's code
    is the full file's, a small part of it."""
    listing = COUNTED.with_name("listing-and-full-source.hlo")
    source = generate(parse_module(listing.read_text())).source
    assert len(source.listing) < len(source.text) // 4
    assert source.listing.split("\n", 2)[2] in source.text
