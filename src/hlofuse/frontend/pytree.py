"""Pytrees: nested tuples, lists, dicts, namedtuples and None, flattened to a list of leaves."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# Node kinds. A leaf is anything that is not a container.
LEAF = "leaf"
NONE = "none"
TUPLE = "tuple"
LIST = "list"
DICT = "dict"
NAMEDTUPLE = "namedtuple"


@dataclass(frozen=True, slots=True)
class TreeDef:
    """The structure of a pytree without its leaves; hashable, so it can key a cache."""

    kind: str
    children: tuple[TreeDef, ...] = ()
    # dict keys (sorted, as JAX orders them) or the namedtuple class
    meta: Any = None

    @property
    def num_leaves(self) -> int:
        if self.kind == LEAF:
            return 1
        return sum(c.num_leaves for c in self.children)

    def unflatten(self, leaves: list[Any] | tuple[Any, ...]) -> Any:
        """Rebuild the tree from leaves in flattening order."""
        iterator = iter(leaves)
        tree = _build(self, iterator)
        if next(iterator, _END) is not _END:
            raise ValueError(f"too many leaves for a tree with {self.num_leaves}")
        return tree

    def __str__(self) -> str:
        if self.kind == LEAF:
            return "*"
        if self.kind == NONE:
            return "None"
        inner = ", ".join(str(c) for c in self.children)
        if self.kind == LIST:
            return f"[{inner}]"
        if self.kind == DICT:
            return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(self.meta, self.children)) + "}"
        if self.kind == NAMEDTUPLE:
            return f"{self.meta.__name__}({inner})"
        return f"({inner}{',' if len(self.children) == 1 else ''})"


_END = object()
LEAF_DEF = TreeDef(LEAF)


def _build(treedef: TreeDef, leaves: Iterator[Any]) -> Any:
    if treedef.kind == LEAF:
        leaf = next(leaves, _END)
        if leaf is _END:
            raise ValueError("too few leaves for the tree")
        return leaf
    if treedef.kind == NONE:
        return None
    children = [_build(c, leaves) for c in treedef.children]
    if treedef.kind == TUPLE:
        return tuple(children)
    if treedef.kind == LIST:
        return children
    if treedef.kind == DICT:
        return dict(zip(treedef.meta, children))
    return treedef.meta(*children)


def _is_namedtuple(x: object) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def flatten(tree: Any) -> tuple[list[Any], TreeDef]:
    """(leaves, structure) of `tree`."""
    leaves: list[Any] = []
    treedef = _flatten(tree, leaves, None)
    return leaves, treedef


def flatten_with_paths(tree: Any) -> tuple[list[tuple[str, Any]], TreeDef]:
    """Like `flatten`, with each leaf's path written as Python indexing (`[0]['w']`)."""
    leaves: list[tuple[str, Any]] = []
    treedef = _flatten(tree, leaves, "")
    return leaves, treedef


def _flatten(tree: Any, leaves: list[Any], path: str | None) -> TreeDef:
    def sub(key: object) -> str | None:
        return None if path is None else f"{path}[{key!r}]"

    if tree is None:
        return TreeDef(NONE)
    if _is_namedtuple(tree):
        children = tuple(_flatten(v, leaves, None if path is None else f"{path}.{f}")
                         for f, v in zip(type(tree)._fields, tree))
        return TreeDef(NAMEDTUPLE, children, type(tree))
    if isinstance(tree, tuple | list):
        children = tuple(_flatten(v, leaves, sub(i)) for i, v in enumerate(tree))
        return TreeDef(TUPLE if isinstance(tree, tuple) else LIST, children)
    if isinstance(tree, dict):
        try:
            keys = tuple(sorted(tree))
        except TypeError:
            raise TypeError(f"dict keys of a pytree must be sortable, got {list(tree)}") from None
        children = tuple(_flatten(tree[k], leaves, sub(k)) for k in keys)
        return TreeDef(DICT, children, keys)
    leaves.append(tree if path is None else (path, tree))
    return LEAF_DEF
