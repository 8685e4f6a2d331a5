"""Values several of a step's lane loops read are computed once per step into scratch
(codegen/whole_loop_materialized.py, `_shared_values`): a physics step whose substeps each
read the step's sampled action and the previous substep's velocity computed both again in
every substep's loop, the velocity chain ever more often down the substeps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.codegen.product_tiles import best_tile
from hlofuse.ir.parser import parse_module
from hlofuse.reference.interpreter import evaluate, flatten_value

pytestmark = pytest.mark.needs_cc

ROLLOUTS = Path(__file__).parents[1] / "data" / "rollouts"


def test_substeps_read_the_steps_draws_and_velocities_from_scratch() -> None:
    """The particles rollout (4 substeps, each a product of the positions with the step's
    rotation, whose angle is a normal draw): the rotation's cosine and sine are computed
    once a step, not once per substep (the draw holds no state: its lanes' dimension comes
    from its readers, `value_lane_dims`); results equal the interpreter's."""
    module = parse_module((ROLLOUTS / "particles.cpu.hlo").read_text())
    data = np.load(ROLLOUTS / "particles.npz")
    inputs = [data["arg0"]]
    compiled = compile_module(module, "max")
    source = compiled.source()
    step = source[source.index("whole loop while.152"):]
    step = step[:step.index("/* kernel ")] if "/* kernel " in step else step
    assert step.count("hlofuse_cosf(") == 1, step.count("hlofuse_cosf(")
    assert step.count("hlofuse_sinf(") == 1, step.count("hlofuse_sinf(")
    expected = flatten_value(evaluate(module, inputs))
    for k, (a, e) in enumerate(zip(flatten_value(compiled(*inputs)), expected)):
        np.testing.assert_allclose(np.asarray(a), e, rtol=1e-5, atol=1e-6, err_msg=f"out{k}")


@pytest.mark.parametrize(("positions", "parts", "expected"), [
    (64, 4, (6, 2)),  # every multiply-add port busy: 12 sums, 8 loads a contracting position
    (64, 1, (13, 1)),  # one part: as many sums as registers allow less the loads' bound
    (1, 4, (1, 4)),  # an output layer of one position: four independent chains
    (3, 4, (3, 2)),  # 3 x 4 sums and 4 operand vectors would not fit 16 registers
])
def test_product_tiles(positions: int, parts: int, expected: tuple[int, int]) -> None:
    tile = best_tile(positions, parts)
    assert (tile.positions, tile.parts) == expected
    assert tile.fits()
