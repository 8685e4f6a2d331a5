"""XLA's BatchedGatherScatterNormalizer, GatherSimplifier and ScatterSimplifier as `xla-gpu`
runs them: batched gathers and scatters get iota index columns, then every gather and scatter
is put in XLA's canonical form; the values stay the reference interpreter's."""

from __future__ import annotations

import numpy as np

from hlofuse.api import compile_module
from hlofuse.fusion.xla_gpu.gather_scatter import BatchedGatherScatterNormalizer
from hlofuse.fusion.xla_gpu.gather_scatter_simplifier import GatherSimplifier, ScatterSimplifier
from hlofuse.fusion.xla_gpu.ids import InstructionIds
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.parser import parse_module
from hlofuse.ir.printer import instruction_text
from hlofuse.passes.dce import DeadCodeElimination
from hlofuse.passes.decision_log import DecisionLog
from hlofuse.passes.manager import Pass, Pipeline
from hlofuse.reference.interpreter import evaluate, flatten_value

# jax.vmap of x[i] and of x.at[i].add(v), as JAX lowers them (rollout_bandit's gather.4 and
# scatter-add.10), and of a take with the index vector dimension implicit (its gather.3).
BATCHED = """
HloModule batched
add_s32 {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT sum = s32[] add(a, b)
}
ENTRY e {
  x = f32[8,10] parameter(0)
  i = s32[8,1] parameter(1)
  c = s32[8,10] parameter(2)
  v = s32[8] parameter(3)
  j = s32[8,1] parameter(4)
  g = f32[8,1] gather(x, i), offset_dims={1}, collapsed_slice_dims={}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=1, slice_sizes={1,1}, indices_are_sorted=true
  s = s32[8,10] scatter(c, i, v), update_window_dims={}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={0}, index_vector_dim=1, indices_are_sorted=true, unique_indices=true, to_apply=add_s32
  t = f32[8,1] gather(x, j), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}
  ROOT r = (f32[8,1], s32[8,10], f32[8,1]) tuple(g, s, t)
}
"""


def _args() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((8, 10)).astype(np.float32),
            rng.integers(0, 10, (8, 1)).astype(np.int32),
            rng.integers(-5, 5, (8, 10)).astype(np.int32),
            rng.integers(-5, 5, (8,)).astype(np.int32),
            rng.integers(0, 10, (8, 1)).astype(np.int32)]


def _run(module: Module, passes: list[Pass]) -> tuple[Module, DecisionLog]:
    log = DecisionLog()
    out, _ = Pipeline([*passes, DeadCodeElimination()], debug=True, log=log).run(module)
    return out, log


def _same_values(before: Module, after: Module, args: list[np.ndarray]) -> None:
    for want, got in zip(flatten_value(evaluate(before, args)),
                         flatten_value(evaluate(after, args)), strict=True):
        np.testing.assert_array_equal(got, want)


def _text(inst: Instruction) -> str:
    return instruction_text(inst).split(", metadata=")[0]


def test_batched_gathers_and_scatters_get_iota_index_columns() -> None:
    module = parse_module(BATCHED)
    ids = InstructionIds()
    ids.record(module)
    out, log = _run(module, [BatchedGatherScatterNormalizer(ids)])
    gather, scatter, implicit = out.entry.root.operands
    # The replacements keep the names; the batch position is an iota column in front.
    assert _text(gather) == (
        f"g = f32[8,1]{{1,0}} gather(x, {gather.operands[1].name}), "
        "offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0,1}, "
        "index_vector_dim=1, slice_sizes={1,1}, indices_are_sorted=true")
    columns = gather.operands[1]
    iota, indices = columns.operands
    assert _text(iota) == f"{iota.name} = s32[8,1]{{1,0}} iota(), iota_dimension=0"
    assert indices.name == "i"
    assert scatter.name == "s" and scatter.ints("inserted_window_dims") == (0, 1)
    assert scatter.ints("scatter_dims_to_operand_dims") == (0, 1)
    assert not scatter.ints("input_batching_dims") and scatter.attrs["unique_indices"]
    # An implicit index vector dimension is made explicit before the concatenation.
    reshaped = implicit.operands[1].operands[1]
    assert reshaped.op.text == "reshape" and reshaped.shape.dims == (8, 1, 1)
    assert implicit.operands[1].shape.dims == (8, 1, 2)
    assert [r.rule for r in log] == ["batched-gather-scatter-normalized"] * 3
    # New instructions to XLA: their ids come after every old one.
    assert not {"g", "s", "t"} & ids.ranks.keys() and "x" in ids.ranks
    _same_values(module, out, _args())


def test_indices_too_narrow_for_the_batch_are_widened() -> None:
    """PromoteTypeForSize: an s8 index column cannot count 300 rows, so the indices become
    s32 before the iota joins them."""
    module = parse_module("""
HloModule narrow
ENTRY e {
  x = f32[300,4] parameter(0)
  i = s8[300,1] parameter(1)
  ROOT g = f32[300,1] gather(x, i), offset_dims={1}, collapsed_slice_dims={}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=1, slice_sizes={1,1}
}
""")
    out, _ = _run(module, [BatchedGatherScatterNormalizer()])
    columns = out.entry.root.operands[1]
    assert columns.shape.text(False) == "s32[300,2]"
    assert [o.op.text for o in columns.operands] == ["iota", "convert"]
    rng = np.random.default_rng(1)
    _same_values(module, out, [rng.standard_normal((300, 4)).astype(np.float32),
                               rng.integers(0, 4, (300, 1)).astype(np.int8)])


