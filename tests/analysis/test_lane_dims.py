"""How the environment dimension moves through ops (hlofuse.analysis.lane_dims)."""

from __future__ import annotations

from hlofuse.analysis.lane_dims import Mixed, value_lane_dim
from hlofuse.ir.parser import parse_module


def test_a_reshape_keeps_the_environment_dimension_only_where_its_size_stays() -> None:
    def reshape(source: str, target: str) -> object:
        module = parse_module(f"""HloModule m

ENTRY main {{
  p = {source} parameter(0)
  ROOT r = {target} reshape(p)
}}
""")
        return value_lane_dim(4, module.entry.root, [0])

    assert reshape("f32[4,3]{1,0}", "f32[1,4,3]{2,1,0}") == 1
    assert isinstance(reshape("f32[4,3]{1,0}", "f32[12]{0}"), Mixed)
    # Around a zero-size dimension the element counts before and after dimension 0 match
    # (1 and 0) though it holds 2, not the 4 environments: only its size tells.
    assert isinstance(reshape("f32[4,0]{1,0}", "f32[2,0,2]{2,1,0}"), Mixed)
