"""XLA's order of an instruction's users (`HloInstruction::Users::RemoveUser` moves the last
user into the removed one's place), which xla-gpu's priority fusion follows: a producer is
fused into its users in that order, and the fusions made first lose later ties."""

from __future__ import annotations

from hlofuse.fusion.beyond_xla.priority import fuse
from hlofuse.fusion.graphs.module_graph import ModuleGraph
from hlofuse.ir.parser import parse_module

FOUR_USERS = """
HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  a = f32[4] negate(x)
  b = f32[4] exponential(x)
  c = f32[4] sqrt(x)
  d = f32[4] abs(x)
  ab = f32[4] add(a, b)
  cd = f32[4] add(c, d)
  ROOT r = f32[4] add(ab, cd)
}
"""


def _users_after_removing_a(xla_order: bool) -> list[str]:
    with ModuleGraph.from_module(parse_module(FOUR_USERS)) as graphs:
        graphs.xla_user_order = xla_order
        entry = graphs.entry
        assert entry is not None
        nodes = {n.name: n for n in entry.nodes}
        entry.replace_operand(nodes["ab"], 0, nodes["x"])
        entry.remove(nodes["a"])
        return [u.name for u in nodes["x"].users]


def test_removing_a_user_moves_the_last_one_into_its_place() -> None:
    """x's users are a, b, c, d, then ab once it reads x: removing a puts ab (the last) first
    under XLA's order; otherwise the others keep their order."""
    assert _users_after_removing_a(True) == ["ab", "b", "c", "d"]
    assert _users_after_removing_a(False) == ["b", "c", "d", "ab"]


def _users_after_fusing_a(xla_order: bool) -> list[str]:
    with ModuleGraph.from_module(parse_module(FOUR_USERS)) as graphs:
        graphs.xla_user_order = xla_order
        entry = graphs.entry
        assert entry is not None
        nodes = {n.name: n for n in entry.nodes}
        fusion = fuse(nodes["a"], nodes["ab"])
        entry.remove(nodes["a"])
        return [("F" if u is fusion else u.name) for u in nodes["x"].users]


def test_a_fused_producer_leaves_its_place_to_the_fusion() -> None:
    """Fusing a into ab: the fusion F reads x (appended to x's users, XLA's AddUser), then a
    is removed and the last of x's users, F, takes its place (PriorityFusion::Fuse, then
    RemoveInstruction): F, b, c, d; kept in order, F would come last."""
    assert _users_after_fusing_a(True) == ["F", "b", "c", "d"]
    assert _users_after_fusing_a(False) == ["b", "c", "d", "F"]