def test_normalised_gathers_and_scatters_take_xla_s_canonical_form() -> None:
    """After the normaliser, rollout_bandit's gather and scatter as XLA's optimised HLO has
    them: the gather keeps every slice dimension (f32[8,1,1], offset_dims={1,2}) and is
    reshaped back under its own name; the scatter's updates are reshaped to s32[8,1,1]."""
    module = parse_module(BATCHED)
    out, log = _run(module, [BatchedGatherScatterNormalizer(), GatherSimplifier(),
                             ScatterSimplifier()])
    gather, scatter, implicit = out.entry.root.operands
    assert gather.name == "g" and gather.op.text == "reshape"
    canonical = gather.operands[0]
    assert _text(canonical).startswith(
        f"{canonical.name} = f32[8,1,1]{{2,1,0}} gather(x, {canonical.operands[1].name}), "
        "offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0,1}, "
        "index_vector_dim=1, slice_sizes={1,1}")
    assert scatter.name == "s"
    assert scatter.ints("update_window_dims") == (1, 2)
    assert not scatter.ints("inserted_window_dims")
    updates = scatter.operands[2]
    assert updates.op.text == "reshape" and updates.shape.dims == (8, 1, 1)
    # The implicit index vector: the indices [8,1,2] collapse to [8,2].
    node = implicit
    while node.op.text != "gather":
        node = node.operands[0]
    assert node.operands[1].shape.dims == (8, 2)
    rules = [r.rule for r in log]
    assert rules.count("gather-simplified") == 2 and rules.count("scatter-simplified") == 1
    _same_values(module, out, _args())


def test_a_permuted_start_index_map_transposes_the_operand() -> None:
    """A gather of rows by column index: the operand is transposed so that the mapped
    dimension leads, and the result transposed back; the offset dimension stays in front."""
    module = parse_module("""
HloModule columns
ENTRY e {
  x = f32[5,7] parameter(0)
  i = s32[3] parameter(1)
  ROOT g = f32[5,3] gather(x, i), offset_dims={0}, collapsed_slice_dims={1}, start_index_map={1}, index_vector_dim=1, slice_sizes={5,1}
}
""")
    out, _ = _run(module, [GatherSimplifier()])
    root = out.entry.root
    assert root.name == "g" and root.op.text == "transpose"
    ops = []
    node = root
    while node.operands:
        ops.append(node.op.text)
        node = node.operands[0]
    assert ops == ["transpose", "reshape", "transpose", "gather", "transpose"]
    rng = np.random.default_rng(2)
    _same_values(module, out, [rng.standard_normal((5, 7)).astype(np.float32),
                               rng.integers(0, 7, (3,)).astype(np.int32)])


def test_one_index_is_left_to_xla_s_expanders() -> None:
    """A gather or scatter of one index is what XLA's GatherExpander and ScatterExpander turn
    into a dynamic slice or dynamic-update-slice (the scatter: scatter_expander.py; the gather:
    not modelled): the simplifiers leave it."""
    module = parse_module("""
HloModule single
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT sum = f32[] add(a, b)
}
ENTRY e {
  x = f32[8,10,2] parameter(0)
  i = s32[1] parameter(1)
  u = f32[8,2] parameter(2)
  g = f32[8,2] gather(x, i), offset_dims={0,1}, collapsed_slice_dims={1}, start_index_map={1}, index_vector_dim=0, slice_sizes={8,1,2}
  s = f32[8,10,2] scatter(x, i, u), update_window_dims={0,1}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, index_vector_dim=0, to_apply=add_f32
  ROOT r = (f32[8,2], f32[8,10,2]) tuple(g, s)
}
""")
    out, log = _run(module, [GatherSimplifier(), ScatterSimplifier()])
    assert [o.op.text for o in out.entry.root.operands] == ["gather", "scatter"]
    assert not list(log)


def test_xla_gpu_compiles_the_normalised_forms_to_the_reference_values() -> None:
    """The whole xla-gpu pipeline on the batched module, compiled to C: the normalised and
    simplified gathers and scatters fused and run as the reference interpreter computes the
    original ones."""
    module = parse_module(BATCHED)
    args = _args()
    compiled = compile_module(module, "xla-gpu", "cpu")
    rules = {r.rule for r in compiled.fusion.decisions}
    assert {"batched-gather-scatter-normalized", "gather-simplified",
            "scatter-simplified"} <= rules
    for got, want in zip(compiled(*args), flatten_value(evaluate(module, args)), strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)


def test_the_simplifiers_leave_batched_forms_to_the_normaliser() -> None:
    """XLA runs the normaliser first; the simplifiers alone do not touch a gather or scatter
    that still has batching dimensions."""
    out, log = _run(parse_module(BATCHED), [GatherSimplifier(), ScatterSimplifier()])
    assert [o.op.text for o in out.entry.root.operands] == ["gather", "scatter", "gather"]
    assert not list(log)
