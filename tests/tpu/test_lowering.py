"""Every Pallas kernel the TPU target forms lowers to Mosaic for the TPU without one
(`jax.jit(f).trace(...).lower(lowering_platforms=("tpu",))`, which raises on a primitive Mosaic
does not lower), and the command line runs and lowers with the TPU backends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hlofuse.api import compile_module
from hlofuse.envs import cartpole
from hlofuse.fusion.strategies import run_strategy
from hlofuse.ir.hlo import Module
from hlofuse.ir.parser import parse_module
from hlofuse.studies.cartpole_study import SEQUENCE, is_available, known_steps
from hlofuse.targets.tpu.listing import lower_for_tpu, wide_block_indices
from hlofuse.targets.tpu.program import kernel_structs, plan_kernels, uses_wide_types

from tests.conftest import CORPUS, load_corpus_case

SRC = Path(__file__).parents[2] / "src"


def assert_every_kernel_lowers(module: Module) -> int:
    """Every Pallas kernel lowers for the TPU as the program runs it (x64 enabled for a
    program with 64-bit values), with int32 block indices (the chip refuses i64 ones)."""
    lowered = 0
    x64 = uses_wide_types(module)
    for kernel in plan_kernels(module, interpret=True):
        if kernel.mode != "pallas":
            assert kernel.reason, f"{kernel.name}: an XLA operation must say why"
            continue
        text = lower_for_tpu(kernel, kernel_structs(kernel), x64)
        assert "tpu" in text, kernel.name  # the Mosaic module (memrefs in tpu memory spaces)
        assert not wide_block_indices(text), (kernel.name, wide_block_indices(text))
        lowered += 1
    return lowered


@pytest.mark.parametrize("name", ["baseline", "max"])
def test_cartpole_kernels_lower_for_the_tpu(name: str) -> None:
    step = known_steps()[name]
    fused = run_strategy(cartpole.trace(step.variant, 256, 4, 0), step.strategy,
                         debug=False).module
    assert assert_every_kernel_lowers(fused) > 0


@pytest.mark.thorough
@pytest.mark.parametrize("step", [s for s in SEQUENCE if s.is_default], ids=lambda s: s.name)
def test_every_cartpole_variant_lowers(step: object) -> None:
    from hlofuse.studies.cartpole_study import StudyStep

    assert isinstance(step, StudyStep)
    if not is_available(step.strategy):
        pytest.skip(f"strategy {step.strategy} not available")
    fused = run_strategy(cartpole.trace(step.variant, 256, 4, 0), step.strategy,
                         debug=False).module
    assert_every_kernel_lowers(fused)


@pytest.mark.thorough
@pytest.mark.parametrize("name", CORPUS)
def test_corpus_kernels_lower_for_the_tpu(name: str) -> None:
    module = parse_module(load_corpus_case(name)[0], name)
    assert_every_kernel_lowers(run_strategy(module, "xla", debug=False).module)


WIDE = """HloModule wide
ENTRY e {
  p = f32[8,128] parameter(0)
  c = f32[] parameter(1)
  w = s64[4] parameter(2)
  b = f32[8,128] broadcast(c), dimensions={}
  m = f32[8,128] multiply(p, b)
  t = f32[128,8] transpose(m), dimensions={1,0}
  ROOT r = (f32[128,8], s64[4]) tuple(t, w)
}
"""


def test_block_indices_are_int32_under_x64() -> None:
    """A program with 64-bit values runs with x64 enabled, where Pallas's default index map
    (a BlockSpec without one: whole arrays, SMEM scalars) returns i64 zeros, which Mosaic
    refuses on the chip. Tiled kernels with a 0-d SMEM input and whole-array kernels lower
    with int32 block indices, and compute what the interpreter does."""
    module = parse_module(WIDE, "wide")
    assert uses_wide_types(module)
    fused = run_strategy(module, "none", debug=False).module
    layouts = {k.layout for k in plan_kernels(fused, interpret=True) if k.mode == "pallas"}
    assert {"tiled", "whole"} <= layouts
    assert assert_every_kernel_lowers(fused) >= 3
    inputs = [np.arange(1024, dtype=np.float32).reshape(8, 128), np.float32(3),
              np.arange(4, dtype=np.int64)]
    got = compile_module(module, "none", "tpu-interpret").run_flat(inputs)
    np.testing.assert_array_equal(got[0], (inputs[0] * 3).T)
    np.testing.assert_array_equal(got[1], inputs[2])


HLO = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p = f32[1024] parameter(0)
  c = f32[] constant(2)
  bc = f32[1024] broadcast(c), dimensions={}
  m = f32[1024] multiply(p, bc)
  ROOT r = f32[] reduce(m, c), dimensions={0}, to_apply=add
}
"""


def _hlofuse(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hlofuse.cli", *args], capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": str(SRC), "PATH": ""})


