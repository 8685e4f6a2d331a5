"""The CartPole study's table predicted for a GPU: every step priced kernel by kernel.

What runs comes from hlofuse itself: each step is compiled (for the CPU) and profiled once,
which counts every kernel launch and copy of a rollout and the bytes each moves; the flops of
a kernel are the ops of its fused instructions times their elements, per op at XLA's GPU cost
figures (fusion/xla_gpu/performance_model.py). Each launch is then priced as XLA's GPU
performance model prices one: its launch overhead (1 us, `kKernelLaunchOverhead`), bytes over
the device's memory bandwidth, flops over its FP32 throughput (limited by the blocks the kernel
fills), combined as `compute + memory - 0.95 * min(compute, memory)`. A copy is priced as a launch
moving its bytes. Device figures are XLA's device descriptions (fusion/xla_gpu/devices.py) and,
for the V100, NVIDIA's data sheet; nothing is fitted to the study's figures.

Not modelled: a while loop whose trip count is unknown reads its predicate back each trip
(the study's loops are counted); caches beyond XLA's read model; and the model has no notion
of a kernel that runs on one thread (see the README: the CUDA backend's serial kernels).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hlofuse.fusion.xla_gpu.devices import (
    DEVICES,
    GpuDevice,
    UnknownDeviceError,
    parse_target_config,
)
from hlofuse.fusion.xla_gpu.launch_dimensions import THREADS_PER_BLOCK
from hlofuse.fusion.xla_gpu.performance_model import (
    _PROFILES,
    DEFAULT_FLOPS_PER_ELEMENT,
    KERNEL_LAUNCH_OVERHEAD,
    MEMORY_COMPUTE_PARALLELISM,
)
from hlofuse.ir.hlo import Instruction, Module
from hlofuse.ir.ops import Op, OpKind
from hlofuse.reference.rnglib import THREEFRY_TARGET
from hlofuse.runtime.profile import Profile

# Tesla V100 SXM2 16 GB, from NVIDIA's V100 data sheet and the Volta whitepaper: 80 SMs of 64
# FP32 cores, 1530 MHz boost clock, 900 GB/s HBM2, 6 MB L2, 96 KB shared memory per SM.
_V100 = """\
gpu_device_info {
  cuda_compute_capability {
    major: 7
    minor: 0
  }
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 98304
  threads_per_core_limit: 2048
  core_count: 80
  fpus_per_core: 64
  memory_bandwidth: 900000000000
  l2_cache_size: 6291456
  clock_rate_ghz: 1.53
  device_memory_size: 17179869184
  shared_memory_per_block_optin: 98304
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
device_description_str: "Tesla V100-SXM2-16GB"
"""

PREDICT_DEVICES: dict[str, GpuDevice] = {"v100": parse_target_config("v100", _V100), **DEVICES}

# The study's published GPU figures (speedup over its baseline; docs/cartpole.md).
PUBLISHED = {"fused-rng": "1.87x", "relaxed-concat": "~1.1x", "split-state": "3.41x",
             "unroll10": "3.5x", "all": "up to 10.56x"}
PUBLISHED_HANDWRITTEN = "2.7x XLA's best"
# Threefry-2x32 per element: 20 rounds of add, rotate (two shifts and an or) and xor, and 5
# key injections of two adds each (the operations of the algorithm, counted).
THREEFRY_OPS = 20 * 5 + 5 * 4


def predict_device(name: str) -> GpuDevice:
    found = PREDICT_DEVICES.get(name.strip().lower())
    if found is None:
        raise UnknownDeviceError(f"unknown GPU {name!r}; known: {', '.join(PREDICT_DEVICES)}")
    return found


def _op_flops(inst: Instruction) -> float:
    """Flops of one instruction over its whole result."""
    if inst.op is Op.FUSION:
        return sum(_op_flops(i) for c in inst.calls for i in c.instructions)
    if inst.op is Op.WHILE:  # inside a whole-loop kernel: every trip runs in it
        condition, body = inst.calls
        trips = _trips(inst)
        return (trips * sum(_op_flops(i) for i in body.instructions)
                + (trips + 1) * sum(_op_flops(i) for i in condition.instructions))
    if inst.op is Op.CUSTOM_CALL and inst.attrs.get("custom_call_target") == THREEFRY_TARGET:
        return float(THREEFRY_OPS * inst.operands[0].shape.num_elements)
    leaves = inst.shape.leaves()
    if not leaves:
        return 0.0
    elements = sum(leaf.num_elements for leaf in leaves)
    if inst.op in (Op.REDUCE, Op.REDUCE_WINDOW):
        return float(sum(o.shape.num_elements for o in inst.operands[:len(leaves)]))
    if inst.op is Op.DOT:
        lhs = inst.operands[0].shape
        k = math.prod(lhs.dims[d] for d in inst.ints("lhs_contracting_dims"))
        return 2.0 * elements * k
    if inst.op.definition.kind is not OpKind.ELEMENTWISE:
        return 0.0  # data movement
    per = _PROFILES.get(leaves[0].dtype, {}).get(inst.op, DEFAULT_FLOPS_PER_ELEMENT)
    return float(per) * elements


def _trips(loop: Instruction) -> int:
    from hlofuse.analysis.loop_config import loop_trip_count

    trips = loop_trip_count(loop)
    return 1 if trips is None else trips  # unknown: priced as one trip (the model under-counts)


def _loop_elements(inst: Instruction) -> int:
    """The size of the kernel's loop, which sets its launch: the largest array it computes
    or reduces (a reduction to a scalar still runs one thread per input element block)."""
    if inst.op is Op.FUSION:
        return max((_loop_elements(i) for c in inst.calls for i in c.instructions), default=1)
    if inst.op is Op.WHILE:
        return 1  # its body's arrays count through the fusion holding it
    shapes = [inst.shape, *(o.shape for o in inst.operands)] if inst.op in (
        Op.REDUCE, Op.REDUCE_WINDOW, Op.DOT) else [inst.shape]
    return max((leaf.num_elements for s in shapes for leaf in s.leaves()), default=1)


def kernel_facts(module: Module) -> dict[str, tuple[float, int]]:
    """Per instruction name: (flops per call, elements of its largest output)."""
    out: dict[str, tuple[float, int]] = {}
    for computation in module.computations:
        for inst in computation.instructions:
            out[inst.name] = (_op_flops(inst), _loop_elements(inst))
    return out


def price_call(device: GpuDevice, flops: float, elements: int, moved: float) -> float:
    """One launch's time (s): XLA's launch overhead, compute and memory combined."""
    blocks = max(1, math.ceil(max(elements, 1) / THREADS_PER_BLOCK))
    per_block = min(THREADS_PER_BLOCK, max(elements, 1))
    fpus = min(blocks, device.core_count) * min(per_block, device.fpus_per_core)
    compute = flops / (device.clock_rate_ghz * 1e9 * 2 * fpus)
    memory = moved / device.memory_bandwidth
    return (KERNEL_LAUNCH_OVERHEAD + compute + memory
            - MEMORY_COMPUTE_PARALLELISM * min(compute, memory))


@dataclass(frozen=True)
class Prediction:
    seconds: float  # one rollout
    launches: int  # kernels and copies
    launch_s: float
    memory_bytes: float
    flops: float


def predict_rollout(profile: Profile, module: Module, device: GpuDevice) -> Prediction:
    """A profiled rollout (one run) priced on `device`."""
    facts = kernel_facts(module)
    seconds = launch_s = moved_total = flops_total = 0.0
    launches = 0
    runs = max(profile.runs, 1)
    for row in profile.rows:
        calls = row.calls / runs
        if calls == 0:
            continue
        moved = (row.bytes_read + row.bytes_written) / row.calls
        flops, elements = facts.get(row.name, (0.0, max(int(moved // 8), 1)))
        if row.kind == "copy":
            flops, elements = 0.0, max(int(moved // 8), 1)
        seconds += calls * price_call(device, flops, elements, moved)
        launch_s += calls * KERNEL_LAUNCH_OVERHEAD
        launches += round(calls)
        moved_total += calls * moved
        flops_total += calls * flops
    return Prediction(seconds, launches, launch_s, moved_total, flops_total)


@dataclass(frozen=True)
class PredictedRow:
    step: str
    envs: int
    steps: int
    prediction: Prediction
    speedup: float  # over the baseline step at the same N (1.0 without one)
    published: str


def predict_study(names: list[str], envs: tuple[int, ...], n_steps: int, seed: int,
                  device: GpuDevice) -> list[PredictedRow]:
    """Every step compiled for the CPU, profiled once (what runs, bytes moved), priced."""
    from hlofuse import random
    from hlofuse.studies.cartpole_study import BASELINE, build, known_steps

    steps = known_steps()
    rows: list[PredictedRow] = []
    for n in envs:
        baseline: float | None = None
        for name in names:
            step = steps[name]
            built = build(step, n, n_steps, seed)
            compiled = built.compiled
            profile = compiled.profile(random.key(seed))
            prediction = predict_rollout(profile, compiled.fusion.module, device)
            if name == BASELINE:
                baseline = prediction.seconds
            speedup = baseline / prediction.seconds if baseline else 1.0
            rows.append(PredictedRow(name, n, n_steps, prediction, speedup,
                                     PUBLISHED.get(name, "")))
    return rows


def prediction_table(rows: list[PredictedRow], device: GpuDevice) -> str:
    lines = [f"Predicted on {device.description} ({device.core_count} SMs, "
             f"{device.memory_bandwidth / 1e9:.0f} GB/s, {device.clock_rate_ghz} GHz) by XLA's "
             "GPU performance model: a MODEL, not a measurement.",
             f"{'step':<16} {'N':>7} {'launches':>9} {'us/step':>9} {'launch share':>12} "
             f"{'MB/step':>9} {'speedup':>8} {'study (GPU)':>14}"]
    for r in rows:
        p = r.prediction
        share = p.launch_s / p.seconds if p.seconds else 0.0
        lines.append(f"{r.step:<16} {r.envs:>7} {p.launches:>9} "
                     f"{p.seconds / r.steps * 1e6:>9.2f} {share:>11.0%} "
                     f"{p.memory_bytes / r.steps / 1e6:>9.3f} {r.speedup:>7.2f}x "
                     f"{r.published:>14}")
    lines.append(f"The study's hand-written kernel: {PUBLISHED_HANDWRITTEN}; in this model a "
                 "hand-written kernel is one launch with the state in registers, which is what "
                 "the `max` step's whole-loop kernel is, so its prediction stands for it.")
    return "\n".join(lines)
