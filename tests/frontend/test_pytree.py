"""Pytrees: flattening order, round trips, paths."""

from __future__ import annotations

from collections import namedtuple

import pytest

from hlofuse.frontend import pytree

Point = namedtuple("Point", ["x", "y"])


def test_round_trip_of_nested_containers() -> None:
    tree = {"b": [1, (2, None)], "a": Point(3, {"z": 4})}
    leaves, treedef = pytree.flatten(tree)
    assert leaves == [3, 4, 1, 2]  # dict keys sorted, as JAX orders them
    assert treedef.num_leaves == 4
    rebuilt = treedef.unflatten([10, 20, 30, 40])
    assert rebuilt == {"b": [30, (40, None)], "a": Point(10, {"z": 20})}
    assert isinstance(rebuilt["a"], Point)
    assert isinstance(rebuilt["b"], list) and isinstance(rebuilt["b"][1], tuple)


def test_structures_compare_and_hash() -> None:
    a = pytree.flatten((1, [2, 3]))[1]
    b = pytree.flatten((7, [8, 9]))[1]
    c = pytree.flatten((7, (8, 9)))[1]
    assert a == b and hash(a) == hash(b)
    assert a != c
    assert str(a) == "(*, [*, *])"


def test_paths_name_each_leaf() -> None:
    leaves, _ = pytree.flatten_with_paths(({"w": 1}, [2], Point(3, 4)))
    assert [p for p, _ in leaves] == ["[0]['w']", "[1][0]", "[2].x", "[2].y"]


def test_unflatten_checks_the_leaf_count() -> None:
    _, treedef = pytree.flatten((1, 2))
    with pytest.raises(ValueError, match="too few"):
        treedef.unflatten([1])
    with pytest.raises(ValueError, match="too many"):
        treedef.unflatten([1, 2, 3])