# Two subprocesses that import JAX (over 10 s): thorough (make test), not make fast.
@pytest.mark.thorough
def test_cli_runs_and_lowers(tmp_path: Path) -> None:
    path = tmp_path / "m.hlo"
    path.write_text(HLO)
    out = tmp_path / "out.npz"
    inputs = tmp_path / "in.npz"
    import numpy as np

    x = np.linspace(-1, 1, 1024, dtype=np.float32)
    np.savez(inputs, arg0=x)
    run = _hlofuse("run", str(path), "--backend", "tpu-interpret", "--inputs", str(inputs),
                   "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert float(np.load(out)["out0"]) == pytest.approx(float(np.sum(x * 2) + 2), abs=1e-4)
    mosaic = _hlofuse("compile", str(path), "--backend", "tpu", "--emit", "mosaic")
    assert mosaic.returncode == 0, mosaic.stderr
    assert "vector.multi_reduction <add>" in mosaic.stdout and "tpu.memory_space" in mosaic.stdout
    listing = _hlofuse("compile", str(path), "--backend", "tpu", "--emit", "pallas")
    assert "pallas_call whole" in listing.stdout


# A subprocess that imports JAX (seconds): thorough (make test), not make fast.
@pytest.mark.thorough
def test_run_on_the_tpu_backend_without_a_chip_says_so(tmp_path: Path) -> None:
    from tests.tpu.conftest import has_tpu

    if has_tpu():
        pytest.skip("a TPU is here")
    path = tmp_path / "m.hlo"
    path.write_text(HLO)
    run = _hlofuse("run", str(path), "--backend", "tpu")
    assert run.returncode == 2
    assert "no TPU device here" in run.stderr and "Traceback" not in run.stderr


def test_block_rows_follow_the_vmem_model() -> None:
    """An element-wise kernel over three f32 arrays gets blocks of as many rows as fit the
    budget (its arrays double-buffered plus a value per instruction); a long body gets fewer;
    a small array is one block."""
    from hlofuse.ir.dtypes import DType
    from hlofuse.ir.shapes import Shape
    from hlofuse.targets.tpu.blocks import BLOCK_VMEM_BYTES, LANES, ROW_MULTIPLE, block_rows

    arrays = [Shape(DType.F32, (1 << 24,))] * 3
    rows = block_rows(1 << 17, arrays, 2)
    assert rows % ROW_MULTIPLE == 0 and rows >= 1024
    assert 2 * 3 * rows * LANES * 4 + 2 * rows * LANES * 4 <= BLOCK_VMEM_BYTES
    long_body = block_rows(1 << 17, arrays, 200)
    assert ROW_MULTIPLE <= long_body < rows and long_body % ROW_MULTIPLE == 0
    assert block_rows(40, arrays, 2) == 40
    # Blocks divide the rows where a divisor within half the budget exists: no partial block.
    threefry = [Shape(DType.U32, (1 << 20,))] * 6
    divided = block_rows(8192, threefry, 1)
    assert divided == 2048 and block_rows(8192 + ROW_MULTIPLE, threefry, 1) > divided


def test_whole_array_kernels_are_bounded_by_their_padded_tiles() -> None:
    """A whole-array kernel's values are counted in (8, 128) tiles as the kernel lays them
    out: a 1-d array is one row (an eighth of each register used), a [n, 1] column a lane
    per register; past 128 registers a reduction that is not tiled (its init a parameter:
    reduce_tiled.py takes constant inits only) runs as an XLA operation even where its
    elements are within the whole-array limit."""
    from hlofuse.ir.dtypes import DType
    from hlofuse.ir.shapes import Shape
    from hlofuse.targets.tpu.blocks import WHOLE_MAX_VREGS, vector_registers

    assert vector_registers(Shape(DType.F32, (512, 128))) == 64
    assert vector_registers(Shape(DType.F32, (16384,))) == 128
    assert vector_registers(Shape(DType.F32, (65536,))) == 512
    assert vector_registers(Shape(DType.U32, (65536, 1))) == 8192
    assert vector_registers(Shape(DType.PRED, (3, 9, 130))) == 3 * 2 * 2
    assert vector_registers(Shape(DType.F32, ())) == 1
    module = parse_module("""HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p = f32[65536] parameter(0)
  n = f32[65536] negate(p)
  z = f32[] parameter(1)
  ROOT r = f32[] reduce(n, z), dimensions={0}, to_apply=add
}""", "m")
    fused = run_strategy(module, "xla", debug=False).module
    large = [k for k in plan_kernels(fused, interpret=True)
             if any(s.num_elements == 65536 for s in k.input_shapes)]
    assert large and large[0].mode == "xla-op"
    assert f"kept to {WHOLE_MAX_VREGS} registers" in large[0].reason
    small = run_strategy(parse_module("""HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p = f32[16384] parameter(0)
  n = f32[16384] negate(p)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(n, z), dimensions={0}, to_apply=add
}""", "m"), "xla", debug=False).module
    assert all(k.layout == "whole" for k in plan_kernels(small, interpret=True))
