"""`make test` keeps each `xdist_group` on one worker (--dist loadgroup): the tests of a group
share work cached per process (the xla-gpu corpus comparisons, the import probe), which a group
spread over the workers repeats on each. pytest-xdist reads a test's group from an `@group`
suffix of its node id; tests/conftest.py adds it where xdist's own did not take."""

from __future__ import annotations

import pytest

from tests.conftest import under_xdist

GROUP = "xdist_group_check"


def group_of(node_id: str) -> str | None:
    """The group xdist's loadgroup scheduler reads from a node id: after the last `@` that
    follows the parameters' brackets."""
    at, bracket = node_id.rfind("@"), node_id.rfind("]")
    return node_id[at + 1:] if at > bracket else None


@pytest.mark.xdist_group(GROUP)
def test_a_grouped_test_is_scheduled_by_its_group(request: pytest.FixtureRequest) -> None:
    if not (under_xdist() and request.config.getvalue("loadgroup")):
        pytest.skip("checks the scheduling of `make test` (pytest-xdist, --dist loadgroup)")
    assert group_of(request.node.nodeid) == GROUP


@pytest.mark.xdist_group(GROUP)
@pytest.mark.parametrize("case", ["a@b", "c"])
def test_a_parametrized_grouped_test_is_scheduled_by_its_group(
        request: pytest.FixtureRequest, case: str) -> None:
    if not (under_xdist() and request.config.getvalue("loadgroup")):
        pytest.skip("checks the scheduling of `make test` (pytest-xdist, --dist loadgroup)")
    assert request.node.nodeid.endswith(f"[{case}]@{GROUP}")
    assert group_of(request.node.nodeid) == GROUP


def test_an_ungrouped_test_has_no_group(request: pytest.FixtureRequest) -> None:
    assert group_of(request.node.nodeid) is None


def test_the_group_is_read_after_the_parameters() -> None:
    assert group_of("t.py::test[a@b]") is None
    assert group_of("t.py::test[a@b]@g") == "g"
    assert group_of("t.py::Class::test@g") == "g"
